"""``python -m bench capacity slow_bot`` at a tiny size: every front served its turns, every figure is there.

Timings are never asserted (the machine is shared): only that the run worked end to end through
``python -m bench capacity`` and that each figure stands beside the issue's target.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.slow_bot import FRONTS, MEMORY_TARGET_KIB, RATIO_TARGET, TARGET_CONCURRENCY
from tests.support.bench import BENCH_REDIS_URL, run_module


def test_a_tiny_run_compares_bot_direct_with_both_stores_and_prints_the_targets(tmp_path: Path) -> None:
    out = tmp_path / "slow_bot.json"
    args = ("--latency", "0.2", "--where", "8", "--duration", "1", "--warmup", "0.5")
    stdout = run_module(
        "bench", "capacity", "slow_bot", *args, "--redis-url", BENCH_REDIS_URL, "--out", str(out)
    )
    result = json.loads(out.read_text())
    [row] = result["rounds"]
    assert row["concurrency"] == 8
    assert tuple(row["fronts"]) == FRONTS
    for name, front in row["fronts"].items():
        assert front["errors"] == 0, (name, front["error_samples"])
        assert front["turns_per_s"] > 0, name
        # A turn takes at least the bot's 0.2 s, through the gateway or not.
        assert front["p50_ms"] >= 200, name
        assert front["ratio"] > 0, name
    for name in FRONTS[1:]:
        assert row["fronts"][name]["rss_kib_per_turn_in_flight"] is not None, name
        assert row["fronts"][name]["gateway_cpu_ms_per_turn"] > 0, name
    # Memory is judged at every concurrency, the ratio only at the 2,000.
    assert TARGET_CONCURRENCY != 8
    assert [t["target"] for t in result["targets"]] == [f"<= {MEMORY_TARGET_KIB:g}"] * 2
    assert f"target >= {RATIO_TARGET}" not in stdout
    for t in result["targets"]:
        assert f"{t['name']}: " in stdout
        assert f"(target {t['target']})" in stdout
