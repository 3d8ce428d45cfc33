"""The offline scientist's SciMARS roles: three independent editors and the reflector.

Each editor reads only its own prompt (the reference workflow, its public checks, validation
score, data report and the lessons so far) and proposes one change inside its surface; the
reflector turns the round's evidence into lessons quoting the numbers it was given.
"""
from __future__ import annotations

import json
import random
import re

from ..prompt_format import LESSONS, json_block, section
from .scientist import input_section, register
from .search_roles import HINTS, planner_id

REPORT_WORDS = ("outlier", "scale", "jump", "skew", "nonlinear", "correlation", "missing", "interaction")


def _answer(mutation: dict) -> str:
    return "```json\n" + json.dumps(mutation, indent=1) + "\n```"


def _inputs(system: str, user: str) -> tuple[dict, str, str, str]:
    wf = json_block(input_section(user, "workflow")) or {}
    report = input_section(user, "report").lower()
    lessons = section(system, LESSONS)
    checks = input_section(user, "public_checks")
    return wf, report, lessons, checks


@register("role_editor")
def role_editor(system: str, user: str, rng: random.Random) -> str:
    wf, report, lessons, checks = _inputs(system, user)
    agents = {a["id"]: a for a in wf.get("agents", [])}
    planner = planner_id(agents)
    current = agents.get(planner, {}).get("prompt", "") if planner else ""
    # Hints that fit the report first; a hint the lessons already report as tried is skipped.
    fitting = [k for k in HINTS if any(w in report for w in k)]
    untried = [k for k in HINTS if HINTS[k] not in lessons and HINTS[k] != current]
    pool = [k for k in fitting if k in untried] or untried
    if planner and pool:
        key = rng.choice(pool)
        grounded = [w for w in key if w in report]
        why = (f"the report mentions {', '.join(grounded)}" if grounded else "no earlier lesson tried it")
        return _answer({"kind": "prompt_refinement", "target": planner, "params": {"prompt": HINTS[key]},
                        "rationale": f"steer the planner: {why}"})
    procedures = wf.get("harness", {}).get("procedures", {})
    base = procedures.get("coder", "")
    extra = rng.choice([" Standardise features before distance- or gradient-based models.",
                        " Use a fixed random seed everywhere and refit on all rows after validation."])
    if "FAIL" in checks:
        extra = " Check the predictions file against its contract before finishing."
    return _answer({"kind": "procedure_refinement", "target": "coder", "params": {"procedure": base + extra},
                    "rationale": "make the coder's procedure address what the checks and lessons show"})


@register("coordination_editor")
def coordination_editor(system: str, user: str, rng: random.Random) -> str:
    wf, report, lessons, checks = _inputs(system, user)
    routes = wf.get("routes", [])
    route = next((r for r in routes if r.get("source") == "verifier" and r.get("on") == "RETRY"), None) \
        or next(iter(routes), None)
    if route:
        tried = {int(x) for x in re.findall(r'"max_loops": (\d+)', lessons)}
        caps = [c for c in (1, 2, 3, 4, 5) if c != route["max_loops"] and c not in tried] \
            or [c for c in (1, 2, 3, 4, 5) if c != route["max_loops"]]
        failing = "FAIL" in checks
        cap = max(caps) if failing else rng.choice(caps)
        return _answer({"kind": "route_change", "target": route["source"],
                        "params": {"on": route["on"], "target": route["target"], "max_loops": cap},
                        "rationale": (f"{'checks fail: allow more repairs' if failing else 'all checks pass'}; "
                                      f"set the {route['source']} {route['on']} loop cap from "
                                      f"{route['max_loops']} to {cap}")})
    edge = next((e for e in wf.get("edges", []) if e.get("contract") == "markdown"), None)
    if edge:
        return _answer({"kind": "contract_change", "target": f"{edge['source']}->{edge['target']}:{edge['artifact']}",
                        "params": {"contract": "str"}, "rationale": "loosen one markdown handoff to plain text"})
    return _answer({"kind": "route_change", "target": "verifier",
                    "params": {"on": "RETRY", "target": "debugger", "max_loops": 2},
                    "rationale": "add a repair loop"})


# What the memory editor can change, each a retrieval change for the role that plans; the
# first untried one that the evidence calls for is proposed.
def _memory_options(policy: dict, report: str, checks: str, lessons: str = "") -> list[tuple[dict, str]]:
    planner = (policy.get("roles") or {}).get("planner") or {}
    retrieves, limit = list(planner.get("retrieves", [])), int(planner.get("limit", 8))
    hints = list(planner.get("hints", []))
    options: list[tuple[dict, str]] = []
    # Explore or exploit: a planner given the check results and scores of earlier runs tries
    # approaches not tried yet; one not given them returns to its first choice. The lessons say
    # which has been paying off.
    helped, failed = lessons.count(" was supported"), lessons.count(" was not supported")
    if "check_result" not in retrieves:
        options.append(({"role": "planner", "retrieves": retrieves + ["check_result"]},
                        "the planner is not given the verifier's check results or Trellis's scores; give them, "
                        "so it tries approaches not tried yet"))
    elif failed > helped:
        options.append(({"role": "planner", "retrieves": [k for k in retrieves if k != "check_result"]},
                        f"the lessons count {failed} unsupported change(s) and {helped} supported: the planner, "
                        "given earlier scores, keeps leaving a good approach for untried worse ones; stop giving "
                        "it check results"))
    seen = [w for w in REPORT_WORDS if w in report and w not in hints]
    if seen:
        options.append(({"role": "planner", "hints": sorted(set(hints) | set(seen[:3]))},
                        f"the report mentions {', '.join(seen[:3])}; rank the planner's records by them"))
    if "FAIL" in checks and "check_result" not in planner.get("subscribes", []):
        options.append(({"role": "planner", "subscribes": sorted(set(planner.get("subscribes", [])) | {"check_result"})},
                        "checks failed: push every new check result to the planner"))
    for new in (max(2, limit // 2), min(64, limit * 2)):
        if new != limit:
            options.append(({"role": "planner", "limit": new},
                            f"change how many records the planner retrieves from {limit} to {new}"))
    if "plan" in retrieves:
        options.append(({"role": "planner", "retrieves": [k for k in retrieves if k != "plan"]},
                        "stop giving the planner its earlier plans: the check results and scores say what they did"))
    return options


@register("memory_editor")
def memory_editor(system: str, user: str, rng: random.Random) -> str:
    wf, report, lessons, checks = _inputs(system, user)
    options = _memory_options(wf.get("harness", {}).get("memory", {}), report, checks, lessons)
    untried = [(p, why) for p, why in options if json.dumps(p, sort_keys=True)[:200] not in lessons]
    params, why = (untried or options)[0] if (untried or options) else ({"role": "planner", "limit": 4}, "fewer records")
    return _answer({"kind": "memory_policy_change", "target": f"memory.{params['role']}", "params": params,
                    "rationale": why})


def _num(x) -> str:
    return "none" if x is None else f"{x:.4g}"


@register("reflector")
def reflector(system: str, user: str, rng: random.Random) -> str:
    ev = json_block(input_section(user, "round_evidence")) or {}
    ref = ev.get("reference") or {}
    metric = ev.get("metric", "validation")
    n = ev.get("round", "?")
    lessons = []
    for p in ev.get("proposals", []):
        if not p.get("valid"):
            lessons.append(f"round {n}: the {p['editor']}'s proposal was rejected: {'; '.join(p.get('problems', []))[:160]}")
            continue
        res = p.get("result") or {}
        change = f"{p.get('kind')} on {p.get('target')} {json.dumps(p.get('params'), sort_keys=True)[:200]}"
        delta = p.get("delta")
        lessons.append(
            f"round {n}: {change} was {'supported' if p.get('supported') else 'not supported'}: {metric} "
            f"{_num(res.get('validation'))} vs reference {_num(ref.get('validation'))}"
            + (f" ({delta:+.4g})" if delta is not None else "")
            + f", checks {res.get('checks_passed')}/{res.get('checks_total')} vs "
              f"{ref.get('checks_passed')}/{ref.get('checks_total')}")
    for r in ev.get("reused") or []:
        lessons.append(f"round {n}: {r.get('label')} " + (
            f"is the evidence of execution {r.get('reused_run_id')}, reused with a verified receipt, not a new run"
            if r.get("verified") else f"could not be reused and ran again ({r.get('reason')})"))
    chosen = ev.get("chosen") or []
    lessons.append(f"round {n}: the composer chose to {ev.get('decision', 'keep')}"
                   + (f" the {' and '.join(chosen)} change(s)" if chosen else " the reference")
                   + f"; selected {metric} {_num((ev.get('selected') or {}).get('validation'))}")
    return _answer({"lessons": lessons})
