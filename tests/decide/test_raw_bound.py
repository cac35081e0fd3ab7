"""The O(1) raw-byte bound: for text-only requests it is never below the exact count,
so the engine may migrate on it without tokenizing anything."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.decide.byte_bound import raw_bound
from proxy.decide.tokens import TokenCounter
from proxy.ingress.chat_completions import parse_chat
from tests.strategies import tool_definitions

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["", "<|endoftext|>", "🙂🙂", "日本語", " \n "]
)
tool_calls = st.lists(
    st.builds(
        lambda n, a: {"id": "", "type": "function", "function": {"name": n, "arguments": a}},
        texts,
        texts,
    ),
    max_size=3,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "developer"])},
        optional={
            "content": st.one_of(
                st.none(), texts, st.lists(st.builds(lambda t: {"type": "text", "text": t}, texts))
            ),
            "name": texts,
            "tool_calls": tool_calls,
            "tool_call_id": texts,
        },
    ),
    max_size=6,
)
properties = st.dictionaries(
    texts,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["string", "integer", "number"])},
        optional={"description": texts, "enum": st.lists(texts, max_size=4)},
    ),
    max_size=4,
)
tools = tool_definitions(texts, properties, max_size=3)
formats = st.none() | st.builds(
    lambda props: {
        "type": "json_schema",
        "json_schema": {"name": "", "schema": {"type": "object", "properties": props}},
    },
    properties,
)


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> TokenCounter:
    return TokenCounter(10_000, cache_dir=tmp_path_factory.mktemp("tiktoken"))


@settings(max_examples=300, deadline=None)
@given(
    model=st.sampled_from(["gpt-4o", "gpt-4", "gpt-3.5-turbo", "llama3.1:8b"]),
    msgs=messages,
    defs=tools,
    fmt=formats,
)
@example(
    model="gpt-4",
    msgs=[{"role": "user", "content": ""}] * 6,
    defs=[
        {
            "type": "function",
            "function": {
                "name": "",
                "description": "",
                "parameters": {
                    "type": "object",
                    "properties": {"": {"type": "string", "enum": [""] * 4}},
                },
            },
        }
    ]
    * 3,
    fmt=None,
)
def test_raw_bound_never_below_count(
    counter: TokenCounter,
    model: str,
    msgs: list[dict[str, Any]],
    defs: list[dict[str, Any]],
    fmt: Any,
) -> None:
    """Compact JSON (the fewest bytes a client can send) still bounds the exact count."""
    body: dict[str, Any] = {"model": model, "messages": msgs}
    if defs:
        body["tools"] = defs
    if fmt is not None:
        body["response_format"] = fmt
    bound = raw_bound(parse_chat(orjson.dumps(body)))
    assert bound is not None
    assert bound >= counter.for_model(model).count_request(body)


def test_non_text_parts_have_no_raw_bound() -> None:
    """Images, audio and files cost more than their bytes: no raw bound for them."""
    for part in (
        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
        {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
        {"type": "file", "file": {"file_id": "f"}},
    ):
        content = [{"type": "text", "text": "see"}, part]
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}
        assert raw_bound(parse_chat(orjson.dumps(body))) is None
    text_only = {"model": "gpt-4o", "messages": [{"role": "user", "content": "an image"}]}
    assert raw_bound(parse_chat(orjson.dumps(text_only))) is not None
    # Messages that are mappings but not dicts (as a policy may build) are checked too.
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}
    req = parse_chat(orjson.dumps({"model": "gpt-4o", "messages": [image]}))
    assert raw_bound(dataclasses.replace(req, messages=(MappingProxyType(image),))) is None
