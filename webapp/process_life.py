"""Processes the studio starts die with it, however it dies.

A studio stopped with SIGKILL (or an OOM kill) cannot stop its children; they used to go on,
a worker still executing a run, Redis still serving. Linux's parent-death signal is set in each
child before it runs, so the kernel itself tells it."""
from __future__ import annotations

import ctypes
import os
import signal
import threading
import time
from typing import Callable

PR_SET_PDEATHSIG = 1


def dying_with_parent(sig: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child is sent ``sig`` when the process that started it dies, however
    it dies (a studio killed with SIGKILL left its worker executing a run). Linux only; a no-op
    elsewhere."""
    parent = os.getpid()

    def arrange() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, sig)
        except (OSError, AttributeError):
            return
        if os.getppid() != parent:  # the parent died before the call: nobody would send it
            os.kill(os.getpid(), sig)
    return arrange




DIE_WITH_STUDIO = "TRELLIS_DIE_WITH_STUDIO"  # set by `manage.py studio` in the environment of its parts


def watch_parent(interval_s: float = 1.0) -> None:
    """In a Celery worker's main process and in each of its pool processes, when the studio started
    it: once the process that started this one is gone, the whole process group goes (the worker,
    its pool, the programs they run). The parent-death signal alone asks the worker to stop, which
    it may not manage (its broker died with the studio too); this does not ask."""
    if os.environ.get(DIE_WITH_STUDIO) != "1":
        return
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(interval_s)
            if os.getppid() != parent:
                os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch, name="trellis-parent-watch", daemon=True).start()
