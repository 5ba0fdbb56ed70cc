"""What the adapters share on the wire: a bot's answer read whole and capped, no redirects followed,
the pseudonymous user id, and the probe's verdicts (the ``pact`` adapter's probe among them)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.config import UpstreamConfig
from gateway.upstream.base import Turn, UpstreamError
from gateway.upstream.client import BotClient
from gateway.upstream.http_json import HttpJsonAdapter
from gateway.upstream.wire import exchange, probe_verdict, user_handle
from tests.support.adapters import reply_of
from tests.support.gateway import Harness

LIMIT = 64


async def in_pieces(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    await response.prepare(request)
    for piece in (b'{"text": ', b'"whole"}'):
        await response.write(piece)
        await asyncio.sleep(0.05)  # each piece leaves on its own
    await response.write_eof()
    return response


async def oversize_chunked(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    response.enable_chunked_encoding()
    await response.prepare(request)
    for _ in range(4):
        await response.write(b"x" * (LIMIT // 2))
    await response.write_eof()
    return response


def fixed(
    status: int, body: bytes = b"", location: str | None = None
) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=status, body=body, headers={"Location": location} if location else None)

    return answer


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()
    app.router.add_get("/pieces", in_pieces)
    app.router.add_get("/big", fixed(200, b"x" * (LIMIT + 1)))
    app.router.add_get("/big-chunked", oversize_chunked)
    app.router.add_get("/exact", fixed(200, b"x" * LIMIT))
    app.router.add_get("/moved", fixed(302, location="/exact"))
    app.router.add_route("OPTIONS", "/options", fixed(204))
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    yield test_server
    await test_server.close()


async def fetch(server: TestServer, path: str) -> tuple[int, bytes]:
    async with BotClient() as client:
        reply = await exchange(client, "GET", str(server.make_url(path)), headers={}, within=5, limit=LIMIT)
    return reply.status, reply.body


async def test_an_answer_arriving_in_pieces_is_read_whole(server: TestServer) -> None:
    assert await fetch(server, "/pieces") == (200, b'{"text": "whole"}')
    assert await fetch(server, "/exact") == (200, b"x" * LIMIT)


@pytest.mark.parametrize("path", ["/big", "/big-chunked"])
async def test_an_answer_over_the_cap_is_a_bad_body(server: TestServer, path: str) -> None:
    with pytest.raises(UpstreamError) as failure:
        await fetch(server, path)
    assert failure.value.reason == "bad_body"


async def test_redirects_are_not_followed(server: TestServer) -> None:
    status, _ = await fetch(server, "/moved")
    assert status == 302


async def test_pact_reply_arriving_in_pieces_is_read_whole(gw_memory: Harness) -> None:
    """A bot that flushes its JSON in two writes was cut after the first and failed as "not JSON"."""
    gw_memory.bot.mode = "pieces"
    _, message = await reply_of(await gw_memory.send("Hi, where is my order?"))
    assert message["parts"][0]["text"].startswith("Hi, I'm Acme's order assistant")


async def test_pact_probe_sends_options_and_no_turn(gw_memory: Harness, server: TestServer) -> None:
    async with BotClient() as client:
        adapter = HttpJsonAdapter(UpstreamConfig(url=gw_memory.bot.url), client)
        assert await adapter.probe() == "OPTIONS answered HTTP 405"
        assert gw_memory.bot.calls == []
        options = HttpJsonAdapter(UpstreamConfig(url=str(server.make_url("/options"))), client)
        assert await options.probe() == "OPTIONS answered HTTP 204"
        missing = HttpJsonAdapter(UpstreamConfig(url=str(server.make_url("/nowhere"))), client)
        with pytest.raises(UpstreamError, match="HTTP 404"):
            await missing.probe()


@pytest.mark.parametrize(
    ("status", "ok"),
    [
        (200, True),
        (204, True),
        (400, True),
        (405, True),
        (501, True),  # issue 19 row 7: a server that has no OPTIONS handler is still there
        (302, False),
        (401, False),
        (403, False),
        (404, False),
        (500, False),
        (503, False),
    ],
)
def test_probe_verdicts(status: int, ok: bool) -> None:
    if ok:
        assert probe_verdict("OPTIONS", status).startswith(f"OPTIONS answered HTTP {status}")
    else:
        with pytest.raises(UpstreamError, match=f"HTTP {status}"):
            probe_verdict("OPTIONS", status)


def test_user_handle_is_stable_per_user_and_brand_and_hides_the_sub() -> None:
    def handle(brand: str = "acme", issuer: str = "https://pa", sub: str = "alice-0001") -> str:
        return user_handle(Turn(brand, "ctx", "m", "t", issuer, sub, False, "r"))

    assert handle() == handle()
    assert len({handle(), handle(sub="bob"), handle(issuer="https://other-pa"), handle(brand="globex")}) == 4
    assert len(handle()) == 32
    assert "alice" not in handle()
