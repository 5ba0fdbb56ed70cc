"""``python -m bench.rate_scan``: added latency at several open-loop rates, and the Redis pipe's part in it.

The full run measures latency at one rate, half of each gateway's peak, where the Redis
front's added p50 ranged from 0.6 to 4.5 ms across runs. One rate cannot tell apart the
three things that could cause it: a queue of the gateway's own (commands piling up in its
Redis pipe, :mod:`gateway.store.redis_pipe`), the time each of a turn's two Redis round trips
takes when it has to wake another process, and contention for the machine's cores. This
scan runs the pass-through, gateway-memory and gateway-redis at fractions of gateway-redis's
closed-loop peak, interleaved and repeated like the full run's rounds, and watches the pipe
of gateway-redis while it does: for every command, how many earlier commands were still
waiting for their answer when it was sent (the pipe's queue), and how long its answer took.

A queue of the pipe's own would show as a depth that grows with the rate; wake-up cost as
answers that take a steady fraction of a millisecond at every rate; contention as answer
times and added latency that grow only where the cores run out. docs/performance.md has
what it found on the 2-core machines here.

gateway-redis runs as one process (no ``--workers``, whose worker would be a new interpreter
that the observer is not in), started afresh for each round so that each round's pipe
figures are its own, warm-up included. ``--serve STATS_FILE -- serve …`` is how it is started.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.fronts import DEFAULT_REDIS_URL, GW_MEMORY, GW_REDIS, MODES, PASSTHROUGH, Bench, Front, progress
from bench.loadgen import percentile
from bench.procs import Child, ChildFailed, Children, free_port, serve_request, served_through
from bench.redis_probe import RedisProbe
from gateway.store import redis_pipe

__all__ = ["PipeObserver", "main", "percentiles"]

DEFAULT_FRACTIONS = (0.0625, 0.125, 0.25, 0.5)
PEAK_CONCURRENCY = 32
"""Closed-loop concurrency of the peak round the rates are fractions of (the full run's)."""
OPEN_LOOP_WORKERS = 64
"""Load-generator workers in the open-loop rounds (the full run's half-load setting)."""
QUANTILES = {"p50": 0.50, "p90": 0.90, "p99": 0.99}


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """``p50``, ``p90`` and ``p99`` of ``values`` (nearest rank, as the load generator's); zeros when none."""
    ordered = sorted(values)
    return {name: float(percentile(ordered, fraction)) for name, fraction in QUANTILES.items()}


class PipeObserver:
    """Records, for every command a Redis pipe sends, the queue ahead of it and the wait for its answer.

    It wraps the pipe's protocol (``_Protocol.send``, private to :mod:`gateway.store.redis_pipe`:
    the one place every command passes, with the queue in view) for the life of the process;
    the wrapper adds a done callback per command, microseconds against answers that take a
    fraction of a millisecond.
    """

    def __init__(self) -> None:
        self.depths: list[int] = []
        self.waits: list[float] = []

    def install(self) -> None:
        send = redis_pipe._Protocol.send
        depths, waits = self.depths, self.waits

        def observed(protocol: redis_pipe._Protocol, packed: bytes, deadline: float) -> asyncio.Future[Any]:
            depths.append(len(protocol._waiting))
            sent = time.perf_counter()
            future = send(protocol, packed, deadline)
            future.add_done_callback(lambda _: waits.append(time.perf_counter() - sent))
            return future

        setattr(redis_pipe._Protocol, "send", observed)  # noqa: B010  (mypy refuses assigning a method)

    def summary(self) -> dict[str, Any]:
        return {
            "commands": len(self.depths),
            "queue_depth": percentiles(self.depths),
            "answer_ms": {name: value * 1000 for name, value in percentiles(self.waits).items()},
        }


def _serve(stats_file: Path, argv: Sequence[str]) -> int:
    from gateway.cli import main as gateway_main

    observer = PipeObserver()
    observer.install()
    # The gateway exits normally on SIGTERM (graceful shutdown), so exit handlers run.
    atexit.register(lambda: stats_file.write_text(json.dumps(observer.summary())))
    return gateway_main(list(argv))


def _observed_gateway(bench: Bench, redis_url: str, stats_file: Path) -> tuple[Front, Child]:
    port = free_port()
    config = bench.gateway_config(port, redis_url)
    argv = served_through("bench.rate_scan", str(stats_file), bench.gateway_argv(config))
    child = bench.children.python(GW_REDIS, *argv)
    child.wait_port(port)
    return Front.a2a(GW_REDIS, port, child, uses_redis=True), child


def _redis_round(
    bench: Bench, redis_url: str, stats_file: Path, *, duration: float, concurrency: int, rate: float = 0.0
) -> dict[str, Any]:
    """One round against a fresh observed gateway-redis; the load generator's result and the pipe's."""
    stats_file.unlink(missing_ok=True)
    front, child = _observed_gateway(bench, redis_url, stats_file)
    try:
        result = bench.drive(front, duration=duration, concurrency=concurrency, rate=rate, redis_stats=False)
    finally:
        bench.children.stop(child)
    if not stats_file.exists():
        raise ChildFailed(f"gateway-redis wrote no pipe figures:\n{child.tail()}")
    result["pipe"] = json.loads(stats_file.read_text())
    return result


def scan(
    fractions: Sequence[float], duration: float, repeats: int, redis_url: str = DEFAULT_REDIS_URL
) -> dict[str, Any]:
    settings = replace(MODES["full"], duration=duration, warmup=min(MODES["full"].warmup, duration))
    redis = RedisProbe(redis_url)
    redis.flush()
    workdir = Path(tempfile.mkdtemp(prefix="pact-rate-scan-"))
    stats_file = workdir / "pipe.json"
    try:
        with Children(workdir) as children:
            bench = Bench(settings, children, workdir, redis)
            bot, bot_port = bench.start_bot()
            bot.wait_port(bot_port)
            memory, memory_port = bench.start_gateway(GW_MEMORY, "memory://")
            passthrough, pt_port = bench.start_passthrough()
            by_name = {PASSTHROUGH: passthrough, GW_MEMORY: memory}
            for front, port in ((passthrough, pt_port), (memory, memory_port)):
                assert front.process is not None
                front.process.wait_port(port)

            def one_round(name: str, concurrency: int, rate: float = 0.0) -> dict[str, Any]:
                if name == GW_REDIS:
                    return _redis_round(
                        bench, redis_url, stats_file, duration=duration, concurrency=concurrency, rate=rate
                    )
                return bench.drive(
                    by_name[name], duration=duration, concurrency=concurrency, rate=rate, redis_stats=False
                )

            peak = one_round(GW_REDIS, PEAK_CONCURRENCY)
            peak_rps = float(peak["throughput_rps"])
            progress(f"gateway-redis peak {peak_rps:.0f} turns/s at {PEAK_CONCURRENCY} in flight")
            rounds: list[dict[str, Any]] = []
            order = [PASSTHROUGH, GW_MEMORY, GW_REDIS]
            for repeat in range(repeats):
                for fraction in fractions:
                    rate = max(peak_rps * fraction, 1.0)
                    for name in order if repeat % 2 == 0 else order[::-1]:
                        result = one_round(name, OPEN_LOOP_WORKERS, rate)
                        rounds.append(
                            {
                                "front": name,
                                "repeat": repeat,
                                "fraction": fraction,
                                "rate_rps": rate,
                                "latency_ms": result["latency_ms"],
                                "errors": result["errors"],
                                "machine_busy": result["machine_busy"],
                                **({"pipe": result["pipe"]} if "pipe" in result else {}),
                            }
                        )
                    progress(_round_line(rounds[-3:], rate))
    finally:
        redis.flush()
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "peak": {"throughput_rps": peak_rps, "concurrency": PEAK_CONCURRENCY, "pipe": peak["pipe"]},
        "duration": duration,
        "repeats": repeats,
        "rates": [summarize(rounds, fraction) for fraction in fractions],
        "rounds": rounds,
    }


def summarize(rounds: Sequence[dict[str, Any]], fraction: float) -> dict[str, Any]:
    """Medians over the repeats at one rate; "added" is each gateway minus the pass-through, per repeat."""
    at_rate = [r for r in rounds if r["fraction"] == fraction]

    def series(front: str) -> list[dict[str, Any]]:
        return sorted((r for r in at_rate if r["front"] == front), key=lambda r: int(r["repeat"]))

    baseline = series(PASSTHROUGH)
    summary: dict[str, Any] = {
        "fraction": fraction,
        "rate_rps": at_rate[0]["rate_rps"],
        "passthrough_ms": {q: statistics.median(r["latency_ms"][q] for r in baseline) for q in QUANTILES},
        "errors": sum(int(r["errors"]) for r in at_rate),
    }
    for front in (GW_MEMORY, GW_REDIS):
        added = [
            {q: g["latency_ms"][q] - p["latency_ms"][q] for q in QUANTILES}
            for g, p in zip(series(front), baseline, strict=True)
        ]
        summary[f"{front}_added_ms"] = {q: statistics.median(a[q] for a in added) for q in QUANTILES}
    pipes = [r["pipe"] for r in series(GW_REDIS)]
    summary["pipe"] = {
        part: {q: statistics.median(p[part][q] for p in pipes) for q in QUANTILES}
        for part in ("queue_depth", "answer_ms")
    }
    return summary


def _round_line(last: Sequence[dict[str, Any]], rate: float) -> str:
    by_front = {r["front"]: r for r in last}
    pipe = by_front[GW_REDIS]["pipe"]
    return (
        f"  {rate:7.0f}/s  "
        + "  ".join(
            f"{name} p50 {by_front[name]['latency_ms']['p50']:.2f}"
            for name in (PASSTHROUGH, GW_MEMORY, GW_REDIS)
        )
        + (f"  pipe depth p90 {pipe['queue_depth']['p90']:.0f}, answer p50 {pipe['answer_ms']['p50']:.2f} ms")
    )


def render(result: dict[str, Any]) -> str:
    lines = [
        f"gateway-redis peak: {result['peak']['throughput_rps']:.0f} turns/s; "
        f"{result['repeats']} repeat(s) of {result['duration']:.0f} s; ms, medians over repeats",
        f"{'rate/s':>8} {'pt p50':>7} {'pt p99':>7} {'mem +p50':>9} {'mem +p99':>9} {'redis +p50':>11} "
        f"{'redis +p99':>11} {'depth p50/p90/p99':>18} {'answer p50/p90/p99':>20} {'errors':>6}",
    ]
    for rate in result["rates"]:
        pt, mem, red, pipe = (
            rate["passthrough_ms"],
            rate[f"{GW_MEMORY}_added_ms"],
            rate[f"{GW_REDIS}_added_ms"],
            rate["pipe"],
        )
        depth = "/".join(f"{pipe['queue_depth'][q]:.0f}" for q in QUANTILES)
        answer = "/".join(f"{pipe['answer_ms'][q]:.2f}" for q in QUANTILES)
        lines.append(
            f"{rate['rate_rps']:8.0f} {pt['p50']:7.2f} {pt['p99']:7.2f} "
            f"{mem['p50']:+9.2f} {mem['p99']:+9.2f} {red['p50']:+11.2f} {red['p99']:+11.2f} "
            f"{depth:>18} {answer:>20} {rate['errors']:>6}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    served = serve_request(args_list, "python -m bench.rate_scan --serve STATS_FILE -- serve …")
    if served is not None:
        stats, rest = served
        return _serve(Path(stats), rest)
    parser = argparse.ArgumentParser(prog="python -m bench.rate_scan", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--fractions",
        type=lambda text: [float(part) for part in text.split(",")],
        default=list(DEFAULT_FRACTIONS),
        help="rates as fractions of gateway-redis's peak, comma-separated (default: 1/16, 1/8, 1/4, 1/2)",
    )
    parser.add_argument("--duration", type=float, default=8.0, help="measured seconds per round")
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats of every rate")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="a database the scan may flush")
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(args_list)
    result = scan(args.fractions, args.duration, args.repeats, args.redis_url)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
