"""MCP servers shipped with Trellis, each runnable as ``python -m engine.mcp_servers.<name>``.

They run as separate processes that Trellis starts over stdio (engine/tools/host.py), so they
import nothing of the engine's run state: what they may read and write comes from their
environment (confine.py), set by the host from the run's task and folder.
"""
