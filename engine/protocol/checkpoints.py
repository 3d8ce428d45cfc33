"""What a search writes after each step so that a resume continues exactly there.

A checkpoint is the whole of what a run needs to go on after its worker is gone (a kill, a
suspension while a person decides): how many iterations are done, the search's own state, the
move in progress and a candidate waiting for the gate. The studio stores it on the Run row.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .events import Usage


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BudgetState(Strict):
    """engine.budget.Budget.usage_state(): what the run had spent when it checkpointed."""

    used: Usage
    per_agent: dict[str, Usage] = Field(default_factory=dict)


class ProbeRef(Strict):
    """A finished probe, rebuilt from its folder (engine.search.probe.Probe.from_checkpoint)."""

    run_dir: str
    trace: str | None = None        # which attempt's trace file is this probe's
    judgement: dict | None = None


class InProgress(Strict):
    """The iteration under way: the moves not made yet, and a probed candidate waiting for the
    gate (the search's own JSON form of it: ``Search.pending_state``)."""

    n: int
    moves: list[Any] = Field(default_factory=list)
    pending: dict | None = None


class StartState(Strict):
    """Where the search started (evolve adds it: de novo or from the archive)."""

    workflow: dict
    info: dict
    executor: str | None = None     # the sandbox the run started with: a resume keeps it (docker, subprocess)


class Checkpoint(Strict):
    name: str                       # the search (engine/search/registry.py)
    n: int                          # iterations finished
    search: dict                    # the search's state: its State model, as JSON
    probes: int                     # probes numbered so far (folder names go on from there)
    budget: BudgetState
    iteration: InProgress | None = None
    start: StartState | None = None


# --- each search's own state ----------------------------------------------------------------------
class MimosaState(Strict):
    first: ProbeRef
    incumbent: ProbeRef
    incumbent_workflow: dict
    history: list[str] = Field(default_factory=list)


class ScimarsState(Strict):
    current: dict
    lessons: list[str] = Field(default_factory=list)
    first: ProbeRef | None = None
    best: ProbeRef | None = None


class MemoryFixedState(Strict):
    first: ProbeRef | None = None
    best: ProbeRef | None = None


class RepairState(Strict):
    """AgentCo-op review (engine/search/repair.py): the first probe, the incumbent, the repairs
    already tried (so none is proposed twice) and what each round did."""

    first: ProbeRef
    incumbent: ProbeRef
    tried: list[str] = Field(default_factory=list)
    history: list[str] = Field(default_factory=list)


class TreeState(Strict):
    tree: dict                      # engine.search.tree.Tree.to_dict()
    failed: str = ""


def from_legacy(state: dict, name: str, own: type[BaseModel] | None = None) -> dict:
    """A checkpoint written before checkpoints were typed (the search's fields at the top
    level, no ``search`` key), in today's shape; ``own`` is the search's state model."""
    if "search" in state:
        return state
    fields = set(own.model_fields) if own else set()
    return {"name": name, "n": state["n"], "probes": state.get("probes", 0), "budget": state["budget"],
            "search": {k: v for k, v in state.items() if k in fields},
            **({"start": state["start"]} if state.get("start") else {})}
