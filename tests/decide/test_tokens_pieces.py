"""Long texts counted window by window: exact for ordinary text, never below for runs.

The cuts are proved against tiktoken itself: for every place ``exact_cut`` accepts, in
texts drawn from the characters that steer both pre-tokenizers (cases, marks, digits of
every kind, apostrophes, each kind of space), the two halves count to the whole.
"""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.decide.tokens import EncodingLoader, TokenCounter
from proxy.decide.tokens.pieces import WINDOW, count_in_windows, exact_cut

ENCODINGS = ("o200k_base", "cl100k_base")
_COUNTER = TokenCounter(0)
_LOADER = EncodingLoader()


def exact(encoding: str) -> Callable[[str], int]:
    """tiktoken's own count of the whole text, in one call."""
    enc = _LOADER.get(encoding).encoding
    assert enc is not None

    def count(text: str) -> int:
        return len(enc.encode_ordinary(text))

    return count


STEERING = (
    "aAzZéÉßǅʰ中文ひカ한",  # letters: lower, upper, title case, modifier, other
    "\u0301\u093f\u0e31",  # marks (o200k's words take them in, cl100k's do not)
    "019٣½Ⅻ",  # digits: ASCII, Arabic-Indic, fractions, Roman numerals
    " \n\r\t\xa0\u3000\x85\x1c\x0b",  # spaces, including those only Python calls spaces
    "'’\"!.,/_-$€😀，。、",  # punctuation, symbols, the apostrophe of "'s"
)
fragments = st.sampled_from(
    ["'s", "'LL", "'re", " the", "\n\n", "  ", "123456", "http://x.y/z", " \n ", "!!\n", "a/b"]
)
# Each character from a class picked evenly, so that every kind of transition is common.
steering_char = st.one_of(*(st.sampled_from(chars) for chars in STEERING))
steering_text = st.lists(steering_char | fragments, max_size=40).map("".join)


@settings(max_examples=400, deadline=None)
@given(encoding=st.sampled_from(ENCODINGS), text=steering_text)
@example(encoding="o200k_base", text="a  1")  # spaces before a digit: not a cut
@example(encoding="cl100k_base", text="x\n \nb")
@example(encoding="o200k_base", text="ab's!cd")
@example(encoding="cl100k_base", text="xa\u0301,y")  # a mark is no letter to cl100k
@example(encoding="o200k_base", text="½123")  # any digit continues a number, not only 0-9
def test_every_accepted_cut_is_exact(encoding: str, text: str) -> None:
    """Where ``exact_cut`` says both tokenizers break, the halves count to the whole."""
    count = exact(encoding)
    whole = count(text)
    for c in range(1, len(text)):
        if exact_cut(text, c):
            assert count(text[:c]) + count(text[c:]) == whole, (text[:c], text[c:])


@settings(max_examples=200, deadline=None)
@given(encoding=st.sampled_from(ENCODINGS), text=steering_text, window=st.integers(2, 40))
def test_windowed_count_is_exact_or_above(encoding: str, text: str, window: int) -> None:
    """With windows small enough to cut everywhere: exact when every window found a cut,
    else above (never below) the true count."""
    count = exact(encoding)
    tokens, was_exact = count_in_windows(text, count, window)
    if was_exact:
        assert tokens == count(text)
    else:
        assert tokens >= count(text)


def _runs() -> st.SearchStrategy[str]:
    """Pathological runs (one character, a short period, random letters, spaces) of a few
    windows, alone or between ordinary text."""
    one = st.sampled_from("Aa中 \n!.é/").map(lambda ch: ch * 3 * WINDOW)
    period = st.sampled_from(["ab", "!?", "\n/", " \n", "a\u0301"]).map(lambda p: p * 2 * WINDOW)
    letters = st.randoms(use_true_random=False).map(
        lambda r: "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(3 * WINDOW))
    )
    ordinary = st.sampled_from(["", "Hello there, world. ", "x = f(1, 2)\n", "日本語のテキスト。"])
    return st.tuples(ordinary, one | period | letters, ordinary).map(
        lambda t: t[0] * 200 + t[1] + t[2] * 200
    )


@settings(max_examples=30, deadline=None)
@given(encoding=st.sampled_from(ENCODINGS), text=_runs())
def test_pathological_runs_are_bounded_from_above(encoding: str, text: str) -> None:
    """A run with no break is charged an upper bound of what tiktoken counts for it."""
    count = exact(encoding)
    tokens, was_exact = count_in_windows(text, count)
    assert tokens >= count(text)
    assert not was_exact


def _ordinary_texts() -> dict[str, str]:
    rnd = random.Random(7)
    words = ["the", "quick", "brown", "fox,", "jumps", "over", "lazy", "dog.", "\n\n", "It's"]
    prose = " ".join(rnd.choice(words) for _ in range(20_000))
    return {
        "prose": prose,
        "code": open(__file__, encoding="utf-8").read() * 8,
        "compact-json": json.dumps(
            [{"id": i, "name": f"item{i}", "tags": ["a", "b"]} for i in range(3000)],
            separators=(",", ":"),
        ),
        "base64": base64.b64encode(rnd.randbytes(60_000)).decode(),
        "chinese": "".join(
            rnd.choice("的一是不了人我在有他这中大来上国个到说们为子和你，。")
            for _ in range(40_000)
        ),
        "lines-of-letters": "\n".join("ACGT" * 15 for _ in range(2000)),  # FASTA-like
        "hex": rnd.randbytes(40_000).hex(),
    }


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", list(_ordinary_texts()))
def test_ordinary_long_text_gets_the_exact_count(encoding: str, name: str) -> None:
    """Prose, code, compact JSON, base64, CJK, FASTA lines and hex: exact, in windows."""
    text = _ordinary_texts()[name]
    assert len(text) > 4 * WINDOW
    count = exact(encoding)
    assert count_in_windows(text, count) == (count(text), True)
    assert _COUNTER.for_model("x", encoding).count_text(text) == count(text)


def test_long_runs_count_fast_and_never_panic() -> None:
    """4 MB of one letter was seconds of tiktoken and 1 MB of spaces a Rust panic; both are
    now charged their bytes in a small fraction of that."""
    counter = _COUNTER.for_model("gpt-4o")
    for text in ("A" * 4_000_000, " " * 1_000_000, "\n/" * 500_000):
        t0 = time.perf_counter()
        assert counter.count_text(text) == len(text)
        assert time.perf_counter() - t0 < 1.0
