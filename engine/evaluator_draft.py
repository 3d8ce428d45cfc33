"""The Evaluator: an evaluate.py written from Evaluation.md for a task folder that has none, used
only once a person approved it.

A scientist brings Problem.md, Requirements.md, Evaluation.md and the data; writing evaluate.py
to Trellis's contract (README, "`evaluate.py`") is a chore that AgenticSciML gives to an agent.
Here the draft is written offline from the metric Evaluation.md names (a template implementing
the known metrics, the task's columns and answer kind filled in) or by a model a person brings.
Either way it is tested in the evaluator's sandbox before a person sees it: the held-out answers
scored against themselves must give the metric's perfect value, and a file with a missing id
must be refused with exit 2. The draft waits beside the task as ``evaluate.draft.py``; approving
it by the hash a person was shown writes ``evaluate.py`` and ``evaluate.approval.json`` (who,
when, how it was written). Nothing runs the task until then.
"""
from __future__ import annotations

import csv
import datetime as _dt
import hashlib
import json
import math
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from string import Template

from .answers import CODE, ask
from .assessment import assessment_for
from .assessment.parameters import PARAMETER, VALUE
from .errors import TaskSpecError
from .evaluator_sandbox import EVALUATE, INPUT_DIR, run_task_code, task_inputs
from .prompt_format import build_messages
from .task import load_task

DRAFT = "evaluate.draft.py"
APPROVAL = "evaluate.approval.json"

# metric -> (perfect value, higher is better, numpy body over ``pred`` and ``true``)
_ROW_METRICS: dict[str, tuple[float, bool, str]] = {
    "rmse": (0.0, False, "float(np.sqrt(np.mean((pred - true) ** 2)))"),
    "mse": (0.0, False, "float(np.mean((pred - true) ** 2))"),
    "mae": (0.0, False, "float(np.mean(np.abs(pred - true)))"),
    "max_error": (0.0, False, "float(np.max(np.abs(pred - true)))"),
    "median_absolute_error": (0.0, False, "float(np.median(np.abs(pred - true)))"),
    "relative_l2": (0.0, False, "float(np.linalg.norm(pred - true) / max(np.linalg.norm(true), 1e-300))"),
    "mape": (0.0, False, "float(np.mean(np.abs(pred - true) / np.maximum(np.abs(true), 1e-300)))"),
    "r2": (1.0, True, "float(1 - np.sum((true - pred) ** 2) / max(np.sum((true - true.mean()) ** 2), 1e-300))"),
}
_LABEL_METRICS: dict[str, tuple[float, bool, str]] = {
    "accuracy": (1.0, True, "float(np.mean(pred == true))"),
    "error_rate": (0.0, False, "float(np.mean(pred != true))"),
    "balanced_accuracy": (1.0, True, "float(np.mean([np.mean(pred[true == c] == c) for c in np.unique(true)]))"),
    "f1_macro": (1.0, True, "float(np.mean([2 * np.sum((pred == c) & (true == c)) / max(np.sum(pred == c) + "
                            "np.sum(true == c), 1) for c in np.unique(true)]))"),
}
_PARAMETER_METRICS: dict[str, tuple[float, bool, str]] = {
    "mean_relative_error": (0.0, False, "float(np.mean(np.abs(pred - true) / np.maximum(np.abs(true), 1e-300)))"),
    "max_relative_error": (0.0, False, "float(np.max(np.abs(pred - true) / np.maximum(np.abs(true), 1e-300)))"),
    "mae": (0.0, False, "float(np.mean(np.abs(pred - true)))"),
    "rmse": (0.0, False, "float(np.sqrt(np.mean((pred - true) ** 2)))"),
}
_ALIASES = {"rel_l2": "relative_l2", "relative_l2_error": "relative_l2", "root_mean_squared_error": "rmse",
            "mean_absolute_error": "mae", "mean_squared_error": "mse", "r_squared": "r2", "r2_score": "r2",
            "acc": "accuracy", "macro_f1": "f1_macro", "f1": "f1_macro", "medae": "median_absolute_error",
            "mean_absolute_percentage_error": "mape", "misclassification_rate": "error_rate",
            "relative_error": "mean_relative_error", "mean_abs_relative_error": "mean_relative_error"}

_TEMPLATE = Template('''"""Score $answer_file for the $task task.

Drafted by Trellis from Evaluation.md (metric `$metric`, $direction is better) and approved by a
person before first use (evaluate.approval.json says who and when).

Usage: python evaluate.py ANSWER.csv [--truth TRUTH.csv]

Prints one JSON line {"metric", "value", "higher_is_better", "n"} and exits 0, or prints the
reason to stderr and exits 2 when the answer (or the truth) is malformed. The truth is read from
$truth_rel next to this file, or from TRUTH.csv when given (same columns); Trellis scores its
in-loop validation folds that way.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
TRUTH_FILE = HERE / $truth_rel_repr
KEY = $key_repr        # the column that names each scored item
VALUE = $value_repr    # the column holding what is scored
METRIC = $metric_repr
HIGHER_IS_BETTER = $higher
LABELS = $labels       # class labels are compared as text, numbers as floats


def fail(message):
    print(f"evaluate.py: {message}", file=sys.stderr)
    sys.exit(2)


def read(path, what):
    if not Path(path).is_file():
        fail(f"{what} file not found: {path}")
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except Exception as exc:  # empty, binary, ragged
        fail(f"could not parse {what} {path} as CSV: {exc}")
    missing = [c for c in (KEY, VALUE) if c not in frame.columns]
    if missing:
        fail(f"{what} {path} lacks column(s) {missing}; expected {[KEY, VALUE]}, got {list(frame.columns)}")
    keys = frame[KEY].str.strip()
    if (keys == "").any():
        fail(f"{what} {path}: an empty {KEY!r}")
    if keys.duplicated().any():
        fail(f"{what} {path}: duplicate {KEY!r} value(s) {sorted(set(keys[keys.duplicated()]))[:5]}")
    return pd.Series(frame[VALUE].str.strip().to_numpy(), index=keys.to_numpy())


def values(series, what):
    if LABELS:
        return series.to_numpy(dtype=str)
    numbers = pd.to_numeric(series, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(numbers)
    if bad.any():
        fail(f"{int(bad.sum())} {what} value(s) in {VALUE!r} are missing, not numbers, NaN or inf "
             f"(e.g. {list(series.index[bad][:5])})")
    return numbers


def score(pred, true):
    return $body


def main(argv):
    parser = argparse.ArgumentParser(prog="evaluate.py", description=f"Score an answer ({METRIC}).")
    parser.add_argument("answer", metavar="ANSWER.csv")
    parser.add_argument("--truth", metavar="TRUTH.csv", help="score against this file instead of the held-out truth")
    args = parser.parse_args(argv[1:])
    truth = read(args.truth or TRUTH_FILE, "truth")
    answer = read(args.answer, "answer")
    missing, extra = sorted(set(truth.index) - set(answer.index)), sorted(set(answer.index) - set(truth.index))
    if missing:
        fail(f"the answer has no row for {len(missing)} {KEY}(s), e.g. {missing[:5]}")
    if extra:
        fail(f"the answer has {len(extra)} {KEY}(s) the truth does not, e.g. {extra[:5]}")
    true = values(truth, "truth")
    pred = values(answer.loc[truth.index], "answer")
    value = score(pred, true)
    if not np.isfinite(value):
        fail(f"the answer scores {value} ({METRIC}): not a finite number")
    print(json.dumps({"metric": METRIC, "value": value, "higher_is_better": HIGHER_IS_BETTER, "n": int(len(true))}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
''')


@dataclass
class Draft:
    """An evaluate.py written for a task, and how its tests went."""
    source: str
    metric: str
    written_by: str                   # "offline template" | the model's name
    tests: list[str] = field(default_factory=list)   # each test, said as passed or failed
    ok: bool = False                  # every test passed

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def describe(self) -> str:
        lines = [f"evaluate.py drafted from Evaluation.md ({self.written_by}), metric {self.metric}, "
                 f"sha256 {self.sha256[:12]}:", *(f"  - {t}" for t in self.tests)]
        return "\n".join(lines)


def canonical(metric: str) -> str:
    key = metric.strip().lower().replace("-", "_").replace(" ", "_")
    return _ALIASES.get(key, key)


def truth_file(folder: Path, columns: tuple[str, str]) -> Path | None:
    """The held-out answer key: the first CSV under heldout/ with both columns."""
    heldout = folder / "heldout"
    for path in sorted(heldout.glob("*.csv")) if heldout.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        with path.open(newline="", encoding="utf-8", errors="replace") as fh:
            header = [c.strip() for c in next(csv.reader(fh), [])]
        if all(c in header for c in columns):
            return path
    return None


def offline_draft(task) -> Draft:
    """evaluate.py from the template, for the metric Evaluation.md names; TaskSpecError when the
    template knows no such metric or the task's columns or answer key cannot be found."""
    assessment = assessment_for(task)
    r = task.resources
    metric = canonical(task.metric.name)
    if assessment.name == "parameters":
        key, value, table, labels = PARAMETER, VALUE, _PARAMETER_METRICS, False
    else:
        if not (r.id_column and r.target):
            raise TaskSpecError("Data_config.json", "the Evaluator needs 'id_column' and 'target' to write evaluate.py")
        labels = assessment.kind().kind == "classification"
        key, value, table = r.id_column, r.target, (_LABEL_METRICS if labels else _ROW_METRICS)
    if metric not in table:
        raise TaskSpecError("Evaluation.md", f"the offline Evaluator has no template for metric '{task.metric.name}' "
                            f"(it writes {', '.join(sorted(table))} for this task); write evaluate.py yourself "
                            "(README, '`evaluate.py`') or draft it with a model (--model)")
    truth = truth_file(task.folder, (key, value))
    if truth is None:
        raise TaskSpecError("heldout/", f"no CSV with the columns '{key}' and '{value}': the held-out answer key "
                            "evaluate.py scores against")
    perfect, higher, body = table[metric]
    if higher != task.metric.higher_is_better:
        raise TaskSpecError("Evaluation.md", f"says {'higher' if task.metric.higher_is_better else 'lower'} is better "
                            f"for '{task.metric.name}', which is {'higher' if higher else 'lower'}-is-better")
    rel = truth.relative_to(task.folder).as_posix()
    source = _TEMPLATE.substitute(
        answer_file=r.predictions_file, task=task.name, metric=metric, direction="higher" if higher else "lower",
        truth_rel=rel, truth_rel_repr=repr(rel), key_repr=repr(key), value_repr=repr(value), metric_repr=repr(metric),
        higher=repr(higher), labels=repr(labels), body=body)
    return Draft(source, metric, "offline template")


def test_draft(task, draft: Draft, timeout_s: float = 120.0) -> Draft:
    """Run the draft in the evaluator's sandbox: the answer key scored against itself must give
    the metric's perfect value; an answer missing its key column must be refused with exit 2."""
    r = task.resources
    key, value = (PARAMETER, VALUE) if task.assessment().name == "parameters" else (r.id_column, r.target)
    truth = truth_file(task.folder, (key, value))
    tests: list[str] = []
    if truth is None:
        draft.tests, draft.ok = ["no held-out answer key to test it on"], False
        return draft
    with tempfile.TemporaryDirectory(prefix="trellis-evaluator-") as tmp:
        broken = Path(tmp) / "broken.csv"
        broken.write_text(f"not_{key},{value}\n1,1\n")
        inputs = {**task_inputs(task, with_answers=True, without=(EVALUATE, DRAFT)), f"{INPUT_DIR}/broken.csv": broken}
        rel = truth.relative_to(task.folder).as_posix()
        own = run_task_code(task, EVALUATE, draft.source, [rel], inputs, timeout_s)
        result = _result(own.stdout) if own.exit_code == 0 else None
        expected = _perfect(draft.metric, task)
        if result is None:
            tests.append(f"FAILED the answer key scored against itself: exit {own.exit_code}, "
                         f"{(own.problem or own.stderr or own.stdout).strip()[-300:]}")
        elif expected is not None and not math.isclose(result, expected, abs_tol=1e-9):
            tests.append(f"FAILED the answer key scored against itself gives {result:.6g}, not the perfect {expected:g}")
        else:
            tests.append(f"passed: the answer key scored against itself gives {result:.6g}")
        refused = run_task_code(task, EVALUATE, draft.source, [f"{INPUT_DIR}/broken.csv"], inputs, timeout_s)
        if refused.exit_code == 2 and refused.stderr.strip():
            tests.append(f"passed: an answer without '{key}' is refused (exit 2: {refused.stderr.strip()[-120:]})")
        else:
            tests.append(f"FAILED an answer without '{key}' gave exit {refused.exit_code}, not 2 with a reason")
    draft.tests, draft.ok = tests, all(t.startswith("passed") for t in tests)
    return draft


def _result(stdout: str) -> float | None:
    lines = [ln for ln in stdout.splitlines() if ln.strip().startswith("{")]
    try:
        value = float(json.loads(lines[-1])["value"])
    except (IndexError, ValueError, KeyError, TypeError):
        return None
    return value if math.isfinite(value) else None


def _perfect(metric: str, task) -> float | None:
    for table in (_ROW_METRICS, _LABEL_METRICS, _PARAMETER_METRICS):
        if metric in table:
            return table[metric][0]
    return None


def save_draft(folder: Path, draft: Draft) -> Path:
    path = Path(folder) / DRAFT
    path.write_text(draft.source, encoding="utf-8")
    (Path(folder) / (DRAFT + ".json")).write_text(json.dumps({**asdict(draft), "sha256": draft.sha256}, indent=1))
    return path


def pending_draft(folder: Path) -> Draft | None:
    """The draft waiting beside a task, with its tests, or None."""
    path, meta = Path(folder) / DRAFT, Path(folder) / (DRAFT + ".json")
    if not path.is_file():
        return None
    source = path.read_text(encoding="utf-8")
    try:
        saved = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = {}
    draft = Draft(source, str(saved.get("metric", "?")), str(saved.get("written_by", "?")),
                  list(saved.get("tests", [])), bool(saved.get("ok")))
    if saved.get("sha256") != draft.sha256:  # edited since it was tested: test it again before approval
        draft.tests, draft.ok = ["not tested since it was last changed"], False
    return draft


def approve(folder: Path, sha256_prefix: str, person: str) -> Path:
    """Make the waiting draft the task's evaluate.py, if it is the one the person was shown (its
    hash starts with ``sha256_prefix``, at least 8 characters) and it passed its tests."""
    folder = Path(folder)
    draft = pending_draft(folder)
    if draft is None:
        raise TaskSpecError(DRAFT, "no draft waits for approval; draft one first")
    if (folder / "evaluate.py").exists():
        raise TaskSpecError("evaluate.py", "already exists; the draft was not used")
    if len(sha256_prefix) < 8 or not draft.sha256.startswith(sha256_prefix.lower()):
        raise TaskSpecError(DRAFT, f"is {draft.sha256[:12]}, not the {sha256_prefix[:12]!r} you approved: read it "
                            "again before you approve it")
    if not draft.ok:
        raise TaskSpecError(DRAFT, "has not passed its tests: " + "; ".join(draft.tests))
    target = folder / "evaluate.py"
    target.write_text(draft.source, encoding="utf-8")
    (folder / APPROVAL).write_text(json.dumps({
        "sha256": draft.sha256, "approved_by": person, "written_by": draft.written_by, "metric": draft.metric,
        "approved_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "tests": draft.tests},
        indent=1))
    (folder / DRAFT).unlink()
    (folder / (DRAFT + ".json")).unlink(missing_ok=True)
    return target


def draft_for(folder: Path, write=None) -> Draft:
    """Draft, test and save an evaluate.py for the task folder (``write(task) -> Draft``: a
    model's writer; default the offline template)."""
    task = load_task(folder, require_evaluator=False)
    if task.evaluator.exists():
        raise TaskSpecError("evaluate.py", "exists already; the Evaluator writes one only for a task without it")
    draft = (write or offline_draft)(task)
    draft = test_draft(task, draft)
    save_draft(task.folder, draft)
    return draft


EVALUATOR_PROCEDURE = (
    "Write the task's evaluate.py: one complete Python script (numpy and pandas allowed) that scores an answer file "
    "against the held-out truth with the metric Evaluation.md names. Contract: `python evaluate.py ANSWER.csv "
    "[--truth TRUTH.csv]`; it reads the truth from TRUTH.csv when given, else from the held-out file named below "
    "(a path relative to the script's own folder); it prints exactly one JSON line {\"metric\": name, \"value\": "
    "number, \"higher_is_better\": bool, \"n\": rows scored} and exits 0; on a malformed answer (a missing column, "
    "missing, extra or duplicate keys, non-numbers, NaN or inf) it prints the reason to stderr and exits 2.")


def model_draft(gateway, model: str, tests_failed: list[str] | None = None):
    """A writer for ``draft_for``: the model behind ``gateway`` writes evaluate.py from
    Evaluation.md (one re-ask when its program cannot be read, engine/answers.py)."""
    def write(task) -> Draft:
        assessment = assessment_for(task)
        r = task.resources
        key, value = (PARAMETER, VALUE) if assessment.name == "parameters" else (r.id_column, r.target)
        truth = truth_file(task.folder, (key, value))
        columns = assessment.truth_columns() if assessment.name != "parameters" else [PARAMETER, VALUE]
        inputs = {"evaluation": (task.folder / "Evaluation.md").read_text(encoding="utf-8"),
                  "answer_file": f"{r.predictions_file}, columns {', '.join(f'{c}:{t}' for c, t in r.prediction_columns.items())}",
                  "truth": f"{truth.relative_to(task.folder).as_posix() if truth else 'heldout/<file>.csv'}, "
                           f"columns {', '.join(columns)} (a fold's TRUTH.csv has the same columns)"}
        if tests_failed:
            inputs["previous_draft_failed"] = "\n".join(tests_failed)
        messages = build_messages("evaluator", EVALUATOR_PROCEDURE, CODE.instruction, task.description(), inputs)
        answer = ask(gateway, "evaluator", "evaluator", messages, CODE, temperature=0.0, purpose="evaluator")
        if answer.value is None:
            raise TaskSpecError("evaluate.py", f"the model's draft could not be used: {answer.problem}")
        return Draft(answer.value.code, canonical(task.metric.name), f"written by {model}")

    return write
