"""``python -m bench redis_bytes``: Redis bytes per conversation (issue 17 row 5), per shard of a cluster.

Opens ``--conversations`` conversations (3,000) among ``--people`` people (1,000), each a 31-character
first message and a 58-character reply, through :class:`gateway.store.redis.RedisStore`'s turn
protocol with the §6 charges the gateway adds, and reads ``INFO used_memory`` before and after: on a
``redis-server`` of its own (``used_memory`` is instance-wide) unless ``--redis-url`` names a database
(which it flushes). Each of ``--rounds`` rounds is measured, the median printed beside the sum of
``MEMORY USAGE`` over the keys by kind, and again once the retry window's records and §6 counters
are gone (``tests/bench/test_redis_bytes.py`` holds the key bytes and two round trips a turn).

``--cluster`` (issue 20 item 6): the tagged layout on Redis Clusters of one primary and of three the
bench starts (no replicas), ``--concurrency`` turns at a time; ``used_memory`` of every primary
before and after, per shard, and the spread between the shards' growth (target: within 10 %).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from bench.harness import front_parser, report
from bench.procs import Children, free_port, start_cluster
from gateway.config import CacheConfig, RateLimitsConfig, RateRule
from gateway.ops.limits import RateLimits
from gateway.protocol.messages import render_reply
from gateway.store import keys as store_keys
from gateway.store.base import Owner, TurnStatus
from gateway.store.limits import RedisRateLimiter
from gateway.store.redis import RedisStore
from gateway.store.redis_cluster import ClusterPipe

ISSUER = "https://pa.bench.invalid"
FIRST_MESSAGE = "Hi, where is my order A-100017?"
REPLY_TEXT = "Order A-10001 is shipped. It left our warehouse on Monday."
TARGET_BYTES = 700
assert len(FIRST_MESSAGE) == 31
LIMITS = RateLimitsConfig(per_agent=RateRule(50.0, 100, enabled=False))
"""The per-person §6 counter as the defaults keep it; the per-agent one is one key for everybody (and
the bench's single agent opens conversations faster than its default rate)."""


def _owner(person: int) -> Owner:
    return Owner("acme", ISSUER, f"person-{person:05d}")


async def turn(store: RedisStore, owner: Owner, context_id: str | None, message_id: str) -> str:
    """One turn as the gateway runs it: begin (with the §6 charge), then complete with the reply."""
    # The limiter only names the counters here (in the store's layout); the store charges them.
    rates = RateLimits(RedisRateLimiter(store.redis, tagged=store.tagged))
    charge = rates.a2a_charge("acme", LIMITS, ISSUER, owner.sub)
    new_context = str(uuid.uuid4())
    claim = await store.begin_turn(
        owner, context_id, message_id, FIRST_MESSAGE, new_context, limits=charge.hits
    )
    if claim.status is not TurnStatus.NEW:
        raise RuntimeError(f"turn {message_id} was not claimed: {claim.status}")
    reply = render_reply(f"r-{uuid.uuid4().hex}", claim.context_id, REPLY_TEXT)
    await store.complete_turn(owner, claim.context_id, message_id, reply, close=False)
    return claim.context_id


async def fill(store: RedisStore, conversations: int, people: int, concurrency: int = 1) -> None:
    """``conversations`` opened among ``people``, ``concurrency`` turns at a time (as many gateway
    connections would); each task keeps to its own conversations, so the bytes do not depend on it."""

    async def worker(task: int) -> None:
        for index in range(task, conversations, concurrency):
            await turn(store, _owner(index % people), None, f"m-{uuid.uuid4()}")

    await asyncio.gather(*(worker(task) for task in range(concurrency)))


def used_memory(info: bytes) -> int:
    """``used_memory`` of an ``INFO memory`` answer."""
    return next(int(line[12:]) for line in info.decode().splitlines() if line.startswith("used_memory:"))


def _kind(key: bytes) -> str:
    """Which part of the layout a key is: its third ``:``-separated part, after the owner's ``{tag}``."""
    parts = key.split(b":", 3)
    kind = parts[2] if len(parts) > 2 else b"?"
    return kind[kind.index(b"}") + 1 :].decode() if kind.startswith(b"{") and b"}" in kind else kind.decode()


SHORT_LIVED = ("pact:acme:{*}f:*", "pact:acme:{*}rl:*")
"""First-message records (the retry window, 300 s by default) and §6 counters (seconds)."""


def scan(client: redis.Redis, pattern: str = "*") -> list[bytes]:
    """Every key of the client's database matching ``pattern``, by ``SCAN`` (``KEYS`` blocks a server)."""
    return list(client.scan_iter(match=pattern, count=1000))


def key_memory(client: redis.Redis) -> Counter[str]:
    """``MEMORY USAGE`` of every key of the client's database, summed by kind of key."""
    total: Counter[str] = Counter()
    for key in scan(client):
        # None: the key expired since the scan (a rate-limit counter lives seconds).
        if usage := client.memory_usage(key, samples=0):
            total[_kind(key)] += int(usage)
    return total


async def warm_up(store: RedisStore, person: int) -> None:
    """Each script's first call on a server is EVALSHA then EVAL (which caches it); and the connection
    opens. Neither is per conversation nor per turn."""
    context = await turn(store, _owner(person), None, "warm-1")
    await turn(store, _owner(person), context, "warm-2")


async def measure(url: str, conversations: int, people: int, rounds: int) -> dict[str, Any]:
    client = redis.Redis.from_url(url)
    client.flushdb()
    store = RedisStore(CacheConfig(url=url))  # the default layout, tagged
    per_round, idle, kinds = [], [], Counter[str]()

    def used() -> float:
        """The median of a few reads: ``used_memory`` moves with other clients' buffers."""
        return statistics.median(int(client.info("memory")["used_memory"]) for _ in range(3))

    try:
        await warm_up(store, people)
        for _ in range(rounds):
            client.flushdb()
            await store.ping()
            before = used()
            await fill(store, conversations, people)
            per_round.append((used() - before) / conversations)
            kinds = key_memory(client)
            # What the conversations hold once their §4.3 retry window (and the §6 counters) expired.
            for pattern in SHORT_LIVED:
                if found := scan(client, pattern):
                    client.delete(*found)
            idle.append((used() - before) / conversations)
        client.flushdb()
    finally:
        await store.close()
    return {
        "used_memory_bytes_per_conversation": statistics.median(per_round),
        "used_memory_rounds": per_round,
        "idle_used_memory_bytes_per_conversation": statistics.median(idle),
        "key_memory_bytes_per_conversation": sum(kinds.values()) / conversations,
        "key_memory_by_kind": {kind: size / conversations for kind, size in sorted(kinds.items())},
    }


CLUSTER_SPREAD_TARGET = 0.10
"""Issue 20 item 6: the shards' memory within 10 % of each other at 100,000 conversations."""
CLUSTER_SIZES = (1, 3)


async def measure_cluster(url: str, conversations: int, people: int, concurrency: int) -> dict[str, Any]:
    """Bytes per conversation on a Redis Cluster, overall and per shard (the tagged layout, the only one
    a cluster runs; no replicas, which hold their primary's bytes again, so no WAIT for one)."""
    store = RedisStore(CacheConfig(url=url, key_layout="tagged", wait_replicas=0))
    pipe = store.redis
    assert isinstance(pipe, ClusterPipe)

    async def shards() -> dict[str, int]:
        return {
            node: used_memory(info) for node, info in (await pipe.on_each_primary("INFO", "memory")).items()
        }

    def on(node: str) -> redis.Redis:
        return redis.Redis.from_url(f"redis://{node}/0")

    try:
        await store.ping()
        await warm_up(store, people)
        await pipe.on_each_primary("FLUSHALL")
        before = await shards()
        started = time.perf_counter()
        await fill(store, conversations, people, concurrency)
        seconds = time.perf_counter() - started
        after = await shards()
        # As their expiry would: one DEL a key (a DEL of many would cross slots), a thousand at a time.
        for node in before:
            found = [key for pattern in SHORT_LIVED for key in scan(on(node), pattern)]
            for start in range(0, len(found), 1000):
                await asyncio.gather(*(pipe.execute("DEL", key) for key in found[start : start + 1000]))
        idle = await shards()
    finally:
        await store.close()
    held = {node: len(scan(on(node), store_keys.conv_key("acme", "*", "*"))) for node in sorted(before)}
    grown = {node: after[node] - before[node] for node in held}
    return {
        "used_memory_bytes_per_conversation": sum(grown.values()) / conversations,
        "idle_used_memory_bytes_per_conversation": sum(idle[n] - before[n] for n in held) / conversations,
        "shards": {
            node: {
                "used_memory_bytes": grown[node],
                "conversations": held[node],
                "bytes_per_conversation": grown[node] / held[node],
                "idle_bytes_per_conversation": (idle[node] - before[node]) / held[node],
            }
            for node in held
        },
        "shard_spread": max(grown.values()) / min(grown.values()) - 1,
        "fill_turns_per_s": conversations / seconds,
    }


def on_clusters(args: argparse.Namespace, children: Children) -> tuple[dict[str, Any], list[str]]:
    """``--cluster``: the figures on a cluster of one primary and on one of three, and their lines."""
    people = args.people if args.people is not None else max(args.conversations // 3, 1)
    clusters = {size: start_cluster(children, size) for size in CLUSTER_SIZES}
    results = {
        size: asyncio.run(measure_cluster(nodes.url, args.conversations, people, args.concurrency))
        for size, nodes in clusters.items()
    }
    lines = [
        f"# {args.conversations} conversations of {people} people, tagged layout, on Redis Clusters of "
        f"{' and '.join(map(str, CLUSTER_SIZES))} primaries started by the bench (no replicas)"
    ]
    for size, result in results.items():
        spread = result["shard_spread"]
        lines += [
            f"## {size} primar{'y' if size == 1 else 'ies'}",
            f"used_memory per conversation: {result['used_memory_bytes_per_conversation']:.0f} B "
            f"(filled at {result['fill_turns_per_s']:.0f} turns/s, {args.concurrency} at a time); "
            f"once the retry window passed: {result['idle_used_memory_bytes_per_conversation']:.0f} B",
            *(
                f"  shard {node}: +{shard['used_memory_bytes'] / 2**20:.1f} MiB, "
                f"{shard['conversations']} conversations, {shard['bytes_per_conversation']:.0f} B each "
                f"({shard['idle_bytes_per_conversation']:.0f} B once the retry window passed)"
                for node, shard in result["shards"].items()
            ),
            f"spread between shards (largest / smallest growth - 1): {spread:.1%}; "
            f"target <= {CLUSTER_SPREAD_TARGET:.0%} {'PASS' if spread <= CLUSTER_SPREAD_TARGET else 'MISS'}",
        ]
    one, three = (results[size]["used_memory_bytes_per_conversation"] for size in CLUSTER_SIZES)
    lines.append(f"3 primaries / 1 primary used_memory per conversation: {three / one:.3f}")
    return {str(size): result for size, result in results.items()}, lines


def on_one_server(args: argparse.Namespace, url: str, where: str) -> tuple[dict[str, Any], list[str]]:
    """Bytes per conversation on the Redis at ``url``, and their lines."""
    people = args.people or 1000
    result = asyncio.run(measure(url, args.conversations, people, args.rounds))
    used = result["used_memory_bytes_per_conversation"]
    rounds = ", ".join(f"{value:.0f}" for value in result["used_memory_rounds"])
    return result, [
        f"# {args.conversations} conversations of {people} people on {where}, the tagged layout",
        f"used_memory per conversation: {used:.0f} B (rounds: {rounds}); target <= {TARGET_BYTES} B "
        f"(ratio {used / TARGET_BYTES:.2f})",
        f"  once the retry window passed: {result['idle_used_memory_bytes_per_conversation']:.0f} B",
        f"MEMORY USAGE of keys per conversation: {result['key_memory_bytes_per_conversation']:.0f} B",
        *(f"  {kind}: {size:.0f} B" for kind, size in result["key_memory_by_kind"].items()),
    ]


def main(argv: Sequence[str]) -> int:
    parser = front_parser("redis_bytes", __doc__)
    parser.add_argument(
        "--redis-url", help="a database this bench may flush (default: a redis-server of its own)"
    )
    parser.add_argument("--conversations", type=int, default=3000)
    parser.add_argument("--people", type=int, help="default 1000 (--cluster: a third of the conversations)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--cluster", action="store_true", help="per shard, on Redis Clusters of 1 and 3 primaries"
    )
    parser.add_argument(
        "--concurrency", type=int, default=32, help="--cluster: turns at a time while filling"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as logs, Children(Path(logs)) as children:
        if args.cluster:
            result, lines = on_clusters(args, children)
        else:
            url, where = args.redis_url, f"{args.redis_url} (instance-wide figure: other clients are noise)"
            if url is None:
                port = free_port()
                server = children.start(
                    "redis", ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
                )
                server.wait_port(port)
                url, where = f"redis://127.0.0.1:{port}/0", f"a redis-server of its own (127.0.0.1:{port})"
            result, lines = on_one_server(args, url, where)
    report(result, args.out, "\n".join(lines))
    return 0
