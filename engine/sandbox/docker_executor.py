"""Run generated Python in a Docker container of its own (the docker SDK).

The working directory is laid out on the host exactly as the subprocess executor lays it out
(the inputs copied in, the program, the bootstrap), owned by a uid of this run's own, and
bind-mounted at ``/work``; each input is then bind-mounted read-only over its copy, so the
program can read its inputs and write anything else beside them, and nothing more. The
container:

* has no network (``network_mode="none"``), a read-only root and a small tmpfs at ``/tmp``;
* runs as the run's unprivileged uid with every capability dropped and no-new-privileges,
  under Docker's default seccomp profile, with tini as pid 1 (every process it starts dies
  with it);
* has a memory cap with no swap beyond it, a PID cap (processes and threads), a CPU quota and
  the rlimits of the subprocess sandbox (CPU seconds, file size, no core dumps);
* runs the same ``_bootstrap.py`` first, so the audit hook and seccomp filter of the
  subprocess sandbox hold here too and a denied action is reported the same way (a
  ``violation``); the kernel layers the container already provides (namespaces, the private
  root) it finds refused and skips.

Starting a container is most of a short program's cost, so where the engine runs as root a pool
(warm_pool.py) keeps started containers ready, one per set of container-level limits
(``ContainerSpec``) by default, each used for one program only. A warm container is the cold one
with two differences: its command is a waiter that ``exec``s the same bootstrap command line once
the engine hands it a program (through a FIFO in the working directory's private folder, which
the engine holds open), and, since nothing can be mounted into a running container, the inputs
are copied in and made read-only by ownership (warm_pool.seal_inputs) rather than by mounts. The
uid is the slot's own, chosen when it was made. Without a ready slot, or with
``TRELLIS_SANDBOX_WARM=0``, a request runs cold, as before.

The engine enforces the wall clock, the size of the working directory and a request's
``watch``, and removes the container whatever happens (an interrupted engine included; one
killed outright leaves containers that the next DockerExecutor removes). Outputs are hashed
and read on the host exactly as the subprocess executor's are (never through a link).
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from functools import partial
from pathlib import Path, PurePosixPath

from engine.errors import ExecutorLost
from engine.sandbox import ExecutionLimits, ExecutionRequest, ExecutionResult, ExecutionStatus
from engine.sandbox.capped_folder import CappedFolder, run_in_capped_folder, unmount_orphans, workdir_prefix
from engine.sandbox.output import (DEFAULT_OUTPUT_CAP, MEMORY_MARKERS, MarkerScanner, TailBuffer, strip_info_lines,
                                   supervisor_notes)
from engine.sandbox.warm_pool import WAIT_SECONDS, WarmPool, seal_inputs, size_from_environment
from engine.sandbox.workspace import (BOOTSTRAP_NAME, PRIVATE_DIR, DiskWatch, chown_tree, child_env, fresh_ids,
                                      validate_request)

from .image import BUILD_HINT, ImageError, docker_client, image_present, image_ref

log = logging.getLogger(__name__)

WORKDIR = "/work"  # the working directory's path inside the container
LABEL = "org.trellis.sandbox"  # every sandbox container carries it: "<host>:<engine pid>"
ROOT_LABEL = "org.trellis.sandbox.root"  # and its executor's root: which of a process's executors made it
POLL_SECONDS = 0.02  # how often the engine looks at a running container
WATCH_SECONDS = 0.5  # how often the working directory and the request's watcher are looked at
DRAIN_SECONDS = 2.0  # after exit, how long to wait for the rest of the output
TMP_CAP_MB = 256  # /tmp: a tmpfs, counted against the memory cap
MB = 1024 * 1024

# A warm container's waiter, in its private folder: the FIFO it blocks on, and the bootstrap's
# configuration the engine writes beside it before saying "go".
GO_NAME = ".trellis_go"
CONFIG_NAME = ".trellis_config.json"
# Blocks in read() (no polling) until the engine writes a byte; an end of file means the engine
# went away without a program for it. It removes both files, so the program finds its private
# folder as a cold run does, and execs the cold run's command line: same interpreter, flags,
# environment, process (tini's only child), no descriptor of its own left open (os.open is
# close-on-exec).
WAITER = """\
import os, sys
go, config, bootstrap = sys.argv[1:4]
fd = os.open(go, os.O_RDONLY)
if not os.read(fd, 1):
    sys.exit(0)
with open(config) as fh:
    text = fh.read()
os.unlink(go)
os.unlink(config)
os.execvp("python3", ["python3", "-I", "-B", "-u", bootstrap, text])
"""


@dataclass(frozen=True)
class ContainerSpec:
    """Everything a container is made with before it knows its program: the warm pool's key. A
    warm container of a spec is exactly the cold container of that spec but for its command,
    its mounts (no input mounts) and its uid."""

    image: str
    cpus: float
    extra_read_paths: tuple[str, ...]
    memory_mb: int
    max_processes: int
    cpu_seconds: float
    max_file_mb: int
    max_disk_mb: int
    max_files: int

    @classmethod
    def of(cls, executor: "DockerExecutor", limits: ExecutionLimits) -> "ContainerSpec":
        return cls(executor.image, executor.cpus, executor.extra_read_paths, limits.memory_mb,
                   limits.max_processes, limits.cpu_seconds, limits.max_file_mb, limits.max_disk_mb,
                   limits.max_files)


def container_config(spec: ContainerSpec, labels: dict[str, str], command: list[str], workdir: Path,
                     inputs: list[PurePosixPath], uid: int, gid: int) -> dict:
    """The docker SDK's ``containers.create`` arguments; ``inputs`` are mounted read-only over
    their copies (none for a warm container: it starts before it has any)."""
    from docker.types import LogConfig, Mount, Ulimit

    mounts = [Mount(WORKDIR, str(workdir), type="bind", read_only=False)]
    # the inputs, read-only over their copies (a mount each: a folder input is one mount)
    mounts += [Mount(f"{WORKDIR}/{rel}", str(workdir / rel), type="bind", read_only=True) for rel in inputs]
    cpu = max(1, int(spec.cpu_seconds))
    file_bytes = spec.max_file_mb * MB
    memory = f"{spec.memory_mb}m"
    return dict(
        image=spec.image, command=command,
        user=f"{uid}:{gid}", working_dir=WORKDIR, environment=child_env(Path(WORKDIR)),
        hostname="sandbox", network_mode="none", ipc_mode="private", read_only=True, init=True,
        mounts=mounts,
        tmpfs={"/tmp": f"rw,nosuid,nodev,noexec,size={min(TMP_CAP_MB, spec.max_disk_mb)}m,mode=1777"},
        cap_drop=["ALL"], security_opt=["no-new-privileges:true"],
        mem_limit=memory, memswap_limit=memory, pids_limit=spec.max_processes,
        nano_cpus=int(spec.cpus * 1e9),
        ulimits=[Ulimit(name="cpu", soft=cpu, hard=cpu + 2),  # SIGXCPU, then SIGKILL
                 Ulimit(name="fsize", soft=file_bytes, hard=file_bytes),
                 Ulimit(name="core", soft=0, hard=0)],
        # the engine keeps the output's tails itself; nothing piles up in Docker's logs
        log_config=LogConfig(type="none"),
        labels=labels, stdin_open=False, tty=False, detach=True,
    )


def bootstrap_command(config: str) -> list[str]:
    # -I: no PYTHON* env, no user site, no cwd on sys.path; -B: no .pyc writes;
    # -u: a killed program still leaves its last output behind
    return ["python3", "-I", "-B", "-u", f"{WORKDIR}/{BOOTSTRAP_NAME}", config]


def waiter_command() -> list[str]:
    private = f"{WORKDIR}/{PRIVATE_DIR}"
    return ["python3", "-I", "-B", "-u", "-c", WAITER, f"{private}/{GO_NAME}", f"{private}/{CONFIG_NAME}",
            f"{WORKDIR}/{BOOTSTRAP_NAME}"]


class DockerExecutor:
    """Runs each request in a fresh container of ``image`` (the current definition's
    ``trellis-sandbox:<tag>`` unless given), its working directory under ``root``.

    ``extra_read_paths``: trees of the image, besides the interpreter's, its programs may read
    (an external agent's code, engine/external/).
    ``cpus``: the CPU quota of each container (default: every CPU of the machine, as the
    subprocess sandbox allows; programs are single-threaded by their environment anyway).
    ``warm``: started containers kept ready per set of limits (default ``TRELLIS_SANDBOX_WARM``,
    else 2; 0: none). Only an engine running as root keeps any (the inputs' protection needs it).
    ``close()`` removes them; an executor dropped without it, or left at exit, removes them too.
    Raises ImageError when no daemon answers or the image is not built."""

    name = "docker"

    def __init__(self, root: str | Path | None = None, keep: bool = True, *, image: str | None = None,
                 client=None, cpus: float | None = None, output_cap_bytes: int = DEFAULT_OUTPUT_CAP,
                 extra_read_paths: tuple[str, ...] = (), warm: int | None = None) -> None:
        self.client = client or docker_client()
        self.image = image or image_ref()
        if not image_present(self.client, self.image):
            raise ImageError(f"the Docker sandbox image {self.image} is not built: run `{BUILD_HINT}`")
        if root is None:
            root = tempfile.mkdtemp(prefix="trellis-sandbox-")
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            # Containers reach their folder through the bind mount, never through this path, so
            # no one but the engine needs in: a warm run's folders are writable by all (sticky).
            os.chmod(self.root, 0o700)
        self.keep = keep
        self.cpus = float(cpus or os.environ.get("TRELLIS_SANDBOX_CPUS") or os.cpu_count() or 1)
        self.output_cap_bytes = output_cap_bytes
        # trees of the image the programs may read besides the interpreter's (an external agent's code)
        self.extra_read_paths = tuple(extra_read_paths)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        self.labels = {LABEL: self.owner, ROOT_LABEL: str(self.root)}
        remove_orphans(self.client)
        unmount_orphans(self.root)
        size = size_from_environment() if warm is None else max(0, int(warm))
        if os.geteuid() != 0:
            size = 0  # the inputs of a warm container are read-only by root's ownership
        maker = _SlotMaker(self.client, self.root, self.labels, output_cap_bytes)
        self.pool = WarmPool(size, maker, name=f"sandbox-warm-{self.root.name}")
        # the pool holds no reference to the executor, so this runs when the executor is dropped
        self._finalizer = weakref.finalize(self, self.pool.close)

    def close(self) -> None:
        """Remove the warm containers (and unmount their folders); later runs start cold."""
        self._finalizer()

    # -- running ------------------------------------------------------------

    def daemon_answers(self) -> bool:
        try:
            self.client.ping()
            return True
        except _docker_errors():
            return False

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        entrypoint, inputs = validate_request(request)
        spec = ContainerSpec.of(self, request.limits)
        slot = self.pool.take(spec, WAIT_SECONDS)
        if slot is not None:
            return self._run_warm(slot, request, entrypoint, inputs)
        try:
            return self._run_cold(request, entrypoint, inputs)
        finally:
            self.pool.refill(spec)  # the next request with these limits finds a container started

    def prewarm(self, limits: ExecutionLimits | None = None) -> None:
        """Start making a warm container for programs of ``limits`` (default limits when None)
        before the first of them is asked for."""
        self.pool.refill(ContainerSpec.of(self, limits or ExecutionLimits()))

    def _run_cold(self, request: ExecutionRequest, entrypoint: PurePosixPath,
                  inputs: dict[PurePosixPath, Path]) -> ExecutionResult:
        def execute(workdir: Path) -> ExecutionResult:
            if os.geteuid() == 0:
                uid, gid = fresh_ids()
                chown_tree(workdir, uid, gid)
            else:  # an engine in the docker group: its programs run as its own (non-root) uid
                uid, gid = os.getuid(), os.getgid()
            return self._execute(workdir, request, entrypoint, sorted(inputs), uid, gid)

        return run_in_capped_folder(self.root, request, entrypoint, inputs, self.name, self.keep, execute)

    def _run_warm(self, slot: "_WarmSlot", request: ExecutionRequest, entrypoint: PurePosixPath,
                  inputs: dict[PurePosixPath, Path]) -> ExecutionResult:
        def execute(workdir: Path) -> ExecutionResult:
            seal_inputs(workdir, inputs, slot.uid, slot.gid)
            return self._execute_warm(slot, workdir, request, entrypoint)

        try:
            return run_in_capped_folder(self.root, request, entrypoint, inputs, self.name, self.keep, execute,
                                        folder=slot.folder)
        finally:
            slot.finish()  # when the program never started (inputs over the cap): removed now

    def _bootstrap_config(self, request: ExecutionRequest, entrypoint: PurePosixPath) -> str:
        return json.dumps({"workdir": WORKDIR, "entrypoint": str(entrypoint), "args": list(request.args),
                           "extra_read": list(self.extra_read_paths),
                           "max_processes": request.limits.max_processes})

    def _execute(self, workdir: Path, request: ExecutionRequest, entrypoint: PurePosixPath,
                 inputs: list[PurePosixPath], uid: int, gid: int) -> ExecutionResult:
        limits = request.limits
        started = time.monotonic()
        container = None
        try:
            try:
                command = bootstrap_command(self._bootstrap_config(request, entrypoint))
                container = self.client.containers.create(**container_config(
                    ContainerSpec.of(self, limits), self.labels, command, workdir, inputs, uid, gid))
                streams = _Streams(self.client, container.id, self.output_cap_bytes)
                container.start()
            except _docker_errors() as exc:
                if not self.daemon_answers():
                    raise ExecutorLost(f"the Docker daemon stopped answering ({str(exc)[:200]})") from None
                return ExecutionResult(status="error", exit_code=None, stdout="",
                                       stderr=f"sandbox: could not start the container: {exc}",
                                       duration_s=time.monotonic() - started, workdir=workdir,
                                       files={}, executor=self.name)
            outcome = _supervise(self.client, container.id, limits, DiskWatch(workdir, limits),
                                 request.watch, workdir, _PidsWatch(container.id))
            streams.finish(DRAIN_SECONDS)
            state = _state(self.client, container.id)
        finally:
            if container is not None:
                _remove(self.client, container.id)
        return self._result(outcome, streams, state, limits, workdir, time.monotonic() - started)

    def _execute_warm(self, slot: "_WarmSlot", workdir: Path, request: ExecutionRequest,
                      entrypoint: PurePosixPath) -> ExecutionResult:
        """The program in a container started before it was asked for: the waiter is handed the
        bootstrap's configuration and execs it; from then on all is as on the cold path. The
        duration counts from that hand-over, not the container's start."""
        limits = request.limits
        slot.write_config(self._bootstrap_config(request, entrypoint))
        started = time.monotonic()
        try:
            slot.go()
            outcome = _supervise(self.client, slot.container_id, limits, DiskWatch(workdir, limits),
                                 request.watch, workdir, _PidsWatch(slot.container_id))
            slot.streams.finish(DRAIN_SECONDS)
            state = _state(self.client, slot.container_id)
            duration = time.monotonic() - started
            # the container has exited: removing it is clean-up the request need not wait for
            slot.retire(self.pool.later)
        finally:
            slot.finish()  # interrupted (a watcher's KeyboardInterrupt): removed now, as on the cold path
        return self._result(outcome, slot.streams, state, limits, workdir, duration)

    def _result(self, outcome: "_Outcome", streams: "_Streams", state: dict, limits: ExecutionLimits,
                workdir: Path, duration: float) -> ExecutionResult:
        code = outcome.exit_code if outcome.exit_code is not None else state.get("ExitCode")
        code = _signal_code(code)
        oom = bool(state.get("OOMKilled"))
        stderr = strip_info_lines(streams.stderr.text()) + supervisor_notes(outcome, limits)
        for line in streams.scanner.info:
            log.debug("sandbox layers for %s: %s", workdir, line)
        if outcome.lost:
            stderr += f"\nsandbox: lost the Docker daemon while the program ran: {outcome.lost}\n"
        if oom:
            stderr += (f"\nsandbox: the program's processes together reached the memory limit "
                       f"of {limits.memory_mb} MB\n")
        if outcome.pids_cap_hit:
            stderr += (f"\nsandbox: the program reached its limit of {limits.max_processes} "
                       "processes and threads; more were refused\n")
        return ExecutionResult(
            status=_classify(code, stderr, streams.scanner.violations, outcome.wall_timeout, oom),
            exit_code=code, stdout=streams.stdout.text(), stderr=stderr, duration_s=duration,
            workdir=workdir, files={}, violations=list(streams.scanner.violations), executor=self.name,
        )


# ------------------------------------------------------------------- warm containers

class _SlotMaker:
    """Makes the warm pool's slots. Holds no reference to the executor (its finalizer must be
    able to run while the pool lives)."""

    def __init__(self, client, root: Path, labels: dict[str, str], output_cap_bytes: int) -> None:
        self.client = client
        self.root = root
        self.labels = labels
        self.output_cap_bytes = output_cap_bytes

    def __call__(self, spec: ContainerSpec) -> "_WarmSlot":
        return _WarmSlot.make(self, spec)


class _WarmSlot:
    """One started container waiting for its program, and its working directory (mounted at the
    spec's cap, named like any run's so that unmount_orphans finds it, owned by the slot's uid)."""

    def __init__(self, spec: ContainerSpec, folder: CappedFolder, uid: int, gid: int, client) -> None:
        self.key = spec
        self.folder = folder
        self.uid, self.gid = uid, gid
        self.client = client
        self.container_id = ""
        self.streams: _Streams | None = None
        self._go_fd: int | None = None
        self._removed = False

    @classmethod
    def make(cls, maker: _SlotMaker, spec: ContainerSpec) -> "_WarmSlot":
        workdir = Path(tempfile.mkdtemp(prefix=workdir_prefix(), dir=maker.root))
        uid, gid = fresh_ids()
        slot = cls(spec, CappedFolder(workdir, spec.max_disk_mb * MB, spec.max_files), uid, gid, maker.client)
        try:
            slot.folder.mount()  # before the container: its bind mount must be the capped file system
            private = workdir / PRIVATE_DIR
            private.mkdir()
            os.mkfifo(private / GO_NAME, 0o600)
            chown_tree(workdir, uid, gid)
            # Held open from before the waiter opens its end until the program has ended: a byte
            # written is kept even if the waiter is not reading yet, and the waiter sees the end
            # of the file (and exits) if the engine dies.
            slot._go_fd = os.open(private / GO_NAME, os.O_RDWR | os.O_CLOEXEC)
            container = maker.client.containers.create(**container_config(
                spec, maker.labels, waiter_command(), workdir, [], uid, gid))
            slot.container_id = container.id
            slot.streams = _Streams(maker.client, container.id, maker.output_cap_bytes)
            container.start()
        except BaseException:
            slot.discard()
            raise
        return slot

    def alive(self) -> bool:
        """Its container still runs: the output stream ends only when the container does."""
        return self.streams is not None and self.streams.attached()

    def write_config(self, config: str) -> None:
        path = self.folder.path / PRIVATE_DIR / CONFIG_NAME
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(config)
        os.chown(path, self.uid, self.gid)

    def go(self) -> None:
        os.write(self._go_fd, b"g")  # an empty pipe: never blocks

    def retire(self, later) -> None:
        """Hand the removal of the (exited) container to ``later``."""
        self._close_go()
        if not self._removed:
            self._removed = True
            later(partial(_remove, self.client, self.container_id))

    def finish(self) -> None:
        """Remove the container now unless that was already done or handed over."""
        if not self._removed:
            self._removed = True
            if self.container_id:
                _remove(self.client, self.container_id)
        # only now: an end of file would have the waiter exit while its container is being removed
        self._close_go()

    def discard(self) -> None:
        """Never used: the container, the folder's file system and the folder itself go."""
        self.finish()
        self.folder.release()
        shutil.rmtree(self.folder.path, ignore_errors=True)

    def _close_go(self) -> None:
        if self._go_fd is not None:
            os.close(self._go_fd)
            self._go_fd = None


# ---------------------------------------------------------------- output capture

class _Streams:
    """The container's stdout and stderr, read by one thread from Docker's attach stream into
    tail buffers (and stderr through the marker scanner). Attached before the container starts,
    so not a byte is missed; Docker's own logs are off."""

    def __init__(self, client, container_id: str, cap: int) -> None:
        self.stdout = TailBuffer(cap)
        self.stderr = TailBuffer(cap)
        self.scanner = MarkerScanner()
        frames = client.api.attach(container_id, stdout=True, stderr=True, stream=True, demux=True)
        self._thread = threading.Thread(target=self._pump, args=(frames,), daemon=True,
                                        name=f"sandbox-output-{container_id[:12]}")
        self._thread.start()

    def _pump(self, frames) -> None:
        try:
            for out, err in frames:
                if out:
                    self.stdout.append(out)
                if err:
                    self.stderr.append(err)
                    self.scanner.feed(err)
        except Exception:  # noqa: BLE001 - the stream ends however the container does
            log.debug("sandbox output stream ended", exc_info=True)

    def finish(self, seconds: float) -> None:
        self._thread.join(seconds)

    def attached(self) -> bool:
        return self._thread.is_alive()


# ------------------------------------------------------------------- supervision

class _Outcome:
    def __init__(self) -> None:
        self.exit_code: int | None = None
        self.wall_timeout = False
        self.disk_exceeded = ""
        self.stopped = False
        self.pids_cap_hit = False
        self.lost = ""  # why waiting for the container failed (the daemon went away)


def _docker_errors() -> tuple[type[BaseException], ...]:
    """What the SDK raises when the daemon refuses or cannot be reached (a connection error is
    the requests library's own)."""
    import docker
    import requests

    return (docker.errors.DockerException, requests.exceptions.RequestException)


class _PidsWatch:
    """Whether the container's PID cap refused a process or thread, read from its pids cgroup
    on the host while it runs (the cgroup goes when the container exits, and Docker's API does
    not say). Where the cgroup is not found, it never says so: the cap holds all the same."""

    CANDIDATES = ("/sys/fs/cgroup/pids/docker/{id}", "/sys/fs/cgroup/pids/system.slice/docker-{id}.scope",
                  "/sys/fs/cgroup/docker/{id}", "/sys/fs/cgroup/system.slice/docker-{id}.scope")

    def __init__(self, container_id: str) -> None:
        self.container_id = container_id
        self.path: str | None = None
        self.hit = False

    def poll(self) -> None:
        if self.hit:
            return
        if self.path is None:
            self.path = next((p + "/pids.events" for p in (c.format(id=self.container_id) for c in self.CANDIDATES)
                              if os.path.exists(p + "/pids.events")), "")
        if not self.path:
            return
        try:
            with open(self.path) as fh:
                self.hit = any(line.split()[:1] == ["max"] and line.split()[1:2] != ["0"] for line in fh)
        except OSError:
            pass  # gone with the container


def _supervise(client, container_id: str, limits: ExecutionLimits, disk: DiskWatch, watch,
               workdir: Path, pids: _PidsWatch) -> _Outcome:
    """Wait for the container to exit, killing it at the wall clock, when its files grow past
    the limits or when the request's watcher says stop."""
    outcome = _Outcome()
    done = threading.Event()
    box: dict = {}

    def wait() -> None:
        try:
            box["status"] = client.api.wait(container_id)
        except Exception as exc:  # noqa: BLE001
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=wait, daemon=True, name=f"sandbox-wait-{container_id[:12]}").start()
    deadline = time.monotonic() + limits.wall_seconds
    next_watch = time.monotonic() + WATCH_SECONDS
    killed = False
    while not done.wait(POLL_SECONDS):
        pids.poll()
        now = time.monotonic()
        if killed:
            continue
        if now >= deadline:
            outcome.wall_timeout = killed = True
        elif now >= next_watch:
            next_watch = now + WATCH_SECONDS
            if problem := disk.problem(now):
                outcome.disk_exceeded, killed = problem, True
            elif watch is not None and _watch_says_stop(watch, workdir):
                outcome.stopped = killed = True
        if killed:
            _kill(client, container_id)
    outcome.pids_cap_hit = pids.hit
    if "status" in box:
        outcome.exit_code = box["status"].get("StatusCode")
    elif "error" in box:
        outcome.lost = str(box["error"])[:300]
        log.warning("sandbox: waiting for container %s failed: %s", container_id[:12], box["error"])
    return outcome


def _watch_says_stop(watch, workdir: Path) -> bool:
    """A watcher that fails never kills the program."""
    try:
        return bool(watch(workdir))
    except Exception:  # noqa: BLE001
        log.exception("sandbox: the run's watcher failed")
        return False


def _kill(client, container_id: str) -> None:
    try:
        client.api.kill(container_id, "SIGKILL")
    except _docker_errors():
        pass  # it exited meanwhile (or the daemon is gone, and the container with it)


def _state(client, container_id: str) -> dict:
    try:
        return client.api.inspect_container(container_id).get("State", {})
    except _docker_errors():
        return {}


REMOVE_ATTEMPTS = 3


def _remove(client, container_id: str) -> None:
    """Force-remove the container. The daemon refuses one that is exiting at that very moment
    ("could not kill running container ... is not running") and leaves it half-removed, so a
    refusal is tried again."""
    import docker

    for attempt in range(1, REMOVE_ATTEMPTS + 1):
        try:
            client.api.remove_container(container_id, force=True)
            return
        except docker.errors.NotFound:
            return
        except _docker_errors() as exc:
            if attempt == REMOVE_ATTEMPTS:
                log.error("sandbox: could not remove container %s: %s", container_id[:12], exc)
                return
            time.sleep(0.2 * attempt)


def remove_orphans(client) -> list[str]:
    """Remove the sandbox containers of engines on this host that are gone (killed before their
    ``finally`` could): returns their ids."""
    host = socket.gethostname()
    removed = []
    try:
        listed = client.api.containers(all=True, filters={"label": LABEL})
    except _docker_errors():
        return removed
    for item in listed:
        owner_host, _, pid = (item.get("Labels") or {}).get(LABEL, "").rpartition(":")
        if owner_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        _remove(client, item["Id"])
        removed.append(item["Id"])
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# ------------------------------------------------------------------ classification

def _signal_code(code: int | None) -> int | None:
    """Docker (and tini) report a program killed by signal N as 128 + N; the executors report
    it as -N, as subprocess does."""
    if code is not None and 128 < code < 128 + 65:
        return -(code - 128)
    return code


def _classify(code: int | None, stderr: str, violations: list[str], wall_timeout: bool,
              oom: bool) -> ExecutionStatus:
    if violations:
        return "violation"
    if oom and code != 0:
        return "memory"  # the container hit its memory cap (in any of its processes)
    if wall_timeout or code == -signal.SIGXCPU:
        return "timeout"
    if code == 0:
        return "ok"
    if any(marker in stderr[-20000:] for marker in MEMORY_MARKERS):
        return "memory"
    if code is not None and code < 0:
        return "killed"
    return "error"

