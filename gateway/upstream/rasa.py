"""Rasa Open Source / Pro through its REST channel (``upstream.adapter: rasa``).

Request: ``POST {upstream.url}/webhooks/rest/webhook`` with ``{"sender": <conversation id>,
"message": <text>}``, plus ``"metadata": {"pa": <PA issuer>, "user": <hashed sub>}`` when
``upstream.rasa.metadata`` is on (Rasa hands it to the tracker and custom actions); the Brand's
headers and ``X-Request-Id``. The PACT conversation id is Rasa's sender id, so each PACT
conversation is a tracker of its own and nothing is kept in the gateway.

Answer: a JSON list of bot messages (Rasa's ``CollectingOutputChannel``), each an object with
any of ``text``, ``buttons`` (``[{"title", "payload"}]``), ``image`` and ``attachment``; the
reply is their renderings in order, a blank line between messages. A button becomes a line
``- <title> (reply: <payload>)``: the User answers with the payload, which Rasa takes as the
button's intent, or with a URL button's ``url``. An image or attachment becomes a line with its
URL. ``custom`` payloads and ``elements`` are channel-specific JSON meant for a widget, not text
a User can read, so they are left out. An empty list, or one with nothing renderable, is Rasa's
"no answer": the reply is ``upstream.rasa.no_answer``. Anything but a ``2xx`` with a JSON list
is an :class:`UpstreamError`, and so is a message whose ``recipient_id`` (Rasa names the sender it
answers in each) is another conversation's: it is not this User's answer (issue 28 I1). The REST
channel has no way to end a conversation: it stays open
until its idle TTL (§4.2), and the adapter runs §3 turns only (no ``delegation``).

Probe: ``GET {upstream.url}/webhooks/rest/``, the REST channel's own health route, which
answers ``{"status": "ok"}`` without authentication and touches no tracker.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from gateway.config import RasaSettings, UpstreamConfig
from gateway.ops.tracing import trace_headers
from gateway.upstream.base import BotReply, Turn, UpstreamError
from gateway.upstream.client import BotClient, Target
from gateway.upstream.wire import WRONG_MESSAGE, exchange, loads_reply, user_handle
from gateway.wire import json_bytes

__all__ = ["RasaAdapter", "render_messages"]

WEBHOOK_PATH: Final = "/webhooks/rest/webhook"
HEALTH_PATH: Final = "/webhooks/rest/"


class RasaAdapter:
    def __init__(self, upstream: UpstreamConfig, client: BotClient) -> None:
        base = upstream.url.rstrip("/")
        self._webhook = Target.parse(base + WEBHOOK_PATH)  # split once, not on every turn
        self._health = base + HEALTH_PATH
        self._settings = upstream.rasa or RasaSettings()
        self._timeout = upstream.timeout
        self._headers: Mapping[str, str] = {"Content-Type": "application/json", **upstream.headers}
        self._client = client

    async def send(self, turn: Turn) -> BotReply:
        doc: dict[str, Any] = {"sender": turn.conversation_id, "message": turn.text}
        if self._settings.metadata:
            doc["metadata"] = {"pa": turn.pa_issuer, "user": user_handle(turn)}
        reply = await exchange(
            self._client,
            "POST",
            self._webhook,
            headers={**self._headers, "X-Request-Id": turn.request_id, **trace_headers(turn.trace)},
            within=self._timeout,
            body=json_bytes(doc),
        )
        if not 200 <= reply.status < 300:
            raise UpstreamError("status", f"HTTP {reply.status}")
        try:
            messages = loads_reply(reply.body)
        except orjson.JSONDecodeError:
            raise UpstreamError("bad_body", "not JSON") from None
        sender = turn.conversation_id
        if isinstance(messages, list) and any(
            isinstance(message, dict) and message.get("recipient_id", sender) != sender
            for message in messages
        ):
            # The connection that carried it was pooled with the answer: its stream is out of step.
            self._client.forget(self._webhook)
            raise UpstreamError(WRONG_MESSAGE, "a message for another sender (recipient_id)")
        text = render_messages(messages)
        return BotReply(text or self._settings.no_answer)

    async def probe(self) -> str:
        headers = {name: value for name, value in self._headers.items() if name != "Content-Type"}
        reply = await exchange(self._client, "GET", self._health, headers=headers, within=self._timeout)
        if reply.status != 200:
            raise UpstreamError("status", f"REST channel health answered HTTP {reply.status}")
        try:
            status = orjson.loads(reply.body).get("status")
        except (orjson.JSONDecodeError, AttributeError):
            raise UpstreamError("bad_body", "REST channel health answered no JSON object") from None
        if status != "ok":
            raise UpstreamError("bad_body", "REST channel health did not say ok")
        return "Rasa REST channel: status ok"


def render_messages(messages: Any) -> str:
    """Rasa's list of bot messages as one text, in order; ``""`` when nothing in it is renderable."""
    if not isinstance(messages, list):
        raise UpstreamError("bad_body", "not a JSON list of messages")
    rendered: list[str] = []
    for message in messages:
        if not isinstance(message, dict):
            raise UpstreamError("bad_body", "a message is not a JSON object")
        lines = _message_lines(message)
        if lines:
            rendered.append("\n".join(lines))
    return "\n\n".join(rendered)


def _message_lines(message: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    text = message.get("text")
    if isinstance(text, str) and text.strip():
        lines.append(text.strip())
    buttons = message.get("buttons")
    if isinstance(buttons, list):
        lines.extend(line for button in buttons if (line := _button_line(button)))
    image = message.get("image")
    if isinstance(image, str) and image.strip():
        lines.append(f"Image: {_one_line(image)}")
    attachment = _attachment_url(message.get("attachment"))
    if attachment:
        lines.append(f"Attachment: {attachment}")
    return lines


def _button_line(button: Any) -> str:
    """``- title (reply: payload)``, or ``(open: url)`` for a URL button; ``""`` for a button with neither."""
    if not isinstance(button, dict):
        return ""
    title = _one_line(button.get("title"))
    target = _one_line(button.get("url")) or _one_line(button.get("payload"))
    if not target:
        return f"- {title}" if title else ""
    if not title or title == target:
        return f"- {target}"
    return f"- {title} ({'open' if button.get('url') else 'reply'}: {target})"


def _attachment_url(attachment: Any) -> str:
    """An attachment's URL: the string itself, or an object's ``url`` or ``payload.url``/``payload.src``
    (the Messenger-style and Rasa Webchat attachment shapes a domain's responses use)."""
    if isinstance(attachment, str):
        return _one_line(attachment)
    if not isinstance(attachment, dict):
        return ""
    payload = attachment.get("payload")
    nested = (payload.get("url"), payload.get("src")) if isinstance(payload, dict) else ()
    for value in (attachment.get("url"), *nested):
        if line := _one_line(value):
            return line
    return ""


def _one_line(value: Any) -> str:
    """A string with its whitespace runs collapsed (a title or URL must not break the line it is on)."""
    return " ".join(value.split()) if isinstance(value, str) else ""
