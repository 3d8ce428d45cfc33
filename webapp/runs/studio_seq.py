"""The run's studio sequence: the number each studio message carries (``sseq``).

Engine events reach a page numbered already (``seq``, the Event row), so a page that misses one
fetches it again (webapp/runs/live_views.py). Studio messages (a status, a decision, a version, an
annotation, a training worker's progress, a person's record) are stored nowhere as messages;
what they change is in the database. So they are numbered per run, across every process that
sends them (the Celery worker, each web process, a training worker), by one counter in Redis,
the channel layer's own server: a page that sees a number other than the next one re-reads what
studio messages change (static/js/run.js). Redis restarting starts the counter again at 1: the
page sees a number that is not the next one and re-reads, so a reset is never taken for news
already seen.

With a channel layer that is not Redis (the tests' in-memory layer, one process) the counter is
this process's own.
"""
from __future__ import annotations

import logging
import threading
from collections import defaultdict

import redis
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)
KEY = "trellis:run:{}:studio-seq"

_local: dict[int, int] = defaultdict(int)
_sync_clients: dict[str, object] = {}
_sync_lock = threading.Lock()


def _on_redis(layer) -> bool:
    return hasattr(layer, "connection") and hasattr(layer, "consistent_hash")  # channels_redis


def _connection(layer, run_id: int):
    """The layer's own asyncio Redis client for this run's key (on the running loop), or None
    for a layer without Redis."""
    return layer.connection(layer.consistent_hash(KEY.format(run_id))) if _on_redis(layer) else None


async def next_sseq(run_id: int, layer=None, step: int = 1) -> int | None:
    """The number of a new studio message of ``run_id`` (``step`` > 1 leaves a gap for messages
    that were never sent); None when Redis does not answer (the message still goes, unnumbered:
    a page then re-reads at the next sync)."""
    layer = layer or get_channel_layer()
    connection = _connection(layer, run_id)
    if connection is None:
        _local[run_id] += step
        return _local[run_id]
    try:
        return int(await connection.incrby(KEY.format(run_id), step))
    except Exception:  # noqa: BLE001 - numbering is best effort; the database has what changed
        log.warning("no studio sequence number for run %s", run_id, exc_info=log.isEnabledFor(logging.DEBUG))
        return None


async def current_sseq(run_id: int, layer=None) -> int | None:
    """The number of the run's latest studio message (0 before any); None when unknown."""
    layer = layer or get_channel_layer()
    connection = _connection(layer, run_id)
    if connection is None:
        return _local.get(run_id, 0)
    try:
        return int(await connection.get(KEY.format(run_id)) or 0)
    except Exception:  # noqa: BLE001
        return None


def current_sseq_sync(run_id: int) -> int | None:
    """``current_sseq`` for a synchronous view, on a client kept per Redis address (a view has
    no event loop of its own to keep the layer's asyncio clients on)."""
    layer = get_channel_layer()
    if layer is None:
        return None
    if not _on_redis(layer):
        return _local.get(run_id, 0)
    try:
        client = _sync_client(layer, layer.consistent_hash(KEY.format(run_id)))
        return int(client.get(KEY.format(run_id)) or 0) if client is not None else None
    except Exception:  # noqa: BLE001
        return None


def _sync_client(layer, index: int):
    host = layer.hosts[index]
    address = host.get("address")
    if not isinstance(address, str):  # host/port or sentinel entries: views leave the base unknown
        return None
    with _sync_lock:
        client = _sync_clients.get(address)
        if client is None:
            client = _sync_clients[address] = redis.Redis.from_url(address, socket_timeout=2, socket_connect_timeout=2)
        return client
