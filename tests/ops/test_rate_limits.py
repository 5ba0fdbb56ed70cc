"""§6 rate limits over HTTP, on both backends: "429 with Retry-After when a Provider rate-limits a
personal agent or a (personal agent, sub)".

Time is a :class:`ManualClock` handed to the gateway, so waiting ``Retry-After`` is exact and instant.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse

from gateway.config import (
    CacheConfig,
    CircuitBreakerConfig,
    ConfigError,
    RateLimitsConfig,
    RateRule,
    load_config,
)
from gateway.http.state import METRICS
from gateway.ops.limits import (
    Limit,
    RateLimited,
    RateLimits,
    Reserved,
    a2a_limits,
    retry_after,
    subject_digest,
    wrong_user_code_limits,
)
from gateway.ops.metrics import Metrics
from gateway.redis_url import ClusterAddress
from gateway.store.base import StoreError
from gateway.store.limits import Hit, MemoryRateLimiter, RateLimiter, RedisRateLimiter, Rule
from gateway.store.memory import MemoryKeyspace
from gateway.store.redis import RedisStore
from gateway.store.redis_cluster import ClusterPipe
from tests.support.gateway import OTHER_PA, MakeGateway
from tests.support.pa import ManualClock
from tests.support.redis_cluster import RedisCluster

A2A_JSON = "application/a2a+json"
Edit = Callable[[dict[str, Any]], None]


def limits(
    per_agent: dict[str, Any] | None = None,
    per_user: dict[str, Any] | None = None,
    **brand_overrides: dict[str, Any],
) -> Edit:
    """Set the top-level ``rate_limits`` (loose where not given) and per-Brand overrides."""

    def edit(raw: dict[str, Any]) -> None:
        raw["rate_limits"] = {
            "per_agent": per_agent or {"rate": 1000, "burst": 1000},
            "per_user": per_user or {"rate": 1000, "burst": 1000},
        }
        for brand in raw["brands"]:
            if brand["id"] in brand_overrides:
                brand["rate_limits"] = brand_overrides[brand["id"]]

    return edit


async def bare_429(response: ClientResponse) -> int:
    """§6: not an A2A error: no envelope, no A2A content type; ``Retry-After`` in whole seconds."""
    assert response.status == 429
    assert await response.read() == b""
    assert response.headers.get("Content-Type", "") != A2A_JSON
    value = response.headers["Retry-After"]
    assert value.isdigit()
    assert int(value) >= 1
    return int(value)


async def ok(response: ClientResponse) -> None:
    assert response.status == 200, await response.read()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_700_000_000.0)


async def test_s6_per_user_limit_answers_bare_429_with_retry_after(
    make_gateway: MakeGateway, cache_url: str, clock: ManualClock
) -> None:
    gw = await make_gateway(cache_url, edit=limits(per_user={"rate": 0.25, "burst": 2}), clock=clock)
    await ok(await gw.send(message_id="m-1"))
    await ok(await gw.send(message_id="m-2"))
    assert await bare_429(await gw.send(message_id="m-3")) == 4
    assert len(gw.bot.calls) == 2  # refused before the body was read: the bot never saw it
    # Another sub of the same personal agent has its own budget.
    await ok(await gw.send(message_id="m-4", sub="bob"))
    # Not yet: 0.1 s short still says wait (rounded up to a whole second, never 0).
    clock.advance(3.9)
    assert await bare_429(await gw.send(message_id="m-3")) == 1
    clock.advance(0.1)
    await ok(await gw.send(message_id="m-3"))
    app = gw.client.app
    assert app is not None
    refusals = app[METRICS].registry.get_sample_value(
        "pact_rate_limited_total", {"brand": "acme", "limit": "per_user"}
    )
    assert refusals == 2.0


async def test_s6_per_agent_limit_counts_all_its_users(
    make_gateway: MakeGateway, cache_url: str, clock: ManualClock
) -> None:
    gw = await make_gateway(cache_url, edit=limits(per_agent={"rate": 0.5, "burst": 3}), clock=clock)
    for sub in ("alice", "bob", "carol"):
        await ok(await gw.send(sub=sub))
    assert await bare_429(await gw.send(sub="dave")) == 2
    # Another personal agent is not held to this one's budget.
    await ok(await gw.send(sub="dave", issuer=OTHER_PA))
    clock.advance(2)
    await ok(await gw.send(sub="dave"))


async def test_s6_per_brand_override_and_separate_budgets(
    make_gateway: MakeGateway, cache_url: str, clock: ManualClock
) -> None:
    edit = limits(per_user={"rate": 0.1, "burst": 1}, globex={"per_user": {"burst": 3}})
    gw = await make_gateway(cache_url, edit=edit, clock=clock)
    await ok(await gw.send(brand="acme"))
    assert await bare_429(await gw.send(brand="acme")) == 10
    # globex keeps the top-level rate but its own burst, and acme's use does not count there.
    for _ in range(3):
        await ok(await gw.send(brand="globex"))
    assert await bare_429(await gw.send(brand="globex")) == 10


async def test_s6_a_disabled_rule_never_refuses(make_gateway: MakeGateway, clock: ManualClock) -> None:
    edit = limits(per_user={"rate": 0.1, "burst": 1}, acme={"per_user": {"enabled": False}})
    gw = await make_gateway(edit=edit, clock=clock)
    for _ in range(5):
        await ok(await gw.send())


async def test_s6_every_operation_is_limited_after_auth_and_brand_before_body(
    make_gateway: MakeGateway, cache_url: str, clock: ManualClock
) -> None:
    """Order: route → authentication (401) → Brand (404) → rate limit (429) → body."""
    gw = await make_gateway(cache_url, edit=limits(per_user={"rate": 0.1, "burst": 1}), clock=clock)
    await ok(await gw.client.get("/a2a/acme/tasks", headers=gw.auth()))
    # A garbage body loses to the limit: 429, not INVALID_PARAMS.
    response = await gw.client.post("/a2a/acme/message:send", data=b"{garbage", headers=gw.auth())
    assert await bare_429(response) == 10
    too_large = b"x" * (gw.config.limits.max_body_bytes + 1)
    assert (
        await bare_429(await gw.client.post("/a2a/acme/message:send", data=too_large, headers=gw.auth()))
        == 10
    )
    assert await bare_429(await gw.client.get("/a2a/acme/tasks/t-1", headers=gw.auth())) == 10
    # Authentication and the Brand lookup come first, and cost nothing.
    assert (await gw.client.get("/a2a/acme/tasks")).status == 401
    assert (await gw.client.get("/a2a/nobody/tasks", headers=gw.auth())).status == 404
    # Unmatched routes are answered before authentication, so before any limit.
    assert (await gw.client.get("/a2a/acme/nothing-here", headers=gw.auth())).status == 404
    clock.advance(10)
    await ok(await gw.client.get("/a2a/acme/tasks", headers=gw.auth()))


async def test_s6_a_bad_body_within_budget_is_400_and_counts(
    make_gateway: MakeGateway, cache_url: str, clock: ManualClock
) -> None:
    """``message:send`` charges a bad body on its own (the turn never begins): it uses budget like any."""
    gw = await make_gateway(cache_url, edit=limits(per_user={"rate": 0.5, "burst": 2}), clock=clock)
    response = await gw.client.post("/a2a/acme/message:send", data=b"{garbage", headers=gw.auth())
    assert response.status == 400
    assert orjson.loads(await response.read())["error"]["details"][0]["reason"] == "INVALID_PARAMS"
    await ok(await gw.send(message_id="m-1"))
    assert await bare_429(await gw.send(message_id="m-2")) == 2
    assert len(gw.bot.calls) == 1


async def test_s6_a_turn_charges_both_limits_or_neither(
    make_gateway: MakeGateway, cache_url: str, clock: ManualClock
) -> None:
    """In the turn's own store step too: alice's refusals leave her personal agent's budget whole."""
    edit = limits(per_agent={"rate": 0.5, "burst": 3}, per_user={"rate": 0.25, "burst": 1})
    gw = await make_gateway(cache_url, edit=edit, clock=clock)
    await ok(await gw.send(message_id="m-1"))
    for _ in range(5):
        assert await bare_429(await gw.send(message_id="m-2")) == 4
    await ok(await gw.send(sub="bob"))
    await ok(await gw.send(sub="carol"))
    assert await bare_429(await gw.send(sub="dave")) == 2
    clock.advance(4)
    # The refused turn left no in-flight marker: its retry runs, and the bot sees it once.
    await ok(await gw.send(message_id="m-2"))
    assert [call.body["message_id"] for call in gw.bot.calls].count("m-2") == 1


async def test_s6_a_turn_refused_by_its_personal_agents_limit_claims_nothing(
    make_gateway: MakeGateway, cache_url: str, clock: ManualClock
) -> None:
    """§6 per personal agent: a bare 429 with ``Retry-After``; on Redis its counter is in a slot of
    its own, charged beside the turn's script, so the turn that script claimed is released (and the
    person's charge given back): the retry after the wait runs, and the bot sees it once."""
    gw = await make_gateway(cache_url, edit=limits(per_agent={"rate": 0.5, "burst": 1}), clock=clock)
    first = await gw.send(message_id="m-1")
    await ok(first)
    context_id = orjson.loads(await first.read())["message"]["contextId"]
    assert await bare_429(await gw.send(message_id="m-2", context_id=context_id)) == 2
    assert await bare_429(await gw.send(message_id="m-3")) == 2
    clock.advance(2)
    await ok(await gw.send(message_id="m-2", context_id=context_id))
    clock.advance(2)
    await ok(await gw.send(message_id="m-3"))
    assert [call.body["message_id"] for call in gw.bot.calls] == ["m-1", "m-2", "m-3"]


async def test_s6_refused_requests_do_not_use_up_the_budget(
    make_gateway: MakeGateway, cache_url: str, clock: ManualClock
) -> None:
    """A personal agent that keeps retrying early is not pushed further back."""
    gw = await make_gateway(cache_url, edit=limits(per_user={"rate": 0.5, "burst": 1}), clock=clock)
    await ok(await gw.send())
    for _ in range(10):
        assert await bare_429(await gw.send()) == 2
    clock.advance(2)
    await ok(await gw.send())


async def test_s6_store_down_fails_open_by_default(make_gateway: MakeGateway) -> None:
    """``rate_limits.fail_open: true``: a Redis outage does not lock personal agents out of the limiter.

    ``message:send`` still needs the store for its conversation, so it is ``INTERNAL``; operations
    that do not touch the store are served.
    """
    gw = await make_gateway(f"redis://127.0.0.1:{closed_port()}/15")
    await ok(await gw.client.get("/a2a/acme/tasks", headers=gw.auth()))
    response = await gw.send()
    assert response.status == 500
    assert orjson.loads(await response.read())["error"]["details"][0]["reason"] == "INTERNAL"
    # A bad body never needs the conversation store: its limits fail open, and the body answers.
    response = await gw.client.post("/a2a/acme/message:send", data=b"{garbage", headers=gw.auth())
    assert response.status == 400


async def test_s6_store_down_fail_closed_is_internal_not_429(make_gateway: MakeGateway) -> None:
    def closed(raw: dict[str, Any]) -> None:
        raw["rate_limits"]["fail_open"] = False

    gw = await make_gateway(f"redis://127.0.0.1:{closed_port()}/15", edit=closed)
    response = await gw.client.get("/a2a/acme/tasks", headers=gw.auth())
    assert response.status == 500
    assert response.headers["Content-Type"] == A2A_JSON
    error = orjson.loads(await response.read())["error"]
    assert (error["message"], error["details"][0]["reason"]) == ("Internal error", "INTERNAL")


# The rules and the service, without HTTP.


def test_retry_after_is_whole_seconds_rounded_up_never_zero() -> None:
    assert [retry_after(w) for w in (0.0, 0.001, 1.0, 1.001, 9.5)] == [1, 1, 1, 2, 10]


def test_a2a_limits_hash_the_subjects() -> None:
    settings = RateLimitsConfig(per_agent=RateRule(50, 100), per_user=RateRule(2, 10))
    agent, user = a2a_limits(settings, "https://pa.example", "user-4471")
    assert (agent.name, agent.rule, agent.subject) == (
        "per_agent",
        Rule(50, 100),
        subject_digest("https://pa.example"),
    )
    assert (user.name, user.rule) == ("per_user", Rule(2, 10))
    assert "user-4471" not in user.subject
    assert user.subject != subject_digest("https://pa.example", "user-4472")
    off = RateLimitsConfig(per_agent=RateRule(1, 1, enabled=False), per_user=RateRule(1, 1, enabled=False))
    assert a2a_limits(off, "https://pa.example", "u") == []


class BrokenLimiter(RateLimiter):
    async def hit_all(self, hits: Any) -> list[float]:
        raise StoreError("redis: ConnectionError")

    async def waits(self, hits: Any) -> list[float]:
        raise StoreError("redis: ConnectionError")

    async def reserve(self, own: Any, shared: Any = (), grace: Any = ()) -> Any:
        raise StoreError("redis: ConnectionError")

    async def give_back(self, hits: Any) -> None:
        raise StoreError("redis: ConnectionError")

    async def close(self) -> None:
        return None


async def test_metrics_count_refusals_by_brand_and_limit_and_store_errors(clock: ManualClock) -> None:
    metrics = Metrics()
    service = RateLimits(MemoryRateLimiter(MemoryKeyspace(clock)), metrics=metrics)
    settings = RateLimitsConfig(per_agent=RateRule(1, 5), per_user=RateRule(1, 1))
    await service.check_a2a("acme", settings, "https://pa.example", "alice")
    with pytest.raises(RateLimited) as refused:
        await service.check_a2a("acme", settings, "https://pa.example", "alice")
    assert (refused.value.retry_after, refused.value.limit) == (1, "per_user")
    sample = metrics.registry.get_sample_value
    assert sample("pact_rate_limited_total", {"brand": "acme", "limit": "per_user"}) == 1.0
    broken = RateLimits(BrokenLimiter(), metrics=metrics)
    await broken.check_a2a("acme", settings, "https://pa.example", "alice")  # fail open: served
    assert sample("pact_store_errors_total", {"operation": "rate_limit"}) == 1.0


def test_a2a_charge_is_named_once_per_identity_and_bounded() -> None:
    """The subject digests and keys of a repeat caller come from a bounded LRU, not recomputed."""
    service = RateLimits(MemoryRateLimiter(MemoryKeyspace(ManualClock())), identities=2)
    settings = RateLimitsConfig(per_agent=RateRule(1, 5), per_user=RateRule(1, 1))
    alice = service.a2a_charge("acme", settings, "https://pa.example", "alice")
    assert alice.names == ("per_agent", "per_user")
    assert [hit.key for hit in alice.hits] == [
        f"pact:acme:rl:per_agent:{subject_digest('https://pa.example')}",
        f"pact:acme:rl:per_user:{subject_digest('https://pa.example', 'alice')}",
    ]
    assert service.a2a_charge("acme", settings, "https://pa.example", "alice") is alice
    bob = service.a2a_charge("acme", settings, "https://pa.example", "bob")
    assert service.a2a_charge("acme", settings, "https://pa.example", "alice") is alice  # most recent now
    service.a2a_charge("globex", settings, "https://pa.example", "alice")  # evicts bob, the least recent
    assert service.a2a_charge("acme", settings, "https://pa.example", "bob") is not bob
    assert service.a2a_charge("acme", settings, "https://pa.example", "bob") == bob
    # Other rules for the same identity are never served from the cache.
    stricter = RateLimitsConfig(per_agent=RateRule(1, 5), per_user=RateRule(1, 1, enabled=False))
    assert service.a2a_charge("acme", stricter, "https://pa.example", "alice").names == ("per_agent",)


async def test_limits_are_reusable_for_endpoints_without_a_pa_identity(clock: ManualClock) -> None:
    """The Delegated profile's OAuth endpoints will limit by device code or client address."""
    limiter = MemoryRateLimiter(MemoryKeyspace(clock))
    service = RateLimits(limiter)
    poll = Limit("token_poll", subject_digest("dc_9f3c"), Rule(rate=0.2, burst=1))
    await service.enforce("acme", [poll], fail_open=True)
    with pytest.raises(RateLimited) as refused:
        await service.enforce("acme", [poll], fail_open=True)
    assert refused.value.retry_after == 5
    with pytest.raises(StoreError):
        await RateLimits(BrokenLimiter()).enforce("acme", [poll], fail_open=False)
    assert await limiter.hit_all(
        [Hit("pact:acme:rl:token_poll:" + subject_digest("dc_9f3c"), poll.rule)]
    ) == [pytest.approx(5.0)]


# Configuration.


def minimal(**extra: Any) -> dict[str, Any]:
    brand = {
        "id": "acme",
        "name": "A",
        "description": "d",
        "version": "1",
        "upstream": {"url": "http://bot/"},
    }
    return {
        "public_url": "https://gw.test",
        "provider": {"organization": "P", "url": "https://p.test", "audience": "aud"},
        "personal_agents": {"policy": "open"},
        "brands": [{**brand, **extra.pop("brand", {})}],
        **extra,
    }


def test_config_defaults_documented_in_the_readme() -> None:
    config = load_config(minimal(), {})
    assert config.rate_limits == RateLimitsConfig(
        per_agent=RateRule(rate=50.0, burst=100), per_user=RateRule(rate=2.0, burst=10), fail_open=True
    )
    assert config.brands["acme"].rate_limits == config.rate_limits
    upstream = config.brands["acme"].upstream
    # Sized for a bot of 1 to 5 s a turn: 2000 in flight is 400 to 2000 turns/s (docs/operations.md,
    # "Sizing for a slow bot").
    assert (upstream.max_concurrency, upstream.queue_timeout) == (2000, 1.0)
    assert (config.limits.max_bot_calls, config.listen.backlog) == (4000, 4096)
    assert upstream.circuit_breaker == CircuitBreakerConfig(
        enabled=True, failures=5, window=30.0, cooldown=15.0
    )


def test_config_brand_overrides_setting_by_setting() -> None:
    raw = minimal(
        rate_limits={"per_user": {"rate": 5, "burst": 20}, "fail_open": False},
        brand={"rate_limits": {"per_user": {"burst": 3}, "per_agent": {"enabled": False}}},
    )
    config = load_config(raw, {})
    assert config.rate_limits.per_user == RateRule(rate=5.0, burst=20)
    assert config.brands["acme"].rate_limits == RateLimitsConfig(
        per_agent=RateRule(rate=50.0, burst=100, enabled=False),
        per_user=RateRule(rate=5.0, burst=3),
        fail_open=False,
    )


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (minimal(rate_limits={"per_user": {"rate": 0}}), "rate_limits.per_user.rate"),
        (minimal(rate_limits={"per_agent": {"burst": 0}}), "rate_limits.per_agent.burst"),
        (minimal(rate_limits={"per_host": {}}), "rate_limits.per_host"),
        (minimal(brand={"rate_limits": {"per_user": {"rate": -1}}}), "brands[0].rate_limits.per_user.rate"),
        (
            minimal(brand={"upstream": {"url": "http://b/", "max_concurrency": 0}}),
            "brands[0].upstream.max_concurrency",
        ),
        (
            minimal(brand={"upstream": {"url": "http://b/", "circuit_breaker": {"failures": 0}}}),
            "brands[0].upstream.circuit_breaker.failures",
        ),
        (minimal(limits={"max_bot_calls": 0}), "limits.max_bot_calls"),
        (minimal(limits={"max_bot_calls": "many"}), "limits.max_bot_calls"),
        (minimal(listen={"backlog": 0}), "listen.backlog"),
        (minimal(listen={"backlog": 70000}), "listen.backlog"),
    ],
)
def test_config_rejects_bad_limits_with_their_path(raw: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(raw, {})
    assert error.value.path == path


async def test_rfc8628_5_1_a_failure_budget_is_reserved_given_back_and_says_when_it_ran_out(
    clock: ManualClock,
) -> None:
    metrics = Metrics()
    service = RateLimits(MemoryRateLimiter(MemoryKeyspace(clock)), metrics=metrics)
    settings = RateLimitsConfig(wrong_user_code_per_user=RateRule(0.01, 2))
    budgets = wrong_user_code_limits(settings, "jane", "192.0.2.1")
    assert [limit.name for limit in budgets.own] == [
        "wrong_user_code_per_user",
        "wrong_user_code_per_address",
    ]
    assert [limit.name for limit in budgets.shared] == ["wrong_user_code_per_brand"]
    assert [limit.name for limit in budgets.grace] == ["wrong_user_code_grace"] * 2
    # A right code's token comes back: only failures spend the budget.
    for _ in range(5):
        await service.give_back(await service.reserve("acme", budgets, fail_open=True))
    assert (await service.reserve("acme", budgets, fail_open=True)).emptied == ()
    assert (await service.reserve("acme", budgets, fail_open=True)).emptied == ("wrong_user_code_per_user",)
    with pytest.raises(RateLimited) as paused:
        await service.reserve("acme", budgets, fail_open=True)
    assert paused.value.limit == "wrong_user_code_per_user"
    assert paused.value.retry_after == 100
    sample = metrics.registry.get_sample_value
    assert sample("pact_rate_limited_total", {"brand": "acme", "limit": "wrong_user_code_per_user"}) == 1.0
    broken = RateLimits(BrokenLimiter(), metrics=metrics)
    reserved = await broken.reserve("acme", budgets, fail_open=True)  # cannot count: served, as A2A
    assert reserved.taken == ()
    with pytest.raises(StoreError):
        await broken.reserve("acme", budgets, fail_open=False)


async def test_rfc8628_5_1_concurrent_reservations_on_a_redis_cluster_take_no_more_than_the_budgets(
    redis_cluster: RedisCluster,
) -> None:
    """Issue 28 M1 on a Redis Cluster: a reservation's counters (per user, per address, the Brand's,
    the graces) share the Brand's hash tag, so one script decides it on one node; 20 concurrent
    reservations of one account at one address take 5 tokens (its budget), never more."""
    pipe = ClusterPipe(ClusterAddress.from_url(redis_cluster.url), timeout=3.0)
    service = RateLimits(RedisRateLimiter(pipe, tagged=True))
    settings = RateLimitsConfig(
        wrong_user_code_per_user=RateRule(0.001, 5), wrong_user_code_per_address=RateRule(0.001, 10)
    )
    budgets = wrong_user_code_limits(settings, "jane", "192.0.2.1")
    try:
        outcomes = await asyncio.gather(
            *(service.reserve("acme", budgets, fail_open=False) for _ in range(20)), return_exceptions=True
        )
        taken = [outcome for outcome in outcomes if isinstance(outcome, Reserved)]
        assert len(taken) == 5
        assert all(isinstance(outcome, RateLimited) for outcome in outcomes if outcome not in taken)
        await service.give_back(taken[0])
        assert isinstance(await service.reserve("acme", budgets, fail_open=False), Reserved)
    finally:
        await pipe.close()


async def test_s6_a_per_agent_counter_that_cannot_be_charged_serves_the_turn_uncounted(
    make_gateway: MakeGateway,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 20: with the per-agent counter in a slot of its own (a Redis Cluster node of its own), its
    node not answering is a store failure of the limits, not of the turn: ``fail_open`` (the default)
    serves the turn, logged and counted as any limit the store could not count."""

    async def node_down(*_: object) -> dict[str, int]:
        raise StoreError("redis: 127.0.0.1:7002: the node did not answer")

    monkeypatch.setattr("gateway.store.redis.charge_by_slot", node_down)
    # As on a cluster: each script keeps to one slot, the per-agent counter charged by one of its own.
    store = RedisStore(CacheConfig(url=redis_url), reads_previous=False, slot_bound=True)
    try:
        gw = await make_gateway(redis_url, store=store)
        response = await gw.send()
    finally:
        await store.close()
    assert response.status == 200
    # Logged with the store's own reason, which names the node.
    assert "rate limits not counted (serving anyway): redis: 127.0.0.1:7002: " in caplog.text
    app = gw.client.app
    assert app is not None
    assert app[METRICS].registry.get_sample_value("pact_store_errors_total", {"operation": "rate_limit"}) == 1
