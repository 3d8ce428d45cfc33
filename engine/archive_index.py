"""The archive's vectors as one matrix, so that a warm start's lookup is a matrix product instead
of reading, re-hashing and comparing every entry file in pure Python.

``<archive>/vectors.sqlite`` holds, per entry file, what ranking needs: its vector (float32, per
embedder), the order it was archived in and its metric's rank; the entry files stay the truth. The
index is reconciled with them by name, size and modification time whenever the entries folder
changed (a file copied in by hand, one removed, one damaged), so it can be deleted at any time and
is rebuilt from the files. Within a process the matrix is kept in memory and reloaded only when
the folder or the database changed (SQLite's ``data_version`` says when another process wrote).
Only the winning entry's file is read and checked.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import threading
from pathlib import Path
from typing import Callable

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    file TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    created TEXT NOT NULL, id TEXT NOT NULL, metric_rank REAL NOT NULL, task_text TEXT NOT NULL,
    embedder TEXT NOT NULL, readable INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS vectors (
    file TEXT NOT NULL, embedder TEXT NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (file, embedder));
"""
FILE_COLUMNS = "file, size, mtime_ns, created, id, metric_rank, task_text, embedder, readable, text_hash"


def text_hash(text: str) -> str:
    """What an entry's task text is found by (an index of the texts themselves would double the file)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


TOP = 64   # candidates handed back: the winner, and the next ones should its file no longer read


class ArchiveIndex:
    def __init__(self, entries_dir: Path, db_path: Path):
        self.entries_dir = Path(entries_dir)
        self.db_path = Path(db_path)
        self._db: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._seen: tuple | None = None        # (folder mtime_ns, data_version) the matrix was built at
        self._matrices: dict[str, tuple] = {}  # embedder -> (files, matrix of unit rows, ranks, order)

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self.db_path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.db_path, timeout=30, check_same_thread=False)
            self._db.executescript(SCHEMA)
            _add_text_hashes(self._db)
        return self._db

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    # --- keeping up with the files ---------------------------------------------------------------
    def refresh(self, read: Callable[[Path], dict | None]) -> None:
        """Index every entry file not indexed as it is now; forget the ones gone. ``read`` gives
        an entry's fields (``id``, ``created``, ``task_text``, ``embedder``, ``embedding``,
        ``metric_rank``), or None for a file that cannot be read (indexed as unreadable)."""
        if not self.entries_dir.is_dir():
            return
        folder = os.stat(self.entries_dir).st_mtime_ns
        db = self._conn()
        version = db.execute("PRAGMA data_version").fetchone()[0]
        if self._seen == (folder, version):
            return
        on_disk = {}
        with os.scandir(self.entries_dir) as it:
            for e in it:
                if e.name.endswith(".json") and not e.name.startswith(".") and e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    on_disk[e.name] = (st.st_size, st.st_mtime_ns)
        known = {f: (s, m) for f, s, m in db.execute("SELECT file, size, mtime_ns FROM files")}
        stale = [f for f in known if f not in on_disk or known[f] != on_disk[f]]
        fresh = [f for f in on_disk if known.get(f) != on_disk[f]]
        if stale or fresh:
            with db:
                db.executemany("DELETE FROM files WHERE file = ?", [(f,) for f in stale])
                db.executemany("DELETE FROM vectors WHERE file = ?", [(f,) for f in stale])
                for f in fresh:
                    size, mtime = on_disk[f]
                    fields = read(self.entries_dir / f)
                    if fields is None:
                        db.execute(f"INSERT OR REPLACE INTO files ({FILE_COLUMNS}) VALUES (?, ?, ?, '', ?, ?, '', '', 0, '')",
                                   (f, size, mtime, f, -math.inf))
                        continue
                    db.execute(f"INSERT OR REPLACE INTO files ({FILE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1, ?)",
                               (f, size, mtime, fields["created"], fields["id"], fields["metric_rank"],
                                fields["task_text"], fields["embedder"], text_hash(fields["task_text"])))
                    db.execute("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                               (f, fields["embedder"], np.asarray(fields["embedding"], dtype=np.float32).tobytes()))
            version = db.execute("PRAGMA data_version").fetchone()[0]
            self._matrices.clear()
        elif self._seen is None or self._seen[1] != version:
            self._matrices.clear()
        self._seen = (os.stat(self.entries_dir).st_mtime_ns, version)

    def files_with_text(self, text: str, embedder: str) -> list[str]:
        """Readable entry files archived for exactly this task text by ``embedder``, newest first."""
        rows = self._conn().execute("SELECT file FROM files WHERE text_hash = ? AND readable = 1 AND task_text = ? "
                                    "AND embedder = ? ORDER BY created DESC, id DESC LIMIT 8",
                                    (text_hash(text), text, embedder)).fetchall()
        return [r[0] for r in rows]

    # --- the lookup ---------------------------------------------------------------------------------
    def _matrix(self, embedder: str, embed: Callable[[str], list[float]]) -> tuple:
        if embedder in self._matrices:
            return self._matrices[embedder]
        db = self._conn()
        missing = db.execute("SELECT file, task_text FROM files WHERE readable = 1 AND file NOT IN "
                             "(SELECT file FROM vectors WHERE embedder = ?)", (embedder,)).fetchall()
        if missing:  # vectors of another model live in another space: the stored text is embedded again
            with db:
                db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                               [(f, embedder, np.asarray(embed(text), dtype=np.float32).tobytes())
                                for f, text in missing])
        rows = db.execute("SELECT f.file, v.vector, f.metric_rank FROM files f JOIN vectors v ON v.file = f.file "
                          "AND v.embedder = ? WHERE f.readable = 1 ORDER BY f.created, f.id", (embedder,)).fetchall()
        files = [r[0] for r in rows]
        dims = {len(r[1]) for r in rows}
        if len(dims) > 1:  # a model that changed its size under one name: keep the common size
            size = max(dims, key=lambda d: sum(1 for r in rows if len(r[1]) == d))
            rows = [r for r in rows if len(r[1]) == size]
            files = [r[0] for r in rows]
        matrix = np.vstack([np.frombuffer(r[1], dtype=np.float32) for r in rows]) if rows else \
            np.zeros((0, 0), dtype=np.float32)
        if len(matrix):
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            matrix = matrix / np.where(norms == 0, 1.0, norms)
        ranks = np.asarray([r[2] for r in rows], dtype=np.float64)
        self._matrices[embedder] = (files, matrix, ranks)
        return self._matrices[embedder]

    def ranked(self, query: list[float], embedder: str, embed: Callable[[str], list[float]]) -> list[tuple[str, float]]:
        """Entry files from the most similar to ``query`` down, with their cosines; among equal
        cosines the better metric first, then the newer (the archive's tie rule)."""
        with self._lock:
            files, matrix, ranks = self._matrix(embedder, embed)
        if not files:
            return []
        q = np.asarray(query, dtype=np.float32)
        if matrix.shape[1] != q.shape[0]:
            return []
        norm = float(np.linalg.norm(q))
        sims = matrix @ (q / norm) if norm else np.zeros(len(files), dtype=np.float32)
        # the best few by a partial sort (a full sort of 100k costs more than the product), every
        # entry tied with the best among them, then the archive's tie rule on those alone
        top = np.argpartition(-sims, min(TOP, len(sims) - 1))[:TOP] if len(sims) > TOP else np.arange(len(sims))
        top = np.union1d(top, np.flatnonzero(sims == sims[top].max()))
        order = top[np.lexsort((top, ranks[top], sims[top].astype(np.float64)))[::-1]]
        return [(files[i], float(sims[i])) for i in order[:TOP]]


def _add_text_hashes(db: sqlite3.Connection) -> None:
    """An index written before texts were hashed gets the column, its values and its index once."""
    if "text_hash" not in {row[1] for row in db.execute("PRAGMA table_info(files)")}:
        with db:
            db.execute("ALTER TABLE files ADD COLUMN text_hash TEXT NOT NULL DEFAULT ''")
            db.executemany("UPDATE files SET text_hash = ? WHERE file = ?",
                           [(text_hash(t), f) for f, t in db.execute("SELECT file, task_text FROM files WHERE readable = 1")])
    db.execute("CREATE INDEX IF NOT EXISTS files_by_text_hash ON files (text_hash)")


def entry_fields(path: Path, metric_rank: Callable[[dict | None], float]) -> dict | None:
    """What the index keeps of one entry file, read without building its workflow."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {"id": str(data["id"]), "created": str(data["created"]), "task_text": str(data["task_text"]),
                "embedder": str(data["embedder"]), "embedding": [float(x) for x in data["embedding"]],
                "metric_rank": metric_rank(data.get("metric"))}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return None
