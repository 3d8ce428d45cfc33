"""litellm custom provider `trellis/...` backed by the offline scientist.

Imported only by engine.llm after litellm itself, because subclassing CustomLLM needs litellm.
"""
from __future__ import annotations

from litellm import CustomLLM
from litellm.types.utils import ModelResponse, Usage

from .chat import answer_request


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
