"""Every action the studio writes to a project's audit log is one the log knows: its filter offers
it and each row shows its words (AuditEntry.ACTIONS). Approving a drafted evaluate.py was written
as a bare "evaluator_approved" that the audit page could neither filter nor name."""
from __future__ import annotations

import ast
from pathlib import Path

from webapp.teams.models import AuditEntry

ROOT = Path(__file__).resolve().parents[2]


def _written_actions() -> dict[str, str]:
    """action -> where: the literal third argument of every ``audit(...)`` call in the web app."""
    out = {}
    for path in sorted((ROOT / "webapp").rglob("*.py")):
        if "/migrations/" in path.as_posix():
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "audit" \
                    and len(node.args) >= 3 and isinstance(node.args[2], ast.Constant):
                out[node.args[2].value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return out


def test_every_action_the_studio_audits_is_one_the_audit_log_names():
    written = _written_actions()
    known = dict(AuditEntry.ACTIONS)
    assert {"start", "decision", "evaluator_approved"} <= set(written)  # the scan sees the calls
    unknown = {action: where for action, where in written.items() if action not in known}
    assert not unknown, f"audited but not in AuditEntry.ACTIONS: {unknown}"
