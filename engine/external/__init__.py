"""External agents (AgentCo-op): a whole program or repository with its own dependencies, built
into a Docker image from local material after a build-and-test loop (build.py), described by a
typed interface (spec.py), and run as one node of a Trellis workflow through an adapter that
checks what it returns against its declared contracts (adapter.py)."""
from .spec import AGENTS_DIR, ExternalAgent, ExternalAgentError, find_agent, load_agent, load_agents

__all__ = ["AGENTS_DIR", "ExternalAgent", "ExternalAgentError", "find_agent", "load_agent", "load_agents"]
