"""The AgenticSciML tree search on real sandboxed code, where only real execution can tell:
first drafts with real mistakes fail with real tracebacks and the debugger repairs them. The search logic is tested on the fake executor in
tests/unit/test_tree_search.py; one full real tree search is in tests/integration/test_evolve.py."""

import pytest

from engine.offline import scientist
from engine.search.tree import TreeConfig
from tests.unit.test_tree_search import guarded_tree_search

pytestmark = pytest.mark.slow

def test_buggy_drafts_fail_for_real_are_debugged_and_a_node_retires_with_its_children(tmp_path, monkeypatch):
    from engine.sandbox.subprocess_executor import SubprocessExecutor

    monkeypatch.setattr(scientist, "BUG_RATE", 1.0)  # every first draft has a mistake
    touched: list = []
    config = TreeConfig(iterations=1, seed=3, extra_parents=1, debate_rounds=1, max_children=1)
    result, tree, events = guarded_tree_search(tmp_path / "run", touched, config,
                                               executor=SubprocessExecutor(root=tmp_path / "sandbox"))
    assert len(tree.nodes) == 2 and all(n.status == "scored" for n in tree.nodes.values())
    # the root is the team's first program, repaired inside the team's own run; the child's draft by the tree's debugger
    team = [e for e in events if e.run_id == "001-team-root"]
    assert any(e.kind == "code_execution" and e.payload["status"] != "ok" for e in team)
    assert any(e.kind == "agent_finished" and e.agent == "debugger" for e in team)
    assert tree.nodes["n1"].debug_attempts >= 1
    runs = [e.payload for e in events if e.kind == "code_execution" and e.run_id != "001-team-root"]
    first_runs = [p for p in runs if p.get("attempt") == 0 and p.get("node") != "n0"]
    assert first_runs and all(p["status"] != "ok" or not p["validation"]["ok"] for p in first_runs)
    assert any("Traceback" in p["stderr"] for p in first_runs)  # real failures, from really running the code
    assert any(e.payload["role"] == "debugger" for e in events if e.kind == "model_call")
    # max_children=1: the root retires with its first child (that a retired node is never
    # selected again is tested in tests/unit/test_tree_search.py)
    assert [e.payload["node"] for e in events if e.kind == "node_retired"] == ["n0"]
    assert [(n.id, n.parent) for n in tree.nodes.values()] == [("n0", None), ("n1", "n0")]
    assert tree.nodes["n0"].retired and tree.nodes["n0"].retired_at == 1
    assert touched == []
