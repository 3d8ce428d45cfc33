"""The offline scientist as a chat endpoint: a request's messages in, an assistant message, its
finish reason and its token counts out, in the shape litellm's response has. Free of litellm: the
gateway answers the offline model directly, without importing it, and registers it with litellm
as the custom provider ``trellis/...`` when litellm is loaded (``register_with``), for anything
that calls litellm itself with the offline model."""
from __future__ import annotations

import json
from types import ModuleType, SimpleNamespace

from ..llm import OFFLINE_MODEL, OFFLINE_PROVIDER, count_text_tokens, count_tokens  # litellm only if the tokenizer fails
from .scientist import answer


def answer_request(messages: list, seed: int, tools=None, tool_choice=None) -> tuple[dict, str, tuple[int, int]]:
    """The offline scientist's answer as a chat message, its finish reason and (prompt,
    completion) tokens counted as for gpt-4o. The gateway calls this directly for the offline
    model, through ``offline_completion``."""
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


def offline_completion(request: dict):
    """The offline scientist's answer to ``request`` in the shape litellm's response has (what
    ``_call`` reads: the message, its tool calls, the finish reason, the usage), counted as
    gpt-4o counts them. litellm is not imported for it."""
    message, finish, usage = answer_request(request["messages"], int(request.get("seed") or 0),
                                            request.get("tools"), request.get("tool_choice"))
    calls = [SimpleNamespace(id=c["id"], type="function",
                             function=SimpleNamespace(name=c["function"]["name"], arguments=c["function"]["arguments"]))
             for c in message.get("tool_calls") or []]
    return SimpleNamespace(choices=[SimpleNamespace(
        finish_reason=finish, message=SimpleNamespace(content=message.get("content"), tool_calls=calls or None,
                                                      refusal=None))],
        usage=SimpleNamespace(prompt_tokens=usage[0], completion_tokens=usage[1]))


def register_with(litellm: ModuleType) -> None:
    """The offline scientist as litellm's custom provider ``trellis`` (once per process); the
    module is handed in, so that this one never imports litellm."""
    if any(p.get("provider") == OFFLINE_PROVIDER for p in litellm.custom_provider_map):
        return

    class OfflineScientistLLM(litellm.CustomLLM):
        def completion(self, model: str, messages: list, *args, **kwargs):
            optional = kwargs.get("optional_params") or {}
            message, finish, (prompt_tokens, completion_tokens) = answer_request(
                messages, int(optional.get("seed") or 0), optional.get("tools"), optional.get("tool_choice"))
            return litellm.ModelResponse(
                model=model, choices=[{"index": 0, "finish_reason": finish, "message": message}],
                usage=litellm.Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                    total_tokens=prompt_tokens + completion_tokens))

    litellm.custom_provider_map = [*litellm.custom_provider_map,
                                   {"provider": OFFLINE_PROVIDER, "custom_handler": OfflineScientistLLM()}]
