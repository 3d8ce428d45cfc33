"""Workflows from files: Trellis's own JSON, or a graph from another system imported as a
structural prior (grounded in this task's roles and types, then given the library's skills)."""
from __future__ import annotations

import json
from pathlib import Path

from ..errors import TrellisError, WorkflowValidationError
from ..task import Task
from ..workflow import Workflow

MAX_FILE_BYTES = 2_000_000


def read_text(path: Path) -> str:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise TrellisError(f"{path}: {path.stat().st_size:,} bytes; a workflow file is at most {MAX_FILE_BYTES:,}")
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TrellisError(f"{path}: not a readable workflow file ({exc})") from exc


def load_workflow_file(path: Path, task: Task) -> tuple[Workflow, str]:
    """The workflow in ``path`` and a sentence saying what it was read as."""
    text = read_text(path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrellisError(f"{path}: not a workflow file: a Trellis workflow is JSON "
                           f"({exc.msg} at line {exc.lineno})") from exc
    if isinstance(data, dict) and isinstance(data.get("agents"), list):
        return Workflow.from_dict(data).validate(), f"the Trellis workflow in {path}"
    raise WorkflowValidationError([f"{path}: not a Trellis workflow (an object with an \"agents\" list)"])
