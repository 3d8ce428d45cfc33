"""A tree run's champion bundle as the studio offers it: whether the run has one, why not, and
the zip opened for streaming (engine/bundle/ writes it after the official evaluation)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import BinaryIO

from engine.bundle import BUNDLE_DIR, bundle_zip
from engine.search import registry
from engine.bundle.parts import PartMissing, read_run_file

from .models import Run


def has_bundle(run: Run) -> bool:
    return bool(run.run_dir) and bundle_zip(Path(run.run_dir)) is not None


def bundle_absent(run: Run) -> str:
    """Why ``run`` offers no champion bundle, in words for the person who asked."""
    if not registry.search_class(run.search).writes_bundle:
        return (f"only a search that packages its champion writes one ({', '.join(registry.BUNDLED)}), "
                f"and this run's is {registry.search_class(run.search).title}")
    if run.status != "completed":
        return (f"the run is {run.get_status_display().lower()}; its bundle is written when the search has "
                "committed to its champion and the official evaluation is done")
    return "none was written (the search committed to no champion, or writing it failed: see the run's log)"


def open_bundle(run: Run) -> BinaryIO | None:
    """champion.zip opened for reading, never through a link (checked on the file opened, so a
    link swapped in after the check is refused too); None when there is none."""
    path = bundle_zip(Path(run.run_dir)) if run.run_dir else None
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


MAX_MANIFEST_BYTES = 1_000_000


def bundle_contents(run: Run) -> dict | None:
    """What the run's champion bundle holds, from its manifest.json (files with their sizes, the
    parts left out and why, the zip's size), for the run's report; None when the run has no
    bundle or its manifest cannot be read (read as the bundle reads run files: never through a
    link, never past a size cap)."""
    path = bundle_zip(Path(run.run_dir)) if run.run_dir else None
    if path is None:
        return None
    try:
        manifest = json.loads(read_run_file(Path(run.run_dir), f"{BUNDLE_DIR}/manifest.json", MAX_MANIFEST_BYTES))
    except (PartMissing, ValueError):
        return None
    if not isinstance(manifest, dict):
        return None
    files = [{"name": str(e.get("name", "")), "bytes": e.get("bytes")}
             for e in manifest.get("files", []) if isinstance(e, dict)]
    missing = [{"part": str(m.get("part", "")), "why": str(m.get("why", ""))}
               for m in manifest.get("missing", []) if isinstance(m, dict)]
    return {"zip": str(path), "zip_bytes": path.stat().st_size, "files": files, "missing": missing,
            "champion": manifest.get("champion"), "strategy": manifest.get("strategy")}
