"""Role prompts of workflow agents: what each role is asked to answer, in the engine's one
prompt format (engine.prompt_format), from the agent, its harness and the task.

The answer readers are re-exported so callers keep one import for "ask a role, read its answer".
"""
from __future__ import annotations

from .harness import Harness
from .prompt_format import (build_messages as format_messages, extract_code, extract_json, extract_status,
                            render_artifact, role_of)
from .task import Task
from .workflow import Agent

__all__ = ["ANSWER_FORMATS", "build_messages", "extract_code", "extract_json", "extract_status",
           "render_artifact", "role_of"]

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


PROGRAM_ROLES = frozenset({"coder", "debugger", "engineer"})


def program_output(task: Task) -> str:
    """What a program must print and write, said exactly: the validation line a report's claims
    are compared with (engine/plausibility.py measured_in; never a score Trellis ranks by) and
    the predictions file with its contract."""
    r = task.resources
    return (f" The script must print its score on a hold-out split of the training data as one line "
            f"`validation_{task.metric.name}: <number>`, and write `{r.predictions_file}` with contract "
            f"`{r.prediction_contract()}`.")


def answer_format(role: str, task: Task, base: str | None = None) -> str:
    """The role's answer format, with a program's required output spelled out for the task."""
    text = base if base is not None else ANSWER_FORMATS[role]
    return text + program_output(task) if role in PROGRAM_ROLES else text


def build_messages(role: str, agent: Agent, harness: Harness, task: Task, inputs: dict[str, object],
                   feedback: dict | None = None, lessons: list[str] | None = None) -> list[dict]:
    """The prompt of ``agent`` playing ``role``. The task is the user message's opening, so an
    input named ``task`` is not repeated as a section."""
    return format_messages(role, harness.procedure(role), answer_format(role, task), task.description(),
                           {k: v for k, v in inputs.items() if k != "task"},
                           instructions=instructions(agent, role) or None, lessons=lessons, feedback=feedback)


def instructions(agent: Agent, role: str) -> str:
    """The agent's own prompt, then the skills and references attached to it for ``role``: a
    skill as its procedure under its title, a reference as its text. Labelled lines, not
    headings: a heading would end the prompt section they are placed in."""
    parts = [agent.prompt.strip()] if agent.prompt.strip() else []
    for x in agent.attachments:
        if x.role and x.role != role:
            continue
        if x.kind == "skill":
            parts.append(f"Skill: {x.title} ({x.ref})\n{_unheaded(x.text)}")
        elif x.kind == "resource":
            parts.append(f"Reference: {x.title} ({x.ref})\n{_unheaded(x.text)}")
    return "\n\n".join(parts)


def _unheaded(text: str) -> str:
    return "\n".join(line.lstrip("#").strip() if line.startswith("#") else line for line in text.strip().splitlines())
