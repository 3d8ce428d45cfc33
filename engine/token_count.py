"""gpt-4o token counts, without importing litellm: the offline scientist's, and an answer no
provider counted.

The count is gpt-4o's: tiktoken's ``o200k_base`` encoding and OpenAI's chat accounting (3 tokens
per message, 1 more for a name, a tool call's arguments, 3 to prime the reply), each text encoded
in 1024-character pieces so that a long run of one character (generated output can be anything)
costs linear time, not the BPE merge loop's quadratic one. That is litellm's ``token_counter`` for
gpt-4o, to the token (tests/unit/test_hot_path_caches.py compares them). It lives here because
importing litellm takes two seconds and the offline scientist, which serves the demo, the tests
and every search started with no model configured, needs nothing else from it: a fresh process's
first search no longer waits for it. The encoding's file is litellm's bundled copy, found on disk
without importing litellm (tiktoken would otherwise download it).
"""
from __future__ import annotations

import functools
import importlib.util
import os
from typing import Iterable

ENCODING = "o200k_base"
PER_MESSAGE = 3
PER_NAME = 1
REPLY_PRIMING = 3
CHUNK_CHARS = 1024
CACHED_CHARS = 64_000  # the caches below hold at most 256 such texts each: 16 MB


class NotCountedHere(RuntimeError):
    """The bundled encoding could not be loaded, or a message has a part this module does not
    count (an image); the caller counts with litellm instead."""


def _encoding():
    encoding = _load_encoding()
    if isinstance(encoding, str):
        raise NotCountedHere(encoding)
    return encoding


@functools.lru_cache(maxsize=1)
def _load_encoding():
    """The encoding, or why it could not be had (kept too: a missing file must not send every
    call to tiktoken's download, which may hang where the network is closed)."""
    # the folder litellm itself points tiktoken at when it is imported (CUSTOM_TIKTOKEN_CACHE_DIR
    # overrides it there too)
    folder = os.environ.get("CUSTOM_TIKTOKEN_CACHE_DIR") or _bundled_folder()
    if folder:
        os.environ["TIKTOKEN_CACHE_DIR"] = folder
    try:
        import tiktoken

        return tiktoken.get_encoding(ENCODING)
    except Exception as exc:  # noqa: BLE001 - no file and no network: litellm's path decides
        return f"tiktoken's {ENCODING} could not be loaded: {exc}"


def _bundled_folder() -> str | None:
    spec = importlib.util.find_spec("litellm")
    for root in (spec.submodule_search_locations or []) if spec else []:
        folder = os.path.join(root, "litellm_core_utils", "tokenizers")
        if os.path.isdir(folder):
            return folder
    return None


def _encode_length(text: str) -> int:
    encoding = _encoding()
    return sum(len(encoding.encode(text[i:i + CHUNK_CHARS], disallowed_special=()))
               for i in range(0, len(text), CHUNK_CHARS))


def count_text(text: str) -> int:
    """Tokens of one text (an answer); kept, since answers recur (a router's status)."""
    return _counted_text(text) if len(text) <= CACHED_CHARS else _encode_length(text)


@functools.lru_cache(maxsize=256)
def _counted_text(text: str) -> int:
    return _encode_length(text)


def count_messages(messages: Iterable[dict]) -> int:
    """Tokens of a chat prompt. Each message is counted once and kept: a role's instructions and
    the task's text recur in every call of a run."""
    total = REPLY_PRIMING
    for message in messages:
        total += PER_MESSAGE + _message_tokens(message)
    return total


def _message_tokens(message: dict) -> int:
    if not isinstance(message, dict):
        raise NotCountedHere(f"a chat message is a dict, not {type(message).__name__}")
    total = 0
    for key, value in message.items():
        if value is None:
            continue
        if key == "tool_calls":
            total += sum(count_text(str((call.get("function") or {}).get("arguments", ""))) for call in value)
        elif key == "function_call":
            total += count_text(str(value.get("arguments", "")))
        elif isinstance(value, str):
            total += count_text(value) + (PER_NAME if key == "name" else 0)
        elif key == "content" and isinstance(value, list):
            raise NotCountedHere("a message in parts (text, images) is litellm's to count")
    return total
