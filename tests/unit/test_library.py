"""The library of typed artifacts and retrieval from it: a broken file is named and skipped, a
user's artifact overrides a shipped one, and retrieval never offers an artifact whose types do
not fit the slot, however similar its words."""
import hashlib
import math

import pytest

from engine.library.artifact import LibraryError, parse_artifact
from engine.library.retrieval import Similarity, Slot, incompatibility, retrieve
from engine.library.store import load_library
from engine.library.store import tool_artifacts
from engine.tools.registry import ToolRegistry, ToolSpec

SKILL = """# Fit a forecast per series

kind: skill
roles: coder
inputs: plan: markdown
outputs: code: python
applies to: series
tags: forecasting

## Procedure
Fit each series alone.

## When to use
Forecasts.
"""


class WordsEmbedder:
    """A deterministic stand-in for the sentence model: each word hashed into one of 256 axes."""

    name = "test-words"

    def embed(self, text: str) -> list[float]:
        v = [0.0] * 256
        for w in text.lower().split():
            v[int(hashlib.sha256(w.strip(".,:;()").encode()).hexdigest(), 16) % 256] += 1.0
        n = math.sqrt(sum(x * x for x in v)) or 1.0
        return [x / n for x in v]


def slot(role="coder", kind="series", offered=None, required=None, query="forecast each series"):
    return Slot(role=role, offered=offered or {"task": "markdown", "plan": "markdown"},
                required=required or {"code": "python"}, task_kind=kind, query=query)


def test_a_skill_file_reads_back_with_its_typed_interface():
    a = parse_artifact(SKILL, "forecast-program")
    assert (a.kind, a.roles, a.applies_to) == ("skill", ("coder",), ("series",))
    assert a.inputs == {"plan": "markdown"} and a.outputs == {"code": "python"}
    assert a.body == "Fit each series alone." and a.ref.startswith("skill:forecast-program@")
    assert parse_artifact(a.to_markdown(), "forecast-program").to_dict() | {"version": ""} == a.to_dict() | {
        "version": "", "ref": parse_artifact(a.to_markdown(), "forecast-program").ref}


@pytest.mark.parametrize("edit, says", [
    (lambda t: t.replace("roles: coder", "roles: wizard"), "unknown role(s) wizard"),
    (lambda t: t.replace("outputs: code: python", "outputs: code: csv[id:int"), "outputs: code"),
    (lambda t: t.replace("applies to: series", "applies to: poetry"), "task kinds are"),
    (lambda t: t.replace("kind: skill", "kind: spell"), "`kind:` must be skill or resource"),
    (lambda t: t.replace("## Procedure\nFit each series alone.\n", ""), "needs a `## Procedure` section"),
    (lambda t: t.replace("# Fit a forecast per series", "Fit a forecast"), "first line must be the title"),
])
def test_a_broken_skill_file_is_refused_saying_what_is_wrong(edit, says):
    with pytest.raises(LibraryError, match=None) as err:
        parse_artifact(edit(SKILL), "broken")
    assert says in str(err.value)


def test_the_library_names_a_broken_file_and_loses_nothing(tmp_path):
    (tmp_path / "good.md").write_text(SKILL)
    (tmp_path / "bad.md").write_text(SKILL.replace("roles: coder", "roles: wizard"))
    (tmp_path / "link.md").symlink_to(tmp_path / "good.md")
    library = load_library(tmp_path, starter=False, knowledge=False, agents=False)
    assert list(library.artifacts) == ["skill:good"]
    assert any("bad.md" in p and "wizard" in p for p in library.problems)
    assert any("link.md" in p and "symbolic link" in p for p in library.problems)
    assert (tmp_path / "bad.md").read_text().count("wizard") == 1  # left where it was


def test_the_starter_library_loads_whole_and_a_users_file_overrides_a_shipped_one(tmp_path):
    shipped = load_library(tmp_path)
    assert not shipped.problems
    kinds = {a.kind for a in shipped.artifacts.values()}
    assert {"skill", "resource"} <= kinds
    roles = {r for a in shipped.of_kind("skill") for r in a.roles}
    assert {"analyzer", "planner", "coder", "debugger", "verifier", "finalizer"} <= roles
    (tmp_path / "profile-series.md").write_text(SKILL.replace("roles: coder", "roles: analyzer")
                                                .replace("inputs: plan: markdown", "inputs: task: markdown")
                                                .replace("outputs: code: python", "outputs: report: markdown"))
    mine = load_library(tmp_path)
    assert mine.get("skill:profile-series").source == "user:profile-series.md"


def test_saving_an_edit_checks_it_first_and_writes_nothing_when_it_is_broken(tmp_path):
    library = load_library(tmp_path, starter=False, knowledge=False, agents=False)
    library.save("forecast-program", SKILL)
    with pytest.raises(LibraryError):
        library.save("forecast-program", SKILL.replace("roles: coder", "roles: wizard"))
    assert "roles: coder" in (tmp_path / "forecast-program.md").read_text()
    assert library.get("forecast-program").roles == ("coder",)


def test_retrieval_refuses_what_does_not_fit_the_slot_by_type_whatever_its_words():
    fits = parse_artifact(SKILL, "series-program")
    # the same words, but it hands on predictions as a table of parameters
    wrong_output = parse_artifact(SKILL.replace("outputs: code: python",
                                                "outputs: predictions: csv[parameter:str, value:float]")
                                  .replace("roles: coder", "roles: verifier")
                                  .replace("inputs: plan: markdown", "inputs: code: python"), "parameter-table")
    needs_report = parse_artifact(SKILL.replace("inputs: plan: markdown", "inputs: report: markdown"), "needs-report")
    wrong_kind = parse_artifact(SKILL.replace("applies to: series", "applies to: field"), "field-program")
    verifier_slot = slot("verifier", offered={"task": "markdown", "code": "python"},
                         required={"predictions": "csv[id:int, flow:float]",
                                   "execution_evidence": "{exit_code:int, stdout_tail:str, files:{path: sha256}}"})
    assert incompatibility(fits, slot()) is None
    assert "does not satisfy this task's csv[id:int, flow:float]" in incompatibility(wrong_output, verifier_slot)
    assert "needs input 'report'" in incompatibility(needs_report, slot())
    assert "applies to field tasks, not series" in incompatibility(wrong_kind, slot())
    assert "serves coder, not the planner" in incompatibility(fits, slot("planner"))
    got = retrieve(slot(), [fits, needs_report, wrong_kind], Similarity(WordsEmbedder()), ("skill",))
    assert [h.artifact.name for h in got.hits] == ["series-program"]
    assert {ref.split("@")[0] for ref, _ in got.refused} == {"skill:needs-report", "skill:field-program"}
    assert got.ranked_by == "embedding similarity (test-words)"


def test_retrieval_ranks_fitting_artifacts_by_meaning():
    near = parse_artifact(SKILL.replace("Fit each series alone.", "Forecast each series alone, step by step."),
                          "near")
    far = parse_artifact(SKILL.replace("# Fit a forecast per series", "# Tidy the imports")
                         .replace("Fit each series alone.", "Sort the import lines.")
                         .replace("tags: forecasting", "tags: style").replace("Forecasts.", "Style."), "far")
    got = retrieve(slot(query="forecast each series"), [far, near], Similarity(WordsEmbedder()), ("skill",))
    assert [h.artifact.name for h in got.hits] == ["near", "far"]


def test_without_an_embedder_retrieval_says_it_ranked_by_shared_words():
    got = retrieve(slot(), [parse_artifact(SKILL, "p")], Similarity(None), ("skill",))
    assert got.ranked_by.startswith("shared words") and got.hits


def test_discovered_mcp_tools_become_typed_library_tools():
    registry = ToolRegistry({"mcp.science.fit_curve": ToolSpec("science", "fit_curve", "Fit a model form to data", {
        "type": "object", "properties": {"path": {"type": "string"}, "expression": {"type": "string"},
                                         "max_points": {"type": "integer"}, "bad name": {"type": "string"}}})})
    [tool] = tool_artifacts(registry)
    assert tool.name == "mcp.science.fit_curve" and tool.kind == "tool"
    assert tool.inputs == {"path": "str", "expression": "str", "max_points": "int"}
    assert incompatibility(tool, slot("finalizer")) == "the finalizer is not offered tools"
