"""Which sandbox runs a run's programs: ``docker``, ``subprocess`` or ``auto``.

``auto`` (the default of every command): the ``TRELLIS_EXECUTOR`` environment variable when it
names one (an operator's pin; the test suite pins ``subprocess``), else ``docker`` when a Docker
daemon answers and the current definition's image is built, else ``subprocess``, saying why.
An explicit ``docker`` that cannot be had is an ExecutorUnavailable naming the fix, raised
before any model call.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import TrellisError
from . import Executor
from .docker_executor import DockerExecutor
from .image import ImageError, image_ref
from .subprocess_executor import SubprocessExecutor

EXECUTOR_KINDS = ("auto", "docker", "subprocess")
ENV_VAR = "TRELLIS_EXECUTOR"


class ExecutorUnavailable(TrellisError):
    """The executor asked for cannot run here; the message says what to do."""


@dataclass(frozen=True)
class ExecutorChoice:
    executor: Executor
    kind: str    # "docker" or "subprocess"
    asked: str   # what was asked: auto, docker or subprocess
    reason: str  # one sentence: why this executor

    def describe(self) -> str:
        return f"executor: {self.kind} ({self.reason})"


def check_kind(kind: str | None) -> str:
    """``kind`` (None: auto), refused with the choices when it is none of them."""
    kind = (kind or "auto").strip().lower()
    if kind not in EXECUTOR_KINDS:
        raise ExecutorUnavailable(f"unknown executor {kind[:40]!r}: choose {', '.join(EXECUTOR_KINDS)}")
    return kind


def make_executor(kind: str | None, root: str | Path, **options) -> ExecutorChoice:
    """The executor for ``kind`` with its working directories under ``root``. ``options`` go to
    the executor's constructor (``keep``)."""
    asked = check_kind(kind)
    if asked == "auto":
        pinned = os.environ.get(ENV_VAR, "").strip().lower()
        if pinned and pinned != "auto":
            if pinned not in ("docker", "subprocess"):
                raise ExecutorUnavailable(f"{ENV_VAR}={pinned[:40]!r} is not docker or subprocess")
            choice = make_executor(pinned, root, **options)
            return ExecutorChoice(choice.executor, choice.kind, "auto",
                                  f"{ENV_VAR}={pinned}; {choice.reason}")
    if asked in ("docker", "auto"):
        try:
            return ExecutorChoice(_docker(root, **options), "docker", asked, _docker_reason(asked))
        except ExecutorUnavailable as exc:
            if asked == "docker":
                raise
            return ExecutorChoice(_subprocess(root, **options), "subprocess", asked,
                                  f"{exc}; using the subprocess sandbox")
    return ExecutorChoice(_subprocess(root, **options), "subprocess", asked, "asked for")


def executor_for_run(kind: str | None, root: str | Path, started_with: str | None = None, **options) -> ExecutorChoice:
    """make_executor for a run: ``auto`` is decided once, at the run's start; a resumed run
    (``started_with``: the kind its first attempt chose) keeps it, so Docker coming up (or going)
    between two attempts never moves a run's programs to another sandbox mid-run. A kind a person
    asked for by name is always what runs."""
    if started_with in ("docker", "subprocess") and check_kind(kind) == "auto":
        choice = make_executor(started_with, root, **options)
        return replace(choice, asked="auto", reason=f"kept from the run's start: {choice.reason}")
    return make_executor(kind, root, **options)


def _docker_reason(asked: str) -> str:
    ref = image_ref()
    return f"asked for; image {ref}" if asked == "docker" else f"a Docker daemon answers and {ref} is built"


def _docker(root: str | Path, **options) -> Executor:
    try:
        return DockerExecutor(root=root, **options)
    except ImageError as exc:
        raise ExecutorUnavailable(str(exc)) from exc


def _subprocess(root: str | Path, **options) -> Executor:
    return SubprocessExecutor(root=root, **options)
