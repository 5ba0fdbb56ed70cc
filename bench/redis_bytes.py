"""Redis bytes per conversation and round trips per turn (issue 17 row 5), the issue's way.

``python -m bench capacity redis_bytes`` opens ``--conversations`` conversations (3,000 by
default) among ``--people`` people (1,000), each with a 31-character first message and a
rendered reply (a 58-character text), through :class:`gateway.store.redis.RedisStore`'s turn
protocol with the §6 charges the gateway adds to each turn (so the per-person rate-limit
counters are in the figure, as they are through HTTP). It reads ``INFO used_memory`` before
and after. ``used_memory`` is instance-wide, so by default the bench starts a ``redis-server``
of its own on a loopback port (the installed one, its default settings, no persistence) where
nothing else runs; ``--redis-url`` measures on a database of an existing server instead (which
it flushes: never give it another's), where other clients' activity is noise. Each of
``--rounds`` rounds is measured and the median printed, beside the sum of ``MEMORY USAGE`` over
the database's keys (per key, so nobody else's writes count), split by kind of key. Round trips
per turn are client commands counted by ``MONITOR`` on that database over a few turns that open
a conversation and a few that continue one.
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

from bench.procs import Children, free_port
from bench.redis_probe import RedisProbe
from gateway.config import KEY_LAYOUTS, CacheConfig, KeyLayoutName, RateLimitsConfig, RateRule
from gateway.ops.limits import RateLimits
from gateway.protocol.messages import render_reply
from gateway.store.base import Owner, TurnStatus
from gateway.store.limits import RedisRateLimiter
from gateway.store.redis import CHARGE, RedisStore

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


async def fill(store: RedisStore, conversations: int, people: int) -> None:
    for index in range(conversations):
        await turn(store, _owner(index % people), None, f"m-{uuid.uuid4()}")


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench capacity redis_bytes", description=__doc__)
    parser.add_argument(
        "--redis-url", help="a database this bench may flush (default: a redis-server of its own)"
    )
    parser.add_argument("--conversations", type=int, default=3000)
    parser.add_argument("--people", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--layout",
        choices=[*KEY_LAYOUTS, "both"],
        default="both",
        help="cache.key_layout to measure (default: both, one after the other on the same server)",
    )
    args = parser.parse_args(argv)
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
