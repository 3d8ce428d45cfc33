"""Noise-aware selection (issue 11): a gain counts only beyond the paired noise across folds."""
from engine.search.mimosa import accept_rule
from engine.selection import better, paired_gain, same

PLAN = {"split": "kfold", "folds": 5}


def scored(values, plan=PLAN):
    return {"ok": True, "value": sum(values) / len(values), "split_values": values, "validation": plan}


def test_a_consistent_gain_on_every_fold_counts():
    gain = paired_gain(scored([0.52, 0.61, 0.48, 0.55, 0.50]), scored([0.50, 0.58, 0.46, 0.52, 0.48]), True)
    assert gain.significant and gain.mean > 0


def test_a_gain_smaller_than_the_folds_disagreement_is_noise():
    gain = paired_gain(scored([0.60, 0.40, 0.58, 0.41, 0.56]), scored([0.50, 0.52, 0.47, 0.53, 0.46]), True)
    assert gain.mean > 0 and not gain.significant
    assert "within the paired noise" in gain.describe()


def test_identical_fold_scores_are_a_tie_not_a_gain():
    same = [0.11, 0.12, 0.10, 0.13, 0.12]
    assert not paired_gain(scored(same), scored(list(same)), False).significant


def test_lower_is_better_metrics_gain_by_going_down():
    gain = paired_gain(scored([0.10, 0.11, 0.09, 0.10, 0.12]), scored([0.20, 0.22, 0.19, 0.21, 0.23]), False)
    assert gain.significant and gain.mean > 0


def test_scores_from_different_folds_cannot_be_paired():
    assert paired_gain(scored([0.5] * 5), scored([0.4] * 3), True) is None
    assert paired_gain(scored([0.5] * 3, {"split": "holdout_range"}), scored([0.4] * 3), True) is None
    assert paired_gain({"ok": False, "error": "crashed"}, scored([0.4] * 5), True) is None


def test_mimosa_rejects_a_better_judge_score_when_validation_did_not_really_improve():
    noise = paired_gain(scored([0.60, 0.40, 0.58, 0.41, 0.56]), scored([0.50, 0.52, 0.47, 0.53, 0.46]), True)
    accepted, why = accept_rule(0.8, 0.7, noise)
    assert not accepted and "J improved but" in why and "noise" in why
    real = paired_gain(scored([0.52, 0.61, 0.48, 0.55, 0.50]), scored([0.50, 0.58, 0.46, 0.52, 0.48]), True)
    assert accept_rule(0.8, 0.7, real)[0]
    assert accept_rule(0.8, 0.7, None) == (True, "J improved")
    assert accept_rule(0.6, 0.7, real) == (False, "J did not improve")


def test_a_loss_far_beyond_the_noise_is_said_to_be_worse_never_within_the_noise():
    """Issue 27 item 5e: a candidate 12x the paired noise worse read 'within the paired noise'."""
    loss = paired_gain(scored([0.30, 0.41, 0.28, 0.35, 0.30]), scored([0.52, 0.61, 0.50, 0.55, 0.50]), True)
    assert not loss.significant and loss.worse and -loss.mean > 10 * loss.noise
    said = loss.describe()
    assert "within" not in said and "worse beyond the paired noise" in said
    accepted, why = accept_rule(0.8, 0.7, loss)
    assert not accepted and "worse" in why and "noise, not an improvement" not in why
    # a small difference either way is still noise
    assert not paired_gain(scored([0.60, 0.40, 0.58, 0.41, 0.56]), scored([0.50, 0.52, 0.47, 0.53, 0.46]), True).worse


def test_fold_scores_that_differ_by_float_noise_are_neither_gain_nor_loss():
    base = [0.11, 0.12, 0.10, 0.13, 0.12]
    nudged = [v + 1.1e-16 for v in base]
    for a, b in ((nudged, base), (base, nudged)):
        gain = paired_gain(scored(a), scored(b), True)
        assert not gain.significant and not gain.worse
    assert same(0.3, 0.3 + 1e-16) and not better(1.1e-16, 0.0, True, scale=0.3)
    assert better(1e-4, 0.0, True, scale=0.3) and better(0.1, 0.2, False)
