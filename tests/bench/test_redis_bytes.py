"""Issue 17 row 5: bytes per conversation on Redis, and round trips per turn, as bounds a test can hold.

Bytes are deterministic (``MEMORY USAGE`` per key on the test's own database, so no other client's
writes count), so the bound is asserted here; ``INFO used_memory``, the issue's own reading, is
instance-wide and is the benchmark's (``python -m bench redis_bytes``), which is also run
here at a tiny size. Needs Redis at ``PACT_TEST_REDIS_URL`` and fails, never skips, without it.
"""

from __future__ import annotations

import re

import redis
import redis.asyncio as aioredis

from bench.redis_bytes import FIRST_MESSAGE, fill, key_memory, turn, warm_up
from gateway.config import CacheConfig
from gateway.store import keys as store_keys
from gateway.store.base import Owner
from gateway.store.redis import RedisStore
from tests.support.bench import BENCH_REDIS_URL, run_module
from tests.support.commands import recorded_commands

KEY_BYTES_PER_CONVERSATION = 550
"""MEMORY USAGE of every key per conversation (the issue's 700 B of ``used_memory`` less Redis's own
overhead per key outside it); ``b17dd54`` held about 1,085 B the same way."""


async def test_redis_holds_a_conversation_in_at_most_550_bytes_of_keys(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    store = RedisStore(CacheConfig(url=redis_url))
    try:
        await fill(store, 300, 100)
    finally:
        await store.close()
    per_conversation = sum(key_memory(redis.Redis.from_url(redis_url)).values()) / 300
    assert per_conversation <= KEY_BYTES_PER_CONVERSATION, per_conversation
    # Small-encoded: a hash table would be about three times the size.
    conversations = [key async for key in redis_client.scan_iter(store_keys.conv_key("acme", "*", "*"))]
    assert len(conversations) == 300
    assert {await redis_client.object("encoding", key) for key in conversations} == {b"listpack"}


async def test_a_turn_is_still_two_round_trips_on_the_smaller_layout(redis_url: str) -> None:
    store = RedisStore(CacheConfig(url=redis_url))
    owner = Owner("acme", "https://pa.bench.invalid", "person-1")
    try:
        await warm_up(store, 0)  # each script's first call on the server is EVALSHA then EVAL
        with recorded_commands(store.redis) as opening:
            context = await turn(store, owner, None, "m-1")
        with recorded_commands(store.redis) as continuing:
            await turn(store, owner, context, "m-2")
    finally:
        await store.close()
    assert (opening, continuing) == (["EVALSHA", "EVALSHA"], ["EVALSHA", "EVALSHA"])


def test_the_redis_bytes_front_prints_its_figures_beside_the_targets() -> None:
    out = run_module(
        "bench",
        *("redis_bytes", "--conversations", "30", "--people", "10", "--rounds", "1"),
        *("--redis-url", BENCH_REDIS_URL),
    )
    assert len(FIRST_MESSAGE) == 31
    assert re.search(r"used_memory per conversation: -?\d+ B .*target <= 700 B", out), out
    assert re.search(r"MEMORY USAGE of keys per conversation: \d+ B", out), out


def test_the_cluster_front_measures_every_shard_of_three_beside_one_primary() -> None:
    """Issue 20 item 6: bytes per conversation per shard and the spread, one primary and three in one run."""
    out = run_module("bench", *("redis_bytes", "--cluster", "--conversations", "300", "--concurrency", "4"))
    one, three = out.split("## 3 primaries")
    assert len(re.findall(r"^  shard 127\.0\.0\.1:\d+: \+[\d.]+ MiB, \d+ conversations", one, re.M)) == 1, out
    shards = re.findall(r"^  shard 127\.0\.0\.1:\d+: \+[\d.]+ MiB, (\d+) conversations", three, re.M)
    assert len(shards) == 3, out
    assert sum(map(int, shards)) == 300, out
    assert re.search(r"spread between shards .*: \d+\.\d%; target <= 10%", three), out
    assert re.search(r"3 primaries / 1 primary used_memory per conversation: \d\.\d{3}", out), out
