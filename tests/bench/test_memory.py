"""``python -m bench memory``: bytes per idle conversation, and ``--at-bound`` (issue 29 item 3): a
tiny run fills a served gateway to its bound and times its collections under load; a round with any
answer not 2xx is void, no target drawn from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.memory import _render
from tests.support.bench import run_module


def test_a_tiny_run_fills_the_served_store_to_its_bound_and_reports_its_collections(tmp_path: Path) -> None:
    out = tmp_path / "gc.json"
    argv = ("--at-bound", "--scales", "0.1", "--duration", "1", "--concurrency", "4", "--out", str(out))
    printed = run_module("bench", "memory", *argv, timeout=180)
    (one,) = json.loads(out.read_text())["rounds"]
    assert one["bound"] == 30_000
    # Idle conversations of distinct people, a record and an index each, the bound nearly full.
    assert one["fill"]["conversations"] == 14_500
    assert 29_000 <= one["fill"]["entries"] <= 30_000
    assert one["fill"]["tracked_per_conversation"] <= 1.0  # issue 29's target, a count
    assert one["load"]["errors"] == 0
    assert one["load"]["turns_measured"] > 0
    assert all(generation in (0, 1, 2) and wall >= 0 for generation, wall, _ in one["pauses"])
    assert "cache.max_entries 30,000 (set for this run: 0.1x the default)" in printed
    assert "longest GC pause, ms" in printed
    assert "tracked objects per stored conversation" in printed


def test_idle_conversations_are_read_per_conversation_and_per_entry_less_their_replies(
    tmp_path: Path,
) -> None:
    out = tmp_path / "memory.json"
    printed = run_module("bench", "memory", "--conversations", "2000", "--out", str(out))
    figures = json.loads(out.read_text())
    assert (figures["conversations"], figures["turns_per_conversation"]) == (2000, 1)
    # A record, a first-message record and a person's index each: what cache.max_entries counts.
    assert figures["entries"] == 3 * 2000
    assert "bytes per idle conversation, excluding replies (RSS): " in printed
    assert "(target <= 1024: " in printed
    assert figures["reply_bytes_per_conversation"] > 0
    assert figures["rss_bytes_per_conversation_excluding_replies"] == pytest.approx(
        max(figures["rss_bytes_per_conversation"] - figures["reply_bytes_per_conversation"], 0.0)
    )


def test_a_round_with_a_non_2xx_answer_is_void_and_no_target_is_drawn_from_it() -> None:
    fill = {"conversations": 100, "entries": 200, "fill_s": 1.0, "tracked_per_conversation": 0.0}
    load = {"errors": 3, "error_samples": ["HTTP 429: store_full"], "turns_total": 50}
    lines = _render({"bound": 300, "scale": 0.001, "fill": fill, "load": load, "entries": 300, "pauses": []})
    assert "VOID: 3 answers were not 2xx (HTTP 429: store_full): no figure from it" in lines[-1]
    assert not any("PASS" in line or "FAIL" in line for line in lines)
