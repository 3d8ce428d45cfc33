"""What crosses the human gate: a search's Proposal, and the Decision on it.

Every search (engine/search/) hands the gate the same model, whatever it evolves: a workflow
(Mimosa, SciMARS) or a program (the AgenticSciML tree). The studio stores it on a Mutation row,
shows it, and answers with a Decision; nothing on either side reads a proposal by guessing keys.
"""
from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Change(Strict):
    """The change itself, as its author wrote it (engine/mutations.py's Mutation, or a tree child)."""

    kind: str
    target: str = ""
    params: dict = Field(default_factory=dict)
    rationale: str = ""
    author: str = ""


class Check(Strict):
    name: str
    passed: bool
    detail: str = ""


class Evidence(Strict):
    """What the candidate's probe showed, beside what it is compared with.

    ``basis`` says which comparison the search's rule made, so a page shows the right one:
    ``judge`` (J vs the incumbent's J), ``checks`` (public checks, then validation, vs the
    round's reference) or ``validation`` (a tree child's score vs its parent's)."""

    basis: Literal["judge", "checks", "validation"]
    J: float | None = None
    incumbent_J: float | None = None
    judgement: dict | None = None
    checks: list[Check] = Field(default_factory=list)
    validation: float | None = None
    reference_validation: float | None = None
    metric: str = ""
    higher_is_better: bool = True
    probe_run_id: str | None = None


class Proposal(Strict):
    """One candidate waiting for the gate. ``key`` identifies it within its iteration (the child
    workflow's hash, or the tree node's id), so a resumed search asks about the same one."""

    search: str
    n: int
    key: str
    change: Change
    rule_accepts: bool
    rule: str                       # the search's own rule, in words ("J improved", ...)
    evidence: Evidence
    diff: dict = Field(default_factory=dict)
    parent: str = ""                # parent workflow hash, or parent node id
    workflow: dict | None = None    # the child workflow (workflow searches)
    code: str | None = None         # the child program (tree search)
    can_promote: bool = False       # a person may promote it (tree: expand it next)


class Decision(Strict):
    approved: bool
    decided_by: str                 # policy:<name> or user:<name>
    reason: str = ""
    promote: bool = False           # approved, and to be preferred next (tree: a parent next iteration)

    @classmethod
    def by_rule(cls, proposal: Proposal, policy: str = "automatic") -> "Decision":
        return cls(approved=proposal.rule_accepts, decided_by=f"policy:{policy}", reason=proposal.rule)
