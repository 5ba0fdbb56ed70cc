"""Faults at the bot, then its recovery (issue 12, deliverable 3, the bot's half).

A real bot on loopback (:class:`~tests.support.bot.ControlledBot`) refuses connections (its
listener closed, then reopened on the same port), answers past ``upstream.timeout``, answers
``500``, answers garbage, or promises a reply's length and hangs up half-way. Over HTTP, on both
backends: every turn meanwhile is ``INTERNAL`` within :data:`TURN_BOUND`, nothing is stored, and
once the bot is back the personal agent's retry of the same ``messageId`` runs the bot exactly
once (§4.3), after which the reply is the stored one. Review row 2 from the gateway's side: a
reply written in pieces, or of 200 KB, is a reply, not a failure that opens the circuit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestServer

from gateway.ops.metrics import Metrics
from tests.support.bot import ControlledBot
from tests.support.gateway import Harness, MakeGateway

UPSTREAM_TIMEOUT = 0.5
"""``upstream.timeout`` of the Brand under test, seconds."""
TURN_BOUND = 10.0
"""Seconds within which each turn here is answered: the bot's timeout and then some (a noisy machine)."""
FAULTS = ["refused", "past_timeout", "status500", "garbage", "half_way"]
_MODES = {"past_timeout": "slow", "status500": "status500", "garbage": "bad_body", "half_way": "half_way"}


def upstream(**settings: Any) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        raw["brands"][0]["upstream"].update(settings)

    return edit


async def answered(turn: Any) -> ClientResponse:
    async with asyncio.timeout(TURN_BOUND):
        response: ClientResponse = await turn
        await response.read()
    return response


async def message(response: ClientResponse) -> dict[str, Any]:
    body = await response.read()
    assert response.status == 200, body
    result: dict[str, Any] = orjson.loads(body)["message"]
    return result


async def internal(response: ClientResponse) -> None:
    body = await response.read()
    assert response.status == 500, body
    assert response.headers["Content-Type"] == "application/a2a+json"
    assert response.headers["X-Request-Id"]
    error = orjson.loads(body)["error"]
    assert (error["message"], error["details"][0]["reason"]) == ("Internal error", "INTERNAL")


@contextlib.asynccontextmanager
async def faulty(bot: ControlledBot, fault: str) -> AsyncIterator[None]:
    """The bot fails the ``fault`` way inside the block and answers normally again after it."""
    if fault != "refused":
        bot.mode = _MODES[fault]
        try:
            yield
        finally:
            bot.mode = "sample"
        return
    assert bot.server is not None
    port = bot.server.port
    await bot.server.close()  # the listener and every kept-alive connection: connections are refused
    try:
        yield
    finally:
        app = web.Application()
        app.router.add_post("/chat", bot.handle)
        bot.server = TestServer(app, host="127.0.0.1", port=port)
        await bot.server.start_server()


def bot_calls_during(fault: str, turns: int) -> int:
    """A refused connection never reaches the bot; every other fault is a call that failed."""
    return 0 if fault == "refused" else turns


@pytest.mark.parametrize("fault", FAULTS)
async def test_s4_3_a_faulty_bot_is_internal_nothing_is_stored_and_the_retry_runs_once(
    make_gateway: MakeGateway, cache_url: str, fault: str
) -> None:
    gw = await make_gateway(cache_url, edit=upstream(timeout=UPSTREAM_TIMEOUT))
    context_id = (await message(await gw.send(message_id="m-1")))["contextId"]
    before = len(gw.bot.calls)
    async with faulty(gw.bot, fault):
        for _ in range(2):  # the personal agent retries while the bot is still failing
            await internal(await answered(gw.send("It is A-10001", message_id="m-2", context_id=context_id)))
    assert len(gw.bot.calls) == before + bot_calls_during(fault, 2)
    # Back: nothing was stored for m-2, so its retry runs the bot, once.
    before = len(gw.bot.calls)
    retry = await answered(gw.send("It is A-10001", message_id="m-2", context_id=context_id))
    reply = await message(retry)
    assert len(gw.bot.calls) == before + 1
    assert gw.bot.calls[-1].body["message_id"] == "m-2"
    assert "A-10001" in reply["parts"][0]["text"]
    assert reply["contextId"] == context_id
    # Now it is stored: the same messageId again is the same bytes, without the bot.
    again = await answered(gw.send("It is A-10001", message_id="m-2", context_id=context_id))
    assert await again.read() == await retry.read()
    assert len(gw.bot.calls) == before + 1


@pytest.mark.parametrize("fault", FAULTS)
async def test_s4_3_a_first_message_the_bot_failed_opens_no_conversation(
    make_gateway: MakeGateway, cache_url: str, fault: str
) -> None:
    gw = await make_gateway(cache_url, edit=upstream(timeout=UPSTREAM_TIMEOUT))
    async with faulty(gw.bot, fault):
        await internal(await answered(gw.send(message_id="first")))
    assert len(gw.bot.calls) == bot_calls_during(fault, 1)
    reply = await message(await answered(gw.send(message_id="first")))
    assert len(gw.bot.calls) == bot_calls_during(fault, 1) + 1
    assert gw.bot.calls[-1].body["new_conversation"] is True
    assert gw.bot.calls[-1].body["conversation_id"] == reply["contextId"]


async def test_the_circuit_opens_on_repeated_faults_and_closes_when_the_bot_is_back(
    make_gateway: MakeGateway,
) -> None:
    """Faults count towards the breaker (they are the bot's); after the cool-down a probe recovers it."""
    breaker = {"failures": 2, "window": 30, "cooldown": 0.5}
    gw = await make_gateway(edit=upstream(timeout=UPSTREAM_TIMEOUT, circuit_breaker=breaker))
    async with faulty(gw.bot, "half_way"):
        for i in range(2):
            await internal(await answered(gw.send(message_id=f"m-{i}")))
        await internal(await answered(gw.send(message_id="m-open")))
        assert len(gw.bot.calls) == 2  # open: the third turn never reached the bot
    await asyncio.sleep(0.6)  # past the cool-down: the next turn is the probe
    await message(await answered(gw.send(message_id="m-open")))
    await message(await answered(gw.send(message_id="m-after")))
    assert len(gw.bot.calls) == 4


@pytest.mark.parametrize("mode", ["pieces", "large"])
async def test_row2_a_reply_in_pieces_or_of_200_kb_is_a_reply_and_keeps_the_circuit_closed(
    make_gateway: MakeGateway, mode: str
) -> None:
    """It used to be read with one read(n): INTERNAL ("not JSON"), and one failure opened this breaker."""
    breaker = {"failures": 1, "window": 30, "cooldown": 300}
    gw: Harness = await make_gateway(edit=upstream(circuit_breaker=breaker))
    text = "Your orders: " + "A-10001 shipped on Monday. " * 8000
    if mode == "large":
        gw.bot.mode, gw.bot.fixed_reply = "fixed", {"text": text, "end": False}
    else:
        gw.bot.mode = "pieces"
    reply = await message(await answered(gw.send(message_id="m-1")))
    if mode == "large":
        assert reply["parts"][0]["text"] == text
    gw.bot.mode = "sample"
    await message(await answered(gw.send(message_id="m-2")))
    assert len(gw.bot.calls) == 2


def bot_calls(metrics: Metrics, outcome: str) -> float | None:
    value: float | None = metrics.registry.get_sample_value(
        "pact_bot_call_duration_seconds_count", {"brand": "acme", "outcome": outcome}
    )
    return value


async def test_a_bot_answer_past_the_head_bounds_is_internal_and_counted_as_bad_head(
    make_gateway: MakeGateway,
) -> None:
    """Issue 28 M4 from the personal agent's side: a bot streaming headers without end costs one
    ``INTERNAL`` turn, and the bound that bit is seen in ``pact_bot_call_duration_seconds{outcome}``."""

    async def endless_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n")
        with contextlib.suppress(ConnectionError):
            for n in range(4096):
                writer.write(b"X-%d: %s\r\n" % (n, b"v" * 4000))
                await writer.drain()
        writer.close()

    hostile = await asyncio.start_server(endless_head, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{hostile.sockets[0].getsockname()[1]}/chat"
    metrics = Metrics()
    try:
        gw = await make_gateway(edit=upstream(url=url), metrics=metrics)
        await internal(await answered(gw.send(message_id="m-1")))
    finally:
        hostile.close()
    assert bot_calls(metrics, "bad_head") == 1


@pytest.mark.parametrize(
    ("limits", "answered_as"),
    [({}, "ok"), ({"bot_answer_fields": 8}, "bad_head"), ({"bot_answer_line_bytes": 1024}, "bad_head")],
    ids=["defaults", "fewer_fields", "shorter_lines"],
)
async def test_the_answer_head_bounds_are_the_limits_settings(
    make_gateway: MakeGateway, limits: dict[str, int], answered_as: str
) -> None:
    """``limits.bot_answer_*`` are what the bot client reads answers with: an answer of 12 header
    fields, one of them a 2,000-byte line, is a reply under the defaults and a bad head under a
    lower field count or line length."""
    reply = orjson.dumps({"text": "Your order shipped."})
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(reply)
    head += b"X-Long: " + b"v" * 2000 + b"\r\n" + b"".join(b"X-%d: v\r\n" % n for n in range(9))

    async def many_fields(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request_head = (await reader.readuntil(b"\r\n\r\n")).lower()
        length = request_head.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0]
        await reader.readexactly(int(length))
        writer.write(head + b"\r\n" + reply)
        await writer.drain()
        writer.close()

    bot = await asyncio.start_server(many_fields, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{bot.sockets[0].getsockname()[1]}/chat"

    def edit(raw: dict[str, Any]) -> None:
        upstream(url=url)(raw)
        raw["limits"] = {**raw.get("limits", {}), **limits}

    metrics = Metrics()
    try:
        gw = await make_gateway(edit=edit, metrics=metrics)
        response = await answered(gw.send(message_id="m-1"))
        if answered_as == "ok":
            assert (await message(response))["parts"] == [{"text": "Your order shipped."}]
        else:
            await internal(response)
    finally:
        bot.close()
    assert bot_calls(metrics, answered_as) == 1


async def test_i1_an_answer_naming_another_message_is_internal_and_counted(make_gateway: MakeGateway) -> None:
    """Issue 28 I1 over HTTP: the bot's answer names a ``message_id`` that is not the turn's, so it is
    not this User's reply: ``INTERNAL``, nothing stored, counted as ``wrong_message``; the sample bot,
    which echoes the turn's, answers the retry."""
    metrics = Metrics()
    gw = await make_gateway(metrics=metrics)
    gw.bot.mode, gw.bot.fixed_reply = "fixed", {"text": "Your order shipped.", "message_id": "m-someone-else"}
    await internal(await answered(gw.send(message_id="m-1")))
    assert bot_calls(metrics, "wrong_message") == 1
    gw.bot.mode = "sample"
    await message(await answered(gw.send(message_id="m-1")))
    assert gw.bot.calls[-1].body["message_id"] == "m-1"
    assert bot_calls(metrics, "ok") == 1
