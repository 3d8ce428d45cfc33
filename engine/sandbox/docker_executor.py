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

The engine enforces the wall clock, the size of the working directory and a request's
``watch``, and removes the container whatever happens (an interrupted engine included; one
killed outright leaves containers that the next DockerExecutor removes). Outputs are hashed
and read on the host exactly as the subprocess executor's are (never through a link).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path, PurePosixPath

from engine.sandbox import ExecutionLimits, ExecutionRequest, ExecutionResult, ExecutionStatus
from engine.sandbox.capped_folder import run_in_capped_folder, unmount_orphans
from engine.sandbox.output import (DEFAULT_OUTPUT_CAP, MEMORY_MARKERS, MarkerScanner, TailBuffer, strip_info_lines,
                                   supervisor_notes)
from engine.sandbox.workspace import (BOOTSTRAP_NAME, DiskWatch, chown_tree, child_env, fresh_ids,
                                      validate_request)

from .image import BUILD_HINT, ImageError, docker_client, image_present, image_ref

log = logging.getLogger(__name__)

WORKDIR = "/work"  # the working directory's path inside the container
LABEL = "org.trellis.sandbox"  # every sandbox container carries it: "<host>:<engine pid>"
POLL_SECONDS = 0.02  # how often the engine looks at a running container
WATCH_SECONDS = 0.5  # how often the working directory and the request's watcher are looked at
DRAIN_SECONDS = 2.0  # after exit, how long to wait for the rest of the output
TMP_CAP_MB = 256  # /tmp: a tmpfs, counted against the memory cap


class DockerExecutor:
    """Runs each request in a fresh container of ``image`` (the current definition's
    ``trellis-sandbox:<tag>`` unless given), its working directory under ``root``.

    ``extra_read_paths``: trees of the image, besides the interpreter's, its programs may read
    (an external agent's code, engine/external/).
    ``cpus``: the CPU quota of each container (default: every CPU of the machine, as the
    subprocess sandbox allows; programs are single-threaded by their environment anyway).
    Raises ImageError when no daemon answers or the image is not built."""

    name = "docker"

    def __init__(self, root: str | Path | None = None, keep: bool = True, *, image: str | None = None,
                 client=None, cpus: float | None = None,
                 output_cap_bytes: int = DEFAULT_OUTPUT_CAP, extra_read_paths: tuple[str, ...] = ()) -> None:
        self.client = client or docker_client()
        self.image = image or image_ref()
        if not image_present(self.client, self.image):
            raise ImageError(f"the Docker sandbox image {self.image} is not built: run `{BUILD_HINT}`")
        if root is None:
            root = tempfile.mkdtemp(prefix="trellis-sandbox-")
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.keep = keep
        self.cpus = float(cpus or os.environ.get("TRELLIS_SANDBOX_CPUS") or os.cpu_count() or 1)
        self.output_cap_bytes = output_cap_bytes
        # trees of the image the programs may read besides the interpreter's (an external agent's code)
        self.extra_read_paths = tuple(extra_read_paths)
        self.owner = f"{socket.gethostname()}:{os.getpid()}"
        remove_orphans(self.client)
        unmount_orphans(self.root)

    # -- running ------------------------------------------------------------

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        entrypoint, inputs = validate_request(request)

        def execute(workdir: Path) -> ExecutionResult:
            if os.geteuid() == 0:
                uid, gid = fresh_ids()
                os.chmod(self.root, 0o711)  # the run's user must traverse, not list
                chown_tree(workdir, uid, gid)
            else:  # an engine in the docker group: its programs run as its own (non-root) uid
                uid, gid = os.getuid(), os.getgid()
            return self._execute(workdir, request, entrypoint, sorted(inputs), uid, gid)

        return run_in_capped_folder(self.root, request, entrypoint, inputs, self.name, self.keep, execute)

    def _container_config(self, workdir: Path, request: ExecutionRequest, entrypoint: PurePosixPath,
                          inputs: list[PurePosixPath], uid: int, gid: int) -> dict:
        from docker.types import LogConfig, Mount, Ulimit

        limits = request.limits
        config = {"workdir": WORKDIR, "entrypoint": str(entrypoint), "args": list(request.args),
                  "extra_read": list(self.extra_read_paths), "max_processes": limits.max_processes}
        mounts = [Mount(WORKDIR, str(workdir), type="bind", read_only=False)]
        # the inputs, read-only over their copies (a mount each: a folder input is one mount)
        mounts += [Mount(f"{WORKDIR}/{rel}", str(workdir / rel), type="bind", read_only=True) for rel in inputs]
        cpu = max(1, int(limits.cpu_seconds))
        file_bytes = limits.max_file_mb * 1024 * 1024
        memory = f"{limits.memory_mb}m"
        return dict(
            image=self.image,
            # -I: no PYTHON* env, no user site, no cwd on sys.path; -B: no .pyc writes;
            # -u: a killed program still leaves its last output behind
            command=["python3", "-I", "-B", "-u", f"{WORKDIR}/{BOOTSTRAP_NAME}", json.dumps(config)],
            user=f"{uid}:{gid}", working_dir=WORKDIR, environment=child_env(Path(WORKDIR)),
            hostname="sandbox", network_mode="none", ipc_mode="private", read_only=True, init=True,
            mounts=mounts,
            tmpfs={"/tmp": f"rw,nosuid,nodev,noexec,size={min(TMP_CAP_MB, limits.max_disk_mb)}m,mode=1777"},
            cap_drop=["ALL"], security_opt=["no-new-privileges:true"],
            mem_limit=memory, memswap_limit=memory, pids_limit=limits.max_processes,
            nano_cpus=int(self.cpus * 1e9),
            ulimits=[Ulimit(name="cpu", soft=cpu, hard=cpu + 2),  # SIGXCPU, then SIGKILL
                     Ulimit(name="fsize", soft=file_bytes, hard=file_bytes),
                     Ulimit(name="core", soft=0, hard=0)],
            # the engine keeps the output's tails itself; nothing piles up in Docker's logs
            log_config=LogConfig(type="none"),
            labels={LABEL: self.owner}, stdin_open=False, tty=False, detach=True,
        )

    def _execute(self, workdir: Path, request: ExecutionRequest, entrypoint: PurePosixPath,
                 inputs: list[PurePosixPath], uid: int, gid: int) -> ExecutionResult:
        limits = request.limits
        started = time.monotonic()
        container = None
        try:
            try:
                container = self.client.containers.create(
                    **self._container_config(workdir, request, entrypoint, inputs, uid, gid))
                streams = _Streams(self.client, container.id, self.output_cap_bytes)
                container.start()
            except _docker_errors() as exc:
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
        duration = time.monotonic() - started
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


def _remove(client, container_id: str) -> None:
    import docker

    try:
        client.api.remove_container(container_id, force=True)
    except docker.errors.NotFound:
        pass
    except _docker_errors() as exc:
        log.error("sandbox: could not remove container %s: %s", container_id[:12], exc)


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

