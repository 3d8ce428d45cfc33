"""Programs parsed in parallel threads (the tree builds an iteration's children at once).

CI failed twice with ``SystemError: AST constructor recursion depth mismatch``:
CPython 3.11's ``ast.parse`` keeps its depth counter in process-wide state, and a
garbage collection that runs Python code mid-parse lets another thread's parse
move it. The gc callback below forces that switch on every collection, so plain
``ast.parse`` fails here within a few dozen parses; the engine's parse must not.
"""

from __future__ import annotations

import ast
import gc
import pathlib
import threading
import time

from engine import python_ast

NESTED = "def f(x):\n    return [[(a, {b: c}) for a in x] for b, c in x]\n" * 50


def _parse_in_threads(parse, threads: int = 4, each: int = 30) -> list[BaseException]:
    errors: list[BaseException] = []

    def switch_threads(phase: str, info: dict) -> None:
        time.sleep(0)  # gives up the GIL in the middle of the AST builder

    def work() -> None:
        for _ in range(each):
            try:
                parse(NESTED)
            except SystemError as error:
                errors.append(error)

    threshold = gc.get_threshold()
    gc.callbacks.append(switch_threads)
    gc.set_threshold(50)
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    finally:
        gc.callbacks.remove(switch_threads)
        gc.set_threshold(*threshold)
    return errors


def test_the_engines_parse_survives_threads_switching_mid_parse() -> None:
    assert _parse_in_threads(python_ast.parse) == []


def test_no_engine_module_calls_ast_parse_directly() -> None:
    engine = pathlib.Path(python_ast.__file__).parent
    offenders = [
        str(path.relative_to(engine.parent))
        for path in engine.rglob("*.py")
        if path.name != "python_ast.py" and "ast.parse(" in path.read_text().replace("python_ast.parse(", "")
    ]
    assert offenders == []
