"""Warm, single-use sandboxes made ahead of the requests that will use them (issue 29).

Starting a container costs about 100 ms of a trivial program's 170; a pool keeps a few started
ones, each waiting for one program, so a request finds its sandbox ready. A slot is never given a
second program: it is used once and thrown away, so what one program leaves (files, processes) can
never meet the next. The pool knows nothing of Docker: a slot is any object with ``key``,
``alive()`` and ``discard()``, made by the ``make(key)`` it is given (docker_executor.py makes a
container, its working directory and the waiter in it).

Background threads do the slow work off the requests' path: they make slots (up to ``size``
ready for every key a request asked for since), throw away slots idle longer than
``idle_seconds`` (each holds a mounted folder and a container's memory), and run the clean-up the
requests handed them (removing used containers). ``close()`` throws away everything and runs every
clean-up still pending; nothing outlives it.

This module also holds what makes a warm container's inputs read-only: they cannot be bind-mounted
read-only into a container that is already running, so they are copied in and protected by
ownership (``seal_inputs``)."""
from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path, PurePosixPath
from typing import Protocol

log = logging.getLogger(__name__)

IDLE_SECONDS = 120.0  # a slot unused this long is thrown away
WAIT_SECONDS = 10.0  # the longest a request waits for a slot being made before running cold
# Threads doing the pool's work, at most one per ready slot wanted: two containers started side by
# side took about 0.6 of the time of two in a row (2 CPUs); with one slot wanted, a second thread
# only removed used containers beside the next start and slowed the program running (measured).
WORKERS = 2
DEFAULT_SIZE = 2  # one ready container did not keep up with programs back to back (benchmarks/sandbox_overhead.py)
MAX_SIZE = 16
SIZE_VARIABLE = "TRELLIS_SANDBOX_WARM"


class Slot(Protocol):
    key: Hashable

    def alive(self) -> bool: ...

    def discard(self) -> None: ...


def size_from_environment() -> int:
    """Ready slots per key: ``TRELLIS_SANDBOX_WARM`` (0: no pool), default 2."""
    raw = os.environ.get(SIZE_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_SIZE
    try:
        return min(MAX_SIZE, max(0, int(raw)))
    except ValueError:
        log.warning("sandbox: %s=%r is not a whole number; keeping %d warm sandbox(es)",
                    SIZE_VARIABLE, raw, DEFAULT_SIZE)
        return DEFAULT_SIZE


class WarmPool:
    """Ready slots by key. Thread-safe; ``size`` 0 makes every ``take`` a miss and starts nothing."""

    def __init__(self, size: int, make: Callable[[Hashable], Slot], idle_seconds: float = IDLE_SECONDS,
                 name: str = "sandbox-warm-pool") -> None:
        self.size = max(0, int(size))
        self.idle_seconds = idle_seconds
        self.hits = 0  # requests served by a warm slot
        self.misses = 0  # requests that found none (and ran cold)
        self._make = make
        self._name = name
        self._pid = os.getpid()  # a forked child owns none of these slots
        self._cond = threading.Condition()
        self._ready: dict[Hashable, list[tuple[float, Slot]]] = {}
        self._making: dict[Hashable, int] = {}  # slots being made, by key
        self._claims: dict[Hashable, int] = {}  # requests waiting for one of those
        self._wanted: set[Hashable] = set()  # keys to bring back to ``size``
        self._chores: list[Callable[[], None]] = []  # clean-up handed over by the requests
        self._busy = 0  # threads doing a job
        self._closed = False
        self._threads: list[threading.Thread] = []

    # -- the requests' side ----------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self.size > 0 and not self._closed and os.getpid() == self._pid

    def take(self, key: Hashable, wait_seconds: float = WAIT_SECONDS) -> Slot | None:
        """A ready slot of ``key``, or None (then the caller runs cold, and calls ``refill`` once
        done, so that making a slot does not slow the cold start down). When none is ready but one
        is being made that no other request waits for, waiting for it is sooner than starting a
        container from nothing. A slot taken is replaced at once, behind the request."""
        if not self.enabled:
            return None
        dead: list[Slot] = []
        with self._cond:
            slot = self._wait_for(key, time.monotonic() + wait_seconds, dead)
            if slot is None:
                self.misses += 1
            else:
                self.hits += 1
                self._want(key)
        for gone in dead:
            self.later(gone.discard)
        return slot

    def refill(self, key: Hashable) -> None:
        """Bring ``key`` to ``size`` ready slots, in the background."""
        if self.enabled:
            with self._cond:
                self._want(key)

    def _wait_for(self, key: Hashable, deadline: float, dead: list[Slot]) -> Slot | None:
        """Called under the lock. Each waiting request counts on one slot on its way: more
        requests than that run cold rather than queue behind the pool's threads."""
        claimed = False
        try:
            while True:
                slot = self._pop_ready(key, dead)
                if slot is not None or self._closed:
                    return slot
                if not claimed:
                    if self._on_the_way(key) <= self._claims.get(key, 0):
                        return None
                    self._claims[key] = self._claims.get(key, 0) + 1
                    claimed = True
                left = deadline - time.monotonic()
                if left <= 0 or self._on_the_way(key) == 0:
                    return None  # too slow, or its making failed
                self._cond.wait(left)
        finally:
            if claimed:
                self._claims[key] -= 1

    def _on_the_way(self, key: Hashable) -> int:
        """Slots of ``key`` being made or about to be (the thread may be busy with clean-up)."""
        making = self._making.get(key, 0)
        return making + (max(0, self._short(key)) if key in self._wanted else 0)

    def _pop_ready(self, key: Hashable, dead: list[Slot]) -> Slot | None:
        ready = self._ready.get(key, [])
        while ready:
            _, slot = ready.pop(0)  # the oldest: the younger ones are further from their expiry
            if slot.alive():
                return slot
            dead.append(slot)  # its container went away while it waited
        return None

    def later(self, chore: Callable[[], None]) -> None:
        """Run ``chore`` (clean-up of a used slot) on a thread of the pool's, or now where there is none."""
        with self._cond:
            if self._threads and not self._closed and os.getpid() == self._pid:
                self._chores.append(chore)
                self._cond.notify_all()
                return
        _quietly(chore)

    def ready_slots(self) -> list[Slot]:
        with self._cond:
            return [slot for ready in self._ready.values() for _, slot in ready]

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until the pool's threads have nothing left to do (slots made, clean-up done): for
        tests and benchmarks that look at the machine afterwards. False when it did not."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._closed and (self._busy or self._chores or self._pending_keys()):
                left = deadline - time.monotonic()
                if left <= 0 or not self._threads:
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        """Throw away every ready slot and run every pending clean-up; later requests run cold.
        Idempotent; does nothing in a forked child (the slots are its parent's)."""
        if os.getpid() != self._pid:
            return
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(60)
        with self._cond:
            slots = [slot for ready in self._ready.values() for _, slot in ready]
            self._ready.clear()
            chores, self._chores = self._chores, []
        for slot in slots:
            _quietly(slot.discard)
        for chore in chores:
            _quietly(chore)

    # -- the pool's threads ----------------------------------------------------------

    def _want(self, key: Hashable) -> None:
        """Called under the lock: bring ``key`` back to ``size`` ready slots."""
        self._wanted.add(key)
        while len(self._threads) < min(WORKERS, self.size):
            thread = threading.Thread(target=self._work, daemon=True, name=f"{self._name}-{len(self._threads)}")
            self._threads.append(thread)
            thread.start()
        self._cond.notify_all()

    def _short(self, key: Hashable) -> int:
        return self.size - len(self._ready.get(key, ())) - self._making.get(key, 0)

    def _pending_keys(self) -> list[Hashable]:
        return [key for key in self._wanted if self._short(key) > 0]

    def _work(self) -> None:
        busy = False
        while True:
            with self._cond:
                if busy:
                    self._busy -= 1
                    self._cond.notify_all()
                job = None
                while not self._closed and (job := self._next_job()) is None:
                    self._cond.wait(self._until_next_expiry())
                if self._closed:
                    return  # close() does what is left
                self._busy += 1
                busy = True
            job()

    def _next_job(self) -> Callable[[], None] | None:
        """Called under the lock. Making a slot first (a request may be waiting for it), then the
        clean-up, then throwing away idle slots."""
        for key in list(self._wanted):
            if self._short(key) <= 0:
                self._wanted.discard(key)
            else:
                self._making[key] = self._making.get(key, 0) + 1
                return lambda: self._fill(key)
        if self._chores:
            chore = self._chores.pop(0)
            return lambda: _quietly(chore)
        expired = self._take_expired()
        if expired:
            return lambda: _discard_all(expired)
        return None

    def _fill(self, key: Hashable) -> None:
        slot = None
        try:
            slot = self._make(key)
        except Exception as exc:  # noqa: BLE001 - requests run cold instead; the next one asks again
            # one line, not a traceback per attempt: a daemon gone away made thousands of lines
            log.warning("sandbox: could not make a warm sandbox (%s); programs start cold meanwhile",
                        str(exc)[:300], exc_info=log.isEnabledFor(logging.DEBUG))
        with self._cond:
            self._making[key] -= 1
            if slot is None:
                self._wanted.discard(key)  # no retry loop against a failing daemon
            elif not self._closed:
                self._ready.setdefault(key, []).append((time.monotonic(), slot))
                slot = None
            self._cond.notify_all()
        if slot is not None:  # made while the pool closed
            _quietly(slot.discard)

    def _take_expired(self) -> list[Slot]:
        now = time.monotonic()
        expired = []
        for key, ready in self._ready.items():
            keep = [(made, slot) for made, slot in ready if now - made < self.idle_seconds]
            expired += [slot for made, slot in ready if now - made >= self.idle_seconds]
            self._ready[key] = keep
        return expired

    def _until_next_expiry(self) -> float | None:
        made = [made for ready in self._ready.values() for made, _ in ready]
        if not made:
            return None
        return max(0.01, min(made) + self.idle_seconds - time.monotonic())


def _discard_all(slots: list[Slot]) -> None:
    for slot in slots:
        _quietly(slot.discard)


def _quietly(chore: Callable[[], None]) -> None:
    try:
        chore()
    except Exception as exc:  # noqa: BLE001 - clean-up must not kill a thread of the pool's or close()
        log.warning("sandbox: a warm sandbox's clean-up failed (%s)", str(exc)[:300],
                    exc_info=log.isEnabledFor(logging.DEBUG))


# ------------------------------------------------------------- read-only inputs by ownership

INPUT_FILE_MODE = 0o444
INPUT_DIR_MODE = 0o555
# Sticky and writable by all: the program may create files beside an input, but may not delete,
# rename or replace one that root owns.
INPUT_PARENT_MODE = 0o1777


def seal_inputs(workdir: Path, inputs: Iterable[PurePosixPath], uid: int, gid: int) -> None:
    """Ownership for a program whose inputs could not be mounted read-only (run by root, before
    the program starts): every input root's and read-only (a folder input's whole tree), every
    folder on the way to one (the working directory included) root's and sticky, and everything
    else (the program, the bootstrap, the private folder) the run's ``uid`` as on the cold path."""
    inputs = set(inputs)
    parents = {parent for rel in inputs for parent in rel.parents}  # "." (the workdir) among them
    for path, rel in _walk(workdir):
        if any(rel == top or top in rel.parents for top in inputs):
            os.chown(path, 0, 0)
            os.chmod(path, INPUT_DIR_MODE if path.is_dir() else INPUT_FILE_MODE)
        elif rel in parents:
            os.chown(path, 0, 0)
            os.chmod(path, INPUT_PARENT_MODE)
        else:
            os.chown(path, uid, gid, follow_symlinks=False)


def _walk(workdir: Path):
    """(path, relative path) of the working directory and of everything in it, links not followed."""
    yield workdir, PurePosixPath(".")
    for dirpath, dirnames, filenames in os.walk(workdir):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            if stat.S_ISLNK(os.lstat(path).st_mode):
                raise ValueError(f"sandbox: a link among the inputs laid out: {path}")  # copies follow links
            yield path, PurePosixPath(path.relative_to(workdir).as_posix())
