"""A table of parameters (Data_config.json ``"answer": {"kind": "parameters", ...}``).

The question is a model's constants (rate constants, coefficients of a stated law), scored by
evaluate.py against the true values. The held-out answer key holds no rows to validate on, so
in-loop validation asks what can be checked without it: how well the fitted model reproduces
training rows it was not fitted on. A program therefore writes two files:
- the answer, ``predictions.file`` (contract ``csv[parameter:str, value:float]``), one row per
  parameter named in ``answer.names``: what evaluate.py scores officially;
- the reproduction, ``answer.reproduce`` (``id``, target): the fitted model's target for each row
  of the test features file; on a fold those rows are held-out training rows, scored with
  ``answer.reproduce_metric`` by the engine.
``answer.law`` names the file (a role of ``files``, so programs read it) that states the law as
code; its ``PARAMETERS = {name: (low, high)}`` gives each parameter's range, read here as a literal
(never run by the engine outside the sandbox). A task may instead state its law in its text
(Problem.md: ``dI/dt = beta S I / N - gamma I``, ``I(0) = I0``; engine/assessment/prose_law.py reads
it) and give the ranges as ``answer.ranges = {name: [low, high]}`` and, where no column is named
like the law's time, that column as ``answer.time``. The trivial baseline is the middle of each
range (geometric for a range of positive values): what a scientist says knowing only the prior.
"""
from __future__ import annotations

import ast
import csv
import io
import math
import re
from pathlib import Path
from typing import ClassVar

from .. import python_ast
from ..checks import Check
from ..metrics import metric_fn
from ..prompt_format import backticked, named, resource_name, resource_value
from .base import Assessment
from .prose_law import read_law

RANGES, LAW_TIME = "parameter ranges", "the law's time column"  # two of its Resources lines

PARAMETER, VALUE = "parameter", "value"
# errors, lower is better, like the parameters' own official error: one direction for the search
REPRODUCE_METRICS = ("rmse", "mae", "relative_l2")


def law_ranges(path: Path) -> dict[str, tuple[float, float]]:
    """``PARAMETERS`` of a law file as {name: (low, high)}, read as a literal; {} when absent or
    not a literal of finite ranges."""
    try:
        tree = python_ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PARAMETERS" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except (ValueError, SyntaxError, TypeError):
                return {}
            out = {}
            for name, bounds in (value.items() if isinstance(value, dict) else ()):
                try:
                    low, high = (float(b) for b in bounds)
                except (TypeError, ValueError):
                    return {}
                if not (math.isfinite(low) and math.isfinite(high) and low < high):
                    return {}
                out[str(name)] = (low, high)
            return out
    return {}


def range_problem(bounds: object) -> str:
    """What is wrong with a [low, high] range ('' : nothing)."""
    if not isinstance(bounds, (list, tuple)) or len(bounds) != 2 or not all(
            isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds):
        return "must be [low, high], two numbers"
    low, high = (float(b) for b in bounds)
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        return f"[{low:g}, {high:g}] is not a range of finite numbers with low < high"
    return ""


def read_parameters(data: bytes) -> tuple[dict[str, float], list[str]]:
    """{name: value} from an answer file, and what is wrong with it."""
    problems: list[str] = []
    try:
        rows = list(csv.DictReader(io.StringIO(data.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        return {}, [f"the parameters file cannot be read: {exc}"]
    values: dict[str, float] = {}
    for row in rows:
        name, text = (row.get(PARAMETER) or "").strip(), (row.get(VALUE) or "").strip()
        if name in values:
            problems.append(f"parameter {name!r} is given twice")
            continue
        try:
            values[name] = float(text)
        except ValueError:
            problems.append(f"parameter {name!r} has value {text[:30]!r}, not a number")
    return values, problems


class ParametersAssessment(Assessment):
    name: ClassVar[str] = "parameters"
    title: ClassVar[str] = "a table of parameters"
    options_help: ClassVar[dict[str, str]] = {
        "names": "the parameters the answer gives, in order",
        "reproduce": "the file of the fitted model's target per test-features row (default reproduction.csv)",
        "reproduce_metric": f"how a fold's reproduction is scored ({', '.join(REPRODUCE_METRICS)}; default rmse)",
        "law": "the role in 'files' of the file stating the law as code, with PARAMETERS = {name: (low, high)}",
        "ranges": "without a law file: {name: [low, high]}, the range each parameter may take",
        "time": "without a law file: the column holding the time of a law stated in the text as an ODE",
    }

    @classmethod
    def check_options(cls, options: dict, columns: dict[str, list[str]]) -> list[str]:
        problems = super().check_options(options, columns)
        names = options.get("names")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names) \
                or len(set(names)) != len(names):
            problems.append("answer.names must list the parameters' names, each once (kind 'parameters')")
        metric = options.get("reproduce_metric", "rmse")
        if metric not in REPRODUCE_METRICS:
            problems.append(f"answer.reproduce_metric {metric!r} is not one of {', '.join(REPRODUCE_METRICS)}")
        reproduce = options.get("reproduce", "reproduction.csv")
        if not isinstance(reproduce, str) or not reproduce.endswith(".csv") or "/" in reproduce:
            problems.append("answer.reproduce must be a file name ending in .csv")
        law = options.get("law")
        if law is not None and (not isinstance(law, str) or law not in columns):
            problems.append(f"answer.law must name a role of 'files' ({', '.join(sorted(columns))}), not {law!r}")
        ranges = options.get("ranges")
        if ranges is not None:
            if law is not None:
                problems.append("answer.ranges is for a law stated in the text; with answer.law the law file's "
                                "PARAMETERS give the ranges")
            elif not isinstance(ranges, dict) or not ranges:
                problems.append("answer.ranges must map each parameter to [low, high]")
            else:
                problems += [f"answer.ranges[{name!r}]: {why}" for name, why in
                             ((n, range_problem(b)) for n, b in ranges.items()) if why]
                unknown = [n for n in ranges if isinstance(names, list) and n not in names]
                if unknown:
                    problems.append(f"answer.ranges names {', '.join(map(str, unknown))}, not in answer.names")
        time = options.get("time")
        if time is not None and (not isinstance(time, str) or not time):
            problems.append("answer.time must name the column holding the law's time")
        return problems

    @property
    def names(self) -> list[str]:
        return list(self.options["names"])

    @property
    def reproduction_file(self) -> str:
        return self.options.get("reproduce", "reproduction.csv")

    @property
    def reproduce_metric(self) -> str:
        return self.options.get("reproduce_metric", "rmse")

    def stated_problems(self) -> list[str]:
        """The law whose constants are asked for: a law file, or a law the task's text states in a
        form Trellis reads (engine/assessment/prose_law.py). Without one no program can fit
        anything; that used to show only after some 60,000 tokens of failed programs."""
        names = self.options.get("names")
        if self.options.get("law") or not isinstance(names, list) or not names:
            return []  # a law file, or no names to fit (check_options says so)
        task, r = self.task, self.task.resources
        prose = "\n".join([task.goal, task.context, *task.constraints])
        reading = read_law(prose, target=r.target or "", names=names, columns=list(r.features or ()),
                           time_column=self.options.get("time") or "")
        if reading.law is not None:
            return []
        why = reading.problem or f"no equation for `{r.target}` in Problem.md"
        return [f"answer kind 'parameters' fits the constants of a stated law, and this task states none that "
                f"Trellis can read ({why}). Name a law file (answer.law: Python with the law and PARAMETERS), or "
                f"state the law in Problem.md as equations for `{r.target}`, for example "
                f"`dX/dt = -k * X` with `X(0) = X0`, or `{r.target} = a * exp(-b * t)`"]

    def law_path(self) -> Path | None:
        role = self.options.get("law")
        rel = self.task.resources.files.get(role) if role else None
        return self.task.folder / rel if rel else None

    def ranges(self) -> dict[str, tuple[float, float]]:
        """Each parameter's range: the law file's PARAMETERS, else answer.ranges."""
        path = self.law_path()
        if path:
            return law_ranges(path)
        return {str(n): (float(b[0]), float(b[1])) for n, b in (self.options.get("ranges") or {}).items()}

    # --- facts -------------------------------------------------------------------------------------
    def deliverable(self) -> list[str]:
        r = self.task.resources
        law = self.options.get("law")
        lines = [f"answer: a table of parameters {named(*self.names)}: one row each, columns "
                 f"{named(PARAMETER, VALUE)}, in {named(r.predictions_file)}; scored against their true values",
                 f"also write {named(self.reproduction_file)} with columns {named(r.id_column, r.target)}: the fitted "
                 "model's target for every row of the test features file",
                 f"in-loop validation: the {self.reproduce_metric} of `{self.reproduction_file}` on training rows "
                 "held out of the fit"]
        if law:
            lines.append(f"the law: {named(r.files.get(law, law))} (its PARAMETERS give each parameter's range)")
        else:
            lines.append("the law: stated in the task's text (no law file)")
            ranges = self.ranges()
            if ranges:
                lines.append(f"{RANGES}: " + ", ".join(f"`{n}` in [{lo:.15g}, {hi:.15g}]" for n, (lo, hi) in
                                                       ranges.items()))
            if self.options.get("time"):
                lines.append(f"{LAW_TIME}: {named(self.options['time'])}")
        return lines

    @classmethod
    def read_deliverable(cls, resources: str) -> dict:
        answer = re.search(r"^- answer: a table of parameters (.+?): one row each", resources, re.M)
        if not answer:
            return {}
        reproduce = re.search(r"^- also write `([^`]+)` with columns", resources, re.M)
        law = re.search(r"^- the law: `([^`]+)`", resources, re.M)
        ranges = []
        for name, low, high in re.findall(r"`([^`]+)` in \[([^,\]]+), ([^\]]+)\]", resource_value(resources, RANGES)):
            try:
                ranges.append((name, float(low), float(high)))
            except ValueError:
                continue
        return {"parameter_names": tuple(backticked(answer.group(1))),
                "reproduction_file": reproduce.group(1) if reproduce else "",
                "law_path": law.group(1) if law else "", "parameter_ranges": tuple(ranges)}

    @staticmethod
    def law_time_column(resources: str) -> str:
        """The column holding the time of a law stated in the text, as ``deliverable`` wrote it."""
        return resource_name(resources, LAW_TIME)

    # --- in-loop validation ------------------------------------------------------------------------
    def fold_output(self) -> str:
        return self.reproduction_file

    def score_folds(self, splits: list, answers: list[Path]) -> list[dict]:
        """Reproductions scored by the engine: evaluate.py scores parameters, not rows."""
        fn = metric_fn(self.reproduce_metric)
        r = self.task.resources
        out = []
        for split, path in zip(splits, answers):
            try:
                rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
                by_id = {str(int(float(row[r.id_column]))): float(row[r.target]) for row in rows}
                pred = [by_id[i] for i in split.targets]
                true = [float(split.targets[i]) for i in split.targets]
            except (KeyError, ValueError, TypeError, UnicodeDecodeError) as exc:
                out.append({"ok": False, "error": f"{self.reproduction_file} unreadable on a validation fold: {exc}"})
                continue
            try:
                value = fn(pred, true)
            except (OverflowError, ZeroDivisionError):
                value = math.inf
            if not math.isfinite(value):
                out.append({"ok": False, "error": f"{self.reproduction_file} scores {value} on a validation fold"})
                continue
            out.append({"ok": True, "metric": f"reproduction_{self.reproduce_metric}", "value": value,
                        "higher_is_better": False, "n": len(pred), "scorer": "built-in"})
        return out

    # --- baselines ---------------------------------------------------------------------------------
    def trivial_predictions(self) -> dict[str, bytes]:
        ranges = self.ranges()
        if not all(n in ranges for n in self.names):
            return {}
        buffer = io.StringIO()
        w = csv.writer(buffer, lineterminator="\n")
        w.writerow([PARAMETER, VALUE])
        for n in self.names:
            low, high = ranges[n]
            w.writerow([n, repr(math.sqrt(low * high) if low > 0 else (low + high) / 2)])
        return {"range_middle": buffer.getvalue().encode()}

    def roles(self) -> tuple[str, ...]:
        return (self.options["law"],) if self.options.get("law") else ()

    def answer_columns(self) -> dict[str, str] | None:
        return {PARAMETER: "str", VALUE: "float"}

    def trivial_answer(self) -> list[list[str]] | None:
        trivial = self.trivial_predictions().get("range_middle")
        if trivial is not None:
            return [row for row in csv.reader(io.StringIO(trivial.decode()))]
        return [[PARAMETER, VALUE], *([n, "1.0"] for n in self.names)]

    # --- checks ------------------------------------------------------------------------------------
    def varying_column(self) -> str | None:
        return None  # two parameters may well be equal

    def checks(self, answer_csv: bytes, stdout: str, data=None) -> list[Check]:
        values, problems = read_parameters(answer_csv)
        missing = [n for n in self.names if n not in values]
        extra = [n for n in values if n not in self.names]
        if missing:
            problems.append(f"no value for {', '.join(missing)}")
        if extra:
            problems.append(f"unknown parameter(s) {', '.join(extra[:5])}")
        bad = [n for n, v in values.items() if not math.isfinite(v)]
        if bad:
            problems.append(f"{', '.join(bad)} not finite")
        checks = [Check("finite", not problems, "; ".join(problems) or
                        f"every parameter given once, finite: {', '.join(f'{n}={values[n]:.4g}' for n in self.names)}")]
        ranges = self.ranges()
        if ranges and not problems:
            outside = [f"{n}={values[n]:.4g} outside [{ranges[n][0]:g}, {ranges[n][1]:g}]"
                       for n in self.names if n in ranges and not ranges[n][0] <= values[n] <= ranges[n][1]]
            checks.append(Check("within_range", not outside, "; ".join(outside) or
                                "every parameter inside the range the task gives"))
        return checks
