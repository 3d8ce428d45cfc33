"""Sandboxed execution of generated code.

The engine only talks to the :class:`Executor` protocol, so a Docker executor (a later
issue) can replace the subprocess one without touching the runner.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Callable, Literal, Mapping, Protocol

from ..limits import EXECUTION_LIMIT_RANGES, LimitError, number_problem

DEFAULT_READ_CAP = 256 * 1024 * 1024  # bytes the engine reads of one output file

ExecutionStatus = Literal["ok", "error", "timeout", "memory", "violation", "killed"]


@dataclass(frozen=True)
class ExecutionLimits:
    wall_seconds: float = 120.0
    cpu_seconds: int = 120
    memory_mb: int = 2048
    max_file_mb: int = 256
    # processes and threads of the whole tree (torch and BLAS pools count as threads)
    max_processes: int = 128
    # the whole working directory: what the program writes, inputs included
    max_disk_mb: int = 2048
    max_files: int = 20_000
    stdout_tail_chars: int = 4000

    @classmethod
    def from_dict(cls, data: dict | None) -> "ExecutionLimits":
        """Limits from a task folder: every field type- and range-checked (engine/limits.py),
        all problems in one ValueError, so a task with ``memory_mb: "lots"`` fails to load."""
        if data is not None and not isinstance(data, dict):
            raise ValueError(f"must be an object of limits, not {type(data).__name__}")
        data = dict(data or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown execution limit(s): {', '.join(sorted(unknown))}")
        problems = [p for name, value in sorted(data.items()) if (p := _limit_problem(cls, name, value))]
        if problems:
            raise LimitError("; ".join(problems))
        return cls(**data)

    def over_ceilings(self, ceilings: "Mapping[str, float] | None" = None) -> list[str]:
        """Each limit above the operator's ceiling, named with the variable that raises it."""
        ceilings = operator_ceilings() if ceilings is None else ceilings
        return [f"{name} {getattr(self, name):g} is above this studio's ceiling of {ceiling:g} "
                f"(the operator's {ceiling_variable(name)})"
                for name, ceiling in ceilings.items() if getattr(self, name) > ceiling]


# The operator's ceilings on what a task folder may ask of the sandbox (issue 37): a task is
# written by whoever uploads it, and 64 GB of memory or a day of wall clock is the operator's to
# grant. TRELLIS_SANDBOX_MAX_<LIMIT> on the machine that loads the task (web and workers alike).
DEFAULT_CEILINGS: dict[str, float] = {
    "wall_seconds": 6 * 3600, "cpu_seconds": 6 * 3600, "memory_mb": 16_384, "max_file_mb": 4_096,
    "max_processes": 1_024, "max_disk_mb": 20_480, "max_files": 1_000_000, "stdout_tail_chars": 1_000_000,
}


def ceiling_variable(name: str) -> str:
    return f"TRELLIS_SANDBOX_MAX_{name.upper()}"


def operator_ceilings(env: "Mapping[str, str] | None" = None) -> dict[str, float]:
    """Each limit's ceiling: the environment's, else the default. A ceiling that is not a
    positive number is a configuration error, said with its variable."""
    env = os.environ if env is None else env
    out = {}
    for name, default in DEFAULT_CEILINGS.items():
        text = env.get(ceiling_variable(name), "").strip()
        if not text:
            out[name] = default
            continue
        try:
            value = float(text)
        except ValueError:
            raise LimitError(f"{ceiling_variable(name)}={text[:40]!r} is not a number") from None
        if not value > 0:
            raise LimitError(f"{ceiling_variable(name)} must be positive, not {text[:40]!r}")
        out[name] = value
    return out


def _limit_problem(cls: type, name: str, value: object) -> str | None:
    if name in EXECUTION_LIMIT_RANGES:
        low, high, whole = EXECUTION_LIMIT_RANGES[name]
        return number_problem(name, value, low, high, integer=whole)
    default = cls.__dataclass_fields__[name].default  # a field with no range yet: its type at least
    if isinstance(default, bool) or isinstance(value, bool):
        return None if type(value) is type(default) else f"{name} must be true or false, not {value!r}"
    if isinstance(default, (int, float)) and not isinstance(value, (int, float)):
        return f"{name} must be a number, not {value!r}"
    return None


@dataclass(frozen=True)
class ExecutionRequest:
    """One program to run. ``input_files`` maps a relative path inside the fresh working
    directory to a file on the host that is copied there before the run."""

    code: str
    input_files: dict[str, Path] = field(default_factory=dict)
    limits: ExecutionLimits = field(default_factory=ExecutionLimits)
    args: tuple[str, ...] = ()
    entrypoint: str = "main.py"
    # Called about twice a second with the program's working folder while it runs (a training
    # job reads its progress there); returning True stops the program (a person paused it).
    watch: Callable[[Path], bool] | None = field(default=None, compare=False, repr=False)


@dataclass
class ExecutionResult:
    status: ExecutionStatus
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    workdir: Path
    files: dict[str, str]  # relative path -> sha256 of every file the program produced
    violations: list[str] = field(default_factory=list)
    executor: str = "subprocess"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def read_file(self, relpath: str, max_bytes: int = DEFAULT_READ_CAP) -> bytes:
        """An output of this run, read safely (see :func:`read_output`)."""
        return read_output(self.workdir, relpath, max_bytes)

    def evidence(self, tail: int = 4000) -> dict:
        """The ``execution_evidence`` artifact handed to the next agent."""
        return {
            "status": self.status,
            "exit_code": self.exit_code if self.exit_code is not None else -1,
            "stdout_tail": self.stdout[-tail:],
            "stderr_tail": self.stderr[-tail:],
            "duration_s": round(self.duration_s, 3),
            "files": dict(sorted(self.files.items())),
            "violations": list(self.violations),
            "executor": self.executor,
        }


class UnsafeOutput(ValueError):
    """A file a program left behind that the engine will not read: a link, a device or
    FIFO, a file with other hard links, or one over the size cap."""


_KINDS = {stat.S_IFSOCK: "a socket", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFDIR: "a folder"}


def open_output(workdir: Path, relpath: str, max_bytes: int = DEFAULT_READ_CAP):
    """Open a program's output for reading without ever following a link.

    Each path component is opened relative to the previous one with O_NOFOLLOW, so
    neither a symlinked file nor a symlinked directory on the way can point the engine
    (which may run as root) at the answer key or at /etc/shadow; the file must be a
    regular file with a single link (a hard link to a file outside would otherwise pass)
    and at most ``max_bytes`` long.  Returns a binary file object; raises UnsafeOutput
    or FileNotFoundError."""
    parts = PurePosixPath(relpath).parts
    if not parts or PurePosixPath(relpath).is_absolute() or ".." in parts:
        raise UnsafeOutput(f"{relpath!r} is not a path inside the working directory")
    nofollow = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    dir_fd = os.open(workdir, nofollow | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                next_fd = os.open(part, nofollow | os.O_DIRECTORY, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeOutput(f"{relpath!r}: {part!r} is a link, not a folder") from exc
                raise
            os.close(dir_fd)
            dir_fd = next_fd
        # Looked at before it is opened: opening a socket fails (ENXIO) and a device may act on
        # being opened; only a regular file is opened (and checked again once open, for a swap).
        kind = stat.S_IFMT(os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False).st_mode)
        if kind == stat.S_IFLNK:
            raise UnsafeOutput(f"{relpath!r} is a symbolic link; outputs must be regular files")
        if kind != stat.S_IFREG:
            raise UnsafeOutput(f"{relpath!r} is {_KINDS.get(kind, 'not a regular file')}; outputs must be regular files")
        try:
            fd = os.open(parts[-1], nofollow | os.O_NONBLOCK, dir_fd=dir_fd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeOutput(f"{relpath!r} is a symbolic link; outputs must be regular files") from exc
            raise UnsafeOutput(f"{relpath!r} cannot be opened: {exc.strerror}") from exc
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = f"{relpath!r} is not a regular file"
    elif info.st_nlink != 1:
        problem = f"{relpath!r} has {info.st_nlink} hard links; outputs must be files of their own"
    elif info.st_size > max_bytes:
        problem = f"{relpath!r} is {info.st_size} bytes, over the cap of {max_bytes}"
    if problem:
        os.close(fd)
        raise UnsafeOutput(problem)
    return os.fdopen(fd, "rb")


def read_output(workdir: Path, relpath: str, max_bytes: int = DEFAULT_READ_CAP) -> bytes:
    """The bytes of a program's output file, read as :func:`open_output` opens it."""
    with open_output(workdir, relpath, max_bytes) as handle:
        return handle.read(max_bytes + 1)[:max_bytes]


class Executor(Protocol):
    name: str

    def run(self, request: ExecutionRequest) -> ExecutionResult: ...
