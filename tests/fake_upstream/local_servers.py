"""Local model servers' own window endpoints, answered as those servers do (shapes from
llama.cpp's server README, Ollama's API docs and LM Studio's REST API docs)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

from aiohttp import web

Record = Callable[[web.Request], Awaitable[Any]]


def add_local_routes(
    app: web.Application,
    kind: Literal["llamacpp", "ollama", "lmstudio"],
    models: Mapping[str, int],
    record: Record,
) -> None:
    """Routes for ``kind``; each model's window is what the server runs it with."""

    def answer(build: Callable[[web.Request, Any], Any]) -> Callable[..., Awaitable[web.Response]]:
        async def handler(request: web.Request) -> web.Response:
            await record(request)
            payload = await request.json() if request.method == "POST" else None
            body = build(request, payload)
            if body is None:
                return web.json_response({"error": "model not found"}, status=404)
            return web.json_response(body)

        return handler

    if kind == "llamacpp":
        # One model per server: the first; its window is the per-slot n_ctx.
        name, n_ctx = next(iter(models.items()))
        props = {
            "default_generation_settings": {"n_ctx": n_ctx, "params": {"n_predict": -1}},
            "total_slots": 1,
            "model_path": f"/models/{name}.gguf",
            "chat_template": "{{ messages }}",
        }
        app.router.add_get("/props", answer(lambda r, p: props))
    elif kind == "lmstudio":
        data = [
            {
                "id": m,
                "object": "model",
                "type": "llm",
                "state": "loaded",
                "max_context_length": 4 * w,
                "loaded_context_length": w,
            }
            for m, w in models.items()
        ]
        app.router.add_get("/api/v0/models", answer(lambda r, p: {"object": "list", "data": data}))
    else:
        app.router.add_get("/api/version", answer(lambda r, p: {"version": "0.6.2"}))
        tags = {"models": [{"name": m, "model": m} for m in models]}
        app.router.add_get("/api/tags", answer(lambda r, p: tags))
        app.router.add_post("/api/show", answer(lambda r, p: _ollama_show(models, p)))


def _ollama_show(models: Mapping[str, int], payload: Any) -> dict[str, Any] | None:
    """A model's window is its Modelfile's num_ctx; its trained length is larger."""
    name = payload.get("model") if isinstance(payload, dict) else None
    if name not in models:
        return None
    return {
        "modelfile": f"FROM {name}",
        "parameters": f'num_ctx                        {models[name]}\nstop "<|eot_id|>"',
        "details": {"family": "llama", "parameter_size": "8.0B"},
        "model_info": {"general.architecture": "llama", "llama.context_length": 131072},
    }
