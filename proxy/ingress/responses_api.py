"""OpenAI Responses wire format (``POST /v1/responses``) → :class:`ChatRequest`, and back.

The ``input`` items become Chat Completions messages, one per *group*: a ``message``
item is a message; a run of ``reasoning``, assistant ``message`` and call items
(``function_call``, ``custom_tool_call``, ``local_shell_call``, ``computer_call``) is
one assistant message whose ``tool_calls`` carry the calls by ``call_id``; each call's
output item is a ``tool`` message. So the policies keep a call and its output together
(tool-loop units), and a reasoning item lives and dies with its turn. ``instructions``
is counted as a leading system message (pinned) and never written back: it stays in
the body as sent. Any other item (``item_reference``, a server-side tool call, an item
type handoff does not know) is an opaque pinned message, written back as it came.

:class:`ResponsesWriter` writes compressed messages back: a group whose message came
back unchanged is its items' very bytes from the client's body, a reasoning item is
always its own bytes (never edited), a rewritten message changes only the fields it
changed, and every member of the body other than ``input`` keeps its bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.errors import InvalidRequest
from proxy.ingress.chat_completions import parse_json_object
from proxy.ingress.chat_request import ChatRequest, Messages
from proxy.ingress.incremental_parse import ResentBodies
from proxy.ingress.json_spans import Layout, element_start, layout

CALLS = {
    "function_call": "arguments",
    "custom_tool_call": "input",
    "local_shell_call": "action",
    "computer_call": "action",
}
"""Call item types, and the field holding what the call asks for."""
OUTPUTS = frozenset(
    {
        "function_call_output",
        "custom_tool_call_output",
        "local_shell_call_output",
        "computer_call_output",
    }
)
_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text"})
_MESSAGE_ROLES = frozenset({"user", "system", "developer", "assistant"})


@dataclass(frozen=True, slots=True)
class Group:
    """The input items one message shows: ``kind`` is ``instructions``, ``text`` (a
    string ``input``), ``message``, ``assistant``, ``output`` or ``opaque``."""

    kind: str
    items: tuple[int, ...]


def parse_responses(raw: bytes, bodies: ResentBodies | None = None) -> ChatRequest:
    """Parse a Responses request; ``bodies`` (keyed on ``input``) reuses the items of a
    body it resends, so only the new ones are parsed and checked."""
    if bodies is not None and bodies.key != "input":
        bodies = None  # (a chat cache: its reuse would look for messages)
    body, resends = parse_json_object(raw, bodies, _check)
    messages, groups = to_messages(body)
    chat_body: dict[str, Any] = {"model": body["model"], "messages": messages}
    tools = chat_tools(body.get("tools"))
    if tools:
        chat_body["tools"] = tools
    out = body.get("max_output_tokens")
    if isinstance(out, int) and not isinstance(out, bool):
        chat_body["max_tokens"] = out
    if body.get("stream"):
        chat_body["stream"] = True
    return ChatRequest(
        model=body["model"],
        messages=tuple(messages),
        body=chat_body,
        raw=raw,
        render=ResponsesWriter(body, groups),
        params={k: v for k, v in body.items() if k not in ("model", "input")},
        resends=resends,
    )


def _check(body: dict[str, Any], reused: int) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest(
            "Missing required parameter: 'model' (a non-empty string).", param="model"
        )
    if "input" not in body:
        raise InvalidRequest(
            "Missing required parameter: 'input' (a string or an array of input items).",
            param="input",
        )
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, (str, list)):
        raise InvalidRequest(
            "Invalid type for 'instructions': expected a string.", param="instructions"
        )
    items = body["input"]
    if isinstance(items, str):
        return
    if not isinstance(items, list):
        raise InvalidRequest(
            f"Invalid type for 'input': expected a string or an array of input items, "
            f"got {type(items).__name__}.",
            param="input",
        )
    for i, item in enumerate(items, reused):
        _check_item(i, item)


def _check_item(i: int, item: Any) -> None:
    where = f"input[{i}]"
    if not isinstance(item, dict):
        raise InvalidRequest(
            f"Invalid type for '{where}': expected an object, got {type(item).__name__}.",
            param=where,
        )
    kind = item_type(item)
    if kind is None:
        raise InvalidRequest(
            f"Missing required parameter: '{where}.type' (such as 'message' or "
            "'function_call_output').",
            param=f"{where}.type",
        )
    if kind == "message":
        if item.get("role") not in _MESSAGE_ROLES:
            raise InvalidRequest(
                f"Invalid value for '{where}.role': expected one of 'user', 'assistant', "
                "'system' or 'developer'.",
                param=f"{where}.role",
            )
        if not isinstance(item.get("content"), (str, list)):
            raise InvalidRequest(
                f"Invalid type for '{where}.content': expected a string or an array of "
                "content parts.",
                param=f"{where}.content",
            )
    elif kind in CALLS or kind in OUTPUTS:
        if not isinstance(call_id(item), str):
            raise InvalidRequest(
                f"Missing required parameter: '{where}.call_id' (a string).",
                param=f"{where}.call_id",
            )
    elif kind == "reasoning" and not isinstance(item.get("summary", []), list):
        raise InvalidRequest(
            f"Invalid type for '{where}.summary': expected an array.", param=f"{where}.summary"
        )


def item_type(item: Mapping[str, Any]) -> str | None:
    """An item's type; an item with a ``role`` and no ``type`` is a message."""
    kind = item.get("type")
    if kind is None and "role" in item:
        return "message"
    return kind if isinstance(kind, str) else None


def call_id(item: Mapping[str, Any]) -> Any:
    """The id that pairs a call with its output (a local shell output names it ``id``)."""
    if "call_id" in item:
        return item["call_id"]
    return item.get("id") if item.get("type") == "local_shell_call_output" else None


def to_messages(body: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[Group]]:
    """The chat messages a (checked) Responses body shows, and the items each shows."""
    messages: list[dict[str, Any]] = []
    groups: list[Group] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
        groups.append(Group("instructions", ()))
    items = body["input"]
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        groups.append(Group("text", ()))
        return messages, groups
    run: list[int] = []  # the open assistant run
    for i, item in enumerate(items):
        kind = item_type(item)
        if (
            kind == "reasoning"
            or kind in CALLS
            or (kind == "message" and item.get("role") == "assistant")
        ):
            run.append(i)
            continue
        if run:
            messages.append(assistant_message([items[j] for j in run]))
            groups.append(Group("assistant", tuple(run)))
            run = []
        if kind == "message":
            messages.append({"role": item["role"], "content": chat_content(item["content"])})
            groups.append(Group("message", (i,)))
        elif kind in OUTPUTS:
            messages.append(
                {"role": "tool", "tool_call_id": call_id(item), "content": _output(item)}
            )
            groups.append(Group("output", (i,)))
        else:
            messages.append({"role": "developer", "content": orjson.dumps(item).decode()})
            groups.append(Group("opaque", (i,)))
    if run:
        messages.append(assistant_message([items[j] for j in run]))
        groups.append(Group("assistant", tuple(run)))
    return messages, groups


def assistant_message(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One assistant message for a run of reasoning, message and call items."""
    text: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in items:
        kind = item_type(item)
        if kind == "message":
            text.append(_joined(item.get("content")))
        elif kind == "reasoning":
            reasoning += [
                s for s in (_joined(item.get("summary")), _joined(item.get("content"))) if s
            ]
        elif kind in CALLS:
            calls.append(_tool_call(item, kind))
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if reasoning:
        msg["reasoning_content"] = "\n".join(reasoning)
    if calls:
        msg["tool_calls"] = calls
    return msg


def _tool_call(item: Mapping[str, Any], kind: str) -> dict[str, Any]:
    asked = item.get(CALLS[kind])
    arguments = asked if isinstance(asked, str) else orjson.dumps(asked).decode()
    name = item.get("name") if isinstance(item.get("name"), str) else kind.removesuffix("_call")
    return {
        "id": call_id(item),
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def _joined(parts: Any) -> str:
    """The text of a string or of a list of text parts."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    return "".join(
        p.get("text") or p.get("refusal") or ""
        for p in parts
        if isinstance(p, dict) and isinstance(p.get("text") or p.get("refusal") or "", str)
    )


def chat_content(content: Any) -> Any:
    """A message item's content as chat content: text and image parts in chat's shape,
    other parts as they came."""
    if not isinstance(content, list):
        return content
    out: list[Any] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            out.append({"type": "text", "text": part["text"]})
        elif kind == "input_image":
            url = part.get("image_url") if isinstance(part.get("image_url"), str) else ""
            detail = part.get("detail") if isinstance(part.get("detail"), str) else "auto"
            out.append({"type": "image_url", "image_url": {"url": url, "detail": detail}})
        else:
            out.append(part)
    return out


def _output(item: Mapping[str, Any]) -> Any:
    output = item.get("output")
    if isinstance(output, (str, list)):
        return chat_content(output)
    return orjson.dumps(output).decode() if output is not None else ""


def chat_tools(tools: Any) -> list[dict[str, Any]]:
    """The request's tools in chat's shape, for counting: a function or custom tool as a
    function; any other (``web_search``, a namespace of tools…) as a function whose
    description is its JSON, so that what the model is shown of it is counted too."""
    out: list[dict[str, Any]] = []
    for tool in tools if isinstance(tools, list) else ():
        if not isinstance(tool, dict):
            continue
        if tool.get("type") not in ("function", "custom"):
            name = str(tool.get("type", "tool"))
            fn: dict[str, Any] = {"name": name, "description": orjson.dumps(tool).decode()}
            out.append({"type": "function", "function": fn})
            continue
        fn = {"name": str(tool.get("name", ""))}
        if isinstance(tool.get("description"), str):
            fn["description"] = tool["description"]
        if isinstance(tool.get("parameters"), dict):
            fn["parameters"] = tool["parameters"]
        elif isinstance(tool.get("format"), dict):  # a custom tool's grammar
            fn["description"] = (
                f"{fn.get('description', '')}\n{orjson.dumps(tool['format']).decode()}"
            )
        out.append({"type": "function", "function": fn})
    return out


class ResponsesWriter:
    """Writes messages back as a Responses body (see the module's docstring)."""

    def __init__(self, body: Mapping[str, Any], groups: Sequence[Group]) -> None:
        self.body = body
        self.groups = groups

    def __call__(
        self, req: ChatRequest, messages: Messages, origins: Sequence[int | None]
    ) -> bytes:
        lay = layout(req.raw, "input")
        parts: list[bytes] = []
        for msg, origin in zip(messages, origins, strict=True):
            if origin is None:
                parts += [orjson.dumps(i) for i in written_items(msg)]
                continue
            group = self.groups[origin]
            if group.kind == "instructions":
                continue
            if group.kind == "opaque" or msg == req.messages[origin]:
                parts += self._originals(req.raw, lay, group)
            else:
                parts += [self._bytes(req.raw, lay, i) for i in self._rewritten(group, msg)]
        if lay is not None:
            gap = b","  # between items, as the client spaced them
            if len(lay.ends) > 1:
                gap = req.raw[lay.ends[0] : element_start(req.raw, lay, 1)]
            head = req.raw[: element_start(req.raw, lay, 0)] if lay.ends else b""
            tail = req.raw[lay.ends[-1] :] if lay.ends else b""
            if not parts or not lay.ends:
                head, tail = req.raw[: lay.open + 1], req.raw[lay.close :]
            return b"".join((head, gap.join(parts), tail))
        body = dict(self.body)
        body["input"] = [orjson.Fragment(p) for p in parts]
        return orjson.dumps(body)

    def _originals(self, raw: bytes, lay: Layout | None, group: Group) -> list[bytes]:
        if group.kind == "text":
            return [orjson.dumps({"role": "user", "content": self.body["input"]})]
        return [self._bytes(raw, lay, i) for i in group.items]

    def _bytes(self, raw: bytes, lay: Layout | None, item: int | dict[str, Any]) -> bytes:
        """An item's bytes: the client's (an index), or a rewritten item's JSON."""
        if isinstance(item, dict):
            return orjson.dumps(item)
        if lay is None:
            return orjson.dumps(self.body["input"][item])
        return raw[element_start(raw, lay, item) : lay.ends[item]]

    def _rewritten(self, group: Group, msg: Mapping[str, Any]) -> list[int | dict[str, Any]]:
        """The group's items with what ``msg`` changed: an index where an item is the
        client's as it came, a new item where it changed."""
        items = self.body["input"]
        if group.kind == "text":
            return [{"role": "user", "content": msg.get("content")}]
        if group.kind == "message":
            item = dict(items[group.items[0]])
            item["content"] = item_content(msg.get("content"), item["role"])
            return [item]
        if group.kind == "output":
            item = dict(items[group.items[0]])
            if not isinstance(item.get("output"), (str, list)):
                return [group.items[0]]  # an object (a screenshot) is not text to shorten
            item["output"] = _output_back(msg.get("content"))
            return [item]
        return _assistant_back(items, group.items, msg)


def _assistant_back(
    items: Sequence[Mapping[str, Any]], indices: Sequence[int], msg: Mapping[str, Any]
) -> list[int | dict[str, Any]]:
    calls = {c.get("id"): c for c in msg.get("tool_calls") or () if isinstance(c, dict)}
    text = msg.get("content")
    text = _joined(text) if not isinstance(text, str) else text
    out: list[int | dict[str, Any]] = []
    said = False
    for i in indices:
        item = items[i]
        kind = item_type(item)
        if kind == "reasoning":
            out.append(i)  # never edited
        elif kind == "message":
            if not said and text == _joined(item.get("content")):
                out.append(i)
            elif not said:  # (even emptied: a reasoning item needs what follows it)
                new = dict(item)
                new["content"] = [{"type": "output_text", "text": text or "", "annotations": []}]
                out.append(new)
            said = True
        elif kind in CALLS:
            call = calls.get(call_id(item))
            if call is None:
                continue
            out.append(_call_back(i, item, kind, call))
    if text and not said:
        new_msg = {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": text, "annotations": []}
        ]}  # fmt: skip
        at = next((k for k, x in enumerate(out) if not _is_reasoning(items, x)), len(out))
        out.insert(at, new_msg)
    return out


def _is_reasoning(items: Sequence[Mapping[str, Any]], x: int | dict[str, Any]) -> bool:
    return isinstance(x, int) and item_type(items[x]) == "reasoning"


def _call_back(
    i: int, item: Mapping[str, Any], kind: str, call: Mapping[str, Any]
) -> int | dict[str, Any]:
    fn = call.get("function")
    arguments = fn.get("arguments") if isinstance(fn, dict) else None
    if arguments == _tool_call(item, kind)["function"]["arguments"]:
        return i
    new = dict(item)
    field = CALLS[kind]
    if isinstance(item.get(field), str):
        new[field] = arguments
    else:
        try:
            new[field] = orjson.loads(arguments) if isinstance(arguments, str) else arguments
        except orjson.JSONDecodeError:
            return i  # an action must stay an object: the client's, then
    return new


def item_content(content: Any, role: str) -> Any:
    """Chat content back as a message item's content."""
    if not isinstance(content, list):
        return content if content is not None else ""
    text_type = "output_text" if role == "assistant" else "input_text"
    out: list[Any] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            out.append({"type": text_type, "text": part.get("text", "")})
        elif kind == "image_url":
            spec = part.get("image_url") if isinstance(part.get("image_url"), dict) else {}
            out.append(
                {
                    "type": "input_image",
                    "image_url": spec.get("url", ""),
                    "detail": spec.get("detail", "auto"),
                }
            )
        else:
            out.append(part)
    return out


def _output_back(content: Any) -> Any:
    return item_content(content, "user") if isinstance(content, list) else content or ""


def written_items(msg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Input items for a message handoff wrote (a summary, a marker, a stub)."""
    role = msg.get("role")
    if role in ("tool", "function"):
        return [
            {
                "type": "function_call_output",
                "call_id": msg.get("tool_call_id"),
                "output": _output_back(msg.get("content")),
            }
        ]
    role = role if role in _MESSAGE_ROLES else "user"
    out: list[dict[str, Any]] = []
    content = msg.get("content")
    if content or not msg.get("tool_calls"):
        out.append({"type": "message", "role": role, "content": item_content(content, role)})
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            out.append(
                {
                    "type": "function_call",
                    "call_id": call.get("id"),
                    "name": fn.get("name", ""),
                    "arguments": fn.get("arguments", ""),
                }
            )
    return out
