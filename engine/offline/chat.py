"""The offline scientist as a chat endpoint: a request's messages in, an assistant message, its
finish reason and its token counts out. Free of litellm, so that the gateway answers the offline
model directly (engine/llm.py) without importing it; litellm's custom provider (provider.py) wraps
the same function for anything that goes through litellm."""
from __future__ import annotations

import json

from ..llm import OFFLINE_MODEL, count_text_tokens, count_tokens  # litellm only if the tokenizer fails
from .scientist import answer


def answer_request(messages: list, seed: int, tools=None, tool_choice=None) -> tuple[dict, str, tuple[int, int]]:
    """The offline scientist's answer as a chat message, its finish reason and (prompt,
    completion) tokens counted as for gpt-4o. The gateway calls this directly for the offline
    model; litellm's custom provider (provider.py) wraps it for anything that goes through litellm."""
    said = answer(messages, seed=seed, tools=tools, tool_choice=tool_choice)
    text = said.text
    message: dict = {"role": "assistant", "content": text}
    if said.tool_calls:  # the standard shape: the gateway reads it as any provider's
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i + 1}", "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], sort_keys=True)}}
            for i, c in enumerate(said.tool_calls)]}
        text = message["tool_calls"][0]["function"]["arguments"]  # something to count
    usage = (count_tokens(OFFLINE_MODEL, messages), count_text_tokens(text))
    return message, "tool_calls" if said.tool_calls else "stop", usage
