"""Rebuild a run's evidence graph from its traces alone.

Every record is traced as ``evidence_recorded`` with all its fields and links, and every
settled branch as ``evidence_branch``; replaying them in record-id order into a fresh store
gives the same graph (``same_graph`` compares two exports without their timestamps). A run's
traces are its own ``trace.jsonl``; a search's are ``search.jsonl`` and every probe's.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Iterable

from ..protocol.events import EvidenceBranch, EvidenceRecorded
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
    recorded: list[EvidenceRecorded] = []
    branches: list[EvidenceBranch] = []
    for e in events:
        if e.kind == "evidence_recorded":
            recorded.append(e.data)
        elif e.kind == "evidence_branch":
            branches.append(e.data)
    store = SqliteEvidenceStore(path)
    if store.count():
        raise EvidenceError(f"{path} already holds records: rebuild into a new file")
    for item in sorted(recorded, key=lambda p: p.record.id):
        r = item.record
        author = Author(**r.author.model_dump())
        provenance = Provenance(**r.provenance.model_dump())
        if r.version > 1:
            made = store.revise(r.lineage if r.version == 2 else _newest(store, r.lineage), r.text, author,
                                provenance=provenance, tags=r.tags, iteration=r.iteration, branch=r.branch)
        else:
            made = store.add(r.kind, r.text, author, provenance=provenance, tags=r.tags,
                             iteration=r.iteration, branch=r.branch,
                             links=[(link.type, link.target) for link in item.links])
        if made.id != r.id:
            raise EvidenceError(f"record {r.id} came back as {made.id}: a trace holding records before it is missing")
    for b in branches:
        store.mark_branch(b.branch, b.status)
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


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.evidence.rebuild <run folder> [--out file]``: rebuild the folder's graph
    from its traces, say what it holds and whether it equals the graph the run wrote."""
    parser = argparse.ArgumentParser(prog="python -m engine.evidence.rebuild", description=main.__doc__)
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, help="where to write the rebuilt graph (default: a temporary file)")
    args = parser.parse_args(argv)
    if not run_traces(args.run_dir):
        print(f"{args.run_dir}: no trace files (trace.jsonl, search.jsonl) here", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp()) / "rebuilt.sqlite"
    try:
        store = rebuild_run(args.run_dir, out)
    except EvidenceError as exc:
        print(f"cannot rebuild: {exc}", file=sys.stderr)
        return 1
    records = store.export()["records"]
    kinds = Counter(r["kind"] for r in records)
    print(f"rebuilt {len(records)} record(s) into {out}: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    status = Counter(store.branch_status().values())
    if status:
        print("branches: " + ", ".join(f"{n} {s}" for s, n in sorted(status.items())))
    written = Path(args.run_dir) / "evidence.sqlite"
    if written.exists():
        same = same_graph(store, SqliteEvidenceStore(written))
        print(f"{'equals' if same else 'DIFFERS FROM'} the graph the run wrote ({written})")
        return 0 if same else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
