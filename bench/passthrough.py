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

``python -m bench.passthrough --port 9200 --upstream http://127.0.0.1:9100/chat [--client gateway]``
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Final, Literal, get_args

import aiohttp
import orjson
from aiohttp import web

from gateway.upstream.client import BotClient, Target
from gateway.upstream.wire import MAX_REPLY_BYTES

Client = Literal["aiohttp", "gateway"]
CLIENTS: Final[tuple[Client, ...]] = get_args(Client)
TIMEOUT_SECONDS: Final = 10.0
"""One bot call's deadline, the same on either client."""

CLIENT: web.AppKey[aiohttp.ClientSession | BotClient] = web.AppKey("client")
UPSTREAM = web.AppKey("upstream", str)
TARGET = web.AppKey("target", Target)
"""``UPSTREAM`` split once, as the gateway's adapters do, so no turn pays for it."""


async def post(app: web.Application, body: bytes, headers: Mapping[str, str]) -> bytes:
    """The bot's answer to ``body``, through whichever client the forwarder was started with."""
    client = app[CLIENT]
    if isinstance(client, BotClient):
        reply = await client.request(
            "POST", app[TARGET], headers=headers, body=body, within=TIMEOUT_SECONDS, limit=MAX_REPLY_BYTES
        )
        return reply.body
    async with client.post(app[UPSTREAM], data=body, headers=headers) as response:
        return await response.read()


async def forward(request: web.Request) -> web.Response:
    message = orjson.loads(await request.read())["message"]
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
    headers = {"Content-Type": "application/json", "X-Request-Id": uuid.uuid4().hex}
    reply = orjson.loads(await post(request.app, body, headers))
    answer = {
        "message": {
            "messageId": f"r-{uuid.uuid4().hex}",
            "contextId": context_id,
            "role": "ROLE_AGENT",
            "parts": [{"text": reply["text"]}],
        }
    }
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


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


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the bot's /chat URL")
    parser.add_argument(
        "--client", choices=CLIENTS, default="aiohttp", help="how to call the bot (default aiohttp)"
    )
    args = parser.parse_args(argv)
    # The gateway's own listen.backlog default: aiohttp's 128 drops part of the thousands of
    # connections a slow-bot round opens at once (bench.slow_bot), a cost no gateway pays.
    web.run_app(
        create_passthrough_app(args.upstream, args.client),
        host=args.host,
        port=args.port,
        backlog=4096,
        access_log=None,
        print=None,
    )


if __name__ == "__main__":
    main()
