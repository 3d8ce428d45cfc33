"""Where the engine keeps what it writes when nobody names a folder: under ``TRELLIS_VAR_DIR``
(default ``var``, relative to where it runs), the folder the studio keeps its runs and archive in
too (webapp/settings.py), so ``python -m engine run``, ``evolve`` and the studio agree."""
from __future__ import annotations

import os
from pathlib import Path

VAR_DIR_ENV = "TRELLIS_VAR_DIR"


def var_dir() -> Path:
    return Path(os.environ.get(VAR_DIR_ENV) or "var")


def runs_dir() -> Path:
    """Each run's folder goes here: traces, artifacts, summaries."""
    return var_dir() / "runs"


def archive_dir() -> Path:
    """The workflow archive a warm start reads and a finished search adds to."""
    return var_dir() / "archive"


def library_dir() -> Path:
    """A user's library folder (skills, references) over the shipped one."""
    return var_dir() / "library"
