"""Files as the tools write them (shapes from their published sources and docs), with
the odd records each format has: tool calls, images, reasoning, meta lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CODEX_ID = "5973b6c0-94b8-487b-a530-2aeb6098ae0e"
CLAUDE_ID = "4f35e220-c435-4cf7-b9b9-f40426042847"
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGD4DwABBAEAwS2OUAAAAABJRU5ErkJggg=="


def _jsonl(path: Path, lines: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def codex_rollout(root: Path, bad_line: bool = False) -> Path:
    """A rollout: meta, turn context, a user message with an image, reasoning, a
    function call and its output, a custom tool call, the answer, a compaction."""
    ts = "2025-09-01T10:00:0{}.000Z"

    def line(i: int, kind: str, payload: Any) -> dict[str, Any]:
        return {"timestamp": ts.format(i), "type": kind, "payload": payload}

    items = [
        line(
            0,
            "session_meta",
            {
                "id": CODEX_ID,
                "timestamp": ts.format(0),
                "cwd": "/home/u/proj",
                "originator": "codex_cli_rs",
                "cli_version": "0.36.0",
                "instructions": None,
                "git": {"branch": "main"},
            },
        ),
        line(
            0,
            "response_item",
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "<permissions>sandboxed</permissions>"}],
            },
        ),
        line(
            0,
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [
                    {
                        "type": "input_text",
                        "text": "<environment_context>\n  <cwd>/home/u/proj</cwd>\n</environment_context>",
                    }
                ],
            },
        ),
        line(
            1,
            "turn_context",
            {
                "cwd": "/home/u/proj",
                "approval_policy": "on-request",
                "model": "gpt-5-codex",
                "summary": "auto",
            },
        ),
        line(
            1,
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "why does the build fail? see screenshot"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
                ],
            },
        ),
        line(1, "event_msg", {"type": "user_message", "message": "why does the build fail?"}),
        line(
            2,
            "response_item",
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Look at the Makefile first."}],
                "content": None,
                "encrypted_content": "gAAAA",
            },
        ),
        line(
            2,
            "response_item",
            {
                "type": "function_call",
                "name": "shell",
                "arguments": '{"command":["cat","Makefile"]}',
                "call_id": "call_a",
            },
        ),
        line(
            3,
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "call_a",
                "output": '{"output":"all: build\\n","metadata":{"exit_code":0}}',
            },
        ),
        line(
            3,
            "response_item",
            {
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": "call_b",
                "name": "apply_patch",
                "input": "*** Begin Patch\n*** End Patch",
            },
        ),
        line(
            4,
            "response_item",
            {"type": "custom_tool_call_output", "call_id": "call_b", "output": "Success."},
        ),
        line(
            5,
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "The Makefile had no build target; fixed."}
                ],
            },
        ),
        line(6, "compacted", {"message": "Summary: fixed the Makefile."}),
        line(
            7,
            "response_item",
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "thanks"}],
            },
        ),
        line(
            8,
            "response_item",
            {
                "type": "local_shell_call",
                "call_id": "call_c",
                "status": "completed",
                "action": {"type": "exec", "command": ["make"]},
            },
        ),
        line(
            8,
            "response_item",
            {
                "type": "function_call_output",
                "call_id": "call_c",
                "output": [
                    {"type": "input_text", "text": "ok"},
                    {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"},
                ],
            },
        ),
        line(
            9,
            "response_item",
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Built."}],
            },
        ),
    ]
    path = root / "sessions/2025/09/01" / f"rollout-2025-09-01T10-00-00-{CODEX_ID}.jsonl"
    _jsonl(path, items)
    if bad_line:
        text = path.read_text().splitlines(keepends=True)
        text.insert(4, '{"timestamp": "2025-09-01T10:00:01Z", "type": "event_msg", "payl\n')
        path.write_text("".join(text))
    return path


def claude_transcript(root: Path) -> Path:
    """A transcript: a summary line, a snapshot, a user turn, an assistant reply split
    over three records (thinking, text, tool_use), a tool_result, a sidechain, the end."""
    base = {
        "isSidechain": False,
        "userType": "external",
        "cwd": "/p",
        "sessionId": CLAUDE_ID,
        "version": "1.0.3",
        "gitBranch": "main",
    }

    def rec(uuid: str, parent: str | None, kind: str, message: Any, t: int, **kw: Any) -> Any:
        return {
            **base,
            "parentUuid": parent,
            "uuid": uuid,
            "type": kind,
            "message": message,
            "timestamp": f"2025-05-26T07:27:{t:02d}.000Z",
            **kw,
        }

    asst = {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5"}
    lines = [
        {"type": "summary", "summary": "Add a config file", "leafUuid": "u7"},
        {"type": "file-history-snapshot", "messageId": "u1", "snapshot": {}},
        rec(
            "u1",
            None,
            "user",
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Please add a config file"},
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": PNG},
                    },
                ],
            },
            40,
        ),
        rec(
            "u2",
            "u1",
            "assistant",
            {
                **asst,
                "content": [
                    {"type": "thinking", "thinking": "A TOML file fits.", "signature": "sig"}
                ],
            },
            41,
        ),
        rec(
            "u3",
            "u2",
            "assistant",
            {**asst, "content": [{"type": "text", "text": "I'll create config.toml."}]},
            41,
        ),
        rec(
            "u4",
            "u3",
            "assistant",
            {
                **asst,
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Write",
                        "input": {"file_path": "/p/config.toml", "content": "a = 1\n"},
                    }
                ],
            },
            42,
        ),
        rec(
            "s1",
            "u4",
            "user",
            {"role": "user", "content": "sub-agent prompt"},
            42,
            isSidechain=True,
        ),
        rec(
            "u5",
            "u4",
            "user",
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "File created"}
                ],
            },
            43,
            toolUseResult={"type": "create"},
        ),
        {
            "type": "system",
            "subtype": "turn_duration",
            "uuid": "y1",
            "parentUuid": "u5",
            "sessionId": CLAUDE_ID,
            "timestamp": "2025-05-26T07:27:43.500Z",
        },
        rec(
            "u6",
            "u5",
            "assistant",
            {
                **asst,
                "id": "msg_02",
                "model": "claude-opus-4-1",
                "content": [{"type": "text", "text": "Done."}],
            },
            44,
        ),
        rec("u7", "u6", "user", {"role": "user", "content": "thanks!"}, 45),
    ]
    return _jsonl(root / "projects/-p" / f"{CLAUDE_ID}.jsonl", lines)


def _node(nid: str, parent: str | None, children: list[str], message: Any) -> dict[str, Any]:
    return {"id": nid, "message": message, "parent": parent, "children": children}


def _msg(nid: str, role: str, content: Any, t: float, **kw: Any) -> dict[str, Any]:
    return {
        "id": nid,
        "author": {"role": role, "name": kw.pop("name", None), "metadata": {}},
        "create_time": t,
        "content": content,
        "status": "finished_successfully",
        "weight": 1.0,
        "metadata": kw.pop("metadata", {}),
        "recipient": kw.pop("recipient", "all"),
        **kw,
    }


def chatgpt_export(root: Path) -> Path:
    """Two conversations; the first a tree with an edited branch (the current one is
    the edit), a null root, a hidden system node, thoughts, an image and a python call."""
    text = lambda *p: {"content_type": "text", "parts": list(p)}  # noqa: E731
    mapping = {
        "root": _node("root", None, ["sys"], None),
        "sys": _node(
            "sys",
            "root",
            ["q1", "ctx"],
            _msg(
                "sys",
                "system",
                text(""),
                1.0,
                metadata={"is_visually_hidden_from_conversation": True},
            ),
        ),
        "q1": _node("q1", "sys", ["a1"], _msg("q1", "user", text("old question"), 2.0)),
        "a1": _node("a1", "q1", [], _msg("a1", "assistant", text("old answer"), 3.0)),
        "ctx": _node(
            "ctx",
            "sys",
            ["q1b"],
            _msg(
                "ctx",
                "user",
                {
                    "content_type": "user_editable_context",
                    "user_profile": "I am a data analyst.",
                    "user_instructions": "Answer with code.",
                },
                3.5,
                metadata={"is_visually_hidden_from_conversation": True},
            ),
        ),
        "q1b": _node(
            "q1b",
            "ctx",
            ["th"],
            _msg(
                "q1b",
                "user",
                {
                    "content_type": "multimodal_text",
                    "parts": [
                        {
                            "content_type": "image_asset_pointer",
                            "asset_pointer": "file-service://file-1",
                            "width": 10,
                            "height": 10,
                        },
                        "plot this",
                    ],
                },
                4.0,
            ),
        ),
        "th": _node(
            "th",
            "q1b",
            ["code"],
            _msg(
                "th",
                "assistant",
                {
                    "content_type": "thoughts",
                    "thoughts": [{"summary": "s", "content": "Use matplotlib."}],
                },
                5.0,
            ),
        ),
        "code": _node(
            "code",
            "th",
            ["out"],
            _msg(
                "code",
                "assistant",
                {"content_type": "code", "language": "python", "text": "print(2)"},
                6.0,
                recipient="python",
                metadata={"model_slug": "gpt-4o"},
            ),
        ),
        "out": _node(
            "out",
            "code",
            ["a2"],
            _msg(
                "out", "tool", {"content_type": "execution_output", "text": "2"}, 7.0, name="python"
            ),
        ),
        "a2": _node(
            "a2",
            "out",
            [],
            _msg(
                "a2", "assistant", text("Here is the plot."), 8.0, metadata={"model_slug": "gpt-4o"}
            ),
        ),
    }
    second = {
        "r": _node("r", None, ["x"], None),
        "x": _node("x", "r", ["y"], _msg("x", "user", text("hi"), 10.0)),
        "y": _node("y", "x", [], _msg("y", "assistant", text("hello"), 11.0)),
    }
    convs = [
        {
            "title": "Plotting",
            "create_time": 1.0,
            "update_time": 8.0,
            "mapping": mapping,
            "current_node": "a2",
            "conversation_id": "c-1",
            "id": "c-1",
            "default_model_slug": "gpt-4o",
        },
        {
            "title": "Greeting",
            "create_time": 10.0,
            "mapping": second,
            "current_node": "y",
            "id": "c-2",
            "default_model_slug": "gpt-4o-mini",
        },
        {"title": "broken", "mapping": "not a tree"},
    ]
    path = root / "export/conversations.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(convs))
    return path


def openai_json(root: Path) -> Path:
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "y.png"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
            {"role": "assistant", "content": "A cat."},
        ],
    }
    path = root / "openai.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body))
    return path


def anthropic_json(root: Path) -> Path:
    body = {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": "Be brief."}],
        "max_tokens": 100,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "weather?"},
                    {"type": "image", "source": {"type": "url", "url": "https://x/m.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Oslo"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [{"type": "text", "text": "rain"}],
                    }
                ],
            },
            {"role": "assistant", "content": "Rain in Oslo."},
        ],
    }
    path = root / "anthropic.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body))
    return path


def claude_compacted(root: Path) -> Path:
    """A transcript continued after /compact: a compact_boundary whose parentUuid is
    null links on through logicalParentUuid; and a sub-agent's file of sidechain only."""
    base = {"isSidechain": False, "sessionId": "sess-2", "cwd": "/p"}
    caveat = "Caveat: the messages below were generated by the user running local commands."
    lines = [
        {
            **base,
            "type": "user",
            "uuid": "m",
            "parentUuid": None,
            "isMeta": True,
            "message": {"role": "user", "content": caveat},
            "timestamp": "2025-06-01T00:00:00Z",
        },
        {
            **base,
            "type": "user",
            "uuid": "a",
            "parentUuid": "m",
            "message": {"role": "user", "content": "first"},
            "timestamp": "2025-06-01T00:00:00Z",
        },
        {
            **base,
            "type": "assistant",
            "uuid": "b",
            "parentUuid": "a",
            "message": {
                "id": "m1",
                "role": "assistant",
                "model": "claude-sonnet-4-5",
                "content": [{"type": "text", "text": "one"}],
            },
            "timestamp": "2025-06-01T00:00:01Z",
        },
        {
            **base,
            "type": "system",
            "subtype": "compact_boundary",
            "uuid": "c",
            "parentUuid": None,
            "logicalParentUuid": "b",
            "content": "Conversation compacted",
            "timestamp": "2025-06-01T00:00:02Z",
        },
        {
            **base,
            "type": "user",
            "uuid": "d",
            "parentUuid": "c",
            "message": {"role": "user", "content": "second"},
            "timestamp": "2025-06-01T00:00:03Z",
        },
    ]
    _jsonl(root / "agent-1234.jsonl", [
        {**base, "isSidechain": True, "type": "user", "uuid": "z", "parentUuid": None,
         "message": {"role": "user", "content": "sub-task"}}])  # fmt: skip
    return _jsonl(root / "sess-2.jsonl", lines)
