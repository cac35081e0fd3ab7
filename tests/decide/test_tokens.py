"""Prompt token counting: cookbook figures, chat parts, images, cache, fast-path bound."""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.decide.tokens import TokenCounter, chat, encoding_for
from proxy.decide.tokens.images import (
    ImageCost,
    cost_for_model,
    data_url_size,
    image_size,
    image_tokens,
)
from tests.strategies import tool_definitions

COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate "
        "jargon into plain English.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "New synergies will help drive top-line growth.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on "
        "opportunities for increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client "
        "deliverable.",
    },
]
COOKBOOK_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_current_weather",
            "description": "Get the current weather in a given location",
            "parameters": {
                "type": "object",
                "properties": {
                    "location": {
                        "type": "string",
                        "description": "The city and state, e.g. San Francisco, CA",
                    },
                    "unit": {
                        "type": "string",
                        "description": "The unit of temperature to return",
                        "enum": ["celsius", "fahrenheit"],
                    },
                },
                "required": ["location"],
            },
        },
    }
]
COOKBOOK_TOOL_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful assistant that can answer to questions about the weather.",
    },
    {"role": "user", "content": "What's the weather like in San Francisco?"},
]


@pytest.fixture(scope="module")
def counter(tmp_path_factory: pytest.TempPathFactory) -> TokenCounter:
    return TokenCounter(10_000, cache_dir=tmp_path_factory.mktemp("tiktoken"))


@pytest.mark.parametrize(
    ("model", "messages", "tools"),
    [
        ("gpt-4", 129, 105),
        ("gpt-4-0613", 129, 105),
        ("gpt-3.5-turbo", 129, 105),
        ("gpt-3.5-turbo-0613", 129, 105),
        ("gpt-4o", 124, 101),
        ("gpt-4o-mini", 124, 101),
    ],
)
def test_cookbook_figures(counter: TokenCounter, model: str, messages: int, tools: int) -> None:
    """The OpenAI cookbook's published prompt_tokens for its two examples."""
    mc = counter.for_model(model)
    assert mc.exact
    assert mc.count_messages(COOKBOOK_MESSAGES) == messages
    body = {"model": model, "messages": COOKBOOK_TOOL_MESSAGES, "tools": COOKBOOK_TOOLS}
    assert mc.count_request(body) == tools


def test_legacy_functions_cost_like_tools(counter: TokenCounter) -> None:
    """`functions` definitions are counted by the same formula as `tools`."""
    mc = counter.for_model("gpt-4o")
    functions = [t["function"] for t in COOKBOOK_TOOLS]
    body = {"messages": COOKBOOK_TOOL_MESSAGES, "functions": functions}
    assert mc.count_request(body) == 101


@pytest.mark.parametrize(
    ("model", "encoding", "own"),
    [
        ("gpt-5", "o200k_base", True),
        ("gpt-4.1-mini", "o200k_base", True),
        ("o3-mini", "o200k_base", True),
        ("openai/gpt-4o", "o200k_base", True),
        ("gpt-4-turbo", "cl100k_base", True),
        ("gpt-35-turbo", "cl100k_base", True),
        ("claude-sonnet-4-5", "o200k_base", False),
        ("llama3.1:8b", "o200k_base", False),
    ],
)
def test_encoding_per_model(model: str, encoding: str, own: bool) -> None:
    """tiktoken's model map decides; unknown models get the nearest, marked not own."""
    assert encoding_for(model) == (encoding, own)


def test_tokenizer_override_and_exactness(counter: TokenCounter) -> None:
    """A configured tokenizer is used; non-OpenAI and estimate counts are approximate."""
    assert not counter.for_model("claude-opus-4-1").exact
    cl = counter.for_model("my-llama", "cl100k_base")
    assert (cl.encoding_name, cl.exact) == ("cl100k_base", True)
    est = counter.for_model("my-llama", "estimate")
    assert (est.encoding_name, est.exact) == ("estimate", False)
    assert est.count_text("abcdef") == 2
    oss = counter.for_model("gpt-oss-20b", "o200k_harmony")
    assert not oss.exact  # harmony's chat framing is not OpenAI's published one


def test_special_token_text_is_ordinary(counter: TokenCounter) -> None:
    """'<|endoftext|>' in a message is counted as text, not refused or counted as 1."""
    mc = counter.for_model("gpt-4o")
    text = "<|endoftext|> and <|im_start|>"
    n = mc.count_messages([{"role": "user", "content": text}])
    assert n > 3 + 1 + 3 + 3
    assert mc.count_text("<|endoftext|>") > 1


def test_tool_calls_and_tool_results_count(counter: TokenCounter) -> None:
    """Tool call names and arguments, and tool results, add to the count."""
    mc = counter.for_model("gpt-4o")
    base = [{"role": "assistant", "content": None}]
    args = '{"location": "Paris, France", "unit": "celsius"}'
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": args}}
    with_call = [{"role": "assistant", "content": None, "tool_calls": [call]}]
    diff = mc.count_messages(with_call) - mc.count_messages(base)
    assert diff == chat.TOKENS_PER_TOOL_CALL + mc.count_text("get_weather") + mc.count_text(args)
    result = {"role": "tool", "tool_call_id": "c1", "content": "22 degrees and sunny"}
    assert mc.count_messages([*with_call, result]) > mc.count_messages(with_call) + 5


def test_content_parts_text_equals_string(counter: TokenCounter) -> None:
    """A text part costs what the same string content costs."""
    mc = counter.for_model("gpt-4o")
    as_str = [{"role": "user", "content": "hello there, world"}]
    as_parts = [{"role": "user", "content": [{"type": "text", "text": "hello there, world"}]}]
    assert mc.count_messages(as_str) == mc.count_messages(as_parts)


def test_response_format_schema_counts(counter: TokenCounter) -> None:
    """A json_schema response format adds its schema's tokens; json_object adds none."""
    mc = counter.for_model("gpt-4o")
    body: dict[str, Any] = {"messages": COOKBOOK_TOOL_MESSAGES}
    schema = {
        "name": "weather",
        "schema": {"type": "object", "properties": {"temp": {"type": "number"}}},
    }
    with_schema = {**body, "response_format": {"type": "json_schema", "json_schema": schema}}
    with_object = {**body, "response_format": {"type": "json_object"}}
    assert mc.count_request(with_object) == mc.count_request(body)
    assert mc.count_request(with_schema) > mc.count_request(body) + 10


# ---------------------------------------------------------------- images


def png(w: int, h: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + struct.pack(">II", w, h) + b"\x08\x02\x00"


def jpeg(w: int, h: int) -> bytes:
    app0 = b"\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof = b"\xff\xc0\x00\x11\x08" + struct.pack(">HH", h, w) + b"\x03" + b"\x00" * 9
    return b"\xff\xd8" + app0 + sof + b"\xff\xd9"


def gif(w: int, h: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", w, h) + b"\x00" * 8


def webp_vp8x(w: int, h: int) -> bytes:
    body = b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4
    body += (w - 1).to_bytes(3, "little") + (h - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


def webp_vp8l(w: int, h: int) -> bytes:
    bits = (w - 1) | ((h - 1) << 14)
    body = b"VP8L" + struct.pack("<I", 5) + b"\x2f" + bits.to_bytes(4, "little")
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data + b"\x00" * 64).decode()


@pytest.mark.parametrize("make", [png, jpeg, gif, webp_vp8x, webp_vp8l])
def test_image_size_from_headers(make: Callable[[int, int], bytes]) -> None:
    """Each format's dimensions are read from its header bytes."""
    assert image_size(make(1234, 567)) == (1234, 567)
    assert data_url_size(data_url(make(300, 2000))) == (300, 2000)


def test_image_size_unknown() -> None:
    """Remote URLs, garbage and non-base64 data URLs have no size."""
    assert data_url_size("https://example.com/cat.png") is None
    assert data_url_size("data:image/png;base64,!!!!") is None
    assert data_url_size("data:text/plain,hello") is None
    assert image_size(b"\xff\xd8\xff") is None


@pytest.mark.parametrize(
    ("cost", "size", "detail", "tokens"),
    [
        (ImageCost(85, 170), (1024, 1024), "high", 765),  # OpenAI's worked examples
        (ImageCost(85, 170), (2048, 4096), "high", 1105),
        (ImageCost(85, 170), (4096, 8192), "low", 85),
        (ImageCost(85, 170), None, "auto", 1445),
        (ImageCost(multiplier=1.62), (1024, 1024), "high", 1659),
        (ImageCost(multiplier=1.0), (1800, 2400), "high", 1452),
        (ImageCost(multiplier=1.72), None, "low", 2642),
    ],
)
def test_image_token_formulas(
    cost: ImageCost, size: tuple[int, int] | None, detail: str, tokens: int
) -> None:
    """Tile and patch formulas give the guide's figures; unknown size is the worst case."""
    assert image_tokens(cost, size, detail) == tokens


def test_image_cost_per_model() -> None:
    """Patch models and 4o-mini's larger tiles are recognised by name."""
    assert cost_for_model("gpt-4.1-mini-2025-04-14").multiplier == 1.62
    assert cost_for_model("o4-mini").multiplier == 1.72
    assert cost_for_model("gpt-4o-mini").base == 2833
    assert cost_for_model("gpt-4o") == ImageCost(85, 170)


def test_image_part_in_message(counter: TokenCounter) -> None:
    """An image part adds its tile cost to the message count."""
    mc = counter.for_model("gpt-4o")
    part = {"type": "image_url", "image_url": {"url": data_url(png(1024, 1024)), "detail": "high"}}
    text = {"type": "text", "text": "what is this?"}
    with_image = [{"role": "user", "content": [text, part]}]
    without = [{"role": "user", "content": [text]}]
    assert mc.count_messages(with_image) - mc.count_messages(without) == 765


# ---------------------------------------------------------------- cache


def test_warm_recount_only_counts_new_messages(
    counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a first count, appending a message tokenizes just that message."""
    mc = counter.for_model("gpt-4o")
    history = [{"role": "user", "content": f"message number {i} " * 20} for i in range(50)]
    cold = mc.count_request({"messages": history})
    calls: list[Mapping[str, Any]] = []
    real = chat.message_tokens

    def spy(msg: Mapping[str, Any], *a: Any) -> int:
        calls.append(msg)
        return real(msg, *a)

    monkeypatch.setattr(chat, "message_tokens", spy)
    new = {"role": "user", "content": "one more"}
    warm = mc.count_request({"messages": [*history, new]})
    assert calls == [new]
    assert warm == cold + real(new, mc.count_text, lambda p: 0)


def test_cache_is_bounded(tmp_path: Path) -> None:
    """The per-message cache never holds more than cache_size entries."""
    tc = TokenCounter(5, cache_dir=tmp_path)
    mc = tc.for_model("gpt-4o")
    mc.count_messages([{"role": "user", "content": str(i)} for i in range(20)])
    assert tc.cached_messages == 5


async def test_async_count_matches_sync(counter: TokenCounter) -> None:
    """The async wrapper gives the same count, small or large (threaded) request."""
    mc = counter.for_model("gpt-4o")
    small = {"messages": COOKBOOK_MESSAGES}
    large = {"messages": [{"role": "user", "content": "word " * 20_000}]}
    assert await mc.count_request_async(small) == 124
    assert await mc.count_request_async(large) == mc.count_request(large)


# ---------------------------------------------------------------- fast-path bound

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.sampled_from(
    ["<|endoftext|>", "   \n\n  ", "🙂🙂🙂", "日本語のテキスト", "a" * 50]
)
image_parts = st.builds(
    lambda w, h, detail, remote: {
        "type": "image_url",
        "image_url": {
            "url": "https://x/y.png" if remote else data_url(png(w, h)),
            "detail": detail,
        },
    },
    st.integers(1, 5000),
    st.integers(1, 5000),
    st.sampled_from(["low", "high", "auto"]),
    st.booleans(),
)
parts = st.lists(st.one_of(st.builds(lambda t: {"type": "text", "text": t}, texts), image_parts))
tool_calls = st.lists(
    st.builds(
        lambda n, a: {"id": "x", "type": "function", "function": {"name": n, "arguments": a}},
        texts,
        texts,
    ),
    max_size=3,
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
        optional={
            "content": st.one_of(st.none(), texts, parts),
            "name": texts,
            "tool_calls": tool_calls,
        },
    ),
    max_size=8,
)
tools = tool_definitions(
    texts,
    st.dictionaries(
        texts,
        st.fixed_dictionaries(
            {"type": st.sampled_from(["string", "integer"]), "description": texts},
            optional={"enum": st.lists(texts, max_size=3)},
        ),
        max_size=3,
    ),
    max_size=2,
)


@settings(max_examples=150, deadline=None)
@given(
    model=st.sampled_from(["gpt-4o", "gpt-4", "gpt-4.1-mini", "claude-sonnet-4-5"]),
    msgs=messages,
    defs=tools,
)
@example(model="gpt-4o", msgs=[{"role": "user", "content": "<|endoftext|>"}], defs=[])
@example(
    model="gpt-4",
    msgs=[],
    defs=[
        {
            "type": "function",
            "function": {
                "name": "",
                "description": "",
                "parameters": {"properties": {"": {"type": "string", "enum": []}}},
            },
        }
    ],
)
def test_upper_bound_never_below_count(
    counter: TokenCounter, model: str, msgs: list[dict[str, Any]], defs: list[dict[str, Any]]
) -> None:
    """The byte bound is >= the real count, so 'bound <= budget' proves the request fits."""
    mc = counter.for_model(model)
    body: dict[str, Any] = {"messages": msgs}
    if defs:
        body["tools"] = defs
    assert mc.upper_bound(body) >= mc.count_request(body)
