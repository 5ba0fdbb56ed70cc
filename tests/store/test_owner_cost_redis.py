"""Issue 17 row 2 on Redis: a new conversation asks the same of Redis at a person's 100th and 10,000th.

Counted, not timed: MONITOR shows every command the turn scripts run inside Redis (``[db lua]``)
on this test's database, so the commands a new conversation costs are compared at both sizes,
and none of them reads the person's whole index (their sorted set of conversations).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

from gateway.config import CacheConfig
from gateway.store import Owner, TurnStatus
from gateway.store import keys as store_keys
from gateway.store.redis import RedisStore
from tests.support.redis_layout import tag_of
from tests.support.redis_monitor import MonitorCount

WHOLE_SET_READS = {"zrange", "zrangebyscore", "zrevrange", "zcard", "zscan", "smembers", "scan", "keys"}


async def _commands(store: RedisStore, monitor: MonitorCount, owner: Owner, tag: str) -> Counter[str]:
    before = Counter(monitor.script_commands)
    claim = await store.begin_turn(owner, None, f"m-{tag}", "Where is my order?", f"ctx-{tag}")
    assert claim.status is TurnStatus.NEW
    await store.complete_turn(owner, claim.context_id, f"m-{tag}", b"reply", close=False)
    await asyncio.to_thread(monitor.poll, 0.5)
    return monitor.script_commands - before


async def test_a_new_conversation_runs_the_same_redis_commands_at_a_persons_100th_and_10000th(
    redis_url: str,
) -> None:
    store = RedisStore(CacheConfig(url=redis_url))
    few, many = (Owner("acme", "https://pa.example", sub) for sub in ("few", "many"))
    deadline = int(time.time() + 86400)  # the index's scores are deadlines in seconds
    for owner, count in ((few, 100), (many, 10_000)):
        members: list[str | int] = []
        for number in range(count):
            members += (deadline, f"held-{number}")
        await store.redis.execute(
            "ZADD", store_keys.conv_index_key("acme", owner.digest_bytes, tag_of(owner)), *members
        )
    await _commands_warm(store)
    monitor = MonitorCount(redis_url)  # returns once MONITOR answered OK: every command is seen from here
    try:
        at_100 = await _commands(store, monitor, few, "few")
        at_10000 = await _commands(store, monitor, many, "many")
    finally:
        monitor.close()
        await store.close()
    assert at_100 == at_10000, (at_100, at_10000)
    assert at_100["zadd"] == 2  # opened, then answered: the index kept as long as the conversation
    assert not WHOLE_SET_READS & at_100.keys(), at_100


async def _commands_warm(store: RedisStore) -> None:
    """One conversation first, so that loading the scripts is not counted at either size."""
    owner = Owner("acme", "https://pa.example", "warm")
    claim = await store.begin_turn(owner, None, "m-warm", "hello", "ctx-warm")
    await store.complete_turn(owner, claim.context_id, "m-warm", b"reply", close=False)
