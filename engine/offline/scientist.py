"""The scripted scientist: reads a role prompt the way a model would and answers it.

Choices are seeded by the run's seed and the exact prompt, so the same request always gets
the same answer (which keeps replay and the request cache honest) while different runs vary.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from typing import Callable

from ..prompts import extract_code, role_of
from .strategies import DataSpec, Strategy, family_of, fix_bug, inject_bug, render_analysis_script, strategies_for

CONSTANT_STRATEGY = "mean_baseline"  # predicts one number; switching away is the only repair
BUG_RATE = 0.3  # how often a first draft has a mistake for the debugger to find


def respond(messages: list[dict], seed: int = 0) -> str:
    system = next((m["content"] for m in messages if m.get("role") == "system"), "")
    user = "\n".join(m["content"] for m in messages if m.get("role") == "user")
    role = role_of(system)
    _load_extensions()
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    rng = random.Random(f"{seed}:{role}:{digest}")
    handler = _ROLES.get(role or "")
    if handler is None:
        return ("STATUS: FAILURE\nThe offline scientist only plays Trellis roles "
                f"({', '.join(_ROLES)}); it cannot answer this prompt.")
    return handler(system, user, rng)


# --- reading the prompt ---------------------------------------------------------------------
def _section(text: str, heading: str) -> str:
    m = re.search(rf"^## {re.escape(heading)}\s*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1).strip() if m else ""


def _data_spec(user: str) -> DataSpec:
    def one(pattern: str, default: str = "") -> str:
        m = re.search(pattern, user, re.M)
        return m.group(1) if m else default

    features = re.search(r"^- feature columns: (.+)$", user, re.M)
    return DataSpec(
        train_path=one(r"^- train: `([^`]+)`", "data/train.csv"),
        test_path=one(r"^- test_features: `([^`]+)`", "data/test_features.csv"),
        target=one(r"^- target column: `([^`]+)`", "y"),
        features=tuple(re.findall(r"`([^`]+)`", features.group(1))) if features else ("x",),
        id_column=one(r"^- id column: `([^`]+)`", "id"),
        predictions_file=one(r"^- write predictions to `([^`]+)`", "predictions.csv"),
    )


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


# --- roles ----------------------------------------------------------------------------------
def _analyzer(system: str, user: str, rng: random.Random) -> str:
    spec = _data_spec(user)
    return ("I will start with an exploratory pass over the training data before anyone models it.\n\n"
            f"```python\n{render_analysis_script(spec).rstrip()}\n```")


def _score(strategy: Strategy, instructions: set[str], report: set[str], rng: random.Random) -> float:
    # Mostly chance, nudged by what the instructions ask for and, less, by what the data shows:
    # a scientist without guidance picks what they know; guidance (a refined procedure, a
    # lesson) is what makes the team better, which is what evolution is meant to find.
    asked = len(strategy.tags & instructions)
    seen = len(strategy.tags & report)
    return rng.random() + 0.6 * min(asked, 3) + 0.15 * min(seen, 2)


def _planner(system: str, user: str, rng: random.Random) -> str:
    spec = _data_spec(user)
    family = family_of(spec)
    instructions = _words(_section(system, "Agent instructions") + " " + _section(system, "Lessons from earlier runs")
                          + " " + _section(system, "Procedure"))
    report = _words(_section(user, "Input: report"))
    ranked = sorted(strategies_for(family), key=lambda s: -_score(s, instructions, report, rng))
    choice = ranked[0]
    params = {k: rng.choice(list(v)) for k, v in sorted(choice.param_grid.items())}
    alt = ranked[1].title if len(ranked) > 1 else "none"
    return "\n".join([
        f"# Plan: {choice.title}",
        "",
        f"strategy: {choice.key} {json.dumps(params, sort_keys=True)}",
        "",
        f"**Approach.** {choice.title} on feature(s) {', '.join(spec.features)} to predict `{spec.target}`.",
        f"**Why.** Its strengths ({', '.join(sorted(choice.tags))}) fit this {family.replace('_', ' ')} problem.",
        "**Validation.** Hold out 20% of the training rows, report the validation error, then refit on all rows.",
        f"**Risks.** Hyperparameters {json.dumps(params, sort_keys=True)} are untuned; runner-up was {alt}.",
    ])


_STRATEGY_LINE = re.compile(r"^\s*(?:#\s*)?strategy:\s*([a-z0-9_]+)\s*(\{.*\})?\s*$", re.M)


def _strategy_from(text: str, family: str) -> tuple[Strategy, dict]:
    options = {s.key: s for s in strategies_for(family)}
    m = _STRATEGY_LINE.search(text)
    if m and m.group(1) in options:
        try:
            params = json.loads(m.group(2) or "{}")
        except json.JSONDecodeError:
            params = {}
        return options[m.group(1)], params
    first = next(iter(options.values()))
    return first, {k: v[0] for k, v in first.param_grid.items()}


def _seed_of(user: str, rng: random.Random) -> int:
    return rng.randrange(10_000)


def _coder(system: str, user: str, rng: random.Random) -> str:
    spec = _data_spec(user)
    strategy, params = _strategy_from(_section(user, "Input: plan"), family_of(spec))
    code = strategy.render(params, spec, _seed_of(user, rng))
    note = f"Implementation of {strategy.title} as planned."
    if rng.random() < BUG_RATE:
        code, _kind = inject_bug(code, rng)  # a realistic first draft; the verifier will catch it
    return f"{note}\n\n```python\n{code.rstrip()}\n```"


def _debugger(system: str, user: str, rng: random.Random) -> str:
    code = extract_code(_section(user, "Input: code")) or ""
    feedback = _section(user, re.search(r"^## (Feedback from [^\n]+)", user, re.M).group(1)) \
        if re.search(r"^## Feedback from", user, re.M) else ""
    stderr = _evidence_field(feedback, "stderr_tail") or feedback
    fixed = fix_bug(code, stderr) if code else None
    if fixed is not None and fixed != code:
        cause = _last_error_line(stderr) or "the reported error"
        return f"Cause: {cause}. Fixed the implicated line.\n\n```python\n{fixed.rstrip()}\n```"
    spec = _data_spec(user)
    family = family_of(spec)
    strategy, params = _strategy_from(code, family)
    failed_checks = re.findall(r'"name": "([a-z_]+)",\s*"passed": false', feedback)
    if "values_vary" in failed_checks:
        # The program ran but learned nothing: no repair of this approach helps, so change it.
        others = [s for s in strategies_for(family) if s.key not in {strategy.key, CONSTANT_STRATEGY}]
        new = rng.choice(others)
        params = {k: rng.choice(list(v)) for k, v in sorted(new.param_grid.items())}
        rewritten = new.render(params, spec, _seed_of(user, rng))
        return (f"Cause: the predictions do not vary ({strategy.key} learns nothing from x). Switched to "
                f"{new.title}.\n\n```python\n{rewritten.rstrip()}\n```")
    # Not a bug it recognises: rewrite the script cleanly from the strategy it implements.
    if "timeout" in feedback or "memory" in feedback:
        params = {k: v[0] for k, v in strategy.param_grid.items()}  # the cheapest settings
    rewritten = strategy.render(params, spec, _seed_of(user, rng))
    return (f"Cause: {_last_error_line(stderr) or 'unclear from the evidence'}. Rewrote the script from its "
            f"strategy ({strategy.key}).\n\n```python\n{rewritten.rstrip()}\n```")


def _evidence_field(text: str, key: str) -> str:
    m = re.search(r"```json\n(.*?)```", text, re.S)
    if not m:
        return ""
    try:
        data = json.loads(m.group(1))
    except json.JSONDecodeError:
        return ""
    value = data.get(key) if isinstance(data, dict) else None
    if value is None and isinstance(data, dict) and isinstance(data.get("evidence"), dict):
        value = data["evidence"].get(key)
    return value if isinstance(value, str) else ""


def _last_error_line(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if re.match(r"^[A-Za-z_.]*(Error|Exception)\b", ln):
            return ln
    return lines[-1] if lines else ""


def _checks(user: str) -> list[tuple[str, bool, str]]:
    return [(m.group(2), m.group(1) == "PASS", m.group(3))
            for m in re.finditer(r"^- (PASS|FAIL) ([a-z_]+): ?(.*)$", _section(user, "Input: checks"), re.M)]


def _verifier(system: str, user: str, rng: random.Random) -> str:
    checks = _checks(user)
    failed = [c for c in checks if not c[1]]
    status = "RETRY" if failed or not checks else "SUCCESS"
    lines = [f"STATUS: {status}", ""]
    lines += [f"- {'passed' if ok else 'FAILED'}: {name} {detail}".rstrip() for name, ok, detail in checks]
    if not checks:
        lines.append("- no checks were reported, so nothing is verified")
    return "\n".join(lines)


def _router(system: str, user: str, rng: random.Random) -> str:
    exit_code = _evidence_field(_section(user, "Input: execution_evidence"), "status")
    ok = exit_code == "ok"
    return f"STATUS: {'SUCCESS' if ok else 'RETRY'}\nExecution status was {exit_code or 'unknown'}."


def _finalizer(system: str, user: str, rng: random.Random) -> str:
    stdout = _evidence_field(_section(user, "Input: execution_evidence"), "stdout_tail")
    scores = re.findall(r"^(validation_[a-z0-9_]+):\s*([-+0-9.eE]+)", stdout, re.M)
    strategy = _STRATEGY_LINE.search(_section(user, "Input: code") or "")
    lines = ["# Final report", "",
             f"**Approach.** {strategy.group(1) if strategy else 'as implemented by the coder'}.",
             "**Validation.** " + (", ".join(f"{k} = {v}" for k, v in scores) or "no validation score was printed."),
             "**Checks.** The verified predictions file is handed on unchanged.",
             "**Open risks.** Validation used a single split of the training data."]
    return "\n".join(lines)


RoleHandler = Callable[[str, str, random.Random], str]
_ROLES: dict[str, RoleHandler] = {"analyzer": _analyzer, "planner": _planner, "coder": _coder, "debugger": _debugger,
                                  "verifier": _verifier, "router": _router, "finalizer": _finalizer}
# Modules that teach the scientist more roles (judge, editors, tree-search roles); each
# calls register() at import. Imported on first use to keep this module's imports light.
EXTENSIONS: tuple[str, ...] = ("engine.offline.search_roles", "engine.offline.tree_roles", "engine.offline.scimars_roles")
_loaded = False


def register(role: str) -> Callable[[RoleHandler], RoleHandler]:
    def deco(fn: RoleHandler) -> RoleHandler:
        _ROLES[role] = fn
        return fn
    return deco


def _load_extensions() -> None:
    global _loaded
    if not _loaded:
        import importlib

        for name in EXTENSIONS:
            importlib.import_module(name)
        _loaded = True
