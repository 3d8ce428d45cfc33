"""AgenticSciML evolutionary tree search.

Nodes are candidate solutions: a script, its in-loop validation score, an analyst's report,
the knowledge and debate that produced it. The root is the team's own first program (one run of
its initial workflow), so the search starts from what the team would ship without it; when that
run delivers nothing that validates, the root is debated and written from the data analyst's
report like any node. Each iteration expands the best node plus 1-2 parents voted for by an
ensemble of selectors; for each parent the team retrieves 0-1 knowledge entries, debates a
change (proposer vs critic, N rounds), the engineer writes it, the debugger repairs it until
it runs, it is trained and scored on a split of the training data, and a result analyst
reports. A node retires after ``max_children`` children.

Every scored node's predictions on each validation fold pass the same public plausibility checks
as a team's (finite, within_range; engine/plausibility.py) and its validation score must beat the
trivial baselines scored on the same folds (beats_trivial), traced as ``check`` events; a node
that fails one ranks below every node that passes, so it is never the champion over one. The final commitment runs the champion on the task's own data and checks those
predictions too; when no candidate delivers there, the search fails with the reason.

Scoring uses engine.validation only: the official evaluator (evaluate.py, heldout/) is never
inside the loop. Every model call goes through the run's gateway and so draws on its one
budget; running out stops the search cleanly with the tree and champion found so far.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from .. import answers
from .. import knowledge as kb
from .. import prompt_format
from ..checks import Check, execution_checks
from ..errors import ModelCallError, TrellisError
from ..gateway import ModelGateway
from ..harness import DEFAULT_PROCEDURES
from ..knowledge import KnowledgeEntry, Match, load_knowledge, rank
from ..plausibility import beats_trivial, fold_data
from ..prompt_format import extract_code
from ..prompt_format import extract_strategy as parse_strategy
from ..prompt_format import extract_verdict as parse_verdict
from ..prompt_format import extract_vote as parse_vote
from ..prompts import ANSWER_FORMATS
from ..prompts import answer_format as with_program_output
from ..protocol.checkpoints import TreeState
from ..protocol.events import BudgetExhausted as BudgetExhaustedEvent
from ..protocol.events import Check as CheckEvent
from ..protocol.events import (CodeExecution, DebateTurn, KnowledgeRetrieval, NodeRetired, SelectorVote, ToolCall,
                               TreeChildAbandoned, TreeFinished, TreeIterationStarted, TreeNode, TreeVote)
from ..protocol.gate import Change
from ..protocol.gate import Check as GateCheck
from ..protocol.gate import Decision, Evidence, Proposal
from ..protocol.panels import Line, Panel, TraceEvent, chart
from ..python_ast import parse as parse_python
from ..sandbox import ExecutionRequest, ExecutionResult, Executor
from ..selection import paired_gain
from ..task import Task
from ..trace import Tracer, typed_events
from ..training.jobs import labelled
from . import base


@dataclass
class TreeConfig:
    iterations: int = 4
    selectors: int = 3          # voters in the selector ensemble
    extra_parents: int = 2      # parents voted for, besides the best node
    debate_rounds: int = 2      # proposer-critic rounds per child
    max_debug: int = 3          # debugger attempts before a child is given up
    max_children: int = 10      # a node retires after this many children
    seed: int = 0               # also seeds the validation split, so all nodes share one
    final_tries: int = 3        # best nodes tried, in rank order, at the final commitment


class CommitmentFailed(TrellisError):
    """The search ends without a program that delivers predictions on the task's own data."""


@dataclass
class Node:
    id: str
    parent: str | None
    iteration: int
    code: str
    score: float | None                 # in-loop validation score; None if it never ran
    status: str                         # "scored" or "failed"
    report: str                         # data analyst (root) or result analyst (children)
    strategy: str | None = None
    params: dict = field(default_factory=dict)
    proposal: str = ""
    verdict: str = ""                   # result analyst: improved / regressed / unchanged
    knowledge: list[str] = field(default_factory=list)   # ids of the entries used (0-1)
    debate: list[dict] = field(default_factory=list)     # {"round", "speaker", "text"}
    debug_attempts: int = 0
    validation: dict = field(default_factory=dict)
    children: int = 0
    retired: bool = False
    retired_at: int | None = None       # iteration in which the node retired
    vetoed: bool = False                # a person vetoed it: never a parent, never the champion
    promoted: bool = False              # a person promoted it: expanded in the next iteration
    decided_by: str = ""                # who passed it through the gate (policy:... or user:...)
    checks: list[dict] = field(default_factory=list)  # plausibility on its validation folds: name, passed, detail

    @property
    def index(self) -> int:
        return int(self.id[1:])

    @property
    def failed_checks(self) -> list[str]:
        return [c["name"] for c in self.checks if not c.get("passed")]

    def strategy_line(self) -> str:
        if not self.strategy:
            return "strategy: unknown"
        return prompt_format.strategy_line(self.strategy, self.params)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Node":
        return cls(**d)


@dataclass
class Tree:
    task: str
    metric: str
    higher_is_better: bool
    max_children: int = 10
    data_report: str = ""
    nodes: dict[str, Node] = field(default_factory=dict)
    next_index: int = 0  # ids are never reused, even for a child abandoned half-way

    def allocate_id(self) -> str:
        node_id = f"n{self.next_index}"
        self.next_index += 1
        return node_id

    def add(self, node: Node) -> Node | None:
        """Insert ``node``; returns its parent if this child made the parent retire."""
        self.nodes[node.id] = node
        parent = self.nodes.get(node.parent) if node.parent else None
        if parent is None:
            return None
        parent.children += 1
        if parent.children >= self.max_children and not parent.retired:
            parent.retired, parent.retired_at = True, node.iteration
            return parent
        return None

    def sort_key(self, node: Node) -> tuple[int, float, int]:
        # Plausible before implausible: a validation score earned by predictions that fail a
        # public check is no score to build on or to ship.
        score = node.score if node.score is not None else math.inf
        return (1 if node.failed_checks else 0, -score if self.higher_is_better else score, node.index)

    def ranked(self, nodes: Iterable[Node] | None = None) -> list[Node]:
        """Scored nodes, best first: those whose predictions pass every plausibility check,
        then the rest (ties: the older node)."""
        pool = self.nodes.values() if nodes is None else nodes
        return sorted((n for n in pool if n.status == "scored" and not n.vetoed), key=self.sort_key)

    def eligible(self) -> list[Node]:
        """Nodes that may still be parents: scored and not retired, best first."""
        return [n for n in self.ranked() if not n.retired]

    def champion(self) -> Node | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def lineage(self, node: Node) -> list[Node]:
        """``node`` and its ancestors up to the root."""
        out = [node]
        while out[-1].parent and out[-1].parent in self.nodes:
            out.append(self.nodes[out[-1].parent])
        return out

    def children_of(self, node_id: str) -> list[Node]:
        return [n for n in self.nodes.values() if n.parent == node_id]

    def table(self) -> list[dict]:
        """One row per node, for reports and the CLI."""
        return [{"id": n.id, "parent": n.parent, "iteration": n.iteration, "strategy": n.strategy,
                 "score": n.score, "status": n.status, "children": n.children, "retired": n.retired,
                 "vetoed": n.vetoed, "knowledge": n.knowledge, "verdict": n.verdict,
                 "failed_checks": n.failed_checks} for n in self.nodes.values()]

    def to_dict(self) -> dict:
        return {"version": 1, "task": self.task, "metric": self.metric, "higher_is_better": self.higher_is_better,
                "max_children": self.max_children, "data_report": self.data_report, "next_index": self.next_index,
                "nodes": [n.to_dict() for n in self.nodes.values()]}

    @classmethod
    def from_dict(cls, d: dict) -> "Tree":
        nodes = [Node.from_dict(n) for n in d.get("nodes", [])]
        return cls(task=d["task"], metric=d["metric"], higher_is_better=bool(d["higher_is_better"]),
                   max_children=int(d.get("max_children", 10)), data_report=d.get("data_report", ""),
                   nodes={n.id: n for n in nodes}, next_index=int(d.get("next_index", len(nodes))))

    def save(self, path: Path) -> None:
        # Write then rename, so a search killed mid-write never leaves a torn tree.json.
        tmp = Path(path).with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, default=str))
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "Tree":
        return cls.from_dict(json.loads(Path(path).read_text()))


@dataclass
class TreeResult:
    tree: Tree
    champion: Node | None
    champion_code: str | None
    iterations: int          # iterations completed
    stopped: str             # why the search ended
    reason: str = ""
    tree_path: Path | None = None

    def summary(self) -> dict:
        c = self.champion
        return {"iterations": self.iterations, "stopped": self.stopped, "reason": self.reason,
                "nodes": len(self.tree.nodes), "champion": c.id if c else None,
                "champion_score": c.score if c else None, "champion_strategy": c.strategy if c else None,
                "metric": self.tree.metric, "higher_is_better": self.tree.higher_is_better,
                "tree_path": str(self.tree_path) if self.tree_path else None}


# --- the tree as a page draws it (TreeSearch.state) -------------------------------------------------
# The fields of a tree_node payload the page shows (the report is long and lives in the trace).
NODE_FIELDS = ("parent", "iteration", "strategy", "params", "score", "status", "knowledge", "debug_attempts",
               "verdict", "debate_turns", "vetoed", "promoted", "decided_by")


def best_unvetoed(nodes: Iterable[dict], higher_is_better: bool) -> str | None:
    """The best scored node a person did not veto; a tie goes to the older node (arrival order)."""
    best: dict | None = None
    for node in nodes:
        if node["status"] != "scored" or node["vetoed"] or node["score"] is None:
            continue
        if best is None or (node["score"] > best["score"] if higher_is_better else node["score"] < best["score"]):
            best = node
    return best["id"] if best else None


def _parent_reason(node_id: str, started: dict, nodes: dict[str, dict]) -> dict:
    """Why ``node_id`` was expanded in an iteration: the search takes the best node first, then
    every node a person promoted, then one vote winner per extra slot."""
    if node_id == started["best"]:
        return {"id": node_id, "reason": "best", "label": "best node"}
    for vote in started["votes"]:
        if vote.winner != node_id:
            continue
        if vote.fallback:
            return {"id": node_id, "reason": "fallback", "label": "no valid vote: best remaining", "slot": vote.slot}
        cast = list(vote.votes)
        return {"id": node_id, "reason": "vote", "label": f"vote {vote.tally.get(node_id, 0)}/{len(cast)}",
                "slot": vote.slot, "votes": cast, "tally": dict(vote.tally)}
    who = nodes.get(node_id, {}).get("decided_by") or "a person"
    return {"id": node_id, "reason": "promoted", "label": f"promoted by {who}"}


# --- prompts ---------------------------------------------------------------------------------
PROCEDURES: dict[str, str] = {
    "selector": (
        "You are one voter in an ensemble that chooses which candidate solution the team expands next. "
        "Read the listed nodes (id, validation score, children so far) and name exactly one of them. "
        "Favour strong nodes; a competitive node with few children is worth exploring. Never vote for a "
        "node that is not listed."),
    "proposer": (
        "Propose one concrete change to the parent solution: a different modelling approach, or new "
        "hyperparameters for the parent's. Name the approach in your own words as one line "
        "`strategy: <short key> <json parameters>` (a short snake_case key of your choosing, and its "
        "settings as a JSON object), so that the tree can tell approaches apart. Ground it in the "
        "parent's analyst report, the data findings and, when one is given, the retrieved knowledge "
        "entry. Never repeat an approach already tried. When another approach validates comparably to "
        "the parent, you may propose blending the two: `strategy: blend {\"parts\": [[key, params], [key, "
        "params]]}`, one script that fits both and averages their predictions (a vote for labels). When "
        "the critic objects, revise the proposal so that it answers every objection."),
    "critic": (
        "Critique the proposal before any code is written. Object when it repeats the parent's exact "
        "strategy and parameters or any approach already tried; when the strategy's assumptions "
        "contradict the data findings (a single smooth global model on data with a jump, an unscaled "
        "distance method on features of very different scales); or when it is a baseline that cannot beat "
        "the parent. Accept a proposal you have no objection to."),
    "engineer": (
        "Implement the final proposal as one complete, runnable Python script. Read only the task's data "
        "files, fit the model, print a validation score on a hold-out split of the training rows and write "
        "the predictions file exactly as the task's contract says. Fix random seeds."),
    "result_analyst": (
        "Compare the child's validation score with its parent's, in the metric's direction, and write a "
        "short report: the verdict, what the approach's traits explain, the data findings that still "
        "matter, and what to try next."),
}
ANSWERS: dict[str, str] = {
    "selector": "Reply with one line `vote: <node id>` naming one listed node, then one line `reason: ...`.",
    "proposer": ("Reply with one line `strategy: <short key> <json parameters>`, then a line `change: ...` saying "
                 "what differs from the parent and a line `rationale: ...`."),
    "critic": ("Start with `verdict: accept` or `verdict: revise`. Write each objection as `objection: ...`; "
               "name a rejected proposal with `rejected: <key> <json parameters>` and a strategy to drop "
               "entirely with `avoid: <key>`."),
    "engineer": "Reply with the complete script in one fenced ```python block.",
    "result_analyst": ("Start with `verdict: improved`, `verdict: regressed` or `verdict: unchanged`, then a "
                       "few `- ` bullet lines."),
}


def build_messages(task: Task, role: str, inputs: dict[str, object], procedure: str | None = None,
                   answer_format: str | None = None, feedback: dict | None = None) -> list[dict]:
    """A tree-search role prompt in the engine's one prompt format (engine.prompt_format)."""
    return prompt_format.build_messages(role, procedure or PROCEDURES[role],
                                        with_program_output(role, task, answer_format or ANSWERS[role]),
                                        task.description(), inputs, feedback=feedback)


# --- the search context -------------------------------------------------------------------------
@dataclass
class SearchContext:
    """What every step of one search needs; built by tree_search."""

    task: Task
    gateway: ModelGateway
    executor: Executor
    tracer: Tracer
    config: TreeConfig
    run_dir: Path
    knowledge: list[KnowledgeEntry]

    @property
    def direction(self) -> str:
        return "higher is better" if self.task.metric.higher_is_better else "lower is better"

    def ask(self, agent: str, role: str, inputs: dict, temperature: float = 0.7, **kw) -> str:
        """The role's answer, read by its contract (engine/answers.py TREE) and re-asked once
        when it cannot be used; the text of the last answer either way (the callers' readers
        decide what an unusable one means: no vote, no strategy, the parent's code)."""
        messages = build_messages(self.task, role, inputs, **kw)
        return answers.ask(self.gateway, agent, role, messages, answers.TREE[role], temperature=temperature,
                           purpose="tree_search").text


def _fmt(score: float | None) -> str:
    return "none" if score is None else f"{score:.6g}"


# --- selection ------------------------------------------------------------------------------------
def majority_vote(votes: Sequence[str | None], candidates: Sequence[Node], higher_is_better: bool) -> str | None:
    """The candidate with most votes. Votes for anything not in ``candidates`` do not count.
    Ties go to the better score, then to the older node, so the outcome never depends on
    the order the votes arrived in."""
    by_id = {n.id: n for n in candidates}
    tally = Counter(v for v in votes if v in by_id)
    if not tally:
        return None

    def key(node_id: str) -> tuple:
        n = by_id[node_id]
        score = n.score if n.score is not None else math.inf
        return (-tally[node_id], -score if higher_is_better else score, n.index)

    return min(tally, key=key)


def _fails(node: Node) -> str:
    """A listing line's tail naming the checks a node's predictions fail (the offline roles read it)."""
    return f" fails {', '.join(node.failed_checks)}" if node.failed_checks else ""


def _candidate_lines(ctx: SearchContext, tree: Tree, candidates: list[Node]) -> str:
    lines = [f"direction: {ctx.direction}", f"metric: {tree.metric}", f"max_children: {tree.max_children}"]
    for n in candidates:
        lines.append(f"- {n.id} score={_fmt(n.score)} children={n.children}/{tree.max_children} "
                     f"strategy={n.strategy or 'unknown'} parent={n.parent or '-'}{_fails(n)}")
    return "\n".join(lines)


def select_parents(ctx: SearchContext, tree: Tree) -> list[Node]:
    """The best eligible node, every node a person promoted, then up to ``extra_parents`` more
    chosen by ensemble vote. Retired, vetoed and failed nodes are never listed, so they can never
    be chosen. A promotion is used once: the node is expanded in the next iteration."""
    eligible = tree.eligible()
    if not eligible:
        return []
    chosen = [eligible[0]] + [n for n in eligible[1:] if n.promoted]
    for n in chosen:
        n.promoted = False
    for slot in range(1, ctx.config.extra_parents + 1):
        candidates = [n for n in eligible if n not in chosen]
        if not candidates:
            break
        winner = _ensemble_vote(ctx, tree, candidates, chosen, slot)
        chosen.append(next(n for n in candidates if n.id == winner))
    return chosen


def _ensemble_vote(ctx: SearchContext, tree: Tree, candidates: list[Node], chosen: list[Node], slot: int) -> str:
    k = max(1, ctx.config.selectors)
    votes: list[str | None] = []
    listing = _candidate_lines(ctx, tree, candidates)
    already = ", ".join(f"{n.id} ({'best node' if i == 0 else 'voted'})" for i, n in enumerate(chosen))
    for voter in range(1, k + 1):
        agent = f"selector_{voter}"
        # The voter's own line makes each prompt distinct, so the voters are independent draws.
        answer = ctx.ask(agent, "selector", {"candidates": listing, "already_expanding": already,
                                             "voter": f"selector {voter} of {k}, choosing parent slot {slot}"})
        vote = parse_vote(answer)
        valid = vote in {n.id for n in candidates}
        votes.append(vote if valid else None)
        ctx.tracer.emit(SelectorVote(slot=slot, voter=voter, vote=vote, valid=valid,
                                     candidates=[n.id for n in candidates], answer=answer), agent)
    winner = majority_vote(votes, candidates, tree.higher_is_better)
    fallback = winner is None
    if fallback:  # no valid vote: the ensemble abstained, take the best remaining node
        winner = candidates[0].id
    ctx.tracer.emit(TreeVote(phase="vote", slot=slot, votes=votes, tally=dict(Counter(v for v in votes if v)),
                                    winner=winner, fallback=fallback))
    return winner


# --- knowledge -------------------------------------------------------------------------------------
def _retrieve(ctx: SearchContext, tree: Tree, parent: Node | None, node_id: str) -> Match | None:
    """0-1 entries for this parent, matched against its analyst report. Entries already
    applied along its lineage or by its other children are skipped: retrieving them again
    would only steer the debate back to what was already tried."""
    query = parent.report if parent else tree.data_report
    used: set[str] = set()
    if parent:
        for n in tree.lineage(parent) + tree.children_of(parent.id):
            used.update(n.knowledge)
    ranking = rank(query, ctx.knowledge)
    chosen = next((m for m in ranking if m.entry.id not in used and m.score >= kb.MIN_OVERLAP), None)
    ctx.tracer.emit(KnowledgeRetrieval(node=node_id, parent=parent.id if parent else None,
                                       query_chars=len(query), excluded=sorted(used),
                                       top=[{"id": m.entry.id, "matched": list(m.matched)} for m in ranking[:3]],
                                       retrieved=chosen.entry.id if chosen else None,
                                       matched=list(chosen.matched) if chosen else []))
    return chosen


# --- debate ------------------------------------------------------------------------------------------
def _findings(report: str) -> str:
    """The data report's conclusions (its Structure section), which every later step needs."""
    m = re.search(r"^## Structure\s*\n(.*?)(?=^## |\Z)", report, re.M | re.S)
    return (m.group(1).strip() if m else report.strip()[-1200:]) or "(no data findings)"


def _parent_block(ctx: SearchContext, parent: Node | None) -> str:
    if parent is None:
        return "none: this is the root candidate, the first solution of the tree"
    return "\n".join([f"id: {parent.id}", parent.strategy_line(), f"validation_score: {_fmt(parent.score)}",
                      f"direction: {ctx.direction}", f"children: {parent.children}"])


def _tried(tree: Tree) -> str:
    lines = [f"- {n.id}: {n.strategy or 'unknown'} {json.dumps(n.params, sort_keys=True)} score={_fmt(n.score)}"
             f"{_fails(n)}" for n in tree.nodes.values()]
    return "\n".join(lines) or "nothing yet"


def _transcript(turns: list[dict]) -> str:
    return "\n\n".join(f"### round {t['round']}: {t['speaker']}\n{t['text'].strip()}" for t in turns)


def _debate(ctx: SearchContext, tree: Tree, parent: Node | None, knowledge: Match | None,
            node_id: str) -> tuple[str, list[dict]]:
    """Proposal, then per round a critique and (on objection) a revision. The root has no
    parent to improve on, so its first proposal goes ahead without debate."""
    common = {"parent": _parent_block(ctx, parent),
              "parent_report": parent.report if parent else tree.data_report,
              "data_findings": _findings(tree.data_report),
              "knowledge": knowledge.entry.render() if knowledge else "none retrieved",
              "tried": _tried(tree)}
    turns: list[dict] = []

    def say(speaker: str, rnd: int, text: str) -> None:
        turns.append({"round": rnd, "speaker": speaker, "text": text})
        ctx.tracer.emit(DebateTurn(node=node_id, parent=parent.id if parent else None,
                                   round=rnd, text=text, strategy=list(parse_strategy(text) or ()),
                                   verdict=parse_verdict(text) if speaker == "critic" else None), speaker)

    proposal = ctx.ask("proposer", "proposer", common)
    say("proposer", 0 if parent is None else 1, proposal)
    rounds = ctx.config.debate_rounds if parent is not None else 0
    for rnd in range(1, rounds + 1):
        critique = ctx.ask("critic", "critic", {**common, "proposal": proposal}, temperature=0.2)
        say("critic", rnd, critique)
        if parse_verdict(critique) == "accept":
            break
        proposal = ctx.ask("proposer", "proposer", {**common, "debate": _transcript(turns)})
        say("proposer", rnd, proposal)
    return proposal, turns


# --- engineering, debugging and validation ---------------------------------------------------------------
class _FoldChecker:
    """The executor validation runs each fold on: it checks each fold's predictions as
    the fold ends, while the fold's files exist (they vanish with the validation's folder)."""

    def __init__(self, task: Task, inner: Executor):
        self.task, self.inner, self.name = task, inner, inner.name
        self.folds: list[list[Check]] = []
        self.predictions: list[str | None] = []  # each fold's predictions file, kept for the champion bundle

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        result = self.inner.run(request)
        self.folds.append(_fold_checks(self.task, request, result))
        self.predictions.append(_fold_predictions(self.task, result))
        return result

    def summary(self, node_id: str) -> list[Check]:
        """One check per name over every fold: failed if any fold failed (naming the first)."""
        n, out = len(self.folds), []
        for name in dict.fromkeys(c.name for checks in self.folds for c in checks):
            per = [(k, c) for k, checks in enumerate(self.folds) for c in checks if c.name == name]
            failed = [(k, c) for k, c in per if not c.passed]
            k, c = failed[0] if failed else per[-1]
            if failed:
                more = f" (and {len(failed) - 1} more fold(s))" if len(failed) > 1 else ""
                out.append(Check(name, False, f"{node_id}, validation fold {k + 1} of {n}{more}: {c.detail}"))
            else:
                out.append(Check(name, True, f"{node_id}, all {len(per)} validation fold(s); fold {k + 1}: {c.detail}"))
        return out


# A fold's predictions larger than this are not kept (the bundle's plots then say so).
MAX_KEPT_FOLD_BYTES = 2 * 1024 * 1024


def _fold_predictions(task: Task, result: ExecutionResult) -> str | None:
    if not result.ok:
        return None
    try:
        return result.read_file(task.resources.predictions_file, max_bytes=MAX_KEPT_FOLD_BYTES).decode(
            "utf-8", errors="replace")
    except (OSError, ValueError):
        return None  # none, a link, or too large: nothing to plot, and the validation says why


def fold_predictions_path(tree_dir: Path, node_id: str) -> Path:
    """Where a scored node's predictions on each validation fold are kept (engine/bundle.py reads them)."""
    return Path(tree_dir) / "nodes" / f"{node_id}.folds.json"


def _keep_fold_predictions(ctx: SearchContext, node_id: str, metric: dict, folds: list[str | None]) -> None:
    path = fold_predictions_path(ctx.run_dir, node_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"node": node_id, "seed": ctx.config.seed, "plan": metric.get("validation"),
                                "predictions_file": ctx.task.resources.predictions_file, "folds": folds}))


def _fold_checks(task: Task, request: ExecutionRequest, result: ExecutionResult) -> list[Check]:
    r = task.resources
    if not result.ok or "train" not in r.files or "test_features" not in r.files:
        return []
    try:
        predictions = result.read_file(r.predictions_file)
    except (OSError, ValueError):
        return []  # no predictions: the validation says why, and the node is not scored
    try:
        data = fold_data(task, Path(request.input_files[r.files["train"]]).read_bytes(),
                         Path(request.input_files[r.files["test_features"]]).read_bytes())
    except Exception as exc:  # noqa: BLE001 - an engine fault is not a verdict on the node's answer
        return [Check("finite", True, f"not checked: the fold could not be read ({type(exc).__name__}: {exc})")]
    return task.assessment().checks(predictions, result.stdout, data) if data is not None else []


def _validate(ctx: SearchContext, agent: str, node_id: str, code: str,
              attempt: int) -> tuple[dict, ExecutionResult, list[Check]]:
    """In-loop validation: run on a seeded split of the training rows, traced like any tool,
    with the plausibility of every fold's predictions (kept beside the node when it scored)."""
    train = ctx.task.resources.files.get("train", "")
    ctx.tracer.emit(ToolCall(tool="sandbox.python", executor=ctx.executor.name,
                             purpose="in-loop validation", node=node_id, attempt=attempt, code=code,
                             data=f"validation split of {train} (seed {ctx.config.seed})",
                             limits=asdict(ctx.task.resources.limits)), agent)
    checker = _FoldChecker(ctx.task, ctx.executor)
    with labelled("in-loop validation", node_id):  # a training program's curves are this node's
        metric, result = ctx.task.assessment().validate(code, checker, seed=ctx.config.seed)
    ctx.tracer.emit(CodeExecution(purpose="in-loop validation", node=node_id, attempt=attempt,
                                  **result.evidence(), stdout=result.stdout[-20000:], stderr=result.stderr[-20000:],
                                  workdir=str(result.workdir), validation=metric), agent)
    checks = checker.summary(node_id)
    if metric.get("ok") and _finite(metric.get("value")):
        _keep_fold_predictions(ctx, node_id, metric, checker.predictions)
        # against the trivial baselines on these very folds, never the score the program printed
        trivial = beats_trivial(metric, ctx.task.metric.name, ctx.task.metric.higher_is_better)
        checks.append(Check(trivial.name, trivial.passed, f"{node_id}: {trivial.detail}"))
    return metric, result, checks


def _debug_feedback(metric: dict, result: ExecutionResult) -> dict:
    evidence = result.evidence(tail=1500)
    detail = {k: evidence[k] for k in ("status", "exit_code", "stderr_tail", "stdout_tail", "violations")}
    detail["error"] = metric.get("error", "")
    return {"from": "validation", "status": "RETRY", "detail": detail}


class AlreadyProbed(Exception):
    """The engineer wrote a program the tree has already validated: run again, it would spend a
    validation and tell the search nothing new (issue 39). The child is abandoned, saying which."""


# Changes of one strategy family in a row, on one branch, that moved validation by less than the
# folds' paired noise: after this many the branch has stopped learning from that family.
STALL = 2


class StalledFamily(Exception):
    """The proposal keeps a strategy family whose last changes on this branch did not move
    validation beyond the noise: the tree leaves it instead of re-rolling it (issue 39)."""


def stalled_families(tree: Tree, parent: Node | None) -> dict[str, str]:
    """The strategy families the branch ending at ``parent`` has stopped moving, each with why:
    its last ``STALL`` changes within the family (a node of it whose parent was of it too), newest
    first, each within the paired noise of its parent's validation. A change that moved
    validation either way, or whose folds cannot be paired, ends the count for its family."""
    tweaks: dict[str, list[str]] = {}
    done: set[str] = set()
    node = parent
    while node is not None and node.parent is not None:
        up = tree.nodes.get(node.parent)
        family = node.strategy
        if up is None:
            break
        if family and family == up.strategy and family not in done:
            gain = paired_gain(node.validation, up.validation, tree.higher_is_better)
            if gain is None or gain.significant or gain.worse:
                done.add(family)
            else:
                tweaks.setdefault(family, []).append(f"{node.id} {gain.mean:+.3g} (noise ±{gain.noise:.3g})")
                if len(tweaks[family]) >= STALL:
                    done.add(family)
        node = up
    return {family: ", ".join(reversed(said)) for family, said in tweaks.items() if len(said) >= STALL}


@functools.lru_cache(maxsize=4096)  # every child asks for every node's key: parse each program once
def program_key(code: str) -> str:
    """One program, however it is laid out: its syntax tree without comments and blank lines (its
    text when it does not parse), hashed."""
    try:
        shape = ast.dump(parse_python(code))
    except (SyntaxError, ValueError):
        shape = "\n".join(line.rstrip() for line in code.strip().splitlines())
    return hashlib.sha256(shape.encode()).hexdigest()


def _build(ctx: SearchContext, node_id: str, proposal: str, parent: Node | None,
           probed: dict[str, str] | None = None) -> tuple[str, dict, ExecutionResult, int, list[Check]]:
    """Engineer writes the code; the debugger repairs it from sandbox evidence until it runs
    and scores, or ``max_debug`` attempts are spent. Returns the last code that ran, with its
    validation, its last fold's execution, the attempts and its plausibility checks. A program
    already in ``probed`` (program_key -> node id) is refused before it runs: AlreadyProbed."""
    inputs: dict = {"proposal": proposal}
    if parent is not None:
        inputs["parent_code"] = parent.code
    code = extract_code(ctx.ask("engineer", "engineer", inputs, temperature=0.2)) or ""
    if code and probed and (same := probed.get(program_key(code))):
        raise AlreadyProbed(f"the engineer wrote {same}'s program again for {node_id}; it was not run twice")
    attempt = 0
    tried = {code}
    while True:
        metric, result, checks = _validate(ctx, "engineer" if attempt == 0 else "debugger", node_id, code, attempt)
        if metric.get("ok") and _finite(metric.get("value")):
            return code, metric, result, attempt, checks
        if attempt >= ctx.config.max_debug:
            return code, metric, result, attempt, checks
        attempt += 1
        answer = ctx.ask("debugger", "debugger", {"code": code}, temperature=0.2,
                         procedure=DEFAULT_PROCEDURES["debugger"], answer_format=ANSWER_FORMATS["debugger"],
                         feedback=_debug_feedback(metric, result))
        fixed = extract_code(answer) or code
        if fixed in tried:
            # the same code again would fail the same way and ask the debugger the identical
            # request (same code, same error, fixed seed): ~230 s of model time for nothing
            return code, metric, result, attempt, checks
        tried.add(fixed)
        code = fixed


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _result_report(ctx: SearchContext, tree: Tree, parent: Node, child: Node, result: ExecutionResult) -> str:
    comparison = "\n".join([
        f"direction: {ctx.direction}", f"metric: {tree.metric}",
        f"parent: {parent.id} {parent.strategy or 'unknown'} score={_fmt(parent.score)}",
        f"child: {child.id} {child.strategy or 'unknown'} score={_fmt(child.score)}",
        *(f"child check failed: {c['name']}: {c['detail']}" for c in child.checks if not c.get("passed"))])
    return ctx.ask("result_analyst", "result_analyst", {
        "comparison": comparison, "child_strategy": child.strategy_line(),
        "execution": result.stdout[-1500:] or result.stderr[-1500:],
        "data_findings": _findings(tree.data_report)}, temperature=0.2).strip()


# --- the search ------------------------------------------------------------------------------------------
def _analyse_data(ctx: SearchContext) -> str:
    """The data analyst writes an exploration script; its printed output is the report."""
    answer = ctx.ask("data_analyst", "analyzer", {}, procedure=DEFAULT_PROCEDURES["analyzer"],
                     answer_format=ANSWER_FORMATS["analyzer"])
    code = extract_code(answer)
    if code is None:
        return "(the data analyst wrote no script; the search works without a data report)"
    request = ExecutionRequest(code=code, input_files=ctx.task.input_files(), limits=ctx.task.resources.limits)
    ctx.tracer.emit(ToolCall(tool="sandbox.python", executor=ctx.executor.name, purpose="exploratory analysis",
                             code=code, data=sorted(request.input_files), limits=asdict(request.limits)),
                    "data_analyst")
    result = ctx.executor.run(request)
    ctx.tracer.emit(CodeExecution(purpose="exploratory analysis", **result.evidence(), stdout=result.stdout[-20000:],
                                  stderr=result.stderr[-20000:], workdir=str(result.workdir)), "data_analyst")
    if result.ok and result.stdout.strip():
        return result.stdout.strip()
    return f"The exploratory script failed ({result.status}); the team works without it.\n\n{result.stderr[-1500:]}"


@dataclass
class Child:
    """A child in the making: its id, parent, knowledge and debate, then (once probed) its node."""

    id: str
    parent: Node
    iteration: int
    knowledge: Match | None = None
    proposal: str = ""
    turns: list[dict] = field(default_factory=list)
    node: Node | None = None
    abandoned: str = ""


def _leave_stalled(tree: Tree, parent: Node, child: "Child") -> None:
    """StalledFamily when the child's proposal keeps a family this branch has stopped moving."""
    header = parse_strategy(child.proposal)
    stalled = stalled_families(tree, parent)
    if header and header[0] in stalled:
        raise StalledFamily(f"{child.id} would change {header[0]} again, whose last {STALL} changes on this branch "
                            f"moved validation less than the folds' noise ({stalled[header[0]]}); the tree leaves it")


def _make_node(ctx: SearchContext, tree: Tree, parent: Node | None, iteration: int, node_id: str,
               proposal: str, turns: list[dict], knowledge: Match | None) -> Node:
    """Engineer, debugger, validation and result analyst, for a debated proposal."""
    probed = {program_key(n.code): n.id for n in list(tree.nodes.values()) if n.code}
    code, metric, result, attempts, checks = _build(ctx, node_id, proposal, parent, probed)
    header = parse_strategy(code) or parse_strategy(proposal)
    ok = bool(metric.get("ok")) and _finite(metric.get("value"))
    if ok:  # a node that never scored has no predictions worth a verdict
        for c in checks:
            ctx.tracer.emit(CheckEvent(**c.to_dict()), "engineer" if attempts == 0 else "debugger")
    node = Node(id=node_id, parent=parent.id if parent else None, iteration=iteration, code=code,
                score=float(metric["value"]) if ok else None, status="scored" if ok else "failed",
                report="", strategy=header[0] if header else None, params=header[1] if header else {},
                proposal=proposal, knowledge=[knowledge.entry.id] if knowledge else [], debate=turns,
                debug_attempts=attempts, validation=metric, checks=[c.to_dict() for c in checks] if ok else [])
    if parent is None:
        node.report = tree.data_report
    elif ok:
        node.report = _result_report(ctx, tree, parent, node, result)
        node.verdict = parse_verdict(node.report)
    else:
        node.report = f"The child never ran cleanly after {attempts} repair attempt(s): {metric.get('error', '')}"
        node.verdict = "failed"
    return node


TEAM_ROOT = "team-root"  # the folder (under tree/) of the team's first run, whose program is the root


def _team_root(search: base.SearchContext, ctx: SearchContext, tree: Tree, node_id: str) -> Node | None:
    """The team's own first program as the root: one run of the team's initial workflow, its
    delivered program validated like every node. The tree then searches from what the team
    would have shipped without a search, so its champion (the best validated node) is never a
    step back from that in validation. None, said on the console, when that run delivers no
    program that validates: the root is then debated and written like any node."""
    probe = search.runner.run(search.initial, TEAM_ROOT, 0, under=ctx.run_dir)
    code = probe.result.final_code
    if probe.result.status != "completed" or not code:
        search.say(f"  root: the team's first run delivered no program ({probe.result.reason or probe.result.status}); "
                   f"the root is proposed by debate instead")
        return None
    metric, _, checks = _validate(ctx, "team", node_id, code, 0)
    if not (metric.get("ok") and _finite(metric.get("value"))):
        search.say(f"  root: the team's first program does not validate ({metric.get('error', 'no score')}); "
                   f"the root is proposed by debate instead")
        return None
    for c in checks:
        ctx.tracer.emit(CheckEvent(**c.to_dict()), "team")
    header = parse_strategy(code)
    return Node(id=node_id, parent=None, iteration=0, code=code, score=float(metric["value"]), status="scored",
                report=tree.data_report, strategy=header[0] if header else None, params=header[1] if header else {},
                proposal=f"The team's own first program: what its initial workflow ({search.initial.name}, "
                         f"v{search.initial.version}) delivered in {probe.run_dir.name}.",
                validation=metric, checks=[c.to_dict() for c in checks])


def _record(ctx: SearchContext, tree: Tree, node: Node) -> None:
    retired = tree.add(node)
    (ctx.run_dir / "nodes").mkdir(parents=True, exist_ok=True)
    (ctx.run_dir / "nodes" / f"{node.id}.py").write_text(node.code)
    ctx.tracer.emit(TreeNode(node=node.id, parent=node.parent, iteration=node.iteration,
                             strategy=node.strategy, params=node.params, score=node.score, status=node.status,
                             knowledge=node.knowledge, debug_attempts=node.debug_attempts, verdict=node.verdict,
                             debate_turns=len(node.debate), report=node.report[:2000], vetoed=node.vetoed,
                             promoted=node.promoted, decided_by=node.decided_by))
    if retired is not None:
        ctx.tracer.emit(NodeRetired(node=retired.id, children=retired.children,
                                    max_children=tree.max_children, iteration=retired.retired_at))
    tree.save(ctx.run_dir / "tree.json")


class TreeSearch(base.Search):
    """Children are proposed by debate, built and scored in the sandbox, and pass the gate like
    any other proposal: a person may veto a child (it never becomes a parent or the champion)
    or promote one (it is expanded in the next iteration)."""
    model_roles = ("selector", "proposer", "critic", "engineer", "debugger", "result_analyst")

    name = "tree"
    title = "AgenticSciML tree"
    State = TreeState
    evolves = "program"
    writes_bundle = True
    presents = ("tree_node",)
    state_payloads = (TreeNode, NodeRetired, TreeVote, TreeIterationStarted, TreeChildAbandoned, TreeFinished)

    @classmethod
    def state(cls, events: list[TraceEvent], higher_is_better: bool) -> dict:
        """The tree as its events tell it: its nodes (the latest record of each, a resumed run may
        record one again), each iteration's parents and why each was chosen, the champion (once
        finished, the node the search committed to; until then the best so far), ``seq`` the last
        event read (a page skips pushed events it already holds)."""
        nodes: dict[str, dict] = {}
        iterations: dict[int, dict] = {}
        pending: list[TreeVote] = []   # votes come before the "started" event of their iteration
        finished: dict | None = None
        max_children: int | None = None
        last_seq = 0
        for e in events:
            last_seq = e.seq
            if (p := e.typed) is None:  # refused by its kind's model (an older trace's): left out
                continue
            if isinstance(p, TreeNode):
                old = nodes.get(p.node, {})
                nodes[p.node] = {"id": p.node, **{k: getattr(p, k) for k in NODE_FIELDS},
                                 "vetoed": bool(p.vetoed), "promoted": bool(p.promoted),
                                 "decided_by": p.decided_by or "", "params": p.params or {},
                                 "retired": old.get("retired", False), "retired_at": old.get("retired_at"), "seq": e.seq}
            elif isinstance(p, NodeRetired):
                max_children = p.max_children
                if (node := nodes.get(p.node)) is not None:
                    node["retired"], node["retired_at"] = True, p.iteration if p.iteration is not None else e.iteration
            elif isinstance(p, TreeVote):
                pending.append(p)
            elif isinstance(p, TreeIterationStarted):
                iterations[e.iteration] = {"best": p.best, "parents": p.parents, "votes": pending,
                                           "nodes_before": p.nodes, "abandoned": []}
                pending = []
            elif isinstance(p, TreeChildAbandoned) and e.iteration in iterations:
                iterations[e.iteration]["abandoned"].append({"parent": p.parent, "error": p.error or ""})
            elif isinstance(p, TreeFinished):
                finished = {k: getattr(p, k) for k in ("stopped", "iterations", "champion", "champion_score", "reason")}
        for node in nodes.values():
            node["children"] = sum(1 for c in nodes.values() if c["parent"] == node["id"])
        rows = [{"n": n, "nodes_before": it["nodes_before"], "abandoned": it["abandoned"],
                 "parents": [_parent_reason(pid, it, nodes) for pid in it["parents"]],
                 "children": [c["id"] for c in nodes.values() if c["iteration"] == n]}
                for n, it in sorted(iterations.items())]
        return {"higher_is_better": higher_is_better, "max_children": max_children, "nodes": list(nodes.values()),
                "iterations": rows,
                # once finished, the node the search committed to (commitment_order: a best node whose
                # gain over the root is noise gives way to it); until then the best so far
                "champion": (finished or {}).get("champion") or best_unvetoed(nodes.values(), higher_is_better),
                "finished": finished,
                # each vote as it was stored (the fields it was written with)
                "pending_votes": [v.model_dump(mode="json", exclude_unset=True) for v in pending], "seq": last_seq}

    @classmethod
    def programs_probed(cls, run_dir: Path) -> list[base.ProgramProbed]:
        """Every scored node of the tree (tree/tree.json)."""
        tree_file = Path(run_dir, "tree", "tree.json")
        if not tree_file.exists():
            return []
        return [base.ProgramProbed(f"node {node.id}", node.score, node.code) for node in Tree.load(tree_file).nodes.values()
                if node.status == "scored" and node.score is not None]

    @classmethod
    def champion_of(cls, outcome: base.SearchOutcome) -> TreeResult | None:
        """The tree and its champion, once there is one."""
        tree = next((r for r in outcome.records if isinstance(r, TreeResult)), None)
        return tree if tree is not None and tree.champion is not None else None

    @classmethod
    def present(cls, events: list[TraceEvent]) -> list[Panel]:
        """Each node's validation score by the iteration it was built in (the tree itself is the
        page's tree view; vetoed and failed nodes have no point)."""
        scored = []
        for _, p in typed_events(events):
            if isinstance(p, TreeNode) and p.status == "scored" and not p.vetoed:
                scored.append(p)
        if not scored:
            return []
        return [chart("Node scores per iteration", [Line("node", [p.iteration for p in scored],
                                                         [p.score for p in scored], "markers")],
                      "iteration", "validation score", note=f"{len(scored)} scored nodes")]

    def __init__(self, ctx: base.SearchContext, config: TreeConfig | None = None):
        super().__init__(ctx)
        self.config = config or TreeConfig(iterations=ctx.iterations, seed=ctx.seed)
        self.tools = SearchContext(ctx.task, ctx.gateway, ctx.executor, ctx.tracer, self.config,
                                   Path(ctx.run_dir) / "tree", load_knowledge())
        self.tools.run_dir.mkdir(parents=True, exist_ok=True)
        task = ctx.task
        self.tree = Tree(task=task.name, metric=task.metric.name, higher_is_better=task.metric.higher_is_better,
                         max_children=self.config.max_children)
        self.failed = ""

    # --- state ---------------------------------------------------------------------------------
    def begin(self) -> None:
        try:
            self.tree.data_report = _analyse_data(self.tools)
            root_id = self.tree.allocate_id()
            root = _team_root(self.ctx, self.tools, self.tree, root_id)
            if root is None:
                knowledge = _retrieve(self.tools, self.tree, None, root_id)
                proposal, turns = _debate(self.tools, self.tree, None, knowledge, root_id)
                root = _make_node(self.tools, self.tree, None, 0, root_id, proposal, turns, knowledge)
        except ModelCallError as exc:
            self.failed = f"failed: {exc}"
            return
        _record(self.tools, self.tree, root)
        # A root that never ran cleanly does not end the search: its iterations try again from it
        # (plan), each a fresh debate that sees why it failed, until one scores or none is left.

    def snapshot(self) -> TreeState:
        return TreeState(tree=self.tree.to_dict(), failed=self.failed)

    def restore(self, state: TreeState) -> None:
        self.tree = Tree.from_dict(state.tree)
        self.failed = state.failed

    def _unscored_root(self) -> Node | None:
        """The root, when no node has scored yet and it may still be retried from."""
        if self.tree.ranked() or not self.tree.nodes:
            return None
        root = next(iter(self.tree.nodes.values()))
        return root if len(self.tree.children_of(root.id)) < self.tree.max_children and not root.vetoed else None

    def stop_reason(self) -> str | None:
        if self.failed:
            return self.failed
        if not self.tree.eligible():
            if self._unscored_root() is not None:
                return None  # retried from (plan)
            if not self.tree.ranked():
                return "failed: no candidate ran cleanly (the root and every retry of it)"
            return "no parents left: every node is retired, vetoed or failed"
        return None

    # --- one iteration: a child per parent -------------------------------------------------------
    def plan(self, n: int) -> list:
        parents = select_parents(self.tools, self.tree)
        if not parents and (root := self._unscored_root()) is not None:
            parents = [root]  # nothing scored yet: a new attempt from the failed root
        if parents:
            self.ctx.tracer.emit(TreeIterationStarted(phase="started", parents=[p.id for p in parents],
                                                 best=parents[0].id, nodes=len(self.tree.nodes)))
        return [p.id for p in parents]

    def concurrency(self, n: int) -> int:
        """The children of an iteration are debated, built and validated at once when several
        training workers can take their programs (engine/training: one job per device); each
        child is then proposed from the tree as it was when the iteration began."""
        return max(1, int(getattr(self.ctx.executor, "capacity", 1) or 1))

    def reserve(self, n: int, parent_id: str) -> tuple[str, str]:
        return parent_id, self.tree.allocate_id()  # ids in move order, whichever child finishes first

    def propose(self, n: int, move: str | tuple[str, str]) -> Child | None:
        parent_id, child_id = move if isinstance(move, tuple) else (move, self.tree.allocate_id())
        parent = self.tree.nodes[parent_id]
        child = Child(child_id, parent, n)
        try:
            child.knowledge = _retrieve(self.tools, self.tree, parent, child.id)
            child.proposal, child.turns = _debate(self.tools, self.tree, parent, child.knowledge, child.id)
            _leave_stalled(self.tree, parent, child)
        except (ModelCallError, StalledFamily) as exc:  # one child lost, not the search
            self._abandon(child, exc)
            return None
        return child

    def probe(self, n: int, child: Child) -> None:
        try:
            child.node = _make_node(self.tools, self.tree, child.parent, n, child.id, child.proposal, child.turns,
                                    child.knowledge)
        except (ModelCallError, AlreadyProbed) as exc:
            self._abandon(child, exc)

    def _abandon(self, child: Child, exc: Exception) -> None:
        child.abandoned = str(exc)
        self.ctx.tracer.emit(TreeChildAbandoned(phase="child_abandoned", parent=child.parent.id, error=str(exc)))

    def proposal(self, n: int, child: Child) -> Proposal | None:
        node = child.node
        if node is None or node.status != "scored":  # nothing to decide: it never ran cleanly
            return None
        parent, metric = child.parent, self.ctx.task.metric
        better = parent.score is None or (node.score > parent.score if metric.higher_is_better
                                          else node.score < parent.score)
        failed = node.failed_checks
        implausible = (f"; it fails {', '.join(failed)}, so it ranks below every node that passes"
                       if failed else "")
        return Proposal(
            search=self.name, n=n, key=node.id,
            change=Change(kind="tree_child", target=parent.id, author="proposer", rationale=node.proposal[:4000],
                          params={"strategy": node.strategy, "params": node.params}),
            rule_accepts=True, rule="it ran and scored" + (f", better than {parent.id}" if better else
                                                            f", not better than {parent.id}") + implausible,
            evidence=Evidence(basis="validation", validation=node.score, reference_validation=parent.score,
                              metric=metric.name, higher_is_better=metric.higher_is_better,
                              checks=[GateCheck(name=str(c.get("name", "")), passed=bool(c.get("passed")),
                                                detail=str(c.get("detail", ""))) for c in node.checks]),
            parent=parent.id, code=node.code, can_promote=True)

    def adopt(self, n: int, child: Child, decision: Decision | None) -> None:
        node = child.node
        if node is None:
            return
        if decision is not None:
            node.decided_by = decision.decided_by
            node.vetoed = not decision.approved
            node.promoted = decision.approved and decision.promote
        _record(self.tools, self.tree, node)

    def pending_state(self, child: Child) -> dict:
        return {"node": child.node.to_dict(), "parent": child.parent.id}

    def pending_restore(self, state: dict) -> Child:
        node = Node.from_dict(state["node"])
        return Child(node.id, self.tree.nodes[state["parent"]], node.iteration, proposal=node.proposal,
                     turns=node.debate, node=node)

    def validations(self) -> list[dict]:
        """Every node's in-loop validation (the tree's candidates are its nodes, not probes), but
        a node a person vetoed: it was never a candidate for the commitment."""
        return [node.validation for node in self.tree.nodes.values() if node.validation and not node.vetoed]

    def outcome(self) -> base.SearchOutcome:
        tree, ctx = self.tree, self.ctx
        if self.stopped.startswith("budget exhausted"):
            ctx.tracer.emit(BudgetExhaustedEvent(reason=self.stopped, used=ctx.budget.used.to_dict(),
                                                 limits=ctx.budget.limits(), nodes=len(tree.nodes)))
        notes = _passed_over(tree)
        champion, committed, predictions = _commit(self.tools, tree) if tree.champion() is not None \
            else (None, [], None)
        notes += committed
        path = self.tools.run_dir / "tree.json"
        tree.save(path)
        if champion is not None:
            (self.tools.run_dir / "champion.py").write_text(champion.code)
        reason = "; ".join(notes)
        result = TreeResult(tree, champion, champion.code if champion else None, self.done, self.stopped, reason, path)
        ctx.tracer.emit(TreeFinished(phase="finished", **result.summary()))
        for row in tree.table():
            ctx.say("  " + "  ".join(f"{k}={v}" for k, v in row.items()))
        for note in notes:
            ctx.say(f"  champion: {note}")
        root = next((nd for nd in tree.nodes.values() if nd.parent is None), None)
        if root is None or champion is None:
            why = reason or self.stopped
            raise CommitmentFailed(f"the tree search has no program to commit to ({why})")
        # The tree evolves candidate programs, not the team's workflow, so its workflow stays.
        return base.SearchOutcome(
            base.Endpoint(ctx.initial, root.score, code=root.code, node=root.id, checks=root.checks),
            base.Endpoint(ctx.initial, champion.score, code=champion.code, node=champion.id, predictions=predictions,
                          checks=champion.checks),
            self.done, self.stopped, [result])


def _passed_over(tree: Tree) -> list[str]:
    """Nodes that scored better than the plausible champion but failed a check, said once."""
    ranked = tree.ranked()
    best = ranked[0] if ranked else None
    if best is None or best.failed_checks:
        return []
    sign = 1 if tree.higher_is_better else -1
    better = [n for n in ranked if n.failed_checks and n.score is not None and best.score is not None
              and sign * (n.score - best.score) > 0]
    return [f"{n.id} scored {_fmt(n.score)} {tree.metric}, better than {best.id}'s {_fmt(best.score)}, but "
            f"fails {', '.join(n.failed_checks)}, so it is not the champion" for n in better[:3]]


# The execution checks that say a program delivered a well-formed predictions file at all.
_DELIVERED = ("exit_ok", "output_exists", "output_schema")


def commitment_order(tree: Tree) -> tuple[list[Node], list[str]]:
    """The order the final commitment tries the nodes in: best first (engine ranking), except
    that a node whose validation gain over the root is within the paired noise of the folds
    comes after the root, as Mimosa rejects such a change (engine/selection.py): the root is the
    team's own first program, and a search should not swap it for noise. A root that fails a
    check has no such standing. Returns the order and a note per node passed over."""
    ranked = tree.ranked()
    root = next((n for n in ranked if n.parent is None), None)
    if root is None or root.failed_checks:
        return ranked, []
    ahead: list[Node] = []
    notes: list[str] = []
    for node in ranked[:ranked.index(root)]:
        gain = paired_gain(node.validation, root.validation, tree.higher_is_better)
        if gain is None or gain.significant:  # unpaired (a different split): the plain ranking stands
            ahead.append(node)
        else:
            notes.append(f"{node.id} ({node.strategy or 'unknown'}) is not preferred to the root {root.id}: its "
                         f"{gain.describe()}: {gain.verdict()}")
    return ahead + [root] + [n for n in ranked if n is not root and n not in ahead], notes


def _commit(ctx: SearchContext, tree: Tree) -> tuple[Node | None, list[str], bytes | None]:
    """The final commitment: the first node of commitment_order() (the best node, unless its
    gain over the root is noise) run on the task's own data (what the official evaluation will
    score), its predictions checked as a verifier checks a team's.
    A node that does not deliver there, or delivers predictions failing a check, gives way to
    the next best (up to ``final_tries``); with none clean, the best that delivered is shipped
    and the notes say what it fails; with none delivering, there is nothing to commit to.
    Returns the node, the notes and the predictions it wrote there (what evolve scores)."""
    delivered: tuple[Node, list[Check], bytes] | None = None
    ranked, notes = commitment_order(tree)
    for node in ranked[:max(1, ctx.config.final_tries)]:
        checks, predictions = _run_on_task_data(ctx, node)
        for c in checks:
            ctx.tracer.emit(CheckEvent(**c.to_dict()), "final_commitment")
        failed = [c for c in checks if not c.passed]
        ran = not any(c.name in _DELIVERED for c in failed)
        if not failed:
            if node is not ranked[0]:
                notes.append(f"committed to {node.id} ({_fmt(node.score)} {tree.metric}) instead")
            return node, notes, predictions
        notes.append(f"{node.id}'s program on the task's data: " + "; ".join(f"{c.name} failed ({c.detail[:300]})"
                                                                             for c in failed))
        if ran and delivered is None:
            delivered = (node, failed, predictions)
    if delivered is not None:
        node, failed, predictions = delivered
        notes.append(f"committed to {node.id} although its predictions on the task's data fail "
                     f"{', '.join(c.name for c in failed)}")
        return node, notes, predictions
    return None, notes, None


def _run_on_task_data(ctx: SearchContext, node: Node) -> tuple[list[Check], bytes | None]:
    """Run a node's program on the task's training and test files: the execution and
    plausibility checks on what it wrote (never scored here), and the predictions when it
    delivered a well-formed file (the official evaluation scores these after the search)."""
    task, r = ctx.task, ctx.task.resources
    request = ExecutionRequest(code=node.code, input_files=task.input_files(), limits=r.limits)
    ctx.tracer.emit(ToolCall(tool="sandbox.python", executor=ctx.executor.name, purpose="final commitment",
                             node=node.id, code=node.code, data=sorted(request.input_files),
                             limits=asdict(request.limits)), "final_commitment")
    with labelled("final commitment", node.id):
        result = ctx.executor.run(request)
    ctx.tracer.emit(CodeExecution(purpose="final commitment", node=node.id, **result.evidence(),
                                  stdout=result.stdout[-20000:], stderr=result.stderr[-20000:],
                                  workdir=str(result.workdir)), "final_commitment")
    data = b""
    predictions = None
    sha = result.files.get(r.predictions_file)
    if sha is not None:
        try:
            data = result.read_file(r.predictions_file)
            predictions = {"path": r.predictions_file, "sha256": sha}
        except (OSError, ValueError):
            predictions = None
    assessment = task.assessment()
    checks = execution_checks(result.evidence(), predictions, r.prediction_contract(), assessment.varying_column(),
                              lambda digest: data if digest == sha else None)
    delivered = predictions is not None and all(c.passed for c in checks if c.name in _DELIVERED)
    if delivered:
        checks += assessment.checks(data, result.stdout)
    return [Check(c.name, c.passed, f"{node.id} on the task's data: {c.detail}") for c in checks], \
        (data if delivered else None)
