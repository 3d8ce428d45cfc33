"""Public checks: facts computed from evidence, never from a model's opinion.

Here: the checks on an execution and its file (exit, output, schema, values vary), the
hand-off checks and hash preservation. The checks on the numbers themselves (finite,
within_range, beats_trivial, claims_match) are in engine/plausibility.py."""
from __future__ import annotations

import csv
import io
import re
from dataclasses import asdict, dataclass

from .contracts import check_value, parse_type
from .contracts import FileReader


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        return f"- {'PASS' if self.passed else 'FAIL'} {self.name}: {self.detail}".rstrip()


def execution_checks(evidence: dict, predictions: dict | None, contract: str, target: str | None,
                     read: FileReader) -> list[Check]:
    """What the verifier establishes about one execution and its predictions file."""
    status = evidence.get("status")
    checks = [Check("exit_ok", status == "ok" and evidence.get("exit_code") == 0,
                    f"status {status}, exit code {evidence.get('exit_code')}")]
    if predictions is None:
        checks.append(Check("output_exists", False, "the program wrote no predictions file"))
        return checks
    checks.append(Check("output_exists", True, f"{predictions['path']} ({predictions['sha256'][:12]})"))
    errors = check_value(predictions, parse_type(contract), read, where="predictions", max_errors=3)
    checks.append(Check("output_schema", not errors, "; ".join(errors) or f"matches {contract}"))
    if not errors and target:
        checks.append(_values_vary(read(predictions["sha256"]) or b"", target))
    return checks


def _values_vary(data: bytes, column: str) -> Check:
    rows = list(csv.DictReader(io.StringIO(data.decode("utf-8", "replace"))))
    values = [r.get(column, "") for r in rows]
    try:
        numbers = [float(v) for v in values]
    except ValueError:
        numbers = []
    if numbers and all(v == 0 for v in numbers):
        return Check("values_vary", False, f"all {len(values)} values of {column!r} are zero")
    if len(set(values)) <= 1:
        return Check("values_vary", False, f"all {len(values)} values of {column!r} are identical")
    return Check("values_vary", True, f"{len(set(values))} distinct values of {column!r} in {len(values)} rows")


def hash_preserved(verified_sha: str | None, final_sha: str | None) -> Check:
    ok = verified_sha is not None and verified_sha == final_sha
    return Check("hash_preserved", ok,
                 f"verifier {str(verified_sha)[:12]} -> finalizer {str(final_sha)[:12]}")


_PLACEHOLDER = re.compile(
    r"(\bTODO\b|\bFIXME\b|\bTBD\b|<\s*(?:insert|your|placeholder)[^>]*>|\byour_[a-z_]+_here\b|"
    r"\blorem ipsum\b|^\s*\.\.\.\s*$|\bXXX\b)", re.I | re.M)


def placeholder_check(name: str, value: object) -> Check | None:
    """Flag text that a model left unfinished or made up before it is handed on."""
    if not isinstance(value, str):
        return None
    m = _PLACEHOLDER.search(value)
    if m:
        line = value[: m.start()].count("\n") + 1
        return Check("no_placeholders", False, f"{name} line {line} contains placeholder {m.group(0).strip()!r}")
    return Check("no_placeholders", True, f"{name} has no placeholder text")
