"""bench/llama_kv.py reads llama-cpp-python's log as that version prints it."""

from __future__ import annotations

from bench.llama_kv import Turn, kv_of, summary

LINE = "Llama.generate: 812 prefix-match hit, remaining 97 prompt tokens to eval\n"


def test_a_prefix_hit_gives_reused_and_evaluated() -> None:
    assert kv_of("llama_perf_context_print: ...\n" + LINE, 909) == (812, 97)


def test_no_hit_line_is_a_full_eval_and_a_cached_prompt_none() -> None:
    assert kv_of("llama_perf_context_print: prompt eval time = 1 ms / 900 tokens", 900) == (0, 900)
    assert kv_of("Llama.generate: full prompt already cached, skipping reset", 50) == (50, 0)


def test_the_share_counts_compressed_turns_that_kept_half_their_prompt() -> None:
    def turn(n: int, decision: str, reused: int) -> Turn:
        return Turn(n, decision, 1000, reused, 1000 - reused, 0, False, True)

    turns = [turn(1, "passthrough", 900), turn(2, "compressed", 100), turn(3, "compressed", 800)]
    s = summary(turns)
    assert s["compressed"] == 2
    assert s["kv_reused_share"] == 0.5
    assert s["kv_reused_share_after_first"] == 1.0
    assert [m["turn"] for m in s["misses"]] == [2]
