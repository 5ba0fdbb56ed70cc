"""Redis faults under real traffic (issue 12, deliverable 3 and row 5), through a real gateway over HTTP.

A Redis of the test's own, killed and restarted under a stream of turns (its AOF on, so what it
acknowledged survives the kill); a hundred concurrent copies of one message across two gateways
on one Redis; and a connection to Redis that stalls while a turn is being claimed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import orjson
import pytest
import redis.asyncio as aioredis
from aiohttp import ClientResponse

from gateway.app import STORE
from gateway.store import keys as store_keys
from gateway.store.base import StoreError
from tests.support.gateway import Harness, MakeGateway
from tests.support.redis_layout import stored_reply
from tests.support.redis_servers import RedisServers, wait_for
from tests.support.turn_stream import STILL_RUNNING, TurnStream
from tests.support.waiting import until

RECOVERY_BOUND = 30.0
"""Seconds from the restarted Redis answering until turns are answered again: reconnecting is at
once, but a turn the kill caught keeps its marker until ``pending_ttl`` (8 s here). Generous, for a
shared and noisy machine."""
DOWN_BOUND = 10.0
"""Seconds for the gateway to notice its Redis is gone (a broken connection is noticed at once)."""


def quick_turns(url: str, **cache: Any) -> Callable[[dict[str, Any]], None]:
    """Short timeouts, and a pending_ttl they allow (cache.pending_ttl must outlive a turn)."""

    def edit(raw: dict[str, Any]) -> None:
        raw["cache"] = {"url": url, "timeout": 1.0, "pending_ttl": 8, **cache}
        for brand in raw["brands"]:
            brand["upstream"] = {**brand["upstream"], "timeout": 3, "queue_timeout": 0.5}

    return edit


async def error_of(response: ClientResponse) -> tuple[int, str, str]:
    error = orjson.loads(await response.read())["error"]
    return response.status, error["details"][0]["reason"], error["message"]


async def test_redis_killed_and_restarted_under_load_keeps_every_stored_reply(
    redis_servers: RedisServers, make_gateway: MakeGateway
) -> None:
    server = await redis_servers.server("aof", appendonly=True)
    gw = await make_gateway(server.url(0), edit=quick_turns(server.url(0)))
    app = gw.client.app
    assert app is not None
    store = app[STORE]
    stream = TurnStream(gw, workers=4, retry_limit=RECOVERY_BOUND + DOWN_BOUND)
    stream.start()
    try:
        await stream.until_answered(20, limit=RECOVERY_BOUND)
        server.kill()

        async def down() -> bool:
            try:
                await store.ping()
            except StoreError:
                return True
            return False

        await wait_for(down, DOWN_BOUND, "the gateway seeing Redis gone")
        await redis_servers.restart(server)  # same port, same directory: the AOF is read back
        loop = asyncio.get_running_loop()
        await stream.until_answered(20, since=loop.time(), limit=RECOVERY_BOUND)
        await stream.stop()
    finally:
        await stream.cancel()

    # The same gateway, never restarted: every reply it gave, from before the kill too, is replayed.
    await stream.check_replays()
    assert stream.bot_calls_beyond_attempts() == {}


@pytest.mark.parametrize("first_message", [True, False], ids=["first-message", "on-a-context"])
async def test_s4_3_a_hundred_concurrent_copies_across_two_gateways_make_one_bot_call_and_one_reply(
    make_gateway: MakeGateway, redis_url: str, redis_client: aioredis.Redis, first_message: bool
) -> None:
    """Two gateways, each with its own connection to one Redis, as two processes would have."""
    a, b = await make_gateway(redis_url), await make_gateway(redis_url)
    context_id: str | None = None
    if not first_message:
        opened = await a.send(message_id="m-open")
        context_id = orjson.loads(await opened.read())["message"]["contextId"]
    bot = a.bot
    calls = len(bot.calls)
    bot.gate = asyncio.Event()

    def send(gw: Harness) -> Any:
        return gw.send("Where is order A-10001?", message_id="m-dup", context_id=context_id)

    copies = [asyncio.create_task(send(a if n % 2 else b)) for n in range(100)]
    # Ninety-nine refused, and the one that won held at the bot.
    await until(lambda: sum(task.done() for task in copies) == 99 and len(bot.calls) > calls, limit=60)
    bot.gate.set()
    responses = await asyncio.gather(*copies)

    (winner,) = [response for response in responses if response.status == 200]
    for response in responses:
        if response is not winner:
            assert await error_of(response) == (400, "INVALID_PARAMS", STILL_RUNNING)
    reply = await winner.read()
    for gw in (a, b):
        assert await (await send(gw)).read() == reply
    assert len(bot.calls) == calls + 1
    conversations = [key async for key in redis_client.scan_iter(store_keys.conv_key("acme", "*", "*"))]
    assert len(conversations) == 1
    context_id = conversations[0].decode().split("}c:", 1)[1]
    assert await stored_reply(redis_client, "acme", context_id, "m-dup") == reply


async def test_s4_3_a_claim_whose_answer_was_lost_leaves_no_marker_for_the_retry(
    redis_servers: RedisServers, make_gateway: MakeGateway, redis_url: str
) -> None:
    """Row 5: the claim ran on Redis, its answer never came back (a stalled path), so the turn
    failed with INTERNAL; the retry must run it, not hear "still being processed" for pending_ttl."""
    proxy = await redis_servers.proxy(urlsplit(redis_url).port or 6379)
    db = int(urlsplit(redis_url).path.lstrip("/") or "0")
    gw = await make_gateway(proxy.url(db), edit=quick_turns(proxy.url(db), timeout=0.5, pending_ttl=60))
    opened = await gw.send(message_id="m-1")
    context_id = orjson.loads(await opened.read())["message"]["contextId"]
    proxy.stall_replies()

    failed = await gw.send("Where is order A-10001?", message_id="m-2", context_id=context_id)
    assert await error_of(failed) == (500, "INTERNAL", "Internal error")

    retried = await gw.send("Where is order A-10001?", message_id="m-2", context_id=context_id)
    assert retried.status == 200, await retried.read()
    assert [call.body["message_id"] for call in gw.bot.calls] == ["m-1", "m-2"]


async def test_s4_3_a_reply_that_could_not_be_stored_leaves_no_marker_for_the_retry(
    redis_servers: RedisServers, make_gateway: MakeGateway, redis_url: str
) -> None:
    """Row 5, at the other end of the turn: the write of the reply never reached Redis, so the turn
    failed with INTERNAL and nothing is stored; the retry runs it again rather than wait pending_ttl."""
    proxy = await redis_servers.proxy(urlsplit(redis_url).port or 6379)
    db = int(urlsplit(redis_url).path.lstrip("/") or "0")
    gw = await make_gateway(proxy.url(db), edit=quick_turns(proxy.url(db), timeout=0.5, pending_ttl=60))
    opened = await gw.send(message_id="m-1")
    context_id = orjson.loads(await opened.read())["message"]["contextId"]
    gw.bot.gate = asyncio.Event()
    turn = asyncio.create_task(gw.send("Where is order A-10001?", message_id="m-2", context_id=context_id))
    await until(lambda: len(gw.bot.calls) == 2)
    proxy.stall_requests()  # claimed; the reply's write will be held on the stuck path
    gw.bot.gate.set()

    assert await error_of(await turn) == (500, "INTERNAL", "Internal error")

    retried = await gw.send("Where is order A-10001?", message_id="m-2", context_id=context_id)
    assert retried.status == 200, await retried.read()
    assert [call.body["message_id"] for call in gw.bot.calls] == ["m-1", "m-2", "m-2"]
