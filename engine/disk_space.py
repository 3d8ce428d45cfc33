"""Free space where Trellis writes (its database, traces, sandboxes and archive), and what to do
when there is none.

A full disk used to surface as nothing: the worker's last write (the run's failure) failed too,
the run showed "running", then "worker lost". So: a run does not start below a floor of free
space, and the reason says "disk full"; a small reserve file is kept beside the database and given
back the moment a write fails for want of space, so that the run's state can still be recorded."""
from __future__ import annotations

import errno
import logging
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MB = 1024 * 1024
_FULL_WORDS = ("database or disk is full", "no space left on device", "disk quota exceeded")


@dataclass(frozen=True)
class DiskState:
    """The fullest of the folders looked at."""

    path: str
    free_mb: int
    needed_mb: int

    @property
    def full(self) -> bool:
        return self.free_mb < self.needed_mb

    def message(self) -> str:
        return (f"Disk full: {self.free_mb} MB free where Trellis keeps its data ({self.path}); runs need at "
                f"least {self.needed_mb} MB (TRELLIS_MIN_FREE_MB). Free some space, then resume the run.")


def free_mb(path: str | Path) -> int:
    """MB an unprivileged writer may still use on ``path``'s file system (its nearest existing
    parent when it does not exist yet)."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    info = os.statvfs(path)
    return int(info.f_bavail * info.f_frsize // MB)


def disk_state(paths: list[str | Path], needed_mb: int) -> DiskState:
    """The folder with the least free space, and whether it is below ``needed_mb``."""
    states = []
    for path in dict.fromkeys(str(p) for p in paths):
        try:
            states.append(DiskState(path, free_mb(path), needed_mb))
        except OSError:
            log.warning("disk space: cannot look at %s", path, exc_info=True)
    if not states:
        return DiskState("", needed_mb, needed_mb)
    return min(states, key=lambda s: s.free_mb)


def caused_by_full_disk(exc: BaseException | None) -> bool:
    """Whether an error, or one it was raised from, is a write refused for want of space (an
    OSError ENOSPC/EDQUOT, or SQLite's "database or disk is full", however it was wrapped)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        # SQLite says it in words; Django wraps its error in an OperationalError of its own
        database_error = isinstance(exc, sqlite3.Error) or type(exc).__name__ in ("OperationalError", "DatabaseError")
        if database_error and any(word in str(exc).lower() for word in _FULL_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class SpaceReserve:
    """A file of ``size_mb`` held on the data disk, given back when a write fails for want of
    space so that the last writes (the run's state, its reason) still fit."""

    def __init__(self, path: str | Path, size_mb: int) -> None:
        self.path = Path(path)
        self.size_mb = max(0, int(size_mb))

    def ensure(self) -> bool:
        """Hold the reserve (again); False when there is no room for it now."""
        if self.size_mb == 0:
            return True
        try:
            if self.path.is_file() and self.path.stat().st_blocks * 512 >= self.size_mb * MB:
                return True
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size_mb * MB)
            finally:
                os.close(fd)
            return True
        except OSError as exc:
            log.warning("disk space: could not reserve %d MB at %s (%s)", self.size_mb, self.path, exc)
            self.path.unlink(missing_ok=True)  # a part-reserve holds space and guarantees nothing
            return False

    def release(self) -> bool:
        """Give the space back; True when there was a reserve to give."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        log.warning("disk space: the disk is full; released the %d MB reserve at %s", self.size_mb, self.path)
        return True
