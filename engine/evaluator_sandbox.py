"""The task author's evaluate.py, run in the same sandbox and under the same limits as the agents'
programs.

evaluate.py comes with the task folder, and a member of a project can now upload a task folder: its
code is no more to be trusted than a program a model wrote. It used to run beside the task folder,
as the engine's own user, with no limit (1.4 GB of memory on a 10^7-row file; as root, anything at
all). Here it runs in the subprocess sandbox (its own uid, no network, the private file-system view,
seccomp, the cgroup) on a copy of the task folder, under the task's memory, file, disk and process
limits and a wall clock of its own. The held-out answers are copied in only when it scores
officially: scoring a validation fold, they are not in its sandbox at all."""
from __future__ import annotations

import math
import os
import shutil
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .sandbox import ExecutionLimits, ExecutionRequest, ExecutionResult, UnsafeOutput
from .sandbox.subprocess_executor import SubprocessExecutor

if TYPE_CHECKING:  # a task holds its assessment (engine/task.py): the type only, never the module
    from .task import Task

# Task-folder entries never copied in: caches and version control, not the task.
_NOT_THE_TASK = {"__pycache__", ".git", ".hg", ".svn", ".ipynb_checkpoints", "evaluate.draft.py",
                 "evaluate.draft.py.json"}
INPUT_DIR = "trellis_inputs"  # the files Trellis hands evaluate.py (predictions, truth, jobs)
EVALUATE = "evaluate.py"


@dataclass
class EvaluatorRun:
    exit_code: int | None
    stdout: str
    stderr: str
    problem: str  # why it did not finish on its own ('' when it did): a timeout, a limit, the sandbox
    outputs: dict[str, bytes]  # the files asked for that it wrote (read before its folder was removed)


def evaluator_limits(task: Task, timeout_s: float) -> ExecutionLimits:
    """The task's limits for memory, files, disk and processes; its own wall clock (scoring a
    dozen files in one process takes longer than one program's CPU allowance would say)."""
    base = task.resources.limits
    return replace(base, wall_seconds=float(timeout_s), cpu_seconds=max(base.cpu_seconds, math.ceil(timeout_s)))


def task_inputs(task: Task, with_answers: bool, without: tuple[str, ...] = ()) -> dict[str, Path]:
    """The task folder's entries to copy in: all of it (less ``without``), the held-out answers
    only if asked."""
    inputs: dict[str, Path] = {}
    for entry in sorted(os.listdir(task.folder)):
        if entry in _NOT_THE_TASK or entry == INPUT_DIR or entry in without:
            continue
        if entry == "heldout" and not with_answers:
            continue
        inputs[entry] = task.folder / entry
    return inputs


def run_task_code(task: Task, entrypoint: str, code: str, args: list[str], inputs: dict[str, Path],
                  timeout_s: float, stop: threading.Event | None = None, outputs: tuple[str, ...] = (),
                  max_output_bytes: int = 64 * 1024 * 1024) -> EvaluatorRun:
    """Run ``code`` as ``entrypoint`` in a fresh sandbox holding ``inputs``, and read back the
    ``outputs`` it wrote (never through a link); ``stop`` ends it early. Nothing is left behind."""
    limits = evaluator_limits(task, timeout_s)
    executor = SubprocessExecutor(keep=True)
    watch = (lambda _workdir: stop.is_set()) if stop is not None else None
    try:
        result = executor.run(ExecutionRequest(code=code, input_files=inputs, limits=limits, args=tuple(args),
                                               entrypoint=entrypoint, watch=watch))
        files: dict[str, bytes] = {}
        for rel in outputs:
            try:
                files[rel] = result.read_file(rel, max_output_bytes)
            except (OSError, UnsafeOutput):
                pass
        return EvaluatorRun(result.exit_code, result.stdout, result.stderr, _problem(result, limits), files)
    finally:
        shutil.rmtree(executor.root, ignore_errors=True)


def _problem(result: ExecutionResult, limits: ExecutionLimits) -> str:
    if result.status == "timeout":
        return f"evaluate.py did not finish within {limits.wall_seconds:.0f} s"
    if result.status == "memory":
        return (f"evaluate.py reached the task's memory limit of {limits.memory_mb} MB (limits.memory_mb in "
                "Data_config.json)")
    if result.status == "violation":
        return f"evaluate.py did something the sandbox refuses: {(result.violations or ['?'])[0][:300]}"
    if result.status == "killed" and "stopped on request" in result.stderr:
        return "stopped"
    if result.status == "killed":
        return f"evaluate.py was killed ({result.stderr.strip().splitlines()[-1][:200] if result.stderr.strip() else 'no message'})"
    return ""


def run_evaluate_py(task: Task, files: dict[str, Path], args: list[str], timeout_s: float, with_answers: bool,
                    stop: threading.Event | None = None) -> EvaluatorRun:
    """evaluate.py itself on ``files`` (paths under INPUT_DIR, named in ``args``)."""
    try:
        code = task.evaluator.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return EvaluatorRun(None, "", "", f"evaluate.py could not be read ({exc})", {})
    inputs = {**task_inputs(task, with_answers, without=(EVALUATE,)), **files}
    return run_task_code(task, EVALUATE, code, args, inputs, timeout_s, stop)
