"""Lazy access to litellm, and what the gateway asks of it besides a call: token counts,
prices, provider names.

litellm takes seconds to import and fetches a price map from the internet unless told not
to, so it is imported here, on the first model call, with the local price map. The gateway
answers the offline scientist without it, and registers it as litellm's provider ``trellis``
once litellm is loaded (engine/offline/chat.py).
"""
from __future__ import annotations

import functools
import os
import threading
from types import ModuleType

from .token_count import NotCountedHere, count_messages, count_text

OFFLINE_PROVIDER = "trellis"
OFFLINE_MODEL = "trellis/offline-scientist"
OFFLINE_PROVIDER_LABEL = "trellis-offline (scripted scientist, not a language model)"

_lock = threading.Lock()
_litellm: ModuleType | None = None


def get_litellm() -> ModuleType:
    global _litellm
    with _lock:
        if _litellm is None:
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            os.environ.setdefault("LITELLM_LOG", "ERROR")
            import litellm

            litellm.telemetry = False
            litellm.suppress_debug_info = True
            # Providers that do not take a parameter (Anthropic has no `seed`) get the call
            # without it instead of a BadRequestError; the offline provider still receives it.
            litellm.drop_params = True
            _litellm = litellm
        return _litellm


def provider_of(model: str) -> str:
    if model.startswith(OFFLINE_PROVIDER + "/"):
        return OFFLINE_PROVIDER_LABEL
    return model.split("/", 1)[0] if "/" in model else "openai"


def count_tokens(model: str, messages: list[dict]) -> int:
    """The prompt's tokens as litellm counts them for ``model``. The offline scientist's are
    gpt-4o's, counted without litellm (engine/token_count.py). Plain chat messages are counted
    one by one and each kept: a role's instructions and the task's text recur in every call, and
    tokenizing them again was most of a call's time."""
    if model.startswith(OFFLINE_PROVIDER + "/"):
        try:
            return count_messages(messages)
        except NotCountedHere:  # no encoding file, or a message in parts: litellm counts it
            return _count_uncached(TOKEN_MODEL, messages)
    if messages and all(_plain(m) for m in messages):
        # litellm's count is a sum over the messages plus a constant for the reply's priming
        counts = [_counted_message(model, tuple(m.items())) if len(m.get("content", "")) <= _CACHED_CHARS
                  else _count_uncached(model, [m]) for m in messages]
        return sum(counts) - (len(counts) - 1) * _priming(model)
    return _count_uncached(model, messages)


TOKEN_MODEL = "gpt-4o"  # the tokenizer of models litellm does not know
_PLAIN_KEYS = frozenset({"role", "content", "name"})
_CACHED_CHARS = 64_000  # the caches below hold at most 256 such texts each: 16 MB


def _plain(message: object) -> bool:
    return isinstance(message, dict) and message.keys() <= _PLAIN_KEYS and \
        all(isinstance(v, str) for v in message.values())


def _count_uncached(model: str, messages: list[dict]) -> int:
    lm = get_litellm()
    try:
        return int(lm.token_counter(model=model, messages=messages))
    except Exception:  # unknown model: fall back to the default tokenizer
        return int(lm.token_counter(model=TOKEN_MODEL, messages=messages))


@functools.lru_cache(maxsize=256)
def _counted_message(model: str, items: tuple) -> int:
    return _count_uncached(model, [dict(items)])


@functools.lru_cache(maxsize=64)
def _priming(model: str) -> int:
    """What litellm adds once per prompt: one message counted alone, less its share of two."""
    one = {"role": "user", "content": "x"}
    return 2 * _count_uncached(model, [one]) - _count_uncached(model, [one, one])


def count_text_tokens(text: str) -> int:
    """An answer's tokens, as gpt-4o counts them (the gateway's count of an answer no provider
    counted, and the offline scientist's)."""
    try:
        return count_text(text)
    except NotCountedHere:
        return int(get_litellm().token_counter(model=TOKEN_MODEL, text=text))


def is_priced(model: str) -> bool:
    """Whether litellm's price table knows ``model`` (the offline provider is free, so priced)."""
    if model.startswith(OFFLINE_PROVIDER + "/"):
        return True
    lm = get_litellm()
    try:
        lm.cost_per_token(model=model, prompt_tokens=1, completion_tokens=1)
        return True
    except Exception:  # litellm raises for a model it has no price for
        return False


def cost_of(model: str, prompt_tokens: int, completion_tokens: int,
            price_per_mtok: tuple[float, float] | None = None) -> float:
    """Cost from the price the user gave (USD per million prompt and answer tokens), else
    litellm's price table; the offline provider is free; an unpriced model costs 0 and is
    flagged by the caller (engine.gateway)."""
    if price_per_mtok is not None:
        return (prompt_tokens * price_per_mtok[0] + completion_tokens * price_per_mtok[1]) / 1e6
    if model.startswith(OFFLINE_PROVIDER + "/"):
        return 0.0
    lm = get_litellm()
    try:
        p, c = lm.cost_per_token(model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        return float(p + c)
    except Exception:
        return 0.0
