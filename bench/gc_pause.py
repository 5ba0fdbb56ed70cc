"""The collector's pauses in a gateway whose memory store is at its bound, under load (issue 29, item 3).

``python -m bench capacity gc_pause [--scales 1,5] [--duration 20] [--concurrency 16]`` runs, for each
scale, a real ``pact-gateway serve`` (memory store, ``cache.max_entries`` set to scale × the default
300,000 for the run, and printed) with the sample bot behind it. In the gateway's own process (started
through this module, :func:`serve_measured`), once it serves:

1. the store is filled to its bound with idle conversations of distinct people, one answered turn
   each with a reply the size of the sample bot's, opened an hour to half an hour ago (the store's
   clock is set back while filling, so they are what a pod at its bound holds: open, idle past
   ``retry_window``);
2. the tracked objects per stored conversation (``gc.get_objects()`` after a collection, before and
   after the fill) and the RSS per entry are taken;
3. the load generator drives ``message:send`` (by default every turn a new conversation, which at
   the bound makes room by evicting), while a ``gc.callbacks`` hook times every collection of the process.

Printed beside the issue's targets: the longest pause (≤ 20 ms) and the distribution of pauses by
generation, tracked objects per conversation (≤ 1), RSS per entry (≤ 752 B). A round with any answer
that is not 2xx is void and printed as such, no figure drawn from it. Nothing here is a test: it reports.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from bench.procs import Child, Children, free_port, python_env, serve_request, served_through
from gateway.pa_keys import generate_private_jwk, public_jwks

__all__ = ["main"]

ISSUER = "https://pa.bench.invalid"
AUDIENCE = "pact-gateway-bench"
DEFAULT_BOUND = 300_000
"""``cache.max_entries``'s default (gateway/config.py)."""
PAUSE_TARGET_MS = 20.0
TRACKED_TARGET = 1.0
RSS_TARGET = 752.0
"""Issue 29: bytes per entry measured on main ``cd07041`` (docs/capacity.md), not to be exceeded."""
ENTRIES_PER_CONVERSATION = 2
"""A filled conversation's record and its person's index (its first-message record has expired: the
fill's later conversations make room by dropping those, and the sweep takes the rest)."""
FILL_AGE = 3600.0
"""Seconds the store's clock is set back when the fill starts: far older than any retry window."""
BUCKETS_MS = (1.0, 5.0, 10.0, 20.0, 50.0)
USAGE = "python -m bench.gc_pause --serve STATS,CONVERSATIONS -- serve …"


# ---- in the gateway's process --------------------------------------------------------------------


def rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


async def _fill(store: Any, conversations: int, done: Path) -> None:
    """Open and answer ``conversations`` conversations of distinct people an hour ago; figures to ``done``."""
    from gateway.protocol.messages import render_reply
    from gateway.store.base import Owner, TurnStatus

    real = store._clock
    gc.collect()
    tracked_before, rss_before, entries_before = (
        len(gc.get_objects()),
        rss_bytes(),
        len(store.keyspace.entries),
    )
    started = time.perf_counter()
    opened = [0]
    # The fill's clock runs from FILL_AGE ago to half that: the early first-message records have expired
    # by the time the store is full, and make room for the later conversations, as at a pod's bound.
    store._clock = lambda: real() - FILL_AGE + opened[0] * FILL_AGE / 2 / conversations
    try:
        for number in range(conversations):
            opened[0] = number
            owner = Owner("acme", "https://pa.fill.invalid", f"filled-{number}")
            context = str(uuid.uuid4())
            claim = await store.begin_turn(owner, None, "m-1", "Where is my order?", context)
            if claim.status is not TurnStatus.NEW:
                raise RuntimeError(f"fill stopped at {number}: {claim.status.value}")
            reply = render_reply(
                f"r-{uuid.uuid4().hex}", context, "Order A-10001 left our warehouse on Monday."
            )
            await store.complete_turn(owner, context, "m-1", reply, close=False)
            if number % 2000 == 1999:
                await asyncio.sleep(0)  # the process keeps answering its probes meanwhile
    finally:
        store._clock = real
    gc.collect()
    entries = len(store.keyspace.entries) - entries_before
    figures = {
        "conversations": conversations,
        "entries": entries,
        "fill_s": time.perf_counter() - started,
        "tracked_per_conversation": (len(gc.get_objects()) - tracked_before) / conversations,
        "rss_per_entry": (rss_bytes() - rss_before) / max(entries, 1),
    }
    await asyncio.to_thread(done.write_bytes, orjson.dumps(figures))


def serve_measured(stats_path: str, conversations: int, argv: Sequence[str]) -> int:
    """``pact-gateway`` ``argv`` in this process: filled once it serves, its collections timed.

    Pauses are recorded from the end of the fill on; ``SIGUSR1`` writes them (``[generation, wall ms,
    CPU ms]``: the wall time is the loop's stall, the CPU time the collector's own work, which a busy
    machine does not stretch) and the store's size to ``stats_path``.
    """
    from gateway.cli import main as gateway_main
    from gateway.process import server
    from gateway.store.memory import MemoryStore

    pauses: list[tuple[int, float, float]] = []
    timing = {"on": False, "started": 0.0, "cpu": 0.0}
    stores: list[Any] = []
    served = asyncio.Event()

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            timing["started"], timing["cpu"] = time.perf_counter(), time.thread_time()
        elif timing["on"]:
            wall = (time.perf_counter() - timing["started"]) * 1000
            pauses.append((info["generation"], wall, (time.thread_time() - timing["cpu"]) * 1000))

    original_start = MemoryStore.start
    original_settle = server.settle_heap

    async def start(self: MemoryStore) -> None:
        await original_start(self)
        stores.append(self)

        async def fill_when_served() -> None:
            await served.wait()
            await _fill(self, conversations, Path(stats_path + ".fill"))
            timing["on"] = True

        asyncio.get_running_loop().create_task(fill_when_served())

    def settle() -> None:
        original_settle()
        served.set()  # after the gateway's own freeze: what the fill stores is the collector's to walk

    def report(signum: int, frame: object) -> None:
        entries = len(stores[0].keyspace.entries) if stores else 0
        Path(stats_path).write_bytes(orjson.dumps({"pauses": pauses, "entries": entries}))

    MemoryStore.start = start  # type: ignore[method-assign]
    server.settle_heap = settle
    gc.callbacks.append(on_gc)
    signal.signal(signal.SIGUSR1, report)
    return gateway_main(list(argv))


# ---- the run -------------------------------------------------------------------------------------


def _config(workdir: Path, port: int, bot_url: str, jwks: dict[str, Any], bound: int) -> Path:
    raw = {
        "listen": {"host": "127.0.0.1", "port": port},
        "public_url": f"http://127.0.0.1:{port}",
        "provider": {"organization": "Bench", "url": "https://bench.invalid", "audience": AUDIENCE},
        "personal_agents": {"policy": "allowlist", "registered": [{"issuer": ISSUER, "jwks": jwks}]},
        "cache": {"url": "memory://", "max_entries": bound},
        # §6 limits that never bind: one personal agent here stands for the whole load.
        "rate_limits": {
            "per_agent": {"rate": 1_000_000, "burst": 1_000_000},
            "per_user": {"rate": 1_000_000, "burst": 1_000_000},
        },
        "metrics": {"enabled": False},
        "brands": [
            {
                "id": "acme",
                "name": "Acme Support",
                "description": "Order status.",
                "version": "1.0.0",
                "upstream": {"url": bot_url},
            }
        ],
    }
    path = workdir / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _wait_for(child: Child, path: Path, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and child.alive():
        if path.exists() and path.stat().st_size > 0:
            figures: dict[str, Any] = orjson.loads(path.read_bytes())
            return figures
        time.sleep(0.2)
    raise RuntimeError(f"no {path.name} within {timeout:.0f} s:\n{child.tail()}")


def _round(
    children: Children,
    workdir: Path,
    bot_url: str,
    key_file: Path,
    jwks: dict[str, Any],
    scale: int,
    args: Any,
) -> dict[str, Any]:
    bound = scale * DEFAULT_BOUND
    port = free_port()
    stats = workdir / f"gc-{scale}.json"
    # Filled to the bound (less a few new conversations' worth): what stays is idle conversations.
    conversations = (bound - 1000) // ENTRIES_PER_CONVERSATION
    config = _config(workdir, port, bot_url, jwks, bound)
    argv = served_through(
        "bench.gc_pause", f"{stats},{conversations}", ["-m", "gateway", "serve", "--config", str(config)]
    )
    child = children.python(f"gateway-x{scale}", *argv)
    try:
        child.wait_port(port)
        fill = _wait_for(child, Path(f"{stats}.fill"), timeout=60 + conversations / 2000)
        load = [
            sys.executable,
            *("-m", "bench.loadgen", "--url", f"http://127.0.0.1:{port}/a2a/acme/message:send"),
            *("--concurrency", str(args.concurrency), "--subs", "256", "--turns", str(args.turns)),
            *("--duration", str(args.duration), "--warmup", "2"),
            *("--key-file", str(key_file), "--issuer", ISSUER, "--audience", AUDIENCE),
        ]
        done = subprocess.run(
            load, env=python_env(), capture_output=True, text=True, timeout=args.duration + 60, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"load generator failed:\n{done.stderr[-2000:]}")
        driven: dict[str, Any] = json.loads(done.stdout)
        stats.unlink(missing_ok=True)
        child.popen.send_signal(signal.SIGUSR1)
        measured = _wait_for(child, stats, timeout=10)
    finally:
        children.stop(child)
    return {"scale": scale, "bound": bound, "fill": fill, "load": driven, **measured}


def _render(result: dict[str, Any]) -> str:
    lines: list[str] = []
    for one in result["rounds"]:
        fill, load = one["fill"], one["load"]
        lines.append(
            f"cache.max_entries {one['bound']:,} (set for this run: {one['scale']}x the default), "
            f"filled with {fill['conversations']:,} idle conversations ({fill['entries']:,} entries) "
            f"in {fill['fill_s']:.0f} s; {one['entries']:,} entries after the load"
        )
        turns, errors = load["turns_measured"], load["errors_measured"]
        if errors:
            samples = "; ".join(load["error_samples"][:3])
            lines.append(
                f"  VOID: {errors} of {turns + errors} answers were not 2xx ({samples}): no figure from it"
            )
            continue
        pauses = [ms for _, ms, _ in one["pauses"]]
        longest = max(pauses, default=0.0)
        longest_cpu = max((cpu for _, _, cpu in one["pauses"]), default=0.0)
        lines.append(
            f"  load: {turns:,} turns ({load['conversations']:,} conversations) in {load['window_s']:.0f} s,"
            f" all 2xx, p50 {load['latency_ms']['p50']:.1f} ms, p99 {load['latency_ms']['p99']:.1f} ms"
        )
        verdict = "met" if longest <= PAUSE_TARGET_MS else "MISSED"
        lines.append(
            f"  longest GC pause {longest:.1f} ms (CPU {longest_cpu:.1f} ms)"
            f"   target ≤ {PAUSE_TARGET_MS:.0f} ms: {verdict}"
        )
        for generation in range(3):
            own = sorted(ms for gen, ms, _ in one["pauses"] if gen == generation)
            if not own:
                lines.append(f"    generation {generation}: no collection")
                continue
            edges = (0.0, *BUCKETS_MS)
            counts = [
                sum(1 for ms in own if low < ms <= high) for low, high in zip(edges, BUCKETS_MS, strict=False)
            ]
            above = sum(1 for ms in own if ms > BUCKETS_MS[-1])
            buckets = ", ".join(
                f"≤{high:g} ms {count}" for high, count in zip(BUCKETS_MS, counts, strict=True)
            )
            lines.append(
                f"    generation {generation}: {len(own)} collections, median {own[len(own) // 2]:.2f} ms,"
                f" max {own[-1]:.2f} ms ({buckets}, >{BUCKETS_MS[-1]:g} ms {above})"
            )
        tracked = fill["tracked_per_conversation"]
        lines.append(
            f"  tracked objects per stored conversation {tracked:.3f}   target ≤ {TRACKED_TARGET:g}:"
            f" {'met' if tracked <= TRACKED_TARGET else 'MISSED'}"
        )
        rss = fill["rss_per_entry"]
        lines.append(
            f"  RSS per entry {rss:.0f} B   target ≤ {RSS_TARGET:.0f} B:"
            f" {'met' if rss <= RSS_TARGET else 'MISSED'}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    served = serve_request(args_list, USAGE)
    if served is not None:
        stats_path, conversations = served[0].rsplit(",", 1)
        return serve_measured(stats_path, int(conversations), served[1])
    parser = argparse.ArgumentParser(prog="python -m bench capacity gc_pause", description=__doc__)
    parser.add_argument(
        "--scales", default="1,5", help="cache.max_entries as multiples of 300,000, comma-separated"
    )
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds of load per scale")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--turns",
        type=int,
        default=1,
        help="turns per conversation (1: every turn opens one, the most churn)",
    )
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(args_list)
    with tempfile.TemporaryDirectory(prefix="pact-gc-pause-") as tmp:
        workdir = Path(tmp)
        private = generate_private_jwk("ES256")
        key_file = workdir / "pa-key.json"
        key_file.write_text(json.dumps(private))
        with Children(workdir) as children:
            bot_port = free_port()
            bot = children.python("bot", "-m", "examples.sample_bot", "--port", str(bot_port))
            bot.wait_port(bot_port)
            bot_url = f"http://127.0.0.1:{bot_port}/chat"
            rounds = [
                _round(children, workdir, bot_url, key_file, public_jwks(private), int(scale), args)
                for scale in args.scales.split(",")
            ]
    result = {"rounds": rounds}
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    print(_render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
