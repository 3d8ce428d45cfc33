"""The AgenticSciML tree trains its selected parents' children in parallel when several training
workers exist (the executor's capacity, engine/training): the children of one iteration are
debated, built and validated at once, yet the tree is the same whatever finishes first (node ids
and the gate in parent order). Fake executor, offline models: no program runs."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from engine.budget import Budget
from engine.search.tree import TreeConfig
from engine.training.jobs import hosting_jobs
from tests.fakes import FakeExecutor
from tests.unit.test_tree_search import guarded_tree_search


class _Slots:
    """A job host with training workers for two jobs at once (no training program runs here)."""

    def __init__(self, slots: int) -> None:
        self._slots = slots

    def slots(self) -> int:
        return self._slots

    def send(self, spec: dict) -> None:  # pragma: no cover - the fake executor's programs are not jobs
        raise AssertionError("no training program in this test")

    def waiting(self) -> None:
        return None


class _Overlap(FakeExecutor):
    """Counts how many validation runs are going on at once (each one lasting a moment)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.lock, self.now, self.most = threading.Lock(), 0, 0
        self.threads: set[str] = set()

    def run(self, request):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.threads.add(threading.current_thread().name)
        try:
            time.sleep(0.05)
            return super().run(request)
        finally:
            with self.lock:
                self.now -= 1


def _search(tmp: Path, slots: int):
    executor = _Overlap(tmp / "sandbox")
    config = TreeConfig(iterations=2, seed=0, extra_parents=1, debate_rounds=1, selectors=3)
    with hosting_jobs(_Slots(slots)):
        result, tree, events = guarded_tree_search(tmp / "run", [], config, executor=executor,
                                                   budget=Budget(max_tokens=2_000_000))
    return executor, tree, events


@pytest.fixture(scope="module")
def parallel(tmp_path_factory):
    return _search(tmp_path_factory.mktemp("parallel"), slots=2)


def test_an_iterations_children_are_built_at_once_when_two_training_workers_exist(parallel):
    executor, tree, events = parallel
    started = [e.payload for e in events if e.kind == "search_iteration" and e.payload.get("phase") == "started"]
    assert [len(s["parents"]) for s in started] == [1, 2]  # iteration 2 expands two parents
    assert executor.most >= 2  # two children's validation runs overlapped
    assert any(name.startswith("tree-move") for name in executor.threads)
    # ids and the tree's order follow the parents' order, and each child is its parent's
    second = [n for n in tree.nodes.values() if n.iteration == 2]
    assert [n.parent for n in second] == started[1]["parents"]
    assert [n.id for n in second] == sorted((n.id for n in second), key=lambda i: int(i[1:]))
    # every child passed the gate, one after the other, in that order
    recorded = [e.payload["node"] for e in events if e.kind == "tree_node" and e.payload.get("iteration") == 2]
    assert recorded == [n.id for n in second]


def test_the_same_search_again_grows_the_same_tree(parallel, tmp_path):
    _, again, _ = _search(tmp_path, slots=2)
    _, tree, _ = parallel
    shape = lambda t: [(n.id, n.parent, n.iteration, n.strategy, n.score) for n in t.nodes.values()]  # noqa: E731
    assert shape(again) == shape(tree)

