"""``python -m bench slow_bot`` at a tiny size: every front served its turns, every figure is there.

Timings are never asserted (the machine is shared): only that the run worked end to end through
``python -m bench``, that each ratio is taken against bot direct of its own repeat, and
that each figure stands beside the issue's target.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.figures import spread
from bench.slow_bot import (
    BOT_DIRECT,
    FRONTS,
    MEMORY_TARGET_KIB,
    PASSTHROUGH,
    RATIO_TARGET,
    TARGET_CONCURRENCY,
)
from tests.support.bench import BENCH_REDIS_URL, run_module


def test_a_tiny_run_compares_every_front_with_bot_direct_repeat_by_repeat(tmp_path: Path) -> None:
    out = tmp_path / "slow_bot.json"
    args = ("--latency", "0.2", "--where", "8", "--duration", "1", "--warmup", "0.5", "--repeats", "2")
    stdout = run_module("bench", "slow_bot", *args, "--redis-url", BENCH_REDIS_URL, "--out", str(out))
    result = json.loads(out.read_text())
    [row] = result["rounds"]
    assert row["concurrency"] == 8
    assert tuple(row["fronts"]) == FRONTS
    assert len(row["repeats"]) == 2
    for repeat in row["repeats"]:
        direct = repeat[BOT_DIRECT]["turns_per_s"]
        for name, front in repeat.items():
            assert front["errors"] == 0, (name, front["error_samples"])
            # A turn takes at least the bot's 0.2 s, through the gateway or not.
            assert front["p50_ms"] >= 200, name
            assert front["ratio"] == pytest.approx(front["turns_per_s"] / direct), name
        for name in FRONTS[1:]:
            assert repeat[name]["rss_kib_per_turn_in_flight"] is not None, name
            assert repeat[name]["front_cpu_ms_per_turn"] > 0, name
        # The bot's own CPU is read beside every front's; Redis's only where the run started it.
        assert repeat[PASSTHROUGH]["cpu_s"]["bot"] > 0
        assert repeat[BOT_DIRECT]["front_cpu_ms_per_turn"] is None
    for name, front in row["fronts"].items():
        assert front["ratio"]["min"] <= front["ratio"]["median"] <= front["ratio"]["max"], name
    # Memory is judged at every concurrency, the ratio only at the 2,000.
    assert TARGET_CONCURRENCY != 8
    assert [t["target"] for t in result["targets"]] == [f"<= {MEMORY_TARGET_KIB:g}"] * 2
    assert f"target >= {RATIO_TARGET}" not in stdout
    for t in result["targets"]:
        assert f"{t['name']}: " in stdout
        assert f"(target {t['target']}: {t['verdict']})" in stdout


def test_a_figure_is_the_median_and_spread_of_its_repeats_and_absent_where_it_does_not_apply() -> None:
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0}
    assert spread([None, None]) is None


def test_a_cluster_front_runs_the_gateway_on_each_cluster_the_run_starts_and_reads_its_nodes_cpu(
    tmp_path: Path,
) -> None:
    """Issue 20 item 6: one primary against three, side by side; each node's CPU is the front's Redis CPU.

    A cluster of N primaries with a replica each is 2N nodes; the gateway reaches it with the
    defaults (``cache.wait_replicas`` 1), so a turn served at all was acknowledged by a replica.
    """
    out = tmp_path / "slow_bot.json"
    args = ("--latency", "0", "--where", "4", "--duration", "1", "--warmup", "0.5", "--repeats", "1")
    fronts = ("--stores", "", "--no-passthrough", "--cluster", "1,3")
    stdout = run_module("bench", "slow_bot", *args, *fronts, "--out", str(out))
    result = json.loads(out.read_text())
    clusters = result["settings"]["clusters"]
    assert [url.count(",") + 1 for url in clusters.values()] == [1, 3]
    assert all(url.startswith("redis+cluster://127.0.0.1:") for url in clusters.values())
    [repeat] = result["rounds"][0]["repeats"]
    assert tuple(repeat) == (BOT_DIRECT, "gateway cluster 1", "gateway cluster 3")
    for name in ("gateway cluster 1", "gateway cluster 3"):
        front = repeat[name]
        assert front["errors"] == 0, (name, front["error_samples"])
        assert front["turns_per_s"] > 0, name
        assert front["redis_cpu_ms_per_turn"] > 0, name
        assert front["cpu_s"]["redis"] > 0, name
        assert front["front_cores"] > 0, name
    assert repeat[BOT_DIRECT]["redis_cores"] is None
    assert "gateway cluster 3" in stdout
