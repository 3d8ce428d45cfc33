"""A live progress line per step, for the command line."""
from __future__ import annotations

import json
import sys
from typing import TextIO

from .protocol.events import (AgentFinished, AgentStarted, AnswerReasked, BudgetExhausted, Check, CodeExecution,
                              Evaluation, EvidenceRecorded, Handoff, McpToolCall, McpToolResult, MemoryRetrieval,
                              ModelCall, ModelCallFailed, Route, RunFinished, RunStarted, ToolsDiscovered)
from .replay import SearchState
from .trace import Event


# A message, reason or check detail longer than this is cut (at a word) unless --verbose.
MESSAGE_LIMIT = 240
# How many of its last stderr lines a failed execution shows: where a traceback says why.
STDERR_LINES = 5
# The kinds an event line describes (any other kind prints nothing, or its kind with --verbose).
_DESCRIBED = frozenset(m.kind for m in (
    RunStarted, AgentStarted, ModelCall, ModelCallFailed, AnswerReasked, CodeExecution, Handoff, Check, Route,
    AgentFinished, BudgetExhausted, Evaluation, RunFinished, ToolsDiscovered, McpToolCall, McpToolResult,
    MemoryRetrieval, EvidenceRecorded))
_INDENT = " " * 24  # under the text of an event line: "[   12.3s] agent        "


def shorten(text: str, limit: int | None = MESSAGE_LIMIT) -> str:
    """``text`` on one line, cut at the last word boundary before ``limit`` with "…"; never
    mid-word (a single word longer than the limit is cut, there is no boundary to cut at)."""
    flat = " ".join(str(text).split())
    if limit is None or len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space > 0 and not flat[limit - 1].isspace():
        cut = cut[:space]
    return cut.rstrip(" ,;:-") + "…"


def stderr_tail(stderr: str, lines: int = STDERR_LINES) -> list[str]:
    """The last non-blank lines of a program's stderr."""
    kept = [ln.rstrip() for ln in stderr.splitlines() if ln.strip()]
    return kept[-lines:]


class ConsoleSink:
    """The run's progress as lines; it folds the events as the studio's pages do (engine/replay.py),
    so a finished agent says how far its workflow has come."""

    def __init__(self, out: TextIO = sys.stdout, verbose: bool = False):
        self.out = out
        self.verbose = verbose
        self.t0: float | None = None
        self.state = SearchState()

    def emit(self, event: Event) -> None:
        if self.t0 is None:
            self.t0 = event.ts
        self.state.apply(event)
        line = describe(event, limit=None if self.verbose else MESSAGE_LIMIT)
        if line is None and not self.verbose:
            return
        if event.kind == "agent_finished" and (run := self.state.probes.get(event.run_id)) is not None:
            states = run.dag_states()
            line += f"  [{sum(s in ('done', 'failed', 'skipped') for s in states.values())}/{len(states)} agents]"
        agent = (event.agent or "-")[:12]
        text = (line or event.kind).replace("\n", "\n" + _INDENT)
        self.out.write(f"[{event.ts - self.t0:7.1f}s] {agent:<12} {text}\n")
        self.out.flush()

    def close(self) -> None:
        pass


def describe(e: Event, limit: int | None = MESSAGE_LIMIT) -> str | None:
    """One event as console text (a failed execution adds its stderr's last lines below);
    free text is cut to ``limit`` characters at a word boundary (None: never cut)."""
    if e.kind not in _DESCRIBED or (e.kind == "evidence_recorded" and limit is not None):
        return None  # every evidence record only with --verbose
    p = e.data

    def cut(text: object) -> str:
        return shorten(str(text), limit)

    if isinstance(p, RunStarted):
        return (f"run {e.run_id} on {p.task} | workflow {p.workflow_hash[:12]} "
                f"({len(p.order)} agents) | executor {p.executor}")
    if isinstance(p, AgentStarted):
        retry = f" (again, after {p.retry_of})" if p.retry_of else ""
        return f"started {'+'.join(p.roles)}{retry}"
    if isinstance(p, ModelCall):
        cached = " cached" if p.cached else ""
        return (f"model {p.model} [{p.provider.split(' ')[0]}] {p.prompt_tokens}+{p.completion_tokens} tok "
                f"${p.cost_usd:.4f} {p.duration_s:.2f}s{cached}"
                + (f" CUT OFF at {p.max_tokens} tokens" if p.finish_reason == "length" else "")
                + (f" (prompt cut by {p.prompt_cut_chars:,} characters to fit the model's context)"
                   if p.prompt_cut_chars else ""))
    if isinstance(p, ModelCallFailed):
        then = f"; retry in {p.retry_in_s:g}s" if p.retry_in_s is not None else ""
        return f"model call failed ({p.error_kind}, attempt {p.attempt}): {cut(p.error)}{then}"
    if isinstance(p, AnswerReasked):
        if p.used is None:
            return f"answer unusable ({p.contract}): {cut(p.problem)}; re-asked once"
        return f"re-asked answer {'used' if p.used else 'still unusable: ' + cut(p.problem)}"
    if isinstance(p, CodeExecution):
        files = ", ".join(p.files) or "no files"
        line = f"ran code ({p.purpose}): {p.status} exit {p.exit_code} in {p.duration_s:.1f}s -> {files}"
        if p.status != "ok":
            # the cause (a KeyError, a missing file) belongs on the console, not only in the trace
            tail = stderr_tail(p.stderr_tail or p.stderr or "")
            line += "".join(f"\n  | {ln}" for ln in tail) or "\n  | (nothing on stderr)"
        return line
    if isinstance(p, Handoff):
        return None if p.ok else \
            f"CONTRACT VIOLATION {p.source} -> {p.target} {p.artifact}: {cut(p.errors[0])}"
    if isinstance(p, Check):
        return f"check {p.name}: {'pass' if p.passed else 'FAIL'} ({cut(p.detail)})"
    if isinstance(p, Route):
        if p.taken:
            return f"{p.on} -> {p.target} (loop {p.loop}/{p.max_loops})"
        return f"{p.on} not routed: {cut(p.reason)}"
    if isinstance(p, AgentFinished):
        msg = f" - {cut(p.message)}" if p.message else ""
        return f"finished {p.status}{msg}"
    if isinstance(p, BudgetExhausted):
        return f"BUDGET EXHAUSTED: {cut(p.reason)}"
    if isinstance(p, Evaluation):
        if p.splits is not None:  # Trellis's in-loop validation: evaluate.py --truth on folds of the training rows
            return f"validation: {p.metric} = {p.value:.6g} over {p.splits} fold(s)" if p.ok else \
                f"validation failed: {cut(p.error)}"
        if p.ok:
            return f"evaluate.py: {p.metric} = {p.value:.6g}"
        return f"evaluation failed: {cut(p.error)}"
    if isinstance(p, RunFinished):
        return f"run {p.status}{': ' + cut(p.reason) if p.reason else ''}"
    if isinstance(p, ToolsDiscovered):
        return "\n".join(f"tools {t.name}: {len(t.tools)} ({', '.join(t.tools)}) in {t.duration_s:.1f}s"
                         if t.ok else f"tools {t.name}: NOT AVAILABLE, {cut(t.error)}"
                         for t in p.servers) or "tools: no MCP server configured"
    if isinstance(p, McpToolCall):
        return f"calls {p.tool} {cut(json.dumps(p.arguments, sort_keys=True))}"
    if isinstance(p, McpToolResult):
        return (f"tool {p.tool}: ok in {p.duration_s:.2f}s" if p.ok else
                f"tool {p.tool}: ERROR {cut(p.error)}")
    if isinstance(p, MemoryRetrieval):  # only what a role was actually given
        given = [*p.records, *p.pushed]
        return f"memory: given record(s) {', '.join('#' + str(i) for i in given)}" if given else None
    if isinstance(p, EvidenceRecorded):
        r = p.record
        return f"recorded #{r.id} {r.kind}: {cut(' '.join(r.text.split()))}"
    return None


def cost_line(usage: dict) -> str:
    """What a run or search spent, as its summary says it (a budget's ``used``)."""
    failed = f", {usage['failed_calls']} failed" if usage.get("failed_calls") else ""
    return f"cost       {usage['calls']} model calls{failed}, {usage['tokens']} tokens, ${usage['cost_usd']:.4f}"


def print_summary(result, out: TextIO = sys.stdout) -> None:
    m = result.metric or {}
    usage = result.usage
    out.write("\n" + "=" * 72 + "\n")
    out.write(f"run        {result.run_id}   status: {result.status}\n")
    if result.reason:
        out.write(f"reason     {result.reason}\n")
    validated = "splits" in m or "split" in m  # Trellis's in-loop validation, not the held-out evaluate.py
    label = "validation" if validated or not m else "metric    "
    if m.get("ok"):
        direction = "higher" if m["higher_is_better"] else "lower"
        scorer = f"Trellis's in-loop validation, {m.get('splits') or 1} fold(s) of the training rows" if validated \
            else "computed by evaluate.py"
        out.write(f"{label} {m['metric']} = {m['value']:.6g}  ({direction} is better; {scorer})\n")
    else:
        out.write(f"{label} none ({m.get('error', 'run did not reach evaluation')})\n")
    out.write(cost_line(usage) + "\n")
    out.write(f"agents     {', '.join(f'{a}={s}' for a, s in result.agent_status.items())}\n")
    out.write(f"time       {result.duration_s:.1f}s (models {result.model_seconds:.1f}s, code "
              f"{result.execution_seconds:.1f}s, engine {result.overhead_seconds:.2f}s)\n")
    out.write(f"trace      {result.trace_path}\n")
