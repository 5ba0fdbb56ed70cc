"""``python -m bench soak`` (issue 12, deliverable 5): a tiny soak runs end to end; its bounds are applied.

The real soak runs for minutes (docs/reliability.md); here one second of load on Redis proves the
command starts the gateway CLI, reads it from ``/proc`` before and after, and reports within bounds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from bench.soak import MEMORY_STORE_ALLOWANCE, MIB, Bounds, Reading, bounds_for, verdict
from tests.support.bench import BENCH_REDIS_URL, REPO_ROOT, run_module


def test_a_short_soak_reports_memory_and_descriptors_within_its_bounds(tmp_path: Path) -> None:
    out = tmp_path / "soak.json"
    printed = run_module(
        "bench",
        "soak",
        "--duration",
        "1.5",
        "--warmup",
        "1",
        "--concurrency",
        "8",
        "--redis-url",
        BENCH_REDIS_URL,
        "--out",
        str(out),
        timeout=120,
    )
    result = json.loads(out.read_text())
    assert result["schema"] == "pact-gateway-soak/1"
    assert result["turns"] > 0
    assert result["errors"] == 0
    for reading in ("before", "peak", "after"):
        assert result[reading]["rss_bytes"] > 1 * MIB
        assert result[reading]["open_fds"] > 3
    assert result["peak"]["open_fds"] >= result["before"]["open_fds"]
    assert result["bounds"] == {"rss_bytes": 16 * MIB, "open_fds": 8}
    assert result["verdict"]["ok"]
    assert "resident memory  before" in printed
    assert "open descriptors before" in printed


def _args(cache: str) -> argparse.Namespace:
    return argparse.Namespace(cache=cache, rss_bound_mib=16.0, fd_bound=8)


def test_growth_past_a_bound_or_an_error_fails_the_verdict() -> None:
    bounds = Bounds(rss_bytes=16 * MIB, open_fds=8)
    before = Reading(rss_bytes=60 * MIB, open_fds=40)
    assert verdict(before, Reading(76 * MIB, 48), bounds, errors=0)["ok"]
    assert not verdict(before, Reading(76 * MIB + 1, 40), bounds, errors=0)["rss_ok"]
    assert not verdict(before, Reading(60 * MIB, 49), bounds, errors=0)["fds_ok"]
    assert not verdict(before, Reading(60 * MIB, 40), bounds, errors=1)["ok"]


def test_the_memory_store_allows_for_the_conversations_it_keeps() -> None:
    assert bounds_for(_args("redis"), 1000) == Bounds(16 * MIB, 8)
    assert bounds_for(_args("memory"), 1000) == Bounds(16 * MIB + 1000 * MEMORY_STORE_ALLOWANCE, 8)


def test_a_bad_duration_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "soak", "--duration", "0"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--duration and --warmup must be positive" in done.stderr
