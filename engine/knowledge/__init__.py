"""A small knowledge base of SciML techniques, one markdown file per entry.

Each entry has a title (`# ...`), a `tags:` line, an optional `strategies:` line naming
strategies of the offline library that realise it (`key {json params}; key`), and the
sections "When to use" and "How". Retrieval is deliberately simple and inspectable: the
tags that occur in a query text (an analyst's report) are counted, and an entry is only
returned when enough of them occur, so an unrelated report retrieves nothing rather than
the least-bad entry.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..task import markdown_sections

KNOWLEDGE_DIR = Path(__file__).resolve().parent
MIN_OVERLAP = 2  # one shared word is coincidence ("smooth" is everywhere); two is a topic


@dataclass(frozen=True)
class KnowledgeEntry:
    id: str
    title: str
    tags: tuple[str, ...]
    strategies: tuple[tuple[str, dict], ...]  # (strategy key, suggested params)
    when_to_use: str
    how: str
    pitfalls: str = ""

    def render(self) -> str:
        """The entry as a prompt sees it: labelled lines, no markdown headings (those would
        end the prompt section the entry is placed in)."""
        hints = "; ".join(f"{k} {json.dumps(p, sort_keys=True)}" if p else k for k, p in self.strategies)
        lines = [f"entry: {self.id}", f"title: {self.title}", f"tags: {', '.join(self.tags)}"]
        if hints:
            lines.append(f"strategies: {hints}")
        lines += [f"when to use: {_one_line(self.when_to_use)}", f"how: {_one_line(self.how)}"]
        if self.pitfalls:
            lines.append(f"pitfalls: {_one_line(self.pitfalls)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Match:
    entry: KnowledgeEntry
    matched: tuple[str, ...]  # the entry's tags that occur in the query

    @property
    def score(self) -> int:
        return len(self.matched)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _parse_strategies(line: str) -> tuple[tuple[str, dict], ...]:
    hints = []
    for part in filter(None, (p.strip() for p in line.split(";"))):
        m = re.match(r"^([a-z0-9_]+)\s*(\{.*\})?$", part)
        if not m:
            raise ValueError(f"cannot read strategy hint {part!r}")
        hints.append((m.group(1), json.loads(m.group(2)) if m.group(2) else {}))
    return tuple(hints)


def parse_entry(path: Path) -> KnowledgeEntry:
    text = Path(path).read_text(encoding="utf-8")
    title = re.search(r"^#\s+(.+?)\s*$", text, re.M)
    tags = re.search(r"^tags:\s*(.+?)\s*$", text, re.M)
    if not title or not tags:
        raise ValueError(f"{path}: a knowledge entry needs a '# title' and a 'tags:' line")
    strategies = re.search(r"^strategies:[ \t]*(.*?)\s*$", text, re.M)
    sections = markdown_sections(text)
    return KnowledgeEntry(
        id=Path(path).stem, title=title.group(1),
        tags=tuple(t.strip().lower() for t in tags.group(1).split(",") if t.strip()),
        strategies=_parse_strategies(strategies.group(1)) if strategies else (),
        when_to_use=sections.get("when to use", ""), how=sections.get("how", ""),
        pitfalls=sections.get("pitfalls", ""))


@lru_cache(maxsize=8)
def _load(folder: str) -> tuple[KnowledgeEntry, ...]:
    return tuple(parse_entry(p) for p in sorted(Path(folder).glob("*.md")))


def load_knowledge(folder: str | Path = KNOWLEDGE_DIR) -> list[KnowledgeEntry]:
    """Every entry in ``folder``, in file-name order."""
    return list(_load(str(Path(folder).resolve())))


def _stem(word: str) -> str:
    # Just enough normalisation that "jumps" meets "jump" and "scales" meets "scale".
    return word[:-1] if len(word) > 4 and word.endswith("s") and not word.endswith("ss") else word


def tokens(text: str) -> set[str]:
    """Lower-cased words of ``text``; a hyphenated word also counts as its parts."""
    out: set[str] = set()
    for word in re.findall(r"[a-z0-9]+(?:-[a-z0-9]+)*", text.lower()):
        out.add(_stem(word))
        out.update(_stem(p) for p in word.split("-"))
    return out


def _tag_in(tag: str, words: set[str]) -> bool:
    return _stem(tag) in words or all(_stem(p) in words for p in tag.split("-"))


def rank(query: str, entries: list[KnowledgeEntry] | None = None) -> list[Match]:
    """Every entry with the tags it shares with ``query``, best first (ties: file order)."""
    words = tokens(query)
    pool = load_knowledge() if entries is None else entries
    matches = [Match(e, tuple(t for t in e.tags if _tag_in(t, words))) for e in pool]
    return sorted(matches, key=lambda m: -m.score)  # sorted() is stable: file order breaks ties


def retrieve(query: str, k: int = 1, exclude: tuple[str, ...] | set[str] = (),
             entries: list[KnowledgeEntry] | None = None, min_overlap: int = MIN_OVERLAP) -> list[Match]:
    """At most ``k`` entries sharing at least ``min_overlap`` tags with ``query``;
    entries whose id is in ``exclude`` (already applied) are skipped."""
    return [m for m in rank(query, entries) if m.entry.id not in exclude and m.score >= min_overlap][:k]
