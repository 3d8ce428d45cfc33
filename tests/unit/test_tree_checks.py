"""The tree search's programs pass the public plausibility checks (finite, within_range) on every
validation fold and beat the trivial baselines on the same folds (beats_trivial), traced as
``check`` events; a node that fails one is never the champion over one that passes, and the
trace says so. The final commitment runs the
champion on the task's own data: one that cannot deliver there gives way to the next best, and
a search with none that delivers fails with the reason instead of ending "completed".
Fake executor, offline models (tests/unit/test_tree_search.py has the search itself)."""
import csv
import io

import numpy as np
import pytest

import engine.search.tree
from engine.checks import Check

from engine.budget import Budget
from engine.errors import TrellisError
from engine.search.base import AutoGate
from engine.search.tree import CommitmentFailed, Node, Tree, TreeConfig, _FoldChecker, commitment_order
from engine.task import load_task
from tests.fakes import FakeExecutor, OffTarget, Outcome, traceback_of
from tests.unit.test_tree_search import DISC, guarded_tree_search

CONFIG = TreeConfig(iterations=2, seed=0, extra_parents=1, debate_rounds=1, selectors=3)


def _of(events, kind):
    return [e for e in events if e.kind == kind]


class NeighbourRootOnly(FakeExecutor):
    """The first training program (the root) predicts each row's nearest training row, as the
    nearest-neighbour baseline does (so it ties that baseline and passes beats_trivial); every
    later program interpolates linearly between the training rows, which validates better on
    this piecewise-smooth function."""

    def __init__(self, root):
        super().__init__(root)
        self.first = None

    def _predictions(self, code, train, test):
        self.first = self.first or code
        xs = np.array([float(v) for v in train.column("x")])
        ys = np.array([float(v) for v in train.column("y")])
        order = np.argsort(xs, kind="mergesort")
        asked = np.array([float(v) for v in test.column("x")])
        if code == self.first:
            nearest = np.abs(asked[:, None] - xs[None, :]).argmin(axis=1)
            values = ys[nearest]
        else:
            values = np.interp(asked, xs[order], ys[order])
        rows = "".join(f"{i},{v!r}\n" for i, v in zip(test.column("id"), values.tolist()))
        return "id,y\n" + rows, ""


def _children_out_of_range(monkeypatch, executor):
    """Every program but the root gets a failed within_range on each fold, as predictions beyond
    the declared bounds would (a check the engine computes on the fold's predictions)."""
    real = engine.search.tree._fold_checks

    def checks(task, request, result):
        out = real(task, request, result)
        if request.code != executor.first and result.ok:
            out = [c for c in out if c.name != "within_range"] + [
                Check("within_range", False, "3 of 39 predictions above the declared maximum 2.5")]
        return out
    monkeypatch.setattr(engine.search.tree, "_fold_checks", checks)


class RecordingGate(AutoGate):
    def __init__(self):
        self.proposals = []

    def decide(self, proposal):
        self.proposals.append(proposal)
        return super().decide(proposal)


def test_a_node_failing_a_check_is_never_champion_over_one_that_passes(tmp_path, monkeypatch):
    gate, executor = RecordingGate(), NeighbourRootOnly(tmp_path / "sb")
    _children_out_of_range(monkeypatch, executor)
    result, tree, events = guarded_tree_search(tmp_path / "run", [], CONFIG, executor=executor,
                                               budget=Budget(max_tokens=2_000_000), gate=gate)
    root = tree.nodes["n0"]
    children = [n for n in tree.nodes.values() if n.parent]
    assert children and all(n.score < root.score for n in children)  # every child validated better ...
    assert all(n.failed_checks == ["within_range"] for n in children)  # ... with predictions out of range
    assert root.checks and not root.failed_checks
    assert {c["name"] for c in root.checks} == {"finite", "within_range", "beats_trivial"}
    assert tree.champion() is root and result.final["node"] == "n0" and result.final["validation"] == root.score
    # traced: each node's checks, naming the node and the fold
    ranged = [e.payload for e in _of(events, "check") if e.payload["name"] == "within_range"]
    failed = [c for c in ranged if not c["passed"]]
    assert {c["detail"].split(",")[0] for c in failed} == {n.id for n in children}
    assert all("validation fold 1 of" in c["detail"] and "declared maximum" in c["detail"] for c in failed)
    # and the search's end says why the better scores were passed over
    finished = [e.payload for e in _of(events, "search_iteration") if e.payload.get("phase") == "finished"][-1]
    assert finished["champion"] == "n0"
    for n in children:
        assert f"{n.id} scored" in finished["reason"] and "fails within_range" in finished["reason"]
    # the person at the gate sees the failed check beside the better score
    assert gate.proposals and all("fails within_range" in p.rule for p in gate.proposals)
    assert all(not next(c for c in p.evidence.checks if c.name == "within_range").passed for p in gate.proposals)


def test_a_node_printing_a_flattering_score_is_judged_on_trellis_folds(tmp_path):
    """beats_trivial reads Trellis's own validation against the baselines on the same folds: the
    fake's straight line is far worse than the nearest neighbour on this step function, whatever
    the program prints about itself."""
    result, tree, events = guarded_tree_search(
        tmp_path / "run", [], CONFIG, executor=OffTarget(tmp_path / "sb", prints="validation_relative_l2: 0.0001\n"),
        budget=Budget(max_tokens=2_000_000))
    scored = [n for n in tree.nodes.values() if n.status == "scored"]
    assert scored and all("beats_trivial" in n.failed_checks for n in scored)
    trivial = [e.payload for e in _of(events, "check") if e.payload["name"] == "beats_trivial"]
    assert trivial and all("worse than the nearest neighbour" in c["detail"] and "0.0001" not in c["detail"]
                           for c in trivial if not c["passed"])


def test_ranking_puts_every_plausible_node_before_any_implausible_one():
    tree = Tree(task="t", metric="r2", higher_is_better=True)
    bad = {"name": "within_range", "passed": False, "detail": "3 of 30 predictions above 9"}
    good = {"name": "within_range", "passed": True, "detail": "bounds [0, 9]"}
    for i, (score, checks) in enumerate([(0.95, [bad]), (0.60, [good]), (0.70, []), (0.99, [good, bad])]):
        tree.add(Node(id=f"n{i}", parent=None, iteration=0, code="", score=score, status="scored", report="",
                      checks=checks))
    assert [n.id for n in tree.ranked()] == ["n2", "n1", "n3", "n0"]
    assert tree.champion().id == "n2"
    # a tree saved before nodes had checks still loads, every node plausible
    old = tree.to_dict()
    for n in old["nodes"]:
        del n["checks"]
    assert Tree.from_dict(old).champion().id == "n3"


def _validated(i: int, folds: list[float], parent: str | None = "n0", checks=()) -> Node:
    plan = {"split": "kfold", "folds": len(folds)}
    return Node(id=f"n{i}", parent=parent, iteration=0 if parent is None else 1, code="", strategy=f"s{i}",
                score=sum(folds) / len(folds), status="scored", report="", checks=list(checks),
                validation={"ok": True, "value": sum(folds) / len(folds), "split_values": folds, "validation": plan})


def test_a_best_node_whose_gain_over_the_root_is_noise_is_committed_after_the_root():
    """The root is the team's own first program: the commitment keeps it unless a node beats it
    beyond the paired noise of the folds, as Mimosa accepts a change (engine/selection.py)."""
    tree = Tree(task="t", metric="r2", higher_is_better=True)
    tree.add(_validated(0, [0.50, 0.60, 0.40, 0.55, 0.45], parent=None))      # the root, mean 0.50
    tree.add(_validated(1, [0.58, 0.52, 0.47, 0.60, 0.48]))                     # +0.03, folds disagree: noise
    tree.add(_validated(2, [0.60, 0.70, 0.50, 0.65, 0.55]))                     # +0.10 on every fold: real
    tree.add(_validated(3, [0.10, 0.20, 0.30, 0.20, 0.20]))                     # worse
    assert [n.id for n in tree.ranked()] == ["n2", "n1", "n0", "n3"]
    order, notes = commitment_order(tree)
    assert [n.id for n in order] == ["n2", "n0", "n1", "n3"]
    assert len(notes) == 1 and notes[0].startswith("n1 (s1) is not preferred to the root n0: its validation gain")
    assert "within the paired noise" in notes[0] and "noise, not an improvement" in notes[0]
    # without the real improvement, the root itself is committed
    del tree.nodes["n2"]
    assert [n.id for n in commitment_order(tree)[0]][:1] == ["n0"]


def test_a_root_failing_a_check_has_no_standing_and_unpaired_nodes_keep_their_rank():
    bad = {"name": "within_range", "passed": False, "detail": "9 of 178 predictions below 0"}
    tree = Tree(task="t", metric="r2", higher_is_better=True)
    tree.add(_validated(0, [0.50, 0.60, 0.40, 0.55, 0.45], parent=None, checks=[bad]))
    tree.add(_validated(1, [0.51, 0.61, 0.41, 0.56, 0.44]))
    assert [n.id for n in commitment_order(tree)[0]] == ["n1", "n0"]
    tree = Tree(task="t", metric="r2", higher_is_better=True)
    tree.add(_validated(0, [0.50, 0.60, 0.40, 0.55, 0.45], parent=None))
    other_split = _validated(1, [0.51, 0.61, 0.41, 0.56, 0.44])
    other_split.validation["validation"] = {"split": "holdout_range", "folds": 5}
    tree.add(other_split)
    assert [n.id for n in commitment_order(tree)[0]] == ["n1", "n0"]


class Scaled(FakeExecutor):
    """Every training program predicts ``factor`` times the fake's line."""

    def __init__(self, root, factor):
        super().__init__(root)
        self.factor = factor

    def _predictions(self, code, train, test):
        text, summary = super()._predictions(code, train, test)
        rows = list(csv.DictReader(io.StringIO(text)))
        target = list(rows[0])[1]
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({**r, target: repr(float(r[target]) * self.factor)} for r in rows)
        return out.getvalue(), summary


def test_predictions_4000x_too_large_fail_within_range_on_every_fold(tmp_path):
    task = load_task(DISC)
    code = "import pandas as pd\npd.read_csv('data/train.csv')\nopen('predictions.csv', 'w')\n"
    checker = _FoldChecker(task, Scaled(tmp_path / "big", 4000.0))
    metric, _ = task.assessment().validate(code, checker, seed=0)
    assert metric["ok"] and len(checker.folds) == metric["splits"]
    checks = {c.name: c for c in checker.summary("n7")}
    assert not checks["within_range"].passed and checks["finite"].passed
    assert checks["within_range"].detail.startswith("n7, validation fold 1 of")
    assert "above" in checks["within_range"].detail and "more fold(s)" in checks["within_range"].detail

    honest = _FoldChecker(task, Scaled(tmp_path / "ok", 1.0))
    task.assessment().validate(code, honest, seed=0)
    assert all(c.passed for c in honest.summary("n8"))


class BrokenOnTaskData(FakeExecutor):
    """Programs run as usual on validation folds; on the task's own files (the final
    commitment) the first ``times`` of them crash (None: all of them)."""

    def __init__(self, root, times=None):
        super().__init__(root)
        self.times, self.validated, self.crashed = times, set(), []

    def run(self, request):
        on_task = all(str(DISC) in str(p) for p in request.input_files.values())
        if not on_task:
            self.validated.add(request.code)
        elif request.code in self.validated and (self.times is None or len(self.crashed) < self.times):
            self.crashed.append(request.code)
            self.script = {"": Outcome("error", stderr=traceback_of("MemoryError"))}
            try:
                return super().run(request)
            finally:
                self.script = None
        return super().run(request)


def test_a_champion_that_cannot_deliver_on_the_task_data_gives_way_to_the_next_best(tmp_path):
    executor = BrokenOnTaskData(tmp_path / "sb", times=1)
    result, tree, events = guarded_tree_search(tmp_path / "run", [], CONFIG, executor=executor,
                                               budget=Budget(max_tokens=2_000_000))
    best, runner_up = tree.ranked()[:2]
    assert executor.crashed == [best.code]
    # (the fake's line loses to the nearest neighbour here, which is then handed in: the end it
    # replaced is what the search committed to)
    committed = result.final.get("searched") or result.final
    assert committed["node"] == runner_up.id and committed["validation"] == runner_up.score
    assert (tmp_path / "run" / "tree" / "champion.py").read_text() == runner_up.code
    finished = [e.payload for e in _of(events, "search_iteration") if e.payload.get("phase") == "finished"][-1]
    assert finished["champion"] == runner_up.id
    assert f"{best.id}'s program on the task's data: exit_ok failed" in finished["reason"]
    assert f"committed to {runner_up.id}" in finished["reason"]
    commitment = [e.payload for e in _of(events, "check") if e.agent == "final_commitment"]
    assert any(not c["passed"] and c["detail"].startswith(best.id) for c in commitment)
    assert all(c["passed"] for c in commitment if c["detail"].startswith(runner_up.id))


def test_a_search_whose_final_commitment_fails_does_not_end_completed(tmp_path):
    executor = BrokenOnTaskData(tmp_path / "sb")
    with pytest.raises(CommitmentFailed) as caught:
        guarded_tree_search(tmp_path / "run", [], CONFIG, executor=executor, budget=Budget(max_tokens=2_000_000))
    assert isinstance(caught.value, TrellisError)  # the CLI prints it as one line; the studio fails the run
    message = str(caught.value)
    assert "no program to commit to" in message and "exit_ok failed" in message
    assert len(executor.crashed) == CONFIG.final_tries  # the best three nodes were each tried once
    assert all(code in executor.validated for code in executor.crashed)
