"""MCP tools without a server process: the configuration's errors, the registry the workflow rules
check agents' tools against, the tool-allocation mutation and its diff, the science server's
functions on hostile input, and the offline roles' reading of tools and their results."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.errors import WorkflowValidationError
from engine.mcp_servers import science
from engine.mutations import Mutation, MutationError, diff, tool_lines
from engine.offline.mutator import propose
from engine.prompt_format import (build_messages, fenced_json, parse_tool_results, reading_view, render_tool_results,
                                  tool_exchanges)
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.tools.allocation import allocate
from engine.tools.config import McpConfigError, load_config, parse_config
from engine.tools.registry import ToolRegistry, ToolSpec, use

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "discontinuous-1d"
FIT = "mcp.science.fit_curve"


@pytest.fixture(scope="module")
def team():
    return team_workflow(load_task(TASK))


@pytest.fixture(scope="module")
def registry():
    specs = [ToolSpec("science", "fit_curve", "Fit a curve by least squares", {"type": "object", "properties": {
        "model": {"type": "string"}, "path": {"type": "string"}}}),
             ToolSpec("science", "profile_data", "Profile a CSV data file", {"type": "object"})]
    return ToolRegistry({s.name: s for s in specs}, {"broken": "failed to start: FileNotFoundError"},
                        {"science": {"planner": ("fit_curve",), "analyzer": ("profile_data", "missing_tool")}})


# --- configuration --------------------------------------------------------------------------------
def test_the_shipped_configuration_lists_the_science_server_and_none_means_no_servers():
    [server] = load_config(ROOT / "mcp_servers.json")
    command, args, env, cwd = server.launch({"data": "/d", "base": "/b", "output": "/o"})
    assert server.name == "science" and args == ["-m", "engine.mcp_servers.science"] and "python" in Path(command).name
    assert env["TRELLIS_MCP_DATA"] == "/d" and cwd == str(ROOT)
    assert load_config(env={"TRELLIS_MCP_CONFIG": "none"}) == []


def test_an_unusable_configuration_names_every_problem(tmp_path):
    with pytest.raises(McpConfigError) as bad:
        parse_config({"servers": [{"name": "Bad Name", "command": ""},
                                  {"name": "ok", "command": "x", "args": "not a list", "colour": 1},
                                  {"name": "ok", "command": "y", "allocate": {"wizard": ["t"]}, "timeout_s": 0}]})
    text = str(bad.value)
    for said in ("name 'Bad Name'", "command must be", "args must be a list", "unknown field 'colour'",
                 "role 'wizard'", "timeout_s must be"):
        assert said in text
    broken = tmp_path / "mcp.json"
    broken.write_text("{not json")
    with pytest.raises(McpConfigError, match="is not JSON"):
        load_config(broken)
    with pytest.raises(McpConfigError, match="does not exist"):
        load_config(env={"TRELLIS_MCP_CONFIG": str(tmp_path / "missing.json")})
    disabled = tmp_path / "off.json"
    disabled.write_text(json.dumps({"servers": [{"name": "a", "command": "x", "enabled": False}]}))
    assert load_config(disabled) == []


# --- registry, validation, hash -----------------------------------------------------------------------
def test_discovered_tools_are_allocatable_and_unknown_ones_are_a_clear_error(team, registry):
    wf = allocate(team, registry)
    assert FIT in wf.agent("planner").tools and "mcp.science.profile_data" in wf.agent("analyzer").tools
    assert "mcp.science.missing_tool" not in wf.agent("analyzer").tools  # allocated but never discovered
    with use(registry):
        wf.validate()
        typo = Mutation("tool_allocation", "planner", {"add": "mcp.science.fit_curv"})
        with pytest.raises(WorkflowValidationError, match="unknown tool 'mcp.science.fit_curv'; available tools are"):
            typo.apply(wf)
        # a tool of a server that failed to start is no error of the workflow: the run goes on without it
        Mutation("tool_allocation", "planner", {"add": "mcp.broken.anything"}).apply(wf)
    with pytest.raises(WorkflowValidationError, match="named mcp.<server>.<tool>"):
        Mutation("tool_allocation", "planner", {"add": "shell.exec"}).apply(wf)


def test_tool_allocation_changes_the_hash_and_the_diff_says_it_in_words(team, registry):
    wf = allocate(team, registry)
    with use(registry):
        child = Mutation("tool_allocation", "planner", {"remove": FIT}, "never useful").apply(wf)
    assert child.hash != wf.hash and FIT not in child.agent("planner").tools
    assert tool_lines(diff(wf, child)) == [f"removes {FIT} from planner"]
    back = Mutation("tool_allocation", "planner", {"add": FIT}).apply(child)
    assert back.hash == wf.hash  # the same tools in another order are the same workflow
    for target, bad, said in (("coder", {"remove": FIT}, "has no tool"), ("planner", {"drop": FIT}, "takes params"),
                              ("analyzer", {"add": "sandbox.python"}, "already has"), ("nobody", {"add": FIT}, "no agent")):
        with pytest.raises(MutationError, match=said):
            Mutation("tool_allocation", target, bad).apply(wf)
    with pytest.raises(WorkflowValidationError, match="lacks the tool 'sandbox.python'"):
        Mutation("tool_allocation", "analyzer", {"remove": "sandbox.python"}).apply(wf)


# --- the science server's functions (the `confined` fixture: tests/conftest.py) --------------------------
def test_fit_curve_gives_parameters_with_standard_errors_and_the_fit_quality(confined):
    fit = science.fit_curve("power_law", path="data/train.csv", x_column="x", y_column="y")
    a, b = fit["parameters"]["a"], fit["parameters"]["b"]
    assert abs(b["value"] - 1.5) < 3 * b["stderr"] + 0.02 and 0 < b["stderr"] < 0.05
    assert abs(a["value"] - 3) < 0.1 and fit["r2"] > 0.99 and fit["n"] == 40 and fit["dof"] == 38
    line = science.fit_curve("c*x + d", x=[0, 1, 2, 3], y=[1, 3, 5, 7.2])
    assert abs(line["parameters"]["c"]["value"] - 2.06) < 0.01 and line["residuals"]["rmse"] < 0.1


def test_units_are_converted_by_pint_and_nonsense_is_refused(confined):
    assert science.convert_units(100, "degC", "K")["value"] == pytest.approx(373.15)
    assert science.convert_units([1, 2], "mile", "km")["value"] == pytest.approx([1.609344, 3.218688])
    with pytest.raises(science.ToolInputError, match="cannot convert"):
        science.convert_units(1, "m", "s")
    with pytest.raises(science.ToolInputError, match="unknown unit"):
        science.convert_units(1, "__class__", "m")


def test_a_plot_is_written_inside_the_output_folder_with_its_hash(confined):
    out = science.plot([1, 2, 3], [1, 4, 9], name="squares")
    path = Path(out["path"])
    assert path.parent == confined / "out" and (path.parent / "plotly.min.js").exists()
    import hashlib
    assert hashlib.sha256(path.read_bytes()).hexdigest() == out["sha256"]
    assert science.plot([1], [1], name="squares")["path"].endswith("squares-2.html")
    with pytest.raises(science.ToolInputError, match="file name"):
        science.plot([1], [1], name="../../evil")


# --- the prompt format and the offline roles -------------------------------------------------------------
def test_tool_exchanges_are_read_from_a_conversation_and_rendered_as_an_input():
    messages = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "mcp__s__fit", "arguments": '{"model": "linear"}'}},
        {"id": "c2", "type": "function", "function": {"name": "mcp__s__fit", "arguments": '{"model": "power_law"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"r2": 0.5}'},
        {"role": "tool", "tool_call_id": "c2", "content": "ERROR: server 's' closed the connection"}]
    found = tool_exchanges(messages)
    assert [(x.arguments["model"], x.ok) for x in found] == [("linear", True), ("power_law", False)]
    assert parse_tool_results(render_tool_results(found)) == found


def _mutator_prompt(team, tool_use: str) -> list[dict]:
    return build_messages("mutator", "Propose one change.", "json", load_task(TASK).description(), {
        "workflow": fenced_json(team.to_dict(), indent=1, sort_keys=False),
        "judge_feedback": "- output_quality: 0.4 — weak\n- collaboration_efficiency: 0.9 — fine",
        "failed_checks": "(all public checks passed)", "report": "", "history": "(nothing tried yet)",
        "tool_use": tool_use})


def test_the_offline_mutator_removes_a_tool_whose_every_call_failed_before_anything_else(team, registry):
    wf = allocate(team, registry)
    proposal = propose(*reading_view(_mutator_prompt(wf, (
        f"- planner {FIT}: 2 call(s), 0 ok, 2 failed (last error: server 'science' closed the connection)\n"
        "- analyzer mcp.science.profile_data: 1 call(s), 1 ok, 0 failed"))))
    assert (proposal["kind"], proposal["target"], proposal["params"]) == ("tool_allocation", "planner", {"remove": FIT})
    assert proposal["rationale"].startswith("addresses collaboration_efficiency (0.90") and "closed the connection" \
        in proposal["rationale"]
    useful = propose(*reading_view(_mutator_prompt(wf, f"- planner {FIT}: 2 call(s), 2 ok, 0 failed")))
    assert useful["kind"] != "tool_allocation"  # a tool that served stays; the weakest criterion decides


def test_a_workflow_without_tool_use_input_is_proposed_what_it_was_before(team):
    # no MCP tools in play: the mutator reads no tool_use input and proposes a modelling change
    messages = _mutator_prompt(team, "")
    messages[1]["content"] = messages[1]["content"].split("## Input: tool_use")[0]
    assert propose(*reading_view(messages))["kind"] == "prompt_refinement"


def test_the_function_names_offered_to_a_model_have_no_dots(registry):
    fn = registry.spec(FIT).function()["function"]
    assert fn["name"] == "mcp__science__fit_curve" and registry.by_function(fn["name"]).name == FIT
    assert os.sep not in fn["name"] and "." not in fn["name"]


def test_the_offline_mutator_gives_the_planner_a_fitting_tool_where_the_task_welcomes_a_law():
    task = load_task(ROOT / "examples" / "pendulum-extrapolation")
    wf = team_workflow(task)
    tool_use = "- not allocated: mcp.science.fit_curve \u2014 Fit a curve by least squares with standard errors"

    def prompt(history: str) -> tuple[str, str]:
        return reading_view(build_messages("mutator", "Propose one change.", "json", task.description(), {
            "workflow": fenced_json(wf.to_dict(), indent=1, sort_keys=False),
            "judge_feedback": "- output_quality: 0.3 \u2014 weak\n- collaboration_efficiency: 0.9 \u2014 fine",
            "failed_checks": "(all public checks passed)", "report": "", "history": history, "tool_use": tool_use}))

    first = propose(*prompt("(nothing tried yet)"))  # the best-grounded modelling change comes first
    tried = json.dumps({k: first[k] for k in ("kind", "target", "params", "rationale")}, sort_keys=True)
    second = propose(*prompt(f"{tried} -> J 0.500 vs 0.500: rejected"))
    assert (second["kind"], second["target"], second["params"]) == \
        ("tool_allocation", "planner", {"add": "mcp.science.fit_curve"})
    assert "welcomes a law" in second["rationale"]
