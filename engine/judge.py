"""The LLM judge (Mimosa) beside the public checks.

The judge scores one execution on goal alignment g, collaboration efficiency c, output
quality q and answer plausibility a, each in [0, 1], J = (g+c+q+a)/4, with written feedback
per criterion. It sees the public checks. A malformed answer is retried, then recorded as a
failed judgement: never silently given a score.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field

from .answers import AnswerContract, ask, json_reader
from .errors import ModelCallError
from .gateway import ModelGateway
from .judge_rubric import ANSWER_FORMAT, CRITERIA, JUDGE_PROCEDURE
from .prompt_format import build_messages, fenced_json
from .task import Task
from .trace import Event

__all__ = ["CRITERIA", "Judgement", "build_judge_messages", "judge_execution", "parse_judgement", "public_checks"]


@dataclass
class Judgement:
    ok: bool
    scores: dict[str, float] = field(default_factory=dict)
    feedback: dict[str, str] = field(default_factory=dict)
    attempts: int = 0
    error: str = ""
    raw: list[str] = field(default_factory=list)

    @property
    def J(self) -> float | None:  # noqa: N802 - the papers' name
        return sum(self.scores[c] for c in CRITERIA) / len(CRITERIA) if self.ok else None

    def to_dict(self) -> dict:
        return {**asdict(self), "J": self.J}

    @classmethod
    def from_dict(cls, d: dict) -> "Judgement":
        return cls(ok=bool(d.get("ok")), scores=dict(d.get("scores", {})), feedback=dict(d.get("feedback", {})),
                   attempts=int(d.get("attempts", 0)), error=str(d.get("error", "")), raw=list(d.get("raw", [])))


def public_checks(events: list[Event]) -> list[dict]:
    """The latest result of each public check in a run (a retry supersedes earlier tries)."""
    latest: dict[str, dict] = {}
    for e in events:
        if e.kind == "check":
            check = e.data
            latest[check.name] = {"agent": e.agent, **check.to_payload()}
    return list(latest.values())


def execution_summary(events: list[Event]) -> dict:
    calls = [e.data for e in events if e.kind == "model_call"]
    finished = {e.agent: e.data for e in events if e.kind == "agent_finished"}
    evaluation = next((e.data for e in reversed(events) if e.kind == "evaluation"), None)
    execs = [e.data for e in events if e.kind == "code_execution"]
    return {
        "agents": {a: p.status for a, p in finished.items()},
        "model_calls": len(calls),
        "tokens": sum(c.prompt_tokens + c.completion_tokens for c in calls),
        "retries": sum(1 for e in events if e.kind == "route" and e.data.taken),
        "executions": [{k: getattr(x, k) for k in ("purpose", "status", "exit_code", "duration_s")} for x in execs],
        "last_stdout": execs[-1].stdout_tail[-1200:] if execs else "",
        "final_report": next((p.outputs.get("final_report", "") for a, p in reversed(list(finished.items()))
                              if "final_report" in p.outputs), ""),
        "validation": {k: getattr(evaluation, k) if evaluation is not None else None
                       for k in ("ok", "metric", "value", "higher_is_better", "split", "error", "baselines")},
    }


def build_judge_messages(task: Task, summary: dict, checks: list[dict]) -> list[dict]:
    check_lines = "\n".join(f"- {'PASS' if c['passed'] else 'FAIL'} {c['name']}: {c['detail']}" for c in checks)
    return build_messages("judge", JUDGE_PROCEDURE, ANSWER_FORMAT, task.description(), {
        "public_checks": check_lines or "(none ran)", "execution": fenced_json(summary, sort_keys=False)})


def parse_judgement(text: str) -> tuple[dict[str, float], dict[str, str]]:
    """Scores and feedback from a judge answer; ValueError says what is malformed."""
    m = re.search(r"\{.*\}", text, re.S)
    if not m:
        raise ValueError("no JSON object in the answer")
    try:
        data = json.loads(m.group(0))
    except json.JSONDecodeError as exc:
        raise ValueError(f"the JSON does not parse: {exc.msg}") from exc
    scores, feedback = {}, {}
    for c in CRITERIA:
        item = data.get(c)
        if not isinstance(item, dict) or "score" not in item:
            raise ValueError(f"criterion {c!r} is missing or has no score")
        score = item["score"]
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0.0 <= float(score) <= 1.0:
            raise ValueError(f"criterion {c!r} has score {score!r}, not a number in [0, 1]")
        if not str(item.get("feedback", "")).strip():
            raise ValueError(f"criterion {c!r} has no written feedback")
        scores[c], feedback[c] = float(score), str(item["feedback"]).strip()
    return scores, feedback


def _read_judgement(data: dict) -> tuple[dict[str, float], dict[str, str]]:
    return parse_judgement(json.dumps(data))


JUDGE_SCHEMA = {"type": "object", "required": list(CRITERIA), "properties": {
    c: {"type": "object", "required": ["score", "feedback"],
        "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}, "feedback": {"type": "string"}}}
    for c in CRITERIA}}
JUDGE_ANSWER = AnswerContract("judgement", ANSWER_FORMAT, json_reader(_read_judgement), JUDGE_SCHEMA)


def judge_execution(task: Task, events: list[Event], gateway: ModelGateway, agent: str = "judge",
                    retries: int = 2) -> Judgement:
    """One judgement. A malformed answer is re-asked once with what was wrong (engine/answers.py)
    and is then a failed judgement; ``retries`` more tries are spent only on a call that got no
    answer at all (an empty one, a refusal)."""
    checks = public_checks(events)
    messages = build_judge_messages(task, execution_summary(events), checks)
    judgement = Judgement(ok=False)
    for attempt in range(1, retries + 2):
        judgement.attempts = attempt
        try:
            answer = ask(gateway, agent, "judge", messages, JUDGE_ANSWER, temperature=0.0, purpose="judge")
        except ModelCallError as exc:
            judgement.error = str(exc)
            continue
        judgement.raw.append(answer.text)
        if answer.value is None:
            judgement.error = f"malformed judge answer{' (re-asked once)' if answer.reasked else ''}: {answer.problem}"
            break
        judgement.scores, judgement.feedback = answer.value
        judgement.ok, judgement.error = True, ""
        break
    return judgement
