"""The MCP servers of one run or search, connected over stdio for its whole duration.

The engine is synchronous and the mcp SDK is asynchronous: the host runs one asyncio loop in a
thread of its own, holds a ClientSession per server there, and hands each call over with
``run_coroutine_threadsafe``. A server that does not start (or list its tools) within its
timeout is reported and left out; one that dies mid-call gives that call a clear error, and the
next call starts it again (at most MAX_RESTARTS times). Nothing here raises into a run.
"""
from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Mapping

from .config import ServerConfig
from .registry import ToolRegistry, ToolSpec

MAX_RESTARTS = 2
MAX_RESULT_CHARS = 20_000   # what of a result enters an agent's context


@dataclass
class ToolOutcome:
    ok: bool
    text: str = ""                      # the result as the agent reads it (or the error)
    structured: dict | None = None
    error: str | None = None
    duration_s: float = 0.0


@dataclass
class _Connection:
    config: ServerConfig
    launch: tuple[str, list[str], dict[str, str], str]
    log: IO[str]
    log_path: str | None
    session: object | None = None
    tools: list = field(default_factory=list)
    stop: asyncio.Event | None = None
    task: asyncio.Task | None = None
    restarts: int = 0
    error: str | None = None
    started_s: float = 0.0


class ToolHost:
    """Start with ``start()`` (discovery: returns the registry), ``call`` tools, ``close()``."""

    def __init__(self, servers: list[ServerConfig], values: Mapping[str, str] | None = None,
                 log_dir: Path | None = None):
        self.servers = servers
        self.values = dict(values or {})
        self.log_dir = Path(log_dir) if log_dir else None
        # where tools write files (the {output} placeholder); calls.py keeps what they name in it
        self.output_dir = Path(self.values["output"]) if self.values.get("output") else None
        self.registry = ToolRegistry(allocate={s.name: dict(s.allocate) for s in servers})
        self.status: list[dict] = []     # per server: name, ok, tools, error, duration_s
        self._conns: dict[str, _Connection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> ToolRegistry:
        if not self.servers:
            return self.registry
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="trellis-mcp", daemon=True)
        self._thread.start()
        for server in self.servers:
            started = time.perf_counter()
            conn = self._connection(server)
            self._conns[server.name] = conn
            error = self._run(self._open(conn), server.timeout_s + 5)
            took = round(time.perf_counter() - started, 3)
            if error is None:
                for tool in conn.tools:
                    spec = ToolSpec(server.name, tool.name, tool.description or "", dict(tool.input_schema or {}))
                    self.registry.specs[spec.name] = spec
                self.status.append({"name": server.name, "ok": True, "tools": [t.name for t in conn.tools],
                                    "duration_s": took})
            else:
                self.registry.failed[server.name] = error
                self.status.append({"name": server.name, "ok": False, "tools": [], "error": error, "duration_s": took})
        return self.registry

    def close(self) -> None:
        if self._closed or self._loop is None:
            self._closed = True
            return
        self._closed = True
        for conn in self._conns.values():
            self._run(self._shut(conn), 10)
            conn.log.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> "ToolHost":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- calls -----------------------------------------------------------------------------------
    def call(self, name: str, arguments: dict) -> ToolOutcome:
        """Call discovered tool ``name``; never raises: an error is an outcome the agent reads."""
        started = time.perf_counter()
        spec = self.registry.spec(name)
        if spec is None or self._closed or self._loop is None:
            why = self.registry.failed.get(name.split(".")[1] if name.count(".") >= 2 else "", "")
            return ToolOutcome(False, error=f"tool {name!r} is not available in this run" + (f": {why}" if why else ""))
        conn = self._conns[spec.server]
        outcome = self._run(self._call(conn, spec.tool, arguments), conn.config.timeout_s + 10)
        if isinstance(outcome, str):  # the host itself gave up waiting
            outcome = ToolOutcome(False, error=outcome)
        outcome.duration_s = round(time.perf_counter() - started, 4)
        return outcome

    # --- inside the loop ---------------------------------------------------------------------------
    def _connection(self, server: ServerConfig) -> _Connection:
        log_path = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = str(self.log_dir / f"mcp-{server.name}.log")
            log = open(log_path, "a", encoding="utf-8")
        else:
            log = open(os.devnull, "w", encoding="utf-8")
        return _Connection(server, server.launch(self.values), log, log_path)

    def _run(self, coroutine, timeout: float):
        """Run ``coroutine`` on the host's loop; a string says why it did not finish in time."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result(timeout=timeout)
        except TimeoutError:
            future.cancel()
            return f"no answer within {timeout:g} s"

    async def _open(self, conn: _Connection) -> str | None:
        """Start the server and list its tools; the error in words, or None."""
        ready: asyncio.Future = asyncio.get_running_loop().create_future()
        conn.stop = asyncio.Event()
        conn.started_s = time.perf_counter()
        conn.task = asyncio.get_running_loop().create_task(self._serve(conn, ready))
        try:
            await asyncio.wait_for(asyncio.shield(ready), conn.config.timeout_s)
        except TimeoutError:
            ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # retrieved: no warning
            conn.task.cancel()
            conn.error = f"did not start and list its tools within {conn.config.timeout_s:g} s{self._log_hint(conn)}"
            return conn.error
        except Exception as exc:  # noqa: BLE001 - a server that cannot start is reported, not raised
            conn.error = f"failed to start: {_reason(exc)}{self._log_hint(conn)}"
            return conn.error
        conn.error = None
        return None

    async def _serve(self, conn: _Connection, ready: asyncio.Future) -> None:
        from mcp import StdioServerParameters
        from mcp.client.session import ClientSession
        from mcp.client.stdio import stdio_client

        command, args, env, cwd = conn.launch
        params = StdioServerParameters(command=command, args=args, env=env, cwd=cwd or None)
        try:
            async with stdio_client(params, errlog=conn.log) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=conn.config.timeout_s) as session:
                    await session.initialize()
                    listed = await session.list_tools()
                    conn.session, conn.tools = session, list(listed.tools)
                    ready.set_result(None)
                    await conn.stop.wait()
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the start
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if not isinstance(exc, Exception):
                raise
        finally:
            conn.session = None

    async def _shut(self, conn: _Connection) -> None:
        if conn.stop is not None:
            conn.stop.set()
        if conn.task is not None and not conn.task.done():
            try:
                await asyncio.wait_for(conn.task, 8)
            except (TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001 - closing regardless
                pass

    async def _call(self, conn: _Connection, tool: str, arguments: dict) -> ToolOutcome:
        from mcp import MCPError

        if conn.session is None:  # it died on an earlier call: start it again, a few times
            if conn.restarts >= MAX_RESTARTS:
                return ToolOutcome(False, error=f"server {conn.config.name!r} stopped and was restarted "
                                                f"{MAX_RESTARTS} times already; its tools are out of service")
            conn.restarts += 1
            await self._shut(conn)
            error = await self._open(conn)
            if error:
                return ToolOutcome(False, error=f"server {conn.config.name!r} stopped earlier and {error}")
        try:
            result = await conn.session.call_tool(tool, arguments, read_timeout_seconds=conn.config.timeout_s)
        except MCPError as exc:
            closed = "closed" in str(exc).lower()
            if closed:
                await self._shut(conn)
                return ToolOutcome(False, error=f"server {conn.config.name!r} closed the connection during the call "
                                                f"(it crashed or exited){self._log_hint(conn)}")
            return ToolOutcome(False, error=f"server {conn.config.name!r}: {_reason(exc)}")
        except Exception as exc:  # noqa: BLE001 - a malformed answer is the call's error, not the run's
            return ToolOutcome(False, error=f"server {conn.config.name!r} answered unusably: {_reason(exc)}")
        text = "\n".join(getattr(c, "text", "") or f"[{getattr(c, 'type', 'content')}]" for c in result.content)
        structured = result.structured_content if isinstance(result.structured_content, dict) else None
        if not text and structured is not None:
            text = json.dumps(structured)
        text = text if len(text) <= MAX_RESULT_CHARS else text[:MAX_RESULT_CHARS] + f"… [{len(text)} characters]"
        if result.is_error:
            return ToolOutcome(False, error=text or "the tool reported an error without a message")
        return ToolOutcome(True, text=text, structured=structured)

    def _log_hint(self, conn: _Connection) -> str:
        if not conn.log_path:
            return ""
        try:
            conn.log.flush()
            tail = Path(conn.log_path).read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:]
        except OSError:
            tail = []
        return (f"; its last words: {tail[0][:200]!r}" if tail else "") + f" (log {conn.log_path})"


def _reason(exc: BaseException) -> str:
    """An exception in one line, unwrapping the task groups anyio raises."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__
