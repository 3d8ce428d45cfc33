"""The offline scientist's roles in the evolutionary tree search (engine/search/tree.py):
selector, proposer, critic, engineer and result analyst. The debugger is the scientist's
own (it repairs from the traceback with fix_bug, else rewrites from the strategy).

Each role reads only its prompt: node listings, the parent's strategy line and report, the
retrieved knowledge entry, the debate so far. Choices are seeded by the scientist's rng
(run seed + what the prompt says), so a run is reproducible and different runs vary.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
import re

from ..prompt_format import extract_strategy, strategy_line
from . import scientist
from .blend import BLEND, blendable, fallback
from .reading import read_facts
from .scientist import applicable, data_spec, input_section, register, seed_of, strategy_from, words
from .strategies import inject_bug
from .strategy import DataSpec, Strategy

EXPLOIT_RATE = 0.7      # how often a selector votes for the best listed node
UNCHANGED_WITHIN = 0.005  # relative score change the result analyst calls "unchanged"
_TRIED = re.compile(r"^- (n\d+): ([a-z0-9_]+) (\{.*\}) score=", re.M)
_REJECTED = re.compile(r"^rejected:\s*([a-z0-9_]+)\s*(\{.*\})?\s*$", re.M)
_AVOID = re.compile(r"^avoid:\s*([a-z0-9_]+)", re.M)
_CANDIDATE = re.compile(r"^- (n\d+) score=(\S+) children=(\d+)/(\d+) strategy=(\S+)(.*)$", re.M)
_SCORED = re.compile(r"^- (n\d+): ([a-z0-9_]+) (\{.*\}) score=(\S+)( fails .*)?\s*$", re.M)
# A partner worth blending scores no worse than this fraction of the best node's own magnitude
# below it: averaging with a much worse model drags the blend towards it.
COMPARABLE = 0.5


# --- reading strategy lines -----------------------------------------------------------------------
def _json(text: str | None) -> dict:
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _fingerprint(strategy: Strategy, params: dict, spec: DataSpec) -> str:
    """What the program would be, not how its parameters are spelled: two configurations
    that render the same code (a parameter the chosen variant never reads) are the same
    experiment, and running both would waste a child."""
    params = {k: v for k, v in params.items() if k in strategy.param_grid}
    try:
        code = strategy.render(params, spec, 0)
    except ValueError:
        return f"{strategy.key} {json.dumps(params, sort_keys=True, default=str)}"
    body = code.split("\n", 1)[1]  # the first line spells out the parameters; the rest is the program
    return f"{strategy.key}:{hashlib.sha256(body.encode()).hexdigest()[:16]}"


def _options(user: str) -> dict[str, Strategy]:
    # What a scientist would consider for this task: no tree or neighbour model when it must extrapolate;
    # and a blend of those, once the tree has run them.
    return {**{s.key: s for s in applicable(read_facts("", user))}, BLEND.key: BLEND}


def _tried(user: str, options: dict[str, Strategy]) -> dict[str, str]:
    """program fingerprint -> node that already tried it."""
    spec, out = data_spec(user), {}
    for m in _TRIED.finditer(input_section(user, "tried")):
        if m.group(2) in options:
            out.setdefault(_fingerprint(options[m.group(2)], _json(m.group(3)), spec), m.group(1))
    return out


# --- selector ---------------------------------------------------------------------------------------
@register("selector")
def _selector(system: str, user: str, rng: random.Random) -> str:
    listing = input_section(user, "candidates")
    higher = "higher is better" in listing
    nodes = []
    for m in _CANDIDATE.finditer(listing):
        try:
            nodes.append((m.group(1), float(m.group(2)), int(m.group(3)), m.group(5), " fails " in m.group(6)))
        except ValueError:
            continue  # a node without a score is no candidate
    if not nodes:
        return "vote: none\nreason: no scored node is listed."
    # A score earned by predictions that fail a plausibility check is no line to build on.
    ranked = sorted(nodes, key=lambda n: (n[4], -n[1] if higher else n[1], n[2]))
    if len(ranked) == 1 or rng.random() < EXPLOIT_RATE:
        pick = ranked[0]
        reason = (f"{pick[0]} ({pick[3]}) has the best validation score listed, {pick[1]:.6g}"
                  + (", among the nodes that pass their checks." if any(n[4] for n in ranked) else "."))
    else:
        # Explore: any other node, favouring those with few children (less explored).
        others = ranked[1:]
        pick = rng.choices(others, weights=[(0.25 if n[4] else 1.0) / (1 + n[2]) for n in others])[0]
        reason = (f"exploring {pick[0]} ({pick[3]}, score {pick[1]:.6g}): it has only {pick[2]} "
                  f"child(ren), and the best node is not the only promising line.")
    return f"vote: {pick[0]}\nreason: {reason}"


# --- proposer ---------------------------------------------------------------------------------------
def _knowledge(user: str, options: dict[str, Strategy]) -> tuple[str, set[str], list[tuple[str, dict]]]:
    """(title, tag words, strategy hints) of the retrieved entry, if any."""
    text = input_section(user, "knowledge")
    title = re.search(r"^title:\s*(.+)$", text, re.M)
    tags = re.search(r"^tags:\s*(.+)$", text, re.M)
    hints_line = re.search(r"^strategies:\s*(.+)$", text, re.M)
    words = set(re.split(r"[\s,\-]+", tags.group(1).lower())) if tags else set()
    hints = []
    for part in (hints_line.group(1).split(";") if hints_line else []):
        m = re.match(r"^\s*([a-z0-9_]+)\s*(\{.*\})?\s*$", part)
        if m and m.group(1) in options:
            hints.append((m.group(1), _json(m.group(2))))
    return (title.group(1).strip() if title else ""), words, hints


def _mutate(strategy: Strategy, params: dict, rng: random.Random) -> tuple[dict, str]:
    """Change one hyperparameter to another value of its grid."""
    tunable = [k for k, v in sorted(strategy.param_grid.items()) if len(v) > 1]
    if not tunable:
        return dict(params), "no tunable parameter"
    name = rng.choice(tunable)
    current = json.dumps(params.get(name))
    value = rng.choice([v for v in strategy.param_grid[name] if json.dumps(v) != current])
    return {**params, name: value}, f"{name} {params.get(name)!r} -> {value!r}"


def _params_for(strategy: Strategy, parent: tuple[str, dict] | None, hints: list[tuple[str, dict]],
                blocked: set[str], spec: DataSpec, rng: random.Random) -> tuple[dict, str] | None:
    """Parameters for ``strategy`` that nobody has tried yet, with a note on what changed."""
    # A strategy new to this branch starts from its conventional settings (as the planner's first
    # plan does); the tree's tuning is the one-parameter mutations from there.
    same = parent is not None and parent[0] == strategy.key
    base = dict(parent[1]) if same else strategy.default_params()
    base = {k: v for k, v in base.items() if k in strategy.param_grid}
    hint = next((p for k, p in hints if k == strategy.key), None)
    params, note = ({**base, **hint}, f"knowledge suggests {json.dumps(hint, sort_keys=True)}") if hint is not None \
        else (base, "its conventional settings")
    if same and hint is None:
        params, note = _mutate(strategy, params, rng)
    for _ in range(12):
        if _fingerprint(strategy, params, spec) not in blocked:
            return params, note
        params, note = _mutate(strategy, params, rng)
    return None


def _proposal_score(s: Strategy, parent_key: str | None, ktags: set[str], report: set[str],
                    hinted: set[str], rng: random.Random, needed: frozenset[str] = frozenset()) -> float:
    # Chance, nudged by the knowledge entry (strongly), by what the task needs (a law, a jump)
    # and by the reports (less); a constant predictor is a floor, never a proposal worth a child.
    score = rng.random() + 0.6 * min(len(s.tags & ktags), 3) + 0.2 * min(len(s.tags & report), 2)
    score += 0.4 * min(len(s.tags & needed), 3)
    score += 1.0 if s.key in hinted else 0.0
    score += 0.25 if s.key == parent_key else 0.0  # refining what works is often a good move
    score -= 3.0 if s.key == scientist.CONSTANT_STRATEGY else 0.0
    return score


@register("proposer")
def _proposer(system: str, user: str, rng: random.Random) -> str:
    options, spec = _options(user), data_spec(user)
    parent = extract_strategy(input_section(user, "parent"))
    parent = parent if parent and parent[0] in options else None
    report = words(input_section(user, "parent_report") + " " + input_section(user, "data_findings"))
    title, ktags, hints = _knowledge(user, options)
    debate = input_section(user, "debate")
    rejected = {_fingerprint(options[m.group(1)], _json(m.group(2)), spec)
                for m in _REJECTED.finditer(debate) if m.group(1) in options}
    avoid = set(_AVOID.findall(debate))
    blocked = set(_tried(user, options)) | rejected
    if parent:
        blocked.add(_fingerprint(options[parent[0]], parent[1], spec))
    blend = None if BLEND.key in avoid else _blend_of_the_best(user, options, parent, blocked, spec)
    if blend is not None:
        return blend
    hinted = {k for k, _ in hints}
    needed = frozenset(read_facts(system, user).desired_tags())
    # The result analyst found the parent's own change made no difference: its advice is a
    # structurally different strategy, not another setting of the same one.
    stale = parent[0] if parent and re.search(r"^verdict:\s*unchanged\b", input_section(user, "parent_report"),
                                              re.M) else None
    considered = [s for s in options.values() if s.key not in avoid and s is not BLEND]
    considered = [s for s in considered if s.key != stale] or considered
    ranked = sorted(considered, key=lambda s: -_proposal_score(s, parent[0] if parent else None, ktags, report,
                                                               hinted, rng, needed))
    for strategy in ranked:
        found = _params_for(strategy, parent, hints, blocked, spec, rng)
        if found is not None:
            return _write_proposal(strategy, found[0], found[1], parent, title, ktags, report, bool(debate))
    fallback = ranked[0] if ranked else next(iter(options.values()))
    return _write_proposal(fallback, fallback.default_params(), "nothing untried is left", parent, title,
                           ktags, report, bool(debate))


def _blend_of_the_best(user: str, options: dict[str, Strategy], parent: tuple[str, dict] | None,
                       blocked: set[str], spec: DataSpec) -> str | None:
    """When the parent is the best node of the tree that passes its checks, the proposal to blend
    it with the best such node of another approach that scores comparably (a team combining its two
    best lines); None when there is no such partner, the blend was tried, or the critic ruled
    blends out."""
    if parent is None or parent[0] not in options or not blendable(options[parent[0]]):
        return None
    higher = "higher is better" in input_section(user, "parent")
    scored = []
    for m in _SCORED.finditer(input_section(user, "tried")):
        try:
            score = float(m.group(4))
        except ValueError:
            continue
        # a node whose predictions fail a plausibility check is no line to build on, nor to average in
        if m.group(2) in options and math.isfinite(score) and not m.group(5):
            scored.append((m.group(1), m.group(2), _json(m.group(3)), score))
    if not scored:
        return None
    sign = 1.0 if higher else -1.0
    scored.sort(key=lambda n: -sign * n[3])
    best = scored[0]
    same = options[parent[0]]
    if best[1] != parent[0] or _fingerprint(same, best[2], spec) != _fingerprint(same, parent[1], spec):
        return None  # blend from the best line only; the others are explored as they are
    floor = best[3] - sign * COMPARABLE * abs(best[3])
    partners = [n for n in scored[1:] if n[1] != best[1] and blendable(options[n[1]])
                and sign * (n[3] - floor) >= 0]
    if not partners:
        return None
    partner = partners[0]
    try:
        params = BLEND.resolve_params({"parts": [[best[1], best[2]], [partner[1], partner[2]]]})
    except ValueError:
        return None
    if _fingerprint(BLEND, params, spec) in blocked:
        return None
    return "\n".join([strategy_line(BLEND.key, params),
                      f"change: blend the best node {best[0]} ({best[1]}, {best[3]:.6g}) with the best of another "
                      f"approach, {partner[0]} ({partner[1]}, {partner[3]:.6g})",
                      "rationale: two different models that validate comparably make different errors, so their "
                      "mean should vary less than either; the folds will say whether it does here."])


def _write_proposal(strategy: Strategy, params: dict, note: str, parent: tuple[str, dict] | None, title: str,
                    ktags: set[str], report: set[str], revising: bool) -> str:
    if parent is None:
        change = f"first candidate: {strategy.title}"
    elif parent[0] == strategy.key:
        change = f"keep {strategy.key}, {note}"
    else:
        change = f"switch from {parent[0]} to {strategy.key} ({strategy.title}); {note}"
    why = [f"its traits ({', '.join(sorted(strategy.tags))})"]
    if strategy.tags & report:
        why.append(f"fit what the reports say ({', '.join(sorted(strategy.tags & report))})")
    if title:
        shared = sorted(strategy.tags & ktags)
        why.append(f"the knowledge entry \"{title}\" points this way" + (f" (shared tags: {', '.join(shared)})"
                                                                         if shared else ""))
    lines = [strategy_line(strategy.key, params), f"change: {change}",
             f"rationale: {'; '.join(why)}."]
    if revising:
        lines.append("revision: answers the critic's objections; no rejected configuration is repeated.")
    return "\n".join(lines)


# --- critic -------------------------------------------------------------------------------------------
def _contradiction(strategy: Strategy, findings: str) -> str | None:
    """Why the strategy's assumptions clash with the data findings, or None."""
    text = findings.lower()
    tags = strategy.tags
    if "discontinuity" in text and "no dominant jump" not in text:
        if "smooth" in tags and not tags & {"piecewise", "discontinuity", "nonparametric", "trees"}:
            return (f"the data findings show a discontinuity, but {strategy.key} ({', '.join(sorted(tags))}) is one "
                    "smooth global model: it will ring around the jump")
    if "very different scales" in text:
        if tags & {"nonparametric", "kernel", "neural", "linear"} and not tags & {"scaling", "trees"}:
            return (f"the features are on very different scales, but {strategy.key} does not scale them, so "
                    "large-unit features dominate")
    return None


@register("critic")
def _critic(system: str, user: str, rng: random.Random) -> str:
    options = _options(user)
    proposal = extract_strategy(input_section(user, "proposal"))
    parent = extract_strategy(input_section(user, "parent"))
    findings = input_section(user, "data_findings") + "\n" + input_section(user, "parent_report")
    if proposal is None or proposal[0] not in options:
        return ("verdict: revise\nobjection: the proposal names no strategy of the library; write "
                "`strategy: <key> <json parameters>`.")
    strategy, params, spec = options[proposal[0]], proposal[1], data_spec(user)
    program = _fingerprint(strategy, params, spec)
    objections, avoid = [], False
    if parent and parent[0] in options and program == _fingerprint(options[parent[0]], parent[1], spec):
        objections.append("it repeats the parent's strategy and parameters (it renders the parent's very "
                          "program); the child would be a copy")
    elif program in (tried := _tried(user, options)):
        objections.append(f"this configuration renders the same program that {tried[program]} already ran")
    clash = _contradiction(strategy, findings)
    if clash:
        objections.append(clash)
        avoid = True
    if parent and strategy.key == scientist.CONSTANT_STRATEGY:
        objections.append("a constant predictor cannot beat a parent that learned something")
        avoid = True
    if not objections:
        return (f"verdict: accept\nno objection: {strategy.key} with {json.dumps(params, sort_keys=True)} is new "
                "in this tree and its assumptions do not contradict the findings.")
    lines = ["verdict: revise", *[f"objection: {o}" for o in objections],
             f"rejected: {strategy.key} {json.dumps(params, sort_keys=True)}"]
    if avoid:
        lines.append(f"avoid: {strategy.key}")
    return "\n".join(lines)


# --- engineer ---------------------------------------------------------------------------------------
@register("engineer")
def _engineer(system: str, user: str, rng: random.Random) -> str:
    spec = data_spec(user)
    strategy, params = strategy_from(input_section(user, "proposal"), read_facts(system, user))
    params = {k: v for k, v in params.items() if k in strategy.param_grid}
    try:
        code = strategy.render(params, spec, seed_of(user, rng))
    except ValueError:  # a value outside the strategy's options
        strategy, params = fallback(strategy, params)
        code = strategy.render(params, spec, seed_of(user, rng))
    if strategy is BLEND:
        note = f"Blend of {', '.join(key for key, _ in params['parts'])}, each part the program the tree ran."
    else:
        note = f"Implementation of {strategy.title} with {json.dumps(params, sort_keys=True)}, as proposed."
    # A realistic first draft the debugger will meet; a blend only assembles programs that already ran.
    if rng.random() < scientist.BUG_RATE and strategy is not BLEND:
        code, _kind = inject_bug(code, rng)
    return f"{note}\n\n```python\n{code.rstrip()}\n```"


# --- result analyst -------------------------------------------------------------------------------------
_SIDE = r"^{side}: (n\d+) (\S+) score=(\S+)"


@register("result_analyst")
def _result_analyst(system: str, user: str, rng: random.Random) -> str:
    comparison = input_section(user, "comparison")
    higher = "higher is better" in comparison
    metric = re.search(r"^metric: (\S+)", comparison, re.M)
    parent = re.search(_SIDE.format(side="parent"), comparison, re.M)
    child = re.search(_SIDE.format(side="child"), comparison, re.M)
    try:
        p_score, c_score = float(parent.group(3)), float(child.group(3))
    except (AttributeError, ValueError):
        return "verdict: unchanged\n- the comparison gave no two scores to compare."
    gain = (c_score - p_score) if higher else (p_score - c_score)
    relative = gain / max(abs(p_score), 1e-12)
    verdict = "unchanged" if abs(relative) <= UNCHANGED_WITHIN else ("improved" if gain > 0 else "regressed")
    options = _options(user)
    traits = sorted(options[child.group(2)].tags) if child.group(2) in options else []
    findings = [ln for ln in input_section(user, "data_findings").splitlines() if ln.startswith("- ")]
    signals = [ln for ln in input_section(user, "execution").splitlines() if ln.startswith("jump_location")]
    nxt = {"improved": "expand this node: tune the parameters that drove the gain",
           "regressed": f"prefer the parent's line ({parent.group(2)}) or an approach that fits the findings better",
           "unchanged": "the change made no difference; try a structurally different strategy"}[verdict]
    lines = [f"verdict: {verdict}",
             f"- {child.group(1)} ({child.group(2)}) scored {c_score:.6g} against its parent {parent.group(1)} "
             f"({parent.group(2)}) at {p_score:.6g} on {metric.group(1) if metric else 'the metric'} "
             f"({'higher' if higher else 'lower'} is better): {abs(relative) * 100:.1f}% "
             f"{'better' if gain > 0 else 'worse' if gain < 0 else 'different'}.",
             f"- approach traits: {', '.join(traits) or 'unknown'}."]
    lines += [f"- from the run: {s}" for s in signals[:1]]
    if findings:
        lines.append("- data findings that still matter:")
        lines += [f"  {ln}" for ln in findings[:4]]
    lines.append(f"- next: {nxt}.")
    return "\n".join(lines)
