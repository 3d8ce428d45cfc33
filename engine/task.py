"""Task specification: a folder with Problem.md, Requirements.md, Evaluation.md,
evaluate.py and an optional Data_config.json, loaded into a typed Task."""
from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from .assessment import ANSWER_KINDS, Assessment, assessment_for
from .errors import TaskSpecError
from .prompt_format import (FEATURE_COLUMNS, ID_COLUMN, IN_LOOP_VALIDATION, KNOWN_CONSTRAINTS, TARGET_COLUMN, TASK_KIND,
                            named, predictions_line, resource_line)
from .sandbox import ExecutionLimits

REQUIRED_FILES = ("Problem.md", "Requirements.md", "Evaluation.md", "evaluate.py")
KINDS = ("regression", "classification")
# split -> the keys it takes, with their defaults (None: required)
SPLITS: dict[str, dict[str, object]] = {
    "kfold": {"folds": 5},
    "holdout_range": {"column": None, "side": "upper", "fraction": 0.2, "folds": 3},
    "group": {"column": None, "folds": 5},
    "time": {"column": None, "folds": 3},
}
MONOTONE = ("increasing", "decreasing")
MAX_FOLDS = 20


@dataclass(frozen=True)
class Metric:
    name: str
    higher_is_better: bool

    def better(self, a: float, b: float) -> bool:
        """Is score ``a`` strictly better than ``b``?"""
        return a > b if self.higher_is_better else a < b


@dataclass(frozen=True)
class ValidationPolicy:
    """How in-loop validation mirrors the official split (Data_config.json ``validation``).

    ``kfold``: seeded random folds. ``holdout_range``: the ``fraction`` of rows at the ``side``
    (upper/lower) end of ``column`` validates (a share of rows, not of the column's span), for
    tasks scored beyond the training range.
    ``group``: whole groups of ``column`` are held out. ``time``: forward chaining along
    ``column``. ``column``, ``side`` and ``fraction`` are None where the split takes none."""

    split: str = "kfold"
    column: str | None = None
    side: str | None = None
    fraction: float | None = None
    folds: int = 5

    def describe(self) -> str:
        if self.split == "holdout_range":
            return (f"holdout_range on `{self.column}`: the {self.fraction:.0%} of rows with the "
                    f"{'highest' if self.side == 'upper' else 'lowest'} `{self.column}` validate, "
                    "as the official test lies beyond the training range")
        if self.split == "kfold":
            return f"kfold, {self.folds} random folds"
        how = "whole groups held out" if self.split == "group" else "forward chaining in time"
        return f"{self.split} on `{self.column}`: {how} ({self.folds} folds)"


@dataclass(frozen=True)
class Constraints:
    """Physical knowledge about the target (Data_config.json ``constraints``): bounds on its
    value and its monotonicity in input columns (column -> "increasing" | "decreasing")."""

    min: float | None = None
    max: float | None = None
    monotone: dict[str, str] = field(default_factory=dict)

    def describe(self, target: str | None = None) -> str:
        name = f"`{target}`" if target else "the target"
        parts = []
        if self.min is not None:
            parts.append(f"{name} >= {self.min:g}")
        if self.max is not None:
            parts.append(f"{name} <= {self.max:g}")
        parts += [f"{name} {direction} in `{col}`" for col, direction in self.monotone.items()]
        return "; ".join(parts)


@dataclass(frozen=True)
class AnswerSpec:
    """What a program delivers (Data_config.json ``answer``): its kind (engine/assessment:
    ``rows``, one prediction per test row, when not declared) and that kind's own options."""

    kind: str = "rows"
    options: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Resources:
    """What the program may read (copied into its sandbox) and what it must write."""

    files: dict[str, str]  # role ("train", "test_features") -> path relative to the task folder
    target: str | None = None
    id_column: str | None = None
    features: tuple[str, ...] = ()
    predictions_file: str = "predictions.csv"
    prediction_columns: dict[str, str] = field(default_factory=dict)  # column -> int/float/str
    limits: ExecutionLimits = field(default_factory=ExecutionLimits)
    kind: str | None = None  # "regression" | "classification"; None: not declared (preflight infers it)
    validation: ValidationPolicy | None = None  # None: not declared (Trellis chooses)
    constraints: Constraints | None = None  # None: none declared
    features_declared: bool = True  # False: `features` was read from the test file's header
    answer: AnswerSpec = field(default_factory=AnswerSpec)

    def prediction_contract(self) -> str:
        cols = ", ".join(f"{c}:{t}" for c, t in self.prediction_columns.items())
        return f"csv[{cols}]" if cols else "csv[any]"


@dataclass(frozen=True)
class Task:
    folder: Path
    title: str
    goal: str
    context: str
    constraints: tuple[str, ...]
    evaluation: str
    metric: Metric
    resources: Resources

    @property
    def name(self) -> str:
        return self.folder.name

    @property
    def evaluator(self) -> Path:
        return self.folder / "evaluate.py"

    def input_files(self) -> dict[str, Path]:
        """Files copied into every sandbox, at their path relative to the task folder."""
        return {rel: self.folder / rel for rel in self.resources.files.values()}

    def description(self) -> str:
        """The text every agent sees: the task x = (goal, context, constraints, resources)."""
        return self._description

    @cached_property
    def _description(self) -> str:
        # every agent's prompt starts with it: built once (the task is frozen)
        r = self.resources
        lines = [f"# Task: {self.title}", "", "## Goal", self.goal, "", "## Context", self.context, "",
                 "## Constraints", *[f"- {c}" for c in self.constraints], "", "## Resources"]
        lines += [resource_line(role, named(path)) for role, path in r.files.items()]
        if r.target:
            lines.append(resource_line(TARGET_COLUMN, named(r.target)))
        if r.features:
            lines.append(resource_line(FEATURE_COLUMNS, named(*r.features)))
        if r.id_column:
            lines.append(resource_line(ID_COLUMN, named(r.id_column)))
        assessment = self.assessment()
        if r.target:
            decided = assessment.kind()
            lines.append(resource_line(TASK_KIND, decided.kind + ("" if r.kind else f" ({decided.reason})")))
        if r.constraints:
            lines.append(resource_line(KNOWN_CONSTRAINTS, r.constraints.describe(r.target)))
        if r.validation:
            lines.append(resource_line(IN_LOOP_VALIDATION, r.validation.describe()))
        lines.append(predictions_line(r.predictions_file, r.prediction_contract()))
        lines += [f"- {line}" for line in assessment.deliverable()]
        lines += ["", "## Evaluation", f"metric `{self.metric.name}`, "
                  f"{'higher' if self.metric.higher_is_better else 'lower'} is better", self.evaluation]
        return "\n".join(lines)

    def assessment(self) -> Assessment:
        """What this task delivers and how it is judged (engine/assessment, by its answer kind)."""
        return assessment_for(self)

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for name in (*REQUIRED_FILES, "Data_config.json"):
            p = self.folder / name
            if p.exists():
                h.update(name.encode() + b"\0" + p.read_bytes() + b"\0")
        return h.hexdigest()


def markdown_sections(text: str) -> dict[str, str]:
    """Split markdown on '## ' headings, keyed by lower-cased heading."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        m = re.match(r"^##\s+(.+?)\s*$", line)
        if m:
            current = m.group(1).strip().lower()
            out.setdefault(current, [])
        else:
            out.setdefault(current, []).append(line)
    return {k: "\n".join(v).strip() for k, v in out.items()}


def _read(folder: Path, name: str) -> str:
    path = folder / name
    if not path.is_file():
        raise TaskSpecError(name, f"missing; a task folder needs {', '.join(REQUIRED_FILES)}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskSpecError(name, f"is not UTF-8 text ({exc})") from exc
    if not text.strip():
        raise TaskSpecError(name, "is empty")
    return text


def _parse_problem(text: str) -> tuple[str, str, str]:
    first = text.lstrip().splitlines()[0]
    if not first.startswith("# "):
        raise TaskSpecError("Problem.md", "must start with a title line '# <title>'")
    title = first[2:].strip()
    sections = markdown_sections(text)
    goal = sections.get("goal", "")
    if not goal:
        raise TaskSpecError("Problem.md", "needs a non-empty '## Goal' section saying what the team must achieve")
    return title, goal, sections.get("context", "")


def _parse_requirements(text: str) -> tuple[str, ...]:
    items = tuple(m.group(1).strip() for m in re.finditer(r"^\s*[-*]\s+(.+)$", text, re.M))
    if not items:
        raise TaskSpecError("Requirements.md", "lists no constraints; write each as a bullet line '- ...'")
    return items


def _parse_evaluation(text: str) -> tuple[Metric, str]:
    section = markdown_sections(text).get("metric")
    if section is None:
        raise TaskSpecError("Evaluation.md", "needs a '## Metric' section with 'name: ...' and 'direction: ...'")
    name = re.search(r"^\s*name:\s*([A-Za-z0-9_\-]+)\s*$", section, re.M)
    direction = re.search(r"^\s*direction:\s*(.+?)\s*$", section, re.M)
    if not name:
        raise TaskSpecError("Evaluation.md", "the '## Metric' section has no 'name: <metric>' line")
    if not direction:
        raise TaskSpecError("Evaluation.md", "the '## Metric' section has no 'direction:' line")
    d = direction.group(1).lower()
    if d not in {"lower is better", "higher is better"}:
        raise TaskSpecError("Evaluation.md", f"direction must be 'lower is better' or 'higher is better', not {d!r}")
    return Metric(name.group(1), d.startswith("higher")), text.strip()


def _parse_data_config(folder: Path) -> Resources:
    path = folder / "Data_config.json"
    if not path.exists():
        return Resources(files={})
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TaskSpecError("Data_config.json", f"is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from exc
    if not isinstance(raw, dict):
        raise TaskSpecError("Data_config.json", "must be a JSON object")
    known = {"files", "target", "id_column", "features", "kind", "validation", "constraints",
             "predictions", "limits", "description", "answer"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise TaskSpecError("Data_config.json", f"unknown key(s) {', '.join(unknown)}; known keys are {', '.join(sorted(known))}")
    files = raw.get("files", {})
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise TaskSpecError("Data_config.json", "'files' must map a role name to a path inside the task folder")
    answer_key = _heldout_inodes(folder)
    for role, rel in files.items():
        p = (folder / rel).resolve()
        if folder.resolve() not in p.parents:
            raise TaskSpecError("Data_config.json", f"files.{role} = {rel!r} points outside the task folder")
        if not p.exists():
            raise TaskSpecError("Data_config.json", f"files.{role} = {rel!r} does not exist")
        problem = _reaches_heldout(folder, p, answer_key)
        if problem:
            raise TaskSpecError("Data_config.json", f"files.{role} = {rel!r} {problem}; held-out evaluation "
                                "data is only for evaluate.py and cannot be given to agents")
        if not p.is_file():
            raise TaskSpecError("Data_config.json", f"files.{role} = {rel!r} is not a file")
    preds = raw.get("predictions", {})
    if not isinstance(preds, dict):
        raise TaskSpecError("Data_config.json", "'predictions' must be an object with 'file' and 'columns'")
    columns = preds.get("columns", {})
    if not isinstance(columns, dict) or any(t not in {"int", "float", "str", "bool"} for t in columns.values()):
        raise TaskSpecError("Data_config.json", "'predictions.columns' must map column names to int, float, str or bool")
    features = raw.get("features")
    if features is not None and (not isinstance(features, list) or not all(isinstance(f, str) for f in features)):
        raise TaskSpecError("Data_config.json", "'features' must be a list of column names")
    target, id_column = raw.get("target"), raw.get("id_column")
    for key, value in (("target", target), ("id_column", id_column)):
        if value is not None and (not isinstance(value, str) or not value):
            raise TaskSpecError("Data_config.json", f"'{key}' must be a column name (a non-empty string)")
    if features is None:
        features = _header_features(folder, files, id_column, target)
    try:
        limits = ExecutionLimits.from_dict(raw.get("limits"))
        above = limits.over_ceilings()
    except (TypeError, ValueError) as exc:
        raise TaskSpecError("Data_config.json", f"'limits': {exc}") from exc
    if above:
        raise TaskSpecError("Data_config.json", f"'limits': {'; '.join(above)}")
    return Resources(
        files=dict(files), target=target, id_column=id_column,
        features=tuple(features), predictions_file=preds.get("file", "predictions.csv"),
        prediction_columns=dict(columns), limits=limits, kind=_parse_kind(raw.get("kind")),
        validation=_parse_validation(raw.get("validation")), constraints=_parse_constraints(raw.get("constraints")),
        features_declared="features" in raw, answer=_parse_answer(folder, raw.get("answer"), files),
    )


def _parse_answer(folder: Path, raw: object, files: dict[str, str]) -> AnswerSpec:
    if raw is None:
        return AnswerSpec()
    if not isinstance(raw, dict) or not isinstance(raw.get("kind"), str):
        raise TaskSpecError("Data_config.json", "'answer' must be an object with a 'kind' "
                            f"({', '.join(ANSWER_KINDS)}) and that kind's options")
    options = {k: v for k, v in raw.items() if k != "kind"}
    kind = ANSWER_KINDS.get(raw["kind"])
    if kind is None:
        raise TaskSpecError("Data_config.json", f"answer.kind {raw['kind']!r} is not one of {', '.join(ANSWER_KINDS)}")
    columns: dict[str, list[str]] = {role: [] for role in files}  # a header for each CSV role
    for role, rel in files.items():
        if str(rel).endswith(".csv"):
            try:
                with (folder / rel).open(encoding="utf-8", newline="") as fh:
                    columns[role] = [c.strip() for c in next(csv.reader(fh), [])]
            except (OSError, UnicodeDecodeError, csv.Error):
                continue
    problems = kind.check_options(options, columns)
    if problems:
        raise TaskSpecError("Data_config.json", "; ".join(problems))
    return AnswerSpec(raw["kind"], options)


def _header_features(folder: Path, files: dict[str, str], id_column: str | None, target: str | None) -> list[str]:
    """The columns agents predict from when ``features`` is omitted: the test file's, minus the
    id (and the target, should the test file carry it). Never a column only the training file
    has: a program fitted on it could not predict the test rows. Reads the header line only."""
    rel = files.get("test_features")
    if rel is None:
        return []
    try:
        with (folder / rel).open(encoding="utf-8", newline="") as fh:
            header = next(csv.reader(fh), [])
    except UnicodeDecodeError as exc:
        raise TaskSpecError(rel, f"is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except csv.Error as exc:
        raise TaskSpecError(rel, f"has an unreadable header line: {exc}") from exc
    return [c.strip() for c in header if c.strip() and c.strip() not in {id_column, target}]


def _parse_kind(kind: object) -> str | None:
    if kind is None or kind in KINDS:
        return kind  # type: ignore[return-value]
    raise TaskSpecError("Data_config.json", f"'kind' must be \"regression\" or \"classification\", not {kind!r}")


def _number(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TaskSpecError("Data_config.json", f"'{key}' must be a finite number, not {value!r}")
    return float(value)


def _parse_validation(raw: object) -> ValidationPolicy | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or "split" not in raw:
        raise TaskSpecError("Data_config.json", "'validation' must be an object with a 'split': "
                            f"{', '.join(SPLITS)}")
    split = raw["split"]
    if split not in SPLITS:
        raise TaskSpecError("Data_config.json", f"'validation.split' must be one of {', '.join(SPLITS)}, not {split!r}")
    takes = SPLITS[split]
    unknown = sorted(set(raw) - {"split", *takes})
    if unknown:
        raise TaskSpecError("Data_config.json", f"'validation' with split {split!r} takes "
                            f"{', '.join(takes)}; unknown key(s) {', '.join(unknown)}")
    values = {k: raw.get(k, default) for k, default in takes.items()}
    if "column" in takes and (not isinstance(values["column"], str) or not values["column"]):
        raise TaskSpecError("Data_config.json", f"'validation.column' must name the column the {split!r} split "
                            "is made on")
    if "side" in takes and values["side"] not in ("upper", "lower"):
        raise TaskSpecError("Data_config.json", f"'validation.side' must be \"upper\" or \"lower\", not {values['side']!r}")
    if "fraction" in takes:
        fraction = _number("validation.fraction", values["fraction"])
        if not 0 < fraction < 1:
            raise TaskSpecError("Data_config.json", f"'validation.fraction' must be between 0 and 1 (exclusive), not {fraction:g}")
        values["fraction"] = fraction
    folds = values["folds"]
    fewest = 2 if split in ("kfold", "group") else 1  # one range hold-out, or one forward step, is a split
    if isinstance(folds, bool) or not isinstance(folds, int) or not fewest <= folds <= MAX_FOLDS:
        raise TaskSpecError("Data_config.json", f"'validation.folds' must be a whole number from {fewest} to "
                            f"{MAX_FOLDS} for split {split!r}, not {folds!r}")
    return ValidationPolicy(split=split, **values)  # type: ignore[arg-type]


def _parse_constraints(raw: object) -> Constraints | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise TaskSpecError("Data_config.json", "'constraints' must be an object with optional 'min', 'max' "
                            "and 'monotone'")
    unknown = sorted(set(raw) - {"min", "max", "monotone"})
    if unknown:
        raise TaskSpecError("Data_config.json", f"'constraints' takes min, max and monotone; unknown key(s) "
                            f"{', '.join(unknown)}")
    low = None if raw.get("min") is None else _number("constraints.min", raw["min"])
    high = None if raw.get("max") is None else _number("constraints.max", raw["max"])
    if low is not None and high is not None and low >= high:
        raise TaskSpecError("Data_config.json", f"'constraints.min' ({low:g}) must be below 'constraints.max' ({high:g})")
    monotone = raw.get("monotone") or {}
    if not isinstance(monotone, dict):
        raise TaskSpecError("Data_config.json", "'constraints.monotone' must map an input column to "
                            "\"increasing\" or \"decreasing\"")
    for col, direction in monotone.items():
        if direction not in MONOTONE:
            raise TaskSpecError("Data_config.json", f"'constraints.monotone.{col}' must be \"increasing\" or "
                                f"\"decreasing\", not {direction!r}")
    if low is None and high is None and not monotone:
        return None
    return Constraints(min=low, max=high, monotone=dict(monotone))


def _heldout_inodes(folder: Path) -> set[tuple[int, int]]:
    """(device, inode) of every file of the answer key, to catch hard links to it."""
    heldout = folder / "heldout"
    if not heldout.is_dir():
        return set()
    return {(st.st_dev, st.st_ino) for p in heldout.rglob("*") if p.is_file() and (st := p.stat())}


def _reaches_heldout(folder: Path, resolved: Path, answer_key: set[tuple[int, int]]) -> str | None:
    """Why a data path (already resolved: '..', './' and symlinks followed) would hand the
    answer key to agents, or None. A folder is checked file by file, since the sandbox
    copies what its links point to."""
    heldout = (folder / "heldout").resolve()
    candidates = [resolved] + (sorted(resolved.rglob("*")) if resolved.is_dir() else [])
    for path in candidates:
        real = path.resolve()
        if real == heldout or heldout in real.parents:
            shown = "" if path == resolved else f" (through {path.relative_to(resolved)})"
            return f"leads into heldout/{shown}"
        if real.is_file():
            st = real.stat()
            if (st.st_dev, st.st_ino) in answer_key:
                return "is a hard link to a held-out file"
    return None


def load_task(folder: str | Path, require_evaluator: bool = True) -> Task:
    """Load and check a task folder; every problem names its file. Without ``require_evaluator``
    a folder with no evaluate.py loads too (the Evaluator drafts one for it)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TaskSpecError(str(folder), "is not a folder; point Trellis at a task folder")
    title, goal, context = _parse_problem(_read(folder, "Problem.md"))
    constraints = _parse_requirements(_read(folder, "Requirements.md"))
    metric, evaluation = _parse_evaluation(_read(folder, "Evaluation.md"))
    if require_evaluator or (folder / "evaluate.py").exists():
        if not (folder / "evaluate.py").exists():
            waiting = (folder / "evaluate.draft.py").exists()
            raise TaskSpecError("evaluate.py", "missing; " + (
                "a draft written from Evaluation.md waits for your approval: read evaluate.draft.py, then "
                f"`python -m engine evaluator {folder} --approve <its sha256>`" if waiting else
                f"`python -m engine evaluator {folder}` drafts one from Evaluation.md for you to approve, or write "
                "it yourself (README, '`evaluate.py`')"))
        _read(folder, "evaluate.py")
    return Task(folder=folder.resolve(), title=title, goal=goal, context=context, constraints=constraints,
                evaluation=evaluation, metric=metric, resources=_parse_data_config(folder))
