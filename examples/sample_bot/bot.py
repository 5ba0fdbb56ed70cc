"""Acme's order-status bot: the kind of legacy support bot pact-gateway is put in front of.

It knows nothing of PACT, JWTs or A2A. It answers one JSON POST per turn with
``{"text": ..., "end": ..., "message_id": ...}`` (the call's ``message_id`` echoed, so the gateway
can tell an answer to another message, docs/adapters.md) and keeps a little per-conversation
memory (the last order asked about), keyed by the ``conversation_id`` the gateway sends.

When the gateway forwards a ``delegation`` (the User let their personal agent act on their
Acme account, §5), two account actions open up: listing the User's orders (scope
``orders:read``) and cancelling one (``orders:cancel``). Without the scope the bot answers
``requires_scopes`` and the gateway asks the User for it; with it, the bot acts and reports
``actions`` and ``scopes_used`` for the signed receipt.

For a Brand whose cancellations are bound to one order (RFC 9396 authorization details, the
``--order-details`` Brands), the scope is not enough: the bot cancels an order only when one of
the delegation's ``authorization_details`` names that order (type :data:`ORDER_DETAIL`) and
allows ``cancel``; otherwise it asks with ``requires_authorization_details`` for exactly that
order. Its cancellation names the detail it used, and the gateway signs it only if the person
approved one that covers it.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

ORDER_DETAIL = "https://acme.example/rar/order"
"""The RFC 9396 ``type`` of a detail naming one order (gateway/data/demo.yaml configures it)."""
CANCEL = "cancel"

ORDERS: dict[str, tuple[str, str]] = {
    "A-10001": ("shipped", "It left our warehouse on Monday and arrives Thursday."),
    "A-10002": ("processing", "It is being packed and ships within 24 hours."),
    "A-10003": ("delivered", "It was delivered on Tuesday and signed for at the front door."),
}

_ORDER_NUMBER = re.compile(r"\bA-\d{5}\b", re.IGNORECASE)
_GOODBYE = re.compile(r"\b(bye|goodbye|that'?s all|no thanks)\b", re.IGNORECASE)
_MY_ORDERS = re.compile(r"\bmy orders\b", re.IGNORECASE)
_CANCEL = re.compile(r"\bcancel\b.*?\b(A-\d{5})\b", re.IGNORECASE)

GREETING = "Hi, I'm Acme's order assistant. What is your order number? It looks like A-10001."
ASK_NUMBER = "I can look up an order for you. What is the order number? It looks like A-10001."
FAREWELL = "Glad I could help. Goodbye!"


@dataclass(slots=True)
class Conversation:
    last_order: str | None = None


@dataclass(slots=True)
class Account:
    """One Acme customer's account, as far as the demo goes: every customer has the sample orders."""

    cancelled: set[str] = field(default_factory=set)

    def status(self, number: str) -> str:
        return "cancelled" if number in self.cancelled else ORDERS[number][0]


MEMORY = web.AppKey("memory", dict[str, Conversation])
ACCOUNTS = web.AppKey("accounts", dict[str, Account])
DELEGATING = web.AppKey("delegating", frozenset[str])
ORDER_BOUND = web.AppKey("order_bound", frozenset[str])
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


def _permission(scope: str, doing: str) -> dict[str, Any]:
    return {"text": f"I need permission to {doing} on your Acme account.", "requires_scopes": [scope]}


def order_detail(number: str) -> dict[str, Any]:
    """The RFC 9396 detail that lets the bot cancel order ``number``, and nothing else."""
    return {"type": ORDER_DETAIL, "identifier": number, "actions": [CANCEL]}


def detail_allows(details: Collection[Mapping[str, Any]], number: str) -> bool:
    """Whether one of the delegation's details names order ``number`` and allows cancelling it
    (a detail without ``actions`` allows what its type does, cancelling included)."""
    return any(
        detail.get("type") == ORDER_DETAIL
        and detail.get("identifier") == number
        and CANCEL in detail.get("actions", [CANCEL])
        for detail in details
    )


def account_answer(
    text: str,
    account: Account | None,
    granted: frozenset[str],
    details: Collection[Mapping[str, Any]] | None = None,
) -> dict[str, Any] | None:
    """The answer to an account action (the §5 part of the brain), or ``None`` for anything else.

    ``account`` is the delegated Brand user's (``None`` without delegation), ``granted`` the
    scopes the gateway forwarded. ``details`` are its RFC 9396 authorization details when the
    Brand binds a cancellation to one order (``None`` when it does not): then an order none of
    them names is asked for, not cancelled. Pure but for the cancellation it records on ``account``.
    """
    cancel = _CANCEL.search(text)
    if cancel:
        number = cancel.group(1).upper()
        if details is not None and (account is None or not detail_allows(details, number)):
            # Asked for before anything is looked up: the person approves this one order.
            return {
                "text": f"I need your permission to cancel order {number}.",
                "requires_authorization_details": [order_detail(number)],
            }
        if account is None or "orders:cancel" not in granted:
            return _permission("orders:cancel", "cancel orders")
        if number not in ORDERS:
            return {"text": f"I can't find order {number} on your account."}
        status = account.status(number)
        if status != "processing":
            return {"text": f"Order {number} is {status}, so it can't be cancelled."}
        account.cancelled.add(number)
        action: dict[str, Any] = {"tool": "cancel_order", "args": {"order": number}}
        if details is not None:
            action["authorization_detail"] = order_detail(number)
        return {
            "text": f"Order {number} is cancelled. The refund posts in 3-5 days.",
            "actions": [action],
            "scopes_used": ["orders:cancel"],
        }
    if _MY_ORDERS.search(text):
        if account is None or "orders:read" not in granted:
            return _permission("orders:read", "look up your orders")
        listed = ", ".join(f"{number} ({account.status(number)})" for number in ORDERS)
        return {
            "text": f"Your orders: {listed}.",
            "actions": [{"tool": "lookup_orders"}],
            "scopes_used": ["orders:read"],
        }
    return None


def respond(
    conversation: Conversation,
    accounts: dict[str, Account],
    body: dict[str, Any],
    delegating: Collection[str],
    order_bound: Collection[str] = (),
) -> dict[str, Any]:
    """The whole answer to one forwarded turn: an account action if it is one, else the order desk.

    Account actions exist only for the Brands in ``delegating`` (those whose card offers §5):
    elsewhere there is no way to grant a scope, so asking for one would fail the turn. For the
    Brands in ``order_bound`` a cancellation needs an authorization detail naming the order.
    """
    text = str(body["text"])
    if body["brand"] in delegating:
        delegation = body.get("delegation")
        account = None if delegation is None else accounts.setdefault(str(delegation["user"]), Account())
        granted = frozenset(() if delegation is None else delegation["scopes"])
        details: list[Mapping[str, Any]] | None = None
        if body["brand"] in order_bound:
            details = [] if delegation is None else list(delegation.get("authorization_details") or [])
        acted = account_answer(text, account, granted, details)
        if acted is not None:
            return {"end": False, **acted}
    reply, end = answer(conversation, text, bool(body.get("new_conversation", False)))
    return {"text": reply, "end": end}


async def chat(request: web.Request) -> web.Response:
    token = request.app[TOKEN]
    if token and request.headers.get("Authorization") != f"Bearer {token}":
        return web.json_response({"error": "unauthorized"}, status=401)
    try:
        body = await request.json()
        conversation_id = str(body["conversation_id"])
        message_id = str(body["message_id"])
        delegation = body.get("delegation")
        if delegation is not None and not isinstance(delegation, dict):
            raise TypeError("delegation")
        memory = request.app[MEMORY]
        conversation = memory.setdefault(conversation_id, Conversation())
        delegating: frozenset[str] = request.app[DELEGATING]
        order_bound: frozenset[str] = request.app[ORDER_BOUND]
        reply = respond(conversation, request.app[ACCOUNTS], body, delegating, order_bound)
    except (ValueError, KeyError, TypeError):
        return web.json_response({"error": "bad request"}, status=400)
    if reply["end"]:
        memory.pop(conversation_id, None)
    return web.json_response({**reply, "message_id": message_id})


def create_bot_app(
    token: str = "", delegating: Collection[str] = (), order_bound: Collection[str] = ()
) -> web.Application:
    """The bot as an aiohttp app; ``token``, when set, is required as ``Authorization: Bearer``.

    ``delegating`` names the Brands whose cards offer delegation (§5): only their Users get
    the account actions. ``order_bound`` names those of them whose cancellations are bound to
    one order by an RFC 9396 authorization detail (their configuration has :data:`ORDER_DETAIL`).
    """
    app = web.Application()
    app[MEMORY] = {}
    app[ACCOUNTS] = {}
    app[DELEGATING] = frozenset(delegating)
    app[ORDER_BOUND] = frozenset(order_bound)
    app[TOKEN] = token
    app.router.add_post("/chat", chat)
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Acme's sample order-status bot")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--token", default="", help="require this bearer token from the gateway")
    parser.add_argument(
        "--delegating-brand",
        action="append",
        default=[],
        metavar="BRAND",
        help="a Brand whose card offers delegation: its Users get the account actions (repeatable)",
    )
    parser.add_argument(
        "--order-details",
        action="append",
        default=[],
        metavar="BRAND",
        help=f"a delegating Brand that binds each cancellation to one order ({ORDER_DETAIL}, repeatable)",
    )
    args = parser.parse_args(argv)
    app = create_bot_app(args.token, args.delegating_brand, args.order_details)
    web.run_app(app, host=args.host, port=args.port, access_log=None)
