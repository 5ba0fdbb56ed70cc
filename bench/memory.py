"""``python -m bench memory``: resident memory per idle conversation on the memory store, its own process.

Conversations are made through the store's turn protocol as the gateway makes them (``begin_turn``
without a ``contextId``, then ``complete_turn`` with a rendered reply), each its own user. Readings:
RSS growth of the process (what the operator pays, allocator slack included) and ``tracemalloc`` (in
a second store, so the tracer's bookkeeping never shows in the RSS figure), each also less the
replies' bytes (the bot's choice), and tracemalloc again once the §4.3 retry window has passed.
``--turns N`` answers N turns a conversation (bytes per ``cache.max_entries`` entry as they grow).
Prints one JSON document; ``python -m bench throughput`` includes it under ``memory``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import re
import sys
import time
import tracemalloc
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.procs import rss_bytes
from gateway.config import CacheConfig
from gateway.protocol.messages import render_reply
from gateway.store.base import Owner, TurnStatus
from gateway.store.memory import MemoryStore

ISSUER = "https://pa.bench.invalid"
REPLY_TEXT = "Order A-10001 is shipped. It left our warehouse on Monday."


def _where(frame: tracemalloc.Frame) -> str:
    """``file:line`` relative to the checkout or site-packages, for a readable report."""
    name = frame.filename.removeprefix(str(Path(__file__).resolve().parent.parent) + "/")
    name = re.split(r"/site-packages/|/lib/python3\.\d+/", name)[-1]
    return f"{name}:{frame.lineno}"


async def fill(store: MemoryStore, count: int, tag: str, turns: int = 1) -> int:
    """Open ``count`` conversations and answer ``turns`` turns in each; the total ``sys.getsizeof`` of
    the replies stored."""
    reply_bytes = 0
    for index in range(count):
        owner = Owner("acme", ISSUER, f"{tag}-user-{index}")
        context_id = str(uuid.uuid4())
        for turn in range(1, turns + 1):
            message_id = f"m-{turn}"
            claim = await store.begin_turn(
                owner, None if turn == 1 else context_id, message_id, "Hi, where is my order?", context_id
            )
            if claim.status is not TurnStatus.NEW:
                raise RuntimeError(f"conversation {index}, turn {turn}: {claim.status}")
            reply = render_reply(f"r-{uuid.uuid4().hex}", context_id, REPLY_TEXT)
            reply_bytes += sys.getsizeof(reply)
            await store.complete_turn(owner, context_id, message_id, reply, close=False)
    return reply_bytes


async def measure(count: int, traced_count: int, idle_retry_window: int, turns: int = 1) -> dict[str, Any]:
    config = CacheConfig()  # the defaults an operator gets: a 300 s retry window
    # Warm-up: imports, interned strings and the event loop's first allocations are not per conversation.
    warm = MemoryStore(config)
    await fill(warm, 100, "warm")
    await warm.close()
    del warm
    gc.collect()

    kept = MemoryStore(config)
    rss_before = rss_bytes()
    started = time.perf_counter()
    reply_total = await fill(kept, count, "rss", turns)
    fill_seconds = time.perf_counter() - started
    gc.collect()
    rss_after = rss_bytes()
    # What cache.max_entries counts: record, first-message record and owner index per conversation here.
    entries = len(kept.keyspace.entries)

    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    fresh_store = MemoryStore(config)
    fresh_replies = await fill(fresh_store, traced_count, "fresh", turns)
    gc.collect()
    fresh, _ = tracemalloc.get_traced_memory()
    stats = tracemalloc.take_snapshot().statistics("lineno")
    top = stats[:10]
    # What a stored reply really occupies: the serializer's buffer, not just len(reply).
    reply_allocated = sum(s.size for s in stats if s.traceback[0].filename.endswith("protocol/messages.py"))
    await fresh_store.close()
    del fresh_store
    gc.collect()

    # Truly idle: past the §4.3 retry window the first-message records have expired. A short
    # window stands in for the 300 s default so the reading need not wait five minutes.
    base_idle, _ = tracemalloc.get_traced_memory()
    idle_store = MemoryStore(CacheConfig(retry_window=idle_retry_window))
    idle_replies = await fill(idle_store, traced_count, "idle", turns)
    await asyncio.sleep(idle_retry_window + 0.5)
    # One full pass of the store's sweep (the gateway runs it in the background while serving).
    for _ in range(idle_store.keyspace.SWEEP_PASS_TICKS):
        idle_store.keyspace.sweep()
    gc.collect()
    idle, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    rss_delta = rss_after - rss_before
    per_reply = reply_total / count
    return {
        "conversations": count,
        "turns_per_conversation": turns,
        "entries": entries,
        "rss_bytes_per_entry": rss_delta / entries,
        "fill_seconds": fill_seconds,
        "rss_before_bytes": rss_before,
        "rss_after_bytes": rss_after,
        "rss_delta_bytes": rss_delta,
        "reply_bytes_per_conversation": per_reply,
        "rss_bytes_per_conversation": rss_delta / count,
        "rss_bytes_per_conversation_excluding_replies": max(rss_delta / count - per_reply, 0.0),
        "traced_conversations": traced_count,
        "reply_allocated_bytes_per_conversation": reply_allocated / traced_count,
        "traced_bytes_per_conversation": (fresh - base) / traced_count,
        "traced_bytes_per_conversation_excluding_replies": max(
            (fresh - base - fresh_replies) / traced_count, 0.0
        ),
        "traced_idle_bytes_per_conversation_excluding_replies": max(
            (idle - base_idle - idle_replies) / traced_count, 0.0
        ),
        "top_allocations": [
            {"where": _where(stat.traceback[0]), "bytes_per_conversation": stat.size / traced_count}
            for stat in top
        ],
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument(
        "--traced-conversations",
        type=int,
        default=20_000,
        help="conversations per tracemalloc reading (tracing is slow; the per-conversation figure is stable)",
    )
    parser.add_argument(
        "--idle-retry-window",
        type=int,
        default=1,
        help="cache.retry_window for the idle reading, so it need not wait the default 300 s",
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=1,
        help="turns answered in each conversation (cache.max_entries sizing: bytes per entry as they grow)",
    )
    args = parser.parse_args(argv)
    print(
        json.dumps(
            asyncio.run(
                measure(args.conversations, args.traced_conversations, args.idle_retry_window, args.turns)
            )
        )
    )
