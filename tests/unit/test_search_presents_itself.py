"""Each search presents itself (engine/protocol/panels.py): no page, view or engine module
outside engine/search/ branches on a search's name, and each search's panels say what it did."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.search import registry
from engine.trace import Event

ROOT = Path(__file__).resolve().parents[2]


def test_no_code_outside_a_searchs_home_branches_on_its_name():
    names = "|".join(re.escape(n) for n in registry.SEARCHES)
    branching = re.compile(
        rf"""(==|!=|===|!==)\s*["']({names})["']|["']({names})["']\s*(==|!=|===|!==)|"""
        rf"""\bin\s*[(\[{{][^)\]}}]*["']({names})["']|[{{,]\s*["']({names})["']\s*:""")
    places = [p for folder in ("webapp", "templates", "static/js", "engine")
              for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".html", ".js")
              and "search" not in p.relative_to(ROOT).parts[1:2] and "migrations" not in p.parts]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in places
             for i, line in enumerate(p.read_text().splitlines(), 1) if branching.search(line)]
    assert found == []


def test_no_code_outside_the_searches_reads_one_searchs_own_events():
    """Issue 38: what a search's own events mean (the tree's nodes, votes and phases) is read in
    its module alone; the studio asks the search (``Search.state``, ``champion_of``, ``present``)."""
    own = re.compile(r"\b(TreeNode|NodeRetired|TreeVote|TreeIterationStarted|TreeChildAbandoned|TreeFinished|"
                     r"TREE_PHASES|TreeResult|EditorProbe)\b|engine\.search\.(tree|mimosa|scimars|repair)\b")
    places = [p for folder in ("webapp", "engine") for p in (ROOT / folder).rglob("*.py")
              if "search" not in p.relative_to(ROOT).parts[1:2] and "protocol" not in p.relative_to(ROOT).parts[1:2]
              and "migrations" not in p.parts]
    found = [f"{p.relative_to(ROOT)}:{i}" for p in places
             for i, line in enumerate(p.read_text().splitlines(), 1) if own.search(line)]
    assert found == []


LEFT = {"tokens": None}  # the budget left, as a step reports it


def _event(kind: str, payload: dict, iteration: int = 0, agent: str = "engine") -> Event:
    return Event(run_id="r", seq=1, ts=0.0, kind=kind, agent=agent, iteration=iteration, payload=payload)


def test_mimosas_incumbent_is_the_adopted_one_not_the_best_seen():
    events = [_event("judgement", {"iteration_n": 0, "J": 0.6, "workflow_hash": "h", "ok": True, "checks": []}),
              _event("search_iteration", {"search": "mimosa", "n": 1, "J": 0.9, "incumbent_J": 0.6, "workflow_hash": "h", "budget_left": LEFT,
                                          "accepted": False, "decided_by": "user:ada", "reason": "overfits",
                                          "mutation": {"kind": "prompt_refinement", "target": "coder"}}, 1),
              _event("mutation_proposed", {"valid": False, "problems": ["no such role"]}, 2, "mutator"),
              _event("search_iteration", {"search": "mimosa", "n": 3, "J": 0.5, "incumbent_J": 0.6, "workflow_hash": "h", "budget_left": LEFT,
                                          "accepted": True, "decided_by": "policy:auto_improve",
                                          "mutation": {"kind": "contract_edit", "target": "coder->verifier"}}, 3)]
    chart, cards = registry.search_class("mimosa").present(events)
    lines = {line.name: line for line in chart.lines}
    assert lines["incumbent J"].x == [0, 1, 3] and lines["incumbent J"].y == [0.6, 0.6, 0.5]
    assert lines["candidate J"].y == [0.6, 0.9, 0.5]
    titles = [(g.title, c.badge, c.tone) for g in cards.groups for c in g.cards]
    assert titles == [("Iteration 3", "adopted", "good"), ("Iteration 2", "not a valid change", "bad"),
                      ("Iteration 1", "rejected", "bad")]
    text = " ".join(line for g in cards.groups for c in g.cards for line in c.lines)
    assert "decided by ada: overfits" in text and "policy (auto improve)" in text


def test_a_scimars_round_shows_its_reference_editors_composition_gate_receipts_and_lessons():
    n = 2
    events = [_event("reuse_receipt", {"label": "r2-reference", "verified": True, "reused_run_id": "r1-successor",
                                              "workflow_hash": "h"}, n),
              _event("search_iteration", {"search": "scimars", "n": n, "editor": "procedure_editor", "supported": True,
                                          "workflow_hash": "h", "budget_left": LEFT,
                                          "validation": 0.31, "reference_validation": 0.40,
                                          "mutation": {"kind": "procedure_refinement", "target": "planner",
                                                       "rationale": "fit the jump"}}, n),
              _event("mutation_proposed", {"editor": "contract_editor", "valid": False, "problems": ["bad type"]},
                     n, "contract_editor"),
              _event("composition", {"n": n, "decision": "adopt", "editors": ["procedure_editor"],
                                     "supported": ["procedure_editor"], "checks_passed": 5, "validation": 0.31,
                                     "reference_validation": 0.40}, n),
              _event("composition", {"n": n, "gate": "user:ada", "approved": True, "reason": "clear win",
                                     "decision": "adopt"}, n),
              _event("reflection", {"n": n, "lessons": ["the jump matters"], "source": "offline",
                                     "evidence_sha256": "x"}, n)]
    chart, cards = registry.search_class("scimars").present(events)
    assert [line.name for line in chart.lines] == ["reference run", "composed successor", "procedure_editor"]
    (round_,) = cards.groups
    assert round_.title == "Round 2"
    titles = [c.title for c in round_.cards]
    assert titles == ["reference run", "reused: r2-reference", "procedure_editor: procedure_refinement on planner",
                      "contract_editor: no usable proposal", "composer: adopt procedure_editor", "gate: adopt",
                      "lessons (offline)"]
    assert "decided by ada: clear win" in round_.cards[5].lines[0]
    assert "validation 0.4" in round_.cards[0].lines[0]


@pytest.mark.parametrize("name", registry.SEARCHES)
def test_every_search_presents_nothing_before_it_did_anything(name):
    assert registry.search_class(name).present([]) == []
