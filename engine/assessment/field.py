"""A field on a grid with no training rows (Data_config.json ``"answer": {"kind": "field", ...}``).

The question is a PDE's solution: u at every query point (a full grid of one space and one time
coordinate), with the equation, its initial and boundary conditions stated as code in the law
file (README, "The field's law file") and, maybe, a few measurements. There is no table to cut
into folds, so in-loop validation asks what the statement itself can check: the residual of the
stated equation on the answer (finite differences on the query grid), the initial and boundary
conditions, and, when there are observations, how well the answer meets the ones held out of
the program's inputs (k-fold over the observations). The scoring runs in the evaluator's sandbox
(field_scorer.py), since it runs the task's law. The official score is evaluate.py's, one row per
query point, as for any per-row answer.
"""
from __future__ import annotations

import ast
import csv
import json
import random
import re
import tempfile
from pathlib import Path
from typing import ClassVar

from .. import python_ast
from ..checks import Check
from ..evaluator_sandbox import INPUT_DIR, run_task_code
from ..prompt_format import named, resource_name
from ..sandbox import ExecutionRequest, ExecutionResult, Executor
from ..validation import SplitPlan, read_answer
from .base import Assessment

SCORER = Path(__file__).with_name("field_scorer.py")
OBSERVATION_FOLDS = 5
OBSERVATIONS = "observations"  # the label of its Resources line
MIN_OBSERVATIONS = 5   # fewer: validated on the equation alone
LAW_NAMES = ("initial", "boundary", "rhs")


def law_problems(path: Path) -> list[str]:
    """What the law file lacks, read without running it."""
    try:
        tree = python_ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return [f"{path.name} cannot be read: {exc}"]
    except SyntaxError as exc:
        return [f"{path.name} does not parse: {exc.msg} (line {exc.lineno})"]
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    missing = [f"def {n}" for n in LAW_NAMES if n not in defined] + [n for n in ("DOMAIN",) if n not in assigned]
    return [f"{path.name} lacks {', '.join(missing)} (README, 'The field's law file')"] if missing else []


def law_coordinates(path: Path) -> tuple[str, str]:
    """(SPACE, TIME) of a law file, read as literals; ("x", "t") when not stated."""
    names = {"SPACE": "x", "TIME": "t"}
    try:
        tree = python_ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return names["SPACE"], names["TIME"]
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in names:
                    try:
                        value = ast.literal_eval(node.value)
                    except (ValueError, SyntaxError, TypeError):
                        continue
                    if isinstance(value, str):
                        names[target.id] = value
    return names["SPACE"], names["TIME"]


class FieldAssessment(Assessment):
    name: ClassVar[str] = "field"
    title: ClassVar[str] = "a field on a grid"
    options_help: ClassVar[dict[str, str]] = {
        "query": "the role in 'files' of the query points (the id and the two coordinates, a full grid)",
        "law": "the role in 'files' of the law file (the equation, initial and boundary conditions as code)",
        "observations": "the role in 'files' of sparse measurements (the two coordinates and the target), if any",
    }

    @classmethod
    def check_options(cls, options: dict, columns: dict[str, list[str]]) -> list[str]:
        problems = super().check_options(options, columns)
        for key in ("query", "law"):
            if options.get(key) not in columns:
                problems.append(f"answer.{key} must name a role of 'files' ({', '.join(sorted(columns))}), "
                                f"not {options.get(key)!r} (kind 'field')")
        if "observations" in options and options["observations"] not in columns:
            problems.append(f"answer.observations must name a role of 'files', not {options['observations']!r}")
        return problems

    # --- files ---------------------------------------------------------------------------------
    def _path(self, key: str) -> Path | None:
        role = self.options.get(key)
        rel = self.task.resources.files.get(role) if role else None
        return self.task.folder / rel if rel else None

    def _rel(self, key: str) -> str | None:
        role = self.options.get(key)
        return self.task.resources.files.get(role) if role else None

    def coordinates(self) -> tuple[str, str]:
        law = self._path("law")
        return law_coordinates(law) if law else ("x", "t")

    def roles(self) -> tuple[str, ...]:
        return tuple(self.options[k] for k in ("query", "law", "observations") if self.options.get(k))

    def required_roles(self) -> tuple[str, ...]:
        return tuple(self.options[k] for k in ("query", "law"))

    def _observations(self) -> list[dict[str, str]]:
        path = self._path("observations")
        if path is None or not path.is_file():
            return []
        with path.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh))

    # --- facts -------------------------------------------------------------------------------------
    def deliverable(self) -> list[str]:
        r = self.task.resources
        space, time = self.coordinates()
        lines = [f"answer: the field {named(r.target)} at every point of {named(self._rel('query'))} (columns "
                 f"{named(r.id_column, space, time)}): one row each, no training table",
                 f"the law: {named(self._rel('law'))} states the equation (rhs: `{r.target}_t` from t, x, u, u_x, u_xx), "
                 "the initial and boundary conditions and the constants (KNOWN)",
                 "in-loop validation: the residual of the stated equation on the answer, its initial and boundary "
                 "errors" + (", and held-out observations" if self._observations() else "")]
        if self._rel("observations"):
            lines.append(f"{OBSERVATIONS}: {named(self._rel('observations'))} ({named(space, time, r.target)})")
        return lines

    @classmethod
    def read_deliverable(cls, resources: str) -> dict:
        answer = re.search(r"^- answer: the field `[^`]+` at every point of `([^`]+)`", resources, re.M)
        if not answer:
            return {}
        law = re.search(r"^- the law: `([^`]+)` states the equation", resources, re.M)
        return {"query_path": answer.group(1), "law_path": law.group(1) if law else "",
                "observations_path": resource_name(resources, OBSERVATIONS)}

    # --- in-loop validation ------------------------------------------------------------------------
    def plan(self):
        n = len(self._observations())
        folds = min(OBSERVATION_FOLDS, n) if n >= MIN_OBSERVATIONS else 1
        how = (f"and {n} observations, {folds}-fold" if folds > 1 else "alone (too few observations to hold out)"
               if n else "alone (no observations)")
        return SplitPlan("residual", folds, chosen_by="task",
                         reason=f"answer kind 'field': the stated equation, initial and boundary conditions {how}")

    def folds(self, plan, data, seed: int) -> list[tuple[list[int], list[int]]]:
        n = len(self._observations())
        if plan.folds <= 1 or n < MIN_OBSERVATIONS:
            return [(list(range(n)), [])]
        order = list(range(n))
        random.Random(seed).shuffle(order)
        return [(sorted(set(order) - set(order[k::plan.folds])), sorted(order[k::plan.folds]))
                for k in range(plan.folds)]

    def validate(self, code: str, executor: Executor, seed: int = 0, plan=None) -> tuple[dict, ExecutionResult]:
        plan = plan or self.plan()
        observations = self._observations()
        folds = self.folds(plan, None, seed)
        inputs = self.task.input_files()
        obs_rel = self._rel("observations")
        last: ExecutionResult | None = None
        with tempfile.TemporaryDirectory(prefix="trellis-field-") as tmp:
            jobs = []
            for k, (fit, held) in enumerate(folds):
                folder = Path(tmp) / f"fold{k}"
                folder.mkdir()
                files = dict(inputs)
                held_path = None
                if obs_rel and held:
                    files[obs_rel] = _write_rows(folder / "observations.csv", observations, fit)
                    held_path = _write_rows(folder / "held_out.csv", observations, held)
                last = executor.run(ExecutionRequest(code=code, input_files=files, limits=self.task.resources.limits))
                produced, problem = read_answer(self.task, last)
                if problem:
                    return {"ok": False, "error": f"{problem} (validation fold {k + 1} of {len(folds)})",
                            "validation": plan.to_dict()}, last
                answer = folder / "answer.csv"
                answer.write_bytes(produced)
                jobs.append((answer, held_path))
            baselines, baseline_folds = self._scored_baselines(Path(tmp), [h for _, h in jobs])
            scores = self._score(Path(tmp), jobs)
        assert last is not None
        failed = next((s for s in scores if not s.get("ok")), None)
        if failed:
            return {"ok": False, "error": f"the answer could not be checked against the law: {failed.get('error')}",
                    "validation": plan.to_dict()}, last
        values = [float(s["value"]) for s in scores]
        # what the value is made of, said in the scorer line (the validation event has no field for it)
        self.parts = {part: round(sum(float(s[part]) for s in scores) / len(scores), 6)
                      for part in ("residual", "initial", "boundary", "observations")}
        said = ", ".join(f"{k} {v:.3g}" for k, v in self.parts.items())
        return {"ok": True, "metric": "law_residual", "value": sum(values) / len(values), "higher_is_better": False,
                "n": int(scores[0]["n"]), "split": "validation", "splits": len(values),
                "split_values": [round(v, 6) for v in values], "scorer": f"the stated law ({said})",
                "baselines": baselines, "baseline_split_values": baseline_folds, "validation": plan.to_dict()}, last

    def _run_scorer(self, tmp: Path, config: dict, outputs: tuple[str, ...] = ("results.json",)):
        config_path = tmp / "field-config.json"
        inputs = {self._rel("law"): self._path("law"), self._rel("query"): self._path("query")}
        for k, job in enumerate(config.get("jobs", [])):
            for key in ("answer", "observations"):
                if job.get(key):
                    rel = f"{INPUT_DIR}/{k:03d}-{key}.csv"
                    inputs[rel] = Path(job[key])
                    job[key] = rel
        config = {**config, "law": self._rel("law"), "query": self._rel("query"),
                  "id_column": self.task.resources.id_column, "target": self.task.resources.target}
        config_path.write_text(json.dumps(config))
        inputs[f"{INPUT_DIR}/config.json"] = config_path
        return run_task_code(self.task, "trellis_field_scorer.py", SCORER.read_text(encoding="utf-8"),
                             [f"{INPUT_DIR}/config.json", "results.json"], inputs, 300.0, outputs=outputs)

    def _score(self, tmp: Path, jobs: list[tuple[Path, Path | None]]) -> list[dict]:
        run = self._run_scorer(tmp, {"jobs": [{"answer": str(a), "observations": str(h) if h else None}
                                              for a, h in jobs]})
        if run.problem:
            return [{"ok": False, "error": run.problem}]
        try:
            return json.loads(run.outputs["results.json"])
        except (KeyError, ValueError):
            return [{"ok": False, "error": f"the law could not be run: {run.stderr.strip()[-400:]}"}]

    def _scored_baselines(self, tmp: Path, held: list[Path | None]) -> tuple[dict[str, float], dict[str, list[float]]]:
        """Each trivial answer's mean score over the folds, and its score per fold."""
        answers = self.trivial_predictions(tmp)
        means, per_fold = {}, {}
        for name, data in answers.items():
            path = tmp / f"baseline-{name}.csv"
            path.write_bytes(data)
            scores = self._score(tmp, [(path, h) for h in held])
            if scores and all(s.get("ok") for s in scores):
                means[name] = round(sum(float(s["value"]) for s in scores) / len(scores), 6)
                per_fold[name] = [round(float(s["value"]), 6) for s in scores]
        return means, per_fold

    # --- baselines ---------------------------------------------------------------------------------
    def trivial_predictions(self, tmp: Path | None = None) -> dict[str, bytes]:
        """The initial condition held for all times, and zero: computed by the law in the sandbox."""
        with tempfile.TemporaryDirectory(prefix="trellis-field-") as scratch:
            names = ("initial_held", "zero")
            run = self._run_scorer(Path(scratch), {"baselines": True},
                                   outputs=("results.json", *(f"baseline-{n}.csv" for n in names)))
            if run.problem:
                return {}
            return {n: run.outputs[f"baseline-{n}.csv"] for n in names if f"baseline-{n}.csv" in run.outputs}

    # --- checks ------------------------------------------------------------------------------------
    def checks(self, answer_csv: bytes, stdout: str, data=None) -> list[Check]:
        r = self.task.resources
        try:
            rows = list(csv.DictReader(answer_csv.decode("utf-8").splitlines()))
            with self._path("query").open(newline="", encoding="utf-8") as fh:
                asked = {row[r.id_column].strip() for row in csv.DictReader(fh)}
        except (OSError, KeyError, UnicodeDecodeError, csv.Error) as exc:
            return [Check("finite", False, f"the answer or the query points cannot be read: {exc}")]
        values, bad = {}, 0
        for row in rows:
            try:
                value = float(row.get(r.target, ""))
                key = str(int(float(row[r.id_column])))
            except (TypeError, ValueError, KeyError):
                bad += 1
                continue
            if value != value or value in (float("inf"), float("-inf")):
                bad += 1
            values[key] = value
        missing = len(asked - set(values))
        ok = not bad and not missing
        detail = (f"all {len(values)} query points have a finite {r.target}" if ok else
                  f"{missing} query point(s) missing, {bad} value(s) not finite numbers")
        checks = [Check("finite", ok, detail)]
        c = r.constraints
        if ok and c and (c.min is not None or c.max is not None):
            outside = [v for v in values.values() if (c.min is not None and v < c.min) or (c.max is not None and v > c.max)]
            checks.append(Check("within_range", not outside, f"{len(outside)} value(s) outside the declared bounds"
                                if outside else "every value inside the declared bounds"))
        return checks

    def varying_column(self) -> str | None:
        return self.task.resources.target

    # --- preflight ---------------------------------------------------------------------------------
    def check_files(self) -> tuple[list[str], list[str], dict]:
        """Problems and warnings with the query points, the law and the observations; facts."""
        r = self.task.resources
        problems: list[str] = []
        warnings: list[str] = []
        space, time = self.coordinates()
        law = self._path("law")
        problems += law_problems(law) if law else ["answer.law names no file"]
        query = self._path("query")
        n = 0
        try:
            with query.open(newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh)
                header = reader.fieldnames or []
                rows = list(reader)
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            return [f"{self._rel('query')} cannot be read: {exc}"], warnings, {}
        absent = [c for c in (r.id_column, space, time) if c not in header]
        for column in absent:
            problems.append(f"{self._rel('query')}: no column '{column}' (the id, and the law's SPACE and TIME)")
        if not absent:
            try:
                points = {(float(row[space]), float(row[time])) for row in rows}
            except ValueError:
                problems.append(f"{self._rel('query')}: '{space}' and '{time}' must be numbers")
                points = set()
            xs, ts = {p[0] for p in points}, {p[1] for p in points}
            n = len(rows)
            if points and (len(points) != n or n != len(xs) * len(ts)):
                problems.append(f"{self._rel('query')}: the {n} query points are not a full grid of {len(xs)} "
                                f"'{space}' x {len(ts)} '{time}' values, each once: the residual needs the grid")
            ids = [row[r.id_column] for row in rows]
            if len(set(ids)) != len(ids):
                problems.append(f"{self._rel('query')}: ids in '{r.id_column}' repeat")
        observations = self._observations()
        if observations:
            missing = [c for c in (space, time, r.target) if c not in observations[0]]
            if missing:
                problems.append(f"{self._rel('observations')}: no column(s) {', '.join(missing)}")
            elif len(observations) < MIN_OBSERVATIONS:
                warnings.append(f"{self._rel('observations')}: {len(observations)} observations, fewer than "
                                f"{MIN_OBSERVATIONS}: validation uses the equation alone")
        return problems, warnings, {"n_test": n, "features": (space, time)}

    def trivial_answer(self) -> list[list[str]] | None:
        r = self.task.resources
        try:
            with self._path("query").open(newline="", encoding="utf-8") as fh:
                ids = [row[r.id_column] for row in csv.DictReader(fh)]
        except (OSError, KeyError, UnicodeDecodeError, csv.Error):
            return None
        return [[r.id_column, r.target], *([i, "0.0"] for i in ids)]


def _write_rows(path: Path, rows: list[dict[str, str]], chosen: list[int]) -> Path:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows[i] for i in chosen)
    return path
