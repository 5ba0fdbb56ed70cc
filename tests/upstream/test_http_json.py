"""The native bot contract's answers: the plain reply, the §5 members a bot acting for a User adds,
and the answer read whole from a real bot on loopback, however it is written, within a cap."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
import pytest
import rfc8785
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.config import UpstreamConfig
from gateway.upstream.base import Action, BotReply, Turn, UpstreamError
from gateway.upstream.client import BotClient
from gateway.upstream.http_json import MAX_REPLY_BYTES, HttpJsonAdapter, parse_bot_reply
from gateway.upstream.wire import MAX_LIST_ITEMS


def parse(doc: Any) -> BotReply:
    return parse_bot_reply(orjson.dumps(doc))


def test_plain_reply_has_no_authority() -> None:
    assert parse({"text": "Hi", "end": True}) == BotReply("Hi", True, (), (), ())
    assert parse({"text": "Hi", "requires_scopes": None, "actions": None, "scopes_used": None}) == BotReply(
        "Hi"
    )


def test_s5_reply_members_are_parsed_in_order_each_scope_once() -> None:
    reply = parse(
        {
            "text": "Cancelled.",
            "requires_scopes": ["orders:cancel"],
            "actions": [
                {"tool": "lookup_orders"},
                {"tool": "cancel_order", "args": {"order": "A-1", "why": 1.0}},
            ],
            "scopes_used": ["orders:cancel", "orders:read", "orders:cancel"],
        }
    )
    assert reply.requires_scopes == ("orders:cancel",)
    assert reply.scopes_used == ("orders:cancel", "orders:read")
    assert reply.actions == (
        Action("lookup_orders"),
        Action("cancel_order", rfc8785.dumps({"why": 1, "order": "A-1"})),
    )
    assert reply.actions[1].canonical_args == b'{"order":"A-1","why":1}'


def test_null_args_are_no_args() -> None:
    assert parse({"text": "x", "actions": [{"tool": "t", "args": None}]}).actions == (Action("t"),)


@pytest.mark.parametrize(
    "extra",
    [
        {"requires_scopes": "orders:read"},
        {"requires_scopes": [""]},
        {"scopes_used": ['orders"read']},
        {"scopes_used": ["x" * 129]},
        {"actions": [{"tool": ""}]},
        {"actions": [{"tool": 3}]},
        {"actions": ["lookup_orders"]},
        {"actions": [{"tool": "t", "argz": {}}]},
        {"actions": [{"tool": "t", "args": [2**53]}]},
        {"actions": [{"tool": "t"}] * (MAX_LIST_ITEMS + 1)},
    ],
)
def test_bad_s5_members_are_a_bad_body(extra: dict[str, Any]) -> None:
    with pytest.raises(UpstreamError) as failure:
        parse({"text": "x", **extra})
    assert failure.value.reason == "bad_body"


ORDER = "https://acme.example/rar/order"


def test_rfc9396_an_action_names_the_detail_it_used_apart_from_the_receipts_action() -> None:
    """The bot's detail is kept as canonical JSON beside the actions; the action's own
    ``authorization_detail`` (what a receipt names) stays unset until the turn finds a granted one."""
    reply = parse(
        {
            "text": "Cancelled.",
            "actions": [
                {"tool": "lookup_orders"},
                {
                    "tool": "cancel_order",
                    "args": {"order": "A-10002"},
                    "authorization_detail": {"type": ORDER, "identifier": "A-10002", "actions": ["cancel"]},
                },
            ],
        }
    )
    assert reply.actions == (Action("lookup_orders"), Action("cancel_order", b'{"order":"A-10002"}'))
    assert reply.action_details == (
        None,
        '{"actions":["cancel"],"identifier":"A-10002","type":"https://acme.example/rar/order"}',
    )
    unbound = parse({"text": "x", "actions": [{"tool": "t", "authorization_detail": None}]})
    assert unbound.action_details == ()


def test_rfc9396_required_details_are_parsed_in_order_each_once() -> None:
    one = {"type": ORDER, "identifier": "A-10002", "actions": ["cancel"]}
    reply = parse(
        {
            "text": "May I?",
            "requires_authorization_details": [one, {"type": ORDER}, dict(reversed(one.items()))],
        }
    )
    assert reply.requires_details == (
        '{"actions":["cancel"],"identifier":"A-10002","type":"https://acme.example/rar/order"}',
        '{"type":"https://acme.example/rar/order"}',
    )
    assert parse({"text": "x", "requires_authorization_details": None}) == BotReply("x")


BOUND = {"type": ORDER, "identifier": "A-10002", "actions": ["cancel"]}


@pytest.mark.parametrize(
    "extra",
    [
        {"requires_authorization_details": {"type": ORDER}},
        {"requires_authorization_details": ["not an object"]},
        {"requires_authorization_details": [{"identifier": "A-10002"}]},
        {"requires_authorization_details": [{"type": ""}]},
        {"requires_authorization_details": [{"type": "x" * 257}]},
        {"requires_authorization_details": [{"type": ORDER, "n": 2**53}]},
        {"requires_authorization_details": [{"type": ORDER}] * (MAX_LIST_ITEMS + 1)},
        {"actions": [{"tool": "t", "authorization_detail": "A-10002"}]},
        {"actions": [{"tool": "t", "authorization_detail": {**BOUND, "type": 7}}]},
        {"actions": [{"tool": "t", "authorization_detail": {"type": ORDER, "actions": ["cancel"]}}]},
        {"actions": [{"tool": "t", "authorization_detail": {**BOUND, "identifier": ""}}]},
        {"actions": [{"tool": "t", "authorization_detail": {**BOUND, "identifier": 10002}}]},
        {"actions": [{"tool": "t", "authorization_detail": {"type": ORDER, "identifier": "A-10002"}}]},
        {"actions": [{"tool": "t", "authorization_detail": {**BOUND, "actions": []}}]},
        {"actions": [{"tool": "t", "authorization_detail": {**BOUND, "actions": ["cancel", "cancel"]}}]},
        {"actions": [{"tool": "t", "authorization_detail": {**BOUND, "actions": [""]}}]},
        {"actions": [{"tool": "t", "authorization_detail": {**BOUND, "actions": "cancel"}}]},
        {"actions": [{"tool": "t", "authorization_detail": {**BOUND, "limit": 2**53}}]},
    ],
)
def test_rfc9396_a_badly_shaped_detail_is_a_bad_body(extra: dict[str, Any]) -> None:
    with pytest.raises(UpstreamError) as failure:
        parse({"text": "x", **extra})
    assert failure.value.reason == "bad_body"


# Reading the answer over real HTTP (review row 2): one read(n) returned only what had arrived so far.

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
StartBot = Callable[[Handler], Awaitable[HttpJsonAdapter]]
READ_BOUND = 20.0
"""Generous seconds within which every exchange here ends (the bot's own timeout is 30 s)."""


def reply_bytes(text: str) -> bytes:
    return orjson.dumps({"text": text, "end": False})


@pytest.fixture
async def bot_answering() -> AsyncIterator[StartBot]:
    """``await bot_answering(handler)``: a real bot on loopback answering with ``handler``, and the
    adapter that calls it (a 30 s timeout: far beyond :data:`READ_BOUND`)."""
    servers: list[TestServer] = []
    session = BotClient()

    async def start(handler: Handler) -> HttpJsonAdapter:
        app = web.Application()
        app.router.add_post("/chat", handler)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return HttpJsonAdapter(UpstreamConfig(url=str(server.make_url("/chat")), timeout=30.0), session)

    yield start
    await session.close()
    for server in servers:
        await server.close()


def turn() -> Turn:
    return Turn("acme", "c-1", "m-1", "hi", "https://pa.example", "alice", False, "req-00000001")


async def send(adapter: HttpJsonAdapter) -> BotReply:
    async with asyncio.timeout(READ_BOUND):
        return await adapter.send(turn())


async def refused(adapter: HttpJsonAdapter) -> str:
    with pytest.raises(UpstreamError) as failure:
        await send(adapter)
    return failure.value.reason


def in_pieces(body: bytes, pieces: int, *, announce_length: bool) -> Handler:
    """Writes ``body`` in ``pieces`` parts, flushed 50 ms apart (chunked, or under a Content-Length)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        if announce_length:
            response.content_length = len(body)
        await response.prepare(request)
        size = -(-len(body) // pieces)
        for start in range(0, len(body), size):
            await response.write(body[start : start + size])
            await asyncio.sleep(0.05)
        await response.write_eof()
        return response

    return handler


@pytest.mark.parametrize("announce_length", [True, False], ids=["content-length", "chunked"])
async def test_a_reply_written_in_delayed_pieces_is_read_whole(
    bot_answering: StartBot, announce_length: bool
) -> None:
    text = "Order A-10001 shipped on Monday; it should arrive on Thursday."
    adapter = await bot_answering(in_pieces(reply_bytes(text), 5, announce_length=announce_length))
    assert await send(adapter) == BotReply(text)


async def test_a_200_kb_reply_is_read_whole(
    bot_answering: StartBot,
) -> None:
    text = "All your orders: " + "A-10001 shipped. " * 12_000

    async def large(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=reply_bytes(text), content_type="application/json")

    adapter = await bot_answering(large)
    assert len(reply_bytes(text)) > 200_000
    assert (await send(adapter)).text == text


async def test_a_reply_announced_over_the_cap_is_a_bad_body_unread(
    bot_answering: StartBot,
) -> None:
    body = reply_bytes("x" * MAX_REPLY_BYTES)
    adapter = await bot_answering(in_pieces(body, 2, announce_length=True))
    assert await refused(adapter) == "bad_body"


async def test_an_endless_reply_stops_at_the_cap(
    bot_answering: StartBot,
) -> None:
    """No Content-Length and no end: reading stops past MAX_REPLY_BYTES, long before the timeout."""
    written: list[int] = []

    async def endless(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        with contextlib.suppress(ConnectionError):
            await response.write(b'{"text": "')
            while True:
                await response.write(b"x" * 65536)
                written.append(65536)
        return response

    adapter = await bot_answering(endless)
    assert await refused(adapter) == "bad_body"
    assert sum(written) > MAX_REPLY_BYTES


async def test_a_reply_that_stops_half_way_is_a_protocol_failure(
    bot_answering: StartBot,
) -> None:
    """Content-Length promised, half sent, connection closed: a failed call, not half a reply."""
    body = reply_bytes("Order A-10001 shipped on Monday.")

    async def half_way(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body[: len(body) // 2])
        assert request.transport is not None
        request.transport.close()
        return response

    adapter = await bot_answering(half_way)
    assert await refused(adapter) == "protocol"


async def test_an_answer_naming_another_message_id_is_refused_and_its_connection_not_kept() -> None:
    """Issue 28 I1: a bot that holds an answer back and sends it on the next call's connection hands it to
    another User; an answer echoing the call's ``message_id`` proves whose it is. One naming another is
    refused (and the connection that carried it closed); one naming none is taken, as it always was."""
    echoes: list[Any] = ["m-1", None, "m-0", 7]

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        assert body["message_id"] == "m-1"
        echoed = echoes.pop(0)
        return web.json_response(
            {"text": "Order A-10001 shipped."} | ({} if echoed is None else {"message_id": echoed})
        )

    app = web.Application()
    app.router.add_post("/chat", chat)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with BotClient() as client:
            adapter = HttpJsonAdapter(UpstreamConfig(url=str(server.make_url("/chat")), timeout=30.0), client)
            assert (await adapter.send(turn())).text == "Order A-10001 shipped."
            assert (await adapter.send(turn())).text == "Order A-10001 shipped."
            assert client.idle_connections == 1
            for _ in range(2):
                with pytest.raises(UpstreamError) as failure:
                    await adapter.send(turn())
                assert (failure.value.reason, failure.value.detail) == (
                    "wrong_message",
                    "the answer names another message_id",
                )
                assert client.idle_connections == 0
    finally:
        await server.close()
