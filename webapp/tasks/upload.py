"""A task a person brings to the studio: a zip of its folder, uploaded, or a folder already on
the server, registered. Either way the folder is then checked by the engine's task loader and
preflight (registration.task_for_folder) before anything can run on it.

An uploaded zip is untrusted: members with absolute paths or ``..``, links, devices and more
files or bytes than the limits are refused by name before anything is written, and the bytes
written are counted as they are inflated (a member's declared size can lie). Registering a
server path is limited to the folders ``TRELLIS_TASK_ROOTS`` names, so a reviewer cannot point
the studio at any file the server can read.
"""
from __future__ import annotations

import re
import shutil
import stat
import uuid
import zipfile
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from django.conf import settings

CHUNK = 1 << 16


class TaskRejected(Exception):
    """The upload or path cannot become a task; ``problems`` says why, one sentence each."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def uploads_dir() -> Path:
    return Path(settings.TRELLIS_TASKS_DIR)


def unpack_zip(upload: BinaryIO, name: str = "upload.zip") -> Path:
    """The zip's task folder, unpacked into a new folder under ``TRELLIS_TASKS_DIR``. A zip of
    one folder (what zipping a folder makes) is unpacked without that top folder."""
    max_bytes, max_files = settings.TRELLIS_TASK_UPLOAD_MAX_BYTES, settings.TRELLIS_TASK_UPLOAD_MAX_FILES
    try:
        archive = zipfile.ZipFile(upload)
    except (zipfile.BadZipFile, OSError, ValueError):
        raise TaskRejected([f"{name} is not a zip file: zip the task folder (Problem.md, its data, "
                            "evaluate.py) and upload that"]) from None
    with archive:
        members = [m for m in archive.infolist() if not m.is_dir()]
        problems = _member_problems(members, max_files, max_bytes)
        if problems:
            raise TaskRejected(problems)
        prefix = _common_folder([m.filename for m in members])
        # the folder keeps the task's name (the zipped folder's, or the zip's): the task loader
        # names the task after its folder
        label = re.sub(r"[^A-Za-z0-9_.-]+", "-", prefix.name if prefix else Path(name).stem).strip(".-") or "task"
        target = uploads_dir() / uuid.uuid4().hex / label[:80]
        target.mkdir(parents=True)
        written = 0
        try:
            for member in members:
                relative = PurePosixPath(member.filename).relative_to(prefix) if prefix else PurePosixPath(member.filename)
                path = target.joinpath(*relative.parts)
                path.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, open(path, "xb") as out:
                    while chunk := source.read(CHUNK):
                        written += len(chunk)
                        if written > max_bytes:
                            raise TaskRejected([f"{name} inflates to more than {max_bytes:,} bytes, the studio's "
                                                "limit for a task folder (TRELLIS_TASK_UPLOAD_MAX_BYTES)"])
                        out.write(chunk)
                path.chmod(0o644)  # data, never programs the studio would execute as they are
        except TaskRejected:
            discard(target)
            raise
        except (zipfile.BadZipFile, OSError, EOFError, RuntimeError) as exc:  # damaged, encrypted, disk full
            discard(target)
            raise TaskRejected([f"{name} could not be unpacked: {exc}"]) from None
    return target


def _member_problems(members: list[zipfile.ZipInfo], max_files: int, max_bytes: int) -> list[str]:
    problems = []
    if not members:
        problems.append("the zip holds no files")
    if len(members) > max_files:
        problems.append(f"the zip holds {len(members):,} files; a task folder may hold at most {max_files:,}")
    declared = sum(m.file_size for m in members)
    if declared > max_bytes:
        problems.append(f"the zip's files add up to {declared:,} bytes; a task folder may hold at most {max_bytes:,}")
    for m in members:
        path = PurePosixPath(m.filename.replace("\\", "/"))
        mode = m.external_attr >> 16
        if path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
            problems.append(f"{m.filename!r} points outside the task folder")
        elif mode and not (stat.S_ISREG(mode) or mode & 0o170000 == 0):
            problems.append(f"{m.filename!r} is a link or a special file; a task folder holds plain files only")
        elif m.flag_bits & 0x1:
            problems.append(f"{m.filename!r} is encrypted")
        if len(problems) >= 20:
            problems.append("… and possibly more")
            break
    return problems


def _common_folder(names: list[str]) -> PurePosixPath | None:
    """The one folder every file is in, when the zip was made of a folder."""
    tops = {PurePosixPath(n).parts[0] for n in names}
    if len(tops) == 1 and all(len(PurePosixPath(n).parts) > 1 for n in names):
        return PurePosixPath(tops.pop())
    return None


def allowed_roots() -> list[Path]:
    return [Path(root).resolve() for root in settings.TRELLIS_TASK_ROOTS]


def registered_path(text: str) -> Path:
    """A server folder a person names, if it lies under one of ``TRELLIS_TASK_ROOTS``."""
    roots = allowed_roots()
    where = ", ".join(str(r) for r in roots) or "none (set TRELLIS_TASK_ROOTS)"
    if not text.strip():
        raise TaskRejected(["name a folder on the server, or upload a zip"])
    try:
        folder = Path(text.strip()).expanduser().resolve(strict=True)
    except (OSError, RuntimeError):
        raise TaskRejected([f"{text.strip()!r} does not exist on the server"]) from None
    if not any(folder == root or root in folder.parents for root in roots):
        raise TaskRejected([f"{folder} is outside the folders tasks may be registered from: {where}"])
    if not folder.is_dir():
        raise TaskRejected([f"{folder} is not a folder"])
    return folder


def discard(folder: Path) -> None:
    """Remove an unpacked upload that did not become a task (never a registered server folder)."""
    folder = folder.resolve()
    if folder.parent.parent == uploads_dir().resolve():
        shutil.rmtree(folder.parent, ignore_errors=True)
