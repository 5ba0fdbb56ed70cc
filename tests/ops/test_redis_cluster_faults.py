"""The gateway on a real Redis Cluster under faults (issue 20, item 4): two gateways, one stream of turns.

Each test has a 3 + 3 node cluster of its own (``redis_cluster``) and two replicas of the gateway
over it (``cache.url`` its ``redis+cluster://`` URL, ``cache.wait_replicas: 1``, the cluster
default, and a short ``cache.timeout``), under a :class:`TurnStream` of several personal-agent
users. Each user's conversations live under its owner's hash tag, so the users spread over the
three primaries; a fault is aimed at the primary serving some of them (never the one holding the
§6 per-agent counter where only part of the turns may fail), and the others are the control.

- a primary killed (``kill -9``), or failed over by hand (``CLUSTER FAILOVER`` on its replica):
  no acknowledged reply lost (replayed byte for byte through the gateway, §4.3, and held by the
  new primary), no turn run by the bot beyond its failed attempts; how long its users' turns
  failed is recorded (``record_figure``);
- a primary killed while each of its users' turns is inside a bot call that takes 0.25 s, with
  the default ``pending_ttl`` (issue 27): those users are answered again soon after the cluster
  is healthy, not ``pending_ttl`` after the kill (their releases are sent again), no acknowledged
  reply lost, no message whose reply was stored run again;
- a live reshard of every slot holding a user's conversations, by the steps ``redis-cli --cluster
  reshard`` takes (``SETSLOT IMPORTING``/``MIGRATING``, ``MIGRATE`` the keys, ``SETSLOT NODE``),
  with the same slow bot and default ``pending_ttl``: every turn answered, none held for long,
  and the gateways' ``/metrics`` count ``ASK`` and ``MOVED`` redirects;
- a primary that stops answering (``SIGSTOP``): the users on other primaries are answered
  throughout, with no failed attempt and none held through the stop; only the stopped node's
  users fail;
- the primary holding the per-agent counter stopped: the users on other primaries are still
  answered, uncounted by it (``rate_limits.fail_open``), with no failed attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

import orjson
import pytest
import redis.asyncio as aioredis

from gateway.config import CacheConfig
from gateway.ops.limits import PER_AGENT, subject_digest
from gateway.store import keys
from gateway.store.base import Owner
from gateway.store.slots import key_slot
from tests.ops.conftest import Metered, sample, scrape
from tests.support.figures import record_figure
from tests.support.gateway import Harness
from tests.support.redis_cluster import ClusterNode, RedisCluster
from tests.support.redis_layout import stored_reply
from tests.support.turn_stream import Sent, TurnStream

WORKERS = 8
"""Personal-agent users in the stream: enough that each primary serves some of them."""
TIMEOUT = 1.0
"""``cache.timeout``: a command to a node that does not answer fails after this long."""
RECOVERY_BOUND = 45.0
"""Seconds from the fault until the failed primary's users are answered again. The cluster promotes
the replica about two node timeouts (1 s each) after a kill; with ``wait_replicas: 1`` the new
primary then needs a replica of its own (the killed node restarted, a full sync) before it can
acknowledge a claim. A few seconds on the development machine; generous for a shared, noisy one."""
SETUP_LIMIT = 30.0
"""Seconds the stream gets for its first answers."""
STOP_SECONDS = 5.0
"""How long the stopped primary stays stopped: long enough that a turn held through the stop
takes far longer than any turn on a loaded machine."""
MIGRATION_PAUSE = 1.0
"""Seconds a slot stays migrating with its keys moved, so that turns meet it half done (``ASK``)."""
SLOW_BOT = 0.25
"""Seconds the bot takes per turn in the slow-bot failover test, so that a kill catches turns inside
the bot call (issue 27: those users were then held "still being processed" for ``pending_ttl``)."""
DEFAULT_PENDING_TTL = CacheConfig().pending_ttl
RESHARD_TURN_BOUND = 10.0
"""Seconds a turn may take while the slots move: a slot held migrating for MIGRATION_PAUSE costs its
turns about that plus a second; generous for a loaded machine, far from ``pending_ttl`` (60 s)."""
BACK_AFTER_HEALTHY_BOUND = 20.0
"""Seconds after the cluster is healthy again by which each of the killed primary's users must be
answered again: the target is 2 s; this bound is generous for a loaded two-core machine, and still
far from ``pending_ttl`` (60 s), the wait a dropped release leaves."""


def cluster_turns(url: str, pending_ttl: int | None = 8) -> Callable[[dict[str, Any]], None]:
    """The cluster's URL, a short timeout, and a pending_ttl it allows (it must outlive a turn; None
    for the default). The §6 limits stay the ordinary tests' (1000 turns/s per agent, charged on its
    own node every turn): TurnStream takes no 429, so a charge that a failover holds up must still be
    counted right."""

    def edit(raw: dict[str, Any]) -> None:
        raw["cache"] = {"url": url, "timeout": TIMEOUT, "wait_replicas": 1}
        if pending_ttl is not None:
            raw["cache"]["pending_ttl"] = pending_ttl
        for brand in raw["brands"]:
            brand["upstream"] = {**brand["upstream"], "timeout": 3, "queue_timeout": 0.5}

    return edit


def users() -> list[str]:
    """The stream's users (TurnStream names its workers so)."""
    return [f"user-{index}" for index in range(WORKERS)]


def owner_tag(gw: Harness, sub: str) -> str:
    return keys.owner_tag(Owner("acme", gw.issuer, sub).digest)


def conversation_key_of(gw: Harness, sent: Sent) -> str:
    context_id: str = orjson.loads(sent.reply)["message"]["contextId"]
    return keys.conv_key("acme", context_id, owner_tag(gw, sent.sub))


def placement(cluster: RedisCluster, gw: Harness) -> dict[int, list[str]]:
    """The stream's users by the port of the primary serving their conversations now."""
    placed: dict[int, list[str]] = {}
    for sub in users():
        node = cluster.node_of_key(keys.conv_key("acme", "x", owner_tag(gw, sub)))
        placed.setdefault(node.port, []).append(sub)
    return placed


def per_agent_node(cluster: RedisCluster, gw: Harness) -> ClusterNode:
    """The primary holding the §6 per-agent counter (a slot of its own, charged on every turn)."""
    subject = subject_digest(gw.issuer)
    return cluster.node_of_key(keys.limit_key("acme", PER_AGENT, subject, keys.owner_tag(subject)))


async def two_gateways(
    metered: Metered, cluster: RedisCluster, pending_ttl: int | None = 8
) -> list[tuple[Harness, Any]]:
    return [await metered(cluster.url, edit=cluster_turns(cluster.url, pending_ttl)) for _ in range(2)]


class Aimed(NamedTuple):
    """Where a fault is aimed: the primary serving most of the stream's users, its replica, those
    users, and the stream of turns running through both gateways."""

    victim: ClusterNode
    replica: ClusterNode
    hit: list[str]
    stream: TurnStream


@contextlib.asynccontextmanager
async def turns_aimed_at_the_busiest_primary(
    cluster: RedisCluster, gateways: list[tuple[Harness, Any]]
) -> AsyncIterator[Aimed]:
    """The primary serving most of the stream's users (as the first gateway places them) picked, then
    a stream of turns started through ``gateways`` and given its first ``3 * WORKERS`` answers; the
    stream is cancelled on the way out, whatever happened inside."""
    placed = placement(cluster, gateways[0][0])
    victim = cluster.by_port(max(placed, key=lambda port: len(placed[port])))
    replica = cluster.replica_of(victim)
    stream = TurnStream(
        [harness for harness, _ in gateways], workers=WORKERS, retry_limit=RECOVERY_BOUND + 10
    )
    stream.start()
    try:
        await stream.until_answered(3 * WORKERS, limit=SETUP_LIMIT)
        yield Aimed(victim, replica, placed[victim.port], stream)
    finally:
        await stream.cancel()


def answered_by(stream: TurnStream, subs: list[str], since: float) -> list[Sent]:
    return [sent for sent in stream.answered if sent.sub in subs and sent.answered_at >= since]


async def until_answered_by(
    stream: TurnStream, subs: list[str], count: int, since: float, limit: float
) -> None:
    """Wait (``limit`` s at most) for ``count`` answers to ``subs`` after ``since``."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while len(answered_by(stream, subs, since)) < count:
        await stream.until_answered(0, limit=limit)  # a failed worker fails the test now
        assert loop.time() - started < limit, f"{count} answers to {subs} not within {limit} s"
        await asyncio.sleep(0.05)


async def until(condition: Callable[[], bool], limit: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not await asyncio.to_thread(condition):
        assert loop.time() < deadline, f"not within {limit} s: {what}"
        await asyncio.sleep(0.1)


def is_primary(node: ClusterNode) -> bool:
    with node.client() as client:
        return bool(client.info("replication").get("role") == "master")


async def missing_replies(cluster: RedisCluster, gw: Harness, answered: list[Sent]) -> list[str]:
    """The answered messages whose reply the primary serving their conversation does not hold."""
    clients: dict[str, aioredis.Redis] = {}  # by user: its conversations share their owner's slot
    try:
        missing = []
        for sent in answered:
            if sent.sub not in clients:
                node = await asyncio.to_thread(cluster.node_of_key, conversation_key_of(gw, sent))
                clients[sent.sub] = aioredis.Redis(port=node.port)
            client = clients[sent.sub]
            context_id = orjson.loads(sent.reply)["message"]["contextId"]
            reply = await stored_reply(client, "acme", context_id, sent.message_id, owner_tag(gw, sent.sub))
            if reply != sent.reply:
                missing.append(sent.message_id)
        return missing
    finally:
        for client in clients.values():
            await client.aclose()


@pytest.mark.parametrize("how", ["kill -9", "CLUSTER FAILOVER"])
async def test_a_primary_lost_or_failed_over_under_a_stream_of_turns_loses_no_reply_and_reruns_no_bot_call(
    how: str, redis_cluster: RedisCluster, metered: Metered
) -> None:
    gateways = await two_gateways(metered, redis_cluster)
    gw = gateways[0][0]
    loop = asyncio.get_running_loop()
    async with turns_aimed_at_the_busiest_primary(redis_cluster, gateways) as (victim, replica, hit, stream):
        fault = loop.time()
        if how == "kill -9":
            victim.signal(signal.SIGKILL)
            await until(lambda: is_primary(replica), RECOVERY_BOUND, "the replica promoted")
            # Restarted (its nodes.conf kept), it rejoins as the new primary's replica: until
            # then WAIT 1 holds back every claim there, as it must with one replica a primary.
            victim.start()
        else:
            with replica.client() as client:
                client.execute_command("CLUSTER", "FAILOVER")
            await until(lambda: is_primary(replica), RECOVERY_BOUND, "the replica promoted")
        await until_answered_by(stream, hit, 2 * len(hit), fault, RECOVERY_BOUND)
        recovered = [sent for sent in answered_by(stream, hit, fault) if sent.failures]
        await stream.until_answered(2 * WORKERS, since=loop.time(), limit=RECOVERY_BOUND)
        await stream.stop()

    failed_for = max((sent.answered_at - fault for sent in recovered), default=0.0)
    record_figure(
        "cluster_recovery",
        what=f"Redis Cluster primary {how} under a stream of turns (2 gateways, {WORKERS} users)",
        turns_failed_s=round(failed_for, 2),
        failed_attempts=sum(len(sent.failures) for sent in stream.answered),
        turns=len(stream.answered),
        bound_s=RECOVERY_BOUND,
    )
    await asyncio.to_thread(redis_cluster.wait_healthy)
    assert is_primary(replica)
    assert await missing_replies(redis_cluster, gw, stream.answered) == []
    # The failed primary's users are served by the promoted replica now, so their replies (checked
    # above on the primary serving each conversation) are held by the new primary.
    assert placement(redis_cluster, gw)[replica.port] == hit
    await stream.check_replays()  # through the gateways, from the new primary too
    assert stream.bot_calls_beyond_attempts() == {}


async def test_a_primary_killed_while_its_users_turns_are_in_a_slow_bot_call_holds_none_for_pending_ttl(
    redis_cluster: RedisCluster, metered: Metered
) -> None:
    """Issue 27, item 2, with the default ``pending_ttl`` (60 s) and a bot that takes 0.25 s: a kill
    catches some of its primary's users inside the bot call. Their reply cannot be stored, nor their
    marker released, until the replica is promoted: each is sent again through the failover within
    ``cache.timeout``, and a release that still failed is sent again in the background until it
    goes. So they are answered again soon after the cluster is healthy (not ``pending_ttl`` after
    the kill), no acknowledged reply is lost, and no message whose reply was stored runs again."""
    gateways = await two_gateways(metered, redis_cluster, pending_ttl=None)
    gw = gateways[0][0]
    assert gw.config.cache.pending_ttl == DEFAULT_PENDING_TTL == 60
    gw.bot.latency = SLOW_BOT
    loop = asyncio.get_running_loop()
    async with turns_aimed_at_the_busiest_primary(redis_cluster, gateways) as (victim, replica, hit, stream):
        # Every user of the primary about to die inside a bot call when it dies: the bot holds the
        # calls arriving from now on until the kill, then answers each SLOW_BOT s later.
        gw.bot.gate = asyncio.Event()
        arrived = len(gw.bot.calls)
        await until(
            lambda: set(hit) <= {call.body["user"]["sub"] for call in gw.bot.calls[arrived:]},
            SETUP_LIMIT,
            "a bot call of each of the victim's users",
        )
        fault = loop.time()
        victim.signal(signal.SIGKILL)
        gw.bot.gate.set()
        await until(lambda: is_primary(replica), RECOVERY_BOUND, "the replica promoted")
        victim.start()  # it rejoins as the new primary's replica: WAIT 1 holds claims until then
        await asyncio.to_thread(redis_cluster.wait_healthy)
        healthy = loop.time()
        await until_answered_by(stream, hit, 2 * len(hit), healthy, RECOVERY_BOUND)
        await stream.until_answered(2 * WORKERS, since=loop.time(), limit=RECOVERY_BOUND)
        await stream.stop()

    # Each user of the killed primary: its first answer after the kill, and how long after the cluster
    # was healthy that came (0 if before).
    back = {sub: min(s.answered_at for s in answered_by(stream, [sub], fault)) for sub in hit}
    back_after_healthy = max(max(at - healthy, 0.0) for at in back.values())
    slowest = max(sent.answered_at - sent.started_at for sent in stream.answered)
    calls = Counter(call.body["message_id"] for call in gw.bot.calls)
    # The messages the kill caught inside the bot call: one per user of the killed primary.
    caught = [s for s in stream.answered if s.sub in hit and s.started_at < fault < s.answered_at]
    scraped = [await scrape(ops) for _, ops in gateways]
    late = {
        outcome: sum(sample(text, "pact_store_late_releases_total", outcome=outcome) for text in scraped)
        for outcome in ("released", "abandoned")
    }
    record_figure(
        "cluster_failover_slow_bot",
        what=(
            f"Redis Cluster primary kill -9 with a {SLOW_BOT} s bot and the default pending_ttl "
            f"(2 gateways, {WORKERS} users, {len(hit)} on the killed primary)"
        ),
        healthy_after_kill_s=round(healthy - fault, 2),
        outage_s=round(max(back.values()) - fault, 2),
        back_after_healthy_s=round(back_after_healthy, 2),
        slowest_turn_s=round(slowest, 2),
        messages_caught=len(caught),
        messages_run_twice=sum(1 for count in calls.values() if count > 1),
        late_releases=int(late["released"]),
        turns=len(stream.answered),
    )
    assert sorted(sent.sub for sent in caught) == sorted(hit)
    assert all(sent.failures for sent in caught)  # none could be stored on the dead primary
    assert back_after_healthy < BACK_AFTER_HEALTHY_BOUND, (back_after_healthy, back, healthy - fault)
    assert slowest < DEFAULT_PENDING_TTL / 2, slowest  # none waited for a marker to lapse
    assert late["abandoned"] == 0, late
    assert await missing_replies(redis_cluster, gw, stream.answered) == []
    await stream.check_replays()
    # A message the bot ran again is one whose reply was never stored (its attempt failed): §4.3.
    assert stream.bot_calls_beyond_attempts() == {}


def migrate_slot(cluster: RedisCluster, slot: int) -> None:
    """Move ``slot`` to another primary as ``redis-cli --cluster reshard`` does: mark it importing on
    the target and migrating on the source, ``MIGRATE`` its keys in batches, then, after
    :data:`MIGRATION_PAUSE` with every key moved and the slot still migrating (each turn on it meets
    ``ASK``), assign it to the target on the target, the source and the third primary, in that order."""
    probe = next(f"k{n}" for n in range(1_000_000) if key_slot(f"k{n}") == slot)
    source, target = cluster.migrate(probe)
    time.sleep(MIGRATION_PAUSE)
    cluster.assign(probe, source, target)


async def test_a_live_reshard_of_open_conversations_answers_every_turn_and_follows_ask_and_moved(
    redis_cluster: RedisCluster, metered: Metered
) -> None:
    """Issue 27, item 3, with the default ``pending_ttl`` and a bot that takes 0.25 s: while a slot
    migrates, every script of it meets ``TRYAGAIN`` behind ``ASKING`` (a key it names is not on the
    importing node); each call is tried again, paced, within ``cache.timeout``, and what still
    failed is released in the background, so no turn waits for a marker to lapse. Before, five
    redirects ended each call in a fraction of a second and its dropped release held the message
    for ``pending_ttl`` (60.3 s)."""
    gateways = await two_gateways(metered, redis_cluster, pending_ttl=None)
    gw = gateways[0][0]
    gw.bot.latency = SLOW_BOT
    stream = TurnStream([harness for harness, _ in gateways], workers=WORKERS, retry_limit=SETUP_LIMIT)
    stream.start()
    loop = asyncio.get_running_loop()
    try:
        await stream.until_answered(2 * WORKERS, limit=SETUP_LIMIT)
        slots = sorted({key_slot(keys.conv_key("acme", "x", owner_tag(gw, sub))) for sub in users()})
        started = loop.time()
        for slot in slots:
            await asyncio.to_thread(migrate_slot, redis_cluster, slot)
        ended = loop.time()
        await asyncio.to_thread(redis_cluster.wait_healthy)
        await stream.until_answered(2 * WORKERS, since=loop.time(), limit=SETUP_LIMIT)
        await stream.stop()
    finally:
        await stream.cancel()

    during = [sent for sent in stream.answered if sent.answered_at >= started and sent.started_at <= ended]
    slowest = max(sent.answered_at - sent.started_at for sent in during)
    calls = Counter(call.body["message_id"] for call in gw.bot.calls)
    await stream.check_replays()
    assert stream.bot_calls_beyond_attempts() == {}
    assert slowest < RESHARD_TURN_BOUND, slowest
    scraped = [await scrape(ops) for _, ops in gateways]
    redirects = {
        kind: sum(sample(text, "pact_redis_cluster_redirects_total", kind=kind) for text in scraped)
        for kind in ("ask", "moved")
    }
    assert redirects["ask"] > 0, redirects
    assert redirects["moved"] > 0, redirects
    record_figure(
        "cluster_reshard",
        what=f"live reshard of {len(slots)} slots holding open conversations (2 gateways, {WORKERS} users)",
        reshard_s=round(ended - started, 2),
        turns_during=len(during),
        slowest_turn_s=round(slowest, 2),
        failed_attempts=sum(len(sent.failures) for sent in stream.answered),
        messages_run_twice=sum(1 for count in calls.values() if count > 1),
        late_releases=int(
            sum(sample(text, "pact_store_late_releases_total", outcome="released") for text in scraped)
        ),
        ask_redirects=int(redirects["ask"]),
        moved_redirects=int(redirects["moved"]),
    )


async def partial_coverage_stream(
    cluster: RedisCluster, metered: Metered
) -> tuple[list[tuple[Harness, Any]], TurnStream]:
    """Two gateways and a started stream over ``cluster``, which serves the slots it can.

    A stopped primary is declared failed after the node timeout and its replica promoted a moment
    later; in between, a cluster requiring full coverage refuses every slot (``CLUSTERDOWN``). An
    operator who wants the other slots served through that moment turns the requirement off."""
    for node in cluster.nodes:
        with node.client() as client:
            client.config_set("cluster-require-full-coverage", "no")
    gateways = await two_gateways(metered, cluster)
    stream = TurnStream(
        [harness for harness, _ in gateways], workers=WORKERS, retry_limit=RECOVERY_BOUND + 10
    )
    stream.start()
    return gateways, stream


async def stopped_for(node: ClusterNode, seconds: float) -> tuple[float, float]:
    """Stop ``node`` (``SIGSTOP``) for ``seconds``: when it stopped and when it went on (loop time)."""
    loop = asyncio.get_running_loop()
    node.signal(signal.SIGSTOP)
    stopped = loop.time()
    try:
        await asyncio.sleep(seconds)
    finally:
        node.signal(signal.SIGCONT)
    return stopped, loop.time()


async def test_a_stopped_primary_fails_only_its_own_users_turns_the_others_are_answered_as_before(
    redis_cluster: RedisCluster, metered: Metered
) -> None:
    gateways, stream = await partial_coverage_stream(redis_cluster, metered)
    gw = gateways[0][0]
    try:
        await stream.until_answered(3 * WORKERS, limit=SETUP_LIMIT)
        placed = placement(redis_cluster, gw)
        # Not the per-agent counter's primary: every turn charges that counter, so stopping it slows
        # every user's turns, not only its own (rate_limits.fail_open serves them late: the next test).
        counter = per_agent_node(redis_cluster, gw)
        candidates = [port for port in placed if port != counter.port and len(placed) > 1]
        assert candidates, f"every user on the per-agent counter's primary: {placed}"
        victim = redis_cluster.by_port(max(candidates, key=lambda port: len(placed[port])))
        hit = placed[victim.port]
        spared = [sub for sub in users() if sub not in hit]
        before = [sent.answered_at - sent.started_at for sent in stream.answered if not sent.failures]
        stopped, resumed = await stopped_for(victim, STOP_SECONDS)
        await until_answered_by(stream, hit, 2 * len(hit), resumed, RECOVERY_BOUND)
        await stream.stop()
    finally:
        await stream.cancel()

    during = [sent for sent in stream.answered if stopped + TIMEOUT <= sent.started_at < resumed]
    served = [sent for sent in during if sent.sub in spared]
    assert len(served) >= 2 * len(spared), served
    assert [sent.message_id for sent in served if sent.failures] == []
    usual = max(before)
    slowest = max(sent.answered_at - sent.started_at for sent in served)
    # None waited on the stopped node: a wait there fails the attempt after cache.timeout (none
    # failed, above) or holds the turn until the node goes on, which for a turn counted here is up
    # to STOP_SECONDS - TIMEOUT. How long a turn takes on a loaded machine is no measure of either
    # (1.1 s was seen on two shared cores, issue 27): the bound is the stop itself.
    assert slowest < STOP_SECONDS - TIMEOUT, (slowest, usual)
    # Each of its users was on a message through the stop: none answered before SIGCONT, each only
    # after failed attempts (the node silent; then its replica, promoted, has no replica for WAIT).
    caught = [
        sent
        for sent in stream.answered
        if sent.sub in hit and sent.started_at < resumed - TIMEOUT and sent.answered_at >= stopped + TIMEOUT
    ]
    assert sorted({sent.sub for sent in caught}) == sorted(hit)
    assert all(sent.failures and sent.answered_at >= resumed for sent in caught)
    record_figure(
        "cluster_stopped_node",
        what=f"one primary stopped {STOP_SECONDS} s (SIGSTOP) under a stream of turns",
        spared_users=len(spared),
        stopped_users=len(hit),
        spared_turns_while_stopped=len(served),
        spared_slowest_s=round(slowest, 3),
        usual_slowest_s=round(usual, 3),
    )
    await stream.check_replays()
    assert stream.bot_calls_beyond_attempts() == {}


async def test_a_stopped_primary_holding_the_per_agent_counter_leaves_the_other_users_served_uncounted(
    redis_cluster: RedisCluster, metered: Metered
) -> None:
    """The per-agent §6 counter is in a slot of its own, charged beside every turn: its primary not
    answering is a failure of the limits, not of the turns, so ``rate_limits.fail_open`` (the default)
    serves the users whose conversations live elsewhere, each about ``cache.timeout`` late, logged and
    counted as uncounted; only the users on that primary wait for it."""
    gateways, stream = await partial_coverage_stream(redis_cluster, metered)
    gw = gateways[0][0]
    try:
        await stream.until_answered(3 * WORKERS, limit=SETUP_LIMIT)
        placed = placement(redis_cluster, gw)
        victim = per_agent_node(redis_cluster, gw)
        hit = placed.get(victim.port, [])
        spared = [sub for sub in users() if sub not in hit]
        stopped, resumed = await stopped_for(victim, STOP_SECONDS)
        await stream.until_answered(2 * WORKERS, since=resumed, limit=RECOVERY_BOUND)
        await stream.stop()
    finally:
        await stream.cancel()

    during = [sent for sent in stream.answered if stopped + TIMEOUT <= sent.started_at < resumed - TIMEOUT]
    served = [sent for sent in during if sent.sub in spared]
    assert len(served) >= len(spared), (served, placed)
    assert [sent.message_id for sent in served if sent.failures] == []
    # Until the cluster promotes the stopped primary's replica (about two node timeouts), the counter
    # is out of reach: the turns of that moment were served uncounted, and said so.
    uncounted = [
        sample(await scrape(ops), "pact_store_errors_total", operation="rate_limit") for _, ops in gateways
    ]
    assert sum(uncounted) > 0
    await stream.check_replays()
    assert stream.bot_calls_beyond_attempts() == {}
