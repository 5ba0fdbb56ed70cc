"""A real bot on loopback that tests can steer: the sample bot's answers by default, or a failure.

Every call is recorded (the parsed JSON body and headers) so tests can assert what the gateway
forwarded and how many times the bot ran.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from examples.sample_bot.bot import Account, Conversation, respond


@dataclass
class BotCall:
    body: dict[str, Any]
    headers: CIMultiDict[str]


@dataclass
class ControlledBot:
    """``mode``: ``sample`` (the sample bot's brain, with account actions for the ``delegating``
    Brands), ``end`` (answers and closes), ``status500``, ``slow`` (sleeps past any sane timeout),
    ``bad_body``, ``empty_text``, ``cookie`` (the sample answer with a ``botsession`` cookie naming
    the caller's ``sub``, as a stateful bot would set), ``overreach`` (the sample answer claiming
    an ``orders:cancel`` action whatever was granted), ``fixed`` (answers ``fixed_reply`` verbatim),
    ``pieces`` (the sample answer written in two pieces, the second after the first was flushed),
    ``echo`` (names what it was sent: :func:`echo_text`, so each reply can be checked against its request),
    ``half_way`` (promises a reply's length, sends half of it and closes the connection).
    ``gate``, when set, holds every call until it is released (for concurrency tests); ``latency``
    is how long every call takes before it is answered (a bot that thinks: a fault then catches
    turns inside the call)."""

    mode: str = "sample"
    gate: asyncio.Event | None = None
    latency: float = 0.0
    calls: list[BotCall] = field(default_factory=list)
    memory: dict[str, Conversation] = field(default_factory=dict)
    accounts: dict[str, Account] = field(default_factory=dict)
    delegating: frozenset[str] = frozenset({"acme"})
    order_bound: frozenset[str] = frozenset()
    """The Brands whose cancellations the sample brain binds to one order (RFC 9396 details)."""
    fixed_reply: Any = None
    server: TestServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/chat"))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.calls.append(BotCall(body, CIMultiDict(request.headers)))
        if self.gate is not None:
            await self.gate.wait()
        if self.latency:
            await asyncio.sleep(self.latency)
        if self.mode == "status500":
            return web.json_response({"error": "boom"}, status=500)
        if self.mode == "slow":
            await asyncio.sleep(30)
        if self.mode == "bad_body":
            return web.Response(text="<html>oops</html>", content_type="text/html")
        if self.mode == "empty_text":
            return web.json_response({"text": "  ", "end": False})
        if self.mode == "end":
            return web.json_response({"text": "Goodbye from the bot.", "end": True})
        if self.mode == "fixed":
            return web.json_response(self.fixed_reply)
        if self.mode == "echo":
            return web.json_response(
                {"text": echo_text(body), "end": False, "message_id": body["message_id"]}
            )
        if self.mode == "half_way":
            return await _half_way(request, orjson.dumps({"text": "Order A-10001 shipped.", "end": False}))
        conversation = self.memory.setdefault(body["conversation_id"], Conversation())
        reply = respond(conversation, self.accounts, body, self.delegating, self.order_bound)
        if self.mode == "overreach":
            reply.update(
                actions=[{"tool": "cancel_order", "args": {"order": "A-10002"}}],
                scopes_used=["orders:cancel"],
            )
        reply["message_id"] = body["message_id"]  # echoed, as the sample bot does
        if self.mode == "pieces":
            return await _in_pieces(request, orjson.dumps(reply))
        response = web.json_response(reply)
        if self.mode == "cookie":
            response.set_cookie("botsession", f"session-of-{body['user']['sub']}")
        return response


async def _in_pieces(request: web.Request, body: bytes) -> web.StreamResponse:
    """``body`` as two chunks with a pause between, so the client sees them arrive apart."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    await response.write(body[:8])
    await asyncio.sleep(0.1)
    await response.write(body[8:])
    await response.write_eof()
    return response


async def _half_way(request: web.Request, body: bytes) -> web.StreamResponse:
    """``Content-Length`` for ``body``, then half of it, then the connection closes."""
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.content_length = len(body)
    await response.prepare(request)
    await response.write(body[: len(body) // 2])
    assert request.transport is not None
    request.transport.close()
    return response


def echo_text(call: dict[str, Any]) -> str:
    """The ``echo`` bot's answer to the bot-contract body ``call``: all that tells one turn from another."""
    user = call["user"]
    return f"echo {call['message_id']} for {user['sub']} in {call['conversation_id']}: {call['text']}"


@contextlib.asynccontextmanager
async def running_bot(mode: str = "sample") -> AsyncIterator[ControlledBot]:
    """A :class:`ControlledBot` serving on loopback for the block (a fixture of any scope can use it)."""
    controlled = ControlledBot(mode=mode)
    app = web.Application()
    app.router.add_post("/chat", controlled.handle)
    controlled.server = TestServer(app, host="127.0.0.1")
    await controlled.server.start_server()
    try:
        yield controlled
    finally:
        if controlled.gate is not None:
            controlled.gate.set()
        await controlled.server.close()


@pytest.fixture
async def bot() -> AsyncIterator[ControlledBot]:
    async with running_bot() as controlled:
        yield controlled
