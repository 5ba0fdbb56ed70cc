"""The design's ceiling: a bare forwarder on the gateway's own HTTP stack, with no checks at all.

It does only what any front of this bot must do per turn: read the A2A ``message:send``
body, turn it into the bot's JSON contract (the same body shape the gateway sends, plus an
``X-Request-Id``), POST it to the bot over a pooled client, and wrap the bot's text in an A2A
reply. No authentication, no validation, no store: whatever the gateway costs beyond this process
is the price of its guarantees.

``--client`` picks the pooled client: ``aiohttp`` (the default) is aiohttp's ``ClientSession`` with
the connector settings the gateway had, ``gateway`` the gateway's own bot client
(:class:`gateway.upstream.client.BotClient`, its timeout and reply cap). The choice exists to
measure what the gateway's own client saves against ``ClientSession``, with the server side equal
(``python -m bench capacity slow_bot``, its "pass-through gateway client" front).

``--server asyncio`` (with ``--client gateway``) replaces aiohttp's server too, by an asyncio
protocol with httptools' request parser that serves the load generator's keep-alive POSTs and
nothing more: no routing, no limits, no timeouts. It is no front a gateway could be; it is the
floor, what Python's event loop and two connections cost a turn in flight with no HTTP framework
on either side, to show how much of a turn's memory aiohttp's server holds (the "pass-through
asyncio server" front, docs/capacity.md "Memory per turn in flight").

``python -m bench.passthrough --port 9200 --upstream http://127.0.0.1:9100/chat [--client gateway]
[--server asyncio]``
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Final, Literal, get_args

import aiohttp
import httptools
import orjson
from aiohttp import web

from gateway.upstream.client import BotClient, Target
from gateway.upstream.wire import MAX_REPLY_BYTES

Client = Literal["aiohttp", "gateway"]
CLIENTS: Final[tuple[Client, ...]] = get_args(Client)
ServerStack = Literal["aiohttp", "asyncio"]
SERVER_STACKS: Final[tuple[ServerStack, ...]] = get_args(ServerStack)
BACKLOG: Final = 4096
"""The gateway's own listen.backlog default: aiohttp's 128 drops part of the thousands of
connections a slow-bot round opens at once (bench.slow_bot), a cost no gateway pays."""
HEADERS: Final = {"Content-Type": "application/json"}
TIMEOUT_SECONDS: Final = 10.0
"""One bot call's deadline, the same on either client."""

CLIENT: web.AppKey[aiohttp.ClientSession | BotClient] = web.AppKey("client")
UPSTREAM = web.AppKey("upstream", str)
TARGET = web.AppKey("target", Target)
"""``UPSTREAM`` split once, as the gateway's adapters do, so no turn pays for it."""


def bot_headers() -> dict[str, str]:
    """A bot call's headers: the contract's, with a request id of its own."""
    return {**HEADERS, "X-Request-Id": uuid.uuid4().hex}


async def post_through(client: BotClient, target: Target, body: bytes) -> bytes:
    """The bot's answer to ``body`` through the gateway's bot client."""
    reply = await client.request(
        "POST", target, headers=bot_headers(), body=body, within=TIMEOUT_SECONDS, limit=MAX_REPLY_BYTES
    )
    return reply.body


async def post(app: web.Application, body: bytes) -> bytes:
    """The bot's answer to ``body``, through whichever client the forwarder was started with."""
    client = app[CLIENT]
    if isinstance(client, BotClient):
        return await post_through(client, app[TARGET], body)
    async with client.post(app[UPSTREAM], data=body, headers=bot_headers()) as response:
        return await response.read()


def bot_call(raw: bytes) -> tuple[str, bytes]:
    """The A2A ``message:send`` body as the bot's contract: the conversation's id and the bot's body."""
    message = orjson.loads(raw)["message"]
    context_id = message.get("contextId")
    new_conversation = context_id is None
    if context_id is None:
        context_id = str(uuid.uuid4())
    body = orjson.dumps(
        {
            "brand": "acme",
            "conversation_id": context_id,
            "message_id": message["messageId"],
            "text": "\n".join(part["text"] for part in message["parts"]),
            "user": {"pa": "passthrough", "sub": "anonymous"},
            "new_conversation": new_conversation,
        }
    )
    return context_id, body


def a2a_reply(context_id: str, answer: bytes) -> bytes:
    """The bot's answer wrapped as the A2A reply."""
    message = {
        "messageId": f"r-{uuid.uuid4().hex}",
        "contextId": context_id,
        "role": "ROLE_AGENT",
        "parts": [{"text": orjson.loads(answer)["text"]}],
    }
    return orjson.dumps({"message": message})


async def forward(request: web.Request) -> web.Response:
    context_id, body = bot_call(await request.read())
    answer = await post(request.app, body)
    return web.Response(body=a2a_reply(context_id, answer), content_type="application/json")


def create_passthrough_app(upstream: str, client: Client = "aiohttp") -> web.Application:
    """Any POST is forwarded to ``upstream`` over ``client``, a pool without a cap as the gateway's."""
    app = web.Application()
    app[UPSTREAM] = upstream
    app[TARGET] = Target.parse(upstream)

    async def pool(app: web.Application) -> AsyncIterator[None]:
        app[CLIENT] = (
            BotClient()
            if client == "gateway"
            else aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30),
                timeout=aiohttp.ClientTimeout(total=TIMEOUT_SECONDS),
            )
        )
        yield
        await app[CLIENT].close()

    app.cleanup_ctx.append(pool)
    app.router.add_post("/{tail:.*}", forward)
    return app


class FloorConnection(asyncio.Protocol):
    """``--server asyncio``: one keep-alive connection, each request parsed by httptools, answered
    through the gateway's bot client; the parser calls the ``on_*`` methods."""

    def __init__(self, client: BotClient, target: Target) -> None:
        self.client = client
        self.target = target
        self.parser = httptools.HttpRequestParser(self)
        self.chunks: list[bytes] = []
        self.transport: asyncio.Transport | None = None
        self.turn: asyncio.Task[None] | None = None
        """The turn in flight, held here: the loop keeps only a weak reference to a task."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            assert self.transport is not None
            self.transport.close()

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        raw, self.chunks = b"".join(self.chunks), []
        self.turn = asyncio.get_running_loop().create_task(self.answer(raw, self.parser.should_keep_alive()))

    async def answer(self, raw: bytes, keep_alive: bool) -> None:
        context_id, body = bot_call(raw)
        data = a2a_reply(context_id, await post_through(self.client, self.target, body))
        assert self.transport is not None
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
        self.transport.write(head.encode() + data)
        if not keep_alive:
            self.transport.close()


async def serve_floor(host: str, port: int, upstream: str) -> None:
    """The ``--server asyncio`` forwarder, until the process is stopped."""
    target = Target.parse(upstream)
    async with BotClient() as client:
        server = await asyncio.get_running_loop().create_server(
            lambda: FloorConnection(client, target), host, port, backlog=BACKLOG
        )
        async with server:
            await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the bot's /chat URL")
    parser.add_argument(
        "--client", choices=CLIENTS, default="aiohttp", help="how to call the bot (default aiohttp)"
    )
    parser.add_argument(
        "--server", choices=SERVER_STACKS, default="aiohttp", help="what serves the A2A side (aiohttp)"
    )
    args = parser.parse_args(argv)
    if args.server == "asyncio":
        if args.client != "gateway":
            parser.error("--server asyncio calls the bot through --client gateway")
        asyncio.run(serve_floor(args.host, args.port, args.upstream))
        return
    web.run_app(
        create_passthrough_app(args.upstream, args.client),
        host=args.host,
        port=args.port,
        backlog=BACKLOG,
        access_log=None,
        print=None,
    )


if __name__ == "__main__":
    main()
