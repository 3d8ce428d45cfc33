"""The run page's tree card reads a tree run's stored events (TreeSearch.state, read by webapp/runs/search_state.py): its
nodes and their marks, the champion in the metric's direction (never a vetoed node), why each
iteration expanded the parents it did; on hand-made events and on the events of a real tree
search (fake executor, offline models) whose children a person promoted and vetoed."""
from __future__ import annotations

import functools
import io
from pathlib import Path

import pytest
from django.test import Client

import engine.evolve
import engine.official
from engine.evolve import evolve
from engine.protocol.events import TreeFinished
from engine.protocol.gate import Decision
from engine.run_spec import RunSpec
from engine.search.tree import Tree, TreeConfig, TreeSearch
from engine.trace import ListSink
from tests.fakes import FakeExecutor
from tests.studio_harness import add_member
from webapp.runs.models import Event, Run
from webapp.runs.search_state import search_state as tree_state
from webapp.tasks.models import Task
from webapp.teams.models import Project

DISC = Path(__file__).resolve().parents[2] / "examples" / "discontinuous-1d"


def _run(higher_is_better: bool = False, search: str = "tree") -> Run:
    project = Project.objects.create(name=f"p-{Project.objects.count()}")
    task = Task.objects.create(project=project, name="disc", folder=str(DISC), metric_name="relative_l2",
                               higher_is_better=higher_is_better)
    return Run.objects.create(task=task, search=search)


def _store(run: Run, events: list[tuple[str, int, dict]]) -> None:
    for seq, (kind, iteration, payload) in enumerate(events, start=1):
        Event.objects.create(run=run, seq=seq, source="s", ts=float(seq), kind=kind, iteration=iteration,
                             payload=payload)


def _node(node: str, parent: str | None, iteration: int, score: float | None, **gate) -> tuple[str, int, dict]:
    return ("tree_node", iteration, {
        "node": node, "parent": parent, "iteration": iteration, "strategy": f"s_{node}", "params": {"k": 1},
        "score": score, "status": "scored" if score is not None else "failed", "knowledge": [], "debug_attempts": 0,
        "verdict": "", "debate_turns": 2, "report": "long text", "vetoed": False, "promoted": False,
        "decided_by": "policy:automatic" if parent else "", **gate})


def _iteration(n: int, parents: list[str], votes: list[dict] = ()) -> list[tuple[str, int, dict]]:
    out = [("search_iteration", n, {"phase": "vote", **v}) for v in votes]
    return out + [("search_iteration", n, {"phase": "started", "parents": parents, "best": parents[0], "nodes": 0})]


# Scores read as errors (lower is better): n3 would be the champion but a person vetoed it.
HAND_MADE = [
    _node("n0", None, 0, 0.50),
    *_iteration(1, ["n0"]),
    _node("n1", "n0", 1, 0.40, promoted=True, decided_by="user:ada"),
    _node("n2", "n0", 1, None, decided_by=""),
    ("node_retired", 1, {"node": "n0", "children": 2, "max_children": 2, "iteration": 1}),
    *_iteration(2, ["n1"]),
    _node("n3", "n1", 2, 0.10, vetoed=True, decided_by="user:bob"),
    *_iteration(3, ["n1", "n4", "n3x"], votes=[
        {"slot": 1, "votes": ["n4", "n4", None], "tally": {"n4": 2}, "winner": "n4", "fallback": False},
        {"slot": 2, "votes": [None, None, None], "tally": {}, "winner": "n3x", "fallback": True}]),
]


@pytest.mark.django_db
def test_nodes_carry_their_scores_gate_marks_and_retirement():
    run = _run()
    _store(run, HAND_MADE)
    nodes = {n["id"]: n for n in tree_state(run)["nodes"]}
    assert list(nodes) == ["n0", "n1", "n2", "n3"]
    assert nodes["n1"]["parent"] == "n0" and nodes["n1"]["score"] == 0.40 and nodes["n1"]["strategy"] == "s_n1"
    assert nodes["n1"]["promoted"] and nodes["n1"]["decided_by"] == "user:ada"
    assert nodes["n2"]["status"] == "failed" and nodes["n2"]["score"] is None
    assert nodes["n3"]["vetoed"] and nodes["n3"]["decided_by"] == "user:bob"
    assert nodes["n0"]["retired"] and nodes["n0"]["retired_at"] == 1 and nodes["n0"]["children"] == 2
    assert not nodes["n1"]["retired"] and nodes["n1"]["children"] == 1
    assert "report" not in nodes["n0"]  # the analyst's report stays in the trace


@pytest.mark.django_db
@pytest.mark.parametrize("higher_is_better, champion", [(False, "n1"), (True, "n0")])
def test_champion_follows_the_metric_direction_and_is_never_vetoed(higher_is_better, champion):
    run = _run(higher_is_better)
    _store(run, HAND_MADE)
    state = tree_state(run)
    # n3 (0.10) is the lowest score of all, but vetoed: lower-is-better falls back to n1 (0.40).
    assert state["champion"] == champion
    assert state["higher_is_better"] is higher_is_better and state["metric"] == "relative_l2"


@pytest.mark.django_db
def test_a_finished_tree_stars_the_node_the_search_committed_to():
    """The search may commit to the root over a better-scoring node (its gain was noise, or its
    predictions failed a check): once finished, the card stars what was committed, not the best score."""
    run = _run()
    _store(run, HAND_MADE + [("search_iteration", 3, {"phase": "finished", "champion": "n0", "champion_score": 0.5,
                                                      "stopped": "iteration budget reached", "iterations": 3,
                                                      "reason": "n1 is not preferred to the root n0", "nodes": 4,
                                                      "metric": "relative_l2", "higher_is_better": False})])
    state = tree_state(run)
    assert state["champion"] == "n0" and state["finished"]["champion"] == "n0"


@pytest.mark.django_db
def test_each_iteration_says_why_each_parent_was_expanded():
    run = _run()
    _store(run, HAND_MADE + [*_iteration(4, ["n1", "n0"])])
    its = {it["n"]: it for it in tree_state(run)["iterations"]}
    assert [(p["id"], p["label"]) for p in its[1]["parents"]] == [("n0", "best node")]
    assert its[1]["children"] == ["n1", "n2"]
    assert [p["label"] for p in its[3]["parents"]] == ["best node", "vote 2/3", "no valid vote: best remaining"]
    # Neither best nor voted for: a person promoted it (n0 carries no promotion, so no name).
    assert its[4]["parents"][1] == {"id": "n0", "reason": "promoted", "label": "promoted by a person"}


@pytest.mark.django_db
def test_a_node_recorded_again_after_a_resume_keeps_one_entry_with_the_latest_record():
    run = _run()
    _store(run, [_node("n0", None, 0, 0.5), _node("n1", "n0", 1, 0.4),
                 ("node_retired", 1, {"node": "n1", "children": 0, "max_children": 1, "iteration": 1}),
                 _node("n1", "n0", 1, 0.3, vetoed=True, decided_by="user:ada")])
    state = tree_state(run)
    assert [n["id"] for n in state["nodes"]] == ["n0", "n1"]
    n1 = state["nodes"][1]
    assert n1["score"] == 0.3 and n1["vetoed"] and n1["retired"]
    assert state["champion"] == "n0"


# --- a real tree search's events ---------------------------------------------------------------
class _Person:
    """Promotes n2 (a weak child: the search would not pick it) and vetoes n3."""

    def decide(self, proposal):
        if proposal.key == "n2":
            return Decision(approved=True, decided_by="user:ada", promote=True)
        if proposal.key == "n3":
            return Decision(approved=False, decided_by="user:bob", reason="reads the test rows")
        return Decision.by_rule(proposal)


@pytest.fixture(scope="module")
def real_search(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tree-view")
    config = TreeConfig(iterations=3, seed=0, extra_parents=1, debate_rounds=1, selectors=3)
    sink = ListSink()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine.evolve, "search_class", lambda name: functools.partial(TreeSearch, config=config))
        mp.setattr(engine.official, "official_for_code",
                   lambda task, code, executor: {"ok": True, "metric": "relative_l2", "value": 0.1,
                                                 "higher_is_better": False, "n": 1000})
        evolve(DISC, RunSpec(search="tree", iterations=3, single_agent=False), run_dir=tmp / "run", out=io.StringIO(),
               executor=FakeExecutor(tmp / "sandbox"), sinks=[sink], gate=_Person())
    return Tree.load(tmp / "run" / "tree" / "tree.json"), sink.events


@pytest.mark.django_db
def test_a_real_searchs_events_give_its_tree_champion_and_parent_choices(real_search):
    tree, events = real_search
    run = _run(higher_is_better=False)
    for i, e in enumerate(events, start=1):
        Event.objects.create(run=run, seq=i, source=e.run_id, ts=e.ts, kind=e.kind, agent=e.agent or "",
                             iteration=e.iteration, payload=e.payload)
    state = tree_state(run)
    nodes = {n["id"]: n for n in state["nodes"]}
    assert set(nodes) == set(tree.nodes)
    for node in tree.nodes.values():
        assert (nodes[node.id]["parent"], nodes[node.id]["score"], nodes[node.id]["vetoed"]) == \
               (node.parent, node.score, node.vetoed)
    assert nodes["n3"]["vetoed"] and nodes["n3"]["decided_by"] == "user:bob"
    # the star is on the node the search committed (tree.json's best validated node, unless its gain over
    # the root is noise: then the root), never on the vetoed one
    committed = next(e.data.champion for e in events if isinstance(e.data, TreeFinished))
    assert state["champion"] == state["finished"]["champion"] == committed != "n3"
    assert committed in (tree.champion().id, "n0")
    reasons = {it["n"]: {p["id"]: p["label"] for p in it["parents"]} for it in state["iterations"]}
    assert reasons[1] == {"n0": "best node"}
    assert reasons[3]["n2"] == "promoted by user:ada"
    assert sorted(reasons[3].values())[0] == "best node"
    assert any(label.startswith("vote ") for label in reasons[3].values())


@pytest.mark.django_db
def test_tree_json_and_the_card_show_on_a_tree_run_only(django_user_model):
    user = django_user_model.objects.create_user("ada", password="pw-lovelace-1843")
    tree_run, other = _run(), _run(search="mimosa")
    _store(tree_run, HAND_MADE)
    for run in (tree_run, other):
        add_member(run.task.project, user, "viewer")
    client = Client()
    client.force_login(user)
    data = client.get(f"/runs/{tree_run.pk}/tree.json").json()
    assert data["champion"] == "n1" and len(data["nodes"]) == 4
    page = client.get(f"/runs/{tree_run.pk}/").content.decode()
    assert 'id="tree-card"' in page and f"/runs/{tree_run.pk}/tree.json" in page and "js/tree.js" in page
    assert 'id="tree-card"' not in client.get(f"/runs/{other.pk}/").content.decode()
