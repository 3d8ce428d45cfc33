"""Answer contracts: what each role must answer, read tolerantly, and re-asked once when it
cannot be used.

Every role's answer has a contract: a name, the instruction a model is given (the prompt's
"Answer format" says the same), a reader that returns the value or raises AnswerProblem
naming exactly what is wrong, and, for a JSON answer, a JSON schema sent as structured output
where the endpoint takes one (engine/gateway.py). ``ask`` makes the call, reads the answer and,
when it cannot be used (or was cut off by the answer's length), asks once more with the problem
named and a short excerpt of the bad answer, never the whole of it; a cut-off answer is re-asked
shorter and with twice the room, as far as the model's context allows. Both steps are traced
(``answer_reasked``). What happens to an answer still unusable after that is the role's
decision (engine/roles.py): code that does not compile goes to the debugger, a missing STATUS
is decided from the checks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Generic, TypeVar

from .prompt_format import (CodeBlock, extract_json, extract_status, extract_strategy, extract_verdict,
                            extract_vote, find_code)
from .protocol.events import AnswerReasked

if TYPE_CHECKING:
    from .gateway import Completion, ModelGateway
    from .models import ModelOptions

T = TypeVar("T")
EXCERPT_CHARS = 600   # of a bad answer, quoted back in the re-ask (head and tail)
TRUNCATED_ROOM_FACTOR = 2   # a cut-off answer is re-asked with this many times its room


class AnswerProblem(ValueError):
    """What is wrong with an answer, in words a model can act on."""


@dataclass(frozen=True)
class AnswerContract(Generic[T]):
    name: str
    instruction: str
    read: Callable[[str], T]
    schema: dict | None = None


@dataclass(frozen=True)
class Answer(Generic[T]):
    value: T | None
    text: str
    problem: str = ""          # "" when the value was read
    reasked: bool = False
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return not self.problem


# --- readers -----------------------------------------------------------------------------------------
def read_code(text: str) -> CodeBlock:
    """A program that compiles. A block that does not is a problem naming the error (and the
    cut-off, when its fence was never closed)."""
    block = find_code(text)
    if block is None:
        raise AnswerProblem("the answer holds no Python program (expected one fenced ```python block)")
    if block.syntax_error:
        cut = " and its code block was never closed (the answer was cut off)" if not block.closed else ""
        raise AnswerProblem(f"the program does not compile: {block.syntax_error}{cut}")
    return block


def status_reader(allowed: tuple[str, ...]) -> Callable[[str], str]:
    def read(text: str) -> str:
        status = extract_status(text)
        if status is None:
            raise AnswerProblem(f"the answer has no `STATUS: <{' | '.join(allowed)}>` line")
        if status not in allowed:
            raise AnswerProblem(f"STATUS {status} is not one of {', '.join(allowed)} here")
        return status
    return read


def read_text(text: str) -> str:
    stripped = text.strip()
    if len(stripped) < 2:
        raise AnswerProblem("the answer is empty")
    return stripped


def read_debugger(text: str) -> CodeBlock | str:
    """The corrected program, or ``STATUS: FAILURE`` with the reason nothing can repair it."""
    if extract_status(text) == "FAILURE" and find_code(text) is None:
        reason = next((ln.strip() for ln in text.splitlines()
                       if ln.strip() and "status" not in ln.lower()), "")
        if reason:
            return reason
    return read_code(text)


def json_reader(check: Callable[[object], T]) -> Callable[[str], T]:
    """A JSON object, then ``check`` (which raises AnswerProblem or ValueError for a bad one)."""
    def read(text: str) -> T:
        try:
            data = extract_json(text)
        except ValueError as exc:
            raise AnswerProblem(str(exc)) from None
        if not isinstance(data, dict):
            raise AnswerProblem(f"the answer's JSON is a {type(data).__name__}, not an object")
        try:
            return check(data)
        except AnswerProblem:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise AnswerProblem(str(exc) or type(exc).__name__) from None
    return read


# --- the contracts of the run's roles -------------------------------------------------------------------
CODE = AnswerContract("python program", "Reply with the complete script in one fenced ```python block.", read_code)
ANALYSIS_CODE = AnswerContract("analysis script", "Reply with one fenced ```python block containing the "
                               "exploration script; it prints the report.", read_code)
DEBUG = AnswerContract("corrected program", "Reply with the whole corrected script in one fenced ```python "
                       "block, after one line naming the cause; or `STATUS: FAILURE` and why nothing can repair it.",
                       read_debugger)
PLAN = AnswerContract("plan", "Reply in markdown with one line `strategy: <key> <json parameters>` naming the "
                      "approach, then the rationale.", read_text)
VERIFIER_STATUS = AnswerContract("status", "Start your reply with `STATUS: SUCCESS` or `STATUS: RETRY`.",
                                 status_reader(("SUCCESS", "RETRY")))
ROUTER_STATUS = AnswerContract("status", "Start your reply with `STATUS: SUCCESS`, `STATUS: RETRY` or "
                               "`STATUS: FAILURE`.", status_reader(("SUCCESS", "RETRY", "FAILURE", "FALLBACK")))
REPORT = AnswerContract("report", "Reply with the final report in markdown.", read_text)


# --- the contracts of the tree search's roles (engine/search/tree.py) ---------------------------------
def _line_reader(label: str, extract: Callable[[str], object], example: str) -> Callable[[str], str]:
    def read(text: str) -> str:
        if not extract(text):
            raise AnswerProblem(f"the answer has no `{example}` line")
        return text.strip()
    return read


def _verdict_reader(allowed: tuple[str, ...]) -> Callable[[str], str]:
    def read(text: str) -> str:
        verdict = extract_verdict(text)
        if verdict not in allowed:
            said = f"`verdict: {verdict}` is not one of {', '.join(allowed)}" if verdict else "the answer has no verdict line"
            raise AnswerProblem(f"{said} (write `verdict: {allowed[0]}`, ...)")
        return text.strip()
    return read


TREE = {
    "selector": AnswerContract("vote", "Reply with one line `vote: <node id>` naming one listed node.",
                               _line_reader("vote", extract_vote, "vote: <node id>")),
    "proposer": AnswerContract("proposal", "Reply with one line `strategy: <short key> <json parameters>`, then "
                               "`change: ...` and `rationale: ...` lines.",
                               _line_reader("strategy", extract_strategy, "strategy: <key> <json parameters>")),
    "critic": AnswerContract("critique", "Start with `verdict: accept` or `verdict: revise`.",
                             _verdict_reader(("accept", "revise"))),
    "result_analyst": AnswerContract("result analysis", "Start with `verdict: improved`, `verdict: regressed` or "
                                     "`verdict: unchanged`.", _verdict_reader(("improved", "regressed", "unchanged"))),
    "engineer": CODE, "debugger": CODE, "analyzer": ANALYSIS_CODE,
}


# --- asking --------------------------------------------------------------------------------------------
def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """The head and tail of a long answer, so a re-ask does not carry the whole of it."""
    text = text.strip()
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half].rstrip()}\n[… {len(text) - limit:,} characters left out …]\n{text[-half:].lstrip()}"


def reask_messages(messages: list[dict], text: str, problem: str, contract: AnswerContract, truncated: bool) -> list[dict]:
    shorter = (" Your answer was cut off by its length limit: answer shorter, with nothing before the "
               "requested output." if truncated else "")
    return [*messages, {"role": "assistant", "content": excerpt(text) or "(empty)"},
            {"role": "user", "content": f"Your answer could not be used: {problem}.{shorter} {contract.instruction}"}]


def read(contract: AnswerContract[T], done: "Completion") -> Answer[T]:
    truncated = bool(getattr(done, "truncated", False))
    try:
        value = contract.read(done.text)
        if not truncated:
            return Answer(value, done.text)
        # Cut off, it may still parse (a plan cut at a line's end, a program cut inside its block)
        # but it is half an answer: never used as if whole (a planner's cut answer became the plan).
        problem = ("the program stops where the answer was cut off (its code block was never closed)"
                   if isinstance(value, CodeBlock) and not value.closed else
                   "what it says may stop short of what it meant")
    except AnswerProblem as exc:
        problem = str(exc)
    if truncated:
        problem = (f"the answer was cut off at its limit of {done.max_tokens:,} tokens" +
                   (f" ({problem})" if done.text.strip() else " before any text"))
    return Answer(None, done.text, problem, truncated=truncated)


def ask(gateway: "ModelGateway", agent: str, role: str, messages: list[dict], contract: AnswerContract[T], *,
        temperature: float = 0.7, purpose: str = "role", agent_model: str | None = None,
        agent_options: "ModelOptions | None" = None, first: "Completion | None" = None) -> Answer[T]:
    """The answer to ``messages`` read by ``contract``, re-asked once when it cannot be used.
    ``first`` is an answer already obtained (a role's answer after its tool calls)."""
    done = first or gateway.complete(agent, role, messages, agent_model=agent_model, temperature=temperature,
                                     purpose=purpose, response_schema=contract.schema, agent_options=agent_options)
    answer = read(contract, done)
    if answer.ok:
        return answer
    gateway.tracer.emit(AnswerReasked(role=role, contract=contract.name, problem=answer.problem), agent)
    # Cut off: asked to answer shorter, and given twice the room (as far as the context allows).
    room = done.max_tokens * TRUNCATED_ROOM_FACTOR if answer.truncated and done.max_tokens else None
    again = gateway.complete(agent, role, reask_messages(messages, done.text, answer.problem, contract, answer.truncated),
                             agent_model=agent_model, temperature=temperature, purpose=f"{purpose} re-ask",
                             response_schema=contract.schema, agent_options=agent_options, answer_tokens=room)
    second = read(contract, again)
    gateway.tracer.emit(AnswerReasked(role=role, contract=contract.name, problem=second.problem or answer.problem,
                                      used=second.ok, outcome="used" if second.ok else "unusable"), agent)
    return Answer(second.value, again.text, second.problem, reasked=True, truncated=second.truncated)
