"""The design's ceiling: a bare forwarder on the gateway's own HTTP stack, with no checks at all.

It does only what any front of this bot must do per turn: read the A2A ``message:send`` body, turn
it into the bot's JSON contract (the gateway's body shape, plus an ``X-Request-Id``), POST it to the
bot through the gateway's own bot client (:class:`gateway.upstream.client.BotClient`) and wrap the
bot's text in an A2A reply. No authentication, validation or store: whatever the gateway costs
beyond this process is the price of its guarantees.

``python -m bench.passthrough --port 9200 --upstream http://127.0.0.1:9100/chat`` (started by the fronts).
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Final

import orjson
from aiohttp import web

from gateway.upstream.client import BotClient, Target
from gateway.upstream.wire import MAX_REPLY_BYTES

BACKLOG: Final = 4096
"""The gateway's own ``listen.backlog`` default: aiohttp's 128 drops part of the thousands of
connections a slow-bot round opens at once, a cost no gateway pays."""
TIMEOUT_SECONDS: Final = 10.0
CLIENT = web.AppKey("client", BotClient)
TARGET = web.AppKey("target", Target)


def bot_call(raw: bytes) -> tuple[str, bytes]:
    """The A2A ``message:send`` body as the bot's contract: the conversation's id and the bot's body."""
    message = orjson.loads(raw)["message"]
    context_id = message.get("contextId")
    new_conversation = context_id is None
    if context_id is None:
        context_id = str(uuid.uuid4())
    body = {
        "brand": "acme",
        "conversation_id": context_id,
        "message_id": message["messageId"],
        "text": "\n".join(part["text"] for part in message["parts"]),
        "user": {"pa": "passthrough", "sub": "anonymous"},
        "new_conversation": new_conversation,
    }
    return context_id, orjson.dumps(body)


async def forward(request: web.Request) -> web.Response:
    context_id, body = bot_call(await request.read())
    headers = {"Content-Type": "application/json", "X-Request-Id": uuid.uuid4().hex}
    answer = await request.app[CLIENT].request(
        "POST", request.app[TARGET], headers=headers, body=body, within=TIMEOUT_SECONDS, limit=MAX_REPLY_BYTES
    )
    message = {
        "messageId": f"r-{uuid.uuid4().hex}",
        "contextId": context_id,
        "role": "ROLE_AGENT",
        "parts": [{"text": orjson.loads(answer.body)["text"]}],
    }
    return web.Response(body=orjson.dumps({"message": message}), content_type="application/json")


def create_passthrough_app(upstream: str) -> web.Application:
    """Any POST is forwarded to ``upstream`` through one pooled bot client without a cap, as the gateway."""
    app = web.Application()
    app[TARGET] = Target.parse(upstream)

    async def pool(app: web.Application) -> AsyncIterator[None]:
        async with BotClient() as client:
            app[CLIENT] = client
            yield

    app.cleanup_ctx.append(pool)
    app.router.add_post("/{tail:.*}", forward)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the bot's /chat URL")
    args = parser.parse_args(argv)
    web.run_app(
        create_passthrough_app(args.upstream),
        host="127.0.0.1",
        port=args.port,
        backlog=BACKLOG,
        access_log=None,
        print=None,
    )


if __name__ == "__main__":
    main()
