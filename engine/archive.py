"""The workflow archive: Mimosa's warm start.

Every finished workflow is archived together with an embedding of its task. A new task starts
from the workflow of the most similar archived task when their cosine similarity is above a
threshold (0.7), and from a freshly synthesized workflow otherwise; which path was taken, and
why, is recorded in the returned WarmStart.

Layout under the archive root (plain files, so an archive can be copied, inspected and diffed):

    entries/<id>.json   one entry: task, embedding, workflow, official metric, search procedure
    index.jsonl         append-only journal of additions, one line per entry
    vectors.sqlite      the vectors as one matrix for lookups (engine/archive_index.py), rebuilt
                        from the entry files whenever they change; safe to delete

The entry files are the truth; the index is for people and tools that want the history at a
glance, so a lost or damaged index line never loses an entry.
"""
from __future__ import annotations

import json
import math
import re
import sqlite3
import threading
import uuid
import warnings
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from . import embedding
from .archive_index import ArchiveIndex, entry_fields
from .artifacts import write_text_atomically
from .contracts import ContractSyntaxError, is_assignable, parse_type
from .embedding import Embedder, TaskEmbedder, cosine, embedder_name, task_text
from .errors import WorkflowValidationError
from .synthesis import team_workflow
from .task import Task
from .workflow import Workflow

DEFAULT_THRESHOLD = 0.7
INDEX_FILE = "vectors.sqlite"
WARM_START = "warm_start"
DE_NOVO = "de_novo"
ENTRY_FORMAT = 1


class ArchiveWarning(UserWarning):
    """An archive entry could not be read and was skipped."""


@dataclass(frozen=True)
class ArchiveEntry:
    id: str
    task_name: str
    task_fingerprint: str
    task_text: str
    embedding: tuple[float, ...]
    embedder: str
    workflow: Workflow
    metric: dict | None
    search: str
    note: str
    created: str  # ISO 8601, UTC

    @property
    def workflow_hash(self) -> str:
        return self.workflow.hash

    def to_dict(self) -> dict:
        return {"format": ENTRY_FORMAT, "id": self.id, "task_name": self.task_name,
                "task_fingerprint": self.task_fingerprint, "task_text": self.task_text,
                "embedder": self.embedder, "embedding": list(self.embedding),
                "workflow": self.workflow.to_dict(), "workflow_hash": self.workflow.hash,
                "metric": self.metric, "search": self.search, "note": self.note, "created": self.created}

    @classmethod
    def from_dict(cls, d: dict) -> "ArchiveEntry":
        """Raises ValueError (or KeyError/TypeError) on anything that does not hold together."""
        workflow = Workflow.from_dict(d["workflow"])
        if d["workflow_hash"] != workflow.hash:
            raise ValueError(f"it records workflow hash {str(d['workflow_hash'])[:12]} but its workflow "
                             f"hashes to {workflow.hash[:12]}")
        embedding = tuple(float(x) for x in d["embedding"])
        if not embedding or not all(math.isfinite(x) for x in embedding):
            raise ValueError("its embedding is empty or not finite")
        metric = d.get("metric")
        if metric is not None and not isinstance(metric, dict):
            raise ValueError("its metric is not an object")
        return cls(id=str(d["id"]), task_name=str(d["task_name"]), task_fingerprint=str(d["task_fingerprint"]),
                   task_text=str(d["task_text"]), embedding=embedding, embedder=str(d["embedder"]),
                   workflow=workflow, metric=metric, search=str(d["search"]), note=str(d.get("note", "")),
                   created=str(d["created"]))


@dataclass(frozen=True)
class WarmStart:
    """The workflow a new task starts from, and the record of how it was chosen."""

    workflow: Workflow
    path: str                        # WARM_START or DE_NOVO
    similarity: float | None         # best cosine in the archive; None when it is empty
    source: str | None = None        # archive entry id the workflow came from
    source_task: str | None = None
    threshold: float = DEFAULT_THRESHOLD
    reason: str = ""

    @property
    def warm(self) -> bool:
        return self.path == WARM_START

    def to_dict(self) -> dict:
        return {"path": self.path, "similarity": self.similarity, "threshold": self.threshold,
                "source": self.source, "source_task": self.source_task, "reason": self.reason,
                "workflow_name": self.workflow.name, "workflow_hash": self.workflow.hash}


class WorkflowArchive:
    """Finished workflows under ``root``, retrievable by task similarity. The embedder defaults
    to the real all-MiniLM-L6-v2 model; pass another (see engine.embedding.Embedder) to swap it."""

    def __init__(self, root: Path | str, embedder: Embedder | None = None):
        self.root = Path(root)
        self.embedder: Embedder = embedder if embedder is not None else TaskEmbedder()
        self._lock = threading.Lock()  # one writer at a time per archive object (ids are unique anyway)
        self._vector_index = None       # engine/archive_index.py, opened at the first lookup

    def __repr__(self) -> str:
        return f"WorkflowArchive({str(self.root)!r}, embedder={embedder_name(self.embedder)!r})"

    @property
    def entries_dir(self) -> Path:
        return self.root / "entries"

    @property
    def index_path(self) -> Path:
        return self.root / "index.jsonl"

    # --- writing ------------------------------------------------------------------------------
    def add(self, task: Task, workflow: Workflow, metric: dict | None, search: str, note: str = "") -> ArchiveEntry:
        """Archive a finished workflow with its task's embedding and official metric."""
        workflow.validate()
        text = task_text(task)
        created = datetime.now(timezone.utc)
        entry = ArchiveEntry(
            id=_entry_id(task.name, created), task_name=task.name, task_fingerprint=task.fingerprint(),
            task_text=text, embedding=tuple(self.embedder.embed(text)), embedder=embedder_name(self.embedder),
            workflow=workflow, metric=dict(metric) if metric is not None else None, search=search, note=note,
            created=created.isoformat(timespec="microseconds"))
        with self._lock:
            self.entries_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomically(self.entries_dir / f"{entry.id}.json", json.dumps(entry.to_dict(), indent=2) + "\n")
            self._journal(entry)
        return entry

    def _journal(self, entry: ArchiveEntry) -> None:
        line = {"id": entry.id, "file": f"entries/{entry.id}.json", "task_name": entry.task_name,
                "workflow_hash": entry.workflow_hash, "search": entry.search, "created": entry.created}
        with self.index_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, sort_keys=True) + "\n")

    # --- reading ------------------------------------------------------------------------------
    def entries(self) -> list[ArchiveEntry]:
        """Every readable entry, oldest first; unreadable ones are skipped with an ArchiveWarning."""
        if not self.entries_dir.is_dir():
            return []
        found = [e for e in map(_read_entry, sorted(self.entries_dir.glob("*.json"))) if e is not None]
        return sorted(found, key=lambda e: (e.created, e.id))

    def nearest(self, task: Task) -> tuple[ArchiveEntry | None, float | None]:
        """The archived entry most similar to ``task`` and its cosine; (None, None) when empty.
        Ties (the same task archived twice) go to the better official metric, then the newer.
        Ranked by the archive's vector index (engine/archive_index.py); only the winner's file is
        read and checked, and one that no longer reads gives way to the next."""
        if not self.entries_dir.is_dir():
            return None, None
        text = task_text(task)
        query = self._archived_vector(text) or self.embedder.embed(text)
        try:
            ranked = self._ranked(query)
        except sqlite3.DatabaseError as exc:  # a damaged index: it is derived, so it is set aside and rebuilt
            self._set_index_aside(exc)
            try:
                ranked = self._ranked(query)
            except (sqlite3.Error, OSError) as again:
                return self._scan_instead(task, again)
        except (sqlite3.Error, OSError) as exc:  # an archive on a read-only disk is still read, slowly
            return self._scan_instead(task, exc)
        for file, _ in ranked:
            entry = _read_entry(self.entries_dir / file)
            if entry is not None:
                return entry, self._similarity(query, entry)
        return None, None

    def prepare_lookup(self, task: Task) -> bool:
        """Have ``task``'s text embedded by a process of its own when a lookup will need it (the
        archive has entries, none for this text), while the caller goes on (setting up, checking
        the data); whether one was started. Nothing for a task searched before: its archived
        vector is used."""
        # only the model's own embedder: another (a test's fake, a subclass) embeds as it likes
        if type(self.embedder) is not embedding.TaskEmbedder:
            return False
        try:
            if not self.entries_dir.is_dir() or not any(self.entries_dir.glob("*.json")) \
                    or self._archived_vector(task_text(task)) is not None:
                return False
        except OSError:  # an archive that cannot be read now is the lookup's to report, not this hint's
            return False
        return embedding.embed_ahead(task_text(task), self.embedder.device)

    def _archived_vector(self, text: str) -> list[float] | None:
        """The vector this embedder gave the same task text when it was archived (a lab searches the
        same task again and again): the model is deterministic, so it is the vector embedding the text
        would give, and a fresh process need not load the model (seconds) before its first search."""
        name = embedder_name(self.embedder)
        try:
            index = self._index()
            index.refresh(_indexed_fields)
            files = index.files_with_text(text, name)
        except (sqlite3.Error, OSError):
            return None  # nearest() deals with a damaged or unwritable index
        for file in files:
            entry = _read_entry(self.entries_dir / file)
            if entry is not None and entry.task_text == text and entry.embedder == name and entry.embedding:
                return list(entry.embedding)
        return None

    def _ranked(self, query: list[float]) -> list[tuple[str, float]]:
        index = self._index()
        index.refresh(_indexed_fields)
        return index.ranked(query, embedder_name(self.embedder), self.embedder.embed)

    def _set_index_aside(self, exc: Exception) -> None:
        path = self.root / INDEX_FILE
        with self._lock:
            if self._vector_index is not None:
                self._vector_index.close()
                self._vector_index = None
        aside = path.with_name(f"{INDEX_FILE}.damaged-{uuid.uuid4().hex[:8]}")
        try:
            path.replace(aside)
        except OSError:
            return
        warnings.warn(f"the archive's index {path} was damaged ({exc}); kept as {aside.name} and rebuilt "
                      "from the entry files", ArchiveWarning, stacklevel=3)

    def _scan_instead(self, task: Task, exc: Exception) -> tuple[ArchiveEntry | None, float | None]:
        warnings.warn(f"the archive's index {self.root / INDEX_FILE} cannot be used ({exc}); reading every "
                      "entry", ArchiveWarning, stacklevel=3)
        return self._nearest_by_scan(task)

    def _index(self):
        with self._lock:
            if self._vector_index is None:
                self._vector_index = ArchiveIndex(self.entries_dir, self.root / INDEX_FILE)
            return self._vector_index

    def _nearest_by_scan(self, task: Task) -> tuple[ArchiveEntry | None, float | None]:
        entries = self.entries()
        if not entries:
            return None, None
        query = self.embedder.embed(task_text(task))
        scored = [(self._similarity(query, e), _metric_rank(e), i, e) for i, e in enumerate(entries)]
        sim, _, _, best = max(scored, key=lambda s: s[:3])
        return best, sim

    def _similarity(self, query: list[float], entry: ArchiveEntry) -> float:
        vector = entry.embedding
        if entry.embedder != embedder_name(self.embedder) or len(vector) != len(query):
            # Vectors from another model live in another space; the stored text lets us re-embed.
            vector = self.embedder.embed(entry.task_text)
        return cosine(query, vector)

    # --- warm start ---------------------------------------------------------------------------
    def start_for(self, task: Task, threshold: float = DEFAULT_THRESHOLD,
                  synthesize: Callable[[Task], Workflow] = team_workflow) -> WarmStart:
        """Warm-start from the nearest archived workflow if its similarity is strictly above
        ``threshold`` and it still fits this task; otherwise synthesize one de novo."""
        entry, sim = self.nearest(task)

        def de_novo(reason: str) -> WarmStart:
            return WarmStart(synthesize(task), DE_NOVO, sim, threshold=threshold, reason=reason)

        if entry is None:
            return de_novo("the archive is empty")
        if sim <= threshold:
            return de_novo(f"the nearest archived task, {entry.task_name!r} ({entry.id}), has similarity "
                           f"{sim:.3f}, not above the threshold {threshold:.2f}")
        problems = fit_problems(entry.workflow, task)
        if problems:
            return de_novo(f"the nearest archived task, {entry.task_name!r} ({entry.id}), is similar "
                           f"({sim:.3f}) but its workflow does not fit this task: {'; '.join(problems)}")
        workflow = replace(entry.workflow, name=_rename(entry.workflow.name, entry.task_name, task.name),
                           note=f"warm start from archive entry {entry.id} ({entry.task_name}, cosine {sim:.3f})")
        return WarmStart(workflow.validate(), WARM_START, sim, entry.id, entry.task_name, threshold,
                         f"the archived task {entry.task_name!r} has similarity {sim:.3f} "
                         f"> {threshold:.2f}; reusing its workflow {entry.workflow_hash[:12]}")


def fit_problems(workflow: Workflow, task: Task) -> list[str]:
    """Why ``workflow`` cannot be run on ``task``: its own rule breaks, plus predictions whose
    declared contract does not give the task the columns its evaluator expects."""
    out = list(workflow.problems())
    if not task.resources.prediction_columns:
        return out  # the task states no prediction contract, so there is nothing to hold it to
    contract = task.resources.prediction_contract()
    expected = parse_type(contract)
    producers = [a for a in workflow.agents if "predictions" in a.outputs]
    if not producers:
        out.append("no agent produces predictions")
    for agent in producers:
        declared = agent.outputs["predictions"]
        try:
            if not is_assignable(parse_type(declared), expected):
                out.append(f"agent {agent.id!r} produces predictions as {declared}, "
                           f"but this task needs {contract}")
        except ContractSyntaxError:
            pass  # already reported by workflow.problems()
    for edge in workflow.edges:  # a handoff of the predictions must carry what the task needs too
        if edge.artifact != "predictions":
            continue
        try:
            if not is_assignable(parse_type(edge.contract), expected):
                out.append(f"the edge {edge.source} -> {edge.target} hands on predictions as {edge.contract}, "
                           f"but this task's answer contract is {contract}")
        except ContractSyntaxError:
            pass
    return out


def _indexed_fields(path: Path) -> dict | None:
    """What the vector index keeps of an entry file; a file it cannot read is said once, when indexed."""
    fields = entry_fields(path, _rank_of)
    if fields is None:
        warnings.warn(f"skipping unreadable archive entry {path}", ArchiveWarning, stacklevel=3)
    return fields


def _read_entry(path: Path) -> ArchiveEntry | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError("it is not a JSON object")
        return ArchiveEntry.from_dict(data)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, WorkflowValidationError) as exc:
        # One damaged file must not take the whole archive (and every new task's start) down.
        warnings.warn(f"skipping unreadable archive entry {path}: {exc}", ArchiveWarning, stacklevel=3)
        return None


def _metric_rank(entry: ArchiveEntry) -> float:
    return _rank_of(entry.metric)


def _rank_of(metric: dict | None) -> float:
    m = metric if isinstance(metric, dict) else {}
    try:
        value = float(m["value"])
    except (KeyError, TypeError, ValueError):
        return -math.inf
    if m.get("ok") is False or not math.isfinite(value):
        return -math.inf
    return value if m.get("higher_is_better", False) else -value


def _entry_id(task_name: str, created: datetime) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", task_name).strip("-.") or "task"
    return f"{created:%Y%m%dT%H%M%S}-{slug}-{uuid.uuid4().hex[:8]}"


def _rename(name: str, old_task: str, new_task: str) -> str:
    """'discontinuous-1d-team' archived for 'discontinuous-1d' becomes 'jump-team' for 'jump'."""
    if name == old_task or name.startswith(old_task + "-"):
        return new_task + name[len(old_task):]
    return f"{new_task}-{name}"
