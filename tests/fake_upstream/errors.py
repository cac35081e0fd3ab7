"""Error answers in the shape of the upstreams the fake imitates (OpenAI, llama.cpp, vLLM, Ollama)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tests.fake_upstream.constants import JSON, ContextErrorStyle


@dataclass
class ApiError(Exception):
    """An error answer: status and JSON body, shaped like the upstream it imitates."""

    status: int
    body: JSON
    headers: Mapping[str, str] = field(default_factory=dict)


def openai_error(
    message: str,
    *,
    status: int = 400,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> ApiError:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return ApiError(status, body)


def context_error(
    style: ContextErrorStyle, window: int, prompt: int, completion: int = 0
) -> ApiError:
    """A context-length error in the dialect of one server (texts as those servers send)."""
    total = prompt + completion
    if style == "llamacpp":
        message = (
            f"request ({total} tokens) exceeds the available context size "
            f"({window} tokens), try increasing it"
        )
        error = {"code": 400, "message": message, "type": "exceed_context_size_error"}
        return ApiError(400, {"error": {**error, "n_prompt_tokens": total, "n_ctx": window}})
    if style == "vllm":
        message = (
            f"This model's maximum context length is {window} tokens. However, you "
            f"requested {total} tokens ({prompt} in the messages, {completion} in the "
            "completion). Please reduce the length of the messages or completion."
        )
        body = {"object": "error", "message": message, "type": "BadRequestError"}
        return ApiError(400, {**body, "param": None, "code": 400})
    if style == "ollama":
        return openai_error("the input length exceeds the context length")
    if completion:
        tail = (
            f"you requested {total} tokens ({prompt} in the messages, {completion} in the "
            "completion). Please reduce the length of the messages or completion."
        )
    else:
        tail = (
            f"your messages resulted in {prompt} tokens. Please reduce the length of the messages."
        )
    message = f"This model's maximum context length is {window} tokens. However, {tail}"
    return openai_error(message, param="messages", code="context_length_exceeded")


def model_not_found(model: str) -> ApiError:
    """OpenAI's 404 for a model it does not serve."""
    message = f"The model `{model}` does not exist or you do not have access to it."
    return openai_error(message, status=404, code="model_not_found")
