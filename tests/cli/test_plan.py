"""`handoff plan`: a dry run that shows the decision and the request that would be sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.cli.main import main


def _conversation(turns: int, lines: int = 60) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You read code."}]
    for i in range(turns):
        cid = f"call_{i}"
        msgs += [
            {"role": "user", "content": f"read file {i}"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": "read", "arguments": "{}"}}
                ],
            },
            {
                "role": "tool",
                "tool_call_id": cid,
                "content": "\n".join(f"line {j} of file {i}" for j in range(lines)),
            },
            {"role": "assistant", "content": f"file {i} read"},
        ]
    msgs.append({"role": "user", "content": "what now?"})
    return msgs


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(
        '[models."tiny-4k"]\ncontext_window = 4096\nmax_output_tokens = 512\ntokenizer = "o200k_base"\n'
    )
    return path


def test_plan_compresses_and_shows_the_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An over-long conversation for a 4k model: compressed, with the steps and the request."""
    src = tmp_path / "msgs.json"
    msgs = _conversation(20)
    src.write_text(json.dumps(msgs))
    assert (
        main(["--config", str(_config(tmp_path)), "plan", str(src), "--model", "tiny-4k", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["decision"] == "compressed"
    assert out["tokens"] > out["budget"] >= out["forwarded_tokens"]
    assert out["policies"] and out["steps"][0]["policy"] in out["policies"]
    sent = out["request"]["messages"]
    assert sent[0] == msgs[0] and sent[-1] == msgs[-1]
    assert out["request"]["model"] == "tiny-4k"


def test_plan_passthrough_for_a_big_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same file for gpt-4.1 (1M window) migrates unchanged; the text output says so."""
    src = tmp_path / "req.json"
    src.write_text(json.dumps({"model": "gpt-4.1", "messages": _conversation(20)}))
    assert main(["plan", str(src)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("passthrough for gpt-4.1")
    assert "1047576" in out or "1,047,576" in out or "window" in out


def test_plan_bad_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file or one without a model fails with exit 2 and says why."""
    assert main(["plan", str(tmp_path / "none.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('[{"role": "user", "content": "x"}]')
    assert main(["plan", str(bad)]) == 2
    assert "no model" in capsys.readouterr().err


def test_plan_pinned_too_large_is_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """If the system prompt alone cannot fit, the plan says rejected with the numbers.
    (An oversized newest user turn alone is middle-cut instead: the one allowed exception.)"""
    src = tmp_path / "big.json"
    system = {"role": "system", "content": "rule " * 10_000}
    src.write_text(json.dumps([system, {"role": "user", "content": "hi"}]))
    assert main(["--config", str(_config(tmp_path)), "plan", str(src), "--model", "tiny-4k"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("rejected (400)") and "cannot fit this conversation to tiny-4k" in out


def test_plan_prints_config_hints_as_text_and_no_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown model's hint names the config table literally ([models."…"], not eaten as
    markup) and cells with nothing counted show a dash, never Python's None."""
    src = tmp_path / "unknown.json"
    src.write_text(
        json.dumps({"model": "my-local-llama", "messages": [{"role": "user", "content": "hi"}]})
    )
    assert main(["plan", str(src)]) == 0
    out = capsys.readouterr().out
    assert '[models."my-local-llama"] context_window' in out.replace("\n", " ")
    assert "None" not in out and "—" in out


def test_plan_always_counts_exactly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A small request the byte bound alone would pass: the dry run still counts it, so
    ``tokens`` is a number (never None beside ``exact: true``)."""
    src = tmp_path / "small.json"
    src.write_text(json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}))
    assert main(["plan", str(src), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decision"] == "passthrough" and out["exact"] is True
    assert isinstance(out["tokens"], int) and 0 < out["tokens"] < 20
    assert out["forwarded_tokens"] == out["tokens"]
