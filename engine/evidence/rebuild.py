"""Rebuild a run's evidence graph from its traces alone.

Every record is traced as ``evidence_recorded`` with all its fields and links, and every
settled branch as ``evidence_branch``; replaying them in record-id order into a fresh store
gives the same graph (``same_graph`` compares two exports without their timestamps). A run's
traces are its own ``trace.jsonl``; a search's are ``search.jsonl`` and every probe's.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..trace import Event, read_events, trace_attempts
from .graph import Author, EvidenceError, Provenance
from .sqlite_store import SqliteEvidenceStore


def run_traces(run_dir: Path) -> list[Path]:
    """Every trace file of a run or search folder (probes and attempts included)."""
    run_dir = Path(run_dir)
    found = [p for stem in ("search", "trace", "people") for _, p in trace_attempts(run_dir, stem)]
    probes = run_dir / "probes"
    if probes.is_dir():
        for probe in sorted(p for p in probes.iterdir() if p.is_dir()):
            found += [p for _, p in trace_attempts(probe, "trace")]
    return found


def rebuild(events: Iterable[Event], path: Path) -> SqliteEvidenceStore:
    """A new graph at ``path`` holding what ``events`` recorded. Raises EvidenceError when the
    events do not number the records 1, 2, 3 ... (a trace is missing)."""
    recorded, branches = [], []
    for e in events:
        if e.kind == "evidence_recorded":
            recorded.append(e.payload)
        elif e.kind == "evidence_branch":
            branches.append(e.payload)
    store = SqliteEvidenceStore(path)
    if store.count():
        raise EvidenceError(f"{path} already holds records: rebuild into a new file")
    for item in sorted(recorded, key=lambda p: p["record"]["id"]):
        r = item["record"]
        author = Author(**r["author"])
        provenance = Provenance(**r["provenance"])
        if r["version"] > 1:
            made = store.revise(r["lineage"] if r["version"] == 2 else _newest(store, r["lineage"]), r["text"], author,
                                provenance=provenance, tags=r["tags"], iteration=r["iteration"], branch=r["branch"])
        else:
            made = store.add(r["kind"], r["text"], author, provenance=provenance, tags=r["tags"],
                             iteration=r["iteration"], branch=r["branch"],
                             links=[(link["type"], link["target"]) for link in item.get("links", [])])
        if made.id != r["id"]:
            raise EvidenceError(f"record {r['id']} came back as {made.id}: a trace holding records before it is missing")
    for b in branches:
        store.mark_branch(b["branch"], b["status"])
    return store


def _newest(store: SqliteEvidenceStore, lineage: int) -> int:
    return store.history(lineage)[-1].id


def rebuild_run(run_dir: Path, path: Path) -> SqliteEvidenceStore:
    events = [e for trace in run_traces(run_dir) for e in read_events(trace)]
    return rebuild(events, path)


def same_graph(a: SqliteEvidenceStore, b: SqliteEvidenceStore) -> bool:
    """Equal records, links and branch statuses, up to when each was written."""
    def plain(store: SqliteEvidenceStore) -> dict:
        d = store.export()
        d["records"] = [{k: v for k, v in r.items() if k != "created"} for r in d["records"]]
        return d
    return plain(a) == plain(b)
