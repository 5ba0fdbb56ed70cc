"""One person's cost per new conversation as their conversations pile up (issue 17, row 2).

``python -m bench capacity owner_scale [--points 1000,10000,100000] [--probe 2000]
[--redis-url redis://127.0.0.1:6379/DB]`` gives one person (one (Brand, personal agent, ``sub``))
``N`` conversations, then times ``--probe`` more, each opened and answered through the store's
own turn protocol (``begin_turn`` without a ``contextId``, then ``complete_turn``), in process,
and prints the microseconds per new conversation at each ``N`` beside the target: at most 1.2×
the first point's figure. The memory store is always measured, Redis when ``--redis-url`` is
given (its database is only written under a prefix of this run's own, deleted afterwards).

On the memory store the person's conversations are made with the same two calls; on Redis only
their owner's index is filled (one ``ZADD`` of many members per batch), because that sorted set
is the only per-person structure a new conversation touches there (each conversation is a key of
its own) and 100,000 real conversations would take minutes over loopback. The points are
measured side by side, their probes taken in turn, so a busy spell of the shared machine falls on
every point alike: on memory, CPU time of this process (the fastest of 20 chunks); on Redis, wall
time (the median of single conversations). Cited by docs/capacity.md,
"One person's conversations".
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import secrets
import statistics
import time
from collections.abc import Sequence

from gateway.config import CacheConfig
from gateway.store import keys
from gateway.store.base import ConversationStore, Owner, TurnStatus
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore

TARGET = 1.2
"""Issue 17: the cost per new conversation at a person's last point over their first, at most."""
ROUNDS = 20
_INDEX_BATCH = 5_000


async def _conversation(store: ConversationStore, owner: Owner, tag: str) -> None:
    claim = await store.begin_turn(owner, None, f"m-{tag}", "Where is my order?", f"c-{tag}")
    if claim.status is not TurnStatus.NEW:
        raise RuntimeError(f"conversation {tag}: {claim.status.value}")
    await store.complete_turn(owner, claim.context_id, f"m-{tag}", b'{"message":{}}', close=False)


async def _fill(store: ConversationStore, owner: Owner, count: int) -> None:
    """Give ``owner`` ``count`` live conversations (on Redis: their index entries, see above)."""
    if isinstance(store, RedisStore):
        index = keys.conv_index_key(owner.brand_id, owner.digest_bytes)
        score = int(time.time() + 7 * 86400)  # the index's scores are deadlines in seconds
        for start in range(0, count, _INDEX_BATCH):
            members: list[str | int] = []
            for number in range(start, min(count, start + _INDEX_BATCH)):
                members += (score, f"filled-{number}")
            await store.redis.execute("ZADD", index, *members)
        return
    for number in range(count):
        await _conversation(store, owner, f"fill-{number}")


async def _memory_figures(stores: Sequence[tuple[ConversationStore, Owner]], probe: int) -> list[float]:
    """Microseconds of this process's CPU time per new conversation, each store's fastest of
    :data:`ROUNDS` chunks, the stores' chunks taken in turn after a round not counted (first calls,
    caches). All of the work is in this process, and CPU time leaves out the time the shared
    machine gives others; a chunk's sum includes the index's occasional prune and regrowth."""
    per_chunk = max(1, probe // ROUNDS)
    chunks: list[list[float]] = [[] for _ in stores]
    for round_ in range(ROUNDS + 1):
        for figures, (store, owner) in zip(chunks, stores, strict=True):
            started = time.process_time()
            for number in range(per_chunk):
                await _conversation(store, owner, f"probe-{round_}-{number}")
            if round_:
                figures.append((time.process_time() - started) / per_chunk * 1e6)
    return [min(figures) for figures in chunks]


async def _redis_figures(stores: Sequence[tuple[ConversationStore, Owner]], probe: int) -> list[float]:
    """Wall-clock microseconds per new conversation (Redis's share of the work is in another
    process), the median of single conversations taken in turn, one on each store, so every busy
    spell of the shared machine falls on all of them alike."""
    timings: list[list[float]] = [[] for _ in stores]
    for number in range(probe):
        for figures, (store, owner) in zip(timings, stores, strict=True):
            started = time.perf_counter()
            await _conversation(store, owner, f"probe-{number}")
            figures.append((time.perf_counter() - started) * 1e6)
    return [statistics.median(figures) for figures in timings]


async def _forget(store: RedisStore, brand_id: str) -> None:
    """Delete every key this run wrote (all under its own Brand id)."""
    cursor = b"0"
    while True:
        cursor, found = await store.redis.execute(
            "SCAN", cursor, "MATCH", f"{keys.PREFIX}:{brand_id}:*", "COUNT", 1000
        )
        if found:
            await store.redis.execute("DEL", *found)
        if cursor in (b"0", 0, "0"):
            return


async def _measure(backend: str, points: Sequence[int], probe: int, redis_url: str | None) -> list[float]:
    stores: list[tuple[ConversationStore, Owner]] = []
    try:
        for point in points:
            owner = Owner(f"bench-owner-{secrets.token_hex(4)}", "https://pa.bench.invalid", "one-person")
            store: ConversationStore
            if backend == "memory":
                store = MemoryStore(CacheConfig(max_entries=None))
            else:
                assert redis_url is not None
                store = RedisStore(CacheConfig(url=redis_url))
            stores.append((store, owner))
            await _fill(store, owner, point)
        gc.collect()
        if backend == "memory":
            return await _memory_figures(stores, probe)
        return await _redis_figures(stores, probe)
    finally:
        for store, owner in stores:
            if isinstance(store, RedisStore):
                await _forget(store, owner.brand_id)
            await store.close()


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench capacity owner_scale", description=__doc__)
    parser.add_argument(
        "--points", default="1000,10000,100000", help="a person's conversations, comma-separated"
    )
    parser.add_argument("--probe", type=int, default=2000, help="new conversations timed at each point")
    parser.add_argument("--redis-url", default=None, help="also measure Redis (use a database of your own)")
    args = parser.parse_args(argv)
    points = [int(point) for point in args.points.split(",")]
    backends = ["memory"] + (["redis"] if args.redis_url else [])
    print("one person's cost per new conversation (begin_turn + complete_turn, in process)")
    print(f"{'store':<8}{'conversations held':>20}{'µs per new one':>16}{'× first':>9}   target")
    worst = 0.0
    for backend in backends:
        figures = asyncio.run(_measure(backend, points, args.probe, args.redis_url))
        for point, figure in zip(points, figures, strict=True):
            ratio = figure / figures[0]
            worst = max(worst, ratio)
            print(f"{backend:<8}{point:>20,}{figure:>16.1f}{ratio:>9.2f}   ≤ {TARGET}×")
    if not args.redis_url:
        print("redis: not measured (no --redis-url)")
    print(f"worst ratio {worst:.2f} against ≤ {TARGET}: {'met' if worst <= TARGET else 'MISSED'}")
    return 0
