"""Events are typed going out and typed coming back (issue 38): outside the protocol package no
code reads an event's payload as a dict; it reads ``event.data`` (engine/trace.py, the studio's
Event row in webapp/runs/models.py), the payload's model (engine/protocol/events.py).

What may touch the stored form, each for the reason given: the event itself (written, read,
typed), the studio storing a row, and the trace viewer, which shows the stored JSON as it is."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# (file, function): where the stored dict is the point
STORED_FORM = {
    ("engine/trace.py", "to_json"): "writes the event",
    ("engine/trace.py", "from_dict"): "reads a trace line",
    ("engine/trace.py", "data"): "types the payload",
    ("engine/trace.py", "emit"): "numbers the event",
    ("webapp/runs/models.py", "data"): "types the row's payload",
    ("webapp/runs/models.py", "typed"): "types the row's payload, or None for one its model refuses",
    ("webapp/runs/models.py", "as_event"): "the row as the engine's event",
    ("webapp/runs/bridge.py", "emit"): "stores the event as a row",
    ("webapp/runs/presenters.py", "paged_payload"): "the trace viewer shows the stored JSON, a page at a time",
    ("webapp/annotations/annotating.py", "_describe_event"): "an annotation queue shows the item's stored JSON as it is",
}


def _reads(tree: ast.AST):
    """(line, function, what) for each way a payload's stored dict is read."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def function_of(node: ast.AST) -> str:
        while node in parents:
            node = parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return node.name
        return "<module>"

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "payload" and isinstance(node.ctx, ast.Load):
            yield node.lineno, function_of(node), ".payload"
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "payload":
            yield node.lineno, function_of(node), "payload[...]"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "payload":
            yield node.lineno, function_of(node), "payload.get(...)"


def _offenders() -> list[str]:
    out = []
    for folder in ("engine", "webapp"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("engine/protocol/") or "/migrations/" in rel:
                continue
            for line, function, what in _reads(ast.parse(path.read_text(), rel)):
                if (rel, function) not in STORED_FORM:
                    out.append(f"{rel}:{line} in {function}: {what}")
    return out


def test_no_payload_is_read_as_a_dict_outside_the_protocol():
    offenders = _offenders()
    assert not offenders, ("read the typed payload (event.data) instead of the stored dict:\n  "
                           + "\n  ".join(offenders))


def test_the_check_sees_a_dict_read():
    found = list(_reads(ast.parse("def f(e):\n    return e.payload.get('J')\n")))
    assert found == [(2, "f", ".payload")]
    found = list(_reads(ast.parse("def g(q):\n    for kind, payload in q.values_list('kind', 'payload'):\n"
                                  "        yield payload['J'], payload.get('n')\n")))
    assert {what for _, _, what in found} == {"payload[...]", "payload.get(...)"}


# where a refused payload is caught: every other reader asks ``event.typed`` (None for a payload
# its kind's model refuses) or walks ``engine.trace.typed_events``
CATCHES_REFUSAL = {
    "engine/trace.py": "Event.typed",
    "engine/training/remote.py": "a remote worker's message, parsed as it arrives",
}


def _catches_payload_error(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            names = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
            if any(isinstance(n, ast.Name) and n.id == "PayloadError" for n in names):
                lines.append(node.lineno)
    return lines


def test_a_refused_payload_is_passed_over_in_one_way():
    offenders = []
    for folder in ("engine", "webapp"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("engine/protocol/") or rel in CATCHES_REFUSAL:
                continue
            offenders += [f"{rel}:{n}" for n in _catches_payload_error(ast.parse(path.read_text(), rel))]
    assert not offenders, ("read event.typed (or walk engine.trace.typed_events) instead of catching "
                           "PayloadError:\n  " + "\n  ".join(offenders))
    assert _catches_payload_error(ast.parse("try:\n    x\nexcept (ValueError, PayloadError):\n    pass\n")) == [3]
