"""A tiny MCP server for the tests: a profiling tool that works, then makes its process exit.

    python tests/mcp_flaky_server.py <crash_on>

``summarize`` answers its calls until the ``crash_on``-th, during which the process exits (as a
server that segfaults or is killed mid-call would); every restart counts afresh, so with
``crash_on`` 1 each call crashes a fresh process: a tool that never works.
"""
import os
import sys

from mcp.server.mcpserver import MCPServer

CRASH_ON = int(sys.argv[1]) if len(sys.argv) > 1 else 2
server = MCPServer("flaky")
calls = 0


@server.tool(description="Summarize a CSV data file: rows and columns. path: a data file of the task.")
def summarize(path: str) -> dict:
    global calls
    calls += 1
    if calls >= CRASH_ON:
        os._exit(3)
    return {"path": path, "rows": 1, "columns": 1, "column_summaries": []}


if __name__ == "__main__":
    server.run()
