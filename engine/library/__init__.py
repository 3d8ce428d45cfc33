"""The library of typed artifacts synthesis draws on (AgentCo-op): skills, reference resources,
tools and external agents (artifact.py), where they are kept (store.py), and retrieval by type
compatibility and meaning (retrieval.py). Import each from its module: the package imports
nothing, so that reading an artifact's type (external/spec.py does) never loads the store."""
