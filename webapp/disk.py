"""The studio's view of its data disk: the folders it writes (database, runs, archive, tasks), the
floor of free space below which runs do not start, and the reserve a worker gives back when a
write fails for want of space (engine/disk_space.py does the looking)."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings

from engine.disk_space import DiskState, SpaceReserve, disk_state


def data_paths() -> list[Path]:
    paths = [Path(settings.VAR_DIR), Path(settings.TRELLIS_RUNS_DIR), Path(settings.TRELLIS_ARCHIVE_DIR)]
    database = settings.DATABASES["default"]
    if database["ENGINE"].endswith("sqlite3"):
        paths.append(Path(database["NAME"]).parent)
    return paths


def state() -> DiskState:
    return disk_state(data_paths(), settings.TRELLIS_MIN_FREE_MB)


def reserve() -> SpaceReserve:
    return SpaceReserve(Path(settings.VAR_DIR) / ".disk-reserve", settings.TRELLIS_DISK_RESERVE_MB)


def context(request) -> dict:
    """Every page says when the disk is full (a template context processor)."""
    current = state()
    return {"disk_full": current.message() if current.full else ""}
