"""Records, links and the store interface of the evidence graph.

A record is never rewritten: revising one adds a new version of the same lineage, linked to
the old one by ``supersedes``, so the history of every claim stays readable. Each record names
its author (an agent playing a role, or a person) and its provenance (the trace event and the
execution or artifact it came from). The interface is small so that the studio can back it with
its own database; the engine's embedded default is ``SqliteEvidenceStore``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol

RECORD_KINDS = ("observation", "finding", "hypothesis", "plan", "question", "check_result", "execution",
                "artifact", "lesson", "note")
BRANCH_STATUSES = ("selected", "rejected")
LINK_TYPES = ("supports", "contradicts", "derived_from", "depends_on", "supersedes", "reuses")
MAX_TEXT = 20_000  # characters of one record: a summary, never a whole log (that is an artifact)


class EvidenceError(ValueError):
    """A record or link the graph refuses, or an attempt to rewrite what is stored."""


@dataclass(frozen=True)
class Author:
    """An agent playing a role, or a person (``user:<name>``); exactly one of the two."""

    agent: str | None = None
    role: str | None = None
    person: str | None = None

    def __post_init__(self) -> None:
        if bool(self.person) == bool(self.agent):
            raise EvidenceError("an author is either an agent (with its role) or a person, not both or neither")

    def describe(self) -> str:
        return self.person or f"{self.agent}" + (f" ({self.role})" if self.role and self.role != self.agent else "")


@dataclass(frozen=True)
class Provenance:
    """Where a record came from: the run and trace event, and the execution or artifact."""

    run_id: str | None = None
    event_seq: int | None = None
    execution_sha256: str | None = None
    artifact_sha256: str | None = None


@dataclass(frozen=True)
class Record:
    id: int
    lineage: int            # the id of the lineage's first version
    version: int            # 1, 2, ... within the lineage
    kind: str
    text: str
    author: Author
    provenance: Provenance = field(default_factory=Provenance)
    tags: tuple[str, ...] = ()
    iteration: int | None = None
    branch: str | None = None  # a search branch's writes, kept apart until it is selected
    created: float = 0.0

    def to_dict(self) -> dict:
        return {"id": self.id, "lineage": self.lineage, "version": self.version, "kind": self.kind,
                "text": self.text, "author": vars(self.author), "provenance": vars(self.provenance),
                "tags": list(self.tags), "iteration": self.iteration, "branch": self.branch,
                "created": self.created}


@dataclass(frozen=True)
class Link:
    source: int
    target: int
    type: str
    author: Author


@dataclass(frozen=True)
class Query:
    """What a role retrieves: every field narrows; ``text`` ranks by relevance, else newest first.
    Superseded versions are left out unless ``history`` is set."""

    kinds: tuple[str, ...] = ()
    agent: str | None = None
    role: str | None = None
    person: str | None = None
    tag: str | None = None
    text: str | None = None
    since_iteration: int | None = None
    branches: tuple[str | None, ...] | None = None  # None: every branch; (None,) the shared trunk only
    limit: int = 20
    history: bool = False
    after_id: int | None = None  # only records added after this one (what is new since a step)


def check_record(kind: str, text: str, tags: Iterable[str]) -> None:
    if kind not in RECORD_KINDS:
        raise EvidenceError(f"unknown record kind {kind!r}; one of {', '.join(RECORD_KINDS)}")
    if not isinstance(text, str) or not text.strip():
        raise EvidenceError(f"a {kind} record needs text")
    if len(text) > MAX_TEXT:
        raise EvidenceError(f"a record's text is at most {MAX_TEXT:,} characters ({len(text):,} given): "
                            "store the whole output as an artifact and record a summary")
    for tag in tags:
        if not isinstance(tag, str) or not tag or len(tag) > 64 or any(c.isspace() for c in tag):
            raise EvidenceError(f"a tag is one word of at most 64 characters, not {tag!r}")


def check_link(type_: str) -> None:
    if type_ not in LINK_TYPES:
        raise EvidenceError(f"unknown link type {type_!r}; one of {', '.join(LINK_TYPES)}")


class EvidenceStore(Protocol):
    def add(self, kind: str, text: str, author: Author, *, provenance: Provenance | None = None,
            tags: Iterable[str] = (), iteration: int | None = None, branch: str | None = None,
            links: Iterable[tuple[str, int]] = ()) -> Record:
        """Store a new record (and its outgoing links: (type, target id))."""
        ...

    def revise(self, record_id: int, text: str, author: Author, **kw) -> Record:
        """A new version of a record's lineage, linked to the version it supersedes."""
        ...

    def link(self, source: int, target: int, type_: str, author: Author) -> Link: ...

    def get(self, record_id: int) -> Record: ...

    def history(self, record_id: int) -> list[Record]:
        """Every version of the record's lineage, oldest first."""
        ...

    def links(self, record_id: int) -> list[Link]:
        """The links from and to a record."""
        ...

    def search(self, query: Query) -> list[Record]: ...

    def count(self) -> int: ...

    def mark_branch(self, branch: str, status: str) -> None:
        """Settle a search branch once: ``selected`` (its records are kept) or ``rejected``."""
        ...

    def branch_status(self) -> dict[str, str]: ...
