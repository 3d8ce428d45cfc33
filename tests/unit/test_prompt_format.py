"""The one prompt format: what the engine writes, what any model (the offline scientist
included) reads back, and the offline provider kept apart from the engine."""
import ast
from pathlib import Path
from types import SimpleNamespace

from engine import prompt_format as pf
from engine.offline import scientist
from engine.offline.strategy import family_of
from engine.offline.strategies import strategies_for
from engine.search import tree
from engine.task import load_task
from engine.trace import ListSink, Tracer

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"
DISC = ROOT / "examples" / "discontinuous-1d"
REPORT = "# Data report\n\n## Structure\n- strong evidence of a discontinuity at x = 0"


def _messages(**kw):
    return pf.build_messages(
        "coder", "Write the script.", "Reply with one fenced ```python block.", "# Task\nFit y from x.",
        {"plan": "strategy: knn {\"k\": 5}", "report": REPORT, "code": "print(1)\n", "evidence": {"b": 2, "a": 1}},
        **kw)


def test_a_prompt_reads_back_section_by_section():
    system, user = _messages(instructions="Prefer trees.", lessons=["knn overfit", "scale features"],
                             feedback={"from": "verifier", "status": "RETRY", "detail": {"stderr_tail": "boom"}})
    assert pf.role_of(system["content"]) == "coder"
    assert pf.role_of([user, system]) == "coder"  # from the messages too, whatever their order
    assert pf.section(system["content"], pf.PROCEDURE) == "Write the script."
    assert pf.section(system["content"], pf.INSTRUCTIONS) == "Prefer trees."
    assert pf.section(system["content"], pf.LESSONS) == "- knn overfit\n- scale features"
    assert pf.section(system["content"], pf.ANSWER_FORMAT).startswith("Reply with one fenced")
    # the task opens the system message (the prefix every call of a run shares); the inputs follow
    assert system["content"].startswith("# Task\nFit y from x.\n\nYou are the coder of a Trellis research team")
    assert user["content"].startswith("## Input: plan")
    rules, reading = pf.reading_view([system, user])
    assert rules.startswith("You are the coder") and reading.startswith("# Task\nFit y from x.\n\n## Input: plan")

    found = pf.inputs(user["content"])
    assert list(found) == ["plan", "report", "code", "evidence"]
    assert found["report"] == REPORT  # a markdown heading inside an input stays part of it
    assert pf.section(user["content"], pf.input_heading("report")) == "# Data report"  # section() stops there
    assert pf.extract_code(found["code"]) == "print(1)\n"
    assert pf.json_block(found["evidence"]) == {"a": 1, "b": 2}
    assert pf.extract_strategy(found["plan"]) == ("knn", {"k": 5})

    fb = pf.feedback(user["content"])
    assert (fb.source, fb.status) == ("verifier", "RETRY") and pf.json_block(fb.body) == {"stderr_tail": "boom"}


def test_every_role_of_a_run_shares_one_prompt_prefix_the_task_and_nothing_role_specific_before_it():
    task = "# Task\nFit y from x.\n\n## Evaluation\n## Procedure\nThe official split is by site."
    prompts = [pf.build_messages(role, f"Do the {role}'s work.", "Answer.", task, inputs)
               for role, inputs in (("analyzer", {}), ("coder", {"plan": "p"}), ("judge", {"trace": "t"}))]
    systems = [p[0]["content"] for p in prompts]
    assert all(s.startswith(task + "\n\nYou are the ") for s in systems)
    for (role, _), prompt in zip((("analyzer", 0), ("coder", 0), ("judge", 0)), prompts):
        rules, reading = pf.reading_view(prompt)
        assert pf.role_of(prompt) == role
        # a heading inside the task never passes for the role's own procedure
        assert pf.section(rules, pf.PROCEDURE) == f"Do the {role}'s work."
        assert pf.task_sections(reading)["Evaluation"].endswith("The official split is by site.")
    assert prompts[0][1]["content"] == pf.NO_INPUTS  # a user turn even without inputs
    assert pf.reading_view(prompts[0])[1] == task


def test_optional_sections_are_left_out_when_empty():
    system, user = _messages()
    for heading in (pf.INSTRUCTIONS, pf.LESSONS):
        assert f"## {heading}" not in system["content"]
    assert pf.feedback(user["content"]) is None
    assert pf.role_of("You are a helpful assistant.") is None


def test_answer_blocks_are_read_back():
    answer = ("Sketch:\n```python\nx = 1\n```\nFinal:\n```python\nx = 2\n```\nSTATUS: retry\n"
              "vote: `N3`\nverdict: Accept\n")
    assert pf.extract_code(answer) == "x = 2\n"  # the last block is the script
    assert pf.extract_status(answer) == "RETRY"
    assert pf.extract_vote(answer) == "n3"
    assert pf.extract_verdict(answer) == "accept"
    assert pf.extract_vote("vote: none") is None and pf.extract_verdict("no verdict here") == ""
    assert pf.extract_json('Here: {"kind": "x"} done') == {"kind": "x"}
    for bad in ("no json at all", "```json\n{oops}\n```"):
        try:
            pf.extract_json(bad)
        except ValueError:
            pass
        else:
            raise AssertionError(f"extract_json accepted {bad!r}")
    assert pf.json_block("```json\n{oops}\n```") is None


def test_one_strategy_line_for_proposals_and_program_headers():
    line = pf.strategy_line("random_forest", {"n_estimators": 200, "max_depth": None})
    assert pf.extract_strategy(f"change: x\n{line}\nrationale: y") == ("random_forest",
                                                                       {"max_depth": None, "n_estimators": 200})
    program = f"# {line}\nimport numpy as np\n"
    assert pf.extract_strategy(program) == ("random_forest", {"max_depth": None, "n_estimators": 200})
    assert pf.extract_strategy("strategy: knn") == ("knn", {})
    assert pf.extract_strategy("strategy: knn {not json}") == ("knn", {})
    assert pf.extract_strategy("I would use a strategy: of some kind, maybe") is None
    assert pf.extract_strategy(None) is None


def test_the_offline_scientist_answers_prompts_in_the_format():
    task = load_task(DISC)
    checks = "- PASS file_exists: ok\n- FAIL values_vary: all predictions equal"
    verifier = pf.build_messages("verifier", "Check it.", "Start with STATUS.", task.description(),
                                 {"checks": checks})
    assert pf.extract_status(scientist.respond(verifier)) == "RETRY"
    planner = pf.build_messages("planner", "Plan it.", "Name a strategy.", task.description(), {"report": REPORT})
    keys = {s.key for s in strategies_for(family_of(scientist.data_spec(task.description())))}
    assert pf.extract_strategy(scientist.respond(planner, seed=3))[0] in keys
    assert scientist.respond([{"role": "system", "content": "You are a poet."}]).startswith("STATUS: FAILURE")


def test_the_tree_proposer_never_sees_the_offline_catalogue_yet_the_offline_side_still_proposes(tmp_path):
    task = load_task(DISC)
    asked = []

    def complete(agent, role, messages, **kw):
        asked.append(messages)
        return SimpleNamespace(text=scientist.respond(messages, seed=1))

    ctx = tree.SearchContext(task, SimpleNamespace(complete=complete), None, Tracer("t", [ListSink()]),
                             tree.TreeConfig(), tmp_path, [])
    proposal, _turns = tree._debate(ctx, tree.Tree(task.name, "rmse", False, data_report=REPORT), None, None, "n0")
    text = "\n".join(m["content"] for m in asked[0])
    catalogue = strategies_for(family_of(scientist.data_spec(task.description())))
    assert pf.role_of(asked[0]) == "proposer"
    assert "strategy_library" not in text and "library" not in text.lower()
    assert [s.key for s in catalogue if s.key in text] == []  # not one strategy of the catalogue is named
    assert pf.extract_strategy(proposal)[0] in {s.key for s in catalogue}


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module as written, names imported) for every import of ``path``; relative modules keep their dots."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append(("." * node.level + (node.module or ""), [a.name for a in node.names]))
    return out


def test_only_the_gateway_imports_the_offline_package():
    """The offline scientist is a model backend: the gateway answers it (engine/offline/chat.py),
    and nothing else in the engine may know it is there."""
    offenders = []
    for path in ENGINE.rglob("*.py"):
        rel = path.relative_to(ENGINE)
        if rel.parts[0] == "offline" or rel == Path("gateway.py"):
            continue
        for module, names in _imports(path):
            if "offline" in module.split(".") or "offline" in names:
                offenders.append(f"{rel}: {module} {names}")
    assert offenders == []


def test_the_offline_package_uses_only_public_names_and_plain_imports():
    offenders = []
    for path in (ENGINE / "offline").glob("*.py"):
        for module, names in _imports(path):
            if module == "importlib" or module.startswith("importlib."):
                offenders.append(f"{path.name}: imports {module}")
            offenders += [f"{path.name}: from {module} import {n}" for n in names if n.startswith("_")]
            engine_module = module.startswith(".") or module.startswith("engine")
            if engine_module and module.lstrip(".") in {"prompts", "engine.prompts"}:
                offenders.append(f"{path.name}: reads prompts through {module}, not engine.prompt_format")
    assert offenders == []
    # Every role handler is registered by the package's plain imports.
    assert {"planner", "judge", "mutator", "proposer", "critic", "role_editor", "reflector"} <= set(scientist.ROLES)


def test_the_format_module_stands_alone():
    """Any model client can use it: it imports nothing of the engine (no task, workflow or provider)."""
    assert [m for m, _ in _imports(ENGINE / "prompt_format.py") if m.startswith(".") or m.startswith("engine")] == []


def test_a_prompt_is_fitted_by_cutting_inputs_first_then_the_task_never_the_rules_or_headings():
    task = "# Task\n" + "context sentence. " * 300
    messages = pf.build_messages("coder", "Write the script.", "One python block.", task,
                                 {"plan": "strategy: knn {}", "report": "row\n" * 2000, "code": "print(1)"})
    sizes = []

    def over(limit):
        def too_long(m):
            sizes.append(sum(len(x["content"]) for x in m))
            return sizes[-1] > limit
        return too_long

    fitted, cut = pf.fit_prompt(messages, over(7000))  # the report alone is enough
    rules, reading = pf.reading_view(fitted)
    assert pf.split_system(fitted[0]["content"])[0] == task.strip() and cut > 0
    assert list(pf.inputs(fitted[1]["content"])) == ["plan", "report", "code"]
    assert "characters cut here" in pf.inputs(fitted[1]["content"])["report"]
    assert pf.section(rules, pf.PROCEDURE) == "Write the script."

    fitted, cut = pf.fit_prompt(messages, over(2500))  # the task has to give too
    task_left = pf.split_system(fitted[0]["content"])[0]
    assert "characters cut here" in task_left and task_left.startswith("# Task")
    assert pf.role_of(fitted) == "coder" and pf.extract_code(pf.inputs(fitted[1]["content"])["code"]) == "print(1)\n"

    assert pf.fit_prompt(messages, lambda m: False) == (messages, 0)  # a prompt that fits is untouched
    fitted, cut = pf.fit_prompt(messages, lambda m: True)  # nothing fits: as short as it goes, the caller refuses
    assert sum(len(x["content"]) for x in fitted) < 2500
