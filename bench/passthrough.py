"""The design's ceiling: a bare forwarder on the gateway's own HTTP stack, with no checks at all.

It does only what any front of this bot must do per turn: read the A2A ``message:send``
body, turn it into the bot's JSON contract (the same body shape the gateway sends, plus an
``X-Request-Id``), POST it to the bot over a pooled aiohttp session (the gateway's connector
settings), and wrap the bot's text in an A2A reply. No authentication, no validation, no
store: whatever the gateway costs beyond this process is the price of its guarantees.

``python -m bench.passthrough --port 9200 --upstream http://127.0.0.1:9100/chat``
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import AsyncIterator, Sequence

import aiohttp
import orjson
from aiohttp import web

SESSION = web.AppKey("session", aiohttp.ClientSession)
UPSTREAM = web.AppKey("upstream", str)


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
    async with request.app[SESSION].post(request.app[UPSTREAM], data=body, headers=headers) as response:
        reply = orjson.loads(await response.read())
    answer = {
        "message": {
            "messageId": f"r-{uuid.uuid4().hex}",
            "contextId": context_id,
            "role": "ROLE_AGENT",
            "parts": [{"text": reply["text"]}],
        }
    }
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


def create_passthrough_app(upstream: str) -> web.Application:
    """Any POST is forwarded to ``upstream``; the session mirrors the gateway's upstream pool."""
    app = web.Application()
    app[UPSTREAM] = upstream

    async def session(app: web.Application) -> AsyncIterator[None]:
        app[SESSION] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=0, keepalive_timeout=30),
            timeout=aiohttp.ClientTimeout(total=10),
        )
        yield
        await app[SESSION].close()

    app.cleanup_ctx.append(session)
    app.router.add_post("/{tail:.*}", forward)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the bot's /chat URL")
    args = parser.parse_args(argv)
    # The gateway's own listen.backlog default: aiohttp's 128 drops part of the thousands of
    # connections a slow-bot round opens at once (bench.slow_bot), a cost no gateway pays.
    web.run_app(
        create_passthrough_app(args.upstream),
        host=args.host,
        port=args.port,
        backlog=4096,
        access_log=None,
        print=None,
    )


if __name__ == "__main__":
    main()
