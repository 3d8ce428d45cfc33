"""Hindsight after the final commitment (engine/hindsight.py): every probed candidate scored
officially, and whether J and validation rank candidates the way the official metric does."""
import json

import pytest

from engine.evaluation import evaluate_many, evaluate_predictions
from engine.hindsight import Candidate, probed_candidates, rank_correlations
from engine.task import load_task


def _c(label, J, validation, official):
    return Candidate(label, J, validation, {"ok": True, "value": official} if official is not None else {"ok": False})


def test_an_error_metric_is_oriented_so_that_agreement_is_positive():
    # lower is better: validation and official agree on the order, J (higher is better) too
    cands = [_c("a", 0.9, 0.1, 0.2), _c("b", 0.7, 0.3, 0.5), _c("c", 0.5, 0.6, 0.9), _c("d", 0.4, 0.8, 1.5)]
    rho = {(c.a, c.b): c.rho for c in rank_correlations(cands, higher_is_better=False)}
    assert rho == {("J", "validation"): 1.0, ("J", "official"): 1.0, ("validation", "official"): 1.0}


def test_a_proxy_that_prefers_the_officially_worse_candidates_correlates_negatively():
    cands = [_c("a", 0.2, 0.95, 0.60), _c("b", 0.4, 0.90, 0.70), _c("c", 0.6, 0.85, 0.80), _c("d", 0.8, 0.80, 0.90)]
    rho = {(c.a, c.b): c.rho for c in rank_correlations(cands, higher_is_better=True)}
    assert rho[("validation", "official")] == -1.0 and rho[("J", "official")] == 1.0


def test_too_few_candidates_no_spread_and_no_judge_say_why():
    few = rank_correlations([_c("a", 0.5, 1.0, 1.0), _c("b", 0.6, 2.0, 2.0)], True)
    assert all(c.rho is None and "needs 3" in c.why for c in few)
    flat = rank_correlations([_c(x, 0.5, 1.0, float(i)) for i, x in enumerate("abcd")], True)
    assert flat[0].rho is None and "no spread" in flat[0].why
    unjudged = rank_correlations([_c(x, None, float(i), float(i)) for i, x in enumerate("abcd")], True)
    assert "does not judge" in unjudged[0].why and unjudged[2].rho == 1.0
    failed = rank_correlations([_c(x, 0.5 + i / 10, float(i), None) for i, x in enumerate("abcd")], True)
    assert failed[2].rho is None and failed[2].n == 0


def test_candidates_are_read_from_the_run_folder_stopped_probes_left_out(tmp_path):
    for name, status, value, j in (("001-initial", "completed", 0.3, 0.7), ("002-iter1", "failed", None, 0.2),
                                   ("003-iter2", "stopped", None, None)):
        d = tmp_path / "probes" / name
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"status": status, "predictions_sha256": "ab" * 32 if value else None,
                                                    "metric": {"ok": value is not None, "value": value}}))
        if j is not None:
            (d / "judgement.json").write_text(json.dumps({"J": j}))
    found = probed_candidates(tmp_path)
    assert [(c.label, c.J, c.validation, c.predictions is not None) for c in found] == [
        ("001-initial", 0.7, 0.3, True), ("002-iter1", 0.2, None, False)]


def test_many_prediction_files_are_scored_in_one_evaluate_py_process_as_one_by_one(examples):
    task = load_task(examples / "discontinuous-1d")
    test_ids = [line.split(",")[0] for line in (task.folder / "data" / "test_features.csv").read_text().splitlines()[1:]]
    files = [("id,y\n" + "".join(f"{i},{k * 0.5}\n" for i in test_ids)).encode() for k in range(3)]
    files.append(b"id,y\n1,2\n")  # refused by evaluate.py: scored as an error, the others unaffected
    batch = evaluate_many(task, files)
    one_by_one = [evaluate_predictions(task, f) for f in files]
    assert [r["ok"] for r in batch] == [True, True, True, False]
    assert [r["value"] for r in batch[:3]] == pytest.approx([r["value"] for r in one_by_one[:3]])
    assert len({r["value"] for r in batch[:3]}) == 3


def test_few_candidates_get_an_exact_permutation_p_value_not_a_t_approximation():
    three = rank_correlations([_c("a", 0.1, 1.0, 1.0), _c("b", 0.2, 2.0, 2.0), _c("c", 0.3, 3.0, 3.0)], True)
    # 3 candidates in perfect order: 2 of the 6 orderings are as extreme, so p = 1/3 (the t approximation says 0)
    assert three[2].rho == 1.0 and three[2].p == pytest.approx(1 / 3, abs=1e-3)
    many = rank_correlations([_c(str(i), i / 20, float(i), float(i)) for i in range(12)], True)
    assert many[2].rho == 1.0 and many[2].p < 1e-3


def test_a_program_probed_again_is_one_candidate_in_the_correlation(tmp_path):
    """Issue 27 item 5d: rho was computed over duplicate programs, each repeat an extra pair that
    agrees with itself. Five probes, three of them the same program (the same validation and
    official score): the correlation is over the three distinct programs."""
    def probe(name, code, value, j):
        d = tmp_path / "probes" / name
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"status": "completed", "final_code": code, "predictions_sha256": None,
                                                    "metric": {"ok": True, "value": value}}))
        (d / "judgement.json").write_text(json.dumps({"J": j}))

    probe("001-initial", "print('a')", 0.3, 0.60)
    probe("002-iter1", "print('a')", 0.3, 0.62)  # a prompt change that left the program as it was
    probe("003-iter2", "print('b')", 0.5, 0.70)
    probe("004-iter3", "print('a')", 0.3, 0.61)
    probe("005-iter4", "print('c')", 0.4, 0.65)
    found = probed_candidates(tmp_path)
    assert len(found) == 5 and len({c.program for c in found}) == 3
    for c in found:
        c.official = {"ok": True, "value": c.validation}
    rho = {(c.a, c.b): c for c in rank_correlations(found, higher_is_better=True)}
    assert all(c.n == 3 for c in rho.values())
    assert rho[("validation", "official")].rho == 1.0


def test_official_scores_apart_by_rounding_alone_are_ties_with_no_p_value():
    """Issue 39: p = 0.022 was printed on official scores that differed by 1e-6. Differences at
    the scores' own rounding order nothing: those candidates tie, and with no spread left there
    is no correlation to report."""
    cands = [_c(x, 0.5 + i / 10, 0.1 + i / 10, 0.734512 + i * 1e-6) for i, x in enumerate("abcdef")]
    by_pair = {(c.a, c.b): c for c in rank_correlations(cands, higher_is_better=True)}
    flat = by_pair[("validation", "official")]
    assert flat.rho is None and flat.p is None and "rounding" in flat.why
    assert by_pair[("J", "validation")].rho == 1.0  # real spread still correlates
    # the same candidates 1e-3 apart are a real order again
    spread = [_c(x, 0.5 + i / 10, 0.1 + i / 10, 0.734512 + i * 1e-3) for i, x in enumerate("abcdef")]
    assert {(c.a, c.b): c for c in rank_correlations(spread, True)}[("validation", "official")].rho == 1.0
