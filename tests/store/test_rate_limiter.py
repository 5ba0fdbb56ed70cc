"""§6 rate-limit counters on both backends: GCRA, all-or-nothing charging, expiry, store failures.

Time is a :class:`ManualClock`, so "wait ``Retry-After`` and try again" is exact, not slept.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import CacheConfig
from gateway.redis_url import ClusterAddress
from gateway.store.base import StoreError
from gateway.store.limits import (
    GRACE,
    REFUSED,
    SHARED,
    Hit,
    MemoryRateLimiter,
    RateLimiter,
    RedisRateLimiter,
    Rule,
    gcra,
    open_rate_limiter,
)
from gateway.store.memory import MemoryKeyspace, MemoryStore
from gateway.store.redis import RedisStore
from gateway.store.redis_cluster import ClusterPipe
from tests.support.commands import recorded_commands
from tests.support.pa import ManualClock
from tests.support.redis_cluster import RedisCluster


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_700_000_000.0)


@pytest.fixture
async def limiter(cache_url: str, clock: ManualClock) -> AsyncIterator[RateLimiter]:
    """A limiter on each backend in turn: memory, then the real Redis (through a RedisStore's connection)."""
    if cache_url == "memory://":
        memory = MemoryRateLimiter(MemoryKeyspace(clock))
        yield memory
        await memory.close()
        return
    store = RedisStore(CacheConfig(url=cache_url), clock=clock)
    yield open_rate_limiter(store)
    await store.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def test_gcra_allows_the_burst_then_one_per_interval() -> None:
    rule = Rule(rate=2.0, burst=3)
    tat = 0
    for _ in range(3):
        tat, wait = gcra(tat, 0, rule)
        assert wait == 0
    assert gcra(tat, 0, rule) == (tat + 500_000, 500_000)
    # Half a second later exactly one more fits.
    tat, wait = gcra(tat, 500_000, rule)
    assert wait == 0
    assert gcra(tat, 500_000, rule)[1] == 500_000


@given(
    rate=st.floats(min_value=0.01, max_value=10_000),
    burst=st.integers(min_value=1, max_value=1_000),
    now=st.integers(min_value=0, max_value=2**51),
)
def test_gcra_from_idle_admits_exactly_burst(rate: float, burst: int, now: int) -> None:
    """Integer microseconds: the burst-th request is never refused by a rounding error."""
    rule = Rule(rate, burst)
    tat: int | None = None
    for _ in range(burst):
        tat, wait = gcra(tat, now, rule)
        assert wait == 0
    assert gcra(tat, now, rule)[1] == rule.interval_us


def test_rule_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="rate > 0"):
        Rule(0, 1)
    with pytest.raises(ValueError, match="burst >= 1"):
        Rule(1, 0)


async def test_s6_hit_allows_burst_then_says_how_long_to_wait(
    limiter: RateLimiter, clock: ManualClock
) -> None:
    assert [await limiter.hit("k", 0.5, 2) for _ in range(2)] == [0.0, 0.0]
    assert await limiter.hit("k", 0.5, 2) == pytest.approx(2.0)
    clock.advance(1.5)
    assert await limiter.hit("k", 0.5, 2) == pytest.approx(0.5)
    clock.advance(0.5)
    assert await limiter.hit("k", 0.5, 2) == 0.0
    assert await limiter.hit("k", 0.5, 2) == pytest.approx(2.0)


async def test_s6_keys_are_independent(limiter: RateLimiter) -> None:
    assert await limiter.hit("a", 1, 1) == 0.0
    assert await limiter.hit("a", 1, 1) > 0
    assert await limiter.hit("b", 1, 1) == 0.0


async def test_s6_hit_all_is_all_or_nothing(limiter: RateLimiter, clock: ManualClock) -> None:
    """A request refused by one limit charges none: the other's budget is untouched."""
    agent, user = Rule(rate=1, burst=3), Rule(rate=1, burst=1)
    assert await limiter.hit_all([Hit("agent", agent), Hit("user", user)]) == [0.0, 0.0]
    for _ in range(5):
        assert await limiter.hit_all([Hit("agent", agent), Hit("user", user)]) == [0.0, pytest.approx(1.0)]
    # The refusals did not eat the agent's budget: two more requests by other users still fit.
    assert await limiter.hit_all([Hit("agent", agent), Hit("user2", user)]) == [0.0, 0.0]
    assert await limiter.hit_all([Hit("agent", agent), Hit("user3", user)]) == [0.0, 0.0]
    assert (await limiter.hit_all([Hit("agent", agent), Hit("user4", user)]))[0] == pytest.approx(1.0)
    clock.advance(1)
    assert await limiter.hit_all([Hit("agent", agent), Hit("user", user)]) == [0.0, 0.0]


async def test_s6_fractional_rates(limiter: RateLimiter, clock: ManualClock) -> None:
    """One request every ten seconds, and a waiting time that is not a whole number of seconds."""
    assert await limiter.hit("slow", 0.1, 1) == 0.0
    clock.advance(2.25)
    assert await limiter.hit("slow", 0.1, 1) == pytest.approx(7.75)


async def test_redis_counters_expire_when_idle_and_hold_no_clear_text(
    redis_store: RedisStore, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    limiter = RedisRateLimiter(redis_store.redis, clock=clock)
    assert await limiter.hit("pact:acme:rl:per_user:abc", 2, 10) == 0.0
    ttl_ms = await redis_client.pttl("pact:acme:rl:per_user:abc")
    assert 0 < ttl_ms <= 500  # back to idle after one interval: nothing left behind
    assert (
        await redis_client.get("pact:acme:rl:per_user:abc")
        == str(int(clock() * 1_000_000) + 500_000).encode()
    )


async def test_redis_refusal_writes_nothing(
    redis_store: RedisStore, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    limiter = RedisRateLimiter(redis_store.redis, clock=clock)
    await limiter.hit("k", 1, 1)
    before = await redis_client.get("k")
    assert await limiter.hit_all([Hit("k", Rule(1, 1)), Hit("other", Rule(1, 1))]) == [1.0, 0.0]
    assert await redis_client.get("k") == before
    assert await redis_client.exists("other") == 0


async def test_limiter_shares_the_stores_connection(redis_store: RedisStore) -> None:
    limiter = open_rate_limiter(redis_store)
    assert isinstance(limiter, RedisRateLimiter)
    await limiter.hit("k", 1, 1)
    with recorded_commands(redis_store.redis) as commands:
        await limiter.hit("k", 1, 1)
    assert commands == ["EVALSHA"]
    await limiter.close()  # a shared connection is not the limiter's to close
    await redis_store.ping()
    assert isinstance(open_rate_limiter(MemoryStore(CacheConfig())), MemoryRateLimiter)


async def test_redis_down_is_a_store_error() -> None:
    store = RedisStore(CacheConfig(url=f"redis://127.0.0.1:{closed_port()}/15"))
    try:
        with pytest.raises(StoreError, match="redis"):
            await RedisRateLimiter(store.redis).hit("k", 1, 1)
    finally:
        await store.close()


async def test_redis_script_is_one_round_trip_for_every_limit(redis_store: RedisStore) -> None:
    limiter = RedisRateLimiter(redis_store.redis)
    await limiter.hit("warm", 1, 1)  # the first call loads the script
    with recorded_commands(redis_store.redis) as commands:
        await limiter.hit_all([Hit("a", Rule(1, 1)), Hit("b", Rule(1, 1)), Hit("c", Rule(1, 1))])
    assert commands == ["EVALSHA"]


async def test_waits_looks_at_a_budget_without_spending_it(limiter: RateLimiter, clock: ManualClock) -> None:
    """A budget of failures is looked at, charging nothing, for an attempt known to have succeeded."""
    rule = Rule(rate=0.5, burst=2)
    hits = [Hit("budget:a", rule), Hit("budget:b", rule)]
    for _ in range(5):
        assert await limiter.waits(hits) == [0.0, 0.0]  # looking costs nothing
    assert await limiter.hit_all([hits[0]]) == [0.0]
    assert await limiter.hit_all([hits[0]]) == [0.0]
    spent = await limiter.waits(hits)
    assert spent[0] == pytest.approx(2.0)  # what the next charge would be told
    assert spent[1] == 0.0
    assert await limiter.hit_all([hits[0]]) == spent[:1]
    clock.advance(2.0)
    assert await limiter.waits(hits) == [0.0, 0.0]


async def test_redis_waits_reads_the_counters_on_their_nodes_clock(redis_store: RedisStore) -> None:
    """Without a given clock, a look at a budget (PEEK) and a charge both run on Redis' own clock."""
    limiter = open_rate_limiter(redis_store)
    hits = [Hit("budget:node-clock", Rule(rate=0.5, burst=2))]
    assert await limiter.waits(hits) == [0.0]
    assert await limiter.hit_all(hits) == [0.0]
    assert await limiter.hit_all(hits) == [0.0]
    assert (await limiter.waits(hits))[0] == pytest.approx(2.0, abs=0.1)


async def test_rfc8628_5_1_a_reservation_takes_the_shared_budget_or_the_grace_all_or_nothing(
    limiter: RateLimiter,
) -> None:
    """One step decides and charges (issue 28 M1); while the shared budget is spent, a subject whose
    grace has a token still passes, and a taken reservation given back leaves no trace (M2). The
    keys share a hash tag, as a reservation's must (one script, on a Redis Cluster too)."""
    slow = Rule(rate=0.001, burst=1)
    own, shared = Hit("{r}own", Rule(rate=0.001, burst=5)), Hit("{r}brand", slow)
    first = await limiter.reserve([own], [shared], [Hit("{r}grace-a", slow)])
    assert first.mode == SHARED
    # The miss marks its grace too.
    assert [hit.key for hit in first.taken] == ["{r}own", "{r}brand", "{r}grace-a"]
    assert [hit.key for hit in first.emptied] == ["{r}brand", "{r}grace-a"]
    refused = await limiter.reserve([own], [shared], [Hit("{r}grace-a", slow)])
    assert refused.mode == REFUSED
    assert refused.taken == ()
    assert refused.waits == pytest.approx((0.0, 1000.0, 1000.0))
    graced = await limiter.reserve([own], [shared], [Hit("{r}grace-b", slow)])
    assert graced.mode == GRACE
    assert [hit.key for hit in graced.taken] == ["{r}own", "{r}grace-b"]
    await limiter.give_back(graced.taken)  # the code was right: as if it had not come
    assert (await limiter.reserve([own], [shared], [Hit("{r}grace-b", slow)])).mode == GRACE
    assert (await limiter.reserve([own], [shared], [Hit("{r}grace-b", slow)])).mode == REFUSED
    # Without a token of its own budget nothing is taken, whatever the shared one has.
    spent = Hit("{r}spent", slow)
    assert (await limiter.reserve([spent])).mode == SHARED
    assert (await limiter.reserve([spent], [Hit("{r}brand-2", slow)])).mode == REFUSED
    assert (await limiter.reserve([], [Hit("{r}brand-2", slow)])).mode == SHARED


async def test_s6_a_charge_held_up_by_a_cluster_outage_counts_from_when_it_runs(
    redis_cluster: RedisCluster,
) -> None:
    """A charge retried through ``CLUSTERDOWN`` is made at its node's time as it finally runs, not
    at the time it was first sent: charged with that older time after a failover, a busy counter
    refused it as over its burst (issue 20: 429s after a kill -9 at a third of the rate)."""
    pipe = ClusterPipe(ClusterAddress.from_url(redis_cluster.url), timeout=3.0)
    limiter = RedisRateLimiter(pipe, tagged=True)
    key, interval, elsewhere = "test:{t0}:counter", 100_000, "{unserved}"
    home = redis_cluster.node_of_key(key)
    try:
        await pipe.ping()
        owner = await asyncio.to_thread(redis_cluster.take_down, elsewhere)
        held = asyncio.ensure_future(limiter.hit_all([Hit(key, Rule(rate=10, burst=2))]))
        await asyncio.sleep(0.5)
        assert not held.done()
        with home.client() as client:
            seconds, micros = client.time()
        redis_cluster.bring_up(elsewhere, owner)
        assert await held == [0.0]
        with home.client() as client:
            charged_at = int(client.get(key)) - interval
        assert charged_at >= seconds * 1_000_000 + micros
    finally:
        await pipe.close()
