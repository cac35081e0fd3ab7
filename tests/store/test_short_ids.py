"""Short ids: the shortest start (six characters at least) that names one session."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from proxy.store.short_ids import short_ids

hex_ids = st.lists(st.text("0123ab", min_size=8, max_size=10), min_size=1, max_size=30, unique=True)


def _names_one(every: list[str], sid: str, short: str) -> bool:
    return all(not (o.startswith(short) or o.endswith(short)) for o in every if o != sid)


@given(hex_ids)
@example(["aaaaaa01", "01aaaaaa"])  # a start of one id that is the end of another
def test_a_short_id_names_its_session_alone_and_is_the_shortest(every: list[str]) -> None:
    """No other id starts or ends with it; one character fewer (down to six) would not do,
    unless it is the whole id."""
    short = short_ids(every, every)
    for sid in every:
        s = short[sid]
        assert sid.startswith(s) and len(s) >= min(6, len(sid))
        if s != sid:
            assert _names_one(every, sid, s)
        if len(s) > 6:
            assert not _names_one(every, sid, s[:-1])


def test_real_ids_begun_together_need_more_than_six() -> None:
    """Ids begun in the same second share their time digits, so they get longer starts."""
    every = ["18a3f2c1b4d5e0123456789a", "18a3f2c1b4d5f0123456789b", "2000000000000aaaaaaaaaaa"]
    assert short_ids(every, every) == {
        every[0]: "18a3f2c1b4d5e",
        every[1]: "18a3f2c1b4d5f",
        every[2]: "200000",
    }
