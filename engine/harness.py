"""The harness: how each role works, what roles must hand each other, and what they remember.

All three parts are editable (by people in the studio and by the search's editors) and all
three are part of the workflow's content hash.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

ROLES = ("analyzer", "planner", "coder", "verifier", "router", "debugger", "finalizer")

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
class MemoryPolicy:
    """What roles record into and retrieve from shared memory. Kept simple until the evidence
    graph arrives; it is already part of the hashed harness so that editing it is a mutation."""

    recording_duties: dict[str, tuple[str, ...]] = field(default_factory=lambda: {
        "analyzer": ("observation",), "verifier": ("finding",), "debugger": ("finding",),
    })
    retrieval_filters: tuple[str, ...] = ("finding", "observation")
    query_hints: tuple[str, ...] = ()
    record_limit: int = 20
    subscriptions: dict[str, tuple[str, ...]] = field(default_factory=lambda: {"planner": ("analyzer",)})

    def to_dict(self) -> dict:
        return {
            "recording_duties": {k: list(v) for k, v in sorted(self.recording_duties.items())},
            "retrieval_filters": list(self.retrieval_filters),
            "query_hints": list(self.query_hints),
            "record_limit": self.record_limit,
            "subscriptions": {k: list(v) for k, v in sorted(self.subscriptions.items())},
        }

    @classmethod
    def from_dict(cls, d: dict) -> "MemoryPolicy":
        return cls(
            recording_duties={k: tuple(v) for k, v in d.get("recording_duties", {}).items()},
            retrieval_filters=tuple(d.get("retrieval_filters", ())),
            query_hints=tuple(d.get("query_hints", ())),
            record_limit=int(d.get("record_limit", 20)),
            subscriptions={k: tuple(v) for k, v in d.get("subscriptions", {}).items()},
        )


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
