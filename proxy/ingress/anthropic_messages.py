"""Anthropic Messages wire format ↔ :class:`ChatRequest`, with Anthropic-shaped 400s.

A request is parsed into Chat Completions messages that policies and the counter
understand, one or more per Anthropic message: the top-level ``system`` and
``role: "system"`` messages become system messages (pinned); an assistant message
one assistant message (text blocks as text parts, ``tool_use`` as ``tool_calls``,
``thinking`` counted as ``reasoning_content``, other blocks counted as opaque text);
a user message one ``tool`` message per ``tool_result`` block and then one user
message holding its other blocks (images as image parts, documents as counted text).

:func:`render` writes them back: every block of a message no policy rewrote is the
client's very block; a rewritten message keeps its thinking, tool_use and unknown
blocks whole and shows only its changed text, and a changed block never keeps its
``cache_control``. Adjacent messages of one role are merged (Anthropic wants roles
to alternate), tool results first. The request's own ``context_management``
``clear_tool_uses`` edit is approximated in the view that is counted
(:mod:`proxy.ingress.anthropic_clearing`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import orjson

from proxy.errors import InvalidRequest
from proxy.ingress.anthropic_clearing import cleared_view
from proxy.ingress.chat_completions import parse_json_object
from proxy.ingress.chat_request import ChatRequest, Message, Messages
from proxy.ingress.incremental_parse import ResentBodies

_ROLES = ("user", "assistant", "system")


@dataclass(frozen=True, slots=True)
class Source:
    """Where one chat message came from: its kind, the Anthropic message's index
    (-1: the top-level ``system``), and the blocks it shows (by index; () for a
    string content)."""

    kind: str  # "system" | "keep" | "assistant" | "tool" | "user"
    index: int
    blocks: tuple[int, ...]


def parse_messages(raw: bytes, bodies: ResentBodies | None = None) -> ChatRequest:
    """A Messages request as a :class:`ChatRequest` that renders back in its own shape;
    ``bodies`` reuses the parse of the history a resent body repeats."""
    body, resends = parse_json_object(raw, bodies, _check)
    messages, sources = chat_view(body, len(raw) // 4)
    chat_body: dict[str, Any] = {k: v for k, v in body.items() if k not in ("system", "tools")}
    chat_body["messages"] = messages
    tools = body.get("tools")
    if isinstance(tools, list):
        chat_body["tools"] = [_tool(t) for t in tools if isinstance(t, dict)]
    return ChatRequest(
        model=body["model"],
        messages=tuple(messages),
        body=chat_body,
        raw=raw,
        resends=resends,
        render=partial(render, body, tuple(sources)),
        params={k: v for k, v in body.items() if k not in ("messages", "model")},
    )


def chat_view(
    body: Mapping[str, Any], estimate: int = 0
) -> tuple[list[dict[str, Any]], list[Source]]:
    """The request's messages as chat messages, and where each came from; ``estimate``
    (its size in tokens, roughly) says whether its own clearing edit would trigger."""
    out: list[dict[str, Any]] = []
    sources: list[Source] = []
    system = body.get("system")
    if system:
        out.append({"role": "system", "content": _plain_text(system)})
        sources.append(Source("system", -1, ()))
    for i, msg in enumerate(body["messages"]):
        role, content = msg["role"], msg.get("content")
        if role == "system":
            out.append({"role": "system", "content": _plain_text(content)})
            sources.append(Source("keep", i, ()))
        elif role == "assistant":
            out.append(_assistant(content))
            sources.append(Source("assistant", i, _indices(content)))
        else:
            _user(i, content, out, sources)
    return cleared_view(body, out, estimate), sources


def _indices(content: Any) -> tuple[int, ...]:
    return tuple(range(len(content))) if isinstance(content, list) else ()


def _assistant(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    thinking: list[str] = []
    opaque: list[bytes] = []
    for block in content:
        kind = block.get("type")
        if kind == "text":
            texts.append({"type": "text", "text": _str(block.get("text"))})
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input", {})).decode()
            fn = {"name": _str(block.get("name")), "arguments": arguments}
            calls.append({"id": block.get("id"), "type": "function", "function": fn})
        elif kind == "thinking":
            thinking.append(_str(block.get("thinking")))
        elif kind == "redacted_thinking":
            thinking.append(_str(block.get("data")))
        else:
            opaque.append(orjson.dumps(block))
    msg: dict[str, Any] = {"role": "assistant", "content": texts or None}
    if calls:
        msg["tool_calls"] = calls
    if thinking:
        msg["reasoning_content"] = "\n".join(thinking)
    if opaque:
        msg["opaque"] = b"\n".join(opaque).decode()
    return msg


def _user(i: int, content: Any, out: list[dict[str, Any]], sources: list[Source]) -> None:
    if isinstance(content, str):
        out.append({"role": "user", "content": content})
        sources.append(Source("user", i, ()))
        return
    rest: list[int] = []
    for j, block in enumerate(content):
        if block.get("type") == "tool_result":
            tool: dict[str, Any] = {
                "role": "tool",
                "tool_call_id": block.get("tool_use_id"),
                "content": _parts(block.get("content", "")),
            }
            out.append(tool)
            sources.append(Source("tool", i, (j,)))
        else:
            rest.append(j)
    if rest or not content:
        out.append({"role": "user", "content": [_part(content[j]) for j in rest]})
        sources.append(Source("user", i, tuple(rest)))


def _parts(content: Any) -> Any:
    if isinstance(content, list):
        return [_part(b) if isinstance(b, dict) else b for b in content]
    return content


def _part(block: Mapping[str, Any]) -> dict[str, Any]:
    """One Anthropic content block as a chat content part, for counting and policies."""
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": _str(block.get("text"))}
    if kind == "image":
        source = block.get("source")
        if isinstance(source, dict) and source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
            return {"type": "image_url", "image_url": {"url": url}}
        return {"type": "image_url", "image_url": {"url": ""}}  # unknown size: worst case
    return {"type": str(kind), "data": orjson.dumps(block).decode()}


def _tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    fn: dict[str, Any] = {
        "name": _str(tool.get("name")),
        "description": _str(tool.get("description")),
    }
    schema = tool.get("input_schema")
    if isinstance(schema, dict):
        fn["parameters"] = schema
    return {"type": "function", "function": fn}


def _plain_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            _str(b.get("text")) if b.get("type") == "text" else orjson.dumps(b).decode()
            for b in content
            if isinstance(b, dict)
        )
    return ""


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


# ---------------------------------------------------------------------------- render


_KEEP = "system"  # a piece that is a whole role: "system" message


@dataclass(slots=True)
class _Piece:
    role: str
    block: Any  # an Anthropic block, or a str (a message's whole string content)
    origin: tuple[int, int] | None  # (message, block) when it is the client's very block


def render(
    body: Mapping[str, Any],
    sources: Sequence[Source],
    req: ChatRequest,
    messages: Messages,
    origins: Sequence[int | None],
) -> bytes:
    """``body`` with ``messages`` (chat, compressed) written back as Anthropic messages."""
    client = body["messages"]
    out: list[Any] = []
    pieces: list[_Piece] = []
    for msg, origin in zip(messages, origins, strict=True):
        if origin is None:
            pieces.append(_Piece(_role(msg), _text_block(_text_of(msg)), None))
            continue
        src = sources[origin]
        if src.kind == "system":
            continue  # the top-level system is sent as the client wrote it
        if src.kind == "keep":
            pieces.append(_Piece(_KEEP, client[src.index], None))
            continue
        same = msg is req.messages[origin]
        pieces.extend(_pieces(src, client[src.index], msg if not same else None))
    _flush(pieces, client, out)
    sent = dict(body)
    sent["messages"] = out
    return orjson.dumps(sent)


def _pieces(src: Source, original: Mapping[str, Any], new: Message | None) -> list[_Piece]:
    """The blocks one chat message shows; ``new`` None when no policy rewrote it."""
    role, i = original["role"], src.index
    content: Any = original.get("content")  # (checked at parse: a string or a list)
    if new is None:
        if isinstance(content, str):
            return [_Piece(role, content, (i, -1))]
        return [_Piece(role, content[j], (i, j)) for j in src.blocks]
    if src.kind == "assistant":
        return _assistant_pieces(i, content, new)
    if src.kind == "tool":
        j = src.blocks[0]
        block = {k: v for k, v in content[j].items() if k != "cache_control"}
        block["content"] = _back(content[j].get("content"), new.get("content"))
        return [_Piece(role, block, None)]
    if isinstance(content, str):
        return [_Piece(role, _text_block(_text_of(new)), None)]
    blocks = _back([content[j] for j in src.blocks], new.get("content"))
    if len(blocks) != len(src.blocks):
        return [_Piece(role, b, None) for b in blocks]
    return [
        _Piece(role, b, (i, j) if b is content[j] else None)
        for j, b in zip(src.blocks, blocks, strict=True)
    ]


def _assistant_pieces(i: int, content: Any, new: Message) -> list[_Piece]:
    if isinstance(content, str):
        return [_Piece("assistant", _text_block(_text_of(new)), None)]
    texts = [b for b in content if b.get("type") == "text"]
    new_texts = _back(texts, new.get("content") or [])
    calls = {c.get("id"): c for c in new.get("tool_calls") or () if isinstance(c, dict)}
    out: list[_Piece] = []
    t = 0
    for j, block in enumerate(content):
        kind = block.get("type")
        if kind == "text":
            b = new_texts[t] if t < len(new_texts) else block
            t += 1
            out.append(_Piece("assistant", b, (i, j) if b is block else None))
        elif kind == "tool_use" and block.get("id") in calls:
            b = _tool_use(block, calls[block.get("id")])
            out.append(_Piece("assistant", b, (i, j) if b is block else None))
        else:
            out.append(_Piece("assistant", block, (i, j)))  # thinking, unknown: whole
    return out


def _tool_use(block: Mapping[str, Any], call: Mapping[str, Any]) -> Any:
    fn = call.get("function")
    arguments = fn.get("arguments") if isinstance(fn, dict) else None
    if not isinstance(arguments, str) or arguments == orjson.dumps(block.get("input", {})).decode():
        return block
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        value = {"handoff_elided": arguments}
    new = {k: v for k, v in block.items() if k != "cache_control"}
    new["input"] = value if isinstance(value, dict) else {"value": value}
    return new


def _back(original: Any, new: Any) -> Any:
    """A rewritten chat content as Anthropic content: parts still aligned with the
    original blocks map back one to one (a text changed loses ``cache_control``; an
    unchanged one is the client's block); anything else becomes text."""
    if isinstance(new, str):
        return new if not isinstance(original, list) else [_text_block(new)]
    if not isinstance(new, list):
        return original
    if not isinstance(original, list) or len(original) != len(new):
        return [_text_block(_text_of({"content": new}))]
    out: list[Any] = []
    for block, part in zip(original, new, strict=True):
        if (
            isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(part, dict)
            and part.get("text") != block.get("text")
        ):
            changed = {k: v for k, v in block.items() if k != "cache_control"}
            changed["text"] = _str(part.get("text"))
            out.append(changed)
        else:
            out.append(block)
    return out


def _flush(pieces: list[_Piece], client: Sequence[Mapping[str, Any]], out: list[Any]) -> None:
    """Write ``pieces`` as messages, merging a role's run into one (tool results first);
    a run that is exactly one client message's blocks is that message as it came. A
    ``role: "system"`` message stays where it stood, or, when the messages around it
    merge, just after them."""
    run: list[_Piece] = []
    held: list[Any] = []
    for piece in pieces:
        if piece.role == _KEEP:
            held.append(piece.block)
            continue
        if run and piece.role != run[-1].role:
            out.append(_message(run, client))
            run = []
        if not run:
            out.extend(held)
            held = []
        run.append(piece)
    if run:
        out.append(_message(run, client))
    out.extend(held)
    pieces.clear()


def _message(run: list[_Piece], client: Sequence[Mapping[str, Any]]) -> Any:
    origins = [p.origin for p in run]
    if origins[0] is not None and all(o is not None for o in origins):
        i = origins[0][0]
        content: Any = client[i].get("content")
        whole = [(i, -1)] if isinstance(content, str) else [(i, j) for j in range(len(content))]
        if origins == whole:
            return client[i]
    blocks = [_text_block(p.block) if isinstance(p.block, str) else p.block for p in run]
    results = [_is_result(b) for b in blocks]
    if any(results):  # Anthropic wants a user message's tool results first
        blocks = [b for b, r in zip(blocks, results, strict=True) if r] + [
            b for b, r in zip(blocks, results, strict=True) if not r
        ]
    return {"role": run[0].role, "content": blocks}


def _is_result(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "tool_result"


def _role(msg: Message) -> str:
    role = msg.get("role")
    return role if role == "assistant" else "user"


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _text_of(msg: Mapping[str, Any]) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            _str(p.get("text")) for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


# ------------------------------------------------------------------------- checking


def _check(body: dict[str, Any], reused: int) -> None:
    """What handoff must understand to count and compress; the rest is the upstream's."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("model: Field required (a non-empty string)", param="model")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest("messages: Field required (an array of messages)", param="messages")
    for i, msg in enumerate(messages, reused):  # (only those not reused from a body seen)
        _check_message(i, msg)
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise InvalidRequest("system: Input should be a string or an array of text blocks")
    if isinstance(system, list):
        _check_blocks("system", system)


def _check_message(i: int, msg: Any) -> None:
    where = f"messages.{i}"
    if not isinstance(msg, dict):
        raise InvalidRequest(f"{where}: Input should be an object")
    if msg.get("role") not in _ROLES:
        raise InvalidRequest(f"{where}.role: Input should be 'user' or 'assistant'")
    content = msg.get("content")
    if isinstance(content, list):
        _check_blocks(f"{where}.content", content)
    elif not isinstance(content, str):
        raise InvalidRequest(f"{where}.content: Input should be a string or an array of blocks")


def _check_blocks(where: str, blocks: list[Any]) -> None:
    for j, block in enumerate(blocks):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidRequest(f"{where}.{j}: Input should be a content block with a type")
