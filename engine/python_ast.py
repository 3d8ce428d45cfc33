"""Parsing Python source into an AST safely from several threads.

CPython 3.11 keeps the AST builder's recursion depth in process-wide state.
When a garbage collection inside one thread's ``ast.parse`` runs Python code
(a ``__del__``, a gc callback) the interpreter may switch threads, a second
``ast.parse`` moves the same counter, and the first raises
``SystemError: AST constructor recursion depth mismatch``. The tree search
builds an iteration's children in parallel threads and every child's program
is parsed (offline scientist, training detection, preflight), so this was seen
failing a run. Every parse in the engine goes through :func:`parse` and one
re-entrant lock (a collection may parse again in the same thread).
"""

from __future__ import annotations

import ast
import threading

_PARSING = threading.RLock()


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """``ast.parse`` serialised across threads (see the module note)."""
    with _PARSING:
        return ast.parse(source, filename, mode)
