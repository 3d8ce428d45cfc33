"""One control group per sandboxed run: a memory cap on the whole process tree and a cap on
how many processes and threads it may hold.

rlimits are per process (RLIMIT_AS) or per user (RLIMIT_NPROC), so a program that forks
gets a fresh address-space allowance in every child: 1,000 forks of a 2 GB program are
1,000 allowances. A cgroup counts the tree as one. cgroup v2 (unified) and v1 (separate
``memory`` and ``pids`` hierarchies) are both handled; where neither can be written (an
unprivileged engine, a read-only /sys/fs/cgroup) :func:`create` returns None and the
executor falls back to rlimits, which it says in the run's layer report.
"""
from __future__ import annotations

import logging
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_NAME = "trellis-sandbox"


@dataclass
class RunCgroup:
    """The cgroup directories of one run (one per v1 hierarchy, a single one on v2)."""

    dirs: list[Path]
    version: int

    @property
    def procs_files(self) -> list[str]:
        """Files a process writes its pid to in order to join (all of them)."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def memory_exhausted(self) -> bool:
        """Whether the kernel refused memory to the tree or OOM-killed a member."""
        for d in self.dirs:
            if self.version == 2:
                events = _counts(d / "memory.events")
                if events.get("oom_kill", 0) or events.get("max", 0):
                    return True
            elif (d / "memory.failcnt").exists():
                if int(_read(d / "memory.failcnt") or 0) or _counts(d / "memory.oom_control").get("oom_kill", 0):
                    return True
        return False

    def process_limit_hit(self) -> bool:
        """Whether a fork or thread was refused because the tree was at its task cap."""
        return any(_counts(d / "pids.events").get("max", 0) for d in self.dirs)

    def kill_all(self) -> None:
        for _ in range(50):
            pids = [int(p) for f in self.procs_files for p in _read(Path(f)).split()]
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        self.kill_all()
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the last members are being reaped
                    time.sleep(0.02)
            else:
                log.warning("could not remove cgroup %s", d)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _counts(path: Path) -> dict[str, int]:
    """A cgroup "key value" file (memory.events, pids.events, memory.oom_control)."""
    out = {}
    for line in _read(path).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def create(memory_mb: int, max_processes: int) -> RunCgroup | None:
    """A fresh cgroup capped at ``memory_mb`` (no swap) and ``max_processes`` tasks, or None
    where this process cannot make one."""
    if os.geteuid() != 0 or not CGROUP_ROOT.is_dir():
        return None
    name = f"run-{uuid.uuid4().hex[:16]}"
    try:
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            return _create_v2(name, memory_mb, max_processes)
        return _create_v1(name, memory_mb, max_processes)
    except OSError as exc:
        log.info("no cgroup for sandboxed runs (%s); falling back to rlimits", exc)
        return None


def _create_v1(name: str, memory_mb: int, max_processes: int) -> RunCgroup | None:
    memory, pids = CGROUP_ROOT / "memory", CGROUP_ROOT / "pids"
    if not (memory / "cgroup.procs").exists() or not (pids / "cgroup.procs").exists():
        return None
    made: list[Path] = []
    try:
        for hierarchy in (memory, pids):
            d = hierarchy / PARENT_NAME / name
            d.mkdir(parents=True)
            made.append(d)
        limit = str(memory_mb * 1024 * 1024)
        _write(made[0] / "memory.limit_in_bytes", limit)
        if (made[0] / "memory.memsw.limit_in_bytes").exists():  # swap accounting on: no swap either
            _write(made[0] / "memory.memsw.limit_in_bytes", limit)
        _write(made[1] / "pids.max", str(max_processes))
    except OSError:
        RunCgroup(made, 1).remove()
        raise
    return RunCgroup(made, 1)


def _create_v2(name: str, memory_mb: int, max_processes: int) -> RunCgroup | None:
    own = _read(Path("/proc/self/cgroup")).strip().splitlines()
    rel = next((line.split("::", 1)[1] for line in own if line.startswith("0::")), None)
    if rel is None:
        return None
    parent = CGROUP_ROOT / rel.lstrip("/") / PARENT_NAME
    parent.mkdir(exist_ok=True)
    # A child cgroup only gets memory/pids files when its parent delegates them.
    _write(parent / "cgroup.subtree_control", "+memory +pids")
    d = parent / name
    d.mkdir()
    try:
        _write(d / "memory.max", str(memory_mb * 1024 * 1024))
        if (d / "memory.swap.max").exists():
            _write(d / "memory.swap.max", "0")
        _write(d / "pids.max", str(max_processes))
    except OSError:
        RunCgroup([d], 2).remove()
        raise
    return RunCgroup([d], 2)
