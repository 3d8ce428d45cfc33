"""The AgenticSciML tree search's logic, run through ``evolve`` on the fake executor (real
orchestration and offline models, no program runs): every node scored from its own execution,
the champion, the tree file, the trace, the selector ensemble, retirement, the knowledge base,
the offline roles and the budget; the search never reads held-out data nor runs the evaluator.
The real end-to-end search is in tests/integration/test_tree_search.py."""
import builtins
import functools
import io
import json
import math
import subprocess
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

import engine.ending
import engine.evaluation
import engine.evolve
import engine.official
from engine.budget import Budget
from engine.evolve import evolve
from engine.run_spec import RunSpec
from engine.knowledge import load_knowledge, retrieve
from engine.offline import scientist
from engine.offline.strategy import ONE_D, DataSpec
from engine.offline.strategies import get_strategy
from engine.harness import DEFAULT_PROCEDURES
from engine.prompt_format import extract_code
from engine.prompts import ANSWER_FORMATS, role_of
from engine.search.tree import (Node, SearchContext, Tree, TreeConfig, TreeSearch, build_messages, majority_vote,
                                parse_strategy, parse_verdict, parse_vote, select_parents)
from engine.task import load_task
from engine.trace import ListSink, Tracer
from tests.fakes import FakeExecutor, split_spec

DISC = Path(__file__).resolve().parents[2] / "examples" / "discontinuous-1d"
JUMP_REPORT = ("- largest jump between neighbouring sorted points: +1.003 between x = -0.0008 and 0.0008\n"
               "- strong evidence of a discontinuity: a single smooth global model will ring around it; "
               "consider a piecewise fit split at the jump")


def guarded_tree_search(tmp: Path, touched: list, config: TreeConfig, executor=None, **kw):
    """``evolve`` with the tree search under ``config``, with the official evaluator and the
    held-out data booby-trapped: any use is recorded (and refused), so a test can assert there
    was none. The official scoring after the search goes to a stand-in."""
    def refuse(what):
        touched.append(what)
        raise AssertionError(f"the tree search touched {what}")

    real_open, real_popen = builtins.open, subprocess.Popen

    def guarded_open(file, *a, **k):
        if "heldout" in str(file):
            refuse(str(file))
        return real_open(file, *a, **k)

    class GuardedPopen(real_popen):
        def __init__(self, args, *a, **k):
            command = " ".join(map(str, args if isinstance(args, (list, tuple)) else [args]))
            # Validation folds are scored by evaluate.py --truth through the fold scorer, which
            # refuses it the answer key (tests/adversarial/test_in_loop_scoring.py); nothing else.
            # The task's preflight (before the search) runs evaluate.py on a trivial answer, on its own thread.
            preflight = threading.current_thread().name == "trellis-preflight-evaluate"
            if "evaluate.py" in command and "fold_scorer.py" not in command and not preflight:
                refuse(f"subprocess {args}")
            super().__init__(args, *a, **k)

    sink = ListSink()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine.evolve, "search_class", lambda name: functools.partial(TreeSearch, config=config))
        stand_in = {"ok": True, "metric": "relative_l2", "value": 0.1, "higher_is_better": False, "n": 1000}
        # a program run now, or the predictions the champion wrote at the final commitment
        mp.setattr(engine.official, "official_for_code", lambda task, code, executor: stand_in)
        mp.setattr(engine.official, "official_for_predictions", lambda task, predictions: stand_in)
        # the champion bundle's held-out plots read the answer key after the search: not here
        mp.setattr(engine.official, "heldout_truth", lambda task: None)
        mp.setattr(engine.evaluation, "evaluate_predictions", lambda *a, **k: refuse("evaluate_predictions"))
        # The trivial baselines are scored officially after the final commitment, like the stand-in above.
        mp.setattr(engine.ending, "official_baselines", lambda task, *predictions: {})
        mp.setattr(builtins, "open", guarded_open)
        mp.setattr(subprocess, "Popen", GuardedPopen)
        result = evolve(DISC,
                        split_spec(RunSpec(search="tree", iterations=config.iterations, seed=config.seed, single_agent=False), kw),
                        run_dir=tmp, out=io.StringIO(), runs_dir=tmp.parent,
                        executor=executor or FakeExecutor(tmp.parent / f"{tmp.name}-sandbox"), sinks=[sink], **kw)
    return result, Tree.load(tmp / "tree" / "tree.json"), sink.events


@pytest.fixture(scope="module")
def search(tmp_path_factory):
    touched: list = []
    run_dir = tmp_path_factory.mktemp("tree") / "run"
    config = TreeConfig(iterations=2, seed=0, extra_parents=1, debate_rounds=1, selectors=3)
    result, tree, events = guarded_tree_search(run_dir, touched, config, budget=Budget(max_tokens=2_000_000))
    return SimpleNamespace(result=result, tree=tree, events=events, run_dir=run_dir / "tree", touched=touched)


def _of(events, kind):
    return [e for e in events if e.kind == kind]


# --- the search end to end ------------------------------------------------------------------------
def test_short_search_scores_every_node_from_executed_code(search):
    result, tree = search.result, search.tree
    assert result.iterations == 2
    assert len(tree.nodes) == 4  # root; iteration 1 expands it; iteration 2 the best + one voted parent
    runs = {}
    for e in _of(search.events, "code_execution"):
        if e.payload["purpose"] == "in-loop validation":
            runs[e.payload["node"]] = e.payload  # the last run of each node is the one scored
    for node in tree.nodes.values():
        assert node.status == "scored" and math.isfinite(node.score), node.id
        assert runs[node.id]["status"] == "ok" and runs[node.id]["validation"]["value"] == node.score
        assert node.strategy and node.report and node.proposal
        assert node.children == len(tree.children_of(node.id))
        assert len(node.knowledge) <= 1
    # the root is the team's own first program (one run of its initial workflow); every other node was debated
    root = tree.nodes["n0"]
    assert root.parent is None and root.proposal.startswith("The team's own first program") and not root.debate
    assert (search.run_dir / "001-team-root" / "summary.json").is_file()
    assert root.code == json.loads((search.run_dir / "001-team-root" / "summary.json").read_text())["final_code"]
    assert all(n.debate and n.debate[-1]["speaker"] in {"proposer", "critic"} for n in tree.nodes.values() if n.parent)
    assert {n.verdict for n in tree.nodes.values() if n.parent} <= {"improved", "regressed", "unchanged"}
    # The score is a fact about the code: running the champion again gives it again.
    champion = tree.champion()
    metric, _ = load_task(DISC).assessment().validate(champion.code, FakeExecutor(search.run_dir / "recheck"))
    assert metric["value"] == pytest.approx(champion.score)


def test_champion_is_the_best_node_and_at_least_as_good_as_the_root(search):
    result, tree = search.result, search.tree
    assert not tree.higher_is_better  # relative_l2
    champion = tree.champion()
    assert champion.score == min(n.score for n in tree.nodes.values())
    assert champion.score <= tree.nodes["n0"].score
    # what the search committed to (a trivial baseline handed in instead keeps it beside itself)
    committed = result.final.get("searched") or result.final
    assert committed["validation"] == champion.score and result.initial["validation"] == tree.nodes["n0"].score
    assert (search.run_dir / "champion.py").read_text() == champion.code


def test_tree_json_round_trips(search):
    tree = search.tree
    assert Tree.from_dict(json.loads(json.dumps(tree.to_dict()))).to_dict() == tree.to_dict()
    assert tree.data_report.startswith("# Exploratory data analysis")


def test_every_step_is_traced(search):
    kinds = {e.kind for e in search.events}
    assert {"search_started", "model_call", "knowledge_retrieval", "debate_turn", "selector_vote", "tool_call",
            "code_execution", "tree_node", "search_iteration", "search_finished"} <= kinds
    roles = {e.payload["role"] for e in _of(search.events, "model_call")}
    assert {"analyzer", "proposer", "critic", "engineer", "selector", "result_analyst"} <= roles
    assert [e.payload["node"] for e in _of(search.events, "tree_node")] == list(search.tree.nodes)
    # the search's own events are its trace; the team's first run (the root) traces into its own folder
    own = [e for e in search.events if e.run_id == search.events[0].run_id]
    assert Path(search.result.trace).read_text().count("\n") == len(own)
    assert {e.run_id for e in search.events} == {search.events[0].run_id, "001-team-root"}


def test_selector_votes_are_traced_and_the_majority_decides(search):
    tree = search.tree
    decisions = [e for e in _of(search.events, "search_iteration") if e.payload.get("phase") == "vote"]
    assert decisions, "iteration 2 has a second eligible node, so the ensemble must have voted"
    for d in decisions:
        votes = [e for e in _of(search.events, "selector_vote")
                 if e.iteration == d.iteration and e.payload["slot"] == d.payload["slot"]]
        assert len(votes) == 3
        assert [v.payload["vote"] if v.payload["valid"] else None for v in votes] == d.payload["votes"]
        candidates = [tree.nodes[i] for i in votes[0].payload["candidates"]]
        assert d.payload["winner"] == majority_vote(d.payload["votes"], candidates, tree.higher_is_better)
        started = next(e for e in _of(search.events, "search_iteration")
                       if e.iteration == d.iteration and e.payload.get("phase") == "started")
        assert d.payload["winner"] in started.payload["parents"]


def test_search_never_reads_heldout_or_runs_the_evaluator(search):
    assert search.touched == []
    for e in _of(search.events, "tool_call") + _of(search.events, "code_execution"):
        # (a validation score names its scorer, evaluate.py --truth, run by the engine: not the program)
        text = json.dumps(e.payload).replace('"scorer": "evaluate.py"', "")
        assert "evaluate.py" not in text and "heldout" not in text
    own = [e for e in search.events if e.run_id == search.events[0].run_id]
    assert {e.payload["purpose"] for e in _of(own, "code_execution")} == {
        "exploratory analysis", "in-loop validation", "final commitment"}
    # the team's first run, whose program is the root, ran its candidate in the sandbox like any team run
    assert {e.payload["purpose"] for e in _of(search.events, "code_execution") if e.run_id == "001-team-root"} \
        <= {"candidate solution", "exploratory analysis"}
    # The final commitment runs the champion alone on the task's own files (never scored here).
    commitment = [e.payload for e in _of(search.events, "tool_call") if e.payload["purpose"] == "final commitment"]
    assert [c["node"] for c in commitment] == [search.tree.champion().id]
    assert commitment[0]["data"] == ["data/test_features.csv", "data/train.csv"]


# --- unit rules ----------------------------------------------------------------------------------------
def _node(i, score, parent=None, children=0):
    return Node(id=f"n{i}", parent=parent, iteration=0, code="", score=score, status="scored", report="",
                children=children)


def test_majority_vote_counts_valid_votes_and_breaks_ties_deterministically():
    nodes = [_node(1, 0.30), _node(2, 0.20), _node(3, 0.20)]
    assert majority_vote(["n1", "n3", "n1"], nodes, higher_is_better=False) == "n1"
    assert majority_vote(["n1", "n2"], nodes, higher_is_better=False) == "n2"       # tie: better score
    assert majority_vote(["n1", "n2"], nodes, higher_is_better=True) == "n1"        # ... in its direction
    assert majority_vote(["n3", "n2"], nodes, higher_is_better=False) == "n2"       # then the older node
    assert majority_vote(["n3", "n2"], list(reversed(nodes)), False) == "n2"        # order never matters
    assert majority_vote(["n9", None, "n2", "n9"], nodes, higher_is_better=False) == "n2"  # n9 not a candidate
    assert majority_vote([None, "n7"], nodes, higher_is_better=False) is None


class _VotesFor:
    """A gateway whose every selector votes for one fixed node; records the prompts."""

    def __init__(self, node_id):
        self.node_id, self.prompts = node_id, []

    def complete(self, agent, role, messages, **kw):
        self.prompts.append(messages[1]["content"])
        return SimpleNamespace(text=f"vote: {self.node_id}\nreason: fixed")


def test_a_node_retires_after_max_children_and_is_never_selected_again(tmp_path):
    tree = Tree(task="t", metric="relative_l2", higher_is_better=False, max_children=2)
    tree.add(_node(0, 0.10))
    assert tree.add(_node(1, 0.30, parent="n0")) is None
    retired = tree.add(_node(2, 0.20, parent="n0"))
    assert retired is tree.nodes["n0"] and retired.retired and retired.children == 2
    assert [n.id for n in tree.eligible()] == ["n2", "n1"]
    assert tree.champion().id == "n0"  # retired from parenthood, still the best solution

    sink = ListSink()
    gateway = _VotesFor("n0")  # every voter wants the retired node
    ctx = SearchContext(load_task(DISC), gateway, None, Tracer("t", [sink]),
                        TreeConfig(extra_parents=1, max_children=2), tmp_path, [])
    parents = select_parents(ctx, tree)
    assert [p.id for p in parents] == ["n2", "n1"]
    assert gateway.prompts and all("- n0 " not in p for p in gateway.prompts)
    assert all(not e.payload["valid"] for e in sink.events if e.kind == "selector_vote")


def test_knowledge_retrieval_returns_nothing_for_an_unrelated_report_and_one_for_a_match():
    assert retrieve("The survey lists the opening hours of the city libraries and the weather.") == []
    assert retrieve("The model is smooth.") == []  # a single shared word is too weak
    match = retrieve(JUMP_REPORT)
    assert [m.entry.id for m in match] == ["piecewise-discontinuity"]
    assert retrieve(JUMP_REPORT, exclude={"piecewise-discontinuity"})[0].entry.id == "mixture-of-experts"
    scales = retrieve("- features are on very different scales: scaling matters for distance, kernel models")
    assert [m.entry.id for m in scales] == ["feature-scaling"]


def test_the_knowledge_base_is_real_and_its_strategy_hints_render():
    entries = load_knowledge()
    ids = {e.id for e in entries}
    assert {"mixture-of-experts", "adaptive-loss-weighting", "residual-based-resampling", "hard-boundary-conditions",
            "lbfgs-fine-tuning", "piecewise-discontinuity", "feature-scaling", "ensembling-stacking",
            "regularisation"} <= ids
    one_d, tabular = (DataSpec("data/train.csv", "data/test_features.csv", "y", features, "id", "predictions.csv")
                      for features in (("x",), ("x", "z")))
    for e in entries:
        assert e.title and len(e.tags) >= 3 and len(e.when_to_use) > 80 and len(e.how) > 80, e.id
        for key, params in e.strategies:
            strategy = get_strategy(key)
            spec = one_d if ONE_D in strategy.families else tabular
            assert strategy.render(params, spec, 0)  # hints name real strategies and valid params


# --- the offline roles read their prompts --------------------------------------------------------------
def _ask_offline(role, inputs, seed=0):
    task = load_task(DISC)
    messages = build_messages(task, role, inputs)
    assert role_of(messages[0]["content"]) == role
    return scientist.respond(messages, seed=seed)


PARENT = "\n".join(["id: n0", 'strategy: piecewise_poly {"degree": 10, "gap_rule": "blend", "min_side": 10, '
                    '"search_degree": 3, "side_model": "spline"}', "validation_score: 0.0163",
                    "direction: lower is better", "children: 1"])


def test_offline_critic_objects_to_copies_and_contradictions_and_accepts_a_sound_proposal():
    base = {"parent": PARENT, "parent_report": JUMP_REPORT, "data_findings": JUMP_REPORT, "knowledge": "none retrieved",
            "tried": '- n0: piecewise_poly {"degree": 10, "gap_rule": "blend", "min_side": 10, "search_degree": 3, '
                     '"side_model": "spline"} score=0.0163'}
    copy = _ask_offline("critic", {**base, "proposal": PARENT.splitlines()[1]})
    assert parse_verdict(copy) == "revise" and "copy" in copy
    # degree is unused by the spline side model: the same program in other words is still a copy
    same_program = _ask_offline("critic", {**base, "proposal": PARENT.splitlines()[1].replace('"degree": 10',
                                                                                              '"degree": 14')})
    assert parse_verdict(same_program) == "revise"
    smooth = _ask_offline("critic", {**base, "proposal": 'strategy: global_poly {"degree": 9}'})
    assert parse_verdict(smooth) == "revise" and "avoid: global_poly" in smooth and "discontinuity" in smooth
    sound = _ask_offline("critic", {**base, "proposal": 'strategy: extra_trees {"n_estimators": 200}'})
    assert parse_verdict(sound) == "accept"


def test_offline_proposer_revises_away_from_what_the_critic_rejected():
    inputs = {"parent": PARENT, "parent_report": JUMP_REPORT, "data_findings": JUMP_REPORT,
              "knowledge": "none retrieved", "tried": "nothing yet", "strategy_library": "(see the library)"}
    first = parse_strategy(_ask_offline("proposer", inputs))
    assert first is not None
    debate = (f"### round 1: proposer\nstrategy: {first[0]} {json.dumps(first[1])}\n\n### round 1: critic\n"
              f"verdict: revise\nobjection: no\nrejected: {first[0]} {json.dumps(first[1])}\navoid: {first[0]}")
    revised = parse_strategy(_ask_offline("proposer", {**inputs, "debate": debate}))
    assert revised is not None and revised[0] != first[0]


def test_offline_proposer_starts_a_strategy_new_to_the_branch_from_its_conventional_settings():
    inputs = {"parent": PARENT, "parent_report": JUMP_REPORT, "data_findings": JUMP_REPORT,
              "knowledge": "none retrieved", "tried": "nothing yet", "strategy_library": "(see the library)",
              # the critic ruled out the parent's own approach, so every proposal is new to the branch
              "debate": "### round 1: critic\nverdict: revise\nobjection: refine elsewhere\navoid: piecewise_poly"}
    keys = set()
    for seed in range(8):
        key, params = parse_strategy(_ask_offline("proposer", inputs, seed=seed))
        assert key != "piecewise_poly" and params == json.loads(json.dumps(get_strategy(key).default_params())), key
        keys.add(key)
    assert keys


def test_offline_proposer_leaves_a_strategy_whose_last_change_made_no_difference():
    unchanged = ("verdict: unchanged\n- n1 (piecewise_poly) scored 0.0163 against its parent n0 (piecewise_poly) "
                 "at 0.0163 on relative_l2 (lower is better): 0.0% different.\n"
                 "- next: the change made no difference; try a structurally different strategy.")
    inputs = {"parent": PARENT.replace("id: n0", "id: n1"), "parent_report": unchanged, "data_findings": JUMP_REPORT,
              "knowledge": "none retrieved", "tried": f"- n0: {PIECEWISE} score=0.0163", "strategy_library": "-"}
    for seed in range(6):
        assert parse_strategy(_ask_offline("proposer", inputs, seed=seed))[0] != "piecewise_poly"
    # after a change that did matter, refining the same approach stays an option
    improved = {**inputs, "parent_report": unchanged.replace("verdict: unchanged", "verdict: improved")}
    assert "piecewise_poly" in {parse_strategy(_ask_offline("proposer", improved, seed=s))[0] for s in range(6)}


def _selector_votes(metric: str, nodes: list[str]) -> list[str | None]:
    """Twenty offline selectors' votes on a candidates listing (lower is better)."""
    listing = "\n".join(["direction: lower is better", f"metric: {metric}", "max_children: 10", *nodes])
    return [parse_vote(_ask_offline("selector", {"candidates": listing, "voter": f"selector {i} of 20"}))
            for i in range(20)]


def test_offline_selector_votes_for_a_listed_node_mostly_the_best():
    votes = _selector_votes("relative_l2", ["- n1 score=0.05 children=0/10 strategy=knn parent=n0",
                                            "- n2 score=0.02 children=3/10 strategy=piecewise_poly parent=n0",
                                            "- n3 score=0.09 children=0/10 strategy=svr parent=n0"])
    assert set(votes) <= {"n1", "n2", "n3"}
    assert votes.count("n2") > len(votes) / 2  # mostly the strongest, sometimes exploring
    assert len(set(votes)) > 1


PIECEWISE = ('piecewise_poly {"degree": 10, "gap_rule": "blend", "min_side": 10, "search_degree": 3, '
             '"side_model": "spline"}')


def _blend_inputs(partner_score: str, parent_score: str = "0.0163") -> dict:
    return {"parent": PARENT.replace("0.0163", parent_score), "parent_report": JUMP_REPORT,
            "data_findings": JUMP_REPORT, "knowledge": "none retrieved", "strategy_library": "(see the library)",
            "tried": f"- n0: {PIECEWISE} score={parent_score}\n"
                     f'- n1: extra_trees {{"max_features": 1.0, "min_samples_leaf": 1, "n_estimators": 200}} '
                     f"score={partner_score}\n"
                     '- n2: knn {"n_neighbors": 5, "weights": "distance"} score=0.5'}


def test_offline_proposer_blends_the_best_node_with_a_comparable_other_approach_and_only_then():
    proposal = _ask_offline("proposer", _blend_inputs("0.0200"))
    key, params = parse_strategy(proposal)
    assert key == "blend", proposal
    assert [part[0] for part in params["parts"]] == ["piecewise_poly", "extra_trees"]  # the best first
    assert "n0 (piecewise_poly" in proposal and "n1 (extra_trees" in proposal
    # a partner far worse than the best would only drag the average towards it
    assert parse_strategy(_ask_offline("proposer", _blend_inputs("0.09")))[0] != "blend"
    # from a parent that is not the best node, the proposer explores that line instead
    assert parse_strategy(_ask_offline("proposer", _blend_inputs("0.0100")))[0] != "blend"
    # a node whose predictions fail a check is no partner (nor is it the best node to start from)
    failing = _blend_inputs("0.0200")
    failing["tried"] = failing["tried"].replace("score=0.0200", "score=0.0200 fails within_range")
    assert parse_strategy(_ask_offline("proposer", failing))[0] != "blend"
    failing = _blend_inputs("0.0100")
    failing["tried"] = failing["tried"].replace("score=0.0100", "score=0.0100 fails within_range") + \
        '\n- n4: svr {"C": 10.0, "epsilon": 0.05, "gamma": "scale"} score=0.018'
    key, other = parse_strategy(_ask_offline("proposer", failing))
    assert key == "blend" and [part[0] for part in other["parts"]] == ["piecewise_poly", "svr"]
    # once the blend ran, it is not proposed again; the critic calls a repeat a copy
    tried = _blend_inputs("0.0200")
    tried["tried"] += f"\n- n3: blend {json.dumps(params, sort_keys=True)} score=0.015"
    assert parse_strategy(_ask_offline("proposer", tried))[0] != "blend"
    critique = _ask_offline("critic", {**tried, "proposal": proposal.splitlines()[0]})
    assert parse_verdict(critique) == "revise" and "n3 already ran" in critique


def test_offline_engineer_renders_the_blend_it_was_asked_for_and_never_plants_a_bug_in_it():
    proposal = _ask_offline("proposer", _blend_inputs("0.0200")).splitlines()[0]
    for seed in range(12):  # the engineer plants a first-draft bug now and then, never in a blend
        code = extract_code(_ask_offline("engineer", {"proposal": proposal}, seed=seed))
        assert parse_strategy(code) == parse_strategy(proposal)
        assert code.count("# strategy: ") == 3  # the blend's header and each part's own
        compile(code, "blend.py", "exec")
    # a part's setting outside its options: the first part alone, with its conventional settings
    bad = 'strategy: blend {"parts": [["piecewise_poly", {"side_model": "bogus"}], ["extra_trees", {}]]}'
    code = extract_code(_ask_offline("engineer", {"proposal": bad}, seed=1))
    assert parse_strategy(code) == ("piecewise_poly", get_strategy("piecewise_poly").default_params())


def test_offline_debugger_rewrites_a_failed_blend_from_its_parts_without_calling_it_inapplicable():
    bad = '# strategy: blend {"parts": [["piecewise_poly", {"side_model": "bogus"}], ["extra_trees", {}]]}\nprint(1)\n'
    messages = build_messages(load_task(DISC), "debugger", {"code": bad}, procedure=DEFAULT_PROCEDURES["debugger"],
                              answer_format=ANSWER_FORMATS["debugger"],
                              feedback={"from": "sandbox", "status": "failed", "detail": {"stderr_tail": "something odd"}})
    answer = scientist.respond(messages, seed=1)
    assert "cannot extrapolate" not in answer  # its parts are what this task allows
    assert parse_strategy(extract_code(answer)) == ("piecewise_poly", get_strategy("piecewise_poly").default_params())


def test_offline_selector_prefers_the_best_node_whose_predictions_pass_their_checks():
    votes = _selector_votes("rmse", ["- n1 score=0.80 children=0/10 strategy=mlp parent=n0 fails within_range",
                                     "- n0 score=0.83 children=1/10 strategy=ridge parent=-",
                                     "- n2 score=0.95 children=0/10 strategy=svr parent=n0"])
    assert votes.count("n0") > len(votes) / 2 and votes.count("n1") < votes.count("n0")


# --- stopping ------------------------------------------------------------------------------------------
def test_budget_exhaustion_stops_cleanly_and_keeps_the_partial_tree(tmp_path):
    touched: list = []
    config = TreeConfig(iterations=4, seed=0, extra_parents=1, debate_rounds=1)
    result, tree, events = guarded_tree_search(tmp_path / "run", touched, config, budget=Budget(max_calls=12))
    assert "budget" in result.stopped and "call budget" in result.stopped
    assert result.iterations < 4 and len(tree.nodes) >= 2
    assert (tmp_path / "run" / "tree" / "champion.py").read_text() == tree.champion().code
    assert all(n.status == "scored" for n in tree.nodes.values())  # no half-built child was kept
    assert len(_of(events, "model_call")) == 12 and _of(events, "budget_exhausted")
    assert _of(events, "search_finished")[-1].payload["stopped"] == result.stopped
    assert touched == []


def test_a_root_that_never_ran_cleanly_is_retried_and_the_debugger_is_never_asked_twice_the_same(tmp_path):
    """Issue 37, item 15: the tree asked the debugger the identical request three times (the same
    code, the same error, a fixed seed: ~230 s of model time for nothing), and stopped at 0 of 2
    iterations when its root failed."""
    from tests.fakes import Outcome, traceback_of

    failures = [12]  # the first programs that write predictions crash, whatever the debugger does

    def script(code: str):
        if "predictions" in code and failures[0] > 0:
            failures[0] -= 1
            return Outcome("error", stderr=traceback_of("ModuleNotFoundError: No module named 'scipy.fancy'"))
        return None

    touched: list = []
    config = TreeConfig(iterations=2, seed=0, extra_parents=0, debate_rounds=1, selectors=1)
    result, tree, events = guarded_tree_search(tmp_path / "run", touched, config, budget=Budget(max_tokens=2_000_000),
                                               executor=FakeExecutor(tmp_path / "sandbox", script=script))
    asked = [e.payload["request_key"] for e in events if e.kind == "model_call" and e.payload["role"] == "debugger"]
    assert len(asked) == len(set(asked)), "the debugger was asked the identical request again"
    assert result.iterations >= 1, result.stopped  # the failed root was tried again, not the end of the search
    assert len(tree.nodes) > 1 and tree.nodes["n1"].parent == "n0"


def test_a_program_the_tree_already_validated_is_refused_before_it_runs(tmp_path, monkeypatch):
    """Issue 39, item 5: a child whose program equals one already probed spent a validation and
    taught the search nothing. Here the engineer writes its first program again for every later child (laid
    out anew): each child is abandoned, saying so, and its program never reaches the sandbox."""
    import engine.search.tree as tree_module

    real_ask, first = tree_module.SearchContext.ask, []

    def same_program(self, who, role, *a, **k):
        answer = real_ask(self, who, role, *a, **k)
        if who != "engineer":
            return answer
        if not first:
            first.append(answer)
            return answer
        return _laid_out_anew(first[0])

    monkeypatch.setattr(tree_module.SearchContext, "ask", same_program)
    executor = FakeExecutor(tmp_path / "sandbox")
    config = TreeConfig(iterations=2, seed=0, extra_parents=0, debate_rounds=1, selectors=1)
    result, tree, events = guarded_tree_search(tmp_path / "run", [], config, budget=Budget(max_tokens=2_000_000),
                                               executor=executor)
    abandoned = [e.payload["error"] for e in events if e.kind == "search_iteration"
                 and e.payload.get("phase") == "child_abandoned"]
    written = extract_code(first[0])
    holders = [n.id for n in tree.nodes.values() if n.code == written]
    assert len(holders) == 1 and abandoned  # one node has the program; every later child was refused
    assert all(f"{holders[0]}'s program again" in why and "not run twice" in why for why in abandoned)
    again = extract_code(_laid_out_anew(first[0]))
    assert again != written and tree_module.program_key(again) == tree_module.program_key(written)
    ran = {r.code for r in executor.requests}
    assert written in ran and again not in ran


def _laid_out_anew(answer: str) -> str:
    """The same program with a comment and a blank line more."""
    code = extract_code(answer)
    return answer.replace(code, "# laid out anew\n\n" + code, 1)


def _v(folds):
    return {"ok": True, "value": sum(folds) / len(folds), "split_values": list(folds), "validation": {"split": "kfold"}}


def _validated_node(tree, node_id, parent, strategy, folds):
    tree.nodes[node_id] = Node(id=node_id, parent=parent, iteration=len(tree.nodes), code=f"# {node_id}",
                               score=sum(folds) / len(folds), status="scored", report="", strategy=strategy,
                               validation=_v(folds))


def test_a_strategy_family_that_stopped_moving_validation_is_left_on_its_branch():
    """Issue 39, item 5: a search re-rolled one family (29 minutes refitting one least-squares
    problem). Two changes of a family in a row, each within its folds' paired noise, end that
    family on the branch: a child that proposes it again is abandoned before it is engineered."""
    import engine.search.tree as tree_module

    tree = Tree(task="t", metric="rmse", higher_is_better=False)
    _validated_node(tree, "n0", None, "form_search", [1.00, 1.10, 0.90, 1.05, 0.95])
    _validated_node(tree, "n1", "n0", "form_search", [1.01, 1.08, 0.92, 1.04, 0.96])    # within the noise
    _validated_node(tree, "n2", "n1", "form_search", [1.00, 1.09, 0.91, 1.06, 0.94])    # within the noise again
    _validated_node(tree, "n3", "n0", "form_search", [0.50, 0.55, 0.45, 0.52, 0.48])    # a real improvement
    _validated_node(tree, "n4", "n3", "power_law", [0.51, 0.54, 0.46, 0.53, 0.47])      # another family's first node
    stalled = tree_module.stalled_families(tree, tree.nodes["n2"])
    assert list(stalled) == ["form_search"] and "n1" in stalled["form_search"] and "n2" in stalled["form_search"]
    assert tree_module.stalled_families(tree, tree.nodes["n1"]) == {}      # one stalled change is not yet a stall
    assert tree_module.stalled_families(tree, tree.nodes["n4"]) == {}      # this branch's form_search moved
    again = tree_module.Child("n5", tree.nodes["n2"], 3, proposal="strategy: form_search {\"degree\": 4}\nOne more.")
    with pytest.raises(tree_module.StalledFamily, match="leaves it"):
        tree_module._leave_stalled(tree, tree.nodes["n2"], again)
    other = tree_module.Child("n6", tree.nodes["n2"], 3, proposal="strategy: power_law {}\nA new family.")
    tree_module._leave_stalled(tree, tree.nodes["n2"], other)  # another family goes ahead
