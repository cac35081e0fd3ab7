"""The MCP tools about models: windows, token counts, and fitting messages to a model.

They need no store: what they answer comes from the proxy's own engine and router.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

import orjson
from mcp.server.mcpserver.exceptions import ToolError

from proxy.errors import HandoffError
from proxy.ingress.chat_completions import parse_chat
from proxy.server.mcp_world import McpWorld
from proxy.upstream.routing import Upstream


@dataclass(frozen=True, slots=True)
class ModelTools:
    """Each method is one tool; its name, typed inputs and docstring are what clients see."""

    world: McpWorld

    def model_context_window(self, model: str) -> dict[str, Any]:
        """A model's context window and max output, where the figure comes from, its
        token-count calibration and any window learned from its upstream."""
        engine = self.world.engine
        info = engine.registry.lookup(model)
        if info is None:
            raise ToolError(engine.registry.explain(model))
        learned = info.context_window if info.source.startswith("discovered") else None
        return {
            "model": model,
            "context_window": info.context_window,
            "max_output_tokens": info.max_output_tokens,
            "source": info.source,
            "matched": info.matched,
            "explanation": engine.registry.explain(model),
            "calibration": engine.calibration.factor(model),
            "learned_limit": learned,
        }

    def list_known_models(self, filter: str = "") -> list[dict[str, Any]]:
        """Every model handoff knows a window for; ``filter`` is a substring or glob."""
        pat = filter.strip().lower()
        out = []
        for i in self.world.engine.registry.entries():
            name = i.name.lower()
            if pat and pat not in name and not fnmatchcase(name, pat):
                continue
            out.append(
                {"model": i.name, "context_window": i.context_window,
                 "max_output_tokens": i.max_output_tokens, "source": i.source}
            )  # fmt: skip
        return out

    async def count_tokens(self, messages: list[dict[str, Any]], model: str) -> dict[str, Any]:
        """The prompt tokens of ``messages`` for ``model``, and whether the count is exact."""
        req = _request(messages, model)
        engine = self.world.engine
        info = engine.registry.lookup(model)
        counter = await asyncio.to_thread(
            engine.tokens.for_model, model, info.tokenizer if info else None
        )
        tokens = await asyncio.to_thread(counter.count_request, req.body)
        return {"model": model, "tokens": tokens, "exact": counter.exact}

    async def migrate_session(
        self, messages: list[dict[str, Any]], target_model: str
    ) -> dict[str, Any]:
        """Fit ``messages`` to ``target_model`` as the proxy would send them: the decision
        (passthrough or compressed), the fitted messages and what was dropped or summarized."""
        req = _request(messages, target_model)
        try:
            up = self.world.router.route(target_model)
        except HandoffError:  # no route: plan as a route that compresses would
            up = Upstream(name="(plan)", base_url="http://127.0.0.1", patterns=("*",))
        try:
            plan = await self.world.engine.plan(req, up)
        except HandoffError as e:
            raise ToolError(str(e)) from None
        d = plan.decision
        return {
            "decision": d.action if d else "passthrough",
            "window": d.window if d else None,
            "budget": d.budget if d else None,
            "tokens": d.tokens if d else None,
            "forwarded_tokens": d.forwarded_tokens if d else None,
            "policies": list(d.policies) if d else [],
            "steps": [dict(s) for s in d.steps] if d else [],
            "messages": plan.forwarded if plan.forwarded is not None else messages,
        }


def _request(messages: list[dict[str, Any]], model: str) -> Any:
    """``messages`` for ``model`` as a chat request, or the client's error saying why not."""
    if not model.strip():
        raise ToolError("model is empty: name the model, e.g. gpt-4o")
    try:
        return parse_chat(orjson.dumps({"model": model, "messages": messages}))
    except HandoffError as e:
        raise ToolError(str(e)) from None
