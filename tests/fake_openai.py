"""A tiny OpenAI-compatible HTTP server for tests: scripted replies, recorded requests.

It serves ``POST /v1/chat/completions`` and ``GET /v1/models`` on 127.0.0.1 (a free port), from a
``ThreadingHTTPServer`` in a daemon thread, so a test can point litellm, the ``openai`` SDK or a
whole CLI process at it (``model="openai/fake"``, ``api_base=server.base_url``, any api key).

Each chat completion takes the next scripted :class:`Reply` from the server's queue; an empty
queue answers with the server's ``default`` (an ordinary "ok" answer unless told otherwise). A
queue entry may also be a callable ``body -> Reply`` (the parsed request body), to answer from
what was asked. The replies a test can script, one builder each:

* :func:`answer`: an ordinary answer (content, ``finish_reason``, ``usage``);
* :func:`truncated`: ``content: null`` with ``finish_reason: "length"`` (or given text);
* :func:`not_json`: status 200 with a ``text/html`` body that is not JSON;
* :func:`refusal`: ``message.refusal`` set and ``content: null``;
* :func:`error` and its shorthands :func:`server_error` (500), :func:`bad_request` (400),
  :func:`context_length_exceeded` (400, OpenAI's ``context_length_exceeded`` code),
  :func:`rate_limited` (429 with a ``Retry-After`` header): an HTTP error with OpenAI's JSON
  error body ``{"error": {"message", "type", "param", "code"}}``;
* :func:`delayed`: any reply, answered only after some seconds (timeout tests);
* :func:`tool_call`: an assistant message with ``tool_calls`` and ``finish_reason: "tool_calls"``.

Every request is recorded with the time it arrived (``server.requests``: the chat completions;
``server.log``: everything, GETs included), so a test asserts what was sent::

    with fake_openai([rate_limited(2), answer("hi")]) as server:
        ...  # call the code under test with api_base=server.base_url
        assert server.requests[-1].body["max_tokens"] == 512

The server does not stream: a request with ``"stream": true`` is answered 400.

How litellm (1.110.2, ``num_retries=0``: one request, no retry inside litellm or the SDK)
reports each reply, verified against this server:

=========================  ==========================================================
reply                      litellm.completion(model="openai/fake", ...)
=========================  ==========================================================
answer                     ModelResponse; ``usage`` as sent (all zeros when omitted)
truncated (content null)   ModelResponse; ``choices[0].message.content is None``,
                           ``choices[0].finish_reason == "length"``
not_json (200, text/html)  raises ``litellm.InternalServerError`` (status_code 500,
                           "Empty or invalid response from LLM endpoint"), no headers
refusal                    ModelResponse; ``message.content is None``,
                           ``message.refusal`` holds the text (finish_reason "stop")
server_error (500)         raises ``litellm.InternalServerError``
error(503, ...)            raises ``litellm.ServiceUnavailableError``
error(401, ...)            raises ``litellm.AuthenticationError``
bad_request (400)          raises ``litellm.BadRequestError``
context_length_exceeded    raises ``litellm.ContextWindowExceededError`` (a BadRequestError)
rate_limited (429)         raises ``litellm.RateLimitError``
delayed past ``timeout``   raises ``litellm.Timeout`` (status_code 408, no response)
tool_call                  ModelResponse; ``message.tool_calls[0].function.name`` /
                           ``.arguments`` (a JSON string), finish_reason "tool_calls"
=========================  ==========================================================

None of these is an instance of ``litellm.APIError`` (their MROs hold ``openai.APIError``).
The response headers of an HTTP error (``Retry-After`` included) are in
``exc.litellm_response_headers`` and ``exc.response.headers`` (httpx.Headers, looked up in any
case); ``exc.headers`` is None or absent. A Timeout and a not_json reply carry no headers.
"""
from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Iterator, Mapping, Union

__all__ = [
    "Reply", "RecordedRequest", "FakeOpenAI", "fake_openai",
    "answer", "truncated", "not_json", "refusal", "error", "server_error", "bad_request",
    "context_length_exceeded", "rate_limited", "delayed", "tool_call",
]


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP answer. ``body`` is a JSON-able object (sent as JSON) or text/bytes (sent
    as is, with ``content_type``). A ``body`` of None on a 200 is an answer still to be shaped:
    ``message`` and ``finish_reason`` are wrapped into a chat completion for the request's model."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    delay_s: float = 0.0
    # For chat-completion answers (body None): the choice and its usage.
    message: Mapping[str, Any] | None = None
    finish_reason: str | None = "stop"
    usage: Mapping[str, int] | None | bool = None  # None: estimated from words; False: omitted


ReplyLike = Union[Reply, Callable[[dict], Reply]]


@dataclass(frozen=True)
class RecordedRequest:
    """A request the server received: ``body`` is the parsed JSON (None when it was not JSON)."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    body: Any
    at: float         # time.time() when it arrived
    monotonic: float  # time.monotonic() when it arrived (for gaps between retries)

    @property
    def messages(self) -> list[dict]:
        return (self.body or {}).get("messages", []) if isinstance(self.body, dict) else []


# Builders ---------------------------------------------------------------------------------------

def answer(content: str = "ok", finish_reason: str = "stop", usage: Mapping[str, int] | None | bool = None,
           *, delay_s: float = 0.0) -> Reply:
    """An ordinary assistant answer. ``usage`` None: estimated (words of the prompt and answer);
    False: no usage field at all."""
    return Reply(message={"role": "assistant", "content": content}, finish_reason=finish_reason,
                 usage=usage, delay_s=delay_s)


def truncated(content: str | None = None, usage: Mapping[str, int] | None | bool = None) -> Reply:
    """An answer cut by max_tokens: ``finish_reason: "length"``, content null unless given."""
    return Reply(message={"role": "assistant", "content": content}, finish_reason="length", usage=usage)


def not_json(text: str = "<html><body><h1>502 Bad Gateway</h1></body></html>", status: int = 200,
             content_type: str = "text/html") -> Reply:
    """A body that is not JSON (a proxy's error page served with 200)."""
    return Reply(status=status, body=text, content_type=content_type)


def refusal(text: str = "I'm sorry, I can't help with that.") -> Reply:
    """A refusal: ``message.refusal`` set, ``content`` null."""
    return Reply(message={"role": "assistant", "content": None, "refusal": text}, finish_reason="stop")


def error(status: int, message: str, type: str | None = None, code: str | None = None,
          param: str | None = None, headers: Mapping[str, str] | None = None) -> Reply:
    """An HTTP error with OpenAI's JSON error body."""
    return Reply(status=status, headers=dict(headers or {}),
                 body={"error": {"message": message, "type": type, "param": param, "code": code}})


def server_error(message: str = "The server had an error while processing your request.") -> Reply:
    return error(500, message, type="server_error")


def bad_request(message: str = "Invalid request.", code: str | None = None, param: str | None = None) -> Reply:
    return error(400, message, type="invalid_request_error", code=code, param=param)


def context_length_exceeded(limit: int = 8192, asked: int = 9000) -> Reply:
    """OpenAI's answer to a prompt over the context window (400, ``context_length_exceeded``)."""
    return error(400, f"This model's maximum context length is {limit} tokens. However, your messages "
                      f"resulted in {asked} tokens. Please reduce the length of the messages.",
                 type="invalid_request_error", code="context_length_exceeded", param="messages")


def rate_limited(retry_after: float | int = 1, message: str = "Rate limit reached for requests.") -> Reply:
    """429 with a ``Retry-After: N`` header (seconds)."""
    value = str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)
    return error(429, message, type="requests", code="rate_limit_exceeded", headers={"Retry-After": value})


def delayed(seconds: float, reply: Reply | None = None) -> Reply:
    """``reply`` (an ordinary answer by default) sent only after ``seconds``."""
    base = reply if reply is not None else answer()
    return Reply(**{**base.__dict__, "delay_s": seconds})


def tool_call(name: str, arguments: Mapping[str, Any] | str, call_id: str | None = None,
              content: str | None = None) -> Reply:
    """An assistant message calling one tool (``arguments`` a dict, sent as a JSON string)."""
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    call = {"id": call_id or f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": name, "arguments": args}}
    return Reply(message={"role": "assistant", "content": content, "tool_calls": [call]},
                 finish_reason="tool_calls")


# The server -------------------------------------------------------------------------------------

def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):  # content parts
        return sum(_words(part.get("text", "")) if isinstance(part, dict) else _words(part) for part in value)
    return 0


def _estimated_usage(body: dict, message: Mapping[str, Any]) -> dict[str, int]:
    prompt = sum(_words(m.get("content")) for m in body.get("messages", []) if isinstance(m, dict))
    completion = _words(message.get("content")) + _words(message.get("refusal"))
    completion += sum(_words(c["function"]["arguments"]) for c in message.get("tool_calls") or [])
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class FakeOpenAI:
    """The server. Prefer :func:`fake_openai`, which starts and stops it."""

    def __init__(self, replies: Iterable[ReplyLike] = (), default: ReplyLike | None = None,
                 models: Iterable[str] = ("fake",)):
        self._queue: deque[ReplyLike] = deque(replies)
        self.default: ReplyLike = default if default is not None else answer()
        self.models = list(models)
        self.log: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # Scripting and inspection
    def push(self, *replies: ReplyLike) -> None:
        with self._lock:
            self._queue.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not yet served."""
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """The chat-completion requests received, oldest first."""
        with self._lock:
            return [r for r in self.log if r.method == "POST" and r.path.rstrip("/").endswith("/chat/completions")]

    @property
    def bodies(self) -> list[Any]:
        return [r.body for r in self.requests]

    @property
    def port(self) -> int:
        assert self._httpd is not None, "not started"
        return self._httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What to pass as ``api_base`` / ``base_url`` (ends in /v1)."""
        return f"{self.url}/v1"

    # Life cycle
    def start(self) -> "FakeOpenAI":
        server = self

        class Handler(_Handler):
            fake = server

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-openai:{self.port}", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()  # wakes delayed replies
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # Internals (called from handler threads)
    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.log.append(request)

    def _next(self) -> ReplyLike:
        with self._lock:
            return self._queue.popleft() if self._queue else self.default


class _Handler(BaseHTTPRequestHandler):
    fake: FakeOpenAI
    protocol_version = "HTTP/1.1"
    server_version = "fake-openai/1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _receive(self) -> RecordedRequest:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        request = RecordedRequest(method=self.command, path=self.path.split("?", 1)[0],
                                  headers={k.lower(): v for k, v in self.headers.items()}, raw=raw, body=body,
                                  at=time.time(), monotonic=time.monotonic())
        self.fake._record(request)
        return request

    def _send(self, status: int, body: Any, content_type: str = "application/json",
              headers: Mapping[str, str] | None = None) -> None:
        if isinstance(body, (bytes, bytearray)):
            data = bytes(body)
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            self.close_connection = True

    def do_GET(self) -> None:
        request = self._receive()
        if request.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "fake-openai"} for m in self.fake.models]})
        else:
            self._send(404, {"error": {"message": f"no route {request.path}", "type": "invalid_request_error",
                                       "param": None, "code": None}})

    def do_POST(self) -> None:
        request = self._receive()
        if not request.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {request.path}", "type": "invalid_request_error",
                                       "param": None, "code": None}})
            return
        body = request.body if isinstance(request.body, dict) else {}
        if body.get("stream"):
            self._send(400, {"error": {"message": "fake_openai does not stream", "type": "invalid_request_error",
                                       "param": "stream", "code": None}})
            return
        scripted = self.fake._next()
        reply = scripted(body) if callable(scripted) else scripted
        if reply.delay_s and self.fake._closing.wait(reply.delay_s):
            self.close_connection = True
            return  # closing: drop the reply
        payload = reply.body
        if payload is None and reply.status == 200:
            message = dict(reply.message or {"role": "assistant", "content": ""})
            payload = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion",
                       "created": int(time.time()), "model": body.get("model", "fake"),
                       "choices": [{"index": 0, "message": message, "logprobs": None,
                                    "finish_reason": reply.finish_reason}]}
            if reply.usage is not False:
                payload["usage"] = dict(reply.usage) if reply.usage else _estimated_usage(body, message)
        self._send(reply.status, payload if payload is not None else "", reply.content_type, reply.headers)


@contextlib.contextmanager
def fake_openai(replies: Iterable[ReplyLike] = (), default: ReplyLike | None = None,
                models: Iterable[str] = ("fake",)) -> Iterator[FakeOpenAI]:
    """A started :class:`FakeOpenAI` for the ``with`` block: ``.base_url``, ``.requests``, ``.push``."""
    server = FakeOpenAI(replies, default=default, models=models)
    server.start()
    try:
        yield server
    finally:
        server.close()
