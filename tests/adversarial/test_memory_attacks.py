"""A generated program cannot reach the team's memory: the evidence graph sits in the run's
folder, two levels above the program's working directory, and the program knows its path.
Whatever it tries (a relative path, the absolute path, libc through ctypes, a symlink, a forked
child), the graph is unchanged afterwards, byte for byte, and its records are as they were."""
from __future__ import annotations

import hashlib
import textwrap
from pathlib import Path

from engine.evidence import Author, Query, SqliteEvidenceStore
from engine.sandbox import ExecutionLimits, ExecutionRequest
from engine.sandbox.subprocess_executor import SubprocessExecutor


def test_a_program_cannot_read_or_rewrite_the_evidence_graph(tmp_path):
    graph = tmp_path / "evidence.sqlite"
    store = SqliteEvidenceStore(graph)
    store.add("check_result", "FAIL output_schema: predictions lack column y", Author("verifier", "verifier"))
    store.close()
    before = hashlib.sha256(graph.read_bytes()).hexdigest()
    code = textwrap.dedent(f"""
        import ctypes, os, sqlite3
        target = {str(graph)!r}
        tries = [target, "../../evidence.sqlite", "../evidence.sqlite"]
        got = []
        for path in tries:
            try:
                with open(path, "r+b") as fh:
                    fh.write(b"\\0" * 4096)
                got.append("wrote " + path)
            except Exception as exc:
                got.append(type(exc).__name__)
            try:
                db = sqlite3.connect(path)
                db.execute("INSERT INTO records (id, lineage, version, kind, text, created) "
                           "VALUES (99, 99, 1, 'note', 'planted', 0)")
                db.commit()
                got.append("planted " + path)
            except Exception as exc:
                got.append(type(exc).__name__)
        libc = ctypes.CDLL(None)
        fd = libc.open(target.encode(), os.O_RDWR)
        got.append("libc fd %d" % fd)
        if fd >= 0:
            libc.write(fd, b"\\0" * 4096, 4096)
        try:
            os.symlink(target, "graph")
            with open("graph", "r+b") as fh:
                fh.write(b"\\0" * 4096)
            got.append("wrote through a symlink")
        except Exception as exc:
            got.append(type(exc).__name__)
        pid = os.fork()
        if pid == 0:
            try:
                with open(target, "ab") as fh:
                    fh.write(b"child")
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        print(got)
    """)
    result = SubprocessExecutor(root=tmp_path / "sandboxes").run(
        ExecutionRequest(code=code, input_files={}, limits=ExecutionLimits(wall_seconds=30, cpu_seconds=30)))
    assert hashlib.sha256(graph.read_bytes()).hexdigest() == before, result.stdout + result.stderr
    assert "wrote " + str(graph) not in result.stdout and "planted" not in result.stdout
    records = SqliteEvidenceStore(graph).search(Query(limit=10))
    assert [r.text for r in records] == ["FAIL output_schema: predictions lack column y"]
    assert Path(graph).exists()
