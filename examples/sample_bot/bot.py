"""Acme's order-status bot: the kind of legacy support bot pact-gateway is put in front of.

It knows nothing of PACT, JWTs or A2A. It answers one JSON POST per turn with
``{"text": ..., "end": ...}`` and keeps a little per-conversation memory (the last order
asked about), keyed by the ``conversation_id`` the gateway sends.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass

from aiohttp import web

ORDERS: dict[str, tuple[str, str]] = {
    "A-10001": ("shipped", "It left our warehouse on Monday and arrives Thursday."),
    "A-10002": ("processing", "It is being packed and ships within 24 hours."),
    "A-10003": ("delivered", "It was delivered on Tuesday and signed for at the front door."),
}

_ORDER_NUMBER = re.compile(r"\bA-\d{5}\b", re.IGNORECASE)
_GOODBYE = re.compile(r"\b(bye|goodbye|that'?s all|no thanks)\b", re.IGNORECASE)

GREETING = "Hi, I'm Acme's order assistant. What is your order number? It looks like A-10001."
ASK_NUMBER = "I can look up an order for you. What is the order number? It looks like A-10001."
FAREWELL = "Glad I could help. Goodbye!"


@dataclass(slots=True)
class Conversation:
    last_order: str | None = None


MEMORY = web.AppKey("memory", dict[str, Conversation])
TOKEN = web.AppKey("token", str)


def answer(conversation: Conversation, text: str, new_conversation: bool) -> tuple[str, bool]:
    """The bot's whole brain: pure, so its behaviour is easy to state and test."""
    if _GOODBYE.search(text):
        return FAREWELL, True
    match = _ORDER_NUMBER.search(text)
    if match:
        number = match.group(0).upper()
        conversation.last_order = number
        if number not in ORDERS:
            return f"I can't find order {number}. Could you check the number?", False
        status, detail = ORDERS[number]
        return f"Order {number} is {status}. {detail}", False
    if conversation.last_order and re.search(r"\b(when|where|arrive|status)\b", text, re.IGNORECASE):
        status, detail = ORDERS.get(conversation.last_order, ("unknown", ""))
        return f"Order {conversation.last_order} is {status}. {detail}".strip(), False
    return (GREETING if new_conversation else ASK_NUMBER), False


async def chat(request: web.Request) -> web.Response:
    token = request.app[TOKEN]
    if token and request.headers.get("Authorization") != f"Bearer {token}":
        return web.json_response({"error": "unauthorized"}, status=401)
    try:
        body = await request.json()
        conversation_id = str(body["conversation_id"])
        text = str(body["text"])
        new_conversation = bool(body.get("new_conversation", False))
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": "bad request"}, status=400)
    memory = request.app[MEMORY]
    conversation = memory.setdefault(conversation_id, Conversation())
    reply, end = answer(conversation, text, new_conversation)
    if end:
        memory.pop(conversation_id, None)
    return web.json_response({"text": reply, "end": end})


def create_bot_app(token: str = "") -> web.Application:
    """The bot as an aiohttp app; ``token``, when set, is required as ``Authorization: Bearer``."""
    app = web.Application()
    app[MEMORY] = {}
    app[TOKEN] = token
    app.router.add_post("/chat", chat)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Acme's sample order-status bot")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--token", default="", help="require this bearer token from the gateway")
    args = parser.parse_args(argv)
    web.run_app(create_bot_app(args.token), host=args.host, port=args.port, access_log=None)
