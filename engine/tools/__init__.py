"""Tools agents can be allocated: the sandbox and the tools of MCP servers discovered at a
run's start (config.py: which servers; host.py: the connections; registry.py: the names and
what the workflow rules check; allocation.py: which agents get them; calls.py: a role's calls)."""
