"""How a role's prompt is written and how its answer is read back.

The layout is plain markdown with fixed headings, so that any model (or the offline
scientist) can follow it and a person reading the trace can too.
"""
from __future__ import annotations

import json
import re

from .harness import Harness
from .task import Task
from .workflow import Agent

ANSWER_FORMATS: dict[str, str] = {
    "analyzer": "Reply with one fenced ```python block containing the exploration script; it prints the report.",
    "planner": ("Reply in markdown. Include one line `strategy: <key> <json parameters>` naming the approach, "
                "then the rationale, the validation you expect and the risks."),
    "coder": "Reply with the complete script in one fenced ```python block.",
    "debugger": "Reply with the whole corrected script in one fenced ```python block, after one line naming the cause.",
    "verifier": "Start your reply with `STATUS: SUCCESS` or `STATUS: RETRY`, then say which checks passed or failed.",
    "router": "Start your reply with `STATUS: SUCCESS`, `STATUS: RETRY` or `STATUS: FAILURE`, then why.",
    "finalizer": "Reply with the final report in markdown: approach, validation score, checks, open risks.",
}

_SYSTEM_HEADER = "You are the {role} of a Trellis research team working on the task below."


def build_messages(role: str, agent: Agent, harness: Harness, task: Task, inputs: dict[str, object],
                   feedback: dict | None = None, lessons: list[str] | None = None) -> list[dict]:
    system = [_SYSTEM_HEADER.format(role=role), "", "## Procedure", harness.procedure(role)]
    if agent.prompt.strip():
        system += ["", "## Agent instructions", agent.prompt.strip()]
    if lessons:
        system += ["", "## Lessons from earlier runs", *[f"- {x}" for x in lessons]]
    system += ["", "## Answer format", ANSWER_FORMATS[role]]
    user = [task.description()]
    for name, value in inputs.items():
        if name == "task":
            continue
        user += ["", f"## Input: {name}", render_artifact(name, value)]
    if feedback:
        user += ["", f"## Feedback from {feedback.get('from')} ({feedback.get('status')})",
                 render_artifact("feedback", feedback.get("detail", {}))]
    return [{"role": "system", "content": "\n".join(system)}, {"role": "user", "content": "\n".join(user)}]


def render_artifact(name: str, value: object) -> str:
    if name == "code" and isinstance(value, str):
        return f"```python\n{value.rstrip()}\n```"
    if isinstance(value, str):
        return value
    return "```json\n" + json.dumps(value, indent=2, sort_keys=True, default=str) + "\n```"


_CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.S)
_STATUS = re.compile(r"^\s*STATUS:\s*(SUCCESS|RETRY|FALLBACK|FAILURE)\b", re.M | re.I)


def extract_code(text: str) -> str | None:
    """The last fenced python block (models often show a sketch before the final script)."""
    blocks = [b for b in _CODE_BLOCK.findall(text) if b.strip()]
    return blocks[-1].strip() + "\n" if blocks else None


def extract_status(text: str) -> str | None:
    m = _STATUS.search(text)
    return m.group(1).upper() if m else None


def role_of(system_text: str) -> str | None:
    m = re.match(r"You are the (\w+) of a Trellis research team", system_text)
    return m.group(1) if m else None


def extract_json(text: str) -> object:
    """The first ```json block of an answer, else its outermost {...}; ValueError says why not."""
    m = re.search(r"```json\s*\n(.*?)```", text, re.S) or re.search(r"(\{.*\})", text, re.S)
    if not m:
        raise ValueError("the answer holds no JSON object")
    try:
        return json.loads(m.group(1))
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer's JSON does not parse: {exc.msg}") from exc
