"""A person's pause or cancel reaches the run at once, whatever step it is in.

The engine reads pause and cancel at its step boundaries (bridge.RunControl), so a step that
runs long without one (a program in the sandbox, a law the offline reader chews on at 100 % CPU)
kept the run going: a pause took 42 s, a cancel never landed. So the studio also signals the
pool process executing the run (Celery's ``revoke(terminate=True)`` with a signal of our own,
the task id being the run's lease): the process raises ``RunInterrupted`` in its main thread at
the next bytecode, the same exception the step boundary would have raised, and the run settles
paused (resumable after its last checkpoint; the step in flight is done again) or cancelled.

The signal is acted on only while the engine runs (``armed``): one that lands while the run's
ending is being recorded is ignored, the ending being what the person asked for anyway.
"""
from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

from engine.errors import RunInterrupted
from webapp.celery import app

log = logging.getLogger(__name__)

PAUSE_SIGNAL = signal.SIGRTMIN + 3
CANCEL_SIGNAL = signal.SIGRTMIN + 4
_REASONS = {PAUSE_SIGNAL: "paused", CANCEL_SIGNAL: "cancelled"}
_armed = threading.Event()


def _handle(signum: int, _frame) -> None:
    if _armed.is_set():
        _armed.clear()  # once: the run's own clean-up is not interrupted a second time
        raise RunInterrupted(_REASONS[signum])


def install() -> None:
    """In a pool process of the runs worker (its main thread runs the tasks)."""
    for signum in _REASONS:
        signal.signal(signum, _handle)


@contextmanager
def armed() -> Iterator[None]:
    """While the engine runs the run: a pause or cancel signal interrupts it."""
    if threading.current_thread() is not threading.main_thread():
        yield  # a signal reaches only the main thread: the step boundaries alone decide here
        return
    _armed.set()
    try:
        yield
    finally:
        _armed.clear()


def signal_run(lease: str, action: str) -> None:
    """Tell the worker executing the attempt ``lease`` (its Celery task id) to stop now. Sent from
    a thread of its own: a broker that is away takes seconds to say so, and the page's request
    does not wait for it (the step boundary stops the run anyway)."""
    if lease:
        threading.Thread(target=send, args=(lease, PAUSE_SIGNAL if action == "pause" else CANCEL_SIGNAL),
                         name="trellis-interrupt", daemon=True).start()


def send(lease: str, signum: int) -> None:
    try:
        app.control.revoke(lease, terminate=True, signal=signum)
    except Exception:  # noqa: BLE001 - the broker is away: the step boundary still stops the run
        log.warning("could not signal the worker of attempt %s; it stops at its next step", lease, exc_info=True)
