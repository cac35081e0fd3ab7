"""Counting a long text window by window, so its cost stays linear whatever its shape.

tiktoken's cost per character grows with the length of a pre-token (a run of letters,
of punctuation or of spaces with no break in it), and a long enough run of spaces makes
it panic. A text longer than :data:`WINDOW` is therefore counted in windows, each cut
where the pre-tokenizers of both exact encodings (cl100k_base, o200k_base) break anyway,
so that the sum is the exact count: before a space that follows a non-space, before a
punctuation mark that follows a letter, before a digit that follows neither a digit nor
a space, and after a newline that a letter follows. A window with no such place is not
prose, code or data but a pathological run: it is charged its UTF-8 length, which a
count never exceeds (every token covers at least one byte), and is not tokenized at all.
"""

from __future__ import annotations

from collections.abc import Callable

WINDOW = 8192
"""Characters handed to the tokenizer at once (at most)."""

_TRIES = 16
"""Candidates tried for each probe at each window; a run of failing ones is given up on."""
_DIGITS = "0123456789"
_PUNCT = '"!#$%&()*+,-./:;<=>?@[\\]^_`{|}~，。、：；！？（）「」『』【】《》'
"""Marks that end a run of letters (not the apostrophe: "'s" continues a word)."""
_PROBES = (*((ch, 0) for ch in " " + _PUNCT + _DIGITS), ("\n", 1))
"""(character, offset of the cut from it): where to look for :func:`exact_cut` places."""
_SPACE = (_PROBES[0],)
_SPAN = 16
"""Windows searched at once for the end of a stretch with no cut."""


def exact_cut(text: str, c: int) -> bool:
    """Must both pre-tokenizers break between ``text[c - 1]`` and ``text[c]``?"""
    before, at = text[c - 1], text[c]
    if at == " ":
        return not before.isspace()
    if at in _DIGITS:
        return not (before.isspace() or before.isnumeric())
    if at in _PUNCT:
        return before.isalpha()
    return before == "\n" and at.isalpha()


def utf8_len(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def count_in_windows(
    text: str, count: Callable[[str], int], window: int = WINDOW
) -> tuple[int, bool]:
    """(tokens, exact): the exact count of ``text`` when every window found a cut, else
    an upper bound with the cutless stretches charged by their UTF-8 length."""
    n, total, start, exact = len(text), 0, 0, True
    while n - start > window:
        hi, mid = start + window, start + window // 2  # a window ends at a cut c <= hi
        c = _cut(text, mid, hi, last=True, probes=_SPACE)
        if c < 0:
            c = _cut(text, mid, hi, last=True, nearest=False)
        if c < 0:
            c = _cut(text, start + 1, mid, last=True)
        if c < 0:  # a stretch with no cut: charge its bytes, up to the next cut
            exact, c = False, _next_cut(text, hi + 1, window)
            total += utf8_len(text[start:c])
        else:
            total += count(text[start:c])
        start = c
    return (total + count(text[start:]) if start < n else total), exact


def _next_cut(text: str, lo: int, window: int) -> int:
    """The first exact cut at or after ``lo``, else the end; looked for in spans of many
    windows (``find`` is fast; what costs is a probe's run of failing candidates)."""
    n, span = len(text), window * _SPAN
    while lo < n:
        c = _cut(text, lo, min(lo + span, n - 1), last=False)
        if c >= 0:
            return c
        lo += span + 1
    return n


def _cut(
    text: str,
    lo: int,
    hi: int,
    *,
    last: bool,
    probes: tuple[tuple[str, int], ...] = _PROBES,
    nearest: bool = True,
) -> int:
    """An exact cut ``c`` with ``lo <= c <= hi``, or -1 if none is found: the last (or
    first) of all, or (not ``nearest``) the last (first) of the first probe that finds one."""
    best = -1
    for ch, shift in probes:
        a, b = lo - shift, hi + 1 - shift  # the character at p in [a, b): the cut p + shift
        for _ in range(_TRIES):
            if best >= 0:
                a, b = (max(a, best + 1 - shift), b) if last else (a, min(b, best - shift))
            p = text.rfind(ch, a, b) if last else text.find(ch, a, b)
            if p < 0:
                break
            if exact_cut(text, p + shift):
                best = p + shift
                break
            a, b = (a, p) if last else (p + 1, b)
        if best >= 0 and not nearest:
            return best
    return best
