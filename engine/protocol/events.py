"""The payload of every trace event, one pydantic model per event kind.

An event's payload used to be whatever keyword arguments its emitter passed; readers (the web
app's bridge, presenters, templates, run.js) guessed at keys. Here each kind has a model that
forbids unknown fields, so a typo or a new key fails where the event is emitted, not on a page.

The stored form stays a plain JSON dict (``Payload.to_payload``): only the fields an emitter set
are written, so a trace holds the same keys as before the models existed, and old trace files
are read without validation (engine/trace.py). Consumers validate with :func:`parse_payload`.

Where one kind is emitted in several shapes (``search_iteration`` by each search and each tree
phase, ``composition`` with or without a gate), its model has optional fields for every shape,
with ``search``/``phase`` saying which one when the emitter sends it; each shape's fields are
grouped with a comment, so a model can be split or tightened once the emitters agree on one.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class Strict(BaseModel):
    # ser_json_inf_nan: a NaN metric is written as NaN, as json.dumps wrote it before.
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class Payload(Strict):
    """Base of every event payload; ``kind`` names the event kind it is the payload of."""

    kind: ClassVar[str]

    def to_payload(self) -> dict:
        """The stored form: JSON types only, and only the fields that were set (None included)."""
        return self.model_dump(mode="json", exclude_unset=True)


# --- shared parts --------------------------------------------------------------------------------
class Usage(Strict):
    """engine.budget.Usage.to_dict()."""

    calls: int
    prompt_tokens: int
    completion_tokens: int
    tokens: int
    cost_usd: float
    failed_calls: int = 0


class BudgetLimits(Strict):
    """engine.budget.Budget.limits(); None means no limit."""

    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_calls: int | None = None


class BudgetLeft(Strict):
    """engine.budget.Budget.remaining(); None means no limit."""

    tokens: int | None = None
    calls: int | None = None
    cost_usd: float | None = None


class CheckResult(Strict):
    """A public check as searches read it back (engine.judge.public_checks): the ``check``
    event's fields and the agent that ran it."""

    name: str
    passed: bool
    detail: str = ""
    agent: str | None = None


class ValidationPlan(Strict):
    """engine.validation.SplitPlan.to_dict(): how in-loop validation splits the training rows."""

    split: Literal["kfold", "holdout_range", "group", "time", "series", "residual"]  # engine/assessment kinds
    folds: int
    column: str | None = None
    side: Literal["upper", "lower"] | None = None
    fraction: float = 0.2
    chosen_by: Literal["task", "trellis", "default"] = "default"
    reason: str = ""


class Metric(Strict):
    """A score: evaluate.py's (engine.evaluation), the in-loop validation's (engine.validation)
    or an error. ``ok`` False comes with ``error`` and nothing else."""

    ok: bool
    error: str | None = None
    metric: str | None = None
    value: float | None = None
    higher_is_better: bool | None = None
    n: int | None = None
    evaluator: str | None = None
    # in-loop validation only
    split: str | None = None
    splits: int | None = None
    split_values: list[float] | None = None
    scorer: str | None = None                 # "evaluate.py" (--truth) or "built-in" (engine/metrics.py)
    baselines: dict[str, float] | None = None  # trivial baselines on the same folds (engine/baselines.py)
    baseline_split_values: dict[str, list[float]] | None = None  # each baseline's score per fold, paired
    validation: ValidationPlan | None = None  # the split the folds came from


class MutationRecord(Strict):
    """engine.mutations.Mutation.to_dict(), or a person's edit recorded as one (kind human_edit)."""

    kind: str
    target: str
    params: dict = Field(default_factory=dict)
    rationale: str = ""
    author: str = "engine"


class StartInfo(Strict):
    """Where a search started: de novo, or an archive's StartChoice.to_dict()."""

    path: str
    similarity: float | None = None
    reason: str = ""
    threshold: float | None = None
    source: str | None = None
    source_task: str | None = None
    workflow_name: str | None = None
    workflow_hash: str | None = None


class CheckOutcome(Strict):
    """One public check's result on an end of a search (engine.judge.public_checks)."""

    name: str
    passed: bool


class Committed(Strict):
    """What a search committed to: engine.search.base.Endpoint.describe() plus the official score."""

    workflow_hash: str
    version: int
    validation: float | None = None
    J: float | None = None
    official: Metric | None = None
    node: str | None = None          # tree search: the node the end is
    checks: list[CheckOutcome] = Field(default_factory=list)  # its public checks (a tree node's: on its folds)


class SearchEnd(Committed):
    """One end (initial or final) of an evolve."""

    baseline: str | None = None      # the trivial baseline handed in: it beat every candidate on the search's folds
    verdict: str = ""                # the sentence that says so (engine.selection.Unbeaten)
    searched: Committed | None = None  # then: what the search itself committed to, scored officially too


class ModelFailure(Strict):
    """engine.errors.ModelUnavailable.to_dict(): why the model could not be called."""

    model: str
    error_kind: str
    role: str | None = None
    attempts: int = 1
    provider_message: str
    reason: str
    usage: Usage


# --- one run of a workflow (engine/runner.py, roles.py, gateway.py) ------------------------------
class RunStarted(Payload):
    kind: ClassVar[str] = "run_started"
    task: str
    task_title: str
    task_fingerprint: str
    workflow: dict
    workflow_hash: str
    seed: int
    model_override: str | None = None
    executor: str
    executor_reason: str | None = None   # why this sandbox (engine/sandbox/select.py), when chosen
    budget: BudgetLimits
    order: list[str]
    attempt: int = 1
    endpoints: dict[str, dict] | None = None   # role -> the model and endpoint serving it (no secrets)


class AgentStarted(Payload):
    kind: ClassVar[str] = "agent_started"
    roles: list[str]
    inputs: list[str]
    retry_of: str | None = None      # the agent whose route sent this one back


class ModelCall(Payload):
    kind: ClassVar[str] = "model_call"
    role: str
    purpose: str
    model: str
    provider: str
    messages: list[dict]
    response: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    duration_s: float
    cached: bool
    request_key: str
    budget_used: Usage
    budget_remaining: BudgetLeft
    tools: list[str] | None = None           # the MCP tools offered with the call (engine/tools/)
    tool_calls: list[dict] | None = None     # the calls the model asked for: {id, name, arguments}
    endpoint: str | None = None              # where the model was reached (a URL, "offline", "provider default")
    max_tokens: int | None = None            # the answer length asked for (what the budget reserved)
    finish_reason: str | None = None         # "stop", "length" (cut off at max_tokens), "tool_calls"
    prompt_chars: int | None = None          # the prompt's size in characters, beside its tokens
    priced: bool | None = None               # False: no price known for the model, its cost counts as 0
    structured: bool | None = None           # the answer was asked for as JSON-schema structured output
    prompt_cut_chars: int | None = None      # characters of the inputs cut to fit the model's context


class ModelCallFailed(Payload):
    """A model call that got no usable answer (engine/gateway.py): counted, and retried or raised."""

    kind: ClassVar[str] = "model_call_failed"
    role: str
    purpose: str
    model: str
    endpoint: str
    attempt: int
    error_kind: str                          # rate_limit, timeout, server_error, empty_answer, refusal, ...
    error: str
    retry_in_s: float | None = None          # None: not retried (the error is raised to the step or the run)
    failed_calls: int


class AnswerReasked(Payload):
    """A role's answer that broke its answer contract, and the one re-ask naming what was wrong
    (engine/answers.py). ``used`` says whether the second answer was usable."""

    kind: ClassVar[str] = "answer_reasked"
    role: str
    contract: str                            # the answer contract's name: python program, status, ...
    problem: str                             # what was wrong with the first answer
    used: bool | None = None                 # set on the outcome event: the re-asked answer was usable
    outcome: str | None = None               # what Trellis did with it: used, decided from the checks, ...


class ToolCall(Payload):
    kind: ClassVar[str] = "tool_call"
    tool: str
    executor: str
    purpose: str
    code: str
    limits: dict[str, int | float]
    # tree search
    node: str | None = None
    attempt: int | None = None
    data: str | list[str] | None = None


class ToolServerStatus(Strict):
    """One configured MCP server at discovery: the tools it listed, or why it has none."""

    name: str
    ok: bool
    tools: list[str] = Field(default_factory=list)
    error: str | None = None
    duration_s: float


class DiscoveredTool(Strict):
    """engine.tools.registry.ToolSpec.to_dict()."""

    name: str                        # mcp.<server>.<tool>
    server: str
    tool: str
    description: str = ""
    input_schema: dict = Field(default_factory=dict)


class ToolsDiscovered(Payload):
    """The MCP servers of a run or search enumerated at its start (engine/tools/discovery.py)."""

    kind: ClassVar[str] = "tools_discovered"
    config: str | None = None        # the configuration file read
    servers: list[ToolServerStatus]
    tools: list[DiscoveredTool]


class McpToolCall(Payload):
    """An agent's call of a discovered MCP tool, as the model asked for it."""

    kind: ClassVar[str] = "mcp_tool_call"
    tool: str
    server: str
    role: str
    call_id: str
    arguments: dict


class McpToolResult(Payload):
    """What the call returned (or its error, a crashed server's included) and how long it took."""

    kind: ClassVar[str] = "mcp_tool_result"
    tool: str
    server: str
    role: str
    call_id: str
    ok: bool
    result: str = ""                 # the text the agent read (bounded)
    error: str | None = None
    duration_s: float
    artifacts: dict[str, str] = Field(default_factory=dict)   # files it wrote -> sha256 (in the run's store)


class CodeExecution(Payload):
    """ExecutionResult.evidence() and the full (tailed) output streams."""

    kind: ClassVar[str] = "code_execution"
    purpose: str
    status: Literal["ok", "error", "timeout", "memory", "violation", "killed"]
    exit_code: int
    stdout_tail: str
    stderr_tail: str
    duration_s: float
    files: dict[str, str]            # relative path -> sha256
    violations: list[str]
    executor: str
    stdout: str
    stderr: str
    workdir: str
    # tree search: the in-loop validation of one candidate
    node: str | None = None
    attempt: int | None = None
    validation: Metric | None = None


class Handoff(Payload):
    kind: ClassVar[str] = "handoff"
    source: str
    target: str
    artifact: str
    contract: str
    ok: bool
    errors: list[str]
    value_preview: Any = None        # the artifact, shortened (engine.runner._preview)


class Check(Payload):
    kind: ClassVar[str] = "check"
    name: str
    passed: bool
    detail: str = ""


# An agent's step ends in one of the route statuses (engine.workflow.STATUSES), or is stopped
# by the budget, or skipped because an input was not delivered.
AgentStatus = Literal["SUCCESS", "RETRY", "FALLBACK", "FAILURE", "SKIPPED", "STOPPED"]


class Route(Payload):
    kind: ClassVar[str] = "route"
    on: AgentStatus                  # the status that triggered it
    target: str | None = None
    taken: bool
    loop: int
    max_loops: int
    reason: str


class AgentFinished(Payload):
    kind: ClassVar[str] = "agent_finished"
    status: AgentStatus
    message: str
    outputs: dict[str, Any]          # artifact -> preview


class BudgetExhausted(Payload):
    kind: ClassVar[str] = "budget_exhausted"
    reason: str
    used: Usage
    limits: BudgetLimits
    nodes: int | None = None         # tree search: the tree's size when it stopped


class Evaluation(Payload, Metric):
    kind: ClassVar[str] = "evaluation"
    predictions_sha256: str | None = None


class RunFinished(Payload):
    kind: ClassVar[str] = "run_finished"
    run_id: str
    status: Literal["completed", "failed", "stopped"]
    reason: str
    workflow_hash: str
    agent_status: dict[str, str]
    usage: Usage
    metric: Metric | None = None
    per_agent_usage: dict[str, Usage]
    duration_s: float
    overhead_s: float


class RunFailed(Payload, ModelFailure):
    kind: ClassVar[str] = "run_failed"
    duration_s: float


class SearchFailed(Payload, ModelFailure):
    kind: ClassVar[str] = "search_failed"
    archived: bool = False


# --- searches (engine/evolve.py, engine/search/) -------------------------------------------------
class SearchStarted(Payload):
    kind: ClassVar[str] = "search_started"
    search: str                      # a name in engine/search/registry.py
    task: str
    iterations: int
    seed: int
    budget: BudgetLimits
    workflow_hash: str
    start: StartInfo
    workflow: dict
    resumed_after: int | None = None    # the last iteration finished before a resume
    memory: bool = False                # the probes share one evidence graph
    executor: str | None = None         # the sandbox of every probe's programs, and why
    executor_reason: str | None = None
    # every role that asks a model, the workflow's and the search's own -> its endpoint (no secrets)
    endpoints: dict[str, dict] | None = None


class SynthesisStage(Payload):
    """One stage of retrieval-based synthesis (engine/synthesis/stages.py) or of its review
    (engine/search/repair.py): what it was given and what it produced."""

    kind: ClassVar[str] = "synthesis_stage"
    stage: Literal["plan", "retrieve", "synthesize", "execute", "review"]
    inputs: dict = Field(default_factory=dict)
    outputs: dict = Field(default_factory=dict)
    note: str = ""


class MutationProposed(Payload):
    kind: ClassVar[str] = "mutation_proposed"
    valid: bool
    mutation: MutationRecord | None = None
    diff: dict | None = None
    parent_hash: str | None = None
    child_hash: str | None = None
    problems: list[str] | None = None
    raw: str | None = None           # the answer that was not a mutation
    editor: str | None = None        # scimars


class Judgement(Payload):
    """engine.judge.Judgement.to_dict() for one probe, with the evidence it judged."""

    kind: ClassVar[str] = "judgement"
    iteration_n: int
    workflow_hash: str
    ok: bool
    error: str = ""
    scores: dict[str, float] | None = None
    feedback: dict[str, str] | None = None
    attempts: int | None = None
    raw: list[str] | None = None
    J: float | None = None
    checks: list[CheckResult]
    validation: Metric | None = None


class ReuseReceipt(Payload):
    """SciMARS reused an earlier probe of the same workflow (verified) or ran it again."""

    kind: ClassVar[str] = "reuse_receipt"
    workflow_hash: str
    reused_run_id: str | None
    # None on a rerun of a probe that delivered no program: nothing was there to verify
    program_sha256: str | None = None
    label: str
    verified: bool
    predictions_sha256: str | None = None
    # a rerun: why the earlier probe could not be reused
    rerun_id: str | None = None
    earlier_run_id: str | None = None
    reason: str | None = None


class SearchStep(Payload):
    """One step of a workflow search settled: Mimosa's judged candidate, a repair, a run of the
    fixed-memory control, a person's edit adopted (by any of them, SciMARS included)."""

    kind: ClassVar[str] = "search_iteration"
    search: str                      # a workflow search (engine/search/registry.py)
    n: int
    accepted: bool
    workflow_hash: str
    budget_left: BudgetLeft
    decided_by: str = ""
    reason: str = ""
    mutation: MutationRecord | None = None   # none for a run of the fixed-memory control
    workflow: dict | None = None     # the adopted workflow; None when rejected
    checks: list[CheckResult] = Field(default_factory=list)
    # mimosa: the candidate's judge score and the incumbent's
    J: float | None = None
    incumbent_J: float | None = None
    # memory-fixed: the run's validation and the best run's before it
    validation: float | None = None
    reference_validation: float | None = None


class EditorProbe(Payload):
    """SciMARS: one editor's proposal, probed on its own branch beside the round's reference."""

    kind: ClassVar[str] = "search_iteration"
    search: str
    n: int
    editor: str
    mutation: MutationRecord
    supported: bool
    workflow_hash: str
    budget_left: BudgetLeft
    checks: list[CheckResult] = Field(default_factory=list)
    validation: float | None = None
    reference_validation: float | None = None
    receipt: ReuseReceipt | None = None


class TreeVote(Payload):
    """The tree's selector ensemble chose the node one slot expands."""

    kind: ClassVar[str] = "search_iteration"
    phase: Literal["vote"]
    slot: int
    votes: list[str | None]
    tally: dict[str, int]
    winner: str
    fallback: bool


class TreeIterationStarted(Payload):
    """A tree iteration expands these parents (the first the best)."""

    kind: ClassVar[str] = "search_iteration"
    phase: Literal["started"]
    parents: list[str]
    best: str
    nodes: int


class TreeChildAbandoned(Payload):
    kind: ClassVar[str] = "search_iteration"
    phase: Literal["child_abandoned"]
    parent: str
    error: str


class TreeFinished(Payload):
    """engine.search.tree.TreeResult.summary()."""

    kind: ClassVar[str] = "search_iteration"
    phase: Literal["finished"]
    iterations: int
    stopped: str
    reason: str
    nodes: int
    metric: str
    higher_is_better: bool
    champion: str | None = None
    champion_score: float | None = None
    champion_strategy: str | None = None
    tree_path: str | None = None


def _step_shape(data: dict) -> str:
    """Which of search_iteration's shapes a stored payload is: a tree phase names itself, an
    editor's probe names its editor, any other is a settled step."""
    if data.get("phase") is not None:
        return str(data["phase"])
    return "editor" if data.get("editor") is not None else "step"


SEARCH_ITERATION_SHAPES: dict[str, type[Payload]] = {
    "step": SearchStep, "editor": EditorProbe, "vote": TreeVote, "started": TreeIterationStarted,
    "child_abandoned": TreeChildAbandoned, "finished": TreeFinished}
# One step of any search: the union of its shapes, told apart by _step_shape.
SearchIteration = SearchStep | EditorProbe | TreeVote | TreeIterationStarted | TreeChildAbandoned | TreeFinished
TREE_PHASES = (TreeVote, TreeIterationStarted, TreeChildAbandoned, TreeFinished)


class Composition(Payload):
    """SciMARS: what the composer chose in a round, a change that does not combine (``note``),
    or the gate's word on the choice (``gate``)."""

    kind: ClassVar[str] = "composition"
    n: int
    decision: Literal["keep", "adopt", "combine"] | None = None
    workflow_hash: str | None = None
    # the composer's choice
    editors: list[str] | None = None
    checks_passed: int | None = None
    validation: float | None = None
    reference_validation: float | None = None
    supported: list[str] | None = None
    # a proposal that could not be combined with the others
    note: str | None = None
    # the gate's decision on the choice
    gate: str | None = None
    approved: bool | None = None
    reason: str | None = None
    workflow: dict | None = None


class Reflection(Payload):
    kind: ClassVar[str] = "reflection"
    n: int
    lessons: list[str]
    source: str                      # the reflector model, or "engine" (fallback lessons)
    evidence_sha256: str


class OfficialEvaluation(Payload, Metric):
    kind: ClassVar[str] = "official_evaluation"
    which: Literal["initial", "final", "single_agent"]
    workflow_hash: str


class SingleAgentBaseline(Strict):
    """engine.ending.single_agent_baseline(): one agent playing every role, the team's budget."""

    workflow_hash: str
    status: str
    reason: str = ""
    official: Metric
    usage: Usage | None = None
    trace: str = ""
    run_dir: str = ""
    predictions_sha256: str | None = None  # its delivered predictions, in run_dir's artifact store


class OfficialGap(Strict):
    """engine.official_gap.Gap: the final team's official lead over one baseline, and whether
    a paired bootstrap over the held-out rows (or whole series) puts it beyond the test set's noise."""

    baseline: str
    difference: float | None = None   # team minus baseline, positive = the team is better
    low: float | None = None          # 95 % interval of the difference
    high: float | None = None
    rows: int = 0
    resamples: int = 0
    scorer: str = ""
    verdict: Literal["better", "worse", "within noise", "identical", ""] = ""
    why: str = ""
    resampled: str = ""               # what one resample draws when not the rows ("7 whole series")


class RankCorrelation(Strict):
    """engine.hindsight.Correlation: Spearman's rho between two of J, validation and official."""

    a: Literal["J", "validation", "official"]
    b: Literal["J", "validation", "official"]
    n: int
    rho: float | None = None
    p: float | None = None
    why: str = ""


class CandidateScores(Strict):
    label: str                      # the probe's folder, or "node n3"
    J: float | None = None
    validation: float | None = None
    official: float | None = None
    official_error: str | None = None
    program: str | None = None      # sha256 of its program: the same program probed twice is one candidate


class Hindsight(Payload):
    """engine.hindsight.Hindsight.to_dict(): after the final commitment, every probed candidate
    scored officially and the rank correlations of the search's proxies with that score."""

    kind: ClassVar[str] = "hindsight"
    higher_is_better: bool
    correlations: list[RankCorrelation]
    candidates: list[CandidateScores]


class Archive(Payload):
    kind: ClassVar[str] = "archive"
    workflow_hash: str
    entry: str | None = None         # the archive entry made
    skipped: str | None = None       # or why none was


class SearchFinished(Payload):
    """engine.evolve.EvolveResult.to_dict() without run_dir."""

    kind: ClassVar[str] = "search_finished"
    task: str
    search: str                      # a name in engine/search/registry.py
    iterations: int
    stopped: str
    initial: SearchEnd
    final: SearchEnd
    usage: Usage
    wall_s: float
    start: StartInfo
    archived: dict[str, str] = Field(default_factory=dict)   # {"entry": id}, {"skipped": why} or {}
    trace: str = ""
    baselines: dict[str, Metric] = Field(default_factory=dict)  # engine/baselines.py: name -> official score
    single_agent: SingleAgentBaseline | None = None  # its official score is also baselines["single_agent"]
    hindsight: Hindsight | None = None
    failed: str = ""                 # the search ended but its final workflow has no official score
    memory: bool = False             # the probes shared one evidence graph
    gaps: dict[str, OfficialGap] = Field(default_factory=dict)  # baseline name -> the team's lead over it


# --- the tree search (engine/search/tree.py) -----------------------------------------------------
class SelectorVote(Payload):
    kind: ClassVar[str] = "selector_vote"
    slot: int
    voter: int
    vote: str | None = None
    valid: bool
    candidates: list[str]
    answer: str


class KnowledgeHit(Strict):
    id: str
    matched: list[str]


class KnowledgeRetrieval(Payload):
    kind: ClassVar[str] = "knowledge_retrieval"
    node: str
    parent: str | None = None
    query_chars: int
    excluded: list[str]
    top: list[KnowledgeHit]
    retrieved: str | None = None
    matched: list[str]


class MemoryRetrieval(Payload):
    """What one role was given from the evidence graph before its step (engine/evidence/memory.py):
    the ids its retrieval filter and hints found, and those its subscriptions pushed."""
    kind: ClassVar[str] = "memory_retrieval"
    role: str
    records: list[int]
    pushed: list[int] = Field(default_factory=list)
    kinds: list[str] = Field(default_factory=list)
    hints: list[str] = Field(default_factory=list)
    limit: int = 0
    subscribes: list[str] = Field(default_factory=list)
    branch: str | None = None


class EvidenceAuthor(Strict):
    agent: str | None = None
    role: str | None = None
    person: str | None = None


class EvidenceProvenance(Strict):
    run_id: str | None = None
    event_seq: int | None = None
    execution_sha256: str | None = None
    artifact_sha256: str | None = None


class EvidenceRecord(Strict):
    """engine.evidence.graph.Record.to_dict(): enough to rebuild the graph from the trace."""
    id: int
    lineage: int
    version: int
    kind: str
    text: str
    author: EvidenceAuthor
    provenance: EvidenceProvenance
    tags: list[str] = Field(default_factory=list)
    iteration: int | None = None
    branch: str | None = None
    created: float = 0.0


class EvidenceLink(Strict):
    type: str
    target: int


class EvidenceRecorded(Payload):
    kind: ClassVar[str] = "evidence_recorded"
    record: EvidenceRecord
    links: list[EvidenceLink] = Field(default_factory=list)


class EvidenceBranch(Payload):
    """A search settled one branch of its shared evidence graph."""
    kind: ClassVar[str] = "evidence_branch"
    branch: str
    status: Literal["selected", "rejected"]
    n: int | None = None


class DebateTurn(Payload):
    kind: ClassVar[str] = "debate_turn"
    node: str
    parent: str | None = None
    round: int
    text: str
    strategy: list[str | dict]       # [name, params] when the turn names one, else []
    verdict: str | None = None       # the critic's


class TreeNode(Payload):
    kind: ClassVar[str] = "tree_node"
    node: str
    parent: str | None = None
    iteration: int
    strategy: str | None = None
    params: dict
    score: float | None = None
    status: Literal["scored", "failed"]
    knowledge: list[str]
    debug_attempts: int
    verdict: str
    debate_turns: int
    report: str
    vetoed: bool = False        # a person vetoed it at the gate
    promoted: bool = False      # a person promoted it: a parent in the next iteration
    decided_by: str = ""        # who passed it through the gate


class NodeRetired(Payload):
    kind: ClassVar[str] = "node_retired"
    node: str
    children: int
    max_children: int
    iteration: int | None = None


class ValidationPlanned(Payload):
    """How a search validates candidates, said once at its start (its answer kind's Assessment.plan)."""

    kind: ClassVar[str] = "validation_planned"
    plan: ValidationPlan
    description: str


# --- training jobs (engine/training/): a program that imports trellis_train runs as a job ------------
class TrainingStarted(Payload):
    """A training program began (or resumed from a checkpoint): which job, on which device."""

    kind: ClassVar[str] = "training_started"
    job: str                      # the job's key: the program and its inputs, hashed
    purpose: str
    device: str
    resumed_from: str | None = None   # sha256 of the checkpoint it was handed, when resumed
    resumed_epoch: int | None = None
    node: str | None = None           # the tree node whose program it is, when one is


class TrainingProgress(Payload):
    """One line the program reported through trellis_train.report()."""

    kind: ClassVar[str] = "training_progress"
    job: str
    epoch: int | None = None
    step: int | None = None
    epochs: int | None = None     # how many epochs it plans, when it said
    loss: float | None = None
    val: float | None = None
    lr: float | None = None
    eta_s: float | None = None
    extra: dict[str, float] = Field(default_factory=dict)
    device: str | None = None     # the device the program says it trains on, when it first says so


class TrainingCheckpoint(Payload):
    """A checkpoint file the program wrote, kept in the run's artifact store."""

    kind: ClassVar[str] = "training_checkpoint"
    job: str
    path: str
    sha256: str
    bytes: int
    epoch: int | None = None


class TrainingFinished(Payload):
    """How the job ended: its program's status, or paused/cancelled by a person."""

    kind: ClassVar[str] = "training_finished"
    job: str
    status: Literal["ok", "error", "timeout", "memory", "violation", "killed", "paused", "cancelled"]
    epochs: int | None = None
    best_val: float | None = None
    last_checkpoint: str | None = None
    duration_s: float


# Emission order: a run's events, the ways it stops, then the searches'.
_MODELS: tuple[type[Payload], ...] = (
    RunStarted, AgentStarted, ModelCall, ModelCallFailed, AnswerReasked, ToolCall, CodeExecution, Handoff, Check, Route, AgentFinished,
    BudgetExhausted, Evaluation, RunFinished,
    # MCP tools: discovered at the start, called by agents
    ToolsDiscovered, McpToolCall, McpToolResult,
    # the team's memory: what a role was given, what was recorded, which branches were kept
    MemoryRetrieval, EvidenceRecorded, EvidenceBranch,
    # the model could not be called at all (unknown model, missing key, provider down)
    RunFailed, SearchFailed,
    # search-level events (one search runs many probes, each a run with its own trace)
    SearchStarted, SynthesisStage, ValidationPlanned, MutationProposed, Judgement, SearchStep, EditorProbe, OfficialEvaluation, Hindsight, Archive,
    SearchFinished,
    # evolutionary tree search
    SelectorVote, KnowledgeRetrieval, DebateTurn, TreeNode, NodeRetired, *TREE_PHASES,
    # SciMARS harness self-improvement
    ReuseReceipt, Composition, Reflection,
    # training jobs
    TrainingStarted, TrainingProgress, TrainingCheckpoint, TrainingFinished,
)
# Each event kind and the models of its payload: one, or one per shape (search_iteration).
PAYLOADS: dict[str, tuple[type[Payload], ...]] = {}
for _model in _MODELS:
    PAYLOADS.setdefault(_model.kind, ())
    PAYLOADS[_model.kind] += (_model,)
del _model

EVENT_KINDS: tuple[str, ...] = tuple(PAYLOADS)


class PayloadError(ValueError):
    """An event payload that its kind's model refuses (or a kind there is no model for)."""


def model_of(kind: str, data: Any) -> type[Payload]:
    """The model of one payload of ``kind``: the kind's model, or the shape ``data`` has."""
    models = PAYLOADS.get(kind)
    if models is None:
        raise PayloadError(f"unknown event kind {kind!r}")
    if len(models) == 1:
        return models[0]
    return SEARCH_ITERATION_SHAPES[_step_shape(data if isinstance(data, dict) else {})]


def parse_payload(kind: str, data: dict) -> Payload:
    """The typed payload of one event. Raises PayloadError naming the kind and each bad field."""
    model = model_of(kind, data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(payload)'}: {e['msg']}" for e in exc.errors())
        raise PayloadError(f"invalid {kind!r} event payload: {problems}") from exc


def read_payload(kind: str, data: dict) -> Payload:
    """A stored payload read back typed: what every reader of a trace or an Event row goes
    through. Top-level keys the model does not have (an older Trellis wrote them) are left out
    rather than refused; a missing or mistyped field raises PayloadError as ``parse_payload``."""
    model = model_of(kind, data)
    if isinstance(data, dict) and not data.keys() <= model.model_fields.keys():
        data = {k: v for k, v in data.items() if k in model.model_fields}
    return parse_payload(kind, data)


def read_payload_or_none(kind: str, data: dict) -> Payload | None:
    """``read_payload``, or None for a payload its kind's model refuses: a line of an older or
    damaged trace, or a row from before payloads were typed. Every reader that passes such an
    event over reads through this (or an event's ``typed``) rather than catching the error itself."""
    try:
        return read_payload(kind, data)
    except PayloadError:
        return None


__all__ = [
    "EVENT_KINDS", "PAYLOADS", "Payload", "PayloadError", "model_of", "parse_payload", "read_payload",
    "read_payload_or_none",
    # shared parts
    "BudgetLeft", "BudgetLimits", "CheckResult", "KnowledgeHit", "Metric", "ModelFailure", "MutationRecord",
    "Committed", "SearchEnd", "StartInfo", "Strict", "Usage", "ValidationPlan", "SingleAgentBaseline", "RankCorrelation",
    "CandidateScores", "EvidenceAuthor", "EvidenceProvenance", "EvidenceRecord", "EvidenceLink",
    # one model per kind
    "RunStarted", "AgentStarted", "ModelCall", "ModelCallFailed", "AnswerReasked", "ToolCall", "CodeExecution", "Handoff", "Check", "Route",
    "AgentFinished", "BudgetExhausted", "Evaluation", "RunFinished", "MemoryRetrieval", "EvidenceRecorded",
    "ToolServerStatus", "DiscoveredTool", "ToolsDiscovered", "McpToolCall", "McpToolResult",
    "EvidenceBranch", "RunFailed", "SearchFailed",
    "SearchStarted", "ValidationPlanned", "MutationProposed", "Judgement", "SearchIteration", "SearchStep", "EditorProbe",
    "TreeVote", "TreeIterationStarted", "TreeChildAbandoned", "TreeFinished", "TREE_PHASES", "SEARCH_ITERATION_SHAPES", "OfficialEvaluation", "Hindsight", "Archive",
    "SearchFinished", "SelectorVote", "KnowledgeRetrieval", "DebateTurn", "TreeNode", "NodeRetired",
    "ReuseReceipt", "Composition", "Reflection",
]
