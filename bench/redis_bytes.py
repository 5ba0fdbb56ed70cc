"""``python -m bench redis_bytes``: Redis bytes per conversation and round trips per turn (issue 17 row 5).

Opens ``--conversations`` conversations (3,000) among ``--people`` people (1,000), each a 31-character
first message and a 58-character reply, through :class:`gateway.store.redis.RedisStore`'s turn
protocol with the §6 charges the gateway adds, and reads ``INFO used_memory`` before and after: on a
``redis-server`` of its own (``used_memory`` is instance-wide) unless ``--redis-url`` names a database
(which it flushes). Each of ``--rounds`` rounds is measured, the median printed beside the sum of
``MEMORY USAGE`` over the keys by kind, and again once the retry window's records and §6 counters
are gone; round trips per turn are client commands counted by ``MONITOR``.

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

from bench.procs import Children, free_port, start_cluster
from bench.redis_probe import RedisProbe
from gateway.config import KEY_LAYOUTS, CacheConfig, KeyLayoutName, RateLimitsConfig, RateRule
from gateway.ops.limits import RateLimits
from gateway.protocol.messages import render_reply
from gateway.store import keys as store_keys
from gateway.store.base import Owner, TurnStatus
from gateway.store.limits import RedisRateLimiter
from gateway.store.redis import CHARGE, RedisStore
from gateway.store.redis_cluster import ClusterPipe

ISSUER = "https://pa.bench.invalid"
FIRST_MESSAGE = "Hi, where is my order A-100017?"
REPLY_TEXT = "Order A-10001 is shipped. It left our warehouse on Monday."
TARGET_BYTES = 700
BASELINE_BYTES = 1328
"""Issue 17's reading on main ``2f825bd``, the same way."""
TARGET_ROUND_TRIPS = 2.0
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


def _used_memory(probe: RedisProbe, reads: int = 3) -> int:
    """``INFO used_memory``, the median of a few reads (it moves with other clients' buffers)."""
    values = []
    for _ in range(reads):
        for line in probe.command("INFO", "memory").decode().splitlines():
            if line.startswith("used_memory:"):
                values.append(int(line.split(":", 1)[1]))
    return int(statistics.median(values))


def _kind(key: bytes) -> str:
    """Which part of the layout a key is, by its third ``:``-separated part (after the owner's
    ``{tag}`` in the tagged layout)."""
    parts = key.split(b":", 3)
    if len(parts) < 3:
        return "?"
    kind = parts[2]
    if kind.startswith(b"{") and b"}" in kind:
        kind = kind[kind.index(b"}") + 1 :]
    return kind.decode(errors="replace")


_SHORT_LIVED = ("f", "rl")
"""First-message records (the retry window, 300 s by default) and §6 counters (seconds)."""


def _delete(probe: RedisProbe, pattern: str) -> None:
    cursor = b"0"
    while True:
        cursor, found = probe.command_array("SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
        if found:
            probe.command("DEL", *found)
        if cursor == b"0":
            return


def key_memory(probe: RedisProbe) -> Counter[str]:
    """``MEMORY USAGE`` of every key of the probe's database, summed by kind of key."""
    total: Counter[str] = Counter()
    cursor = b"0"
    while True:
        cursor, found = probe.command_array("SCAN", cursor, "COUNT", "1000")
        for key in found:
            usage = probe.command("MEMORY", "USAGE", key, "SAMPLES", "0")
            if usage:  # empty: the key expired since the scan (a rate-limit counter lives seconds)
                total[_kind(key)] += int(usage)
        if cursor == b"0":
            return total


async def warm_up(store: RedisStore, person: int) -> None:
    """Each script's first call on a server is EVALSHA then EVAL (which caches it); and the connection
    opens. Neither is per conversation nor per turn."""
    context = await turn(store, _owner(person), None, "warm-1")
    await turn(store, _owner(person), context, "warm-2")


async def round_trips(
    store: RedisStore, probe: RedisProbe, turns: int, first_person: int
) -> tuple[float, float]:
    """Client commands per turn on the probe's database: turns that open, turns that continue.

    Each turn is a person of its own (from ``first_person`` on), so no §6 limit refuses one.
    """
    await warm_up(store, first_person)
    people = range(first_person + 1, first_person + 1 + turns)
    contexts = {person: await turn(store, _owner(person), None, "first") for person in people}
    figures = []
    for opens in (True, False):
        monitor = probe.monitor(riding=frozenset({CHARGE.sha}))
        try:
            monitor.poll(0.05)
            for person in people:
                await turn(store, _owner(person), None if opens else contexts[person], f"rt-{opens}")
            monitor.poll(0.3)
        finally:
            monitor.close()
        figures.append(monitor.round_trips / turns)
    return figures[0], figures[1]


async def measure(
    url: str, conversations: int, people: int, rounds: int, layout: KeyLayoutName
) -> dict[str, Any]:
    probe = RedisProbe(url)
    probe.ping()
    probe.flush()
    store = RedisStore(CacheConfig(url=url, key_layout=layout))
    try:
        per_round: list[float] = []
        idle: list[float] = []
        kinds: Counter[str] = Counter()
        await warm_up(store, people)
        for _ in range(rounds):
            probe.flush()
            await store.ping()
            before = _used_memory(probe)
            await fill(store, conversations, people)
            per_round.append((_used_memory(probe) - before) / conversations)
            kinds = key_memory(probe)
            # What the conversations hold once their §4.3 retry window (and the §6 counters) expired.
            for kind in _SHORT_LIVED:
                _delete(probe, f"pact:acme:{kind}:*")
                _delete(probe, f"pact:acme:{{*}}{kind}:*")
            idle.append((_used_memory(probe) - before) / conversations)
        opening, continuing = await round_trips(store, probe, 5, people)
        probe.flush()
    finally:
        await store.close()
    return {
        "used_memory_bytes_per_conversation": statistics.median(per_round),
        "used_memory_rounds": per_round,
        "idle_used_memory_bytes_per_conversation": statistics.median(idle),
        "key_memory_bytes_per_conversation": sum(kinds.values()) / conversations,
        "key_memory_by_kind": {kind: size / conversations for kind, size in sorted(kinds.items())},
        "round_trips_opening_turn": opening,
        "round_trips_continuing_turn": continuing,
    }


CLUSTER_SPREAD_TARGET = 0.10
"""Issue 20 item 6: the shards' memory within 10 % of each other at 100,000 conversations."""
CLUSTER_SIZES = (1, 3)


async def _shard_memory(pipe: ClusterPipe) -> dict[str, int]:
    """``used_memory`` of every primary, by ``host:port``."""
    found: dict[str, int] = {}
    for node, answer in (await pipe.on_each_primary("INFO", "memory")).items():
        for line in bytes(answer).decode().splitlines():
            if line.startswith("used_memory:"):
                found[node] = int(line.split(":", 1)[1])
    return found


def _keys_on(node: str, pattern: str) -> list[bytes]:
    """The keys matching ``pattern`` that a primary holds (``host:port``), by a ``SCAN`` of it alone."""
    host, _, port = node.rpartition(":")
    probe = RedisProbe(f"redis://{host}:{port}/0")
    keys: list[bytes] = []
    cursor = b"0"
    while True:
        cursor, found = probe.command_array("SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
        keys.extend(found)
        if cursor == b"0":
            return keys


async def _drop_short_lived(pipe: ClusterPipe, nodes: Sequence[str]) -> None:
    """Delete every first-message record and §6 counter, as their expiry would: one ``DEL`` a key
    through the pipe (a ``DEL`` of many would cross slots), a thousand in flight at a time."""
    for node in nodes:
        for kind in _SHORT_LIVED:
            keys = _keys_on(node, f"pact:acme:{{*}}{kind}:*")
            for start in range(0, len(keys), 1000):
                await asyncio.gather(*(pipe.execute("DEL", key) for key in keys[start : start + 1000]))


async def measure_cluster(url: str, conversations: int, people: int, concurrency: int) -> dict[str, Any]:
    """Bytes per conversation on a Redis Cluster, overall and per shard (tagged layout, the only one
    a cluster runs)."""
    # No replicas here (a replica holds its primary's bytes again), so no WAIT for one.
    store = RedisStore(CacheConfig(url=url, key_layout="tagged", wait_replicas=0))
    pipe = store.redis
    assert isinstance(pipe, ClusterPipe)
    try:
        await store.ping()
        await warm_up(store, people)
        await pipe.on_each_primary("FLUSHALL")
        before = await _shard_memory(pipe)
        started = time.perf_counter()
        await fill(store, conversations, people, concurrency)
        seconds = time.perf_counter() - started
        after = await _shard_memory(pipe)
        # What the conversations hold once their §4.3 retry window (and the §6 counters) expired.
        await _drop_short_lived(pipe, sorted(before))
        idle = await _shard_memory(pipe)
    finally:
        await store.close()
    shards: dict[str, dict[str, float]] = {}
    conversation = store_keys.conv_key("acme", "*", "*")
    for node in sorted(before):
        held = len(_keys_on(node, conversation))
        grown = after[node] - before[node]
        shards[node] = {
            "used_memory_bytes": grown,
            "conversations": held,
            "bytes_per_conversation": grown / held,
            "idle_bytes_per_conversation": (idle[node] - before[node]) / held,
        }
    growth = [shard["used_memory_bytes"] for shard in shards.values()]
    return {
        "used_memory_bytes_per_conversation": sum(growth) / conversations,
        "idle_used_memory_bytes_per_conversation": sum(idle[node] - before[node] for node in before)
        / conversations,
        "shards": shards,
        "shard_spread": max(growth) / min(growth) - 1,
        "fill_turns_per_s": conversations / seconds,
    }


def main_cluster(args: argparse.Namespace) -> int:
    people = args.people if args.people is not None else max(args.conversations // 3, 1)
    started = time.perf_counter()
    results: dict[int, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as logs, Children(Path(logs)) as children:
        clusters = {size: start_cluster(children, size) for size in CLUSTER_SIZES}
        for size, cluster in clusters.items():
            results[size] = asyncio.run(
                measure_cluster(cluster.url, args.conversations, people, args.concurrency)
            )
    print(
        f"# {args.conversations} conversations of {people} people, tagged layout, on Redis Clusters of "
        f"{' and '.join(map(str, CLUSTER_SIZES))} primaries started by the bench (no replicas); "
        "shared 2-core machine"
    )
    for size, result in results.items():
        print(f"## {size} primar{'y' if size == 1 else 'ies'}")
        print(
            f"used_memory per conversation: {result['used_memory_bytes_per_conversation']:.0f} B "
            f"(filled at {result['fill_turns_per_s']:.0f} turns/s, {args.concurrency} at a time)"
        )
        print(
            "  once the retry window passed (first-message records and rate counters gone): "
            f"{result['idle_used_memory_bytes_per_conversation']:.0f} B"
        )
        for node, shard in result["shards"].items():
            print(
                f"  shard {node}: +{shard['used_memory_bytes'] / 2**20:.1f} MiB, "
                f"{shard['conversations']} conversations, {shard['bytes_per_conversation']:.0f} B each "
                f"({shard['idle_bytes_per_conversation']:.0f} B once the retry window passed)"
            )
        spread = result["shard_spread"]
        print(
            f"spread between shards (largest / smallest growth - 1): {spread:.1%}; "
            f"target <= {CLUSTER_SPREAD_TARGET:.0%} {'PASS' if spread <= CLUSTER_SPREAD_TARGET else 'MISS'}"
        )
    one, three = (results[size]["used_memory_bytes_per_conversation"] for size in CLUSTER_SIZES)
    print(f"3 primaries / 1 primary used_memory per conversation: {three / one:.3f}")
    print(f"# {time.perf_counter() - started:.1f} s")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench redis_bytes", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--redis-url", help="a database this bench may flush (default: a redis-server of its own)"
    )
    parser.add_argument("--conversations", type=int, default=3000)
    parser.add_argument("--people", type=int, help="default 1000 (--cluster: a third of the conversations)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="on Redis Clusters of 1 and 3 primaries the bench starts: bytes per conversation per shard",
    )
    parser.add_argument(
        "--concurrency", type=int, default=32, help="--cluster: turns at a time while filling"
    )
    parser.add_argument(
        "--layout",
        choices=[*KEY_LAYOUTS, "both"],
        default="both",
        help="cache.key_layout to measure (default: both, one after the other on the same server)",
    )
    args = parser.parse_args(argv)
    if args.cluster:
        return main_cluster(args)
    if args.people is None:
        args.people = 1000
    layouts: list[KeyLayoutName] = list(KEY_LAYOUTS) if args.layout == "both" else [args.layout]
    started = time.perf_counter()

    def measure_all(url: str) -> dict[KeyLayoutName, dict[str, Any]]:
        return {
            layout: asyncio.run(measure(url, args.conversations, args.people, args.rounds, layout))
            for layout in layouts
        }

    if args.redis_url is None:
        with tempfile.TemporaryDirectory() as logs, Children(Path(logs)) as children:
            port = free_port()
            server = children.start(
                "redis", ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"]
            )
            server.wait_port(port)
            where = f"a redis-server of its own (127.0.0.1:{port})"
            results = measure_all(f"redis://127.0.0.1:{port}/0")
    else:
        where = f"{args.redis_url} (instance-wide figure: other clients are noise)"
        results = measure_all(args.redis_url)
    print(f"# {args.conversations} conversations of {args.people} people on {where}; shared 2-core machine")
    for layout, result in results.items():
        print(f"## cache.key_layout: {layout}")
        used = result["used_memory_bytes_per_conversation"]
        print(
            f"used_memory per conversation: {used:.0f} B (rounds: "
            f"{', '.join(f'{value:.0f}' for value in result['used_memory_rounds'])}); "
            f"target <= {TARGET_BYTES} B (ratio {used / TARGET_BYTES:.2f}); main 2f825bd {BASELINE_BYTES} B"
        )
        print(
            "  once the retry window passed (first-message records and rate counters gone): "
            f"{result['idle_used_memory_bytes_per_conversation']:.0f} B"
        )
        print(f"MEMORY USAGE of keys per conversation: {result['key_memory_bytes_per_conversation']:.0f} B")
        for kind, size in result["key_memory_by_kind"].items():
            print(f"  {kind}: {size:.0f} B")
        for name in ("opening", "continuing"):
            value = result[f"round_trips_{name}_turn"]
            print(f"round trips per {name} turn: {value:.2f}; target <= {TARGET_ROUND_TRIPS:.0f}")
    if len(results) == 2:
        tagged, previous = (results[layout]["used_memory_bytes_per_conversation"] for layout in KEY_LAYOUTS)
        print(f"tagged / previous used_memory per conversation: {tagged / previous:.3f}")
    print(f"# {time.perf_counter() - started:.1f} s")
    return 0
