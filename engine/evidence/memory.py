"""A team's memory at run time: the workflow's memory policy applied to an evidence graph.

Before a role's step the runner asks ``recall``: the records the role's policy retrieves
(its kinds, ranked by its query hints, at most its limit) and the records of kinds it
subscribes to that appeared since its last step. They enter the role's prompt as the
``memory`` input and are traced as one ``memory_retrieval`` event with their ids. After the
step the role records what its duties name (``record``); a kind outside its duties is not
written. Every record is traced as ``evidence_recorded`` with all its fields, so the graph
rebuilds from the trace alone (engine/evidence/rebuild.py).

A search that shares one graph among its probes gives each probe a *branch* for its writes and
the branches it may read: the shared trunk (people's notes) and the branches selected so far.
Probes of one round therefore start from the same permitted snapshot and never see each
other's writes; the search settles each branch afterwards (``selected`` or ``rejected``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..harness import MemoryPolicy
from ..protocol.events import EvidenceBranch, EvidenceRecorded, MemoryRetrieval
from ..trace import JsonlTraceSink, Tracer
from .graph import Author, EvidenceError, EvidenceStore, Provenance, Query, Record
from .sqlite_store import SqliteEvidenceStore

EVIDENCE_FILE = "evidence.sqlite"
PROMPT_TEXT_CHARS = 600   # of one record in a prompt; the whole text stays in the graph
MAX_PUSHED = 20           # subscription records pushed in one step, newest kept
# Trellis's own measurements (the in-loop validation of a delivered program) are authored by
# the engine's checker, not by an agent the policy governs.
TRELLIS = Author(agent="trellis", role="validation")


@dataclass
class MemoryScope:
    """Where one run's memory lives: the graph, the branch its writes go to, and the branches
    it may read (None: every branch). ``owned``: the run opened the graph and closes it."""

    store: EvidenceStore
    branch: str | None = None
    visible: tuple[str | None, ...] | None = None
    owned: bool = False

    @classmethod
    def own(cls, path: Path) -> "MemoryScope":
        return cls(SqliteEvidenceStore(path), owned=True)

    def close(self) -> None:
        if self.owned and hasattr(self.store, "close"):
            self.store.close()


@dataclass
class TeamMemory:
    scope: MemoryScope
    policy: MemoryPolicy
    tracer: Tracer
    run_id: str
    iteration: int = 0
    _seen: dict[tuple[str, str], int] = field(default_factory=dict)  # last id pushed to (agent, role)

    @property
    def store(self) -> EvidenceStore:
        return self.scope.store

    # --- before a step ----------------------------------------------------------------------
    def recall(self, agent_id: str, role: str) -> list[Record]:
        """What ``role`` (played by ``agent_id``) is given before its step, traced with the ids."""
        rm = self.policy.role(role)
        retrieved: list[Record] = []
        if rm.retrieves and rm.limit:
            retrieved = self.store.search(Query(kinds=rm.retrieves, text=" ".join(rm.hints) or None,
                                                branches=self.scope.visible, limit=rm.limit))
        pushed: list[Record] = []
        key = (agent_id, role)
        if rm.subscribes:
            new = self.store.search(Query(kinds=rm.subscribes, branches=self.scope.visible, limit=MAX_PUSHED,
                                          after_id=self._seen.get(key, 0)))
            have = {r.id for r in retrieved}
            pushed = [r for r in new if r.id not in have]
            if new:
                self._seen[key] = max(r.id for r in new)
        records = retrieved + pushed
        if records or rm.retrieves or rm.subscribes:
            self.tracer.emit(MemoryRetrieval(
                role=role, records=[r.id for r in retrieved], pushed=[r.id for r in pushed], kinds=list(rm.retrieves),
                hints=list(rm.hints), limit=rm.limit, subscribes=list(rm.subscribes), branch=self.scope.branch),
                agent_id)
        return records

    # --- after a step -----------------------------------------------------------------------
    def duty(self, role: str, kind: str) -> bool:
        return kind in self.policy.role(role).records

    def record(self, agent_id: str, role: str, kind: str, text: str, *, tags: tuple[str, ...] = (),
               links: tuple[tuple[str, int], ...] = (), event_seq: int | None = None,
               execution_sha256: str | None = None, artifact_sha256: str | None = None) -> Record | None:
        """Write one record if ``role``'s duties name its kind (else None)."""
        if not self.duty(role, kind):
            return None
        return self._add(Author(agent=agent_id, role=role), kind, text, tags, links, event_seq,
                         execution_sha256, artifact_sha256, agent_id)

    def measure(self, kind: str, text: str, *, tags: tuple[str, ...] = (), links: tuple[tuple[str, int], ...] = (),
                event_seq: int | None = None, artifact_sha256: str | None = None) -> Record:
        """A record of Trellis's own measurement (not an agent's duty)."""
        return self._add(TRELLIS, kind, text, tags, links, event_seq, None, artifact_sha256, None)

    def _add(self, author: Author, kind: str, text: str, tags, links, event_seq, execution_sha256, artifact_sha256,
             agent_id: str | None) -> Record:
        text = text.strip()[:20_000] or f"(empty {kind})"
        tags = tuple(dict.fromkeys(t for t in (_tag(x) for x in tags) if t))
        record = self.store.add(kind, text, author, tags=tags, iteration=self.iteration, branch=self.scope.branch,
                                links=links, provenance=Provenance(self.run_id, event_seq, execution_sha256,
                                                                   artifact_sha256))
        self.tracer.emit(EvidenceRecorded(record=record.to_dict(),
                                          links=[{"type": t, "target": target} for t, target in links]), agent_id)
        return record


def _tag(value: object) -> str:
    """One word a tag may be: spaces become dashes, at most 64 characters."""
    return "-".join(str(value).split())[:64]


def render(records: list[Record]) -> str:
    """The ``memory`` input of a prompt: one line per record, newest first, with its id, kind,
    author, iteration and tags, so a model (and the offline scientist) can cite and weigh it."""
    lines = ["Records from the team's evidence graph that your memory policy gives you (newest first):"]
    for r in sorted(records, key=lambda r: -r.id):
        text = " ".join(r.text.split())
        if len(text) > PROMPT_TEXT_CHARS:
            text = text[:PROMPT_TEXT_CHARS] + " …"
        where = f" · iteration {r.iteration}" if r.iteration is not None else ""
        tags = f" [{', '.join(r.tags)}]" if r.tags else ""
        lines.append(f"- #{r.id} {r.kind} by {r.author.describe()}{where}{tags}: {text}")
    return "\n".join(lines)


class SharedMemory:
    """The evidence graph of a search, in its folder: every probe writes on its own branch. With
    ``share`` (SciMARS + Memory, the fixed-memory control) a probe reads the trunk and the
    branches selected so far, and the search settles each branch once; without it a probe reads
    the trunk (people's notes) and its own writes only, as if it had a graph of its own."""

    def __init__(self, path: Path, tracer: Tracer, share: bool = True):
        self.store = SqliteEvidenceStore(path)
        self.tracer = tracer
        self.share = share

    def scope(self, branch: str) -> MemoryScope:
        if not self.share:
            return MemoryScope(self.store, branch=branch, visible=(None, branch))
        selected = tuple(b for b, status in self.store.branch_status().items() if status == "selected")
        return MemoryScope(self.store, branch=branch, visible=(None, *selected, branch))

    def settle(self, selected: Iterable[str], rejected: Iterable[str], n: int | None = None) -> None:
        """Keep the selected branches' records visible to later probes; mark the others as
        rejected (their records stay in the graph, unseen). A branch settled before is left."""
        if not self.share:
            return
        status = self.store.branch_status()
        for branch, verdict in [*((b, "selected") for b in selected), *((b, "rejected") for b in rejected)]:
            if branch in status:
                continue
            self.store.mark_branch(branch, verdict)
            status[branch] = verdict
            self.tracer.emit(EvidenceBranch(branch=branch, status=verdict, n=n))

    def record(self, author: Author, kind: str, text: str, n: int | None = None,
               tags: tuple[str, ...] = ()) -> Record | None:
        """A record the search itself writes on the trunk (the reflector's lessons), when the
        graph is shared; traced on the search's trace."""
        if not self.share:
            return None
        record = self.store.add(kind, text.strip()[:20_000], author, tags=tags, iteration=n,
                                provenance=Provenance(self.tracer.run_id))
        self.tracer.emit(EvidenceRecorded(record=record.to_dict(), links=[]), author.agent)
        return record

    def close(self) -> None:
        self.store.close()


# --- people ---------------------------------------------------------------------------------------
PEOPLE_TRACE = "people.jsonl"  # what people recorded, beside the engine's traces (rebuild reads it)
PERSON_KINDS = ("note", "hypothesis", "question", "finding")


def add_person_record(run_dir: Path, person: str, kind: str, text: str,
                      links: Iterable[tuple[str, int]] = (), iteration: int | None = None) -> Record:
    """A person's record in a run's graph (its trunk: every agent whose policy retrieves the kind
    sees it at its next step), traced to ``people.jsonl`` in the run folder. Raises
    EvidenceError for a kind people may not write, an empty text or a link to no record."""
    if kind not in PERSON_KINDS:
        raise EvidenceError(f"a person records a {', '.join(PERSON_KINDS[:-1])} or {PERSON_KINDS[-1]}, not {kind!r}")
    run_dir = Path(run_dir)
    store = SqliteEvidenceStore(run_dir / EVIDENCE_FILE)
    try:
        links = list(links)
        for _, target in links:
            store.get(int(target))  # a link to no record is refused before anything is written
        record = store.add(kind, text.strip(), Author(person=person), tags=("person",), iteration=iteration,
                           links=[(t, int(target)) for t, target in links])
    finally:
        store.close()

    tracer = Tracer("people", [JsonlTraceSink(run_dir / PEOPLE_TRACE)])
    try:
        tracer.emit(EvidenceRecorded(record=record.to_dict(),
                                     links=[{"type": t, "target": int(target)} for t, target in links]),
                    person)
    finally:
        tracer.close()
    return record
