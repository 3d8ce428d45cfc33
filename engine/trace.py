"""Execution traces: every step is an event, written as it happens.

The JSON-lines file is append-only and flushed per event, so a run killed at any moment
leaves a readable trace up to its last step; that file alone is enough to rebuild the run.

Each *attempt* of a run in one folder has its own file: ``trace.jsonl`` for the first,
``trace.2.jsonl``, ``trace.3.jsonl``... for a probe re-run after a resume (likewise
``search.jsonl``, ``search.2.jsonl`` for a resumed search). Sequence numbers start at 1 in each
file and never restart inside one, so no reader can mix two attempts' events.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Protocol, TypeVar

import pydantic_core

from .protocol.events import EVENT_KINDS, Payload, PayloadError, parse_payload, read_payload

log = logging.getLogger(__name__)
E = TypeVar("E")  # an event: the engine's, or the studio's row

# One payload model per kind (engine/protocol/events.py); kept importable from here.
__all__ = ["EVENT_KINDS", "Event", "EventSink", "JsonlTraceSink", "ListSink", "Tracer", "attempt_path",
           "claim_attempt", "latest_trace", "read_events", "trace_attempts", "typed_events"]


@dataclass(frozen=True)
class Event:
    run_id: str
    seq: int
    ts: float
    kind: str
    agent: str | None = None
    iteration: int = 0
    payload: dict = field(default_factory=dict)
    # the typed payload, once read (or as it was emitted): not part of what an event is
    _data: Payload | None = field(default=None, compare=False, repr=False)

    @property
    def data(self) -> Payload:
        """The payload typed (engine/protocol/events.py): how every reader reads it. Raises
        PayloadError for a payload its kind's model refuses."""
        if self._data is None:
            object.__setattr__(self, "_data", read_payload(self.kind, self.payload))
        return self._data

    @property
    def typed(self) -> Payload | None:
        """``data``, or None for a payload its kind's model refuses (an older or damaged trace's
        line): for readers that pass such an event over."""
        try:
            return self.data
        except PayloadError:
            return None

    def to_json(self) -> str:
        # the fields as asdict() lists them, without its deep copy of the payload (a workflow, a
        # prompt): the encoder reads the nested values as they are
        return encode_json({"run_id": self.run_id, "seq": self.seq, "ts": self.ts, "kind": self.kind,
                            "agent": self.agent, "iteration": self.iteration, "payload": self.payload})

    @classmethod
    def from_dict(cls, d: dict) -> "Event":
        return cls(run_id=d["run_id"], seq=int(d["seq"]), ts=float(d["ts"]), kind=d["kind"],
                   agent=d.get("agent"), iteration=int(d.get("iteration", 0)), payload=d.get("payload", {}))


def encode_json(value: object) -> str:
    """``json.dumps(value, ensure_ascii=False, default=str)``, compact, in half the time: pydantic-core's
    encoder (a prompt in every model call made json.dumps a sixth of a node's time). What it refuses
    (a lone surrogate in a string) goes through json.dumps as before."""
    try:
        return pydantic_core.to_json(value, inf_nan_mode="constants", fallback=str).decode()
    except (ValueError, TypeError, pydantic_core.PydanticSerializationError):
        return json.dumps(value, ensure_ascii=False, default=str)


def typed_events(events: Iterable[E], *kinds: str) -> Iterator[tuple[E, Payload]]:
    """Each event (of ``kinds``, when named) with its typed payload, passing over the ones their
    kind's model refuses: the engine's events and the studio's rows alike (both have ``typed``)."""
    for e in events:
        if kinds and e.kind not in kinds:
            continue
        p = e.typed
        if p is not None:
            yield e, p


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

    def emit(self, event: Payload | str, agent: str | None = None, **fields: object) -> Event:
        """Number one event and hand it to every sink.

        ``emit(Judgement(...), agent="judge")`` is the typed form: the kind comes from the model.
        ``emit(kind, agent, **fields)`` is the legacy form; its fields are validated by
        the kind's model all the same. Either way an unknown kind or field raises ValueError
        (PayloadError) here, where the event is made, not later in a reader."""
        if isinstance(event, Payload):
            if fields:
                raise TypeError(f"emit({type(event).__name__}(...)) takes no other fields: {', '.join(fields)}")
            payload = event
        else:
            payload = parse_payload(event, fields)
        data = payload.to_payload()
        with self._lock:
            self._seq += 1
            record = Event(self.run_id, self._seq, time.time(), payload.kind, agent, self.iteration, data, payload)
            for sink in self.sinks:
                sink.emit(record)
        return record

    @property
    def last_seq(self) -> int:
        """The number of the latest event emitted (0 before the first)."""
        return self._seq

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()


def attempt_path(folder: Path, stem: str, attempt: int) -> Path:
    """The trace file of one attempt: ``<stem>.jsonl`` for the first, ``<stem>.<n>.jsonl`` after."""
    return Path(folder) / (f"{stem}.jsonl" if attempt == 1 else f"{stem}.{attempt}.jsonl")


def claim_attempt(folder: Path, stem: str = "trace") -> tuple[int, Path]:
    """Create the next attempt's (empty) trace file in ``folder`` and return (attempt, path).

    Created exclusively, so two writers can never share a file, and numbered past every
    attempt already there."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    attempt = max((n for n, _ in trace_attempts(folder, stem)), default=0) + 1
    while True:
        path = attempt_path(folder, stem, attempt)
        try:
            path.open("x", encoding="utf-8").close()
            return attempt, path
        except FileExistsError:
            attempt += 1


def trace_attempts(folder: Path, stem: str = "trace") -> list[tuple[int, Path]]:
    """Every attempt's trace file in ``folder``, oldest first."""
    found = []
    for path in Path(folder).glob(f"{stem}*.jsonl"):
        middle = path.name[len(stem):-len(".jsonl")]
        if middle == "":
            found.append((1, path))
        elif middle.startswith(".") and middle[1:].isdigit() and int(middle[1:]) > 1:
            found.append((int(middle[1:]), path))
    return sorted(found)


def latest_trace(folder: Path, stem: str = "trace") -> Path:
    """The newest attempt's trace file (``<stem>.jsonl`` when there is none yet)."""
    attempts = trace_attempts(folder, stem)
    return attempts[-1][1] if attempts else attempt_path(folder, stem, 1)


def read_events(path: Path) -> Iterator[Event]:
    """Events from a trace file. A line that is not one event (torn by a writer killed mid-write,
    bytes that are not UTF-8, JSON of another shape) is skipped and counted in the log, so a
    damaged trace never stops a resume or a replay."""
    skipped = 0
    with Path(path).open("rb") as fh:  # bytes: one bad line must not end the reading of the rest
        for raw in fh:
            try:
                line = raw.decode("utf-8").strip()
                if line:
                    yield Event.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError, AttributeError):  # UnicodeDecodeError, JSONDecodeError too
                skipped += 1
    if skipped:
        log.warning("%s: %d line(s) that are not events were skipped", path, skipped)
