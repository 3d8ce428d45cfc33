"""A program's working directory whose size the kernel enforces, and what is kept of it after.

Watching the folder's size (workspace.DiskWatch) only narrows the window: ``posix_fallocate``
reserved 906 MB against a 40 MB cap between two looks. So, where the engine may mount (it runs
as root, as the sandbox's other kernel layers need), each working directory is a file system of
its own, sized to ``max_disk_mb`` with ``max_files`` inodes, mounted ``nosuid,nodev``:

* ``loop``: an ext4 image (sparse, so it takes only what is written) on a loop device, beside the
  folder. Disk-backed: the program's files do not count against its memory.
* ``tmpfs``: where loop devices are not offered; its pages count against the program's memory
  cgroup, which is said on the page when the memory cap is what stopped it.

Both executors run on top of it (Docker bind-mounts the same folder), and the program meets
ENOSPC at the cap. Elsewhere the watch is all there is, and a warning says so once.

After the run only the program's outputs stay: they are copied off the small file system (or
moved, with no mount), hashed as copied, and everything else (the inputs' copies, the program,
caches) is removed, so a long search does not pile one copy of the task's data per program on the
database's disk. A worker killed mid-run leaves a mount behind; the next executor on the same
root unmounts what no live process owns (the owner is in the folder's name)."""
from __future__ import annotations

import errno
import hashlib
import logging
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Callable

from engine.sandbox import ExecutionResult
from engine.sandbox.workspace import MAX_REPORTED_FILES, PRIVATE_DIR, populate

if TYPE_CHECKING:
    from engine.sandbox import ExecutionRequest

log = logging.getLogger(__name__)

# ext4's own bookkeeping (superblocks, bitmaps, 128-byte inodes) is added to the image so that
# the program can write about max_disk_mb, not max_disk_mb less a few per cent.
INODE_BYTES = 128
METADATA_SLACK = 4 * 1024 * 1024
# A cap is "reached" when less than this is left: a note then says why writes failed.
FULL_SLACK = 1024 * 1024
ENOSPC_SIGNS = ("No space left on device", "[Errno 28]", "ENOSPC", "Disk quota exceeded")
COMMAND_SECONDS = 30

_unavailable_warned = False


def owner_tag() -> str:
    """This process, as a name that survives pid reuse: pid and start time (clock ticks since boot)."""
    return f"{os.getpid()}x{_start_ticks(os.getpid())}"


def _start_ticks(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return "0"


def _owner_alive(tag: str) -> bool:
    pid, _, ticks = tag.partition("x")
    if not pid.isdigit():
        return True  # not ours to judge
    return os.path.exists(f"/proc/{pid}") and _start_ticks(int(pid)) == ticks


def _run(argv: list[str]) -> str:
    """'' when the command succeeded, else what it said."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_SECONDS, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    return "" if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")[:300]


class CappedFolder:
    """One working directory. ``mount()`` before anything is written there; ``keep_outputs()``
    after the program is dead; ``release()`` always (idempotent)."""

    def __init__(self, path: Path, max_bytes: int, max_files: int) -> None:
        self.path = Path(path)
        self.max_bytes = max(1, int(max_bytes))
        self.max_files = max(16, int(max_files))
        self.image = self.path.with_name(self.path.name + ".disk")
        self.kind = ""  # "loop", "tmpfs", or "" (watched only)

    # -- before the run --------------------------------------------------------

    def mount(self) -> str:
        """Mount a file system of the cap's size on the folder; returns its kind ('' where the
        engine may not mount: the size is then only watched)."""
        if os.geteuid() != 0:
            _warn_unenforced_once("Trellis is not running as root, so it cannot mount one")
            return ""
        problem = self._mount_loop()
        if problem:
            log.info("sandbox: no loop file system for %s (%s); trying tmpfs", self.path.name, problem)
            problem = self._mount_tmpfs()
        if problem:
            _warn_unenforced_once(problem)
        return self.kind

    def _mount_loop(self) -> str:
        size = self.max_bytes + self.max_files * INODE_BYTES + METADATA_SLACK
        try:
            with open(self.image, "wb") as fh:
                fh.truncate(size)
        except OSError as exc:
            return str(exc)
        problem = _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-I", str(INODE_BYTES),
                        "-N", str(self.max_files + 16), str(self.image)])
        problem = problem or _run(["mount", "-t", "ext4", "-o", "loop,nosuid,nodev", str(self.image), str(self.path)])
        if problem:
            self.image.unlink(missing_ok=True)
            return problem
        self.kind = "loop"
        try:
            (self.path / "lost+found").rmdir()  # not the program's, and never reported as an output
        except OSError:
            pass
        os.chmod(self.path, 0o700)
        return ""

    def _mount_tmpfs(self) -> str:
        options = f"size={self.max_bytes},nr_inodes={self.max_files + 16},mode=0700,nosuid,nodev"
        problem = _run(["mount", "-t", "tmpfs", "-o", options, "trellis-sandbox", str(self.path)])
        if not problem:
            self.kind = "tmpfs"
        return problem

    # -- after the run -----------------------------------------------------------

    def full(self, stderr: str = "") -> str:
        """Why the program's writes were refused, when the cap was reached ('' otherwise). ext4
        refuses a write with a little space still free (it reserves for what is being written), so
        "full" is nearly no space left, or little left and the program saying ENOSPC."""
        if not self.kind:
            return ""
        try:
            info = os.statvfs(self.path)
        except OSError:
            return ""
        free = info.f_bavail * info.f_frsize
        said = any(sign in stderr[-20000:] for sign in ENOSPC_SIGNS)
        if free < max(FULL_SLACK, self.max_bytes // 50) or (said and free < self.max_bytes // 10):
            mb = self.max_bytes // (1024 * 1024)
            return f"its files reached the working directory's limit of {mb} MB (max_disk_mb); further writes were refused"
        if info.f_favail == 0 or (said and info.f_favail < max(16, self.max_files // 100)):
            return (f"it reached the working directory's limit of {self.max_files} files and folders (max_files); "
                    "further ones were refused")
        return ""

    def keep_outputs(self, skip: set[PurePosixPath], skip_dirs: tuple[str, ...] = ()) -> dict[str, str]:
        """Keep only what the program produced (regular files, links never followed), hashed as
        kept; everything else in the folder is removed and the file system unmounted.
        relative path -> sha256."""
        staging = self.path.with_name(self.path.name + ".out")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(mode=0o700)
        kept: dict[str, str] = {}
        try:
            for rel in _produced(self.path, skip, skip_dirs):
                digest = _take(self.path / rel, staging / rel, move=not self.kind)
                if digest is not None:
                    kept[rel] = digest
        finally:
            self.release()
            shutil.rmtree(self.path, ignore_errors=True)
            staging.rename(self.path)
        return kept

    def release(self) -> None:
        """Unmount (lazily when something still holds it) and delete the image."""
        if self.kind:
            if _run(["umount", str(self.path)]):
                problem = _run(["umount", "-l", str(self.path)])
                if problem:
                    log.error("sandbox: could not unmount %s: %s", self.path, problem)
            self.kind = ""
        self.image.unlink(missing_ok=True)


def _produced(root: Path, skip: set[PurePosixPath], skip_dirs: tuple[str, ...]) -> list[str]:
    found: list[str] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = PurePosixPath(os.path.relpath(dirpath, root))
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__"
                             and not (rel_dir == PurePosixPath(".") and d in skip_dirs))
        for name in sorted(filenames):
            rel = PurePosixPath(os.path.normpath(rel_dir / name))
            if rel in skip:
                continue
            if len(found) >= MAX_REPORTED_FILES:
                log.warning("sandbox run %s produced over %d files; the rest are not kept", root, MAX_REPORTED_FILES)
                return found
            found.append(str(rel))
    return found


def _take(source: Path, target: Path, move: bool) -> str | None:
    """Copy (or move) one regular file, never through a link or a FIFO; its sha256, or None."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        if move:
            for block in iter(lambda: handle.read(1024 * 1024), b""):
                digest.update(block)
            try:
                os.rename(source, target)
                return digest.hexdigest()
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    return None
                handle.seek(0)
                digest = hashlib.sha256()
        with open(target, "wb") as out:
            for block in iter(lambda: handle.read(1024 * 1024), b""):
                digest.update(block)
                out.write(block)
        return digest.hexdigest()


def unmount_orphans(root: Path, anywhere_below: bool = False) -> int:
    """Unmount working directories under ``root`` (directly in it, or ``anywhere_below``) left
    mounted by a process that is gone (a worker killed mid-run); the number unmounted. A folder
    whose owner still runs is never touched."""
    root = Path(root).resolve()
    count = 0
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            points = [line.split()[4] for line in fh if len(line.split()) > 4]
    except OSError:
        return 0
    for point in points:
        path = Path(point.replace("\\040", " "))
        below = path.is_relative_to(root) if anywhere_below else path.parent == root
        if not below or not path.name.startswith("run-") or path.name.count("-") < 2:
            continue
        if _owner_alive(path.name.split("-")[1]):
            continue
        folder = CappedFolder(path, 1, 16)
        folder.kind = "orphan"
        folder.release()
        count += 1
    return count


def workdir_prefix() -> str:
    """The working directory's name prefix: it names its owner, for unmount_orphans."""
    return f"run-{owner_tag()}-"


def _warn_unenforced_once(why: str) -> None:
    global _unavailable_warned
    if _unavailable_warned:
        return
    _unavailable_warned = True
    log.warning("sandbox: the working directory's size cap is only watched, not enforced by the kernel (%s); "
                "a program can briefly write past max_disk_mb", why)


def is_enospc(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def run_in_capped_folder(root: Path, request: ExecutionRequest, entrypoint: PurePosixPath, inputs: dict[PurePosixPath, Path],
                         executor: str, keep: bool, execute: Callable[[Path], ExecutionResult],
                         folder: CappedFolder | None = None) -> ExecutionResult:
    """One program's working directory from birth to what is kept, as both executors live it: made
    under ``root`` (its name says its owner), mounted at the cap, laid out (inputs over the cap
    refused with the reason), ``execute(workdir)`` run, the cap's refusal said, the outputs kept and
    hashed, the file system released (and the folder removed unless ``keep``).

    ``folder``: one made and mounted beforehand (a warm container's, sized to this request's
    limits), used instead of a new one; all that follows it is the same."""
    premade = folder is not None
    if folder is None:
        if (refused := cap_above_free_space(root, request.limits, executor)) is not None:
            return refused
        folder = CappedFolder(Path(tempfile.mkdtemp(prefix=workdir_prefix(), dir=root)),
                              request.limits.max_disk_mb * 1024 * 1024, request.limits.max_files)
    workdir = folder.path
    try:
        if not premade:
            folder.mount()  # on the host: Docker's bind mount of the folder is the capped file system too
        try:
            placed = populate(workdir, request, entrypoint, inputs)
        except OSError as exc:
            if (refused := inputs_too_big(exc, request.limits, workdir, executor)) is None:
                raise
            return refused
        result = execute(workdir)
        if why := folder.full(result.stderr):
            result.stderr += f"\nsandbox: {why}\n"
        try:
            result.files = folder.keep_outputs(skip=placed, skip_dirs=(PRIVATE_DIR,))
        except OSError as exc:
            if not is_enospc(exc):
                raise
            # the disk the outputs are kept on is full: the program failed, the engine goes on
            result.status, result.files = "error", {}
            result.stderr += (f"\nsandbox: its outputs could not be kept: no space left where programs run "
                              f"({exc}); free some space on the workers' disk\n")
        return result
    except OSError as exc:
        if not is_enospc(exc):
            raise

        return ExecutionResult(status="error", exit_code=None, stdout="",
                               stderr=f"sandbox: no space left where programs run ({exc}); the program could "
                                      "not be run; free some space on the workers' disk",
                               duration_s=0.0, workdir=workdir, files={}, executor=executor)
    finally:
        folder.release()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)


def cap_above_free_space(root: Path, limits, executor: str):
    """The failed result for a working-directory cap above the free space of the disk it is made
    on (a sparse image that big is no cap: the disk fills first), else None."""
    try:
        free_mb = shutil.disk_usage(root).free // (1024 * 1024)
    except OSError:
        return None
    if limits.max_disk_mb <= free_mb:
        return None
    return ExecutionResult(status="error", exit_code=None, stdout="",
                           stderr=(f"sandbox: the program's working-directory cap of {limits.max_disk_mb} MB "
                                   f"(max_disk_mb) is above the {free_mb} MB free where programs run, so it "
                                   "would be no cap; lower max_disk_mb in the task's limits or free some space"),
                           duration_s=0.0, workdir=Path(root), files={}, executor=executor)


def inputs_too_big(exc: OSError, limits, workdir: Path, executor: str):
    """The failed result for inputs that do not fit the working directory (None: another error)."""
    if not is_enospc(exc):
        return None
    return ExecutionResult(status="error", exit_code=None, stdout="",
                           stderr=(f"sandbox: the program's inputs do not fit its working directory's limit of "
                                   f"{limits.max_disk_mb} MB (max_disk_mb) or {limits.max_files} files (max_files); "
                                   "raise the limit in the task's resources"),
                           duration_s=0.0, workdir=workdir, files={}, executor=executor)
