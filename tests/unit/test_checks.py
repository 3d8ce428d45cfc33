"""Plausibility checks (engine/plausibility.py) on hand-built task folders and prediction files:
what the verifier establishes about the numbers a program would ship."""
import json

import numpy as np
import pandas as pd
import pytest

from engine.plausibility import (Measured, Reference, beats_trivial, canonical_metric, claims_match, finite,
                                 plausibility_checks, reported_validation, within_range)
from engine.task import load_task


def make_task(folder, train: pd.DataFrame, test: pd.DataFrame, *, target="y", metric="r2",
              direction="higher is better", columns=None, **config):
    """A complete task folder around two tables (evaluate.py is never run here)."""
    (folder / "data").mkdir(parents=True)
    train.to_csv(folder / "data" / "train.csv", index=False)
    test.to_csv(folder / "data" / "test_features.csv", index=False)
    (folder / "Problem.md").write_text("# A law\n\n## Goal\nPredict y.\n")
    (folder / "Requirements.md").write_text("- write predictions.csv\n")
    (folder / "Evaluation.md").write_text(f"# Evaluation\n\n## Metric\nname: {metric}\ndirection: {direction}\n")
    (folder / "evaluate.py").write_text("print('{}')\n")
    cfg = {"files": {"train": "data/train.csv", "test_features": "data/test_features.csv"},
           "target": target, "id_column": "id",
           "predictions": {"file": "predictions.csv", "columns": columns or {"id": "int", target: "float"}},
           **config}
    (folder / "Data_config.json").write_text(json.dumps(cfg))
    return load_task(folder)


def csv_bytes(ids, values, target="y") -> bytes:
    return pd.DataFrame({"id": ids, target: values}).to_csv(index=False).encode()


@pytest.fixture
def law(tmp_path):
    """y = 3 + 2x² + noise measured on x in [0, 1]; scored on x in [1, 1.5] (extrapolation)."""
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 200)
    train = pd.DataFrame({"id": range(200), "x": x, "y": 3 + 2 * x ** 2 + rng.normal(0, 0.05, 200)})
    x_test = np.linspace(1.0, 1.5, 50)
    test = pd.DataFrame({"id": range(50), "x": x_test})
    return make_task(tmp_path / "law", train, test), x_test


def by_name(checks):
    return {c.name: c for c in checks}


# --- finite ------------------------------------------------------------------------------

def test_nan_and_inf_predictions_are_not_finite():
    check = finite(["1.5", "nan", "inf", "2.0", "-inf"], "regression", column="y")
    assert not check.passed
    assert "3 of 5" in check.detail and "'nan'" in check.detail
    assert finite(["1.5", "2", "-3e4"], "regression").passed


def test_a_classifier_must_predict_a_class_seen_in_training():
    assert finite(["0", "1", "1.0", "0"], "classification", classes=[0, 1]).passed  # 1.0 is class 1
    check = finite(["0", "0.73", "1", "2"], "classification", classes=[0, 1], column="label")
    assert not check.passed
    assert "'0.73'" in check.detail and "'2'" in check.detail and "2 of 4" in check.detail
    assert finite(["cat", "dog"], "classification", classes=["cat", "dog"]).passed
    assert not finite(["cat", "cow"], "classification", classes=["cat", "dog"]).passed


# --- within_range ------------------------------------------------------------------------

def test_values_4000_times_too_large_fall_outside_the_training_range(law):
    task, x_test = law
    truth = 3 + 2 * x_test ** 2
    checks = by_name(plausibility_checks(task, csv_bytes(range(50), truth * 4000), ""))
    assert not checks["within_range"].passed
    assert "above" in checks["within_range"].detail
    assert checks["finite"].passed


def test_a_correct_extrapolation_passes_and_100x_off_does_not(law):
    task, x_test = law
    truth = 3 + 2 * x_test ** 2  # up to 7.5, beyond the training targets (about 3 to 5)
    assert by_name(plausibility_checks(task, csv_bytes(range(50), truth, ), ""))["within_range"].passed
    assert not by_name(plausibility_checks(task, csv_bytes(range(50), truth * 100), ""))["within_range"].passed
    assert not by_name(plausibility_checks(task, csv_bytes(range(50), -truth * 100), ""))["within_range"].passed


def test_a_negative_value_under_a_declared_minimum_of_zero_fails():
    target = pd.Series([0.5, 1.0, 2.0, 4.0])
    preds = pd.DataFrame({"id": ["0", "1", "2"], "y": ["0.3", "-0.01", "1.2"]})
    check = within_range(preds, "y", target, low=0.0)
    assert not check.passed and "below 0" in check.detail
    # the same value is inside the training range's margin: only the declared bound catches it
    assert within_range(preds, "y", target).passed


def test_a_curve_declared_increasing_must_not_turn_back():
    test = pd.DataFrame({"id": [str(i) for i in range(6)], "length": [5, 1, 3, 2, 4, 6]})
    rising = pd.DataFrame({"id": test["id"], "y": [str(v) for v in [5.0, 1.0, 3.0, 2.0, 4.0, 6.0]]})
    target = pd.Series([1.0, 6.0])
    assert within_range(rising, "y", target, monotone={"length": "increasing"}, test=test, id_column="id").passed
    humped = rising.assign(y=[str(v) for v in [2.0, 1.0, 3.0, 2.0, 4.0, 1.5]])  # rises to 4 at length 4, falls after
    check = within_range(humped, "y", target, monotone={"length": "increasing"}, test=test, id_column="id")
    assert not check.passed
    assert "not increasing in 'length'" in check.detail and "length=4" in check.detail
    # and the same curve read as decreasing fails too
    assert not within_range(rising, "y", target, monotone={"length": "decreasing"}, test=test, id_column="id").passed


def test_a_curve_that_turns_back_in_small_steps_is_seen():
    x = np.linspace(0, 2, 101)
    y = np.where(x < 1, x, 2 - x)  # rises to 1, then falls back to 0 in steps of 2% of its span
    test = pd.DataFrame({"id": [str(i) for i in range(101)], "x": x})
    preds = pd.DataFrame({"id": test["id"], "y": [str(float(v)) for v in y]})
    check = within_range(preds, "y", pd.Series([0.0, 1.0]), monotone={"x": "increasing"}, test=test, id_column="id")
    assert not check.passed and "from 1 at x=1 to 0 at x=2" in check.detail
    wiggle = x + 0.005 * np.sin(40 * x)  # rising, with a wiggle of 0.25% of the span
    preds = preds.assign(y=[str(float(v)) for v in wiggle])
    assert within_range(preds, "y", pd.Series([0.0, 2.0]), monotone={"x": "increasing"}, test=test,
                        id_column="id").passed


def test_monotone_is_judged_with_the_other_inputs_held_fixed():
    # y rises with x within each temperature; across temperatures it is lower: still monotone in x
    test = pd.DataFrame({"id": [str(i) for i in range(6)], "x": [1, 2, 3, 1, 2, 3], "t": [0, 0, 0, 1, 1, 1]})
    preds = pd.DataFrame({"id": test["id"], "y": ["10", "11", "12", "1", "2", "3"]})
    check = within_range(preds, "y", pd.Series([1.0, 12.0]), monotone={"x": "increasing"}, test=test,
                         id_column="id")
    assert check.passed, check.detail


def test_declared_constraints_are_read_from_data_config(tmp_path):
    train = pd.DataFrame({"id": range(20), "length": np.linspace(1, 2, 20), "y": np.linspace(2, 3, 20)})
    test = pd.DataFrame({"id": range(5), "length": np.linspace(1, 2, 5)})
    task = make_task(tmp_path / "t", train, test, constraints={"min": 0, "monotone": {"length": "increasing"}})
    bad = by_name(plausibility_checks(task, csv_bytes(range(5), [2.0, 2.5, -0.5, 2.8, 3.0]), ""))["within_range"]
    assert not bad.passed
    assert "below 0" in bad.detail and "not increasing in 'length'" in bad.detail


# --- beats_trivial: Trellis's own folds, never a printed score ----------------------------

def validated(value, baselines, *, higher=True, metric="r2"):
    """engine/validation.py's result: the program's mean over 5 folds and each trivial
    baseline's mean over the same folds."""
    return {"ok": True, "metric": metric, "value": value, "higher_is_better": higher, "splits": 5,
            "split_values": [value] * 5, "baselines": baselines}


def test_what_a_program_prints_is_no_score_for_beats_trivial(law):
    task, x_test = law
    for printed in ("validation_r2: -968.123\n", "validation_r2: 0.99\n"):
        checks = by_name(plausibility_checks(task, csv_bytes(range(50), 3 + 2 * x_test ** 2), printed))
        assert "beats_trivial" not in checks and checks["finite"].passed


def test_worse_than_the_best_baseline_on_the_same_folds_fails_and_names_it():
    baselines = {"constant": -0.02, "nearest_neighbour": 0.55}
    check = beats_trivial(validated(0.31, baselines), "r2", True)
    assert not check.passed and "worse than the nearest neighbour" in check.detail
    assert "0.31" in check.detail and "same folds" in check.detail
    assert beats_trivial(validated(0.6, baselines), "r2", True).passed


def test_lower_is_better_metrics_compare_the_other_way():
    baselines = {"constant": 1.0, "nearest_neighbour": 0.8}
    assert not beats_trivial(validated(0.9, baselines, higher=False, metric="rmse"), "rmse", False).passed
    assert beats_trivial(validated(0.5, baselines, higher=False, metric="rmse"), "rmse", False).passed


def test_a_program_that_is_the_baseline_ties_it_up_to_rounding_and_passes():
    # the baselines' means are kept to 6 decimals; the program's is not
    check = beats_trivial(validated(0.12345671, {"constant": 0.123457}), "r2", True)
    assert check.passed, check.detail


def test_without_a_validation_score_or_baselines_there_is_nothing_to_compare():
    assert beats_trivial(None, "r2", True).passed
    failed = beats_trivial({"ok": False, "error": "fold 2 crashed"}, "r2", True)
    assert failed.passed and "fold 2 crashed" in failed.detail
    assert beats_trivial(validated(0.3, {}), "r2", True).passed


def test_the_program_s_own_validation_line_is_read_in_the_usual_spellings():
    assert reported_validation("validation_rel_l2: 0.110000\n", "relative_l2").value == pytest.approx(0.11)
    assert reported_validation("Validation R2 = 0.5\n", "r2").value == 0.5
    assert reported_validation('{"validation": {"accuracy": 0.875}}\n', "accuracy").value == 0.875
    assert reported_validation('{"metric": "mae", "value": 1.5, "split": "validation"}', "mae").value == 1.5
    assert reported_validation("train_r2: 0.99\n", "r2") is None  # a training score is not a validation score
    assert canonical_metric("mean_absolute_error") == ("mae", "")


# --- claims_match ------------------------------------------------------------------------

def test_a_report_claiming_0_95_when_0_41_was_measured_fails():
    measured = [Measured("r2", 0.41, "evaluate.py"), Measured("r2", 0.4123, "the program printed")]
    check = claims_match("# Final report\n\nThe model reaches R² = 0.95 on held-out data.", measured)
    assert not check.passed
    assert "0.95" in check.detail and "0.41" in check.detail


def test_a_claim_equal_to_a_measurement_up_to_its_rounding_passes():
    measured = [Measured("relative_l2", 0.0055279, "evaluate.py")]
    assert claims_match("validation_rel_l2 = 0.0055", measured).passed
    assert claims_match("relative L2 error: 5.53e-03", measured).passed  # prose spelling, scientific notation
    assert claims_match("the loss: 5.53e-03", measured) is None  # not a metric name: no claim
    assert claims_match("relative_l2 = 0.0055279", measured).passed
    assert not claims_match("relative_l2 = 0.0050", measured).passed
    assert claims_match("accuracy = 91%", [Measured("accuracy", 0.9132, "evaluate.py")]).passed


def test_claims_without_a_measurement_to_compare_are_not_judged():
    assert claims_match("We expect r2 = 0.95.", [Measured("rmse", 0.3, "evaluate.py")]) is None
    assert claims_match("No scores here.", [Measured("r2", 0.3, "evaluate.py")]) is None


def test_a_printed_score_repeated_in_the_report_must_agree_with_what_trellis_measured():
    printed = [Measured("r2", 0.95, "the program printed: validation_r2 = 0.95")]
    trellis = Reference.from_validation({"ok": True, "metric": "r2", "value": 0.41, "split_values": [0.36, 0.41, 0.46],
                                         "scorer": "evaluate.py", "validation": {"split": "holdout_range"}}, "r2")
    report = "The model reaches validation R² = 0.95."
    assert claims_match(report, printed).passed  # the printed number alone vouches for it
    check = claims_match(report, printed, reference=trellis)
    assert not check.passed
    assert "0.95" in check.detail and "Trellis measured r2 = 0.41" in check.detail and "holdout_range" in check.detail
    # Trellis's own number, or a printed one within its fold noise, is a fair statement.
    assert claims_match("validation R² = 0.41", [], reference=trellis).passed
    assert claims_match("R² = 0.44", [Measured("r2", 0.4432, "the program printed")], reference=trellis).passed
    # ... but a number nobody measured is not, however close.
    assert not claims_match("R² = 0.44", [], reference=trellis).passed
    # A training score is a claim about the fit, checked against what the program printed.
    assert claims_match("train R² = 0.99", [Measured("r2", 0.99, "the program printed: train_r2")],
                        reference=trellis).passed


def test_trellis_measurement_only_from_a_validation_that_scored():
    assert Reference.from_validation({"ok": False, "error": "fold 2 crashed"}, "r2") is None
    assert Reference.from_validation({"ok": True, "value": float("nan")}, "r2") is None
    assert claims_match("rmse = 3.1", [], reference=Reference.from_validation({"ok": True, "value": 3.1}, "rmse")).passed


def test_a_classification_task_is_recognised_and_float_scores_are_not_classes(tmp_path):
    rng = np.random.default_rng(2)
    x = rng.normal(size=100)
    train = pd.DataFrame({"id": range(100), "x": x, "label": (x > 0.8).astype(int)})  # about 80% zeros
    test = pd.DataFrame({"id": range(10), "x": np.linspace(-1, 1, 10)})
    task = make_task(tmp_path / "c", train, test, target="label", metric="accuracy",
                     columns={"id": "int", "label": "float"})  # a loosened contract does not make it regression
    floats = by_name(plausibility_checks(task, csv_bytes(range(10), np.linspace(0, 1, 10), "label"),
                                         "validation_accuracy: 0.97\n"))
    assert not floats["finite"].passed and "not a class" in floats["finite"].detail
    assert "within_range" not in floats  # bounds are for numbers; classes are checked by finite
    labels = by_name(plausibility_checks(task, csv_bytes(range(10), [0] * 8 + [1] * 2, "label"),
                                         "validation_accuracy: 0.52\n"))
    assert labels["finite"].passed


def test_an_honest_single_hold_out_of_fewer_groups_agrees_with_trellis_folds():
    # Trellis's four group folds (three sites each) against the program's own split of two sites:
    # an honest number a third away from the folds' mean is one more split, not a fabrication.
    trellis = Reference.from_validation({"ok": True, "metric": "rmse", "value": 0.7523,
                                         "split_values": [0.681, 0.72, 0.76, 0.849], "validation": {"split": "group"}},
                                        "rmse")
    printed = [Measured("rmse", 0.528949, "the program printed: validation_rmse = 0.528949")]
    assert claims_match("**Validation.** validation_rmse = 0.528949", printed, reference=trellis).passed
    far = [Measured("rmse", 0.21, "the program printed: validation_rmse = 0.21")]
    assert not claims_match("**Validation.** validation_rmse = 0.21", far, reference=trellis).passed
