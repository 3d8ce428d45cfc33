"""Where a tool server may read and write: paths confined to allowed roots, symlinks resolved.

Tool arguments come from a model, so a path is hostile until proven otherwise: ``..``, an
absolute path elsewhere, or a symlink inside the data folder that points out of it are all
refused. The roots come from the environment the host sets (engine/tools/host.py):

- ``TRELLIS_MCP_DATA``: allowed inputs, files or folders, separated by ``os.pathsep``
  (the run's task files: what its agents may see, never the held-out answers);
- ``TRELLIS_MCP_BASE``: the folder a relative path is read from (the task folder);
- ``TRELLIS_MCP_OUTPUT``: the one folder outputs (plots) are written to.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

MAX_INPUT_BYTES = 50 * 1024 * 1024   # a CSV larger than this is not profiled or fitted
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


class ToolInputError(ValueError):
    """An argument the tool refuses; its message is what the agent reads."""


def _roots(variable: str) -> list[Path]:
    return [Path(p).resolve() for p in os.environ.get(variable, "").split(os.pathsep) if p.strip()]


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def readable(path: str) -> Path:
    """The real path of an allowed input file, or ToolInputError saying why not."""
    if not isinstance(path, str) or not path.strip() or len(path) > 1000 or "\x00" in path:
        raise ToolInputError("give the path of a data file of the task, e.g. data/train.csv")
    allowed = _roots("TRELLIS_MCP_DATA")
    if not allowed:
        raise ToolInputError("this server was given no data to read (TRELLIS_MCP_DATA is empty)")
    base = Path(os.environ.get("TRELLIS_MCP_BASE") or os.getcwd())
    given = Path(path)
    real = (given if given.is_absolute() else base / given).resolve()  # follows every symlink
    if not any(_inside(real, root) for root in allowed):
        raise ToolInputError(f"{path!r} is outside the data this run may read; allowed: "
                             + ", ".join(_shown(r, base) for r in allowed))
    if not real.is_file():
        raise ToolInputError(f"{path!r} is not a file")
    size = real.stat().st_size
    if size > MAX_INPUT_BYTES:
        raise ToolInputError(f"{path!r} is {size:,} bytes; the limit is {MAX_INPUT_BYTES:,}")
    return real


def _shown(root: Path, base: Path) -> str:
    try:
        return str(root.relative_to(base.resolve()))
    except ValueError:
        return root.name


def output_folder() -> Path:
    roots = _roots("TRELLIS_MCP_OUTPUT")
    if not roots:
        raise ToolInputError("this server was given no output folder (TRELLIS_MCP_OUTPUT is empty)")
    roots[0].mkdir(parents=True, exist_ok=True)
    return roots[0]


def create(path: Path) -> bool:
    """Create ``path`` empty, exclusively and never through a symlink; False when it exists."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644))
    except FileExistsError:
        return False
    return True


def output_file(name: str, suffix: str) -> Path:
    """A new file ``<name><suffix>`` in the output folder (``-2``, ``-3``… when taken)."""
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise ToolInputError("a file name is 1-64 letters, digits, '_' or '-', starting with a letter or digit")
    folder = output_folder()
    for n in range(1, 1000):
        candidate = folder / (f"{name}{suffix}" if n == 1 else f"{name}-{n}{suffix}")
        if create(candidate):
            return candidate
    raise ToolInputError(f"too many outputs called {name!r} already")
