"""Hostile bot replies (issue 18 F6), for every adapter, through the gateway.

A bot can answer anything: JSON nested a thousand levels deep (an action's ``args`` that deep
used to run the §5.6 canonical form out of Python's stack: a ``500``, a traceback, and the
in-flight marker kept until ``pending_ttl``), a megabyte, every JSON type where another is
expected. Whatever it answers, the personal agent gets a §4 reply or the §6 ``INTERNAL``
envelope, never anything else, no record carries a traceback, and after ``INTERNAL`` the retry of
the same ``messageId`` reaches the bot again (the marker was released).

Hypothesis raises Python's recursion limit while it runs, so the property alone would not have
found the review's case: the thousand-deep action has a test of its own, and so has an adapter
that raises something no adapter should.

One loopback server plays every adapter's bot API (:class:`HostileBot`): it answers each API's
set-up calls (Direct Line's conversation and posted activity) properly and puts the example's
reply where the turn's answer is read. Example counts are small and derandomized, as in
tests/http/test_hostile_input.py; ``HYPOTHESIS_PROFILE=explore`` runs ten times as many, randomly.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.config import CacheConfig, CircuitBreakerConfig, UpstreamConfig
from gateway.ops.limits import Charge, RateLimits
from gateway.protocol.errors import A2AError, Reason
from gateway.protocol.messages import SendMessage
from gateway.store.limits import MemoryRateLimiter
from gateway.store.memory import MemoryStore
from gateway.turns import TurnService
from gateway.upstream.base import BotReply, Turn, UpstreamError
from gateway.upstream.guard import GuardedBot
from gateway.upstream.wire import MAX_REPLY_BYTES, MAX_REPLY_DEPTH
from tests.support.adapters import A2A_JSON
from tests.support.gateway import Harness, MakeGateway
from tests.support.pa import ManualClock

_EXPLORE = os.environ.get("HYPOTHESIS_PROFILE") == "explore"

DL_CONVERSATION = "c-1"
DL_POSTED = "c-1|0001"
API_KEY = "k-" + "0" * 40
ENVIRON = {"OPENAI_KEY": API_KEY, "DL_SECRET": "dl-" + "0" * 40}


def budget(count: int) -> settings:
    """``count`` derandomized examples (CI), or ten times as many random ones under ``explore``."""
    return settings(
        max_examples=count * 10 if _EXPLORE else count,
        deadline=None,
        derandomize=not _EXPLORE,
        database=None,
        # One gateway and one bot per test, shared by every example on purpose.
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


@dataclass
class HostileBot:
    """Every adapter's bot API on one loopback server; ``reply`` is what the turn's answer reads."""

    reply: bytes = b""
    turns: int = 0
    """Turns that reached the bot (for Direct Line, the activities posted)."""
    server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        path = request.path
        if path == "/v3/directline/conversations" and request.method == "POST":
            doc = {"conversationId": DL_CONVERSATION, "token": "t-" + "0" * 40, "expires_in": 3600}
            return web.json_response(doc, status=201)
        if path.endswith("/activities") and request.method == "POST":
            self.turns += 1
            return web.json_response({"id": DL_POSTED})
        if not path.endswith("/activities"):  # a Direct Line read is not a turn: it may poll
            self.turns += 1
        return web.Response(body=self.reply, content_type="application/json")


@pytest.fixture
async def hostile_bot() -> AsyncIterator[HostileBot]:
    bot = HostileBot()
    app = web.Application(client_max_size=2 * MAX_REPLY_BYTES)
    app.router.add_route("*", "/{tail:.*}", bot.handle)
    bot.server = TestServer(app, host="127.0.0.1")
    await bot.server.start_server()
    yield bot
    await bot.server.close()


# ---- each adapter: its upstream settings, a good answer, and where a hostile value goes ----------


@dataclass(frozen=True)
class Adapter:
    upstream: Callable[[str], dict[str, Any]]
    good: bytes
    """An answer the adapter turns into a reply."""
    shaped: Callable[[Any], Any]
    """The adapter's answer shape with a hostile value in it (any JSON)."""
    deep_template: str
    """The answer as JSON text with ``{deep}`` where nesting of any depth goes."""


def _pact_shaped(value: Any) -> Any:
    return {"text": "ok", "actions": [{"tool": "lookup", "args": value}], "scopes_used": value}


def _dl_activity(**more: Any) -> dict[str, Any]:
    return {"type": "message", "from": {"id": "bot"}, "replyToId": DL_POSTED, **more}


ADAPTERS: dict[str, Adapter] = {
    "pact": Adapter(
        lambda url: {"adapter": "pact", "url": f"{url}/chat"},
        orjson.dumps({"text": "fine", "end": False}),
        _pact_shaped,
        '{{"text":"ok","actions":[{{"tool":"lookup","args":{deep}}}]}}',
    ),
    "http": Adapter(
        lambda url: {
            "adapter": "http",
            "url": f"{url}/turn",
            "http": {
                "body": {"q": "{{text}}"},
                "reply": {
                    "text": "answer",
                    "end": "done",
                    "requires_scopes": "needs",
                    "actions": "calls",
                    "scopes_used": "used",
                },
            },
        },
        orjson.dumps({"answer": "fine"}),
        lambda value: {"answer": value, "done": value, "calls": [{"tool": "lookup", "args": value}]},
        '{{"answer":"ok","calls":[{{"tool":"lookup","args":{deep}}}]}}',
    ),
    # No recipient_id: one bot answers every conversation here, and a message naming another
    # conversation's sender is refused before it is read (issue 28 I1).
    "rasa": Adapter(
        lambda url: {"adapter": "rasa", "url": url},
        orjson.dumps([{"text": "fine"}]),
        lambda value: [{"text": value, "buttons": value, "custom": value}, value],
        '[{{"text":"ok","custom":{deep}}}]',
    ),
    "openai": Adapter(
        lambda url: {
            "adapter": "openai",
            "url": f"{url}/v1",
            "openai": {"model": "m", "api_key": "${OPENAI_KEY}"},
        },
        orjson.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "fine"}}]}),
        lambda value: {
            "choices": [{"message": {"role": "assistant", "content": value}, "finish_reason": value}]
        },
        '{{"choices":[{{"message":{{"role":"assistant","content":"ok","tool_calls":{deep}}}}}]}}',
    ),
    "directline": Adapter(
        lambda url: {
            "adapter": "directline",
            "url": url,
            "timeout": 0.5,
            "directline": {"secret": "${DL_SECRET}", "poll_interval": 0.01, "quiet_period": 0.05},
        },
        orjson.dumps(
            {"activities": [_dl_activity(text="fine", inputHint="expectingInput")], "watermark": "2"}
        ),
        lambda value: {
            "activities": [
                _dl_activity(
                    text=value, attachments=value, suggestedActions=value, inputHint="expectingInput"
                )
            ],
            "watermark": value,
        },
        '{{"activities":[{{"type":"message","from":{{"id":"bot"}},"replyToId":"c-1|0001",'
        '"text":"ok","inputHint":"expectingInput","channelData":{deep}}}],"watermark":"2"}}',
    ),
}


def deep(depth: int, kind: str) -> str:
    """JSON text nesting ``depth`` levels of arrays or objects."""
    if kind == "array":
        return "[" * depth + "]" * depth
    return '{"a":' * depth + "1" + "}" * depth


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
depths = st.sampled_from([1, MAX_REPLY_DEPTH - 8, MAX_REPLY_DEPTH + 1, 900, 1000, 1023, 1100])
sizes = st.sampled_from([MAX_REPLY_BYTES - 200, MAX_REPLY_BYTES + 1, 3 * MAX_REPLY_BYTES])


def replies(adapter: Adapter) -> st.SearchStrategy[bytes]:
    """Hostile answers for ``adapter``: in its shape or not, any depth, any size, not JSON at all."""
    # json.dumps: orjson refuses integers past 64 bits, which a bot may well send.
    shaped = json_values.map(lambda value: json.dumps(adapter.shaped(value)).encode())
    anything = json_values.map(lambda value: json.dumps(value).encode())
    nested = st.builds(
        lambda depth, kind: adapter.deep_template.format(deep=deep(depth, kind)).encode(),
        depths,
        st.sampled_from(["array", "object"]),
    )
    huge = sizes.map(lambda size: adapter.deep_template.format(deep=json.dumps("x" * size)).encode())
    return st.one_of(shaped, anything, nested, huge, st.binary(max_size=200))


async def hostile_gateway(make_gateway: MakeGateway, bot: HostileBot, name: str) -> Harness:
    def edit(raw: dict[str, Any]) -> None:
        upstream = {"timeout": 2.0, **ADAPTERS[name].upstream(bot.url)}
        # Every failure counts: an open circuit would keep the retry from the bot.
        upstream["circuit_breaker"] = {"enabled": False}
        raw["brands"][0]["upstream"] = upstream
        raw["rate_limits"] = {
            "per_agent": {"rate": 1_000_000, "burst": 1_000_000},
            "per_user": {"rate": 1_000_000, "burst": 1_000_000},
        }

    return await make_gateway(edit=edit, environ=ENVIRON)


async def answer_of(response: Any) -> str:
    """``reply`` or ``internal``; anything else fails the example."""
    body = await response.read()
    assert response.headers.get("Content-Type") == A2A_JSON, (response.status, body[:200])
    doc = orjson.loads(body)
    if response.status == 200:
        assert doc["message"]["role"] == "ROLE_AGENT"
        assert doc["message"]["parts"][0]["text"].strip()
        return "reply"
    assert response.status == 500, body[:200]
    assert doc["error"]["details"][0]["reason"] == "INTERNAL"
    assert response.headers["X-Request-Id"]
    return "internal"


@dataclass
class Hostile:
    name: str
    adapter: Adapter
    gw: Harness


@pytest.fixture(params=list(ADAPTERS))
async def hostile(
    request: pytest.FixtureRequest, make_gateway: MakeGateway, hostile_bot: HostileBot
) -> Hostile:
    """A gateway whose bot speaks one adapter's API, for every example of a test."""
    name: str = request.param
    return Hostile(name, ADAPTERS[name], await hostile_gateway(make_gateway, hostile_bot, name))


@budget(30)
@given(data=st.data())
async def test_s4_3_any_bot_reply_is_a_reply_or_internal_and_a_failed_turn_is_released(
    hostile: Hostile, hostile_bot: HostileBot, caplog: pytest.LogCaptureFixture, data: st.DataObject
) -> None:
    reply = data.draw(replies(hostile.adapter), label="reply")
    message_id = f"m-{uuid.uuid4().hex}"
    caplog.clear()
    with caplog.at_level(logging.INFO):
        hostile_bot.reply = reply
        outcome = await answer_of(await hostile.gw.send("Hi", message_id=message_id))
        if outcome == "internal":
            # §4.3: nothing stored and the marker released, so the retry runs the turn once more.
            hostile_bot.reply = hostile.adapter.good
            reached = hostile_bot.turns
            assert await answer_of(await hostile.gw.send("Hi", message_id=message_id)) == "reply"
            assert hostile_bot.turns == reached + 1
    assert not [record for record in caplog.records if record.exc_info]


@pytest.mark.parametrize("kind", ["array", "object"])
async def test_an_action_nested_a_thousand_deep_is_internal_with_one_log_line_and_released(
    make_gateway: MakeGateway, hostile_bot: HostileBot, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """The review's reply: ``actions[].args`` 1,000 deep used to be a bare 500 and a RecursionError
    traceback, and its retry "still being processed" until ``pending_ttl``."""
    gw = await hostile_gateway(make_gateway, hostile_bot, "pact")
    hostile_bot.reply = ADAPTERS["pact"].deep_template.format(deep=deep(1000, kind)).encode()
    with caplog.at_level(logging.INFO):
        assert await answer_of(await gw.send("Hi", message_id="m-deep")) == "internal"
    failures = [record for record in caplog.records if record.getMessage().startswith("bot call failed")]
    assert [record.getMessage() for record in failures] == [
        f"bot call failed: bad_body: reply nested deeper than {MAX_REPLY_DEPTH} levels"
    ]
    assert getattr(failures[0], "brand", None) == "acme"
    assert not [record for record in caplog.records if record.exc_info]
    hostile_bot.reply = ADAPTERS["pact"].good
    assert await answer_of(await gw.send("Hi", message_id="m-deep")) == "reply"


class BuggyAdapter:
    """An adapter with a bug: its first call raises what no adapter is meant to (not an UpstreamError)."""

    def __init__(self) -> None:
        self.calls = 0

    async def send(self, turn: Turn) -> BotReply:
        self.calls += 1
        if self.calls <= 1:
            raise KeyError("a reply field the adapter assumed")
        return BotReply(f"Answer to {turn.text}")

    async def probe(self) -> str:
        return "not probed"


async def test_s4_3_any_adapter_failure_is_internal_logged_once_and_released(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 18 F6: an exception other than UpstreamError escaped the turn: a 500 with a traceback
    and the marker kept, so the retry was "still being processed" until ``pending_ttl``."""
    store = MemoryStore(CacheConfig())
    bot = BuggyAdapter()
    turns = TurnService(store, {"acme": bot}, RateLimits(MemoryRateLimiter(store.keyspace)))
    owner = turns.owner("acme", "https://pa.example", "alice")
    message = SendMessage("m-1", None, "Hi")
    charge = Charge("acme", (), ())
    with caplog.at_level(logging.INFO), pytest.raises(A2AError) as failed:
        await turns.send(owner, message, charge, "req-1")
    assert failed.value.reason is Reason.INTERNAL
    lines = [record for record in caplog.records if record.name == "pact_gateway.turns"]
    assert [record.getMessage() for record in lines] == ["bot call failed: adapter_error: KeyError"]
    assert (getattr(lines[0], "brand", None), getattr(lines[0], "request_id", None)) == ("acme", "req-1")
    assert not [record for record in caplog.records if record.exc_info]
    answer = await turns.send(owner, message, charge, "req-2")
    assert bot.calls == 2
    assert b"Answer to Hi" in answer.body


async def test_an_adapter_failure_of_any_kind_counts_toward_the_circuit_breaker() -> None:
    """Issue 18 F6: only an UpstreamError used to count, so a bot whose every reply broke its adapter
    was called for ever; now it opens the circuit like any failing bot."""
    upstream = UpstreamConfig(url="http://127.0.0.1:9/chat", circuit_breaker=CircuitBreakerConfig(failures=2))
    bot = BuggyAdapter()
    bot.calls = -10  # fails every call here
    guarded = GuardedBot(bot, "acme", upstream, clock=ManualClock())
    turn = Turn("acme", "c-1", "m-1", "Hi", "https://pa.example", "alice", True, "req-1")
    for _ in range(2):
        with pytest.raises(KeyError):
            await guarded.send(turn)
    with pytest.raises(UpstreamError) as refused:
        await guarded.send(turn)
    assert refused.value.reason == "circuit_open"
    assert bot.calls == -8
