"""The harness: how each role works, what roles must hand each other, and what they remember.

All three parts are editable (by people in the studio and by the search's editors) and all
three are part of the workflow's content hash.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

ROLES = ("analyzer", "planner", "coder", "verifier", "router", "debugger", "finalizer")
# Every role that asks a model, the workflow's own and the searches': the judge and the mutator
# (Mimosa), the reviewer (repair), the editors and the reflector (SciMARS), the Evaluator that
# drafts evaluate.py, and the tree's roles (AgenticSciML). A per-role model setting names one of
# these (a setting for "codr" was ignored in silence).
SEARCH_ROLES = ("judge", "mutator", "reviewer", "role_editor", "coordination_editor", "memory_editor", "reflector",
                "evaluator", "selector", "proposer", "critic", "engineer", "result_analyst")
MODEL_ROLES = ROLES + SEARCH_ROLES

# What each role reads from the artifacts available to it and what it adds. Validation uses
# this to check that an agent (one role, or several grouped by an adapter) can do its job.
ROLE_NEEDS: dict[str, tuple[str, ...]] = {
    "analyzer": (),
    "planner": ("report",),
    "coder": ("plan",),
    "debugger": ("code",),
    "verifier": ("code",),
    "router": ("execution_evidence",),
    "finalizer": ("execution_evidence", "predictions"),
}
ROLE_GIVES: dict[str, tuple[str, ...]] = {
    "analyzer": ("report",),
    "planner": ("plan",),
    "coder": ("code",),
    "debugger": ("code",),
    "verifier": ("execution_evidence", "predictions"),
    "router": ("execution_evidence",),
    "finalizer": ("predictions", "final_report"),
}

DEFAULT_PROCEDURES: dict[str, str] = {
    "analyzer": (
        "Write one short Python script that explores the data files named in the task: row and "
        "column counts, per-column summary statistics, how each feature relates to the target, "
        "and anything unusual (jumps, outliers, scale differences). The script's printed output "
        "becomes the data report for the planner. Read only the task's files."
    ),
    "planner": (
        "Read the data report and choose one modelling approach that fits what the data shows. "
        "State the approach, its hyperparameters and why, the validation you expect, and the risks. "
        "Prefer approaches whose assumptions match the evidence in the report."
    ),
    "coder": (
        "Implement the plan as one complete, runnable Python script. Read only the task's data "
        "files, fit the model, report a validation score on a hold-out split of the training data, "
        "and write the predictions file exactly as the task's contract says. Fix random seeds."
    ),
    "verifier": (
        "Run the code in the sandbox. Check that it exited cleanly, that the predictions file exists "
        "and matches its contract, and that the values are plausible (not constant, not all zero). "
        "Answer SUCCESS if all checks pass, otherwise RETRY with what failed."
    ),
    "router": (
        "Decide where the work goes next from the execution evidence: SUCCESS when the evidence "
        "supports handing on, RETRY when a repair upstream can fix it, FAILURE when it cannot."
    ),
    "debugger": (
        "When the previous run failed, read the traceback and the code, find the cause and return "
        "the whole corrected script. Change only what the error implicates. When nothing failed, "
        "hand the code on unchanged."
    ),
    "finalizer": (
        "Hand on the verified predictions file unchanged (its hash must match the verifier's) and "
        "write a short final report: approach, validation score, checks, and open risks."
    ),
}


@dataclass(frozen=True)
class CoordinationPolicy:
    """Rules for handoffs between roles (the typed contracts themselves live on the edges)."""

    check_handoffs: bool = True          # check every artifact against its edge contract
    halt_on_contract_violation: bool = True
    flag_placeholders: bool = True       # reject outputs that look like TODO / made-up values

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RoleMemory:
    """One role's part of the memory policy: what it must record after its step, what it is
    given before it (retrieval filter, query hints, how many records), and which record kinds
    are pushed to it as they appear, whatever the limit."""

    records: tuple[str, ...] = ()     # recording duties: record kinds it writes after its step
    retrieves: tuple[str, ...] = ()   # retrieval filter: record kinds it is given before its step
    hints: tuple[str, ...] = ()       # query hints: words that rank what it retrieves
    limit: int = 8                    # records retrieved per step
    subscribes: tuple[str, ...] = ()  # kinds pushed to it once each, as they appear

    def to_dict(self) -> dict:
        return {"records": list(self.records), "retrieves": list(self.retrieves), "hints": list(self.hints),
                "limit": self.limit, "subscribes": list(self.subscribes)}

    @classmethod
    def from_dict(cls, d: dict) -> "RoleMemory":
        unknown = set(d) - set(ROLE_MEMORY_FIELDS)
        if unknown:
            raise ValueError(f"unknown memory-policy field(s) {', '.join(sorted(map(str, unknown)))}; "
                             f"a role's policy has {', '.join(ROLE_MEMORY_FIELDS)}")
        return cls(records=_words(d.get("records", ())), retrieves=_words(d.get("retrieves", ())),
                   hints=_words(d.get("hints", ())), limit=_whole(d.get("limit", 8)),
                   subscribes=_words(d.get("subscribes", ())))


ROLE_MEMORY_FIELDS = ("records", "retrieves", "hints", "limit", "subscribes")

# The default team memory: the verifier's executions and check results reach the planner, the
# coder and the debugger; people's notes and hypotheses are pushed to the planner and analyzer.
DEFAULT_ROLE_MEMORY: dict[str, RoleMemory] = {
    "analyzer": RoleMemory(records=("observation",), retrieves=("note", "question"), limit=4,
                           subscribes=("note",)),
    "planner": RoleMemory(records=("plan",), retrieves=("check_result", "finding", "plan", "hypothesis", "lesson"),
                          limit=8, subscribes=("note", "hypothesis")),
    "coder": RoleMemory(retrieves=("check_result",), limit=4),
    "verifier": RoleMemory(records=("execution", "check_result")),
    "debugger": RoleMemory(records=("finding",), retrieves=("check_result", "finding"), limit=4),
    "router": RoleMemory(),
    "finalizer": RoleMemory(records=("finding",), retrieves=("check_result",), limit=4),
}


def _words(value) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"expected a list of words, not {type(value).__name__}")
    return tuple(str(v) for v in value)


def _whole(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise ValueError(f"a record limit is a whole number, not {value!r}")
    return int(value)


@dataclass(frozen=True)
class MemoryPolicy:
    """Per role, what it records into the run's evidence graph and what it retrieves from it
    (engine/evidence/memory.py applies it). Part of the hashed harness: editing it is a
    mutation, and two policies can give two teams different prompts."""

    roles: dict[str, RoleMemory] = field(default_factory=lambda: dict(DEFAULT_ROLE_MEMORY))

    def role(self, role: str) -> RoleMemory:
        return self.roles.get(role, RoleMemory())

    def to_dict(self) -> dict:
        return {"roles": {r: m.to_dict() for r, m in sorted(self.roles.items())}}

    @classmethod
    def from_dict(cls, d: dict) -> "MemoryPolicy":
        if not d:
            return cls()
        if "roles" not in d:
            return cls.from_legacy(d)
        unknown = set(d) - {"roles"}
        if unknown:
            raise ValueError(f"unknown memory-policy field(s) {', '.join(sorted(map(str, unknown)))}")
        roles = d["roles"]
        if not isinstance(roles, dict):
            raise ValueError("the memory policy's roles are a mapping from role to its policy")
        return cls({str(r): RoleMemory.from_dict(m if isinstance(m, dict) else {}) for r, m in roles.items()})

    @classmethod
    def from_legacy(cls, d: dict) -> "MemoryPolicy":
        """The policy shape before the evidence graph (global filters, limit and hints;
        subscriptions naming roles): read into per-role policies so archived workflows load."""
        roles = {r: m for r, m in DEFAULT_ROLE_MEMORY.items()}
        duties = d.get("recording_duties")
        if isinstance(duties, dict):
            roles = {r: replace(m, records=_words(duties.get(r, ()))) for r, m in roles.items()}
        for r, m in list(roles.items()):
            if "retrieval_filters" in d and m.retrieves:
                m = replace(m, retrieves=_words(d["retrieval_filters"]))
            if "query_hints" in d and m.retrieves:
                m = replace(m, hints=_words(d["query_hints"]))
            if "record_limit" in d and m.retrieves:
                m = replace(m, limit=_whole(d["record_limit"]))
            roles[r] = m
        return cls(roles)

    def with_role(self, role: str, **changes) -> "MemoryPolicy":
        current = self.role(role).to_dict()
        return MemoryPolicy({**self.roles, role: RoleMemory.from_dict({**current, **changes})})


@dataclass(frozen=True)
class Harness:
    procedures: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PROCEDURES))
    coordination: CoordinationPolicy = field(default_factory=CoordinationPolicy)
    memory: MemoryPolicy = field(default_factory=MemoryPolicy)

    def procedure(self, role: str) -> str:
        return self.procedures.get(role) or DEFAULT_PROCEDURES[role]

    def to_dict(self) -> dict:
        return {
            "procedures": dict(sorted(self.procedures.items())),
            "coordination": self.coordination.to_dict(),
            "memory": self.memory.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict) -> "Harness":
        return cls(
            procedures={**DEFAULT_PROCEDURES, **d.get("procedures", {})},
            coordination=CoordinationPolicy(**d.get("coordination", {})),
            memory=MemoryPolicy.from_dict(d.get("memory", {})),
        )
