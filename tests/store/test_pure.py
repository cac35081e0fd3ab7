"""Pure parts of the store: redaction, forwarded-ops encoding, content hashing."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from proxy.store import forwarded as fwd
from proxy.store.canonical import canonical, chain
from proxy.store.redact import MASK, redact_json, redact_text
from proxy.store.write import squeeze

SECRETS = [
    "sk-" + "A1b2C3d4" * 3,
    "sk-proj-" + "Zz9_-x" * 5,
    "sk-ant-api03-" + "k" * 40,
    "AKIA" + "ABCDEFGHIJKLMNOP",
    "ghp_" + "a" * 36,
    "github_pat_" + "11AAAA" * 6,
]
secret = st.sampled_from(SECRETS)
filler = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=40).map(
    lambda s: s + " "
)


@given(filler, secret, filler)
@example(" ", "sk-proj-" + "Zz9_-x" * 5, " ")
def test_secret_never_survives(before: str, key: str, after: str) -> None:
    """A known-format secret anywhere in text is masked."""
    out = redact_text(before + key + " " + after)
    assert key not in out and MASK in out


@given(st.text(max_size=200))
def test_redaction_is_idempotent(text: str) -> None:
    """Redacting twice equals redacting once."""
    once = redact_text(text)
    assert redact_text(once) == once


def test_bearer_tokens_and_plain_words() -> None:
    """Bearer tokens are masked; look-alike words are not."""
    assert redact_text("Authorization: Bearer abc.def-123_xyz") == f"Authorization: Bearer {MASK}"
    assert redact_text("a task-orientedapproachforeverything") == (
        "a task-orientedapproachforeverything"
    )


def test_redact_json_walks_nested_values() -> None:
    """Strings inside lists and dicts (tool-call arguments) are redacted; keys kept."""
    msg: dict[str, Any] = {
        "role": "assistant",
        "tool_calls": [{"function": {"arguments": SECRETS[0]}}],
    }
    out = redact_json(msg)
    assert out["tool_calls"][0]["function"]["arguments"] == "sk-" + MASK
    assert msg["tool_calls"][0]["function"]["arguments"] == SECRETS[0]  # input untouched


keys = st.lists(st.integers(0, 6), max_size=25)


@given(keys, keys)
@example([1, 2, 3], [1, 9, 3])
def test_ops_rebuild_the_forwarded_list(original: list[int], forwarded: list[int]) -> None:
    """decode(encode(o, f), o) == f for any two lists."""
    ops = fwd.encode(original, forwarded)
    assert fwd.decode(ops, original, lambda i: forwarded[i]) == forwarded


@given(keys, keys)
def test_diff_accounts_for_every_original(original: list[int], forwarded: list[int]) -> None:
    """Each original index is kept or dropped exactly once; inserts match the ops."""
    ops = fwd.encode(original, forwarded)
    entries = fwd.diff(ops, len(original))
    indexes = sorted(e["index"] for e in entries if e["op"] != "insert")
    assert indexes == list(range(len(original)))
    assert sum(e["op"] == "insert" for e in entries) == sum(isinstance(o, int) for o in ops)


def test_canonical_ignores_key_order_and_chain_addresses_prefixes() -> None:
    """Key order does not change a message's hash; each prefix has its own chain hash."""
    assert canonical({"a": 1, "b": 2}) == canonical({"b": 2, "a": 1})
    c = chain([b"x" * 32, b"y" * 32])
    assert chain([b"x" * 32]) == c[:1] and c[0] != c[1]


@given(
    st.lists(st.text(alphabet="ab \n\t\u00a0\u2003", max_size=30), max_size=40).map("".join),
    st.integers(1, 40),
)
@example("a" * 400 + " b", 80)
@example("ab " * 200, 80)
@example(" " * 500 + "a", 3)
def test_squeeze_reads_a_prefix_but_equals_squeezing_everything(text: str, width: int) -> None:
    """A title squeezed from the head of a long text is the whole text squeezed, cut."""
    assert squeeze(text, width) == " ".join(text.split())[:width]
