"""litellm custom provider `trellis/...` backed by the offline scientist.

Imported only by engine.llm after litellm itself, because subclassing CustomLLM needs litellm.
"""
from __future__ import annotations

import litellm
from litellm import CustomLLM
from litellm.types.utils import ModelResponse, Usage

from .scientist import respond


class OfflineScientistLLM(CustomLLM):
    def completion(self, model: str, messages: list, *args, **kwargs) -> ModelResponse:
        optional = kwargs.get("optional_params") or {}
        seed = int(optional.get("seed") or 0)
        text = respond(messages, seed=seed)
        prompt_tokens = litellm.token_counter(model="gpt-4o", messages=messages)
        completion_tokens = litellm.token_counter(model="gpt-4o", text=text)
        return ModelResponse(
            model=model,
            choices=[{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                        total_tokens=prompt_tokens + completion_tokens),
        )
