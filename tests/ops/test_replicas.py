"""Several replicas, one truth: two gateway instances, each with its own RedisStore on one Redis
(and, issue 20, on one Redis Cluster).

Each ``make_gateway(shared_url)`` is an independent app that opens its own connection pool,
as two pods would; they share only the Redis and the bot. Conversations (§4.2), retries and
in-flight markers (§4.3) and rate limits (§6) must behave as if there were one gateway.
Also measures the Redis round trips one ``message:send`` costs on the hot path.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse

from gateway.app import STORE
from gateway.store.redis import RedisStore
from tests.support.commands import recorded_rounds
from tests.support.gateway import Harness, MakeGateway
from tests.support.pa import ManualClock
from tests.support.waiting import until

STILL_RUNNING = "A message with this messageId is still being processed"


@pytest.fixture(params=["redis", "cluster"])
def shared_url(request: pytest.FixtureRequest) -> str:
    """The store both replicas share, once per backend: the Redis database, then a Redis Cluster
    of three primaries (issue 20), where every write also waits for a replica (``wait_replicas``)."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
async def replicas(make_gateway: MakeGateway, shared_url: str) -> tuple[Harness, Harness]:
    return await make_gateway(shared_url), await make_gateway(shared_url)


async def message(response: ClientResponse) -> dict[str, Any]:
    body = await response.read()
    assert response.status == 200, body
    result: dict[str, Any] = orjson.loads(body)["message"]
    return result


async def error_of(response: ClientResponse) -> tuple[int, str, str]:
    error = orjson.loads(await response.read())["error"]
    return response.status, error["details"][0]["reason"], error["message"]


def redis_store(gw: Harness) -> RedisStore:
    app = gw.client.app
    assert app is not None
    store = app[STORE]
    assert isinstance(store, RedisStore)
    return store


async def test_replicas_are_independent_apps_with_their_own_connections(
    replicas: tuple[Harness, Harness],
) -> None:
    a, b = replicas
    await message(await a.send())
    await message(await b.send())
    assert redis_store(a) is not redis_store(b)
    assert redis_store(a).redis is not redis_store(b).redis


async def test_s4_2_conversation_started_on_one_continues_on_the_other(
    replicas: tuple[Harness, Harness],
) -> None:
    a, b = replicas
    context_id = (await message(await a.send("Hi, where is my order?", message_id="m-1")))["contextId"]
    second = await message(await b.send("It is A-10001", message_id="m-2", context_id=context_id))
    assert second["contextId"] == context_id
    assert "Order A-10001 is shipped" in second["parts"][0]["text"]
    assert a.bot.calls[1].body["new_conversation"] is False
    # Ownership holds across replicas too: another sub cannot use it on either.
    for gw in (a, b):
        assert (await error_of(await gw.send(message_id="m-3", context_id=context_id, sub="bob")))[2] == (
            "Unknown contextId"
        )


async def test_s4_3_retry_on_the_other_replica_returns_the_stored_reply_byte_for_byte(
    replicas: tuple[Harness, Harness],
) -> None:
    a, b = replicas
    first = await (await a.send("Hi there", message_id="m-1")).read()
    context_id = orjson.loads(first)["message"]["contextId"]
    second = await (await a.send("It is A-10002", message_id="m-2", context_id=context_id)).read()
    assert await (await b.send("It is A-10002", message_id="m-2", context_id=context_id)).read() == second
    # A first message retried without contextId finds its conversation on the other replica as well.
    assert await (await b.send("Hi there", message_id="m-1")).read() == first
    assert len(a.bot.calls) == 2


async def test_s4_3_duplicate_in_flight_on_one_is_refused_on_the_other(
    replicas: tuple[Harness, Harness],
) -> None:
    a, b = replicas
    context_id = (await message(await a.send(message_id="m-1")))["contextId"]
    a.bot.gate = asyncio.Event()
    held = asyncio.create_task(a.send("It is A-10001", message_id="m-2", context_id=context_id))
    await until(lambda: len(a.bot.calls) == 2)
    refused = await b.send("It is A-10001", message_id="m-2", context_id=context_id)
    assert await error_of(refused) == (400, "INVALID_PARAMS", STILL_RUNNING)
    a.bot.gate.set()
    reply = await (await held).read()
    assert await (await b.send("It is A-10001", message_id="m-2", context_id=context_id)).read() == reply
    assert len(a.bot.calls) == 2


async def test_s4_3_twenty_concurrent_duplicates_over_both_make_one_bot_call(
    replicas: tuple[Harness, Harness],
) -> None:
    context_id = (await message(await replicas[0].send(message_id="m-1")))["contextId"]
    bot = replicas[0].bot
    bot.gate = asyncio.Event()
    tasks = [
        asyncio.create_task(replicas[i % 2].send("It is A-10001", message_id="m-2", context_id=context_id))
        for i in range(20)
    ]
    await until(lambda: sum(t.done() for t in tasks) == 19)
    for task in (t for t in tasks if t.done()):
        assert await error_of(task.result()) == (400, "INVALID_PARAMS", STILL_RUNNING)
    bot.gate.set()
    (winner,) = [t for t in tasks if not t.done()]
    reply = await (await winner).read()
    for gw in replicas:
        assert await (await gw.send("It is A-10001", message_id="m-2", context_id=context_id)).read() == reply
    assert len(bot.calls) == 2


async def test_s6_rate_limits_add_up_across_replicas(make_gateway: MakeGateway, shared_url: str) -> None:
    clock = ManualClock(start=1_700_000_000.0)

    def limits(raw: dict[str, Any]) -> None:
        raw["rate_limits"] = {"per_user": {"rate": 0.2, "burst": 4}, "per_agent": {"rate": 0.5, "burst": 6}}

    a = await make_gateway(shared_url, edit=limits, clock=clock)
    b = await make_gateway(shared_url, edit=limits, clock=clock)
    for gw in (a, b, a, b):
        await message(await gw.send())
    for gw in (a, b):
        refused = await gw.send()
        assert (refused.status, refused.headers["Retry-After"]) == (429, "5")
    # The personal agent's budget is shared too: 4 of 6 used by alice, so bob gets 2, on either.
    await message(await a.send(sub="bob"))
    await message(await b.send(sub="bob"))
    refused = await a.send(sub="carol")
    assert (refused.status, refused.headers["Retry-After"]) == (429, "2")
    clock.advance(5)
    await message(await b.send())


async def test_redis_round_trips_per_message_send(make_gateway: MakeGateway, redis_url: str) -> None:
    """The hot path with rate limiting on takes exactly 2 round trips, the perf issue's target: one
    begin-turn script (which charges the §6 limits first) and one complete-turn script.

    The rarer paths, as docs/operations.md documents them: a retry answered from the store takes 1; a
    first message retried without ``contextId`` takes 2 (open finds the earlier conversation,
    continue claims it); a ``messageId`` reused by a different first message takes 3 (open finds
    the other first message, a second open without the retry check, complete).
    """
    gw = await make_gateway(redis_url)
    redis = redis_store(gw).redis
    # Warm up: the first call of each script loads it (EVALSHA answered NOSCRIPT, then EVAL) once per Redis.
    context_id = (await message(await gw.send(message_id="m-0")))["contextId"]
    await message(await gw.send("It is A-10001", message_id="m-1", context_id=context_id))

    with recorded_rounds(redis) as first_turn:
        await message(await gw.send("Hello again", message_id="m-2"))
    with recorded_rounds(redis) as next_turn:
        await message(await gw.send("It is A-10002", message_id="m-3", context_id=context_id))
    with recorded_rounds(redis) as replay:
        await message(await gw.send("It is A-10002", message_id="m-3", context_id=context_id))
    with recorded_rounds(redis) as first_retried:
        await message(await gw.send("Hello again", message_id="m-2"))
    with recorded_rounds(redis) as first_reused:
        await message(await gw.send("Something else", message_id="m-2"))

    # On one Redis both §6 counters ride in the begin-turn script (a Redis Cluster charges the
    # per-agent one by a script of its own in the same write: tests/store/test_turn_limits.py).
    assert (first_turn.rounds, first_turn.commands) == (2, ["EVALSHA"] * 2)  # limits + open, complete
    assert (next_turn.rounds, next_turn.commands) == (2, ["EVALSHA"] * 2)  # limits + claim, complete
    assert (replay.rounds, replay.commands) == (1, ["EVALSHA"])  # limits + claim answers the reply
    assert (first_retried.rounds, first_retried.commands) == (2, ["EVALSHA"] * 2)  # open finds m-2, continue
    assert (first_reused.rounds, first_reused.commands) == (3, ["EVALSHA"] * 3)  # open, open, complete


async def test_redis_round_trips_when_refused_or_malformed(make_gateway: MakeGateway, redis_url: str) -> None:
    """A 429 is the begin-turn script alone, which charges both §6 counters all or nothing on one
    Redis; a bad body charges the limits alone (one script per slot, together)."""

    def tight(raw: dict[str, Any]) -> None:
        raw["rate_limits"] = {"per_user": {"rate": 0.01, "burst": 3}}

    gw = await make_gateway(redis_url, edit=tight)
    redis = redis_store(gw).redis
    await message(await gw.send(message_id="m-0"))  # loads the scripts
    assert (await gw.client.get("/a2a/acme/tasks", headers=gw.auth())).status == 200
    with recorded_rounds(redis) as malformed:
        response = await gw.client.post("/a2a/acme/message:send", data=b"{garbage", headers=gw.auth())
        assert response.status == 400
    with recorded_rounds(redis) as refused:
        assert (await gw.send(message_id="m-1")).status == 429
    assert (malformed.rounds, malformed.commands) == (1, ["EVALSHA"] * 2)
    assert (refused.rounds, refused.commands) == (1, ["EVALSHA"])
