"""The evidence graph: what a team observed, planned, checked and learned, with who said it,
where it came from and how the pieces support or contradict one another (SciMARS's shared
memory). ``graph`` holds the records and the store interface; ``sqlite_store`` the embedded
default, one SQLite file per run."""
from .graph import (LINK_TYPES, RECORD_KINDS, Author, EvidenceError, EvidenceStore, Link, Provenance, Query,
                    Record)
from .sqlite_store import SqliteEvidenceStore

__all__ = ["LINK_TYPES", "RECORD_KINDS", "Author", "EvidenceError", "EvidenceStore", "Link", "Provenance", "Query",
           "Record", "SqliteEvidenceStore"]
