"""Hostile task zips: each is refused by name before anything is written outside a fresh folder
under TRELLIS_TASKS_DIR, and whatever was unpacked is removed."""
from __future__ import annotations

import io
import stat
import zipfile
from pathlib import Path

import pytest

from webapp.tasks import upload
from webapp.tasks.upload import TaskRejected


def _zip(members: list[tuple[zipfile.ZipInfo | str, bytes]]) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for info, data in members:
            z.writestr(info, data)
    buffer.seek(0)
    return buffer


def _link(name: str, target: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    return info


@pytest.fixture(autouse=True)
def uploads(tmp_path, settings):
    settings.TRELLIS_TASKS_DIR = tmp_path / "tasks"
    settings.TRELLIS_TASK_UPLOAD_MAX_BYTES = 1_000_000
    settings.TRELLIS_TASK_UPLOAD_MAX_FILES = 50
    return tmp_path


@pytest.mark.parametrize("members, says", [
    ([("../../outside.txt", b"x")], "points outside the task folder"),
    ([("/etc/cron.d/evil", b"x")], "points outside the task folder"),
    ([("task/data/train.csv", b"x"), (_link("task/data/secret", "/etc/shadow"), b"/etc/shadow")], "is a link"),
    ([(f"task/f{i}.txt", b"x") for i in range(51)], "holds 51 files"),
    ([], "holds no files"),
])
def test_a_hostile_zip_is_refused_by_name_and_nothing_is_left(uploads, members, says):
    with pytest.raises(TaskRejected) as refused:
        upload.unpack_zip(_zip(members), "hostile.zip")
    assert any(says in p for p in refused.value.problems), refused.value.problems
    assert not (uploads / "outside.txt").exists()
    assert not any((uploads / "tasks").rglob("*")) if (uploads / "tasks").exists() else True


def test_a_zip_bomb_is_stopped_while_it_inflates_even_when_it_lies_about_its_size(uploads):
    bomb = _zip([("task/data.csv", b"0" * 5_000_000)])  # compresses to a few kB
    with pytest.raises(TaskRejected, match="inflates to more than|add up to"):
        upload.unpack_zip(bomb, "bomb.zip")
    # the declared size lies: the central directory says 10 bytes
    raw = bytearray(bomb.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as z:
        info = z.infolist()[0]
    central = raw.rfind(b"PK\x01\x02")
    raw[central + 24:central + 28] = (10).to_bytes(4, "little")  # uncompressed size in the central record
    with pytest.raises(TaskRejected):
        upload.unpack_zip(io.BytesIO(bytes(raw)), "liar.zip")
    assert info.file_size == 5_000_000
    assert not any(p.is_file() for p in (uploads / "tasks").rglob("*"))


def test_an_unpacked_folder_holds_plain_files_that_are_not_executable(uploads):
    info = zipfile.ZipInfo("task/run.sh")
    info.external_attr = (stat.S_IFREG | 0o4755) << 16  # setuid, executable
    folder = upload.unpack_zip(_zip([(info, b"#!/bin/sh\n"), ("task/Problem.md", b"# t\n")]), "t.zip")
    assert folder.name == "task" and (folder / "Problem.md").exists()
    assert stat.S_IMODE((folder / "run.sh").stat().st_mode) == 0o644
    upload.discard(folder)
    assert not folder.exists() and not folder.parent.exists() and Path(upload.uploads_dir()).exists()
