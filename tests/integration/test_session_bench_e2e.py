"""A tiny real run of the long-session benchmark: one 50-message session, the full and recontext arms."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("langchain")

from recontext_integrations.langchain.session_bench import main  # noqa: E402

pytestmark = pytest.mark.model


def test_one_session_through_the_command(engine, tmp_path, capsys) -> None:
    out = tmp_path / "sessions"
    argv = [
        "--out", str(out), "--sessions", "1", "--seed", "0", "--arms", "full,recontext",
        "--min-messages", "50", "--max-messages", "50",
        "--min-session-tokens", "1200", "--max-session-tokens", "1200",
        "--max-tokens", "16", "--max-model-calls", "1", "--header", "Said before:",
    ]  # fmt: skip
    assert main(argv, engine=engine) == 0
    assert {p.name for p in out.iterdir()} >= {"results.json", "report.md", "accuracy.png"}
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["arms"] == ["full", "recontext"]
    assert results["settings"]["header"] == "Said before:"
    (session,) = results["sessions"]
    assert session["messages"] == 50 and session["kind"] == "spec"
    rows = {(r["arm"], r["step"]): r for r in results["rows"]}
    assert set(rows) == {("full", "answer"), ("recontext", "answer"), ("recontext", "warm")}
    full, ours, warm = rows["full", "answer"], rows["recontext", "answer"], rows["recontext", "warm"]
    # the middleware found the message that states the fact (message 4 of this seeded session)
    assert ours["replay_status"] == "replayed" and ours["fact_replayed"] is True
    assert session["fact_message"] in ours["replayed_messages"]
    assert full["fact_replayed"] is None and full["replay_s"] == 0
    assert full["error"] is None and ours["error"] is None and warm["error"] is None
    assert full["answer_in_prompt"] and ours["answer_in_prompt"]
    # the replayed block is sent on top of the same history
    assert 0 < full["tokens_sent"] < ours["tokens_sent"]
    assert ours["replay_s"] > 0 and ours["replay_cached_tokens"] == 0  # cold
    assert warm["replay_cached_tokens"] > 0  # the next step reuses the history's KV
    report = (out / "report.md").read_text()
    assert "| recontext | 1 |" in report and "## Targets" in report
    assert "| recontext | 1 |" in capsys.readouterr().out
