"""litellm custom provider `trellis/...` backed by the offline scientist.

Imported only by engine.llm after litellm itself, because subclassing CustomLLM needs litellm.
"""
from __future__ import annotations

import json

import litellm
from litellm import CustomLLM
from litellm.types.utils import ModelResponse, Usage

from ..llm import OFFLINE_MODEL, count_text_tokens, count_tokens
from .scientist import answer


def answer_request(messages: list, seed: int, tools=None, tool_choice=None) -> tuple[dict, str, tuple[int, int]]:
    """The offline scientist's answer as a chat message, its finish reason and (prompt,
    completion) tokens counted as for gpt-4o. The gateway calls this directly for the offline
    model; litellm's custom provider below wraps it for anything that goes through litellm."""
    said = answer(messages, seed=seed, tools=tools, tool_choice=tool_choice)
    text = said.text
    message: dict = {"role": "assistant", "content": text}
    if said.tool_calls:  # the standard shape: the gateway reads it as any provider's
        message = {"role": "assistant", "content": None, "tool_calls": [
            {"id": f"call_{i + 1}", "type": "function",
             "function": {"name": c["name"], "arguments": json.dumps(c["arguments"], sort_keys=True)}}
            for i, c in enumerate(said.tool_calls)]}
        text = message["tool_calls"][0]["function"]["arguments"]  # something to count
    prompt_tokens = count_tokens(OFFLINE_MODEL, messages)
    completion_tokens = count_text_tokens(text)
    return message, "tool_calls" if said.tool_calls else "stop", (prompt_tokens, completion_tokens)


class OfflineScientistLLM(CustomLLM):
    def completion(self, model: str, messages: list, *args, **kwargs) -> ModelResponse:
        optional = kwargs.get("optional_params") or {}
        message, finish, (prompt_tokens, completion_tokens) = answer_request(
            messages, int(optional.get("seed") or 0), optional.get("tools"), optional.get("tool_choice"))
        return ModelResponse(
            model=model, choices=[{"index": 0, "finish_reason": finish, "message": message}],
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        total_tokens=prompt_tokens + completion_tokens),
        )
