"""When the offline scientist calls a tool, and what it takes from the result.

It reads the offered tools as a model does, by their descriptions and argument names (never
by a server's or tool's name): a *profiler* takes a data file ``path`` and profiles or
summarises it; a *fitter* fits a ``model`` to points or a CSV. What it asks follows from the
task, as everything else it does:

- the analyzer profiles the training file before writing its analysis, and heads its answer
  with what the profile says;
- the planner of a regression whose task welcomes a law (physics, a functional form,
  extrapolation, a monotone response) fits a power law and a straight line to the training data,
  along the only input or the one the task extrapolates in;
  a good fit (R² >= GOOD_FIT) makes it prefer a parametric model, and the plan says so.

One round of calls per step: with results in hand it answers.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..prompt_format import TOOL_RESULTS, ToolExchange, input_heading, parse_tool_results, section, task_sections
from .reading import REGRESSION, TaskFacts

GOOD_FIT = 0.9
FIT_FORMS = ("power_law", "linear")


@dataclass(frozen=True)
class Offered:
    function: str
    description: str
    arguments: frozenset[str]

    @property
    def profiler(self) -> bool:
        return "path" in self.arguments and bool(re.search(r"\b(profil|summar)", self.description, re.I))

    @property
    def fitter(self) -> bool:
        return "model" in self.arguments and bool({"x", "path"} & self.arguments) and \
            bool(re.search(r"\bfit", self.description, re.I))


def offered(tools: list[dict] | None) -> list[Offered]:
    out = []
    for t in tools or []:
        fn = t.get("function") or {}
        props = (fn.get("parameters") or {}).get("properties") or {}
        out.append(Offered(str(fn.get("name", "")), str(fn.get("description", "")), frozenset(props)))
    return out


def law_input(spec, user: str) -> str | None:
    """The input a law would be fitted along: the only feature, or the one the task's in-loop
    validation extrapolates in (``holdout_range on `col```); None when neither says."""
    if len(spec.features) == 1:
        return spec.features[0]
    m = re.search(r"^- in-loop validation: holdout_range on `([^`]+)`", task_sections(user)["Resources"], re.M)
    return m.group(1) if m and m.group(1) in spec.features else None


def plan_calls(role: str, facts: TaskFacts, spec, user: str, tools: list[dict] | None,
               done: list[ToolExchange]) -> list[dict]:
    """The calls (function name, arguments) this role makes now; [] to answer."""
    if done:
        return []
    tools_ = offered(tools)
    if role == "analyzer":
        profiler = next((t for t in tools_ if t.profiler), None)
        return [{"name": profiler.function, "arguments": {"path": spec.train_path}}] if profiler else []
    if role == "planner":
        fitter = next((t for t in tools_ if t.fitter and "path" in t.arguments), None)
        wants_law = facts.physics or facts.extrapolate or facts.monotone
        x = law_input(spec, user)
        if fitter and wants_law and facts.kind == REGRESSION and x:
            return [{"name": fitter.function, "arguments": {"model": form, "path": spec.train_path,
                                                            "x_column": x, "y_column": spec.target}}
                    for form in FIT_FORMS]
    return []


def results(user: str) -> list[ToolExchange]:
    """The tool results a prompt carries (the scientist's respond() adds them as an input)."""
    return parse_tool_results(section(user, input_heading(TOOL_RESULTS)))


def _json(text: str) -> dict:
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def profile_notes(user: str) -> str:
    """What the analyzer says of a profile it was given, '' when it has none."""
    lines = []
    for x in results(user):
        data = _json(x.result) if x.ok else {}
        if "column_summaries" not in data:
            if not x.ok:
                lines.append(f"- {x.name} failed: {x.result[:200]}")
            continue
        lines.append(f"- {data.get('rows')} rows x {data.get('columns')} columns; "
                     f"{data.get('missing_total', 0)} missing value(s)")
        for c in data["column_summaries"][:12]:
            if c.get("type") == "number":
                lines.append(f"- `{c['name']}`: number in [{c.get('min')}, {c.get('max')}], mean {c.get('mean')}")
            else:
                lines.append(f"- `{c['name']}`: {c.get('type')}, {c.get('distinct', '?')} distinct")
        for p in data.get("strongest_correlations", [])[:3]:
            lines.append(f"- correlation `{p['a']}` ~ `{p['b']}`: r = {p['r']}")
    return ("Data profile (from the profiling tool):\n" + "\n".join(lines)) if lines else ""


@dataclass(frozen=True)
class FitFindings:
    line: str                # what the plan says of the fits
    prefers_law: bool        # a fit good enough to prefer a parametric model


def fit_findings(user: str) -> FitFindings | None:
    fits, failed = [], []
    for x in results(user):
        data = _json(x.result) if x.ok else {}
        if "parameters" in data and data.get("r2") is not None:
            fits.append((float(data["r2"]), x.arguments.get("model", data.get("model")), data))
        elif not x.ok and "model" in x.arguments:
            failed.append(f"{x.arguments['model']} failed ({x.result[:120]})")
    if not fits and not failed:
        return None
    parts = []
    for r2, form, data in sorted(fits, key=lambda f: -f[0]):
        params = ", ".join(f"{k} = {v.get('value'):.4g} ± {v.get('stderr'):.2g}" if v.get("stderr") is not None
                           and v.get("value") is not None else f"{k} = {v.get('value')}"
                           for k, v in data["parameters"].items())
        parts.append(f"{form}: {params}, R² = {r2:.3f}")
    best = max((f[0] for f in fits), default=None)
    prefers = best is not None and best >= GOOD_FIT
    verdict = ("a law fits the training data well, so a parametric model is preferred" if prefers else
               "no simple law fits well, so the fits do not steer the choice")
    return FitFindings(f"**Fits (curve-fitting tool).** {'; '.join(parts + failed)}. Used: {verdict}.", prefers)
