"""A content-addressed store for files that agents hand each other."""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_text_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` whole: a crash mid-write leaves the old file (or none) and
    never a half-written one; the temporary file is removed when the write fails."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ArtifactStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path_for(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def put_file(self, path: Path) -> str:
        sha = sha256_file(path)
        dest = self.path_for(sha)
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
        return sha

    def put_stream(self, handle: BinaryIO) -> str:
        """Store what an open file holds (hashed while copied, so what is stored is what
        was hashed, whatever happens to the file afterwards)."""
        h = hashlib.sha256()
        self.root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=self.root, prefix=".incoming-", delete=False) as tmp:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                h.update(chunk)
                tmp.write(chunk)
        sha = h.hexdigest()
        dest = self.path_for(sha)
        if dest.exists():
            os.unlink(tmp.name)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp.name, dest)
        return sha

    def put_bytes(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        dest = self.path_for(sha)
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        return sha

    def read(self, sha: str) -> bytes | None:
        p = self.path_for(sha)
        return p.read_bytes() if p.exists() else None
