"""``python -m bench memory``: what the memory store costs, per conversation and at its bound.

By default, in this process: conversations made through the store's turn protocol as the gateway
makes them (``begin_turn`` without a ``contextId``, then ``complete_turn`` with a rendered reply),
each its own user; the RSS growth over them (what the operator pays, allocator slack included), less
the replies' bytes (the bot's choice), and per ``cache.max_entries`` entry. ``--turns N`` answers N
turns a conversation. Target: at most 1 KiB per idle conversation of one turn, replies excluded.

``--at-bound``: the collector's pauses in a gateway whose store is at its bound. For each
``--scales`` multiple of the default ``cache.max_entries`` (300,000; set for the run and printed) a
real ``pact-gateway serve`` runs with the sample bot behind it, started through this module
(:func:`serve_measured`) so that, in the gateway's own process, once it serves:

1. the store is filled to its bound with idle conversations of distinct people, one answered turn
   each, opened an hour to half an hour ago (the store's clock is set back while filling, so they
   are what a pod at its bound holds: open, idle past ``retry_window``);
2. the tracked objects per stored conversation (``gc.get_objects()`` after a collection, before and
   after the fill) and the RSS per entry are taken;
3. the load generator drives ``message:send`` (by default every turn a new conversation, which at
   the bound makes room by evicting), while a ``gc.callbacks`` hook times every collection.

Printed beside the targets: the longest pause (≤ 20 ms) and the pauses by generation, tracked
objects per conversation (≤ 1), RSS per entry (≤ 752 B). A round with any answer that is not 2xx
is void and printed as such, no figure drawn from it. Nothing here is a test: it reports.
"""

from __future__ import annotations

import asyncio
import gc
import json
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import loadgen
from bench.figures import target, target_line, valid
from bench.harness import Front, front_parser, gateway_yaml, load_json, report, write_key, write_yaml
from bench.procs import Children, free_port, rss_bytes
from gateway.config import CacheConfig
from gateway.protocol.messages import render_reply
from gateway.store.base import Owner, TurnStatus
from gateway.store.memory import MemoryStore

REPLY_TEXT = "Order A-10001 is shipped. It left our warehouse on Monday."
AT_BOUND_REPLY = "Order A-10001 left our warehouse on Monday."
"""The reply the ``--at-bound`` figures in docs/capacity.md were measured with (483 B an entry)."""
DEFAULT_BOUND = CacheConfig().max_entries or 0
PAUSE_TARGET_MS, TRACKED_TARGET, RSS_TARGET = 20.0, 1.0, 752.0
"""The targets at the bound; 752 B an entry is the four-turn figure of the sizing table (capacity.md)."""
ENTRIES_PER_CONVERSATION = 2
"""A filled conversation's record and its person's index (its first-message record has expired: the
fill's later conversations make room by dropping those, and the sweep takes the rest)."""
FILL_AGE = 3600.0
"""Seconds the store's clock is set back when an ``--at-bound`` fill starts: older than any retry window."""
BUCKETS_MS = (1.0, 5.0, 10.0, 20.0, 50.0)


async def fill(
    store: MemoryStore, count: int, tag: str, turns: int = 1, reply_text: str = REPLY_TEXT, aged: float = 0.0
) -> int:
    """Open ``count`` conversations of ``turns`` answered turns, each its own person's; the
    ``sys.getsizeof`` of the replies.

    ``aged``: the store's clock runs from ``aged`` seconds ago to half that while they open, so the
    early ones' first-message records have expired by the end and made room for the later ones, as at
    a pod's bound.
    """
    reply_bytes, real, opened = 0, store._clock, [0]
    if aged:
        store._clock = lambda: real() - aged + opened[0] * aged / 2 / count
    try:
        for index in range(count):
            opened[0] = index
            owner, context_id = Owner("acme", loadgen.ISSUER, f"{tag}-user-{index}"), str(uuid.uuid4())
            for turn in range(1, turns + 1):
                message_id = f"m-{turn}"
                claim = await store.begin_turn(
                    owner, None if turn == 1 else context_id, message_id, "Hi, where is my order?", context_id
                )
                if claim.status is not TurnStatus.NEW:
                    raise RuntimeError(f"conversation {index}, turn {turn}: {claim.status}")
                reply = render_reply(f"r-{uuid.uuid4().hex}", context_id, reply_text)
                reply_bytes += sys.getsizeof(reply)
                await store.complete_turn(owner, context_id, message_id, reply, close=False)
            if index % 2000 == 1999:
                await asyncio.sleep(0)  # a served gateway keeps answering its probes meanwhile
    finally:
        store._clock = real
    return reply_bytes


async def measure(count: int, turns: int = 1) -> dict[str, Any]:
    config = CacheConfig()  # the defaults an operator gets: a 300 s retry window
    # Warm-up: imports, interned strings and the event loop's first allocations are not per conversation.
    warm = MemoryStore(config)
    await fill(warm, 100, "warm")
    await warm.close()
    del warm
    gc.collect()
    kept = MemoryStore(config)
    before = rss_bytes()
    started = time.perf_counter()
    replies = await fill(kept, count, "rss", turns)
    seconds = time.perf_counter() - started
    gc.collect()
    grown = rss_bytes() - before
    # What cache.max_entries counts: record, first-message record and owner index per conversation here.
    entries = len(kept.keyspace.entries)
    return {
        "conversations": count,
        "turns_per_conversation": turns,
        "entries": entries,
        "fill_seconds": seconds,
        "rss_delta_bytes": grown,
        "rss_bytes_per_entry": grown / entries,
        "reply_bytes_per_conversation": replies / count,
        "rss_bytes_per_conversation": grown / count,
        "rss_bytes_per_conversation_excluding_replies": max((grown - replies) / count, 0.0),
    }


# ---- --at-bound, in the gateway's process --------------------------------------------------------


async def _fill_served(store: MemoryStore, conversations: int) -> None:
    """:func:`fill` aged by :data:`FILL_AGE`; its tracked objects and RSS per entry said on stdout."""
    gc.collect()
    tracked, rss, entries = len(gc.get_objects()), rss_bytes(), len(store.keyspace.entries)
    started = time.perf_counter()
    await fill(store, conversations, "filled", reply_text=AT_BOUND_REPLY, aged=FILL_AGE)
    gc.collect()
    added = len(store.keyspace.entries) - entries
    figures = {
        "conversations": conversations,
        "entries": added,
        "fill_s": time.perf_counter() - started,
        "tracked_per_conversation": (len(gc.get_objects()) - tracked) / conversations,
        "rss_per_entry": (rss_bytes() - rss) / max(added, 1),
    }
    print(json.dumps({"fill": figures}), flush=True)


def serve_measured(conversations: int, argv: Sequence[str]) -> int:
    """``pact-gateway`` ``argv`` in this process: filled once it serves, its collections timed.

    Pauses are recorded from the end of the fill on; ``SIGUSR1`` says them on stdout (``[generation,
    wall ms, CPU ms]``: the wall time is the loop's stall, the CPU time the collector's own work, which
    a busy machine does not stretch) with the store's size.
    """
    from gateway.cli import main as gateway_main
    from gateway.process import server

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

    original_start, original_settle = MemoryStore.start, server.settle_heap

    async def start(self: MemoryStore) -> None:
        await original_start(self)
        stores.append(self)

        async def fill_when_served() -> None:
            await served.wait()
            await _fill_served(self, conversations)
            timing["on"] = True

        asyncio.get_running_loop().create_task(fill_when_served())

    def settle() -> None:
        original_settle()
        served.set()  # after the gateway's own freeze: what the fill stores is the collector's to walk

    def say_pauses(signum: int, frame: object) -> None:
        entries = len(stores[0].keyspace.entries) if stores else 0
        print(json.dumps({"pauses": pauses, "entries": entries}), flush=True)

    MemoryStore.start = start  # type: ignore[method-assign]
    server.settle_heap = settle
    gc.callbacks.append(on_gc)
    signal.signal(signal.SIGUSR1, say_pauses)
    return gateway_main(list(argv))


# ---- --at-bound, the run ---------------------------------------------------------------------------


def _round(children: Children, workdir: Path, bot_url: str, scale: float, args: Any) -> dict[str, Any]:
    bound, port = int(scale * DEFAULT_BOUND), free_port()
    key_file = workdir / "pa-key.json"
    # Filled to the bound (less a few new conversations' worth): what stays is idle conversations.
    conversations = (bound - 1000) // ENTRIES_PER_CONVERSATION
    raw = gateway_yaml(
        port, write_key(key_file), {"url": bot_url}, {"url": "memory://", "max_entries": bound}
    )
    config = write_yaml(workdir / f"gateway-x{scale:g}.yaml", raw)
    argv = ["-m", "bench", "memory", "serve", str(conversations), "--config", str(config)]
    front = Front.a2a(f"x{scale:g}", port, children.python(f"gateway-x{scale:g}", *argv))
    child = front.listening().process
    assert child is not None
    try:
        fill_figures = child.said('{"fill"', timeout=60 + conversations / 2000)["fill"]
        load = loadgen.argv(
            front.url, key_file, duration=args.duration, warmup=2.0, concurrency=args.concurrency,
            turns=args.turns, users=256,
        )  # fmt: skip
        driven = load_json(load, timeout=args.duration + 60)
        child.popen.send_signal(signal.SIGUSR1)
        measured = child.said('{"pauses"', timeout=10)
    finally:
        children.stop(child)
    return {"scale": scale, "bound": bound, "fill": fill_figures, "load": driven, **measured}


def _render(one: dict[str, Any]) -> list[str]:
    fill_figures, load = one["fill"], one["load"]
    lines = [
        f"cache.max_entries {one['bound']:,} (set for this run: {one['scale']:g}x the default), filled with "
        f"{fill_figures['conversations']:,} idle conversations ({fill_figures['entries']:,} entries) in "
        f"{fill_figures['fill_s']:.0f} s; {one['entries']:,} entries after the load"
    ]
    if not valid(load):
        samples = "; ".join(load["error_samples"][:3])
        return [*lines, f"  VOID: {load['errors']} answers were not 2xx ({samples}): no figure from it"]
    pauses = one["pauses"]
    longest = max((ms for _, ms, _ in pauses), default=0.0)
    longest_cpu = max((cpu for _, _, cpu in pauses), default=0.0)
    lines.append(
        f"  load: {load['turns_measured']:,} turns ({load['conversations']:,} conversations) in "
        f"{load['window_s']:.0f} s, all 2xx, p50 {load['latency_ms']['p50']:.1f} ms, "
        f"p99 {load['latency_ms']['p99']:.1f} ms; longest pause's CPU {longest_cpu:.1f} ms"
    )
    for generation in range(3):
        own = sorted(ms for gen, ms, _ in pauses if gen == generation)
        if not own:
            lines.append(f"    generation {generation}: no collection")
            continue
        labels = [*(f"≤{high:g}" for high in BUCKETS_MS), f">{BUCKETS_MS[-1]:g}"]
        edges = zip(labels, (0.0, *BUCKETS_MS), (*BUCKETS_MS, float("inf")), strict=True)
        counts = ", ".join(f"{label} ms {sum(low < ms <= high for ms in own)}" for label, low, high in edges)
        lines.append(
            f"    generation {generation}: {len(own)} collections, median {own[len(own) // 2]:.2f} ms,"
            f" max {own[-1]:.2f} ms ({counts})"
        )
    judged = (
        ("longest GC pause, ms", PAUSE_TARGET_MS, longest),
        ("tracked objects per stored conversation", TRACKED_TARGET, fill_figures["tracked_per_conversation"]),
        ("RSS per entry, B", RSS_TARGET, fill_figures["rss_per_entry"]),
    )
    return [*lines, *(target_line(target(what, f"<= {bound:g}", value)) for what, bound, value in judged)]


def at_bound(args: Any) -> dict[str, Any]:
    """``--at-bound``: a served gateway filled to each scale's bound, its collections timed under load."""
    with tempfile.TemporaryDirectory(prefix="pact-gc-pause-") as tmp, Children(Path(tmp)) as children:
        bot_port = free_port()
        children.python("bot", "-m", "examples.sample_bot", "--port", str(bot_port)).wait_port(bot_port)
        bot_url = f"http://127.0.0.1:{bot_port}/chat"
        return {
            "rounds": [
                _round(children, Path(tmp), bot_url, float(scale), args) for scale in args.scales.split(",")
            ]
        }


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["serve"]:  # the gateway's process, started by _round
        return serve_measured(int(argv[1]), ["serve", *argv[2:]])
    parser = front_parser("memory", __doc__)
    parser.add_argument("--conversations", type=int, default=100_000, help="conversations whose RSS is read")
    parser.add_argument(
        "--turns", type=int, default=1, help="answered turns a conversation (--at-bound: of the load's)"
    )
    parser.add_argument("--at-bound", action="store_true", help="the collector's pauses at the bound")
    parser.add_argument(
        "--scales", default="1,5", help="--at-bound: cache.max_entries in multiples of 300,000, a,b,…"
    )
    parser.add_argument("--duration", type=float, default=20.0, help="--at-bound: seconds of load a scale")
    parser.add_argument("--concurrency", type=int, default=16, help="--at-bound: the load's concurrency")
    args = parser.parse_args(argv)
    if args.at_bound:
        result = at_bound(args)
        report(result, args.out, "\n".join(line for one in result["rounds"] for line in _render(one)))
    else:
        result = asyncio.run(measure(args.conversations, args.turns))
        report(result, args.out, _render_bytes(result))
    return 0


def _render_bytes(figures: dict[str, Any]) -> str:
    per, replies = figures["rss_bytes_per_conversation"], figures["reply_bytes_per_conversation"]
    lines = [
        f"memory store: {figures['conversations']:,} conversations of {figures['turns_per_conversation']} "
        f"answered turn(s), each its own person's: {figures['entries']:,} entries, RSS {per:,.0f} B a "
        f"conversation ({replies:,.0f} B of it replies), {figures['rss_bytes_per_entry']:,.0f} B an entry"
    ]
    if figures["turns_per_conversation"] == 1:
        idle = figures["rss_bytes_per_conversation_excluding_replies"]
        lines.append(
            target_line(target("bytes per idle conversation, excluding replies (RSS)", "<= 1024", idle))
        )
    return "\n".join(lines)
