"""Retrieval-based synthesis and its review, on the fake executor: every example gets a valid
synthesized workflow whose attachments fit their slots by type and reach the role's prompt,
each stage is traced with its inputs, and a repair touches only the node a failure implicates
and goes through the gate."""
import io
import json

import pytest

from engine.evolve import evolve
from engine.run_spec import RunSpec
from engine.library.retrieval import Similarity, incompatibility
from engine.library.store import load_library
from engine.mutations import Mutation
from engine.prompts import build_messages
from engine.protocol.gate import Decision
from engine.search.base import AutoGate
from engine.search.repair import failures, local_problem
from engine.synthesis.fixed import team_workflow
from engine.synthesis.stages import plan, synthesize
from engine.task import load_task
from engine.trace import ListSink, Tracer, read_events
from tests.fakes import FakeExecutor, OffTarget, split_spec
from tests.unit.test_library import WordsEmbedder

EXAMPLES = ["burgers-field", "dam-break-neural", "diabetes-progression", "discontinuous-1d", "epidemic-sir",
            "pendulum-extrapolation", "reaction-kinetics", "river-flow-forecast", "soil-respiration-sites",
            "wine-cultivar"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_every_example_gets_a_valid_synthesized_workflow_whose_attachments_fit_by_type(examples, name, tmp_path):
    task = load_task(examples / name)
    library = load_library(tmp_path)
    sink = ListSink()
    result = synthesize(task, library, Similarity(WordsEmbedder()), Tracer("t", [sink]))
    wf = result.workflow
    assert wf.problems() == [] and wf.name == f"{name}-synthesized"
    slots = {s.role: s for s in plan(task)}
    attached = [(a, x) for a in wf.agents for x in a.attachments]
    assert attached, "synthesis attached nothing"
    for agent, x in attached:
        artifact = library.get(f"{x.kind}:{x.name}")
        assert x.version == artifact.version
        assert incompatibility(artifact, slots[x.role]) is None
        if x.kind == "skill":  # the skill's procedure is in the prompt of the role it was attached for
            system = build_messages(x.role, agent, wf.harness, task, {})[0]["content"]
            assert artifact.body.splitlines()[0] in system and x.ref in system
    # each stage traced with what it was given and what it made
    stages = [e.payload for e in sink.events if e.kind == "synthesis_stage"]
    assert [s["stage"] for s in stages] == ["plan", "retrieve", "synthesize"]
    assert stages[0]["inputs"]["task"]["goal"] == task.goal.strip()
    assert stages[0]["outputs"]["slots"][0]["task_kind"] in ("table", "series", "parameters", "field")
    assert stages[2]["outputs"]["workflow"]["hash"] == wf.hash
    for role, chosen in stages[2]["outputs"]["attachments"].items():
        assert all(c["why"] and c["ref"] for c in chosen)


def test_a_predictions_skill_of_another_task_kind_is_never_attached(examples, tmp_path):
    """A verifier skill that hands on a table of parameters fits the kinetics task, not the river's."""
    (tmp_path / "check-parameter-table.md").write_text("""# Check a table of fitted parameters

kind: skill
roles: verifier
inputs: code: python
outputs: predictions: csv[parameter:str, value:float]
tags: forecasting, series, flow, stations, check

## Procedure
Check every parameter is within its range; forecast flow stations series check.
""")
    library = load_library(tmp_path)
    river = synthesize(load_task(examples / "river-flow-forecast"), library, Similarity(WordsEmbedder()))
    kinetics = synthesize(load_task(examples / "reaction-kinetics"), library, Similarity(WordsEmbedder()))
    names = lambda wf: {x.name for a in wf.agents for x in a.attachments}  # noqa: E731
    assert "check-parameter-table" not in names(river.workflow)
    assert any(ref.startswith("skill:check-parameter-table") for ref, _ in river.retrievals["verifier"].refused)
    assert "check-parameter-table" in {h.artifact.name for h in kinetics.retrievals["verifier"].hits}


def test_evolve_starts_from_a_synthesized_workflow_and_traces_its_stages_first(examples, tmp_path):
    result = evolve(examples / "diabetes-progression",
                    RunSpec(search="fixed", iterations=1, single_agent=False, start="synthesized"), runs_dir=tmp_path,
                    out=io.StringIO(), executor=FakeExecutor(tmp_path / "sandbox"), embedder=WordsEmbedder())
    events = list(read_events(result.run_dir / "search.jsonl"))
    kinds = [e.kind for e in events]
    assert kinds[:4] == ["synthesis_stage"] * 3 + ["search_started"]
    started = events[3].payload
    assert started["start"]["path"] == "synthesized" and "attachment" in started["start"]["reason"]
    assert any(a.get("attachments") for a in started["workflow"]["agents"])
    assert result.final["official"]["ok"]


def test_start_team_and_a_workflow_file(examples, tmp_path):
    from engine.errors import TrellisError
    from engine.synthesis.start import choose_start

    task = load_task(examples / "diabetes-progression")
    wf, info = choose_start(task, "team")
    assert wf.hash == team_workflow(task).hash and info["path"] == "de_novo"
    path = tmp_path / "wf.json"
    path.write_text(team_workflow(task).derive(note="mine").to_json())
    wf, info = choose_start(task, str(path))
    assert info["path"] == "file" and info["source"] == str(path) and wf.note == "mine"
    with pytest.raises(TrellisError, match="needs an archive"):
        choose_start(task, "archive")
    with pytest.raises(TrellisError, match="not a readable workflow file"):
        choose_start(task, str(tmp_path / "missing.json"))


class RecordingGate(AutoGate):
    def __init__(self, approve=None):
        self.proposals, self.approve = [], approve

    def decide(self, proposal):
        self.proposals.append(proposal)
        if self.approve is None:
            return Decision.by_rule(proposal)
        return Decision(approved=self.approve, decided_by="user:ada", reason="checked by hand")


def _review(examples, tmp_path, gate, iterations=2, **kw):
    return evolve(examples / "diabetes-progression",
                  split_spec(RunSpec(search="repair", iterations=iterations, single_agent=False, start="synthesized", max_tokens=2_000_000), kw),
                  runs_dir=tmp_path, out=io.StringIO(), executor=OffTarget(tmp_path / "sandbox", shift=2.0),
                  embedder=WordsEmbedder(), gate=gate, **kw)


def test_a_repair_touches_only_the_implicated_node_and_goes_through_the_gate(examples, tmp_path):
    gate = RecordingGate()
    result = _review(examples, tmp_path, gate)
    events = list(read_events(result.run_dir / "search.jsonl"))
    reviews = [e.payload for e in events if e.kind == "synthesis_stage" and e.payload["stage"] == "review"]
    assert reviews and gate.proposals
    # predictions two standard deviations off: worse than trivial, which implicates the plan's author
    assert reviews[0]["inputs"]["implicated"] == "planner"
    assert any("beats_trivial" in f["detail"] for f in reviews[0]["inputs"]["failures"])
    for proposal, review in zip(gate.proposals, reviews):
        node = review["inputs"]["implicated"]
        assert set(proposal.diff["agents_changed"]) == {node}
        assert not proposal.diff["procedures_changed"] and not proposal.diff["memory_changed"]
        for key in ("edges_added", "edges_removed", "routes_added", "routes_removed"):
            assert all(node in (x["source"], x["target"]) for x in proposal.diff[key])
    # every option offered touches only that node, and none is offered twice
    offered = [json.dumps(o, sort_keys=True) for r in reviews for o in r["outputs"]["options"]
               if o in r["outputs"]["options"][:1]]
    assert len(offered) == len(set(offered))
    # the offsets stay whatever the planner is told: the failure remains, so no repair is kept
    assert all(not p.rule_accepts for p in gate.proposals)
    assert result.final["workflow_hash"] == result.initial["workflow_hash"]


def test_a_person_may_keep_a_repair_the_rule_would_reject(examples, tmp_path):
    gate = RecordingGate(approve=True)
    result = _review(examples, tmp_path, gate, iterations=1)
    assert gate.proposals and not gate.proposals[0].rule_accepts
    assert result.final["workflow_hash"] == gate.proposals[0].key != result.initial["workflow_hash"]


def test_a_node_over_its_token_cap_is_reviewed_for_cost(examples, tmp_path):
    gate = RecordingGate()
    result = evolve(examples / "diabetes-progression",
                    RunSpec(search="repair", iterations=1, single_agent=False, start="synthesized", node_token_cap=200),
                    runs_dir=tmp_path, out=io.StringIO(), executor=FakeExecutor(tmp_path / "sandbox"),
                    embedder=WordsEmbedder(), gate=gate)
    review = next(e.payload for e in read_events(result.run_dir / "search.jsonl")
                  if e.kind == "synthesis_stage" and e.payload["stage"] == "review")
    first = review["inputs"]["failures"][0]
    assert first["what"] == "cost" and "over the cap of 200" in first["detail"]
    assert review["outputs"]["options"][0]["kind"] in ("attachment_change", "prompt_refinement")


def test_a_reviewer_answer_that_is_not_local_is_refused_for_the_first_ranked_repair(examples, tmp_path, monkeypatch):
    import engine.search.repair as repair

    def meddling(gateway, author, messages, parent, purpose="mutation"):
        m = Mutation("prompt_refinement", "coder", {"prompt": "rewrite everything"}, "while I am here", "reviewer")
        return "{}", (m, m.apply(parent)), []

    monkeypatch.setattr(repair, "ask_mutation", meddling)
    gate = RecordingGate()
    result = _review(examples, tmp_path, gate, iterations=1)
    proposed = next(e.payload for e in read_events(result.run_dir / "search.jsonl") if e.kind == "mutation_proposed")
    assert proposed["mutation"]["target"] == "planner"
    assert "not local" in proposed["problems"][0] and "coder" in proposed["problems"][0]
    assert set(gate.proposals[0].diff["agents_changed"]) == {"planner"}


def test_local_problem_names_what_reaches_beyond_the_node(examples):
    wf = team_workflow(load_task(examples / "diabetes-progression"))
    ok = Mutation("prompt_refinement", "planner", {"prompt": "x"}).apply(wf)
    assert local_problem(wf, ok, "planner") is None
    other = Mutation("prompt_refinement", "coder", {"prompt": "x"}).apply(wf)
    assert "coder" in local_problem(wf, other, "planner")
    shared = Mutation("procedure_refinement", "planner", {"procedure": "x"}).apply(wf)
    assert "harness" in local_problem(wf, shared, "planner")
    loop = Mutation("route_change", "verifier", {"on": "RETRY", "target": "debugger", "max_loops": 4}).apply(wf)
    assert local_problem(wf, loop, "verifier") is None and local_problem(wf, loop, "debugger") is None  # both ends
    assert "does not touch planner" in local_problem(wf, loop, "planner")


def test_the_review_halts_when_the_budget_is_spent(examples, tmp_path):
    gate = RecordingGate()
    result = evolve(examples / "diabetes-progression",
                    RunSpec(search="repair", iterations=5, single_agent=False, start="synthesized", max_tokens=30_000),
                    runs_dir=tmp_path, out=io.StringIO(), executor=OffTarget(tmp_path / "sandbox", shift=2.0),
                    embedder=WordsEmbedder(), gate=gate)
    assert "budget" in result.stopped
    assert result.iterations < 5


def test_a_rejected_skill_swap_gives_way_to_the_next_skill_and_the_review_stops_when_none_is_left(examples, tmp_path):
    folder = tmp_path / "library"
    folder.mkdir()
    for i in range(2):  # two more planner skills for tables than the shipped library has
        (folder / f"plan-extra-{i}.md").write_text(f"""# Plan extra {i}

kind: skill
roles: planner
inputs: report: markdown
outputs: plan: markdown
applies to: table

## Procedure
Plan carefully, variant {i}.
""")
    gate = RecordingGate()
    result = _review(examples, tmp_path, gate, iterations=10, library=load_library(folder))
    swaps = [p.change.params["add"]["name"] for p in gate.proposals if p.change.kind == "attachment_change"]
    assert len(swaps) >= 3 and len(set(swaps)) == len(swaps)  # each next skill once, none twice
    assert {"plan-extra-0", "plan-extra-1"} <= set(swaps)
    assert result.stopped.startswith("no untried repair left for planner")
    assert result.iterations < 10 and len(gate.proposals) == len({p.key for p in gate.proposals})
