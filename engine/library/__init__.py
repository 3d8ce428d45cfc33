"""The library of typed artifacts synthesis draws on (AgentCo-op): skills, reference resources,
tools and external agents (artifact.py), where they are kept (store.py), and retrieval by type
compatibility and meaning (retrieval.py)."""
from .artifact import KINDS, LibraryArtifact, LibraryError, parse_artifact
from .retrieval import Hit, Retrieval, Similarity, Slot, incompatibility, retrieve
from .store import Library, load_library

__all__ = ["KINDS", "Hit", "Library", "LibraryArtifact", "LibraryError", "Retrieval", "Similarity", "Slot",
           "incompatibility", "load_library", "parse_artifact", "retrieve"]
