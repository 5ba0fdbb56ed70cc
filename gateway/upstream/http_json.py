"""The gateway's native bot contract: one JSON POST per turn, one JSON answer.

Request body: ``brand``, ``conversation_id``, ``message_id``, ``text``, ``user``
(``{"pa": issuer, "sub": sub}``), ``new_conversation`` and ``delegation`` (§5.5:
``{"user", "scopes", "grant_id", "authorization_details"}`` under a delegation token, the last
the token's RFC 9396 details as JSON objects, ``[]`` for none; else ``null``); headers are the
Brand's static ones plus ``X-Request-Id`` and the W3C ``traceparent`` (and ``tracestate``) of
the gateway's span. Answer: ``{"text": "...", "end": false}``;
``end: true`` closes the conversation after this reply. The answer should echo the call's
``message_id``: one naming another message is refused (:data:`WRONG_MESSAGE`), as a pooled
connection's stream out of step with its calls would otherwise hand one User's answer to
another; an answer that names none is taken as it always was. A bot acting for a Brand user may add
``requires_scopes`` (the scopes this turn needs: a §5.5 step-up when some are not granted),
``requires_authorization_details`` (RFC 9396 details this turn needs, likewise),
``actions`` (``[{"tool": str, "args"?: any JSON, "authorization_detail"?: {...}}]``, the last the
detail an action bound to one resource used) and ``scopes_used`` (both for the §5.6 receipt).
Anything else is an :class:`UpstreamError`.

Probe (``check-config --probe``): ``OPTIONS`` to the bot's URL with the Brand's headers and no
body. Turns are POSTs, and OPTIONS is safe by definition (RFC 9110 §9.3.7), so it starts
nothing in the bot; HEAD would do as well, but some frameworks route HEAD to a GET handler.
What answers, even ``405``, proves the endpoint is there (:func:`~gateway.upstream.wire.probe_verdict`).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from gateway.config import UpstreamConfig
from gateway.ops.tracing import trace_headers
from gateway.protocol.authorization_details import details_json
from gateway.upstream.base import BotReply, Turn, UpstreamError
from gateway.upstream.client import BotClient, Target
from gateway.upstream.wire import MAX_REPLY_BYTES as MAX_REPLY_BYTES
from gateway.upstream.wire import (
    WRONG_MESSAGE,
    exchange,
    loads_reply,
    probe_endpoint,
    reply_with_claims,
)
from gateway.wire import json_bytes


class HttpJsonAdapter:
    def __init__(self, upstream: UpstreamConfig, client: BotClient) -> None:
        self._target = Target.parse(upstream.url)
        self._timeout = upstream.timeout
        self._headers: Mapping[str, str] = {"Content-Type": "application/json", **upstream.headers}
        self._client = client

    async def send(self, turn: Turn) -> BotReply:
        delegation = turn.delegation
        body = json_bytes(
            {
                "brand": turn.brand_id,
                "conversation_id": turn.conversation_id,
                "message_id": turn.message_id,
                "text": turn.text,
                "user": {"pa": turn.pa_issuer, "sub": turn.sub},
                "new_conversation": turn.new_conversation,
                "delegation": None
                if delegation is None
                else {
                    "user": delegation.user,
                    "scopes": delegation.scopes,
                    "grant_id": delegation.grant_id,
                    # The canonical texts as they are: the bot reads the details that were approved.
                    "authorization_details": details_json(delegation.authorization_details),
                },
            }
        )
        headers = {**self._headers, "X-Request-Id": turn.request_id, **trace_headers(turn.trace)}
        reply = await exchange(
            self._client, "POST", self._target, headers=headers, within=self._timeout, body=body
        )
        if not 200 <= reply.status < 300:
            raise UpstreamError("status", f"HTTP {reply.status}")
        try:
            return parse_bot_reply(reply.body, turn.message_id)
        except UpstreamError as exc:
            if exc.reason == WRONG_MESSAGE:
                # The connection that carried it was pooled with the answer: its stream is out of step.
                self._client.forget(self._target)
            raise

    async def probe(self) -> str:
        headers = {name: value for name, value in self._headers.items() if name != "Content-Type"}
        return await probe_endpoint(
            self._client, "OPTIONS", self._target, headers=headers, within=self._timeout
        )


def parse_bot_reply(raw: bytes, message_id: str | None = None) -> BotReply:
    """The bot's answer ``raw``; when ``message_id`` is given, an answer echoing another one is refused
    (a bot that holds an answer back and sends it on the next call's connection, issue 28 I1)."""
    try:
        doc = loads_reply(raw)
    except orjson.JSONDecodeError:
        raise UpstreamError("bad_body", "not JSON") from None
    if not isinstance(doc, dict):
        raise UpstreamError("bad_body", "not a JSON object")
    echoed = doc.get("message_id")
    if echoed is not None and message_id is not None and echoed != message_id:
        # Never quoted: the bot's value is not the gateway's to log.
        raise UpstreamError(WRONG_MESSAGE, "the answer names another message_id")
    text = doc.get("text")
    if not isinstance(text, str) or not text.strip():
        raise UpstreamError("bad_body", "no non-empty text")
    end = doc.get("end", False)
    if not isinstance(end, bool):
        raise UpstreamError("bad_body", "end is not a boolean")
    requires, actions, used = doc.get("requires_scopes"), doc.get("actions"), doc.get("scopes_used")
    required_details = doc.get("requires_authorization_details")
    if requires is None and actions is None and used is None and required_details is None:
        # The common reply: four dictionary misses, no more.
        return BotReply(text, end)
    return reply_with_claims(
        text, end, requires=requires, actions=actions, used=used, required_details=required_details
    )
