"""Every size and range limit on what people, task folders and mutators hand the engine, in
one place. The engine's own validation enforces them (workflow rules, task loading, budgets),
so the CLI, the studio's forms and editor, and the search's mutations all get the same
limits and the same messages.

The caps are generous for real work and small enough that no single input can turn into a
100k-token prompt, a stack overflow or a number the database cannot store.
"""
from __future__ import annotations

import argparse
import functools
import math
import re

from .errors import TrellisError

# --- workflow and harness text --------------------------------------------------------------
MAX_PROCEDURE_CHARS = 16_000   # one role procedure (the default ones are ~400 characters)
MAX_PROMPT_CHARS = 16_000      # one agent's own instructions on top of its roles' procedures
MAX_CONTRACT_CHARS = 2_000     # one contract type, e.g. csv[id:int, y:float]
MAX_CONTRACT_DEPTH = 16        # nesting of [ and { in a contract (deeper ones overflow the stack)
MAX_NAME_CHARS = 100           # agent ids, artifact names, roles
MAX_MODEL_CHARS = 200          # a litellm model name
MAX_NOTE_CHARS = 2_000         # a mutation's rationale, a person's note or decision reason
# --- workflow shape (the engine-overhead benchmark runs 1,000 agents) --------------------------
MAX_AGENTS = 1_000
MAX_EDGES = 5_000
MAX_ROUTES = 1_000
# --- memory policy ----------------------------------------------------------------------------
MAX_RECORD_LIMIT = 1_000
MAX_QUERY_HINTS = 50
MAX_QUERY_HINT_CHARS = 500
# --- run options --------------------------------------------------------------------------------
MAX_TOKENS = 100_000_000       # a run's token budget
MAX_CALLS = 1_000_000          # a run's model-call budget
MAX_COST_USD = 100_000.0       # a run's cost budget
MAX_SEED = 2**31 - 1           # numpy and torch seeds, and a 32-bit database column
MAX_ITERATIONS = 1_000         # search iterations or rounds from the command line

# --- sandbox limits a task folder may set (Data_config.json "limits"): (low, high, whole number)
EXECUTION_LIMIT_RANGES: dict[str, tuple[float, float, bool]] = {
    "wall_seconds": (1, 86_400, False),
    "cpu_seconds": (1, 86_400, True),
    "memory_mb": (64, 65_536, True),
    "max_file_mb": (1, 4_096, True),
    "stdout_tail_chars": (100, 1_000_000, True),
    "max_processes": (1, 4_096, True),
    "max_disk_mb": (1, 1_048_576, True),
    "max_files": (10, 10_000_000, True),
}

# litellm model names: provider/model, with the punctuation real deployments use
# (bedrock/anthropic.claude-3-sonnet-20240229-v1:0, huggingface/meta-llama/Llama-2-7b).
MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")


class LimitError(TrellisError, ValueError):
    """A number or a size outside what the engine accepts; the message says the range."""


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def number_problem(label: str, value: object, low: float, high: float, integer: bool = True) -> str | None:
    """Why ``value`` is not a number in [low, high] (bools are not numbers), or None."""
    kind = "a whole number" if integer else "a number"
    allowed = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, allowed) or (
            isinstance(value, float) and not math.isfinite(value)):
        return f"{label} must be {kind} between {low:,} and {high:,}, not {_shown(value)}"
    if not low <= value <= high:
        return f"{label} must be between {low:,} and {high:,}, not {value:,}"
    return None


def check_number(label: str, value: object, low: float, high: float, integer: bool = True) -> None:
    problem = number_problem(label, value, low, high, integer)
    if problem:
        raise LimitError(problem)


def text_problem(label: str, value: object, max_chars: int) -> str | None:
    """Why ``value`` is not text of at most ``max_chars`` characters, or None."""
    if not isinstance(value, str):
        return f"{label} must be text, not {type(value).__name__}"
    if len(value) > max_chars:
        return f"{label} is {len(value):,} characters long; the limit is {max_chars:,}"
    return None


def contract_problem(label: str, text: object) -> str | None:
    """Why a contract type is too long or too deeply nested to accept, or None. Checked
    before parsing, so that no contract can exhaust the parser's or the checker's stack."""
    problem = text_problem(label, text, MAX_CONTRACT_CHARS)
    if problem:
        return problem
    deepest = _nesting(str(text))
    if deepest > MAX_CONTRACT_DEPTH:
        return f"{label} nests {deepest} levels deep; the limit is {MAX_CONTRACT_DEPTH}"
    return None


@functools.lru_cache(maxsize=4096)
def _nesting(text: str) -> int:
    # a workflow writes the same few contracts on thousands of edges: each is scanned once
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def model_problem(label: str, value: object) -> str | None:
    """Why ``value`` is not a plausible litellm model name, or None."""
    problem = text_problem(label, value, MAX_MODEL_CHARS)
    if problem:
        return problem
    if not MODEL_NAME_RE.match(str(value)):
        return (f"{label} {_shown(value)} is not a model name; write provider/model, e.g. "
                f"openai/gpt-4o-mini, with letters, digits and . _ : / @ + -")
    return None


def bounded(low: float, high: float, kind: type = int):
    """An argparse type that refuses numbers outside [low, high] with the range in the message,
    so `--max-tokens 1099511627776` is a usage error, not a run with no budget."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text[:40]!r} is not a {'whole number' if kind is int else 'number'}") from None
        if not low <= value <= high:  # NaN fails this too
            raise argparse.ArgumentTypeError(f"must be between {low:,} and {high:,}, not {text[:40]}")
        return value
    parse.__name__ = kind.__name__  # argparse names the type in its own messages
    return parse
