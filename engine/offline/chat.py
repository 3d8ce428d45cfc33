"""The offline scientist as a chat endpoint: a request's messages in, an assistant message, its
finish reason and its token counts out. Free of litellm, so that the gateway answers the offline
model directly (engine/llm.py) without importing it; litellm's custom provider (provider.py) wraps
the same function for anything that goes through litellm."""
from __future__ import annotations

import json

from .scientist import answer
from ..token_count import NotCountedHere, count_messages, count_text


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
    prompt_tokens = prompt_tokens_of(messages)
    completion_tokens = count_text(text)
    return message, "tool_calls" if said.tool_calls else "stop", (prompt_tokens, completion_tokens)


def prompt_tokens_of(messages: list) -> int:
    """gpt-4o's count of the prompt (engine/token_count.py); litellm's, for what that module
    does not count."""
    try:
        return count_messages(messages)
    except NotCountedHere:
        from ..llm import get_litellm

        return int(get_litellm().token_counter(model="gpt-4o", messages=messages))
