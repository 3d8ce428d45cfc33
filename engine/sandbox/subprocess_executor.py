"""Run generated Python in a confined child interpreter.

Confinement, from the outside in:

* a cgroup of its own (memory of the whole process tree, number of tasks), joined in
  ``preexec_fn``, where the kernel offers one to this engine (cgroups.py);
* rlimits (address space, CPU, file size, no core dumps), set in ``preexec_fn``;
* a new session, so a wall-clock timeout kills the whole process group;
* inside the child, ``_bootstrap.py`` adds network, PID, mount, IPC and UTS namespaces,
  a private file-system view (a fresh root holding only the interpreter, the system
  libraries and the working directory), then becomes a uid of this run's own (never
  root; it fails closed when it cannot), then Landlock, a seccomp filter and an audit
  hook before the user's program starts (see there).

The audit hook reports every denied action as a ``TRELLIS-SANDBOX-VIOLATION:`` line on
stderr; this module turns those into ``ExecutionResult.violations``.
"""
from __future__ import annotations

import ctypes
import json
import logging
import os
import resource
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from engine.sandbox import ExecutionLimits, ExecutionRequest, ExecutionResult, ExecutionStatus, cgroups
from engine.sandbox.capped_folder import run_in_capped_folder, unmount_orphans
from engine.sandbox.output import (DEFAULT_OUTPUT_CAP, MEMORY_MARKERS, MarkerScanner, TailBuffer, strip_info_lines,
                                   supervisor_notes)
from engine.sandbox.workspace import BOOTSTRAP_NAME, DiskWatch, child_env, chown_tree, fresh_ids, validate_request

log = logging.getLogger(__name__)

DRAIN_SECONDS = 1.0  # after exit, how long to wait for pipes held open by leftovers
REAP_SECONDS = 5.0  # after SIGKILL, how long to wait for the kernel to reap


# -------------------------------------------------------------- child process

def _rlimits(limits: ExecutionLimits) -> list[tuple[int, int, int]]:
    """Computed in the parent so that preexec_fn (which runs between fork and exec,
    possibly in a multi-threaded engine) only makes setrlimit calls."""
    wanted = [
        (resource.RLIMIT_AS, limits.memory_mb * 1024 * 1024, None),
        # soft limit -> SIGXCPU, hard limit a little later -> SIGKILL
        (resource.RLIMIT_CPU, max(1, int(limits.cpu_seconds)), max(1, int(limits.cpu_seconds)) + 2),
        (resource.RLIMIT_FSIZE, limits.max_file_mb * 1024 * 1024, None),
        (resource.RLIMIT_CORE, 0, None),
    ]
    result = []
    for which, soft, hard in wanted:
        hard = soft if hard is None else hard
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:  # cannot raise it without privileges
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        result.append((which, soft, hard))
    return result


PR_SET_PDEATHSIG = 1


def _libc_prctl():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _make_preexec(rlimits: list[tuple[int, int, int]], cgroup_procs: list[str]):
    prctl, parent = _libc_prctl(), os.getpid()  # looked up here: nothing is loaded after the fork

    def preexec() -> None:
        # The program dies with the engine process supervising it (a worker killed with kill -9):
        # nobody would enforce its wall clock or read what it writes any more.
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the supervisor died before the line above
                os._exit(137)
        # Join the run's cgroup before anything of the program exists: every process it
        # ever starts is born inside and counted against the tree's caps.
        for procs in cgroup_procs:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        for which, soft, hard in rlimits:
            resource.setrlimit(which, (soft, hard))
    return preexec


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class _Outcome:
    reaped: bool = False
    returncode: int | None = None
    cpu_seconds: float = 0.0
    max_rss_kb: int = 0
    wall_timeout: bool = False
    disk_exceeded: str = ""  # why the program's files were too much, when they were
    stopped: bool = False  # its watcher (a training job's person) asked to stop it
    stdout: TailBuffer | None = None
    stderr: TailBuffer | None = None
    scanner: MarkerScanner = field(default_factory=MarkerScanner)


def _try_reap(pid: int) -> tuple[int | None, object] | None:
    """None while it runs; (exit code, rusage) once reaped; (None, None) when someone
    else (an engine-wide SIGCHLD handler) reaped it first and the status is lost."""
    try:
        done, status, usage = os.wait4(pid, os.WNOHANG)
    except ChildProcessError:
        return None, None
    if done == 0:
        return None
    return os.waitstatus_to_exitcode(status), usage


def _supervise(proc: subprocess.Popen, wall_seconds: float, cap: int,
               disk: DiskWatch | None = None, watch=None) -> _Outcome:
    """Pump both pipes, enforce the wall clock and reap the child, all in one loop
    (no reader threads that a leftover grandchild holding a pipe could hang)."""
    outcome = _Outcome(stdout=TailBuffer(cap), stderr=TailBuffer(cap))
    sinks = {proc.stdout.fileno(): outcome.stdout, proc.stderr.fileno(): outcome.stderr}
    selector = selectors.DefaultSelector()
    for fd in sinks:
        selector.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + wall_seconds
    killed_at = drain_until = None
    try:
        while True:
            now = time.monotonic()
            if not outcome.reaped:
                reaped = _try_reap(proc.pid)
                if reaped is not None:
                    outcome.reaped = True
                    outcome.returncode, usage = reaped
                    # we reaped it, not Popen: stop Popen from waiting for it again
                    proc.returncode = -1 if outcome.returncode is None else outcome.returncode
                    if usage is not None:
                        outcome.cpu_seconds = usage.ru_utime + usage.ru_stime
                        outcome.max_rss_kb = usage.ru_maxrss
                    _kill_group(proc.pid)  # anything it left behind in its group
                    drain_until = now + DRAIN_SECONDS
                elif killed_at is None and now >= deadline:
                    outcome.wall_timeout = True
                    _kill_group(proc.pid)
                    killed_at = now
                elif killed_at is None and disk and (problem := disk.problem(now)):
                    outcome.disk_exceeded = problem
                    _kill_group(proc.pid)
                    killed_at = now
                elif killed_at is None and watch is not None and _watch_says_stop(watch, disk):
                    outcome.stopped = True
                    _kill_group(proc.pid)
                    killed_at = now
                elif killed_at is not None and now - killed_at > REAP_SECONDS:
                    log.error("sandbox child %s did not die after SIGKILL", proc.pid)
                    break
            if not selector.get_map():
                if outcome.reaped:
                    break
                time.sleep(0.05)  # it closed its pipes but is still running
                continue
            if drain_until is not None and now > drain_until:
                break
            for key, _ in selector.select(timeout=0.05):
                _pump(key.fd, sinks[key.fd], outcome, selector)
    finally:
        selector.close()
        proc.stdout.close()
        proc.stderr.close()
    return outcome


def _watch_says_stop(watch, disk: DiskWatch | None) -> bool:
    """Ask the request's watcher (it throttles itself); a watcher that fails never kills the program."""
    try:
        return bool(watch(disk.workdir)) if disk is not None and disk.workdir is not None else False
    except Exception:  # noqa: BLE001
        log.exception("sandbox: the run's watcher failed")
        return False


def _pump(fd: int, sink: TailBuffer, outcome: _Outcome, selector: selectors.BaseSelector) -> None:
    try:
        data = os.read(fd, 256 * 1024)
    except OSError:
        data = b""
    if not data:
        selector.unregister(fd)
        return
    sink.append(data)
    if sink is outcome.stderr:
        outcome.scanner.feed(data)


def _classify(outcome: _Outcome, stderr: str, limits: ExecutionLimits,
              memory_exhausted: bool = False) -> ExecutionStatus:
    code = outcome.returncode
    if outcome.scanner.violations:
        return "violation"
    if memory_exhausted and code != 0:
        return "memory"  # the tree hit its cgroup cap (in any process, not only the first)
    if outcome.wall_timeout or code == -signal.SIGXCPU:
        return "timeout"
    if code == -signal.SIGKILL and outcome.cpu_seconds >= limits.cpu_seconds:
        return "timeout"  # ignored SIGXCPU, then the hard CPU limit
    if code == 0:
        return "ok"
    if any(marker in stderr[-20000:] for marker in MEMORY_MARKERS):
        return "memory"
    if code == -signal.SIGKILL and outcome.max_rss_kb >= limits.memory_mb * 1024 * 0.9:
        return "memory"  # the kernel's OOM killer
    if code is not None and code < 0:
        return "killed"
    return "error"


# ------------------------------------------------------------------- executor

class SubprocessExecutor:
    """Runs each request in a fresh working directory under ``root``.

    When the engine runs as root, every program runs as a uid/gid of its own (from
    ``SANDBOX_ID_BASE``) inside a private file-system view; a program is never run as
    root: where the view cannot be built, the run fails with the reason.
    ``python``: the interpreter for the programs, ``sys.executable`` unless given.
    ``extra_read_paths``: further host trees the programs may read (e.g. shared data)."""

    name = "subprocess"

    def __init__(self, root: str | Path | None = None, keep: bool = True, *,
                 output_cap_bytes: int = DEFAULT_OUTPUT_CAP,
                 extra_read_paths: tuple[str, ...] = (), python: str | None = None) -> None:
        if root is None:
            root = tempfile.mkdtemp(prefix="trellis-sandbox-")
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        # the engine's own interpreter, so programs see the same installed packages
        self.python = python or sys.executable
        self.output_cap_bytes = output_cap_bytes
        self.extra_read_paths = tuple(str(Path(p).resolve()) for p in extra_read_paths)
        unmount_orphans(self.root)

    @property
    def drops_privileges(self) -> bool:
        """Whether children run as a user of their own (always, when the engine is root)."""
        return os.geteuid() == 0

    # -- running ------------------------------------------------------------

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        entrypoint, inputs = validate_request(request)
        if not self.drops_privileges:
            _warn_shared_uid_once()

        def execute(workdir: Path) -> ExecutionResult:
            if not self.drops_privileges:
                return self._execute(workdir, request, entrypoint, None, None)
            ids = fresh_ids()
            os.chmod(self.root, 0o711)  # the run's user must traverse, not list
            chown_tree(workdir, *ids)
            view_root = workdir.with_name(workdir.name + ".view")
            view_root.mkdir(mode=0o700)
            try:
                return self._execute(workdir, request, entrypoint, ids, view_root)
            finally:
                view_root.rmdir()  # only ever a mount point, in the child's namespace

        return run_in_capped_folder(self.root, request, entrypoint, inputs, self.name, self.keep, execute)

    def _command(self, workdir: Path, request: ExecutionRequest, entrypoint: PurePosixPath,
                 ids: tuple[int, int] | None, view_root: Path | None) -> list[str]:
        config = {"workdir": str(workdir), "entrypoint": str(entrypoint),
                  "args": list(request.args), "extra_read": list(self.extra_read_paths),
                  "max_processes": request.limits.max_processes}
        if ids is not None:
            config.update(uid=ids[0], gid=ids[1], view_root=str(view_root))
        # -I: no PYTHON* env, no user site, no cwd on sys.path; -B: no .pyc writes;
        # -u: a killed program still leaves its last output behind
        return [self.python, "-I", "-B", "-u", str(workdir / BOOTSTRAP_NAME),
                json.dumps(config)]

    def _execute(self, workdir: Path, request: ExecutionRequest, entrypoint: PurePosixPath,
                 ids: tuple[int, int] | None, view_root: Path | None) -> ExecutionResult:
        limits = request.limits
        cgroup = cgroups.create(limits.memory_mb, limits.max_processes)
        started = time.monotonic()
        try:
            try:
                proc = subprocess.Popen(
                    self._command(workdir, request, entrypoint, ids, view_root), cwd=workdir,
                    env=child_env(workdir), stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True,
                    start_new_session=True,
                    preexec_fn=_make_preexec(_rlimits(limits), cgroup.procs_files if cgroup else []),
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return ExecutionResult(status="error", exit_code=None, stdout="",
                                       stderr=f"sandbox: could not start the program: {exc}",
                                       duration_s=time.monotonic() - started, workdir=workdir,
                                       files={}, executor=self.name)
            outcome = _supervise(proc, limits.wall_seconds, self.output_cap_bytes,
                                 DiskWatch(workdir, limits), request.watch)
            memory_exhausted = bool(cgroup and cgroup.memory_exhausted())
            process_cap_hit = bool(cgroup and cgroup.process_limit_hit())
        finally:
            if cgroup:
                cgroup.remove()
        duration = time.monotonic() - started
        stderr = strip_info_lines(outcome.stderr.text()) + supervisor_notes(outcome, limits)
        for line in outcome.scanner.info:
            log.debug("sandbox layers for %s: %s", workdir, line)
        if memory_exhausted:
            stderr += (f"\nsandbox: the program's processes together reached the memory limit "
                       f"of {limits.memory_mb} MB\n")
        if process_cap_hit:
            stderr += (f"\nsandbox: the program reached its limit of {limits.max_processes} "
                       "processes and threads; more were refused\n")
        status = _classify(outcome, stderr, limits, memory_exhausted)
        hide = _host_path_hider(workdir, view_root)
        return ExecutionResult(
            status=status, exit_code=outcome.returncode,
            stdout=hide(outcome.stdout.text()), stderr=hide(stderr), duration_s=duration,
            workdir=workdir, files={}, violations=list(outcome.scanner.violations),
            executor=self.name,
        )


def _host_path_hider(workdir: Path, view_root: Path | None):
    """What the program printed, with this machine's paths (the sandbox folder's random name, the
    Python environment's install prefix) said the same way on every machine: a traceback through
    site-packages reaches the models' prompts, and a prompt that names the host differs from one
    machine to the next (a recorded run would not replay elsewhere) and tells a model the host's layout."""
    swaps = {str(workdir) + "/": "", str(workdir): "."}
    if view_root is not None:
        swaps.update({str(view_root) + "/": "", str(view_root): "."})
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:
        for form in {prefix, os.path.realpath(prefix)}:
            if len(form) > 1:
                swaps[form] = "<python>"
    ordered = sorted(swaps.items(), key=lambda kv: -len(kv[0]))  # the longest first: a venv inside a prefix

    def hide(text: str) -> str:
        for host, said in ordered:
            text = text.replace(host, said)
        return text
    return hide


_shared_uid_warned = False


def _warn_shared_uid_once() -> None:
    """Say once per process, not once per program, that programs run as the engine's user."""
    global _shared_uid_warned
    if _shared_uid_warned:
        return
    _shared_uid_warned = True
    log.warning("sandbox: Trellis is not running as root, so generated programs run under your own uid "
                "(%d) rather than a uid of each run's own; the other confinement layers apply where the "
                "kernel allows them (run as root for all of them)", os.geteuid())


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers (0: none), i.e. whether the kernel layer of
    the file-system confinement is in force in addition to the audit hook."""
    numbers = {"x86_64": 444, "aarch64": 444}.get(os.uname().machine)
    if numbers is None:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    return max(libc.syscall(numbers, None, ctypes.c_size_t(0), ctypes.c_uint32(1)), 0)
