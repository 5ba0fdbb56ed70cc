"""``bench.rate_scan``: what the pipe observer records is the pipe's real queue, and the scan runs end to end.

The observer is checked against a real Redis (database 15) with a queue whose depths are
known in advance; the scan itself runs once, at one rate for half a second, against the
bench's database 14, and only its result's shape is asserted, never a timing.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

from bench.rate_scan import PipeObserver, percentiles
from gateway.store import redis_pipe
from gateway.store.redis_pipe import RedisAddress, RedisPipe
from tests.support.bench import BENCH_REDIS_URL, run_module


def test_percentiles_are_nearest_rank() -> None:
    assert percentiles(list(range(1, 101))) == {"p50": 50.0, "p90": 90.0, "p99": 99.0}
    assert percentiles([7]) == {"p50": 7.0, "p90": 7.0, "p99": 7.0}
    assert percentiles([]) == {"p50": 0.0, "p90": 0.0, "p99": 0.0}


async def test_the_observer_sees_each_command_and_the_queue_ahead_of_it(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Restored after the test: the observer patches the pipe for the life of a process.
    monkeypatch.setattr(redis_pipe._Protocol, "send", redis_pipe._Protocol.send)
    observer = PipeObserver()
    observer.install()
    pipe = RedisPipe(RedisAddress.from_url(redis_url))
    try:
        # Five callers wait on one connection attempt and then send in the same pass of the
        # loop, before any answer can be read: each finds the earlier ones still waiting.
        replies = await asyncio.gather(*(pipe.execute("PING") for _ in range(5)))
    finally:
        await pipe.close()
    assert replies == [b"PONG"] * 5
    # SELECT 15 (the handshake, answered before the PINGs go out), then the PINGs.
    assert observer.depths == [0, 0, 1, 2, 3, 4]
    assert len(observer.waits) == 6
    assert all(0 < wait < 2.0 for wait in observer.waits)
    summary = observer.summary()
    assert summary["commands"] == 6
    assert summary["queue_depth"] == {"p50": 1.0, "p90": 4.0, "p99": 4.0}
    assert 0 < summary["answer_ms"]["p50"] <= summary["answer_ms"]["p99"]


def test_the_scan_runs_every_front_and_reports_the_pipe(tmp_path: Path) -> None:
    out = tmp_path / "scan.json"
    stdout = run_module(
        "bench.rate_scan",
        *("--fractions", "0.25", "--duration", "0.5", "--repeats", "1"),
        *("--out", str(out), "--redis-url", BENCH_REDIS_URL),
    )
    result = json.loads(out.read_text())
    assert result["peak"]["throughput_rps"] > 0
    assert result["peak"]["pipe"]["commands"] > 0
    (rate,) = result["rates"]
    assert rate["fraction"] == 0.25
    assert rate["errors"] == 0
    assert {r["front"] for r in result["rounds"]} == {"passthrough", "gateway-memory", "gateway-redis"}
    redis_round = next(r for r in result["rounds"] if r["front"] == "gateway-redis")
    # Two script calls a turn, plus the warm-up's and the handshake's commands.
    assert redis_round["pipe"]["commands"] > 0
    for part in ("queue_depth", "answer_ms"):
        assert set(rate["pipe"][part]) == {"p50", "p90", "p99"}
        assert all(math.isfinite(v) and v >= 0 for v in rate["pipe"][part].values())
    assert all(math.isfinite(v) for v in rate["gateway-redis_added_ms"].values())
    assert "gateway-redis peak" in stdout
