"""Protecting the bot: the per-Brand concurrency cap (a bare 429, §6) and the circuit breaker (``INTERNAL``).

Over HTTP against the real test bot, on both backends where the store matters (the in-flight
marker must be released so the personal agent's retry runs the turn, §4.3). Breaker time is
a :class:`ManualClock`, so cool-downs pass without sleeping.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import ClientResponse

from gateway.app import reload_runtime
from gateway.config import CircuitBreakerConfig, UpstreamConfig
from gateway.handlers.state import METRICS
from gateway.ops.metrics import Metrics
from gateway.upstream.base import BotBusy, BotReply, Turn, UpstreamError, UpstreamThrottled
from gateway.upstream.guard import CircuitBreaker, CircuitState, GuardedBot, Permit
from tests.support.gateway import Harness, MakeGateway
from tests.support.pa import ManualClock
from tests.support.waiting import until

A2A_JSON = "application/a2a+json"
STILL_RUNNING = "A message with this messageId is still being processed"
BreakerGateway = Callable[..., Awaitable[Harness]]


def upstream(**settings: Any) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        raw["brands"][0]["upstream"].update(settings)

    return edit


async def message(response: ClientResponse) -> dict[str, Any]:
    body = await response.read()
    assert response.status == 200, body
    result: dict[str, Any] = orjson.loads(body)["message"]
    return result


async def internal(response: ClientResponse) -> None:
    assert response.status == 500
    assert response.headers["Content-Type"] == A2A_JSON
    error = orjson.loads(await response.read())["error"]
    assert (error["message"], error["details"][0]["reason"]) == ("Internal error", "INTERNAL")


async def hold_at_the_bot(
    gw: Harness, *turns: Coroutine[Any, Any, ClientResponse], calls: int
) -> tuple[asyncio.Event, list[asyncio.Task[ClientResponse]]]:
    """Close the bot's gate, start ``turns``, and wait until the bot has had ``calls`` calls in all.

    The gate is returned for the test to open."""
    gate = gw.bot.gate = asyncio.Event()
    tasks = [asyncio.create_task(turn) for turn in turns]
    await until(lambda: len(gw.bot.calls) == calls)
    return gate, tasks


@pytest.fixture
def breaker_clock() -> ManualClock:
    """The gateway's breaker time: tests move it instead of sleeping."""
    return ManualClock(start=100.0)


@pytest.fixture
def with_breaker(make_gateway: MakeGateway, breaker_clock: ManualClock) -> BreakerGateway:
    """``await with_breaker(failures, cooldown, cache_url="memory://")``: a gateway whose ``acme`` bot
    has that circuit breaker, with a 30 s window, on ``breaker_clock``."""

    async def make(failures: int, cooldown: float, cache_url: str = "memory://") -> Harness:
        breaker = {"failures": failures, "window": 30, "cooldown": cooldown}
        return await make_gateway(cache_url, edit=upstream(circuit_breaker=breaker), clock=breaker_clock)

    return make


# Concurrency cap.


async def test_s6_over_the_concurrency_cap_is_bare_429_and_the_retry_runs_the_turn(
    make_gateway: MakeGateway, cache_url: str
) -> None:
    gw = await make_gateway(cache_url, edit=upstream(max_concurrency=1, queue_timeout=0.2))
    context_id = (await message(await gw.send(message_id="m-1")))["contextId"]
    gate, [held] = await hold_at_the_bot(gw, gw.send("Hello", message_id="other-1", sub="bob"), calls=2)
    # The one slot is taken: this turn waits queue_timeout, then is refused without reaching the bot.
    loop = asyncio.get_running_loop()
    started = loop.time()
    refused = await gw.send("It is A-10001", message_id="m-2", context_id=context_id)
    assert loop.time() - started >= 0.2
    assert refused.status == 429
    assert refused.headers["Retry-After"] == "1"
    assert await refused.read() == b""
    assert refused.headers.get("Content-Type", "") != A2A_JSON
    assert len(gw.bot.calls) == 2
    gate.set()
    await message(await held)
    # The in-flight marker was released: the retry runs the turn (not "still being processed").
    retry = await message(await gw.send("It is A-10001", message_id="m-2", context_id=context_id))
    assert "A-10001" in retry["parts"][0]["text"]
    assert len(gw.bot.calls) == 3


async def test_a_refused_first_message_opens_no_conversation(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(edit=upstream(max_concurrency=1, queue_timeout=0))
    gate, [held] = await hold_at_the_bot(gw, gw.send("Hello", message_id="m-1"), calls=1)
    assert (await gw.send("Hi there", message_id="first", sub="bob")).status == 429
    gate.set()
    await message(await held)
    await message(await gw.send("Hi there", message_id="first", sub="bob"))
    assert gw.bot.calls[-1].body["new_conversation"] is True


async def test_a_queued_turn_runs_when_a_slot_frees_in_time(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(edit=upstream(max_concurrency=2, queue_timeout=5))
    gate, tasks = await hold_at_the_bot(gw, *(gw.send(sub=f"user-{i}") for i in range(4)), calls=2)
    await asyncio.sleep(0.05)
    assert len(gw.bot.calls) == 2  # never more than the cap at the bot
    gate.set()
    for response in await asyncio.gather(*tasks):
        await message(response)
    assert len(gw.bot.calls) == 4


async def test_the_process_ceiling_on_bot_calls_is_a_bare_429_across_brands_and_counted(
    make_gateway: MakeGateway,
) -> None:
    """limits.max_bot_calls bounds every Brand's calls together, refuses like the per-Brand cap
    (a bare 429, nothing sent to the bot) and is counted as limit="bot_calls"."""
    gw = await make_gateway(edit=lambda raw: raw.setdefault("limits", {}).update(max_bot_calls=2))
    gate, held = await hold_at_the_bot(
        gw, gw.send(message_id="a-1"), gw.send(message_id="g-1", brand="globex"), calls=2
    )
    refused = await gw.send("Hello", message_id="a-2", sub="bob")
    assert refused.status == 429
    assert refused.headers["Retry-After"] == "1"
    assert await refused.read() == b""
    assert len(gw.bot.calls) == 2
    app = gw.client.app
    assert app is not None
    labels = {"brand": "acme", "limit": "bot_calls"}
    assert app[METRICS].registry.get_sample_value("pact_rate_limited_total", labels) == 1
    gate.set()
    for response in await asyncio.gather(*held):
        await message(response)
    # The calls that finished left the count: the refused turn's retry runs.
    await message(await gw.send("Hello", message_id="a-2", sub="bob"))


async def test_a_reload_sets_the_ceiling_and_calls_in_flight_stay_counted(make_gateway: MakeGateway) -> None:
    gw = await make_gateway(edit=lambda raw: raw.setdefault("limits", {}).update(max_bot_calls=1))
    app = gw.client.app
    assert app is not None
    gate, [held] = await hold_at_the_bot(gw, gw.send(message_id="m-1"), calls=1)
    assert (await gw.send(message_id="m-2", sub="bob")).status == 429
    # A new Brand setting makes new guards; the count of the call in flight is the app's, not theirs.
    more = dataclasses.replace(gw.config.limits, max_bot_calls=2)
    acme = gw.config.brands["acme"]
    moved = dataclasses.replace(acme, upstream=dataclasses.replace(acme.upstream, timeout=9.0))
    reload_runtime(
        app, dataclasses.replace(gw.config, limits=more, brands={**gw.config.brands, "acme": moved})
    )
    second = asyncio.create_task(gw.send(message_id="m-3", sub="bob"))
    await until(lambda: len(gw.bot.calls) == 2)
    assert (await gw.send(message_id="m-4", sub="carol")).status == 429
    gate.set()
    await message(await held)
    await message(await second)


async def test_no_connection_pool_cap_between_the_gateway_and_one_bot(make_gateway: MakeGateway) -> None:
    """upstream.max_concurrency is the only cap: more than 256 calls (the per-host limit the
    upstream connector once had) reach one bot at once."""
    calls = 300
    gw = await make_gateway(edit=upstream(max_concurrency=calls))
    headers = {**gw.auth(), "A2A-Version": "1.0"}
    url = gw.client.make_url("/a2a/acme/message:send")

    async def turn(session: aiohttp.ClientSession, index: int) -> int:
        doc = {"message": {"messageId": f"m-{index}", "role": "ROLE_USER", "parts": [{"text": "Hi"}]}}
        async with session.post(url, json=doc, headers=headers) as response:
            await response.read()
            return response.status

    gate = gw.bot.gate = asyncio.Event()
    # The test client's own pool holds 100 connections: this one has no limit either.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [asyncio.create_task(turn(session, index)) for index in range(calls)]
        try:
            await until(lambda: len(gw.bot.calls) == calls, limit=20)
        finally:
            gate.set()
        assert await asyncio.gather(*tasks) == [200] * calls


# Circuit breaker.


async def test_breaker_opens_after_n_failures_and_fails_fast_without_calling_the_bot(
    with_breaker: BreakerGateway, breaker_clock: ManualClock, cache_url: str
) -> None:
    gw = await with_breaker(failures=3, cooldown=15, cache_url=cache_url)
    context_id = (await message(await gw.send(message_id="m-1")))["contextId"]
    gw.bot.mode = "status500"
    for i in range(3):
        await internal(await gw.send(message_id=f"m-{i + 2}", context_id=context_id))
    assert len(gw.bot.calls) == 4
    app = gw.client.app
    assert app is not None
    assert app[METRICS].registry.get_sample_value("pact_circuit_state", {"brand": "acme"}) == 2
    # Open: INTERNAL at once, the bot is not called, and the marker is released for the retry.
    gw.bot.mode = "sample"
    for _ in range(2):
        await internal(await gw.send("It is A-10001", message_id="m-9", context_id=context_id))
    assert len(gw.bot.calls) == 4
    # Other Brands have their own breaker.
    await message(await gw.send(brand="globex"))
    breaker_clock.advance(14.9)
    await internal(await gw.send("It is A-10001", message_id="m-9", context_id=context_id))
    assert len(gw.bot.calls) == 5
    # After the cool-down one probe goes through; its success closes the circuit.
    breaker_clock.advance(0.1)
    probe = await message(await gw.send("It is A-10001", message_id="m-9", context_id=context_id))
    assert "A-10001" in probe["parts"][0]["text"]
    await message(await gw.send("It is A-10002", message_id="m-10", context_id=context_id))
    assert len(gw.bot.calls) == 7


async def test_breaker_failed_probe_reopens(with_breaker: BreakerGateway, breaker_clock: ManualClock) -> None:
    gw = await with_breaker(failures=2, cooldown=10)
    gw.bot.mode = "status500"
    for _ in range(2):
        await internal(await gw.send())
    breaker_clock.advance(10)
    await internal(await gw.send())  # the probe reaches the bot, and fails
    assert len(gw.bot.calls) == 3
    await internal(await gw.send())  # open again: no call
    assert len(gw.bot.calls) == 3
    gw.bot.mode = "sample"
    breaker_clock.advance(10)
    await message(await gw.send())
    await message(await gw.send())
    assert len(gw.bot.calls) == 5


async def test_breaker_counts_only_failures_in_a_row_within_the_window(
    with_breaker: BreakerGateway, breaker_clock: ManualClock
) -> None:
    gw = await with_breaker(failures=3, cooldown=15)
    gw.bot.mode = "status500"
    for _ in range(3):
        await internal(await gw.send())
        breaker_clock.advance(20)  # three failures, but spread over 40 s
    await internal(await gw.send())
    assert len(gw.bot.calls) == 4
    gw.bot.mode = "sample"
    await message(await gw.send())  # a success breaks the streak
    gw.bot.mode = "status500"
    for _ in range(2):
        await internal(await gw.send())
    await internal(await gw.send())
    assert len(gw.bot.calls) == 8  # only now, three in a row within 30 s: open
    await internal(await gw.send())
    assert len(gw.bot.calls) == 8


# The rules without HTTP.


def settings(**overrides: Any) -> CircuitBreakerConfig:
    return CircuitBreakerConfig(**{"failures": 2, "window": 30.0, "cooldown": 15.0, **overrides})


def bot_config(**overrides: Any) -> UpstreamConfig:
    return UpstreamConfig(url="http://bot.test/chat", **overrides)


def concurrency_refusals(metrics: Metrics) -> float | None:
    labels = {"brand": "acme", "limit": "concurrency"}
    return metrics.registry.get_sample_value("pact_rate_limited_total", labels)


def turn(message_id: str = "m-1") -> Turn:
    return Turn("acme", "c-1", message_id, "hi", "https://pa.example", "alice", False, "req-00000001")


def test_breaker_only_the_probe_moves_an_open_circuit() -> None:
    breaker = CircuitBreaker(settings())
    early = breaker.admit(0)
    assert early is Permit.CALL
    states = []
    breaker.failed(Permit.CALL, 1)
    breaker.failed(Permit.CALL, 2)
    states.append(breaker.state)
    breaker.succeeded(early)  # a call from before the outage finishing late: no effect
    states.append(breaker.state)
    assert breaker.admit(16.9) is None
    assert breaker.admit(17) is Permit.PROBE
    states.append(breaker.state)
    assert breaker.admit(17) is None  # one probe at a time
    breaker.succeeded(Permit.PROBE)
    states.append(breaker.state)
    assert states == [CircuitState.OPEN, CircuitState.OPEN, CircuitState.HALF_OPEN, CircuitState.CLOSED]


def test_breaker_abandoned_probe_lets_the_next_turn_probe() -> None:
    breaker = CircuitBreaker(settings())
    breaker.failed(Permit.CALL, 0)
    breaker.failed(Permit.CALL, 0)
    assert breaker.admit(15) is Permit.PROBE
    breaker.abandoned(Permit.PROBE)  # cancelled, or no slot: no verdict on the bot
    assert breaker.state is CircuitState.OPEN
    assert breaker.admit(15) is Permit.PROBE


def test_breaker_disabled_never_opens() -> None:
    breaker = CircuitBreaker(settings(enabled=False))
    for now in range(10):
        breaker.failed(Permit.CALL, now)
    assert breaker.admit(10) is Permit.CALL


class ScriptedBot:
    """A bot adapter whose calls wait on ``gate`` and then fail while ``failing``."""

    def __init__(self) -> None:
        self.failing = False
        self.gate: asyncio.Event | None = None
        self.calls = 0

    async def send(self, turn: Turn) -> BotReply:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            raise UpstreamError("status", "HTTP 500")
        return BotReply("ok")

    async def probe(self) -> str:
        return "scripted bot"


async def test_guard_exports_circuit_state_and_concurrency_refusals() -> None:
    metrics = Metrics()
    clock = ManualClock(start=0.0)
    bot = ScriptedBot()
    config = bot_config(max_concurrency=1, queue_timeout=0, circuit_breaker=settings())
    guard = GuardedBot(bot, "acme", config, metrics=metrics, clock=clock)

    def state() -> float | None:
        return metrics.registry.get_sample_value("pact_circuit_state", {"brand": "acme"})

    assert state() == 0
    bot.failing = True
    for _ in range(2):
        with pytest.raises(UpstreamError):
            await guard.send(turn())
    assert state() == 2
    with pytest.raises(UpstreamError, match="circuit_open"):
        await guard.send(turn())
    assert bot.calls == 2
    clock.advance(15)
    bot.failing = False
    bot.gate = asyncio.Event()
    probe = asyncio.create_task(guard.send(turn()))
    await until(lambda: bot.calls == 3)
    assert state() == 1
    bot.gate.set()
    assert await probe == BotReply("ok")
    assert state() == 0
    # The cap: a second concurrent call with no queueing time is refused at once.
    bot.gate = asyncio.Event()
    first = asyncio.create_task(guard.send(turn()))
    await until(lambda: bot.calls == 4)
    with pytest.raises(BotBusy) as busy:
        await guard.send(turn())
    assert busy.value.retry_after == 1
    assert concurrency_refusals(metrics) == 1.0
    bot.gate.set()
    await first


async def test_guard_cancelled_call_frees_its_slot() -> None:
    bot = ScriptedBot()
    bot.gate = asyncio.Event()
    guard = GuardedBot(bot, "acme", bot_config(max_concurrency=1, queue_timeout=0))
    call = asyncio.create_task(guard.send(turn()))
    await until(lambda: bot.calls == 1)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    bot.gate.set()
    assert await guard.send(turn()) == BotReply("ok")
    assert guard.circuit_state is CircuitState.CLOSED


class HeldBot:
    """A bot adapter that records the order turns reach it and holds each until released."""

    def __init__(self) -> None:
        self.arrived: list[str] = []
        self._release: dict[str, asyncio.Event] = {}

    def release(self, message_id: str) -> None:
        self._release.setdefault(message_id, asyncio.Event()).set()

    async def send(self, turn: Turn) -> BotReply:
        self.arrived.append(turn.message_id)
        await self._release.setdefault(turn.message_id, asyncio.Event()).wait()
        return BotReply(turn.message_id)

    async def probe(self) -> str:
        return "held bot"


async def test_guard_free_slots_are_taken_at_once_and_the_cap_still_refuses() -> None:
    """The free-slot short cut still takes a slot per call, gives it back, and refuses at the cap."""
    metrics = Metrics()
    bot = HeldBot()
    guard = GuardedBot(bot, "acme", bot_config(max_concurrency=2, queue_timeout=0), metrics=metrics)
    first = asyncio.create_task(guard.send(turn("m-1")))
    second = asyncio.create_task(guard.send(turn("m-2")))
    await until(lambda: len(bot.arrived) == 2)
    with pytest.raises(BotBusy):
        await guard.send(turn("m-3"))
    assert bot.arrived == ["m-1", "m-2"]
    bot.release("m-1")
    assert await first == BotReply("m-1")
    # The freed slot is taken again without waiting; the cap is full once more.
    third = asyncio.create_task(guard.send(turn("m-4")))
    await until(lambda: len(bot.arrived) == 3)
    with pytest.raises(BotBusy):
        await guard.send(turn("m-5"))
    for message_id in ("m-2", "m-4"):
        bot.release(message_id)
    assert [reply.text for reply in await asyncio.gather(second, third)] == ["m-2", "m-4"]
    assert concurrency_refusals(metrics) == 2
    # Every slot came back: two calls at once run again.
    for message_id in ("m-6", "m-7"):
        bot.release(message_id)
    replies = await asyncio.gather(guard.send(turn("m-6")), guard.send(turn("m-7")))
    assert [reply.text for reply in replies] == ["m-6", "m-7"]


async def test_guard_a_queued_turn_gets_the_freed_slot_before_a_newcomer() -> None:
    """A turn arriving as a slot frees must not take it from one already waiting: first come, first served."""
    bot = HeldBot()
    guard = GuardedBot(bot, "acme", bot_config(max_concurrency=1, queue_timeout=5))
    holder = asyncio.create_task(guard.send(turn("m-holder")))
    await until(lambda: bot.arrived == ["m-holder"])
    queued = asyncio.create_task(guard.send(turn("m-queued")))
    for _ in range(3):
        await asyncio.sleep(0)  # the queued turn is now waiting for the slot
    bot.release("m-holder")
    # Scheduled in the same loop turn as the holder's wake-up: it sees the slot being handed over.
    newcomer = asyncio.create_task(guard.send(turn("m-newcomer")))
    await holder
    await until(lambda: len(bot.arrived) == 2)
    assert bot.arrived == ["m-holder", "m-queued"]
    bot.release("m-queued")
    bot.release("m-newcomer")
    assert (await queued, await newcomer) == (BotReply("m-queued"), BotReply("m-newcomer"))
    assert bot.arrived == ["m-holder", "m-queued", "m-newcomer"]


async def test_guard_probe_reaches_the_bot_even_with_the_circuit_open() -> None:
    """``check-config --probe`` asks the bot itself: the probe is no turn, so the breaker neither
    blocks it nor counts it."""
    bot = ScriptedBot()
    bot.failing = True
    guard = GuardedBot(bot, "acme", bot_config(circuit_breaker=settings()), clock=ManualClock(start=0.0))
    for _ in range(2):
        with pytest.raises(UpstreamError):
            await guard.send(turn())
    assert guard.circuit_state is CircuitState.OPEN
    assert await guard.probe() == "scripted bot"
    assert guard.circuit_state is CircuitState.OPEN


class ThrottlingBot(ScriptedBot):
    """A scripted bot whose provider answers 429 with ``retry_after`` while it is set."""

    def __init__(self) -> None:
        super().__init__()
        self.retry_after: float | None = None

    async def send(self, turn: Turn) -> BotReply:
        if self.retry_after is not None:
            self.calls += 1
            raise UpstreamThrottled(self.retry_after, "HTTP 429")
        return await super().send(turn)


async def test_guard_a_throttled_probe_leaves_the_next_turn_to_probe_after_the_wait() -> None:
    """The bot's 429 is no verdict on its health: a half-open probe it answers leaves the circuit
    open (not re-opened for another cool-down), and once the wait passes the next turn probes."""
    metrics = Metrics()
    clock = ManualClock(start=0.0)
    bot = ThrottlingBot()
    guard = GuardedBot(bot, "acme", bot_config(circuit_breaker=settings()), metrics=metrics, clock=clock)
    bot.failing = True
    for _ in range(2):
        with pytest.raises(UpstreamError):
            await guard.send(turn())
    clock.advance(15)
    bot.failing, bot.retry_after = False, 2.5
    with pytest.raises(BotBusy) as busy:
        await guard.send(turn())  # the probe: throttled
    assert (busy.value.retry_after, guard.circuit_state, bot.calls) == (3, CircuitState.OPEN, 3)
    clock.advance(2)
    with pytest.raises(BotBusy) as busy:
        await guard.send(turn())  # held back: the bot is not called
    assert (busy.value.retry_after, bot.calls) == (1, 3)
    clock.advance(0.5)
    bot.retry_after = None
    assert await guard.send(turn()) == BotReply("ok")  # the next probe, well within the cool-down
    assert guard.circuit_state is CircuitState.CLOSED
    held = {"brand": "acme", "limit": "upstream_retry_after"}
    assert metrics.registry.get_sample_value("pact_rate_limited_total", held) == 2
