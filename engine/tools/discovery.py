"""Tool discovery at the start of a run or search: start the configured MCP servers, list their
tools, trace what was found (``tools_discovered``) and say it on the console. A server that
fails is reported and its tools are absent; the run goes on."""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..protocol.events import ToolsDiscovered
from ..trace import Tracer
from .config import config_path, load_config
from .host import ToolHost

if TYPE_CHECKING:  # the type only: engine/task.py sits above the tools
    from ..task import Task

OUTPUT_FOLDER = "tool-outputs"   # in the run folder: what tools write (plots)
LOG_FOLDER = "tool-logs"         # in the run folder: each server's stderr


def discover(task: Task, run_dir: Path, tracer: Tracer, out: TextIO | None = None,
             config: Path | None = None) -> ToolHost | None:
    """The started host of the configured servers, or None when none is configured. Raises
    McpConfigError (before any server starts) when the configuration is unusable."""
    path = config if config is not None else config_path()
    servers = load_config(path) if path is not None else []
    if not servers:
        return None
    run_dir = Path(run_dir)
    values = {"data": os.pathsep.join(str(p.resolve()) for p in task.input_files().values()),
              "base": str(task.folder.resolve()), "output": str((run_dir / OUTPUT_FOLDER).resolve())}
    host = ToolHost(servers, values, log_dir=run_dir / LOG_FOLDER)
    registry = host.start()
    tracer.emit(ToolsDiscovered(config=str(path), servers=host.status,
                                tools=[s.to_dict() for _, s in sorted(registry.specs.items())]))
    if out is not None:
        for s in host.status:
            line = (f"tools: {s['name']}: {len(s['tools'])} tool(s) ({', '.join(s['tools'])}) in {s['duration_s']:.1f}s"
                    if s["ok"] else f"tools: {s['name']}: NOT AVAILABLE, {s['error']}")
            out.write(line + "\n")
        out.flush()
    return host
