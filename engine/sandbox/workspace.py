"""A sandboxed program's working directory, as both executors lay it out:
paths that cannot leave it, the inputs copied in (never through a link), the bootstrap beside the
program, a private folder for caches and TMPDIR, the environment the program sees, a uid of the
run's own, and the directory's size watched (RLIMIT_FSIZE caps one file; the capped file system
of capped_folder.py caps them all in the kernel, and DiskWatch where the engine may not mount)."""
from __future__ import annotations

import logging
import os
import random
import shutil
import stat
from pathlib import Path, PurePosixPath

from engine.sandbox import ExecutionLimits, ExecutionRequest

log = logging.getLogger(__name__)

BOOTSTRAP_SOURCE = Path(__file__).with_name("_bootstrap.py")
BOOTSTRAP_NAME = ".trellis_bootstrap.py"
PRIVATE_DIR = ".tmp"  # TMPDIR and caches: never reported as produced files
MAX_REPORTED_FILES = 10_000
# How often the working directory's size is measured: at 0.5 s a fast disk wrote 195 MB against a
# 40 MB cap between two looks (CI). Where the folder is a capped file system the kernel holds the
# cap and this only reports it sooner.
DISK_CHECK_SECONDS = 0.1
# Each run gets a uid (and gid) of its own from this range, which no account uses: its
# files are its own, and RLIMIT_NPROC counts its processes alone.
SANDBOX_ID_BASE = 1_700_000_000
SANDBOX_ID_SPAN = 100_000_000


def safe_relpath(relpath: str, what: str) -> PurePosixPath:
    """A relative path that cannot leave the working directory."""
    if not relpath or "\x00" in relpath or "\\" in relpath:
        raise ValueError(f"{what} {relpath!r} is not a valid relative path")
    path = PurePosixPath(relpath)
    if path.is_absolute() or ".." in path.parts:
        raise ValueError(f"{what} {relpath!r} must be relative and stay inside the workdir")
    if path.parts[0] in (PRIVATE_DIR, BOOTSTRAP_NAME):
        raise ValueError(f"{what} {relpath!r} uses a name reserved by the sandbox")
    return path


def validate_request(request: ExecutionRequest) -> tuple[PurePosixPath, dict[PurePosixPath, Path]]:
    entrypoint = safe_relpath(request.entrypoint, "entrypoint")
    inputs: dict[PurePosixPath, Path] = {}
    for relpath, source in request.input_files.items():
        rel = safe_relpath(str(relpath), "input file")
        if rel == entrypoint:
            raise ValueError(f"input file {relpath!r} would overwrite the entrypoint")
        source = Path(source)
        if not source.exists():
            raise ValueError(f"input file {relpath!r}: {source} does not exist")
        inputs[rel] = source
    return entrypoint, inputs


def populate(workdir: Path, request: ExecutionRequest, entrypoint: PurePosixPath,
              inputs: dict[PurePosixPath, Path]) -> set[PurePosixPath]:
    """Lay out the workdir; returns the relative paths of every file placed there."""
    placed = {entrypoint, PurePosixPath(BOOTSTRAP_NAME)}
    (workdir / PRIVATE_DIR).mkdir(exist_ok=True)  # a warm container's waits for its program there
    for rel, source in inputs.items():
        target = workdir / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, symlinks=False)
            placed.update(PurePosixPath(p.relative_to(workdir).as_posix())
                          for p in target.rglob("*") if p.is_file())
        else:
            shutil.copyfile(source, target)
            placed.add(rel)
    (workdir / entrypoint).parent.mkdir(parents=True, exist_ok=True)
    (workdir / entrypoint).write_text(request.code, encoding="utf-8")
    shutil.copyfile(BOOTSTRAP_SOURCE, workdir / BOOTSTRAP_NAME)
    return placed


def chown_tree(root: Path, uid: int, gid: int) -> None:
    os.chown(root, uid, gid)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, gid, follow_symlinks=False)


def child_env(workdir: Path) -> dict[str, str]:
    private = str(workdir / PRIVATE_DIR)
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir),
        "TMPDIR": private,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        # one thread per BLAS/OpenMP pool: predictable CPU use, and no thread pools
        # reserving address space against RLIMIT_AS
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
        "MPLBACKEND": "Agg",
        # caches go to the private dir so they are not reported as produced files
        "XDG_CACHE_HOME": private,
        "MPLCONFIGDIR": private,
        # joblib probes for POSIX semaphores at import, which the sandbox denies;
        # process pools are denied anyway, so ask for serial mode up front
        "JOBLIB_MULTIPROCESSING": "0",
    }


def fresh_ids() -> tuple[int, int]:
    """A uid and gid for one run: unused by any account and, with overwhelming odds, by
    any other run going on at the same time."""
    n = SANDBOX_ID_BASE + random.SystemRandom().randrange(SANDBOX_ID_SPAN)
    return n, n


def disk_usage(workdir: Path, max_files: int) -> tuple[int, int]:
    """(bytes allocated, entries) under the working directory, links not followed; stops
    counting past ``max_files`` entries."""
    used = entries = 0
    stack = [str(workdir)]
    while stack and entries <= max_files:
        try:
            with os.scandir(stack.pop()) as listing:
                for entry in listing:
                    entries += 1
                    try:
                        info = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    used += info.st_blocks * 512  # allocated, so a sparse file counts as it is
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
        except OSError:
            continue
    return used, entries


class DiskWatch:
    """RLIMIT_FSIZE caps one file; this caps the whole working directory (bytes and
    entries), so a program cannot fill the engine's disk with many files."""

    def __init__(self, workdir: Path | None, limits: ExecutionLimits) -> None:
        self.workdir = workdir
        self.max_bytes = limits.max_disk_mb * 1024 * 1024
        self.max_files = limits.max_files
        self.next_check = 0.0

    def problem(self, now: float) -> str:
        if self.workdir is None or now < self.next_check:
            return ""
        self.next_check = now + DISK_CHECK_SECONDS
        used, entries = disk_usage(self.workdir, self.max_files)
        if used > self.max_bytes:
            return f"its files reached {used // (1024 * 1024)} MB, over the limit of {self.max_bytes // (1024 * 1024)} MB"
        if entries > self.max_files:
            return f"it created over {self.max_files} files and folders"
        return ""
