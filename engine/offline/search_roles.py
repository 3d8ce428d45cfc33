"""The offline scientist's search roles: the judge and the mutator (Mimosa's meta-agent).

The judge scores from the evidence in its prompt (checks, executions, validation score);
the mutator proposes one change grounded in the data report and the judge's feedback,
avoiding what the history says was already tried.
"""
from __future__ import annotations

import json
import random
import re

from ..prompt_format import json_block
from .scientist import input_section, register

# Hints a mutator can add to a planner's instructions; words are the strategy library's tags.
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


@register("judge")
def judge(system: str, user: str, rng: random.Random) -> str:
    checks = re.findall(r"^- (PASS|FAIL) ([a-z_]+):", input_section(user, "public_checks"), re.M)
    execution = json_block(input_section(user, "execution")) or {}
    validation = execution.get("validation") or {}
    agents = execution.get("agents") or {}
    passed = sum(1 for s, _ in checks if s == "PASS")
    delivered = bool(validation.get("ok"))
    all_done = bool(agents) and all(s == "SUCCESS" for s in agents.values())
    g = 1.0 if delivered and all_done else 0.5 if delivered else 0.05
    failed_runs = sum(1 for x in execution.get("executions", []) if x.get("status") != "ok")
    c = max(0.0, 1.0 - 0.15 * execution.get("retries", 0) - 0.1 * failed_runs
            - min(0.2, execution.get("tokens", 0) / 200_000))
    q = _quality(validation)
    a = passed / len(checks) if checks else 0.0
    value = validation.get("value")
    best = _best_baseline(validation)
    shown = (f"{validation.get('metric')} = {value:.4g} on the validation split"
             + (f" (best trivial baseline on the same folds: {best[0].replace('_', ' ')} {best[1]:.4g})" if best else "")
             ) if delivered else \
        f"no validated answer ({validation.get('error', 'nothing delivered')})"
    answer = {
        "goal_alignment": {"score": round(g, 3), "feedback": (
            "Delivered predictions in the contracted form." if delivered else "Did not deliver a validated answer.")
            + ("" if all_done else f" Agents not finished cleanly: {', '.join(a for a, s in agents.items() if s != 'SUCCESS')}.")},
        "collaboration_efficiency": {"score": round(c, 3), "feedback": (
            f"{execution.get('retries', 0)} repair loop(s), {failed_runs} failed execution(s), "
            f"{execution.get('tokens', 0)} tokens over {execution.get('model_calls', 0)} calls.")},
        "output_quality": {"score": round(q, 3), "feedback": f"{shown}; "
                           + ("strong." if q > 0.8 else "room to improve the modelling approach." if q > 0.4
                              else "weak: the approach does not fit the data.")},
        "answer_plausibility": {"score": round(a, 3), "feedback": f"{passed} of {len(checks)} public checks passed."},
    }
    return json.dumps(answer, indent=1)


def _best_baseline(validation: dict) -> tuple[str, float] | None:
    items = [(n, float(b)) for n, b in (validation.get("baselines") or {}).items() if b is not None]
    if not items:
        return None
    return (max if validation.get("higher_is_better") else min)(items, key=lambda item: item[1])


def _quality(validation: dict) -> float:
    """Skill over the best trivial baseline on the same folds (1 - error / baseline error; for a
    score, the share of the way from the baseline to a perfect 1), not an absolute scale on
    which any model looks good when the target is far from zero."""
    if not validation.get("ok") or validation.get("value") is None:
        return 0.0
    v, higher = float(validation["value"]), bool(validation.get("higher_is_better"))
    refs = [float(b) for b in (validation.get("baselines") or {}).values() if b is not None]
    if refs:
        best = max(refs) if higher else min(refs)
        if higher and best < 1.0:
            return max(0.0, min(1.0, (v - best) / (1.0 - best)))
        if not higher and best > 0.0:
            return max(0.0, min(1.0, 1.0 - v / best))
    if higher:
        return max(0.0, min(1.0, v))  # r2 / accuracy already live in [0, 1] when they are any good
    return 1.0 / (1.0 + 10.0 * max(0.0, v))  # an error: 0 is perfect


@register("mutator")
def mutator(system: str, user: str, rng: random.Random) -> str:
    wf = json_block(input_section(user, "workflow")) or {}
    report = input_section(user, "report").lower()
    history = input_section(user, "history")
    agents = {a["id"]: a for a in wf.get("agents", [])}
    options = [_refine_planner, _refine_procedure, _toggle_router, _memory_change, _route_cap]
    weights = [0.55, 0.15, 0.1, 0.1, 0.1]
    for _ in range(10):
        make = rng.choices(options, weights)[0]
        mutation = make(agents, wf, report, history, rng)
        if mutation and json.dumps(mutation, sort_keys=True) not in history:
            return "```json\n" + json.dumps(mutation, indent=1) + "\n```"
    return "```json\n" + json.dumps(_memory_change(agents, wf, report, history, rng)) + "\n```"


def planner_id(agents: dict) -> str | None:
    return next((a for a, d in agents.items() if "planner" in d.get("roles", [])), None)


def _pick_hint(report: str, history: str, rng: random.Random) -> tuple[tuple[str, ...], str]:
    fitting = [k for k in HINTS if any(w in report for w in k)]
    untried = [k for k in HINTS if HINTS[k] not in history]
    pool = [k for k in fitting if k in untried] if rng.random() < 0.6 else untried
    key = rng.choice(pool or untried or list(HINTS))
    return key, HINTS[key]


def _refine_planner(agents, wf, report, history, rng) -> dict | None:
    target = planner_id(agents)
    if not target:
        return None
    tags, hint = _pick_hint(report, history, rng)
    return {"kind": "prompt_refinement", "target": target, "params": {"prompt": hint},
            "rationale": f"judge asks for better output quality; the report suggests {', '.join(tags)}"}


def _refine_procedure(agents, wf, report, history, rng) -> dict | None:
    procedures = wf.get("harness", {}).get("procedures", {})
    if "coder" not in procedures:
        return None
    extra = rng.choice([" Standardise features before distance- or gradient-based models.",
                        " Use a fixed random seed everywhere and refit on all rows after validation.",
                        " Print the validation score with six decimals."])
    if extra.strip() in procedures["coder"]:
        return None
    return {"kind": "procedure_refinement", "target": "coder", "params": {"procedure": procedures["coder"] + extra},
            "rationale": "make the coder's procedure more explicit"}


def _toggle_router(agents, wf, report, history, rng) -> dict | None:
    evidence = next((e["contract"] for e in wf.get("edges", []) if e["artifact"] == "execution_evidence"), None)
    routers = [a for a, d in agents.items() if d.get("roles") == ["router"]]
    if routers:
        r = routers[0]
        ins = [e for e in wf["edges"] if e["target"] == r]
        outs = [e for e in wf["edges"] if e["source"] == r]
        bypass = [{**o, "source": i["source"]} for i in ins for o in outs if i["artifact"] == o["artifact"]]
        return {"kind": "agent_removal", "target": r, "params": {"bypass": bypass},
                "rationale": "the router adds a call without changing any decision"}
    edge = next((e for e in wf.get("edges", []) if e["artifact"] == "execution_evidence"), None)
    if not edge or not evidence:
        return None
    return {"kind": "agent_addition", "target": "router", "params": {
        "agent": {"id": "router", "roles": ["router"], "inputs": {"execution_evidence": evidence},
                  "outputs": {"execution_evidence": evidence}},
        "remove_edges": [edge],
        "edges": [{**edge, "target": "router"}, {**edge, "source": "router"}]},
        "rationale": "add a router that checks the evidence before it is finalized"}


def _memory_change(agents, wf, report, history, rng) -> dict:
    limit = wf.get("harness", {}).get("memory", {}).get("record_limit", 20)
    return {"kind": "memory_policy_change", "target": "memory",
            "params": {"record_limit": rng.choice([x for x in (5, 10, 20, 40) if x != limit])},
            "rationale": "tune how much shared memory each role retrieves"}


def _route_cap(agents, wf, report, history, rng) -> dict | None:
    route = next(iter(wf.get("routes", [])), None)
    if not route:
        return None
    cap = rng.choice([x for x in (1, 2, 3, 4, 5) if x != route["max_loops"]])
    return {"kind": "route_change", "target": route["source"],
            "params": {"on": route["on"], "target": route["target"], "max_loops": cap},
            "rationale": f"change the repair loop cap to {cap}"}
