"""``python -m bench memory``: resident memory per idle conversation on the memory store, its own process.

Conversations are made through the store's turn protocol as the gateway makes them (``begin_turn``
without a ``contextId``, then ``complete_turn`` with a rendered reply), each its own user: the RSS
growth of this process over them (what the operator pays, allocator slack included), less the
replies' bytes (the bot's choice), and per ``cache.max_entries`` entry. ``--turns N`` answers N turns
a conversation. Prints one JSON document; ``python -m bench throughput`` includes it under ``memory``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Any

from bench.procs import rss_bytes
from gateway.config import CacheConfig
from gateway.protocol.messages import render_reply
from gateway.store.base import Owner, TurnStatus
from gateway.store.memory import MemoryStore

ISSUER = "https://pa.bench.invalid"
REPLY_TEXT = "Order A-10001 is shipped. It left our warehouse on Monday."


async def fill(store: MemoryStore, count: int, tag: str, turns: int = 1) -> int:
    """Open ``count`` conversations of ``turns`` answered turns; the ``sys.getsizeof`` of the replies."""
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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--turns", type=int, default=1, help="answered turns in each conversation")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(measure(args.conversations, args.turns))))
