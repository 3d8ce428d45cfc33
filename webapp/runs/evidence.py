"""The run page's evidence graph: what the engine recorded in the run's graph
(``<run_dir>/evidence.sqlite``, engine/evidence/), as the panel draws it (static/js/evidence.js),
and people's own records added to it from the studio.

The graph file is the truth; while it does not exist yet (a run from before it, a folder moved
away) the panel is rebuilt from the ``evidence_recorded`` / ``evidence_branch`` Event rows, which
carry every field. Provenance is resolved against the studio's Event rows: a record's
(run_id, event_seq) is the row whose (source, source_seq) match, so the page links to it.
"""
from __future__ import annotations

import re
import sqlite3
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterable

from engine.evidence.graph import LINK_TYPES, RECORD_KINDS, EvidenceError
from engine.evidence.memory import EVIDENCE_FILE, PEOPLE_TRACE, PERSON_KINDS, add_person_record
from engine.evidence.sqlite_store import SqliteEvidenceStore
from engine.limits import MAX_NOTE_CHARS
from engine.protocol.events import EvidenceBranch, read_payload_or_none

from .models import Run

PREVIEW = 300        # characters of a record's text in the graph's data; the whole text on click
MAX_PERSON_LINKS = 20
_LINK = re.compile(r"^([a-z_]+):([0-9]{1,12})$")
_HEX = re.compile(r"^[0-9a-f]{64}$")


def graph_path(run: Run) -> Path | None:
    return Path(run.run_dir) / EVIDENCE_FILE if run.run_dir else None


def _open(run: Run) -> SqliteEvidenceStore | None:
    """The run's graph, when it exists (never created here: reading must not make one)."""
    path = graph_path(run)
    if path is None or not path.is_file():
        return None
    try:
        return SqliteEvidenceStore(path, readonly=True)
    except EvidenceError:  # created this instant, its tables not yet: the run's events tell the same
        return None


def author_label(author: dict) -> str:
    if author.get("person"):
        return author["person"]
    agent, role = author.get("agent") or "?", author.get("role")
    return agent if not role or role == agent else f"{agent} ({role})"


def branch_state(branch: str | None, branches: dict[str, str]) -> str:
    """trunk (shared: people, the search's lessons), a settled branch's verdict, or open (its
    probe runs, or the search never settled it)."""
    if branch is None:
        return "trunk"
    return branches.get(branch, "open")


def artifact_url(run_id: int, sha: str | None) -> str | None:
    return f"/runs/{run_id}/artifacts/{sha}" if sha and _HEX.match(sha) else None


def summary(run_id: int, record: dict, event: tuple[int, str] | None) -> dict:
    """One record as a node: everything but the whole text (a preview of it)."""
    text = record.get("text") or ""
    prov = record.get("provenance") or {}
    return {"id": record["id"], "lineage": record.get("lineage", record["id"]), "version": record.get("version", 1),
            "kind": record["kind"], "preview": text if len(text) <= PREVIEW else text[:PREVIEW] + "…",
            "author": record.get("author") or {}, "author_label": author_label(record.get("author") or {}),
            "iteration": record.get("iteration"), "branch": record.get("branch"), "tags": record.get("tags") or [],
            "created": record.get("created"), "provenance": prov,
            "event": event[0] if event else None, "event_kind": event[1] if event else None,
            # the artifact a record is about (predictions, a report) and the program that ran
            "artifact": artifact_url(run_id, prov.get("artifact_sha256")),
            "program": artifact_url(run_id, prov.get("execution_sha256"))}


def event_seqs(run: Run, provenances: Iterable[dict]) -> dict[tuple[str, int], tuple[int, str]]:
    """(engine run id, engine seq) -> the studio's Event (seq, kind), for the provenances given."""
    wanted = {(p.get("run_id"), p.get("event_seq")) for p in provenances if p.get("run_id") and p.get("event_seq")}
    if not wanted:
        return {}
    rows = run.events.filter(source__in={s for s, _ in wanted}, source_seq__in={q for _, q in wanted})
    return {(s, q): (seq, kind) for s, q, seq, kind in rows.values_list("source", "source_seq", "seq", "kind")
            if (s, q) in wanted}


def _from_events(run: Run) -> dict:
    """The graph as the trace tells it (every record and link is in its evidence_recorded event;
    an event its kind's model refuses, from before payloads were typed, is left out)."""
    records, links, branches = {}, [], {}
    for kind, payload in run.events.filter(kind__in=("evidence_recorded", "evidence_branch")).order_by(
            "seq").values_list("kind", "payload"):
        if (p := read_payload_or_none(kind, payload)) is None:
            continue
        if isinstance(p, EvidenceBranch):
            branches.setdefault(p.branch, p.status)
            continue
        if p.record.id in records:
            continue
        # the record as it was stored (the fields it was written with), as the graph's export gives it
        record = p.record.model_dump(mode="json", exclude_unset=True)
        records[p.record.id] = record
        links += [{"source": p.record.id, "target": link.target, "type": link.type} for link in p.links]
    # A revision's supersedes link is the store's own doing, not in the event: as the store does it.
    by_version = {(r.get("lineage"), r.get("version")): r["id"] for r in records.values()}
    for r in records.values():
        previous = by_version.get((r.get("lineage"), (r.get("version") or 1) - 1))
        link = {"source": r["id"], "target": previous, "type": "supersedes"}
        if previous is not None and link not in links:
            links.append(link)
    return {"records": list(records.values()), "links": links, "branches": branches}


def _graph(run: Run) -> tuple[dict, str]:
    store = _open(run)
    if store is None:
        return _from_events(run), "trace"
    try:
        return store.export(), "graph"
    finally:
        store.close()


def given(run: Run) -> dict[int, list[dict]]:
    """Which records were given to which role, when: from the memory_retrieval events."""
    out: dict[int, list[dict]] = defaultdict(list)
    for agent, iteration, payload, seq in run.events.filter(kind="memory_retrieval").values_list(
            "agent", "iteration", "payload", "seq"):
        if (p := read_payload_or_none("memory_retrieval", payload)) is None:  # from before payloads were typed
            continue
        for how, rids in (("records", p.records), ("pushed", p.pushed)):
            for rid in rids:
                out[rid].append({"role": p.role or agent, "agent": agent, "iteration": iteration,
                                 "how": "retrieved" if how == "records" else "pushed", "event": seq})
    return out


def evidence_state(run: Run, can_write: bool) -> dict[str, Any]:
    """The whole panel's first state (evidence.json); live messages extend it."""
    graph, source = _graph(run)
    seqs = event_seqs(run, (r.get("provenance") or {} for r in graph["records"]))
    nodes = []
    for r in graph["records"]:
        prov = r.get("provenance") or {}
        nodes.append(summary(run.pk, r, seqs.get((prov.get("run_id"), prov.get("event_seq")))))
    return {"records": nodes, "links": graph["links"], "branches": graph.get("branches") or {},
            "given": given(run), "source": source, "kinds": list(RECORD_KINDS), "link_types": list(LINK_TYPES),
            "person_kinds": list(PERSON_KINDS), "can_write": can_write, "max_chars": MAX_NOTE_CHARS,
            "run_active": run.is_active}


def _neighbourhood(run: Run, record_id: int) -> dict | None:
    """The record, its lineage and its links (with the records at their other ends), read from
    the graph file by id (no whole export per click), else from the Event rows."""
    store = _open(run)
    if store is None:
        graph = _from_events(run)
        by_id = {r["id"]: r for r in graph["records"]}
        if record_id not in by_id:
            return None
        lineage = by_id[record_id].get("lineage", record_id)
        return {"record": by_id[record_id], "branches": graph["branches"], "by_id": by_id,
                "history": [r for r in graph["records"] if r.get("lineage", r["id"]) == lineage],
                "links": [link for link in graph["links"] if record_id in (link["source"], link["target"])]}
    try:
        try:
            record = store.get(record_id).to_dict()
        except EvidenceError:
            return None
        links = [{"source": link.source, "target": link.target, "type": link.type} for link in store.links(record_id)]
        ends = {link["source"] for link in links} | {link["target"] for link in links}
        return {"record": record, "branches": store.branch_status(),
                "by_id": {i: store.get(i).to_dict() for i in ends},
                "history": [r.to_dict() for r in store.history(record_id)], "links": links}
    finally:
        store.close()


def record_detail(run: Run, record_id: int) -> dict[str, Any] | None:
    """A record with its whole text, every version of its lineage, its links (each with the
    other end's kind and preview), the roles it was given to, and where it came from."""
    near = _neighbourhood(run, record_id)
    if near is None:
        return None
    history = sorted(near["history"], key=lambda r: r.get("version", 1))
    seqs = event_seqs(run, (r.get("provenance") or {} for r in history))

    def full(r: dict) -> dict:
        prov = r.get("provenance") or {}
        return {**summary(run.pk, r, seqs.get((prov.get("run_id"), prov.get("event_seq")))), "text": r.get("text", ""),
                "status": branch_state(r.get("branch"), near["branches"])}

    links = []
    for link in near["links"]:
        out = link["source"] == record_id
        other = near["by_id"].get(link["target"] if out else link["source"]) or {}
        links.append({**link, "direction": "out" if out else "in",
                      "other": {"id": other.get("id"), "kind": other.get("kind"),
                                "preview": (other.get("text") or "")[:120]}})
    return {**full(near["record"]), "history": [full(r) for r in history], "links": links,
            "given": given(run).get(record_id, [])}


# --- people's records ------------------------------------------------------------------------------
class RecordRefused(Exception):
    """A person's record the graph would not take: the message says what to change."""

    http_status = 400


class GraphBusy(RecordRefused):
    http_status = 503


def parse_links(values: Iterable[str]) -> list[tuple[str, int]]:
    """``type:record_id`` pairs from the form, each type one the graph knows."""
    links = []
    for value in values:
        value = (value or "").strip()
        if not value:
            continue
        m = _LINK.match(value)
        if not m:
            raise RecordRefused(f"a link is written type:record_id (e.g. supports:12), not {value[:60]!r}")
        if m.group(1) not in LINK_TYPES:
            raise RecordRefused(f"unknown link type {m.group(1)!r}; one of {', '.join(LINK_TYPES)}")
        links.append((m.group(1), int(m.group(2))))
    if len(links) > MAX_PERSON_LINKS:
        raise RecordRefused(f"a record links to at most {MAX_PERSON_LINKS} records ({len(links)} given)")
    return list(dict.fromkeys(links))


def add_person(run: Run, username: str, kind: str, text: str, links: list[tuple[str, int]]) -> dict:
    """A person's record in the run's graph, on its trunk (every probe's agents whose policy
    retrieves or subscribes to the kind see it at their next step). Returns the record as
    ``evidence_recorded`` carries it. Nothing is written when anything is refused."""
    if not run.run_dir:
        raise RecordRefused("this run has no folder yet; add the note once it has started")
    if kind not in PERSON_KINDS:
        raise RecordRefused(f"a person records a {', '.join(PERSON_KINDS)}, not {kind[:40]!r}")
    text = (text or "").strip()
    if not text:
        raise RecordRefused(f"write the {kind}'s text")
    if len(text) > MAX_NOTE_CHARS:
        raise RecordRefused(f"a {kind} is at most {MAX_NOTE_CHARS:,} characters ({len(text):,} given)")
    store = _open(run)
    known = set()
    if store is not None:
        try:
            for _, target in links:
                try:
                    store.get(target)
                    known.add(target)
                except EvidenceError:
                    pass
        finally:
            store.close()
    missing = sorted({t for _, t in links} - known)
    if missing:
        raise RecordRefused(f"no record {', '.join(map(str, missing))} in this run's evidence graph")
    iteration = run.events.order_by("-seq").values_list("iteration", flat=True).first()
    try:
        record = add_person_record(Path(run.run_dir), f"user:{username}", kind, text, links, iteration=iteration)
    except EvidenceError as exc:
        raise RecordRefused(str(exc)) from exc
    except sqlite3.OperationalError as exc:  # the worker held the graph past sqlite's 5 s wait
        raise GraphBusy(f"the run's evidence graph is busy ({exc}); nothing was added, try again") from exc
    return record.to_dict()


def people_trace(run: Run) -> Path | None:
    return Path(run.run_dir) / PEOPLE_TRACE if run.run_dir else None


def person_message(run: Run, record: dict, links: list[tuple[str, int]]) -> dict:
    """The live message every viewer gets for a person's record: shaped like an engine
    ``evidence_recorded`` message (webapp/runs/live.py), with no studio seq (it is no engine
    event: people.jsonl in the run folder traces it)."""
    return {"kind": "evidence_recorded", "seq": None, "agent": record["author"].get("person"),
            "iteration": record.get("iteration"), "source": "people", "ts": record.get("created"),
            "data": {"record": summary(run.pk, record, None),
                     "links": [{"source": record["id"], "target": t, "type": ty} for ty, t in links]}}
