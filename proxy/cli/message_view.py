"""A recorded message as text for the terminal, in full: every text part, every tool call,
and a line for each image or audio part (its type and size, or the host it is fetched
from), since their bytes mean nothing on a terminal."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any


def size_text(n: int) -> str:
    """``512 B``, ``34 KB``, ``2.5 MB`` (powers of 1024)."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{round(n / 1024)} KB"
    return f"{n / (1024 * 1024):.1f} MB"


def _data_size(b64: str) -> int:
    """Bytes that base64 text ``b64`` decodes to, counted without decoding it."""
    b64 = "".join(b64.split())
    return max(0, len(b64) * 3 // 4 - b64[-2:].count("="))


def image_summary(url: str, detail: Any = None) -> str:
    """``[image/png 34 KB]`` for a data URL, ``[image from example.com]`` for a link."""
    extra = f", detail {detail}" if isinstance(detail, str) and detail else ""
    if url.startswith("data:"):
        head, _, data = url[5:].partition(",")
        kind = head.split(";")[0] or "image"
        size = _data_size(data) if ";base64" in head else len(urllib.parse.unquote(data))
        return f"[{kind} {size_text(size)}{extra}]"
    host = urllib.parse.urlsplit(url).hostname
    return f"[image from {host or 'a link'}{extra}]"


def part_text(part: Any) -> str:
    """One content part: its text, or a bracketed summary of what it holds."""
    if not isinstance(part, Mapping):
        return f"[{type(part).__name__} part]"
    kind = part.get("type")
    if kind == "text" or (kind is None and "text" in part):
        return str(part.get("text", ""))
    if kind == "image_url":
        image = part.get("image_url")
        if isinstance(image, Mapping):
            return image_summary(str(image.get("url", "")), image.get("detail"))
        return image_summary(str(image or ""))
    if kind == "input_audio":
        audio = part.get("input_audio")
        audio = audio if isinstance(audio, Mapping) else {}
        fmt = audio.get("format") or "audio"
        return f"[audio/{fmt} {size_text(_data_size(str(audio.get('data', ''))))}]"
    if kind == "file":
        file = part.get("file")
        name = file.get("filename") if isinstance(file, Mapping) else None
        return f"[file {name}]" if name else "[file]"
    return f"[{kind} part]"


def message_body(m: Mapping[str, Any]) -> str:
    """What ``m`` says: its content (parts joined by new lines), then its tool calls."""
    content = m.get("content")
    lines: list[str] = []
    if isinstance(content, str):
        lines.append(content)
    elif isinstance(content, list):
        lines.extend(part_text(p) for p in content)
    elif content is not None:
        lines.append(str(content))
    calls = m.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping):
            lines.append(f"→ {fn.get('name', '?')}({fn.get('arguments', '')})")
    return "\n".join(lines)


def message_head(m: Mapping[str, Any]) -> str:
    """``role``, with the name or the tool call it answers: ``tool (call_1)``."""
    role = str(m.get("role", "?"))
    who = m.get("name") or m.get("tool_call_id")
    return f"{role} ({who})" if who else role


def clipped(text: str, max_chars: int | None) -> str:
    """``text``, or its first ``max_chars`` characters and how many more there were."""
    if max_chars is None or len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}… ({len(text) - max_chars:,} more characters)"


def full(m: Mapping[str, Any], max_chars: int | None = None, indent: str = "      ") -> str:
    """``role: text``, every line of it, continuation lines indented under the first."""
    body = clipped(message_body(m), max_chars)
    return f"{message_head(m)}: " + body.replace("\n", "\n" + indent)


def brief(m: Mapping[str, Any], width: int = 160) -> str:
    """``role: text`` on one line, at most ``width`` characters of text."""
    text = " ".join(message_body(m).split())
    return f"{message_head(m)}: {text[:width]}" + ("…" if len(text) > width else "")
