"""``python -m bench soak``: the gateway under steady load; its memory and file descriptors before and after.

A leak is growth that more traffic makes larger: one ``pact-gateway serve`` process (in front of
the sample bot) is driven by the load generator for ``--duration`` seconds and read from
``/proc/<pid>`` (``VmRSS`` and open descriptors) after a warm-up run of the same shape, every second
(the peak), and once the load's connections are closed. On Redis (default; database 14 flushed
before and after, or ``--redis-url``) conversations live outside the process; on the memory store
(``--cache memory``) each may account for :data:`MEMORY_STORE_ALLOWANCE` bytes. Bounds: RSS growth
≤ ``--rss-bound-mib`` (16 MiB) plus that allowance, descriptors ≤ ``--fd-bound`` (8), no error; exit
status 1 when one is broken. ``tests/reliability_report.py`` runs it for docs/reliability.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from bench.harness import DEFAULT_REDIS_URL, MEMORY_BOUND_NOTE, MODES, Bench, front_parser, report
from bench.procs import ChildFailed, Children, rss_bytes

SCHEMA = "pact-gateway-soak/1"
MIB = 1024 * 1024
MEMORY_STORE_ALLOWANCE = 4096
"""Bytes of resident memory a conversation stored on the memory store may account for."""
SETTLE_LIMIT = 10.0
"""Seconds to wait after the load for the gateway to close the load generator's connections."""


@dataclass(frozen=True)
class Reading:
    """One look at a process: resident memory and open file descriptors."""

    rss_bytes: int
    open_fds: int


def read_process(pid: int) -> Reading:
    return Reading(rss_bytes(pid), len(os.listdir(f"/proc/{pid}/fd")))


Bounds = Reading
"""The growth a run may show, as a reading of it."""


def bounds_for(args: argparse.Namespace, conversations: int) -> Bounds:
    """The growth this run may show: the fixed bounds, and on the memory store its stored conversations."""
    allowance = conversations * MEMORY_STORE_ALLOWANCE if args.cache == "memory" else 0
    return Bounds(int(args.rss_bound_mib * MIB) + allowance, args.fd_bound)


def verdict(before: Reading, after: Reading, bounds: Bounds, errors: int) -> dict[str, Any]:
    """Whether the run stayed within ``bounds`` (and saw no error), and by how much it grew."""
    rss, fds = after.rss_bytes - before.rss_bytes, after.open_fds - before.open_fds
    checked = {"rss_ok": rss <= bounds.rss_bytes, "fds_ok": fds <= bounds.open_fds, "errors_ok": errors == 0}
    return {"rss_growth_bytes": rss, "fd_growth": fds, **checked, "ok": all(checked.values())}


def soak(args: argparse.Namespace, bench: Bench) -> dict[str, Any]:
    """The sample bot and one gateway; a warm-up load, the readings before, the load, the readings after."""
    bot, port = bench.start_bot()
    gateway = bench.start(
        "gateway", bench.gateway_front("memory://" if args.cache == "memory" else args.redis_url)
    )
    bot.wait_port(port)
    process = gateway.listening().process
    assert process is not None
    peak = [read_process(process.pid)]

    def load(duration: float) -> dict[str, Any]:
        def sample() -> None:
            time.sleep(1.0)
            now, top = read_process(process.pid), peak[0]
            peak[0] = Reading(max(top.rss_bytes, now.rss_bytes), max(top.open_fds, now.open_fds))

        return bench.drive(gateway, duration=duration, concurrency=args.concurrency, while_running=sample)

    def settled(before: Reading) -> Reading:
        """The reading once the gateway has closed the finished load's connections (or the limit passed)."""
        deadline = time.monotonic() + SETTLE_LIMIT
        while (
            reading := read_process(process.pid)
        ).open_fds > before.open_fds and time.monotonic() < deadline:
            time.sleep(0.2)
        return reading

    warm = load(args.warmup)
    before = settled(read_process(process.pid))
    peak[0] = before
    measured = load(args.duration)
    after = settled(before)
    # The warm-up's conversations are in the "before" reading already; the measured run's are not.
    conversations = int(measured["conversations"])
    bounds = bounds_for(args, conversations)
    errors = int(warm["errors"]) + int(measured["errors"])
    return {
        "schema": SCHEMA,
        "cache": args.cache,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "concurrency": args.concurrency,
        "turns": int(measured["turns_total"]),
        "turns_per_s": measured["throughput_rps"],
        "errors": errors,
        "error_samples": measured["error_samples"] or warm["error_samples"],
        "conversations_stored": conversations if args.cache == "memory" else 0,
        **{name: asdict(seen) for name, seen in (("before", before), ("peak", peak[0]), ("after", after))},
        "bounds": asdict(bounds),
        "verdict": verdict(before, after, bounds, errors),
    }


def render(result: dict[str, Any]) -> str:
    """The soak's report for a person: what ran, then memory and descriptors against their bounds."""
    before, peak, after = result["before"], result["peak"], result["after"]
    bounds, checked = result["bounds"], result["verdict"]

    def mib(value: int) -> str:
        return f"{value / MIB:.1f} MiB"

    mark = {True: "ok", False: "EXCEEDED"}

    return "\n".join(
        [
            f"soak: pact-gateway serve on {result['cache']}, {result['duration_s']:g} s of load at "
            f"concurrency {result['concurrency']} after a {result['warmup_s']:g} s warm-up"
            + (f"; {MEMORY_BOUND_NOTE}" if result["cache"] == "memory" else ""),
            f"  turns {result['turns']} ({result['turns_per_s']:.0f}/s), errors {result['errors']}",
            f"  resident memory  before {mib(before['rss_bytes'])}, peak {mib(peak['rss_bytes'])}, "
            f"after {mib(after['rss_bytes'])}: {checked['rss_growth_bytes'] / MIB:+.1f} MiB "
            f"(bound {mib(bounds['rss_bytes'])}) {mark[checked['rss_ok']]}",
            f"  open descriptors before {before['open_fds']}, peak {peak['open_fds']}, "
            f"after {after['open_fds']}: {checked['fd_growth']:+d} (bound {bounds['open_fds']}) "
            f"{mark[checked['fds_ok']]}",
            f"  errors: {mark[checked['errors_ok']]}",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = front_parser("soak", __doc__)
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of measured load (default 60)")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds of load before the first reading")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--turns", type=int, default=5, help="turns per conversation")
    parser.add_argument("--cache", choices=["redis", "memory"], default="redis")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="a database the soak may flush")
    parser.add_argument("--rss-bound-mib", type=float, default=16.0, help="allowed growth of resident memory")
    parser.add_argument("--fd-bound", type=int, default=8, help="allowed growth of open file descriptors")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.warmup <= 0 or args.concurrency < 1 or args.turns < 1:
        parser.error("--duration and --warmup must be positive, --concurrency and --turns at least 1")
    store = redis.Redis.from_url(args.redis_url)
    settings = dataclasses.replace(MODES["full"], warmup=0.0, turns=args.turns)
    with tempfile.TemporaryDirectory(prefix="pact-soak-") as tmp:
        if args.cache == "redis":
            store.flushdb()
        try:
            with Children(Path(tmp)) as children:
                result = soak(args, Bench(settings, children, Path(tmp), args.redis_url))
        except ChildFailed as failed:
            print(f"python -m bench soak: {failed}", file=sys.stderr)
            return 2
        finally:
            if args.cache == "redis":
                store.flushdb()
    report(result, args.out, render(result))
    return 0 if result["verdict"]["ok"] else 1
