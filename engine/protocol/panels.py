"""How a search shows what it did: a few panel shapes any page can draw, filled by each search
from its own trace events (``Search.present``), so no page branches on a search's name.

A panel is plain JSON:

- ``chart``: lines over the search's steps (``x``, ``y`` lists; ``None`` is a gap);
- ``cards``: groups of cards (one group per iteration or round), each card a title, a badge
  with a tone (``good``, ``bad``, ``wait``, ``plain``) and a few lines of text.

The events are what the trace holds (``engine.trace.Event`` or anything with ``kind``,
``agent``, ``iteration`` and ``data``, the typed payload), in the order they were emitted.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Literal, Protocol

Tone = Literal["good", "bad", "wait", "plain"]


class TraceEvent(Protocol):
    kind: str
    agent: str
    iteration: int | None

    @property
    def data(self) -> Any: ...

    @property
    def typed(self) -> Any: ...


@dataclass
class Line:
    name: str
    x: list[Any]
    y: list[float | None]
    mode: Literal["lines", "markers", "lines+markers"] = "lines+markers"
    dash: Literal["solid", "dot", "dash"] = "solid"
    shape: Literal["linear", "hv"] = "linear"   # "hv": a level that holds until the next step


@dataclass
class Card:
    title: str
    badge: str = ""
    tone: Tone = "plain"
    lines: list[str] = field(default_factory=list)


@dataclass
class Group:
    title: str
    cards: list[Card] = field(default_factory=list)


@dataclass
class Panel:
    kind: Literal["chart", "cards"]
    title: str
    note: str = ""
    x_title: str = ""
    y_title: str = ""
    lines: list[Line] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def chart(title: str, lines: Iterable[Line], x_title: str, y_title: str, note: str = "") -> Panel:
    return Panel("chart", title, note, x_title, y_title, lines=[line for line in lines if line.x])


def cards(title: str, groups: Iterable[Group], note: str = "") -> Panel:
    return Panel("cards", title, note, groups=[g for g in groups if g.cards])


def fmt(x: float | None, spec: str = ".4g", none: str = "failed") -> str:
    return none if x is None else format(x, spec)


def decided(by: str | None) -> str:
    """Who decided, as a page says it: a person's name, a policy, or the search's own rule."""
    if not by:
        return "the search's rule"
    if by.startswith("user:"):
        return by.split(":", 1)[1]
    if by.startswith("policy:"):
        return f"policy ({by.split(':', 1)[1].replace('_', ' ')})"
    return by


def change_line(mutation: dict | None) -> str:
    if not mutation:
        return ""
    if mutation.get("kind") == "human_edit":
        return f"a person's edit: {mutation.get('rationale') or 'no note'}"
    return f"{mutation.get('kind', '?')} on {mutation.get('target', '?')}"
