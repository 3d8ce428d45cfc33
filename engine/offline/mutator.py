"""The offline mutator's reasoning (Mimosa's meta-agent): read the judge's scores and the failed
public checks, find the weakest criterion and propose the one change that addresses it, saying
which criterion, its score and why this change.

Each criterion has remedies, the most specific first:

- output_quality: a modelling change for the planner, grounded in the task's facts (must
  extrapolate, physics welcome, monotone, jumps, classification) and then in the data report;
- answer_plausibility: the change a failed check calls for (within_range or beats_trivial: an
  extrapolation-safe, bounded model; finite: a guard against NaN and inf; claims_match: the
  finalizer reports the measured score only; ...);
- collaboration_efficiency: remove a router, fewer repair loops, a lower loop cap, less memory;
- goal_alignment: the coder and the finalizer always deliver the contracted predictions file.

A remedy the history shows was tried, or that would change nothing, is skipped; when every
remedy of the weakest criterion is spent, the next weakest is addressed and the rationale says
so. Ties between criteria are broken by a fixed order (TIE_ORDER). Everything follows from what
the prompt says: the same content gives the same proposal.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..prompt_format import extract_strategy, inputs, json_block
from .reading import CLASSIFICATION, TaskFacts, read_facts, tags_asked
from .strategies import get_strategy

# A missing deliverable first, then an implausible answer, then its quality, then its cost.
TIE_ORDER = ("goal_alignment", "answer_plausibility", "output_quality", "collaboration_efficiency")

# Hints a mutator can add to a planner's instructions; their words are the strategy library's
# tags (reading.TAG_WORDS), which is how the planner reads them. SciMARS's editor uses these too.
HINTS: dict[tuple[str, ...], str] = {
    ("discontinuity", "piecewise"): "The data shows a jump: locate it and prefer a discontinuity-aware piecewise fit.",
    ("trees", "ensemble"): "Prefer tree ensembles: they capture sharp changes and interactions without tuning.",
    ("nonparametric",): "Prefer a nonparametric method that lets the data decide the shape.",
    ("linear", "regularised", "scaling"): "Prefer a regularised linear model on scaled features with few parameters.",
    ("kernel", "scaling"): "Prefer a kernel method on standardised features.",
    ("ensemble", "linear", "scaling"): "Prefer an ensemble that stacks linear and tree models on scaled features.",
    ("smooth",): "Prefer a smooth model that does not overfit the noise.",
    ("neural", "scaling"): "Prefer a small neural network on standardised inputs.",
    ("parametric", "extrapolation", "physics"): ("Prefer a parametric law with few parameters (a power law or a "
                                                 "searched functional form) that holds beyond the training range."),
}


@dataclass(frozen=True)
class Hint:
    """A modelling change the planner can be asked for, in words the planner reads as tags."""

    text: str
    label: str                           # how a rationale names it
    kinds: tuple[str, ...] = ("regression",)
    requires: tuple[str, ...] = ()       # distributions the programs it leads to import

    @property
    def tags(self) -> frozenset[str]:
        return tags_asked(self.text)


SYMBOLIC_HINT = Hint("Prefer symbolic regression: search closed-form expressions of the inputs and keep the one "
                     "that predicts the far end of the data best.", "symbolic regression", requires=("pyoperon",))
LAW_HINT = Hint(HINTS[("parametric", "extrapolation", "physics")], "a parametric law")
SAFE_HINT = Hint("Prefer an extrapolation-safe parametric model with few parameters, whose predictions follow a "
                 "stated trend beyond the training range instead of running away or going flat.",
                 "an extrapolation-safe model", ("regression", CLASSIFICATION))
MONOTONE_HINT = Hint("Prefer a smooth parametric fit that rises or falls steadily with the inputs the task declares "
                     "monotone, never turning back.", "a monotone parametric fit")

# In order of preference among equally grounded hints.
MODEL_HINTS: tuple[Hint, ...] = (
    SYMBOLIC_HINT,
    LAW_HINT,
    Hint(HINTS[("discontinuity", "piecewise")], "a discontinuity-aware piecewise fit"),
    Hint(HINTS[("trees", "ensemble")], "tree ensembles"),
    Hint(HINTS[("ensemble", "linear", "scaling")], "a stacked ensemble"),
    Hint(HINTS[("linear", "regularised", "scaling")], "a regularised linear model"),
    Hint(HINTS[("smooth",)], "a smooth model"),
    Hint(HINTS[("kernel", "scaling")], "a kernel method"),
    Hint(HINTS[("nonparametric",)], "a nonparametric method"),
    Hint(HINTS[("neural", "scaling")], "a small neural network"),
    Hint("Prefer a regularised logistic classifier on scaled features: its boundary keeps its direction beyond "
         "the training range.", "a regularised logistic classifier", (CLASSIFICATION,)),
    Hint("Prefer a classifier built from tree ensembles: boosted or random forest trees capture thresholds and "
         "interactions.", "a tree-ensemble classifier", (CLASSIFICATION,)),
    Hint("Prefer a kernel classifier on standardised features for a smooth class boundary.", "a kernel classifier",
         (CLASSIFICATION,)),
    Hint("Prefer a nonparametric classifier, nearest neighbours on scaled features, that lets the data decide "
         "the boundary.", "a nearest-neighbour classifier", (CLASSIFICATION,)),
)
_FLAT_BEYOND_DATA = frozenset({"trees", "nonparametric", "kernel", "neural"})  # flat or wild past the data

# Additions to role procedures, each one sentence (what the history is searched for).
GUARD_FINITE = (" Guard against NaN and inf: check that every prediction is finite before writing, and where the "
                "model gives a non-finite value fall back to a simpler fit rather than write it.")
CHECK_BOUNDS = (" Check the predictions against the bounds and monotone trends the task declares before writing; "
                "when they break one, change the model rather than clip silently.")
MEASURED_ONLY = (" State only the validation score the execution evidence measured, copied exactly as printed; "
                 "never a score that was not measured.")
KEEP_HASH = " Hand on the verifier's predictions file byte for byte; never rewrite or regenerate it."
NO_PLACEHOLDERS = " Never leave placeholder text (TODO, ellipses, made-up values) in code or reports."
DELIVER_CODER = (" Always write the predictions file the task names, with exactly the contracted columns and types "
                 "and one row per test id, even when validation is poor.")
DELIVER_FINALIZER = (" Always hand on the contracted predictions file; when none was verified, say so plainly "
                     "instead of reporting success.")
ONE_PASS_REPAIR = (" Fix every problem the traceback and the failed checks implicate in one pass, and change the "
                   "approach when the same error returns, so that one repair loop suffices.")


@dataclass(frozen=True)
class Standing:
    criterion: str
    score: float | None
    feedback: str


@dataclass(frozen=True)
class Remedy:
    mutation: dict                 # kind, target, params
    why: str
    marker: str = ""               # the sentence it adds: tried when the history holds it


@dataclass
class Context:
    """What the mutator read from its prompt."""

    workflow: dict
    agents: dict[str, dict]
    facts: TaskFacts
    report: str                                   # lower-cased
    failed: list[tuple[str, str]]                 # (check name, detail)
    history: str
    tried: list[dict] = field(default_factory=list)  # proposals the history holds, parsed
    feedback: dict[str, str] = field(default_factory=dict)  # criterion -> the judge's words
    tools: list["ToolUse"] = field(default_factory=list)   # how each agent's MCP tools served it
    unallocated: dict[str, str] = field(default_factory=dict)  # discovered tool -> its description
    current: str = ""                              # the strategy key the incumbent's plan ran, if known

    @property
    def procedures(self) -> dict[str, str]:
        return self.workflow.get("harness", {}).get("procedures", {})


# --- reading --------------------------------------------------------------------------------
_STANDING = re.compile(r"^- ([a-z_]+): (\S+)\s+(?:\u2014|--?)\s?(.*)$", re.M)
_FAILED = re.compile(r"^- FAIL ([a-z_]+):? ?(.*)$", re.M)


def read_standings(text: str) -> list[Standing]:
    """Criteria from ``- criterion: score \u2014 feedback`` lines, weakest first (TIE_ORDER on ties,
    unscored last)."""
    found = []
    for name, score, feedback in _STANDING.findall(text):
        try:
            value: float | None = float(score)
        except ValueError:
            value = None
        found.append(Standing(name, value, feedback.strip()))

    def order(s: Standing) -> tuple:
        tie = TIE_ORDER.index(s.criterion) if s.criterion in TIE_ORDER else len(TIE_ORDER)
        return (s.score is None, s.score if s.score is not None else 0.0, tie, s.criterion)

    return sorted(found, key=order)


def read_failed(text: str) -> list[tuple[str, str]]:
    return [(name, detail.strip()) for name, detail in _FAILED.findall(text)]


def _tried(history: str) -> list[dict]:
    """The proposals in the history lines (``{json} -> J ...``)."""
    decoder, out = json.JSONDecoder(), []
    for line in history.splitlines():
        start = line.find("{")
        if start < 0:
            continue
        try:
            value, _ = decoder.raw_decode(line[start:])
        except ValueError:
            continue
        if isinstance(value, dict) and "kind" in value:
            out.append(value)
    return out


@dataclass(frozen=True)
class ToolUse:
    """One line of the ``tool_use`` input: an agent's MCP tool and how its calls went."""

    agent: str
    tool: str
    calls: int
    ok: int
    last_error: str = ""


_TOOL_USE = re.compile(r"^- (\S+) (mcp\.\S+): (?:never called|(\d+) call\(s\), (\d+) ok, \d+ failed"
                       r"(?: \(last error: (.*)\))?)\s*$", re.M)
_UNALLOCATED = re.compile(r"^- not allocated: (mcp\.\S+) — (.*)$", re.M)


def read_tool_use(text: str) -> tuple[list[ToolUse], dict[str, str]]:
    used = [ToolUse(m.group(1), m.group(2), int(m.group(3) or 0), int(m.group(4) or 0), m.group(5) or "")
            for m in _TOOL_USE.finditer(text)]
    return used, {m.group(1): m.group(2) for m in _UNALLOCATED.finditer(text)}


def read_context(system: str, user: str) -> Context:
    given = inputs(user)
    wf = json_block(given.get("workflow", "")) or {}
    history = given.get("history", "")
    tools, unallocated = read_tool_use(given.get("tool_use", ""))
    named = extract_strategy(given.get("approach", ""))
    return Context(workflow=wf, agents={a["id"]: a for a in wf.get("agents", [])},
                   facts=read_facts(system, user), report=given.get("report", "").lower(),
                   failed=read_failed(given.get("failed_checks", "")), history=history, tried=_tried(history),
                   tools=tools, unallocated=unallocated, current=named[0] if named else "")


# --- deciding -----------------------------------------------------------------------------------
def propose(system: str, user: str) -> dict:
    """The mutation (kind, target, params, rationale) that addresses the weakest criterion."""
    ctx = read_context(system, user)
    standings = read_standings(inputs(user).get("judge_feedback", ""))
    ctx.feedback = {s.criterion: s.feedback for s in standings}
    if not standings:  # no judgement: the failed checks say what is wrong, else the answer's quality
        judged = "no judge scores"
        standings = [Standing("answer_plausibility" if ctx.failed else "output_quality", None, judged)]
    for remedy in _broken_tools(ctx):  # a tool that only fails is repaired before anything else
        if _untried(remedy, ctx):
            standing = next((s for s in standings if s.criterion == "collaboration_efficiency"),
                            Standing("collaboration_efficiency", None, ""))
            score = f"{standing.score:.2f}" if standing.score is not None else "not scored"
            return {**remedy.mutation, "rationale": f"addresses collaboration_efficiency ({score}, before the weakest "
                                                    f"criterion: a broken tool comes first): {remedy.why}"}
    spent: list[Standing] = []
    for standing in standings:
        for remedy in REMEDIES.get(standing.criterion, _output_quality)(ctx):
            if _untried(remedy, ctx):
                return {**remedy.mutation, "rationale": _rationale(standing, standings, spent, remedy)}
        spent.append(standing)
    return _last_resort(ctx, standings)


def _rationale(standing: Standing, standings: list[Standing], spent: list[Standing], remedy: Remedy) -> str:
    score = f"{standing.score:.2f}" if standing.score is not None else "not scored"
    if not spent:
        ties = [s.criterion for s in standings if s is not standing and s.score is not None
                and s.score == standing.score]
        where = "the weakest criterion" + (f", tied with {', '.join(ties)}" if ties else "")
    else:
        where = (f"the weakest with a remedy not yet tried; {', '.join(s.criterion for s in spent)} "
                 "has none left")
    return f"addresses {standing.criterion} ({score}, {where}): {remedy.why}"


def _untried(remedy: Remedy, ctx: Context) -> bool:
    m = remedy.mutation
    same = (m["kind"], m["target"], json.dumps(m["params"], sort_keys=True))
    if any((t.get("kind"), t.get("target"), json.dumps(t.get("params"), sort_keys=True)) == same for t in ctx.tried):
        return False
    if remedy.marker and remedy.marker.strip() in ctx.history:
        return False
    if m["kind"] == "prompt_refinement":
        return ctx.agents.get(m["target"], {}).get("prompt", "") != m["params"]["prompt"]
    return True


def _last_resort(ctx: Context, standings: list[Standing]) -> dict:
    limit = ctx.workflow.get("harness", {}).get("memory", {}).get("record_limit", 20)
    tried = {t.get("params", {}).get("record_limit") for t in ctx.tried if t.get("kind") == "memory_policy_change"}
    options = [x for x in (10, 5, 20, 40) if x != limit and x not in tried] or [x for x in (10, 5, 20, 40) if x != limit]
    first = standings[0].criterion if standings else "every criterion"
    return {"kind": "memory_policy_change", "target": "memory", "params": {"record_limit": options[0]},
            "rationale": f"every remedy for {first} and the other criteria is in the history; "
                         f"tries a record limit of {options[0]} for shared memory"}


# --- remedies per criterion -----------------------------------------------------------------------
def planner_id(agents: dict) -> str | None:
    return next((a for a, d in agents.items() if "planner" in d.get("roles", [])), None)


def _answered_already(ctx: Context, hint: Hint) -> bool:
    """The incumbent's approach has every trait the hint asks for: asking for it changes nothing."""
    try:
        strategy = get_strategy(ctx.current)
    except KeyError:  # no approach read, or one the library does not hold
        return False
    return bool(hint.tags) and hint.tags <= strategy.tags


def _ask_planner(ctx: Context, hint: Hint, why: str) -> Remedy | None:
    if _answered_already(ctx, hint):
        return None
    target = planner_id(ctx.agents)
    if target is None:
        return _procedure(ctx, "planner", " " + hint.text, why)
    return Remedy({"kind": "prompt_refinement", "target": target, "params": {"prompt": hint.text}},
                  f"{why}, so the planner is asked for {hint.label}", hint.text)


def _procedure(ctx: Context, role: str, addition: str, why: str) -> Remedy | None:
    current = ctx.procedures.get(role)
    if current is None or addition.strip() in current:
        return None
    return Remedy({"kind": "procedure_refinement", "target": role,
                   "params": {"procedure": current.rstrip() + addition}}, why, addition)


_SPECIALISED = frozenset({"physics", "symbolic", "discontinuity"})  # only worth it where the task calls for it


def _grounds(hint: Hint, facts: TaskFacts, report: str) -> tuple[int, str]:
    """(how well grounded, in words): 2 the task's facts call for it, 1 the data report mentions
    it, 0 a general-purpose change, -1 a specialised one nothing calls for."""
    wanted = hint.tags & (facts.desired_tags() | ({"classifier"} if facts.kind == CLASSIFICATION else set()))
    if wanted:
        said = [phrase for flag, phrase in ((facts.extrapolate, "must extrapolate"),
                                            (facts.physics, "welcomes known physics"),
                                            (facts.monotone, "is monotone"),
                                            (facts.discontinuity, "jumps"),
                                            (facts.kind == CLASSIFICATION, "asks for class labels")) if flag]
        return 2, "the task " + " and ".join(said or ["calls for " + ", ".join(sorted(wanted))])
    seen = sorted(t for t in hint.tags if t in report)
    if seen:
        return 1, f"the data report mentions {', '.join(seen)}"
    if hint.tags & _SPECIALISED:
        return -1, "nothing better grounded is left untried"
    return 0, "neither the task nor the data report singles out an approach"


def model_hints(ctx: Context) -> list[tuple[Hint, str]]:
    """Modelling changes that fit the task, best grounded first, each with its grounds."""
    facts = ctx.facts
    usable = [h for h in MODEL_HINTS if facts.kind in h.kinds and facts.allows(h.requires)
              and not (facts.extrapolate and h.tags & _FLAT_BEYOND_DATA)
              and not ("piecewise" in h.tags and not facts.discontinuity)]
    graded = [(_grounds(h, facts, ctx.report), i, h) for i, h in enumerate(usable)]
    graded.sort(key=lambda item: (-item[0][0], item[1]))  # equally grounded: the table's order
    return [(h, grounds) for (_, grounds), _, h in graded]


def _output_quality(ctx: Context, why: str = "") -> list[Remedy]:
    out = [_ask_planner(ctx, hint, (why + "; " if why else "") + grounds) for hint, grounds in model_hints(ctx)]
    out.insert(1, _fitting_tool(ctx))  # after the best-grounded modelling change
    return [r for r in out if r]


# --- tools -----------------------------------------------------------------------------------------
def _tool_change(agent: str, action: str, tool: str, why: str) -> Remedy:
    return Remedy({"kind": "tool_allocation", "target": agent, "params": {action: tool}}, why)


def _broken_tools(ctx: Context) -> list[Remedy]:
    """A tool every call of which failed in the incumbent's probe: it only costs calls and puts
    errors in the agent's context."""
    return [_tool_change(u.agent, "remove", u.tool,
                         f"every one of the {u.calls} call(s) of {u.tool} by {u.agent} failed in the incumbent's "
                         f"probe{f' (last error: {u.last_error[:160]})' if u.last_error else ''}; it costs calls "
                         f"and fills the agent's context with errors, so it is removed from {u.agent}")
            for u in ctx.tools if u.calls and not u.ok and u.agent in ctx.agents]


def _unused_tools(ctx: Context) -> list[Remedy]:
    return [_tool_change(u.agent, "remove", u.tool, f"{u.agent} was offered {u.tool} on every call and never "
                         "used it: fewer tools, shorter requests")
            for u in ctx.tools if not u.calls and u.agent in ctx.agents]


def _fitting_tool(ctx: Context) -> Remedy | None:
    """A curve-fitting tool for a planner without one, where the task welcomes a law."""
    planner = planner_id(ctx.agents)
    facts = ctx.facts
    if planner is None or not (facts.physics or facts.extrapolate or facts.monotone):
        return None
    fitter = next((t for t, d in sorted(ctx.unallocated.items()) if re.search(r"\bfit", d, re.I)), None)
    if fitter is None or fitter in ctx.agents[planner].get("tools", []):
        return None
    return _tool_change(planner, "add", fitter, f"the task welcomes a law; with {fitter} the planner measures how "
                                                "well one fits the training data (with uncertainties) before choosing")


def _safe_model(ctx: Context, why: str) -> list[Remedy]:
    """An extrapolation-safe, bounded model, then the fact-grounded laws (never a searched
    expression: it may run away beyond the data), then a bounds check by the coder."""
    hints = [SAFE_HINT] + ([LAW_HINT] if ctx.facts.kind != CLASSIFICATION else [])
    out = [_ask_planner(ctx, h, why) for h in hints]
    out.append(_procedure(ctx, "coder", CHECK_BOUNDS, why))
    return [r for r in out if r]


def _answer_plausibility(ctx: Context) -> list[Remedy]:
    failed = dict(ctx.failed)
    out: list[Remedy | None] = []
    if "finite" in failed:
        why = f"the finite check failed ({failed['finite']})"
        out += [_procedure(ctx, "coder", GUARD_FINITE, why + ": guard against NaN and inf")]
        out += _safe_model(ctx, why)
    if "within_range" in failed:
        detail = failed["within_range"]
        why = f"the within_range check failed ({detail})"
        if re.search(r"\bnot (increasing|decreasing) in\b", detail):
            out.append(_ask_planner(ctx, MONOTONE_HINT, why))
        out += _safe_model(ctx, why)
    if "beats_trivial" in failed:
        why = f"the beats_trivial check failed ({failed['beats_trivial']})"
        out += _safe_model(ctx, why) if ctx.facts.extrapolate else _output_quality(ctx, why)
    if "values_vary" in failed:
        out += _output_quality(ctx, f"the values_vary check failed ({failed['values_vary']}): "
                                    "the model learns nothing from the inputs")
    if "claims_match" in failed:
        out.append(_procedure(ctx, "finalizer", MEASURED_ONLY,
                              f"the claims_match check failed ({failed['claims_match']}): "
                              "the finalizer must report the measured score only"))
    if "hash_preserved" in failed:
        out.append(_procedure(ctx, "finalizer", KEEP_HASH, f"the hash_preserved check failed ({failed['hash_preserved']})"))
    if "no_placeholders" in failed:
        out += [_procedure(ctx, role, NO_PLACEHOLDERS, f"the no_placeholders check failed ({failed['no_placeholders']})")
                for role in ("coder", "finalizer")]
    delivery = [name for name in ("exit_ok", "output_exists", "output_schema") if name in failed]
    if delivery:
        why = f"the {delivery[0]} check failed ({failed[delivery[0]]})"
        out += [_procedure(ctx, "coder", DELIVER_CODER, why)]
    if not ctx.failed:
        why = "no public check failed, yet the judge doubts the answer"
        out += _safe_model(ctx, why) if ctx.facts.extrapolate else _output_quality(ctx, why)
    return [r for r in out if r]


def _collaboration_efficiency(ctx: Context) -> list[Remedy]:
    """A router first (a call that decides nothing), then fewer repair loops, unless the judge
    counted none: then less memory per call comes before the loops."""
    out: list[Remedy | None] = list(_unused_tools(ctx))
    wf = ctx.workflow
    for r, d in ctx.agents.items():
        if d.get("roles") == ["router"]:
            ins = [e for e in wf.get("edges", []) if e["target"] == r]
            outs = [e for e in wf.get("edges", []) if e["source"] == r]
            bypass = [{**o, "source": i["source"]} for i in ins for o in outs if i["artifact"] == o["artifact"]]
            out.append(Remedy({"kind": "agent_removal", "target": r, "params": {"bypass": bypass}},
                              f"the router {r} adds a model call without changing any decision"))
    out.append(_procedure(ctx, "debugger", ONE_PASS_REPAIR, "repair loops cost calls and tokens: fewer of them"))
    for route in wf.get("routes", []):
        if int(route.get("max_loops", 3)) > 1:
            cap = int(route["max_loops"]) - 1
            out.append(Remedy({"kind": "route_change", "target": route["source"],
                               "params": {"on": route["on"], "target": route["target"], "max_loops": cap}},
                              f"caps the {route['source']} -> {route['target']} repair loop at {cap}"))
    limit = wf.get("harness", {}).get("memory", {}).get("record_limit", 20)
    if limit > 5:
        smaller = max(5, limit // 2)
        memory = Remedy({"kind": "memory_policy_change", "target": "memory", "params": {"record_limit": smaller}},
                        f"each role retrieves {smaller} memory records instead of {limit}: fewer tokens per call")
        no_loops = re.search(r"\b0 repair loop", ctx.feedback.get("collaboration_efficiency", ""))
        routers = sum(1 for r in out if r and r.mutation["kind"] in ("agent_removal", "tool_allocation"))
        if no_loops:
            out.insert(routers, memory)
        else:
            out.append(memory)
    return [r for r in out if r]


def _goal_alignment(ctx: Context) -> list[Remedy]:
    why = "the team must always deliver the contracted predictions file"
    coder = _procedure(ctx, "coder", DELIVER_CODER, why + ": the coder writes it whatever the validation says")
    finalizer = _procedure(ctx, "finalizer", DELIVER_FINALIZER, why + ": the finalizer hands it on or says why not")
    # The judge names the agents that did not finish: start with the finalizer when it is one of them.
    unfinished = ctx.feedback.get("goal_alignment", "").partition("not finished cleanly:")[2]
    order = (finalizer, coder) if "finalizer" in unfinished else (coder, finalizer)
    return [r for r in order if r]


REMEDIES = {
    "output_quality": _output_quality,
    "answer_plausibility": _answer_plausibility,
    "collaboration_efficiency": _collaboration_efficiency,
    "goal_alignment": _goal_alignment,
}

__all__ = ["HINTS", "MODEL_HINTS", "TIE_ORDER", "planner_id", "propose", "read_standings"]
