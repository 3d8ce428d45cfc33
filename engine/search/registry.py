"""The searches Trellis can run, by name: the one list that the CLI, ``evolve`` and the
studio's form read."""
from __future__ import annotations

from .base import Search, SearchContext
from .fixed_team import FixedTeamSearch
from .memory_fixed import MemoryFixedSearch
from .mimosa import MimosaSearch
from .repair import RepairSearch
from .scimars import ScimarsSearch
from .tree import TreeSearch

REGISTRY: dict[str, type[Search]] = {cls.name: cls for cls in (MimosaSearch, ScimarsSearch, TreeSearch,
                                                           MemoryFixedSearch, FixedTeamSearch, RepairSearch)}
# Searches that need the shared evidence graph whatever the caller asks.
NEEDS_MEMORY = frozenset({MemoryFixedSearch.name})
# Searches that may share one (SciMARS + Memory); the others run each probe with its own graph.
TAKES_MEMORY = frozenset({ScimarsSearch.name}) | NEEDS_MEMORY
SEARCHES: tuple[str, ...] = tuple(REGISTRY)
# What a new run uses when nobody chooses (the CLI, the studio's form and its demo run).
DEFAULT = MimosaSearch.name
# Searches that package their champion (engine/bundle/), by title.
BUNDLED: tuple[str, ...] = tuple(cls.title for cls in REGISTRY.values() if cls.writes_bundle)


def search_class(name: str) -> type[Search]:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown search {name!r}; choose one of {', '.join(SEARCHES)}") from None


def create(name: str, ctx: SearchContext) -> Search:
    return search_class(name)(ctx)


def choices() -> list[tuple[str, str]]:
    """(name, title) pairs, for forms and help texts."""
    return [(name, cls.title) for name, cls in REGISTRY.items()]
