"""Execution traces: every step is an event, written as it happens.

The JSON-lines file is append-only and flushed per event, so a run killed at any moment
leaves a readable trace up to its last step; that file alone is enough to rebuild the run.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Protocol

EVENT_KINDS = (
    "run_started", "agent_started", "model_call", "tool_call", "code_execution", "handoff",
    "check", "route", "agent_finished", "budget_exhausted", "evaluation", "run_finished",
    # search-level events (one search runs many probes, each a run with its own trace)
    "search_started", "mutation_proposed", "judgement", "search_iteration", "official_evaluation",
    "archive", "search_finished",
    # evolutionary tree search (engine/search/tree.py)
    "selector_vote", "knowledge_retrieval", "debate_turn", "tree_node", "node_retired",
    # SciMARS harness self-improvement (engine/search/scimars.py)
    "reuse_receipt", "composition", "reflection",
)


@dataclass(frozen=True)
class Event:
    run_id: str
    seq: int
    ts: float
    kind: str
    agent: str | None = None
    iteration: int = 0
    payload: dict = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, default=str)

    @classmethod
    def from_dict(cls, d: dict) -> "Event":
        return cls(run_id=d["run_id"], seq=int(d["seq"]), ts=float(d["ts"]), kind=d["kind"],
                   agent=d.get("agent"), iteration=int(d.get("iteration", 0)), payload=d.get("payload", {}))


class EventSink(Protocol):
    """Where events go: a file, the console, the web app's database and WebSocket groups."""

    def emit(self, event: Event) -> None: ...

    def close(self) -> None: ...


class JsonlTraceSink:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def emit(self, event: Event) -> None:
        self._fh.write(event.to_json() + "\n")
        self._fh.flush()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()


class ListSink:
    """Keeps events in memory; for tests and for callers that want the events afterwards."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def close(self) -> None:
        pass


class Tracer:
    """Numbers events and fans them out to every sink. Thread-safe: tools may run in threads."""

    def __init__(self, run_id: str, sinks: Iterable[EventSink] = (), start_seq: int = 0):
        self.run_id = run_id
        self.sinks = list(sinks)
        self._seq = start_seq
        self._lock = threading.Lock()
        self.iteration = 0

    def emit(self, kind: str, agent: str | None = None, **payload: object) -> Event:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        with self._lock:
            self._seq += 1
            event = Event(self.run_id, self._seq, time.time(), kind, agent, self.iteration, dict(payload))
            for sink in self.sinks:
                sink.emit(event)
        return event

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def read_events(path: Path) -> Iterator[Event]:
    """Events from a trace file. A torn last line (the writer was killed mid-write) is skipped."""
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield Event.from_dict(json.loads(line))
            except (json.JSONDecodeError, KeyError):
                continue
