"""The embedded evidence store: one SQLite file per run (standard library ``sqlite3``), with
FTS5 full-text search over the records' text.

Records, tags and links are append-only in the database itself: triggers refuse any UPDATE or
DELETE, so neither a bug nor a memory editor can rewrite what was recorded, whatever SQL it runs
through this connection. A record's newest version is the one no other version of its lineage
supersedes; that is computed, never stored as a flag that would have to change.
"""
from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterable

from .graph import (BRANCH_STATUSES, Author, EvidenceError, Link, Provenance, Query, Record, check_link,
                    check_record)

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    lineage INTEGER NOT NULL,
    version INTEGER NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    agent TEXT, role TEXT, person TEXT,
    iteration INTEGER, branch TEXT,
    run_id TEXT, event_seq INTEGER, execution_sha256 TEXT, artifact_sha256 TEXT,
    created REAL NOT NULL,
    UNIQUE (lineage, version)
);
CREATE INDEX IF NOT EXISTS records_by_kind ON records (kind, id);
CREATE INDEX IF NOT EXISTS records_by_agent ON records (agent, id);
CREATE INDEX IF NOT EXISTS records_by_role ON records (role, id);
CREATE INDEX IF NOT EXISTS records_by_person ON records (person, id);
CREATE INDEX IF NOT EXISTS records_by_iteration ON records (iteration, id);
CREATE TABLE IF NOT EXISTS tags (
    tag TEXT NOT NULL, record INTEGER NOT NULL REFERENCES records (id), PRIMARY KEY (tag, record)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS tags_by_record ON tags (record);
CREATE TABLE IF NOT EXISTS links (
    source INTEGER NOT NULL REFERENCES records (id), target INTEGER NOT NULL REFERENCES records (id),
    type TEXT NOT NULL, agent TEXT, role TEXT, person TEXT, created REAL NOT NULL,
    PRIMARY KEY (source, target, type)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS links_by_target ON links (target);
CREATE TABLE IF NOT EXISTS branches (
    branch TEXT PRIMARY KEY, status TEXT NOT NULL, created REAL NOT NULL
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS records_fts USING fts5 (text, content='records', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS records_indexed AFTER INSERT ON records BEGIN
    INSERT INTO records_fts (rowid, text) VALUES (new.id, new.text);
END;
"""
# Append-only, enforced by the database: one pair of triggers per table.
for _table in ("records", "tags", "links", "branches"):
    SCHEMA += f"""
CREATE TRIGGER IF NOT EXISTS {_table}_never_updated BEFORE UPDATE ON {_table} BEGIN
    SELECT RAISE(ABORT, 'evidence is append-only: {_table} cannot be updated (revise a record to supersede it)');
END;
CREATE TRIGGER IF NOT EXISTS {_table}_never_deleted BEFORE DELETE ON {_table} BEGIN
    SELECT RAISE(ABORT, 'evidence is append-only: {_table} cannot be deleted');
END;
"""

_COLUMNS = ("id, lineage, version, kind, text, agent, role, person, iteration, branch, run_id, event_seq, "
            "execution_sha256, artifact_sha256, created")
_R_COLUMNS = ", ".join("r." + c.strip() for c in _COLUMNS.split(","))
_CURRENT = "NOT EXISTS (SELECT 1 FROM records n WHERE n.lineage = r.lineage AND n.version > r.version)"
_WORD = re.compile(r"\w+", re.UNICODE)


_TABLES = frozenset(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA))


class SqliteEvidenceStore:
    """The evidence graph of one run, in ``path`` (created if missing)."""

    def __init__(self, path: str | Path, readonly: bool = False):
        """``readonly``: open an existing graph for reading only (the studio's viewers); every
        write then fails in SQLite itself. Raises EvidenceError when there is no such graph."""
        self.path = Path(path)
        self._lock = threading.RLock()
        if readonly:
            if not self.path.is_file():
                raise EvidenceError(f"no evidence graph at {self.path}")
            self._db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None,
                                       check_same_thread=False)
            # The writer creates the file a moment before its tables: a reader in that moment sees
            # a graph that is not there yet, not a broken one.
            tables = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not _TABLES <= tables:
                self._db.close()
                raise EvidenceError(f"the evidence graph at {self.path} is still being created")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One connection, used by whichever thread runs the role (a lock keeps transactions whole).
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        self._db.close()

    # --- writing ----------------------------------------------------------------------------
    def add(self, kind: str, text: str, author: Author, *, provenance: Provenance | None = None,
            tags: Iterable[str] = (), iteration: int | None = None, branch: str | None = None,
            links: Iterable[tuple[str, int]] = ()) -> Record:
        tags, links = tuple(dict.fromkeys(tags)), list(links)
        check_record(kind, text, tags)
        for type_, _ in links:
            check_link(type_)
        with self._transaction():
            record = self._insert(None, 1, kind, text, author, provenance or Provenance(), tags, iteration, branch)
            for type_, target in links:
                self._link(record.id, target, type_, author)
        return record

    def revise(self, record_id: int, text: str, author: Author, *, provenance: Provenance | None = None,
               tags: Iterable[str] | None = None, iteration: int | None = None, branch: str | None = None) -> Record:
        old = self.get(record_id)
        newest = self._db.execute("SELECT max(version) FROM records WHERE lineage = ?", (old.lineage,)).fetchone()[0]
        if newest != old.version:
            raise EvidenceError(f"record {record_id} is version {old.version} of {newest}: revise the newest version")
        tags = old.tags if tags is None else tuple(dict.fromkeys(tags))
        check_record(old.kind, text, tags)
        with self._transaction():
            record = self._insert(old.lineage, old.version + 1, old.kind, text, author, provenance or Provenance(),
                                  tags, old.iteration if iteration is None else iteration,
                                  old.branch if branch is None else branch)
            self._link(record.id, old.id, "supersedes", author)
        return record

    def link(self, source: int, target: int, type_: str, author: Author) -> Link:
        check_link(type_)
        with self._transaction():
            return self._link(source, target, type_, author)

    def _insert(self, lineage, version, kind, text, author, prov, tags, iteration, branch) -> Record:
        # Inside BEGIN IMMEDIATE: no other writer between choosing the id and using it. A new
        # lineage is named by its first record's id, known before the row is written (an
        # UPDATE afterwards is what the append-only triggers refuse).
        rid = self._db.execute("SELECT coalesce(max(id), 0) + 1 FROM records").fetchone()[0]
        lineage = rid if lineage is None else lineage
        created = time.time()
        self._db.execute(
            f"INSERT INTO records ({_COLUMNS}) VALUES ({', '.join('?' * 15)})",
            (rid, lineage, version, kind, text, author.agent, author.role, author.person, iteration, branch,
             prov.run_id, prov.event_seq, prov.execution_sha256, prov.artifact_sha256, created))
        self._db.executemany("INSERT INTO tags (tag, record) VALUES (?, ?)", [(t, rid) for t in tags])
        return Record(rid, lineage, version, kind, text, author, prov, tags, iteration, branch, created)

    def _link(self, source: int, target: int, type_: str, author: Author) -> Link:
        if source == target:
            raise EvidenceError(f"record {source} cannot {type_.replace('_', ' ')} itself")
        try:
            self._db.execute("INSERT OR IGNORE INTO links (source, target, type, agent, role, person, created) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?)",
                             (source, target, type_, author.agent, author.role, author.person, time.time()))
        except sqlite3.IntegrityError as exc:
            raise EvidenceError(f"cannot link {source} -> {target}: no such record") from exc
        return Link(source, target, type_, author)

    def _transaction(self):
        db = self._db

        lock = self._lock

        class _Tx:
            def __enter__(self):
                lock.acquire()
                db.execute("BEGIN IMMEDIATE")

            def __exit__(self, kind, exc, tb):
                try:
                    db.execute("ROLLBACK" if kind else "COMMIT")
                finally:
                    lock.release()
                if isinstance(exc, sqlite3.IntegrityError):
                    raise EvidenceError(str(exc)) from exc
                return False
        return _Tx()

    def mark_branch(self, branch: str, status: str) -> None:
        """Settle a search branch once: its records stay where they are (append-only); the
        branch's status says whether later retrieval may see them."""
        if status not in BRANCH_STATUSES:
            raise EvidenceError(f"a branch is {' or '.join(BRANCH_STATUSES)}, not {status!r}")
        try:
            with self._transaction():
                self._db.execute("INSERT INTO branches (branch, status, created) VALUES (?, ?, ?)",
                                 (branch, status, time.time()))
        except EvidenceError:
            raise EvidenceError(f"branch {branch!r} is already {self.branch_status().get(branch)}") from None

    # --- reading ----------------------------------------------------------------------------
    def branch_status(self) -> dict[str, str]:
        return dict(self._db.execute("SELECT branch, status FROM branches ORDER BY created").fetchall())

    def last_id(self) -> int:
        return self._db.execute("SELECT coalesce(max(id), 0) FROM records").fetchone()[0]

    def get(self, record_id: int) -> Record:
        row = self._db.execute(f"SELECT {_COLUMNS} FROM records WHERE id = ?", (record_id,)).fetchone()
        if row is None:
            raise EvidenceError(f"no record {record_id}")
        return self._records([row])[0]

    def history(self, record_id: int) -> list[Record]:
        lineage = self.get(record_id).lineage
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM records WHERE lineage = ? ORDER BY version", (lineage,))
        return self._records(rows.fetchall())

    def links(self, record_id: int) -> list[Link]:
        rows = self._db.execute("SELECT source, target, type, agent, role, person FROM links "
                                "WHERE source = ? OR target = ? ORDER BY created", (record_id, record_id))
        return [Link(s, t, ty, Author(a, r, p)) for s, t, ty, a, r, p in rows]

    def count(self) -> int:
        return self._db.execute("SELECT count(*) FROM records").fetchone()[0]

    def search(self, query: Query) -> list[Record]:
        where, args = [], []
        if query.kinds:
            where.append(f"r.kind IN ({', '.join('?' * len(query.kinds))})")
            args += list(query.kinds)
        for column in ("agent", "role", "person"):
            if getattr(query, column):
                where.append(f"r.{column} = ?")
                args.append(getattr(query, column))
        if query.tag:
            where.append("r.id IN (SELECT record FROM tags WHERE tag = ?)")
            args.append(query.tag)
        if query.since_iteration is not None:
            where.append("r.iteration >= ?")
            args.append(query.since_iteration)
        if query.branches is not None:
            named = [b for b in query.branches if b is not None]
            parts = (["r.branch IS NULL"] if None in query.branches else []) + \
                ([f"r.branch IN ({', '.join('?' * len(named))})"] if named else [])
            where.append("(" + " OR ".join(parts or ["0"]) + ")")
            args += named
        if query.after_id is not None:
            where.append("r.id > ?")
            args.append(int(query.after_id))
        if not query.history:
            where.append(_CURRENT)
        limit = max(1, min(int(query.limit), 1000))
        words = _WORD.findall(query.text or "")[:32]
        if words:
            rows = self._ranked(words, where, args, limit)
        else:
            sql = (f"SELECT {_R_COLUMNS} FROM records r"
                   + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.id DESC LIMIT ?")
            rows = self._db.execute(sql, [*args, limit]).fetchall()
        return self._records(rows)

    def _ranked(self, words: list[str], where: list[str], args: list, limit: int) -> list[tuple]:
        """Records matching the words, best first (bm25) among the most recent matches: records
        holding every word first, then those holding any. Each pass ranks a bounded pool of the
        newest FTS hits (which FTS5 reads newest first and stops early, where ranking every hit
        would cost in proportion to the graph), widened while the filters leave too few. Words
        are quoted: no FTS syntax in a query reaches SQLite."""
        quoted = ['"' + w.replace('"', "") + '"' for w in words]
        found: list[tuple] = []
        for match in dict.fromkeys((" AND ".join(quoted), " OR ".join(quoted))):
            seen = {row[0] for row in found}
            depth = max(200, 20 * limit)
            while True:
                sql = (f"WITH hits AS (SELECT rowid, rank FROM records_fts WHERE records_fts MATCH ? "
                       f"ORDER BY rowid DESC LIMIT ?) SELECT {_R_COLUMNS}, hits.rank FROM hits JOIN records r "
                       f"ON r.id = hits.rowid" + "".join(f" AND {w}" for w in where)
                       + " ORDER BY hits.rank, r.id DESC LIMIT ?")
                rows = [row[:-1] for row in self._db.execute(sql, [match, depth, *args, limit + len(seen)])
                        if row[0] not in seen]
                hits = self._db.execute("SELECT count(*) FROM (SELECT 1 FROM records_fts WHERE records_fts MATCH ? "
                                        "LIMIT ?)", (match, depth + 1)).fetchone()[0]
                if len(rows) >= limit - len(found) or hits <= depth:
                    break
                depth *= 8
            found += rows[:limit - len(found)]
            if len(found) >= limit:
                break
        return found

    def _records(self, rows: list[tuple]) -> list[Record]:
        if not rows:
            return []
        ids = [row[0] for row in rows]
        tags: dict[int, list[str]] = {}
        for tag, record in self._db.execute(
                f"SELECT tag, record FROM tags WHERE record IN ({', '.join('?' * len(ids))})", ids):
            tags.setdefault(record, []).append(tag)
        out = []
        for (rid, lineage, version, kind, text, agent, role, person, iteration, branch, run_id, seq, exe, art,
             created) in rows:
            out.append(Record(rid, lineage, version, kind, text, Author(agent, role, person),
                              Provenance(run_id, seq, exe, art), tuple(sorted(tags.get(rid, ()))), iteration,
                              branch, created))
        return out

    def export(self) -> dict:
        """Every record and link, for a trace-independent copy of the graph (JSON-ready)."""
        rows = self._db.execute(f"SELECT {_COLUMNS} FROM records ORDER BY id").fetchall()
        links = self._db.execute("SELECT source, target, type FROM links ORDER BY source, target, type").fetchall()
        return {"records": [r.to_dict() for r in self._records(rows)],
                "links": [{"source": s, "target": t, "type": ty} for s, t, ty in links],
                "branches": self.branch_status()}


def dumps(store: SqliteEvidenceStore) -> str:
    return json.dumps(store.export(), indent=1)
