"""A stand-in for the sandbox, for tests of search and orchestration logic.

:class:`FakeExecutor` implements the engine's ``Executor`` protocol without running any code.
It lays out a fresh working directory as the sandbox does (input files copied in, the program
saved as its entrypoint) and then "executes" deterministically, in-process:

* a program that writes a ``.csv`` file that is not one of its inputs (a training program)
  gets that file: one row per test-feature id, predicting a least-squares line fitted on the
  training rows plus an offset seeded by a hash of the code. Different programs score
  differently; the same program always scores the same;
* any other program (an exploration script) prints a short markdown data report computed
  from the input CSVs: rows, columns, a summary of the target;
* code that does not parse fails as Python would, with a ``SyntaxError`` traceback.

A test makes a run fail by scripting it: ``script`` maps a substring of the code to an
:class:`Outcome`, or is a callable ``code -> Outcome | None`` (None: execute as usual).
"""
from __future__ import annotations

import ast
import csv
import hashlib
import io
import itertools
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Callable, Mapping, Union

from engine.sandbox import ExecutionRequest, ExecutionResult, ExecutionStatus
from engine import python_ast

# Exit codes the subprocess sandbox reports for each way a program can end.
_EXIT_CODES: dict[str, int | None] = {"ok": 0, "error": 1, "timeout": -9, "memory": -9, "violation": 1,
                                      "killed": -9}


@dataclass(frozen=True)
class Outcome:
    """A forced result for a scripted run: its status and what it printed."""

    status: ExecutionStatus
    stderr: str = ""
    stdout: str = ""
    exit_code: int | None = None  # None: what the sandbox reports for ``status``
    violations: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()  # (name, text) the program leaves in its workdir


Script = Union[Mapping[str, Outcome], Callable[[str], "Outcome | None"], None]


def traceback_of(exc_line: str, line: int = 1) -> str:
    """A stderr that reads like a crashed program's (what the debugger and checks parse)."""
    return f'Traceback (most recent call last):\n  File "main.py", line {line}, in <module>\n{exc_line}\n'


def fail_first(match: str, outcome: Outcome, times: int = 1) -> Callable[[str], Outcome | None]:
    """A script that forces ``outcome`` on the first ``times`` runs whose code contains ``match``."""
    left = [times]

    def script(code: str) -> Outcome | None:
        if match in code and left[0] > 0:
            left[0] -= 1
            return outcome
        return None

    return script


class FakeExecutor:
    """Runs nothing; see the module docstring. ``requests`` records every request, in order."""

    name = "fake"

    def __init__(self, root: str | Path | None = None, script: Script = None, scale: float = 0.5) -> None:
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="trellis-fake-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.script = script
        self.scale = scale  # the largest code-seeded offset, in standard deviations of the target
        self.requests: list[ExecutionRequest] = []
        self._count = itertools.count(1)

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        self.requests.append(request)
        workdir = Path(tempfile.mkdtemp(prefix=f"run-{next(self._count):05d}-", dir=self.root))
        for rel, source in request.input_files.items():
            path = PurePosixPath(str(rel))
            if path.is_absolute() or ".." in path.parts:
                raise ValueError(f"input file {rel!r} must be relative and stay inside the workdir")
            (workdir / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, workdir / path)
        (workdir / request.entrypoint).write_text(request.code, encoding="utf-8")

        forced = self._scripted(request.code)
        if forced is not None:
            written = {}
            for name, text in forced.files:
                (workdir / name).parent.mkdir(parents=True, exist_ok=True)
                (workdir / name).write_text(text)
                written[name] = hashlib.sha256(text.encode()).hexdigest()
            return self._result(workdir, forced.status, forced.stdout, forced.stderr, written,
                                forced.exit_code, list(forced.violations))
        try:
            tree = python_ast.parse(request.code)
        except SyntaxError as exc:
            return self._result(workdir, "error", "", traceback_of(f"SyntaxError: {exc.msg}", exc.lineno or 1), {})
        inputs = {str(rel) for rel in request.input_files}
        tables = {rel: _read_csv(workdir / rel) for rel in sorted(inputs) if rel.endswith(".csv")}
        output = _output_name(tree, inputs)
        if output is None:
            return self._result(workdir, "ok", _data_report(tables), "", {})
        train, test = _train_and_test(tables)
        if train is None or test is None:
            return self._result(workdir, "error", "", traceback_of(
                "FileNotFoundError: [Errno 2] No such file or directory: 'train.csv'"), {})
        text, summary = self._predictions(request.code, train, test)
        (workdir / output).parent.mkdir(parents=True, exist_ok=True)
        (workdir / output).write_text(text)
        return self._result(workdir, "ok", summary + f"wrote predictions to {output}\n", "",
                            {output: hashlib.sha256(text.encode()).hexdigest()})

    def _scripted(self, code: str) -> Outcome | None:
        if self.script is None:
            return None
        if callable(self.script):
            return self.script(code)
        return next((outcome for match, outcome in self.script.items() if match in code), None)

    def _result(self, workdir: Path, status: ExecutionStatus, stdout: str, stderr: str, files: dict[str, str],
                exit_code: int | None = None, violations: list[str] | None = None) -> ExecutionResult:
        return ExecutionResult(status=status, exit_code=exit_code if exit_code is not None else _EXIT_CODES[status],
                               stdout=stdout, stderr=stderr, duration_s=0.01, workdir=workdir, files=files,
                               violations=violations or [], executor=self.name)

    def _predictions(self, code: str, train: "_Table", test: "_Table") -> tuple[str, str]:
        target = next(c for c in train.columns if c not in test.columns)
        id_column = next(c for c in test.columns if c not in train.columns)
        features = [c for c in test.columns if c in train.columns]
        y = [float(v) for v in train.column(target)]
        mean, spread = statistics.fmean(y), statistics.pstdev(y) or 1.0
        # One numeric feature, the one most correlated with the target: a line through it.
        slope, intercept, feature = 0.0, mean, None
        best = 0.0
        for f in features:
            x = _floats(train.column(f))
            if x is None or len(set(x)) < 2:
                continue
            r = abs(statistics.correlation(x, y))
            if r > best:
                best, feature = r, f
        if feature is not None:
            slope, intercept = statistics.linear_regression(_floats(train.column(feature)), y)
        seed = int.from_bytes(hashlib.sha256(code.encode()).digest()[:8], "big")
        offset = self.scale * spread * (2 * (seed / 2 ** 64) - 1)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([id_column, target])
        for row in test.rows:
            x = float(row[feature]) if feature is not None else 0.0
            writer.writerow([row[id_column], repr(intercept + slope * x + offset)])
        summary = (f"train_rows: {len(train.rows)}  features: {len(features)}  test_rows: {len(test.rows)}\n"
                   f"fake_offset: {offset:.6f}\n")
        return out.getvalue(), summary


class OffTarget(FakeExecutor):
    """The fake executor with every prediction moved ``shift`` standard deviations of the training
    target off (two are worse than the training mean on any fold, yet within the range a
    plausibility check allows), and ``prints`` added to what each program prints (a score it
    claims for itself)."""

    def __init__(self, root: str | Path | None = None, *, shift: float = 0.0, prints: str = "", **kw) -> None:
        super().__init__(root, **kw)
        self.shift, self.prints = shift, prints

    def _predictions(self, code: str, train: "_Table", test: "_Table") -> tuple[str, str]:
        text, summary = super()._predictions(code, train, test)
        target = next(c for c in train.columns if c not in test.columns)
        move = self.shift * (statistics.pstdev([float(v) for v in train.column(target)]) or 1.0)
        header, *rows = text.splitlines()
        moved = [f"{i},{float(v) + move!r}" for i, v in (row.split(",") for row in rows)]
        return "\n".join([header, *moved]) + "\n", summary + self.prints


@dataclass
class _Table:
    columns: list[str]
    rows: list[dict[str, str]]

    def column(self, name: str) -> list[str]:
        return [row[name] for row in self.rows]


def _read_csv(path: Path) -> _Table:
    reader = csv.DictReader(io.StringIO(path.read_text()))
    rows = list(reader)
    return _Table(list(reader.fieldnames or []), rows)


def _floats(values: list[str]) -> list[float] | None:
    try:
        return [float(v) for v in values]
    except ValueError:
        return None


def _train_and_test(tables: dict[str, _Table]) -> tuple[_Table | None, _Table | None]:
    """(training table, test features): the test features share every column of the training
    table but its target, and add the id column. Which is which: by name (``train``), else the
    table whose extra column is a unique id."""
    for (name_a, a), (name_b, b) in itertools.permutations(tables.items(), 2):
        extra_a, extra_b = set(a.columns) - set(b.columns), set(b.columns) - set(a.columns)
        if len(extra_a) != 1 or len(extra_b) != 1 or not set(a.columns) & set(b.columns):
            continue
        if "train" in PurePosixPath(name_a).name or "train" in PurePosixPath(name_b).name:
            if "train" in PurePosixPath(name_a).name:
                return a, b
            continue
        (id_column,) = extra_b
        if len(set(b.column(id_column))) == len(b.rows):
            return a, b
    return None, None


def _output_name(tree: ast.AST, inputs: set[str]) -> str | None:
    """The .csv file the program writes: a string constant that names no input file."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".csv"):
            name = node.value
            path = PurePosixPath(name)
            if name not in inputs and not path.is_absolute() and ".." not in path.parts and "\n" not in name:
                return name
    return None


def _data_report(tables: dict[str, _Table]) -> str:
    train, test = _train_and_test(tables)
    lines = ["# Exploratory data analysis", ""]
    if train is None or test is None:
        for name, table in tables.items():
            lines.append(f"- {name}: {len(table.rows)} rows; columns: {', '.join(table.columns)}")
        return "\n".join(lines) + "\n"
    target = next(c for c in train.columns if c not in test.columns)
    y = [float(v) for v in train.column(target)]
    lines += [f"- training rows: {len(train.rows)}; test rows: {len(test.rows)}",
              f"- training columns: {', '.join(train.columns)}",
              f"- test columns: {', '.join(test.columns)}",
              f"- target: {target}; mean {statistics.fmean(y):.4g}, std {statistics.pstdev(y):.4g}, "
              f"min {min(y):.4g}, max {max(y):.4g}"]
    return "\n".join(lines) + "\n"


def split_spec(spec, kw: dict):
    """A test helper's keyword arguments for evolve(): RunSpec's fields (and a Budget's limits)
    taken out of ``kw`` into the spec returned; the rest (what the run is given: a gate, a
    resume, sinks) stays in ``kw`` for evolve."""
    from dataclasses import fields, replace

    from engine.run_spec import RunSpec

    names = {f.name for f in fields(RunSpec)}
    changes = {name: kw.pop(name) for name in list(kw) if name in names}
    budget = kw.pop("budget", None)
    if budget is not None:
        changes.update(max_tokens=budget.max_tokens, max_cost_usd=budget.max_cost_usd, max_calls=budget.max_calls)
    return replace(spec, **changes)
