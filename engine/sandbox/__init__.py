"""Sandboxed execution of generated code.

The engine only talks to the :class:`Executor` protocol, so a Docker executor (a later
issue) can replace the subprocess one without touching the runner.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

ExecutionStatus = Literal["ok", "error", "timeout", "memory", "violation", "killed"]


@dataclass(frozen=True)
class ExecutionLimits:
    wall_seconds: float = 120.0
    cpu_seconds: int = 120
    memory_mb: int = 2048
    max_file_mb: int = 256
    stdout_tail_chars: int = 4000

    @classmethod
    def from_dict(cls, data: dict | None) -> "ExecutionLimits":
        data = dict(data or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown execution limit(s): {', '.join(sorted(unknown))}")
        return cls(**data)


@dataclass(frozen=True)
class ExecutionRequest:
    """One program to run. ``input_files`` maps a relative path inside the fresh working
    directory to a file on the host that is copied there before the run."""

    code: str
    input_files: dict[str, Path] = field(default_factory=dict)
    limits: ExecutionLimits = field(default_factory=ExecutionLimits)
    args: tuple[str, ...] = ()
    entrypoint: str = "main.py"


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


class Executor(Protocol):
    name: str

    def run(self, request: ExecutionRequest) -> ExecutionResult: ...
