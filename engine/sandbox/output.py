"""What a sandboxed program printed, as both executors read it: the last bytes of each stream
(a program printing forever must not exhaust the engine's memory), the sandbox's marker lines
(violations the audit hook reported, facts the bootstrap reported) found as the stream goes by,
and the supervisor's notes on why it stopped a program."""
from __future__ import annotations

from collections import deque

from engine.sandbox import ExecutionLimits

VIOLATION_PREFIX = b"TRELLIS-SANDBOX-VIOLATION: "
INFO_PREFIX = b"TRELLIS-SANDBOX-INFO: "
MARKER = b"TRELLIS-SANDBOX-"
DEFAULT_OUTPUT_CAP = 4 * 1024 * 1024
MAX_VIOLATIONS = 100
MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc",
                  "out of memory")


class TailBuffer:
    """Keeps the last ``cap`` bytes of a stream: a program printing forever must not
    exhaust the engine's memory, and the end of the output is what explains a failure."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: deque[bytes] = deque()
        self.size = 0

    def append(self, data: bytes) -> None:
        self.chunks.append(data)
        self.size += len(data)
        while self.size > self.cap:
            excess = self.size - self.cap
            first = self.chunks[0]
            if len(first) <= excess:
                self.chunks.popleft()
                self.size -= len(first)
            else:
                self.chunks[0] = first[excess:]
                self.size -= excess

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


class MarkerScanner:
    """Finds sandbox marker lines as stderr streams by, so they survive even when the
    tail buffer later drops them, and wherever they land (mid-line after a partial
    print of the program)."""

    def __init__(self) -> None:
        self.pending = b""
        self.violations: list[str] = []
        self.info: list[str] = []

    def feed(self, data: bytes) -> None:
        buf = self.pending + data
        while True:
            start = buf.find(MARKER)
            if start < 0:
                self.pending = buf[-(len(MARKER) - 1):]
                return
            end = buf.find(b"\n", start)
            if end < 0:
                self.pending = buf[start:start + 4096]  # an unterminated marker line
                return
            self._record(buf[start:end])
            buf = buf[end + 1:]

    def _record(self, line: bytes) -> None:
        text = line.decode("utf-8", errors="replace")
        if line.startswith(VIOLATION_PREFIX):
            if len(self.violations) < MAX_VIOLATIONS:
                self.violations.append(text[len(VIOLATION_PREFIX):].strip()[:500])
        elif line.startswith(INFO_PREFIX):
            self.info.append(text[len(INFO_PREFIX):].strip())


def strip_info_lines(text: str) -> str:
    prefix = INFO_PREFIX.decode()
    return "".join(line for line in text.splitlines(keepends=True)
                   if not line.startswith(prefix))


def supervisor_notes(outcome, limits: ExecutionLimits) -> str:
    """Why the supervisor stopped a program, as lines appended to its stderr (both executors)."""
    notes = ""
    if outcome.wall_timeout:
        notes += f"\nsandbox: wall-clock limit of {limits.wall_seconds:g} s exceeded, killed\n"
    if outcome.disk_exceeded:
        notes += f"\nsandbox: killed because {outcome.disk_exceeded}\n"
    if outcome.stopped:
        notes += "\nsandbox: stopped on request while it ran\n"
    return notes
