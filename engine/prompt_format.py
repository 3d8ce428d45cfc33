"""The prompt format: the one layout the engine writes and every model (real or offline) reads.

A prompt is two messages. The system message opens with the task description, identical in
every call of a run, so that a provider's prompt cache (llama.cpp's and vLLM's prefix reuse,
OpenAI's automatic prompt caching) serves it once and every later call only pays for what
follows. Then the role and its rules:

    <task description>

    You are the <role> of a Trellis research team working on the task above.

    ## Procedure
    ## Agent instructions          (optional)
    ## Lessons from earlier runs   (optional, one "- " line per lesson)
    ## Answer format

The user message holds one ``## Input: <name>`` section per input and, on a repair loop, one
``## Feedback from <from> (<status>)`` section. ``reading_view`` turns a prompt back into the
older reading order (rules; task then inputs) that the readers below take.

Answers are free text holding a few structured blocks, each read by one function here:
a fenced python block (extract_code), a fenced json block (extract_json), a ``STATUS:``
line (extract_status), a ``strategy: <key> <json params>`` line (extract_strategy; also the
``# strategy:`` header comment of a program), ``vote: <id>`` and ``verdict: <word>``.

Plain markdown with fixed headings, so a person reading a trace can follow it too. Nothing
here knows about workflows, tasks or the offline provider: builders pass text in.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Callable

import pydantic_core

HEADER = "You are the {role} of a Trellis research team working on the task above."
PROCEDURE = "Procedure"
INSTRUCTIONS = "Agent instructions"
LESSONS = "Lessons from earlier runs"
ANSWER_FORMAT = "Answer format"
INPUT_PREFIX = "Input: "
FEEDBACK_PREFIX = "Feedback from "
# A tool message whose call failed begins with this (engine/tool_calls.py writes it).
TOOL_ERROR_PREFIX = "ERROR: "
TOOL_RESULTS = "tool_results"   # the input the offline scientist reads its tool results as
NO_INPUTS = "Answer now, in the answer format above."   # the user turn of a prompt without inputs


def input_heading(name: str) -> str:
    return f"{INPUT_PREFIX}{name}"


def feedback_heading(source: object, status: object) -> str:
    return f"{FEEDBACK_PREFIX}{source} ({status})"


# --- writing ------------------------------------------------------------------------------------
def build_messages(role: str, procedure: str, answer_format: str, task_text: str, inputs: dict[str, object],
                   *, instructions: str | None = None, lessons: list[str] | None = None,
                   feedback: dict | None = None) -> list[dict]:
    """System and user message of one role prompt. ``inputs`` are rendered in their order by
    render_artifact; ``feedback`` is ``{"from", "status", "detail"}``."""
    system = [task_text.strip(), "", HEADER.format(role=role), "", f"## {PROCEDURE}", procedure]
    if instructions:
        system += ["", f"## {INSTRUCTIONS}", instructions]
    if lessons:
        system += ["", f"## {LESSONS}", *[f"- {x}" for x in lessons]]
    system += ["", f"## {ANSWER_FORMAT}", answer_format]
    user: list[str] = []
    for name, value in inputs.items():
        user += ["", f"## {input_heading(name)}", render_artifact(name, value)]
    if feedback:
        user += ["", f"## {feedback_heading(feedback.get('from'), feedback.get('status'))}",
                 render_artifact("feedback", feedback.get("detail", {}))]
    # a prompt with no inputs still asks: some chat templates refuse a conversation without a user turn
    body = "\n".join(user).strip() or NO_INPUTS
    return [{"role": "system", "content": "\n".join(system)}, {"role": "user", "content": body}]


# --- fitting a prompt into a model's context -----------------------------------------------------------
CUT_MARK = "[… {n:,} characters cut here to fit the model's context …]"
MIN_PIECE_CHARS = 400   # a section is never cut below this: a head and a tail still say what it was


@dataclass
class _Piece:
    text: str
    cuttable: int          # 0: never cut (the role's rules, headings); 1: an input or feedback; 2: the task
    keep: int = -1         # characters kept of ``text`` (-1: all)

    def render(self) -> str:
        if self.keep < 0 or self.keep >= len(self.text):
            return self.text
        half = self.keep // 2
        return (f"{self.text[:half].rstrip()}\n{CUT_MARK.format(n=len(self.text) - 2 * half)}\n"
                f"{self.text[len(self.text) - half:].lstrip()}")

    @property
    def size(self) -> int:
        return len(self.text) if self.keep < 0 else self.keep


def _pieces(message: dict) -> list[_Piece]:
    text = str(message.get("content") or "")
    if message.get("role") == "system":
        task, rules = split_system(text)
        return [_Piece(task, 2), _Piece("\n\n", 0), _Piece(rules, 0)] if task else [_Piece(rules, 0)]
    if message.get("role") != "user":
        return [_Piece(text, 1)]
    out, at = [], 0
    for m in _HEADING.finditer(text):  # each input's body is cut on its own; its heading stays whole
        out += [_Piece(text[at:m.start()], 1), _Piece(m.group(0), 0)]
        at = m.end()
    return [*out, _Piece(text[at:], 1)]


def fit_prompt(messages: list[dict], too_long: Callable[[list[dict]], bool]) -> tuple[list[dict], int]:
    """``messages`` cut until ``too_long`` is False: the longest input or feedback is halved
    (its head and tail kept around a marker saying how much went), and only when every input is
    down to MIN_PIECE_CHARS the task description's text. Returns the messages and how many
    characters were cut; still too long when nothing more can go (the caller refuses the call)."""
    if not too_long(messages):
        return messages, 0
    split = [_pieces(m) for m in messages]

    def build() -> list[dict]:
        return [{**m, "content": "".join(p.render() for p in pieces)} if pieces else m
                for m, pieces in zip(messages, split)]

    fitted = messages
    for level in (1, 2):
        while True:
            candidates = [p for pieces in split for p in pieces if p.cuttable == level and p.size > MIN_PIECE_CHARS]
            if not candidates:
                break
            longest = max(candidates, key=lambda p: p.size)
            longest.keep = max(MIN_PIECE_CHARS, longest.size // 2)
            fitted = build()
            if not too_long(fitted):
                return fitted, _cut(split)
    return fitted, _cut(split)


def _cut(split: list[list[_Piece]]) -> int:
    return sum(len(p.text) - p.size for pieces in split for p in pieces if p.keep >= 0)


def render_artifact(name: str, value: object) -> str:
    """Text as is, code (an input named ``code``) as a python block, anything else as JSON."""
    if name == "code" and isinstance(value, str):
        return f"```python\n{value.rstrip()}\n```"
    if isinstance(value, str):
        return value
    return fenced_json(value, indent=2, sort_keys=True)


def fenced_json(value: object, *, indent: int = 2, sort_keys: bool = True) -> str:
    try:
        # json.dumps indents in pure Python (its C encoder only writes compact JSON), and the same
        # artifact goes into the prompt of every agent it is handed to: the text is kept per value
        compact = pydantic_core.to_json(value, inf_nan_mode="constants", fallback=str)
    except (ValueError, TypeError, pydantic_core.PydanticSerializationError):
        return _fence(value, indent, sort_keys)
    return _fenced(compact, indent, sort_keys) if len(compact) <= 64_000 else _fence(value, indent, sort_keys)


@functools.lru_cache(maxsize=128)  # at most 128 x (64 kB + its indented text)
def _fenced(compact: bytes, indent: int, sort_keys: bool) -> str:
    # the value read back from its JSON is the value json.dumps would have written
    return _fence(json.loads(compact), indent, sort_keys)


def _fence(value: object, indent: int, sort_keys: bool) -> str:
    return "```json\n" + json.dumps(value, indent=indent, sort_keys=sort_keys, default=str) + "\n```"


def strategy_line(key: str, params: dict) -> str:
    """The line extract_strategy reads (prefix it with ``# `` to make it a program's header)."""
    return f"strategy: {key} {json.dumps(params, sort_keys=True)}"


# --- reading a prompt -----------------------------------------------------------------------------
_ROLE = re.compile(r"You are the (\w+) of a Trellis research team")
_HEADING = re.compile(rf"^## (?:{re.escape(INPUT_PREFIX)}(.+?)|{re.escape(FEEDBACK_PREFIX)}.*)[ \t]*$", re.M)


_ROLE_LINE = re.compile(r"^You are the (\w+) of a Trellis research team working on the task above\.[ \t]*$", re.M)


def split_system(system: str) -> tuple[str, str]:
    """A system message as (task description, the role's rules from its "You are the ..." line
    on). A system message without that line is all rules. The first such line at the start of
    a line is the role's: a task that writes the same sentence itself only confuses readers of
    its own prompts."""
    m = _ROLE_LINE.search(system)
    if not m:
        return "", system
    return system[:m.start()].strip(), system[m.start():]


def reading_view(messages: list[dict]) -> tuple[str, str]:
    """(system, user) of a prompt in reading order: the role's rules; the task description,
    then the inputs and feedback of every user message. What the readers here take."""
    system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
    task, rules = split_system(system)
    user = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
    if user.startswith(NO_INPUTS):
        user = user[len(NO_INPUTS):].lstrip("\n")
    return rules, f"{task}\n\n{user}".rstrip() if task else user


def role_of(prompt: str | list[dict]) -> str | None:
    """The role a prompt addresses, from its system text or its messages; None if it is no
    Trellis role prompt."""
    if not isinstance(prompt, str):
        prompt = next((m.get("content") or "" for m in prompt if m.get("role") == "system"), "")
    m = _ROLE.match(split_system(prompt)[1])
    return m.group(1) if m else None


def section(text: str, heading: str) -> str:
    """The body under ``## <heading>`` up to the next ``## `` heading of any kind, stripped;
    "" if absent. An input that holds its own ``## `` headings is cut at the first of them:
    use inputs() to read such an input whole."""
    m = re.search(rf"^## {re.escape(heading)}\s*\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1).strip() if m else ""


def inputs(user_text: str) -> dict[str, str]:
    """Every ``## Input: <name>`` section of a user message, name -> body as rendered (stripped).
    Only the format's own headings (inputs, feedback) end an input, so markdown headings inside
    an input (a data report's ``## Structure``) stay part of it."""
    found = list(_HEADING.finditer(user_text))
    out: dict[str, str] = {}
    for i, m in enumerate(found):
        if m.group(1) is None:
            continue  # the feedback section
        end = found[i + 1].start() if i + 1 < len(found) else len(user_text)
        out[m.group(1)] = user_text[m.end():end].strip()
    return out


# The task description opens every user message (engine.task.Task.description): a title line,
# then these sections in this order. Evaluation comes last and carries Evaluation.md whole,
# whose own "## Metric" heading must not end it.
TASK_SECTIONS = ("Goal", "Context", "Constraints", "Resources", "Evaluation")


def task_text(user_text: str) -> str:
    """The task description of a user message: everything before its first input or feedback
    section, stripped."""
    m = _HEADING.search(user_text)
    return (user_text[:m.start()] if m else user_text).strip()


def task_sections(user_text: str) -> dict[str, str]:
    """The task description's sections (TASK_SECTIONS), name -> body stripped; absent ones are "".
    Only those headings split it, so a section may hold ``## `` headings of its own (the
    evaluation's ``## Metric``); a section the description gains later stays inside the one
    before it rather than being lost."""
    text = task_text(user_text)
    names = "|".join(re.escape(n) for n in TASK_SECTIONS)
    found = list(re.finditer(rf"^## ({names})[ \t]*$", text, re.M))
    out = dict.fromkeys(TASK_SECTIONS, "")
    for i, m in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(text)
        if not out[m.group(1)]:  # the first heading of a name is the description's own
            out[m.group(1)] = text[m.end():end].strip()
    return out


# The Resources section is a list of facts, one per line: "- label: value", names in backticks.
# engine/task.py and each answer kind (engine/assessment, ``deliverable``) write them with these;
# whoever answers a prompt reads them back with the same (the offline scientist; its answer kinds'
# own lines with ``Assessment.read_deliverable``).
TARGET_COLUMN, FEATURE_COLUMNS, ID_COLUMN = "target column", "feature columns", "id column"
TASK_KIND, KNOWN_CONSTRAINTS, IN_LOOP_VALIDATION = "task kind", "known constraints", "in-loop validation"


def named(*names: object) -> str:
    """Names as a Resources line gives them: each in backticks."""
    return ", ".join(f"`{n}`" for n in names)


def resource_line(label: str, value: str) -> str:
    return f"- {label}: {value}"


def resource_value(resources: str, label: str) -> str:
    """The value of the Resources line ``label`` ('' when there is none)."""
    m = re.search(rf"^- {re.escape(label)}: (.+)$", resources, re.M)
    return m.group(1) if m else ""


def backticked(text: str) -> list[str]:
    """The names in a Resources value, in order."""
    return re.findall(r"`([^`]+)`", text)


def resource_names(resources: str, label: str) -> list[str]:
    """The names the Resources line ``label`` gives."""
    return backticked(resource_value(resources, label))


def resource_name(resources: str, label: str, default: str = "") -> str:
    """The first name the Resources line ``label`` gives, else ``default``."""
    return (resource_names(resources, label) or [default])[0]


def predictions_line(file: str, contract: str) -> str:
    return f"- write predictions to `{file}` with contract `{contract}`"


def read_predictions_line(resources: str) -> tuple[str, str]:
    """(the predictions file, its contract) of the Resources section ('' for what it lacks)."""
    m = re.search(r"^- write predictions to `([^`]+)`(?: with contract `([^`]*)`)?", resources, re.M)
    return (m.group(1), m.group(2) or "") if m else ("", "")


@dataclass(frozen=True)
class Feedback:
    source: str
    status: str
    body: str


_FEEDBACK = re.compile(rf"^## {re.escape(FEEDBACK_PREFIX)}(.*?) \(([^()\n]*)\)[ \t]*$", re.M)


def feedback(user_text: str) -> Feedback | None:
    """The feedback section of a repair prompt (its body up to the next ``## `` heading), or None."""
    m = _FEEDBACK.search(user_text)
    if not m:
        return None
    return Feedback(m.group(1), m.group(2), section(user_text[m.start():], feedback_heading(m.group(1), m.group(2))))


# --- tool calls in a conversation ------------------------------------------------------------------
@dataclass(frozen=True)
class ToolExchange:
    """One tool call of a conversation and what came back."""

    name: str           # the function name the model called
    arguments: dict
    ok: bool
    result: str         # the result, or the error without its prefix


def tool_exchanges(messages: list[dict]) -> list[ToolExchange]:
    """Each call an assistant message asked for, with the ``tool`` message answering it."""
    answers = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
    out = []
    for m in messages:
        for call in (m.get("tool_calls") or []) if m.get("role") == "assistant" else []:
            function = call.get("function") or {}
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except (TypeError, ValueError):
                arguments = {}
            answer = answers.get(call.get("id"))
            if answer is None:
                continue
            failed = answer.startswith(TOOL_ERROR_PREFIX)
            out.append(ToolExchange(str(function.get("name", "")), arguments if isinstance(arguments, dict) else {},
                                    not failed, answer[len(TOOL_ERROR_PREFIX):] if failed else answer))
    return out


def render_tool_results(exchanges: list[ToolExchange]) -> str:
    """Tool results as one input: a ``### <tool> <arguments>`` heading and the result (or
    ``ERROR: ...``) per call. Read back by parse_tool_results."""
    parts = []
    for x in exchanges:
        parts += [f"### {x.name} {json.dumps(x.arguments, sort_keys=True)}",
                  x.result if x.ok else f"{TOOL_ERROR_PREFIX}{x.result}", ""]
    return "\n".join(parts).strip()


_TOOL_RESULT = re.compile(r"^### (\S+) (\{.*\})[ \t]*$", re.M)


def parse_tool_results(text: str) -> list[ToolExchange]:
    """The exchanges of a rendered ``tool_results`` input."""
    found = list(_TOOL_RESULT.finditer(text))
    out = []
    for i, m in enumerate(found):
        body = text[m.end():found[i + 1].start() if i + 1 < len(found) else len(text)].strip()
        try:
            arguments = json.loads(m.group(2))
        except ValueError:
            arguments = {}
        failed = body.startswith(TOOL_ERROR_PREFIX)
        out.append(ToolExchange(m.group(1), arguments if isinstance(arguments, dict) else {}, not failed,
                                body[len(TOOL_ERROR_PREFIX):] if failed else body))
    return out


# --- reading an answer ------------------------------------------------------------------------------
# Real models decorate what they are asked for: any fence (``` or ~~~) with any language tag,
# markdown emphasis around keys (**STATUS:** SUCCESS), a block cut off by the answer's length.
# The readers accept all of these; engine/answers.py names what is still missing.
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:^[ \t]*(?P<close>\1)[ \t]*$|\Z)", re.M | re.S)
_NOT_PYTHON = frozenset({"json", "bash", "sh", "shell", "console", "text", "txt", "output", "csv", "markdown", "md",
                         "yaml", "yml", "toml", "ini", "html", "xml", "sql", "r", "julia", "javascript", "js", "diff"})
_DECOR = r"[ \t>*_`#-]*"          # markdown a key may be wrapped in: bullets, emphasis, code, headings
_STATUS = re.compile(rf"^{_DECOR}status{_DECOR}\s*[:=\-–]\s*{_DECOR}(SUCCESS|RETRY|FALLBACK|FAILURE)\b", re.M | re.I)
_STRATEGY = re.compile(rf"^{_DECOR}strategy{_DECOR}\s*:[\s*_`]*([a-z0-9_]+)[*_`]*[ \t]*`?(\{{[^\n]*?)?`?[ \t*_]*$",
                       re.M | re.I)
_VOTE = re.compile(rf"^{_DECOR}vote{_DECOR}\s*:[\s*_`]*(n\d+)", re.M | re.I)
_VERDICT = re.compile(rf"^{_DECOR}verdict{_DECOR}\s*:[\s*_`]*(\w+)", re.M | re.I)
_CODE_LINE = re.compile(r"^\s*(import |from \S+ import |def |class |print\(|if __name__|[A-Za-z_][\w.]*\s*=[^=])", re.M)


@dataclass(frozen=True)
class CodeBlock:
    code: str
    fenced: bool        # False: the answer was code without a fence
    closed: bool        # False: the fence was never closed (the answer was cut off)
    syntax_error: str   # "" when the code compiles


def syntax_problem(code: str) -> str:
    """Why ``code`` does not compile as Python, or ""."""
    try:
        compile(code, "<answer>", "exec")
    except SyntaxError as exc:
        return f"{exc.msg} (line {exc.lineno})"
    except ValueError as exc:  # null bytes
        return str(exc)
    return ""


def code_blocks(text: str) -> list[CodeBlock]:
    """The python-looking fenced blocks of an answer, in order (a block tagged json, bash, ...
    is not code to run)."""
    out = []
    for m in _FENCE.finditer(text):
        tag, body = m.group(2).lower(), m.group(3)
        if tag in _NOT_PYTHON or not body.strip():
            continue
        closed = m.group("close") is not None
        code = body.strip("\n") + "\n"
        out.append(CodeBlock(code, True, closed, syntax_problem(code)))
    return out


def find_code(text: str) -> CodeBlock | None:
    """The program in an answer: the last fenced block that compiles (models often show a
    sketch before the final script), else the last fenced block, else the whole answer when it
    is code without a fence (or code after a line of prose); None when there is no code."""
    blocks = code_blocks(text)
    if blocks:
        good = [b for b in blocks if not b.syntax_error]
        return (good or blocks)[-1]
    stripped = text.strip()
    if not stripped or not _CODE_LINE.search(stripped):
        return None
    lines = stripped.splitlines()
    for skip in range(min(len(lines), 4)):  # a line or three of prose before unfenced code
        candidate = "\n".join(lines[skip:]).strip() + "\n"
        if _CODE_LINE.search(candidate) and not syntax_problem(candidate):
            return CodeBlock(candidate, False, True, "")
    return None


def extract_code(text: str) -> str | None:
    """The program of an answer (find_code), or None."""
    block = find_code(text)
    return block.code if block else None


def extract_json(text: str) -> object:
    """The first fenced json (or untagged) block of an answer that parses, else its outermost
    {...}; ValueError says why not."""
    candidates = [m.group(3) for m in _FENCE.finditer(text) if m.group(2).lower() in ("json", "")]
    brace = re.search(r"(\{.*\})", text, re.S)
    if brace:
        candidates.append(brace.group(1))
    if not candidates:
        raise ValueError("the answer holds no JSON object")
    problem = ""
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except json.JSONDecodeError as exc:
            problem = problem or f"the answer's JSON does not parse: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    raise ValueError(problem)


_JSON_BLOCK = re.compile(r"```json\s*\n(.*?)```", re.S)


def json_block(text: str) -> object | None:
    """The first ```json block parsed, or None when there is none or it does not parse (for
    reading rendered inputs, where a missing block just means nothing to read)."""
    m = _JSON_BLOCK.search(text)
    try:
        return json.loads(m.group(1)) if m else None
    except json.JSONDecodeError:
        return None


def extract_status(text: str) -> str | None:
    m = _STATUS.search(text)
    return m.group(1).upper() if m else None


def extract_strategy(text: str | None) -> tuple[str, dict] | None:
    """(key, params) of the first ``strategy: <key> <json params>`` line, the ``# strategy:``
    header of a program included; params are {} when absent or not a JSON object."""
    m = _STRATEGY.search(text or "")
    if not m:
        return None
    try:
        params = json.loads(m.group(2) or "{}")
    except json.JSONDecodeError:
        params = {}
    return m.group(1).lower(), params if isinstance(params, dict) else {}


def extract_vote(text: str) -> str | None:
    """The node id of a ``vote: <id>`` line, lower-cased; None for no vote (or ``vote: none``)."""
    m = _VOTE.search(text)
    return m.group(1).lower() if m else None


def extract_verdict(text: str) -> str:
    """The word of a ``verdict: <word>`` line, lower-cased; "" when there is none."""
    m = _VERDICT.search(text)
    return m.group(1).lower() if m else ""
