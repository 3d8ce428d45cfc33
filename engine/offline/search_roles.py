"""The offline scientist's search roles: the judge and the mutator (Mimosa's meta-agent).

The judge scores from the evidence in its prompt (checks, executions, validation score);
the mutator (its reasoning is in mutator.py) reads those scores and the failed checks and
proposes the change that addresses the weakest criterion, avoiding what the history says was
already tried.
"""
from __future__ import annotations

import json
import math
import random
import re

from ..judge_rubric import OUTPUT_QUALITY_AT_BASELINE as AT_BASELINE
from ..prompt_format import json_block
from .mutator import HINTS, planner_id, propose
from .scientist import input_section, register

__all__ = ["HINTS", "judge", "mutator", "planner_id"]  # HINTS and planner_id: SciMARS's editor reads them here


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
    runs = execution.get("executions", [])
    failed_runs = sum(1 for x in runs if x.get("status") != "ok")
    retries = execution.get("retries", 0)
    # Efficiency is cost for what was achieved: a repair loop that ended in a delivered answer
    # with every agent done did its job and costs its round trip (and its tokens, counted
    # below); loops and failed executions that ended in nothing are waste.
    resolved = delivered and all_done and bool(runs) and runs[-1].get("status") == "ok"
    waste = 0.05 * retries if resolved else 0.15 * retries + 0.1 * failed_runs
    c = max(0.0, 1.0 - waste - min(0.2, execution.get("tokens", 0) / 200_000))
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
            f"{retries} repair loop(s){' that ended in a delivered answer' if resolved and retries else ''}, "
            f"{failed_runs} failed execution(s), "
            f"{execution.get('tokens', 0)} tokens over {execution.get('model_calls', 0)} calls.")},
        "output_quality": {"score": round(q, 4), "feedback": f"{shown}; "
                           + ("strong." if q > 0.8 else "room to improve the modelling approach." if q > 0.4
                              else "weak: the approach does not fit the data." if q >= AT_BASELINE
                              else "worse than a trivial baseline on the same folds.")},
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
    which any model looks good when the target is far from zero; mapped into [0, 1] by
    ``quality_of_skill`` so that candidates below the baseline still rank among themselves."""
    if not validation.get("ok") or validation.get("value") is None:
        return 0.0
    v, higher = float(validation["value"]), bool(validation.get("higher_is_better"))
    refs = [float(b) for b in (validation.get("baselines") or {}).values() if b is not None]
    if refs:
        best = max(refs) if higher else min(refs)
        if higher and best < 1.0:
            return quality_of_skill((v - best) / (1.0 - best))
        if not higher and best > 0.0:
            return quality_of_skill(1.0 - v / best)
    if higher:
        return max(0.0, min(1.0, v))  # r2 / accuracy already live in [0, 1] when they are any good
    return 1.0 / (1.0 + 10.0 * max(0.0, v))  # an error: 0 is perfect


def quality_of_skill(skill: float) -> float:
    """Output quality from skill over the best baseline (1 perfect, 0 the baseline's score,
    negative below it), as engine/judge.py's procedure states it: the baseline's score is
    AT_BASELINE, a perfect one 1; below the baseline the quality keeps falling towards 0 without
    reaching it (twice the baseline's distance from a perfect score is half of AT_BASELINE), so a
    candidate 36 % better than another, both below the baseline, is still judged better, and
    every one below the baseline stays below every one above it."""
    if not math.isfinite(skill):
        return 0.0
    if skill >= 0.0:
        return min(1.0, AT_BASELINE + (1.0 - AT_BASELINE) * skill)
    return AT_BASELINE / (1.0 - skill)


@register("mutator")
def mutator(system: str, user: str, rng: random.Random) -> str:
    # Reasoned from the judge's scores and the failed checks (mutator.py); no chance involved.
    return "```json\n" + json.dumps(propose(system, user), indent=1) + "\n```"


@register("reviewer")
def reviewer(system: str, user: str, rng: random.Random) -> str:
    """AgentCo-op's review: the repair options of the failed node arrive ranked, most specific
    first (the next skill from the library, the failure said in the node's prompt, one more repair
    loop), and none already tried; the offline reviewer takes the first, as a careful person would."""
    options = json_block(input_section(user, "options"))
    if isinstance(options, list) and options and isinstance(options[0], dict):
        return "The first ranked repair addresses the failure at its node.\n\n```json\n" \
            + json.dumps(options[0], indent=1) + "\n```"
    return "No repair option is given; I cannot propose one."
