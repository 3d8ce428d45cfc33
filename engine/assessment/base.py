"""What a task delivers and how it is judged: the interface every answer kind implements.

An answer kind (``rows``: one prediction per test row; ``series``: forecasts of several series
in long format; ...) says
- its facts: the task's kind (regression/classification, decided once in kind.py), what the
  program must deliver, in words every role reads;
- in-loop validation: how the training data is cut into folds that ask the question the
  official split asks, which files a fold gives the program and which truth its answer is
  scored against (with every column the metric needs);
- the trivial baselines, on each fold and on the official test;
- the public checks of one delivered answer;
- the official score (evaluate.py on the held-out answer key, after the final commitment).

The runner, the roles, the searches, evolve, the bundle and the studio ask ``task.assessment()``
(``assessment_for``, engine/assessment/__init__.py); adding a kind is one module and one example task.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from .. import baselines, evaluation, validation
from ..checks import Check
from ..plausibility import plausibility_checks
from ..sandbox import ExecutionRequest, ExecutionResult, Executor
from ..task_kind import KindDecision, task_kind

if TYPE_CHECKING:  # a task holds its assessment (engine/task.py): the type only, never the module
    from ..task import Task


class Assessment:
    """The per-row behaviour every kind starts from; a kind overrides what differs."""

    name: ClassVar[str] = "rows"
    title: ClassVar[str] = "one prediction per test row"
    # Data_config.json ``answer`` keys this kind takes -> what each means (README documents them).
    options_help: ClassVar[dict[str, str]] = {}

    def __init__(self, task: Task):
        self.task = task
        self.options: dict = dict(getattr(task.resources.answer, "options", {}) or {})

    # --- Data_config.json ------------------------------------------------------------------------
    @classmethod
    def check_options(cls, options: dict, columns: dict[str, list[str]]) -> list[str]:
        """Problems with this kind's ``answer`` options (``columns``: file role -> its header)."""
        unknown = sorted(set(options) - set(cls.options_help))
        if unknown:
            known = ", ".join(sorted(cls.options_help)) or "none"
            return [f"'answer' key(s) {', '.join(unknown)} are not taken by kind '{cls.name}' (it takes: {known})"]
        return []

    # --- facts -------------------------------------------------------------------------------------
    def kind(self) -> KindDecision:
        return task_kind(self.task)

    def deliverable(self) -> list[str]:
        """Lines of the task description that say what to deliver, beyond the contract line."""
        return []

    @classmethod
    def read_deliverable(cls, resources: str) -> dict:
        """What ``deliverable`` wrote, read back from a task description's Resources section by
        whoever answers the prompt (engine/offline/reading.py): the kind's facts, by the names of
        AnswerFacts there; {} when the lines are not this kind's. Beside its writer, so that the
        format lives in one place."""
        return {}

    # --- in-loop validation ------------------------------------------------------------------------
    def plan(self):
        return validation.row_plan(self.task)

    def folds(self, plan, data, seed: int) -> list[tuple[list[int], list[int]]]:
        return validation.row_folds(self.task, plan, data, seed)

    def truth_columns(self) -> list[str]:
        """The columns of a fold's truth file (evaluate.py --truth): id first, then what the
        metric needs."""
        r = self.task.resources
        return [r.id_column or "id", r.target or "target"]

    def write_fold(self, data, workdir: Path, fit_idx: list[int], val_idx: list[int]):
        return validation.write_rows_fold(self.task, data, workdir, fit_idx, val_idx, self.truth_columns())

    def fold_output(self) -> str:
        """The file a fold's program writes that its validation rows are scored on."""
        return self.task.resources.predictions_file

    def score_folds(self, splits: list, answers: list[Path]) -> list[dict]:
        """Each fold answer scored against its fold's truth (evaluate.py --truth, one process)."""
        return validation.score_folds(self.task, splits, answers)

    def fold_baselines(self, data, fit_idx: list[int], val_idx: list[int]) -> dict[str, bytes]:
        """The trivial baselines fitted on a fold's fit rows, answering its validation rows."""
        return validation.row_fold_baselines(self.task, data, fit_idx, val_idx)

    def validate(self, code: str, executor: Executor, seed: int = 0, plan=None) -> tuple[dict, ExecutionResult]:
        """Run ``code`` on every fold and score each with the task's metric, beside the trivial
        baselines on the same folds (engine/validation.py has the scoring)."""
        plan = plan or self.plan()
        data = validation.read_data(self.task)
        folds = self.folds(plan, data, seed)
        if not folds:
            raise ValueError(f"the training data gives no validation fold for {plan.describe()}")
        last: ExecutionResult | None = None
        with tempfile.TemporaryDirectory(prefix="trellis-val-") as tmp:
            splits, answers = [], []
            for k, (fit_idx, val_idx) in enumerate(folds):
                split = self.write_fold(data, Path(tmp) / f"fold{k}", fit_idx, val_idx)
                last = executor.run(ExecutionRequest(code=code, input_files=split.files,
                                                     limits=self.task.resources.limits))
                produced, problem = validation.read_answer(self.task, last, self.fold_output())
                if problem:
                    return {"ok": False, "error": f"{problem} (validation fold {k + 1} of {len(folds)})",
                            "validation": plan.to_dict()}, last
                path = Path(tmp) / f"fold{k}" / "predictions.csv"
                path.write_bytes(produced)
                splits.append(split)
                answers.append(path)
            trivial: dict[str, list[Path]] = {}
            for k, (fit_idx, val_idx) in enumerate(folds):
                for name, data_ in self.fold_baselines(data, fit_idx, val_idx).items():
                    path = Path(tmp) / f"fold{k}" / f"baseline-{name}.csv"
                    path.write_bytes(data_)
                    trivial.setdefault(name, []).append(path)
            names = sorted(n for n in trivial if len(trivial[n]) == len(folds))
            scores = self.score_folds(splits * (1 + len(names)), answers + [p for n in names for p in trivial[n]])
        assert last is not None
        return validation.summarize_folds(self.task, plan, scores, len(folds), names), last

    def validation_rows(self, seed: int = 0, plan=None) -> list[list[tuple[int, dict[str, str]]]]:
        """For each fold of ``plan`` (default: this kind's), the training rows it validates on as
        (row number in the training file, row), in the order the program's validation file numbers
        them (id k is the k-th): the truth a fold's predictions are compared with, for the plots
        made after a search (engine/bundle/)."""
        plan = plan or self.plan()
        data = validation.read_data(self.task)
        return [[(i, data.rows[i]) for i in val_idx] for _, val_idx in self.folds(plan, data, seed)]

    def split(self, workdir: Path, seed: int = 0, fold: int = 0, plan=None):
        """The files of fold ``fold`` of ``plan`` (default: this kind's), written under ``workdir``."""
        plan = plan or self.plan()
        data = validation.read_data(self.task)
        folds = self.folds(plan, data, seed)
        fit_idx, val_idx = folds[fold % len(folds)]
        return self.write_fold(data, workdir, fit_idx, val_idx)

    # --- baselines ---------------------------------------------------------------------------------
    def trivial_predictions(self) -> dict[str, bytes]:
        """Each trivial baseline's answer to the official test, as contract-following CSV."""
        return baselines.row_trivial_predictions(self.task)

    # --- checks ------------------------------------------------------------------------------------
    def roles(self) -> tuple[str, ...]:
        """File roles beyond train and test_features this kind gives a meaning to (a law file)."""
        return ()

    def required_roles(self) -> tuple[str, ...]:
        """The file roles a task of this kind must have."""
        return ("train", "test_features")

    def check_files(self) -> tuple[list[str], list[str], dict] | None:
        """A kind without a training table checks its own files for preflight: (problems,
        warnings, facts: n_test, features); None: preflight checks the training and test tables."""
        return None

    def stated_problems(self) -> list[str]:
        """What this kind needs the task to state and does not find there (preflight refuses the
        task with these, before a model is called); none for a kind that needs nothing stated."""
        return []

    def answer_columns(self) -> dict[str, str] | None:
        """Columns (name -> type) the predictions contract must give when the kind fixes them;
        None: the id and the target, typed by the task (preflight checks them)."""
        return None

    def trivial_answer(self) -> list[list[str]] | None:
        """A kind with an answer file of its own: the rows of a trivial answer preflight has
        evaluate.py score (officially); None: preflight scores a trivial per-row prediction."""
        return None

    def varying_column(self) -> str | None:
        """The answer file's column whose values must not all be equal (values_vary), or None."""
        return self.task.resources.target

    def checks(self, answer_csv: bytes, stdout: str, data=None) -> list[Check]:
        """The plausibility checks of one delivered answer (engine/plausibility.py)."""
        return plausibility_checks(self.task, answer_csv, stdout, data)

    # --- the official score ------------------------------------------------------------------------
    def score(self, answer: bytes) -> dict:
        """evaluate.py's held-out score of an answer's bytes, as evaluate.py says it."""
        return evaluation.evaluate_predictions(self.task, answer)  # looked up now: tests stand in for it

    def official(self, answer: bytes) -> dict:
        """The official score of an answer (after the final commitment only), labelled as such."""
        return {**self.score(answer), "evaluator": "evaluate.py (official, held out)"}
