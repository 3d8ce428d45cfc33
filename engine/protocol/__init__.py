"""Typed messages the engine and the studio exchange (see engine/protocol/events.py)."""
from .events import *  # noqa: F403 - the protocol's names are its API
from .events import __all__ as _events_all

__all__ = [*_events_all]
