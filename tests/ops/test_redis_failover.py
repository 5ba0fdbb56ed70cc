"""Redis failover (issue 12, deliverable 2 and row 6): real servers on loopback, a real gateway over HTTP.

Each test starts its own ``redis-server`` processes (a primary, a replica, a sentinel) on free
ports under its tmp dir, with no persistence, and stops them when it ends. The gateway finds the
primary through Sentinel (``redis+sentinel://``), which by default waits for one replica to hold
each claim and each reply (``cache.wait_replicas``), so what a failover promotes holds what clients
were told.

``SENTINEL FAILOVER`` promotes the replica at once but leaves the old primary writable for about
ten seconds more; the gateway must move over without waiting for that, and must not lose to it
what it wrote in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from aiohttp.test_utils import TestClient
from redis.exceptions import RedisError

from tests.ops.conftest import Metered
from tests.support.figures import record_figure
from tests.support.gateway import Harness, MakeGateway
from tests.support.redis_layout import conversation_key, stored_reply
from tests.support.redis_servers import RedisServer, RedisServers, wait_for
from tests.support.turn_stream import Sent, TurnStream

SERVICE = "pact"
RECOVERY_BOUND = 45.0
"""Seconds from ``SENTINEL FAILOVER`` until turns are answered again. Sentinel names the new
primary within a second or so, but with one replica the new primary has none until Sentinel turns
the old primary into its replica (at least 8 s after the switch, on Sentinel's 10 s look at it,
then a full sync), and until then ``wait_replicas: 1`` holds every claim and reply back: about
17 s on the development machine. Generous, for a shared and noisy one."""
SETUP_LIMIT = 30.0
"""Seconds the replica and the sentinel get to see each other before a test starts."""


@dataclass
class Cluster:
    primary: RedisServer
    replica: RedisServer
    sentinel: RedisServer

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel.port}/{SERVICE}/0"

    async def primary_port(self) -> int:
        """The primary's port as the sentinel names it now."""
        client = self.sentinel.client()
        try:
            named = await client.sentinel_get_master_addr_by_name(SERVICE)
        finally:
            await client.aclose()
        assert isinstance(named, tuple), named
        return int(named[1])

    async def switched(self) -> bool:
        return await self.primary_port() == self.replica.port

    async def fail_over(self) -> None:
        """``SENTINEL FAILOVER``, retried while the sentinel has no replica it deems good yet."""
        client = self.sentinel.client()
        refusals: list[str] = []

        async def accepted() -> bool:
            try:
                await client.sentinel_failover(SERVICE)
            except RedisError as exc:
                refusals.append(str(exc))
                return False
            return True

        try:
            await wait_for(accepted, SETUP_LIMIT, "the sentinel accepting SENTINEL FAILOVER")
        finally:
            await client.aclose()
        assert all("NOGOODSLAVE" in refusal or "INPROG" in refusal for refusal in refusals), refusals


async def replica_in_sync(replica: RedisServer) -> bool:
    client = replica.client()
    try:
        info: dict[str, Any] = await client.info("replication")
    finally:
        await client.aclose()
    return info.get("master_link_status") == "up"


@pytest.fixture
async def cluster(redis_servers: RedisServers) -> Cluster:
    primary = await redis_servers.server("primary")
    replica = await redis_servers.server("replica", "--replicaof", "127.0.0.1", str(primary.port))
    await wait_for(lambda: replica_in_sync(replica), SETUP_LIMIT, "the replica in sync")
    sentinel = await redis_servers.sentinel("sentinel", primary, SERVICE)
    cluster = Cluster(primary, replica, sentinel)

    async def sees_the_replica() -> bool:
        client = sentinel.client()
        try:
            replicas = await client.sentinel_slaves(SERVICE)
        finally:
            await client.aclose()
        return any(known["port"] == replica.port and not known["is_sdown"] for known in replicas)

    await wait_for(sees_the_replica, SETUP_LIMIT, "the sentinel seeing the replica")
    return cluster


def quick_turns(url: str, **cache: Any) -> Callable[[dict[str, Any]], None]:
    """The gateway's settings here: the cluster's URL, short timeouts, and a pending_ttl they allow."""

    def edit(raw: dict[str, Any]) -> None:
        raw["cache"] = {"url": url, "timeout": 1.0, "pending_ttl": 8, **cache}
        for brand in raw["brands"]:
            brand["upstream"] = {**brand["upstream"], "timeout": 3, "queue_timeout": 0.5}

    return edit


async def test_sentinel_failover_under_a_stream_of_turns_loses_no_reply_and_reruns_no_bot_call(
    cluster: Cluster, make_gateway: MakeGateway
) -> None:
    # Two replicas of the gateway over the one Sentinel-watched store: every retry lands on the other.
    replicas = [await make_gateway(cluster.url, edit=quick_turns(cluster.url)) for _ in range(2)]
    stream = TurnStream(replicas, workers=4, retry_limit=RECOVERY_BOUND + 10)
    stream.start()
    try:
        await stream.until_answered(20, limit=SETUP_LIMIT)
        loop = asyncio.get_running_loop()
        failed_over = loop.time()
        await cluster.fail_over()
        await wait_for(cluster.switched, RECOVERY_BOUND, "the sentinel naming the new primary")
        # Recovered: turns answered after the switch, by the new primary.
        await stream.until_answered(20, since=loop.time(), limit=RECOVERY_BOUND - (loop.time() - failed_over))
        record_figure(
            "recovery",
            what="Sentinel failover under a stream of turns",
            seconds=round(loop.time() - failed_over, 2),
            bound_s=RECOVERY_BOUND,
        )
        await stream.stop()
    finally:
        await stream.cancel()

    assert await cluster.switched()
    # What the old primary took in after the promotion is lost once Sentinel makes it a replica
    # (it then copies the new primary): only after that does a lost reply show.
    await wait_for(lambda: replica_in_sync(cluster.primary), SETUP_LIMIT, "the old primary rejoining")
    assert await missing_on(cluster.replica, stream.answered) == []
    await stream.check_replays()  # through the gateway, from the new primary
    assert stream.bot_calls_beyond_attempts() == {}
    assert len(stream.answered) >= 40


async def missing_on(server: RedisServer, answered: list[Sent]) -> list[str]:
    """The answered messages whose reply ``server`` does not hold, byte for byte."""
    client = server.client()
    try:
        missing = []
        for sent in answered:
            context_id = orjson.loads(sent.reply)["message"]["contextId"]
            if await stored_reply(client, "acme", context_id, sent.message_id) != sent.reply:
                missing.append(sent.message_id)
        return missing
    finally:
        await client.aclose()


async def test_readyz_is_not_ready_while_no_primary_answers(cluster: Cluster, metered: Metered) -> None:
    """And, with ``wait_replicas: 1`` (the default here), not while the primary has no replica either."""
    lenient, lenient_ops = await metered(cluster.url, edit=quick_turns(cluster.url, wait_replicas=0))
    _, strict_ops = await metered(cluster.url, edit=quick_turns(cluster.url))

    def failing(ops: TestClient[Any, Any], *whys: str) -> Callable[[], Awaitable[bool]]:
        """Whether ``/readyz`` fails on the store for one of ``whys``; with none, whether it is ready."""

        async def check() -> bool:
            response = await ops.get("/readyz")
            body: dict[str, Any] = orjson.loads(await response.read())
            if not whys:
                return response.status == 200 and body == {"status": "ready"}
            return (
                response.status == 503
                and body["failing"].keys() == {"store"}
                and body["failing"]["store"] in whys
            )

        return check

    for ops in (lenient_ops, strict_ops):
        assert await failing(ops)()
    cluster.primary.kill()
    # Down, and not yet replaced: the sentinel names it until it has been silent for a second
    # (down-after-milliseconds), then names none until the replica is promoted.
    for ops in (lenient_ops, strict_ops):
        await wait_for(
            failing(ops, "redis: ConnectionRefusedError", "redis: no sentinel names a primary"),
            RECOVERY_BOUND,
            "503 with the primary gone",
        )
    await wait_for(failing(lenient_ops), RECOVERY_BOUND, "/readyz 200 once the replica is promoted")
    assert await cluster.switched()
    assert (await lenient.send()).status == 200
    # The promoted replica has no replica of its own: turns waiting for one cannot be served.
    await wait_for(
        failing(strict_ops, "redis: 0 of 1 replicas acknowledged"), RECOVERY_BOUND, "503, no replica left"
    )


# --- row 6: a primary demoted behind an address that stays the same ------------------------------


async def test_s4_turns_recover_when_the_primary_behind_a_fixed_address_is_demoted(
    redis_servers: RedisServers, make_gateway: MakeGateway
) -> None:
    """As a Service name or a DNS record does after a failover: new connections reach the new primary,
    and the old connection answers READONLY. Without reconnecting on READONLY, every turn fails."""
    old = await redis_servers.server("old")
    new = await redis_servers.server("new", "--replicaof", "127.0.0.1", str(old.port))
    await wait_for(lambda: replica_in_sync(new), SETUP_LIMIT, "the replica in sync")
    address = await redis_servers.proxy(old.port)
    gw = await make_gateway(address.url(0))
    assert await _status(gw, "m-1", None) == 200
    context_id: str = gw.bot.calls[0].body["conversation_id"]
    await wait_for(lambda: _replicated(new, context_id), SETUP_LIMIT, "the conversation on the replica")

    await _replicate(new, "NO", "ONE")
    await _replicate(old, "127.0.0.1", str(new.port))
    address.target_port = new.port

    # The turn that meets READONLY fails; the next reconnects and reaches the new primary.
    outcomes = [await _status(gw, f"m-{n}", context_id) for n in range(2, 5)]
    assert outcomes in ([500, 200, 200], [200, 200, 200]), outcomes
    assert await _status(gw, "m-1", None) == 200  # the first turn's reply, replayed from the new primary
    assert len(gw.bot.calls) == 1 + outcomes.count(200)


async def _replicate(server: RedisServer, host: str, port: str) -> None:
    """``REPLICAOF host port``; ``"NO", "ONE"`` makes ``server`` a primary."""
    client = server.client()
    try:
        await client.replicaof(host, port)
    finally:
        await client.aclose()


async def _replicated(replica: RedisServer, context_id: str) -> bool:
    client: aioredis.Redis = replica.client()
    try:
        return await conversation_key(client, "acme", context_id) is not None
    finally:
        await client.aclose()


async def _status(gw: Harness, message_id: str, context_id: str | None) -> int:
    response = await gw.send("Where is order A-10001?", message_id=message_id, context_id=context_id)
    await response.read()
    return response.status
