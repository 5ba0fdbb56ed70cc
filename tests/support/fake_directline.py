"""A fake Direct Line 3.0 service with a scripted bot behind it, on loopback, after Microsoft's Direct
Line 3.0 reference (MicrosoftDocs/bot-docs, articles/rest-api/bot-framework-rest-direct-line-3-0-*):

* ``POST /v3/directline/conversations`` (secret) → ``201 {conversationId, token, expires_in, streamUrl}``;
* ``POST /v3/directline/tokens/generate`` (secret) → ``{conversationId, token, expires_in}``, opening
  nothing;
* ``POST /v3/directline/tokens/refresh`` (a live token) → a new token for the same conversation
  (the old one stops working here, so a client that keeps using it is caught);
* ``GET /v3/directline/conversations/{id}`` (the reconnect; secret or token) → ``{conversationId,
  token, streamUrl}`` (no ``expires_in``, as the reference's example);
* ``POST /v3/directline/conversations/{id}/activities`` → ``{"id": "<conversationId>|<seq>"}``;
* ``GET /v3/directline/conversations/{id}/activities?watermark=<w>`` → an ActivitySet of at most
  ``page_size`` activities after ``w`` (the User's own messages included) and the next watermark
  (a string, as the reference types it; a JSON number with ``numeric_watermark``, as some
  implementations send it).

With ``bot_url``, the bot behind it is a real Bot Framework bot (tests/support/botframework_bot.py)
rather than the scripted one: each message is posted to the bot's endpoint as the Direct Line channel
posts it (``channelId: directline``, ``serviceUrl`` this service), and the bot sends its activities
back through this service's Bot Connector endpoints, ``POST /v3/conversations/{id}/activities`` and
``POST /v3/conversations/{id}/activities/{activityId}`` (the bot runs without an app id, as under the
Emulator, so neither side checks a Bot Framework token). Direct Line answers the client's post once
the bot took the activity, and an SDK bot takes it only at the end of its turn; here the post is
answered at once and the bot's activities arrive while the adapter reads, as an asynchronous bot's
do (Copilot Studio, a bot answering from a queue): the harder case for when an answer is complete.

Errors are Bot Framework ErrorResponses (``{"error": {"code", "message"}}``): ``401`` without a
credential, ``403`` ``TokenExpired`` for a token :meth:`FakeDirectLine.expire_tokens` expired, ``403``
for a token of another conversation, ``404`` for a conversation :meth:`FakeDirectLine.forget` dropped.

Every request is checked against what the adapter promises (docs/adapters.md "Microsoft Direct Line"): the
secret only where a conversation is started, reconnected or a token generated, ``X-Request-Id``
on a turn's calls, a ``message`` activity of exactly ``type``, ``from: {id: "pact-<32 hex>"}``,
``text`` and ``channelData: {traceparent[, tracestate]}``, watermarks this service issued. A request
that does not fit is answered ``400`` and recorded in ``violations``, which the fixture asserts empty.

``mode`` is what the scripted bot does with a message: ``answer`` (one prompt, ``inputHint:
expectingInput``, counting the messages of its conversation, so a test sees which conversation it
is), ``several`` (a message that arrives just before the User's, then after it a stale answer to the
User's previous message if there was one, ``typing``, three replies, the last ``expectingInput``,
and one more message),
``quiet`` (two replies without ``inputHint``), ``cards`` (a hero card, an image and suggested
actions), ``end`` (a goodbye with ``acceptingInput``, as the SDKs send it, then
``endOfConversation``), ``hang_up`` (``endOfConversation`` alone), ``widget`` (an Adaptive Card and
no text), ``late`` (one prompt, written only at the client's third read, after one that found
nothing new), ``silent`` (never answers), ``bot_error`` (``502 BotError``), ``throttle`` (``429``
with ``Retry-After: 5``). No scripted reply carries a ``replyToId`` but the stale answer, as
botbuilder-python's ``send_activity`` sends none on Direct Line.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.secrets_scan import remember

SECRET = "dl-secret-Kq3v9x2Lm8Rt5Wz1"
BOT = {"id": "acme-bot@fake", "name": "Acme Bot"}
_USER_ID = re.compile(r"pact-[0-9a-f]{32}")
_TOKENS = 200


@dataclass
class Conversation:
    id: str
    activities: list[dict[str, Any]] = field(default_factory=list)
    user_messages: int = 0
    user_ids: list[str] = field(default_factory=list)
    """The ids of the User's messages, in order."""
    pending: list[dict[str, Any]] = field(default_factory=list)
    reads_before_pending: int = 0

    def add(self, activity: dict[str, Any]) -> str:
        activity_id = f"{self.id}|{len(self.activities):07d}"
        # The service names the activity and its conversation, whatever the sender wrote there.
        self.activities.append(
            {**activity, "id": activity_id, "channelId": "directline", "conversation": {"id": self.id}}
        )
        return activity_id


@dataclass
class FakeDirectLine:
    mode: str = "answer"
    bot_url: str | None = None
    """A real bot's messaging endpoint (``…/api/messages``): it answers instead of ``mode``."""
    page_size: int = 100
    expires_in: int = 1800
    numeric_watermark: bool = False
    conversations: dict[str, Conversation] = field(default_factory=dict)
    live: dict[str, str] = field(default_factory=dict)
    """Live token → its conversation id."""
    expired: set[str] = field(default_factory=set)
    operations: list[str] = field(default_factory=list)
    """Every call the service accepted, by name: start, generate, refresh, reconnect, send (each message
    that reached the bot, whatever the bot then did), read."""
    posted: list[dict[str, Any]] = field(default_factory=list)
    watermarks: list[str | None] = field(default_factory=list)
    """The watermark of every read, as the client sent it (``None`` for none)."""
    violations: list[str] = field(default_factory=list)
    server: TestServer | None = None
    _deliveries: set[asyncio.Task[None]] = field(default_factory=set)
    _tokens: Iterator[str] = field(default_factory=lambda: iter(()))
    _started: int = 0

    @property
    def url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url(""))

    async def start(self) -> None:
        app = web.Application()
        base = "/v3/directline"
        app.router.add_post(f"{base}/conversations", self.start_conversation)
        app.router.add_post(f"{base}/tokens/generate", self.generate)
        app.router.add_post(f"{base}/tokens/refresh", self.refresh)
        app.router.add_get(f"{base}/conversations/{{conversation}}", self.reconnect)
        app.router.add_post(f"{base}/conversations/{{conversation}}/activities", self.send)
        app.router.add_get(f"{base}/conversations/{{conversation}}/activities", self.read)
        # The Bot Connector API, where a real bot sends its activities (``serviceUrl`` is this service).
        app.router.add_post("/v3/conversations/{conversation}/activities", self.from_bot)
        app.router.add_post("/v3/conversations/{conversation}/activities/{activity}", self.from_bot)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()

    async def close(self) -> None:
        for delivery in self._deliveries:
            delivery.cancel()
        await asyncio.gather(*self._deliveries, return_exceptions=True)
        if self.server is not None:
            await self.server.close()

    def count(self, operation: str) -> int:
        return self.operations.count(operation)

    def expire_tokens(self) -> None:
        """Every token issued so far lapses: Direct Line then answers ``403 TokenExpired``."""
        self.expired.update(self.live)
        self.live.clear()

    def forget(self, conversation_id: str) -> None:
        self.conversations.pop(conversation_id)

    def _token(self, conversation_id: str) -> str:
        token = next(self._tokens)
        self.live[token] = conversation_id
        return token

    def _credential(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        return header[len("Bearer ") :] if header.startswith("Bearer ") else None

    def _refused(self, request: web.Request, conversation_id: str, *, secret: bool) -> web.Response | None:
        """The Direct Line answer to a request this credential may not make, or ``None``.

        Direct Line takes the secret for any call; the adapter promises it only where ``secret``.
        """
        credential = self._credential(request)
        if credential is None:
            return error(401, "BadArgument", "Missing or malformed Authorization header")
        if credential == SECRET:
            return None if secret else self._violation("a conversation call with the secret, not its token")
        if credential in self.expired:
            return error(403, "TokenExpired", "Token expired")
        if self.live.get(credential) != conversation_id:
            return error(403, "BadArgument", "Token not valid for this conversation")
        return None

    def _violation(self, problem: str) -> web.Response:
        self.violations.append(problem)
        return error(400, "BadArgument", problem)

    def _conversation_doc(self, conversation: str, *, lifetime: bool = True) -> dict[str, Any]:
        doc: dict[str, Any] = {"conversationId": conversation, "token": self._token(conversation)}
        if lifetime:
            doc["expires_in"] = self.expires_in
        return doc

    async def start_conversation(self, request: web.Request) -> web.StreamResponse:
        if self._credential(request) != SECRET:
            return self._violation("conversations are started with the secret")
        if await request.read() or "X-Request-Id" not in request.headers:
            return self._violation("start: a body, or no X-Request-Id")
        self._started += 1
        conversation = Conversation(f"Fk{self._started:04d}Conv-us")
        self.conversations[conversation.id] = conversation
        self.operations.append("start")
        doc = self._conversation_doc(conversation.id)
        doc["streamUrl"] = f"wss://fake/v3/directline/conversations/{conversation.id}/stream?t=x"
        return web.json_response(doc, status=201)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        if self._credential(request) != SECRET:
            return error(403, "BadArgument", "Invalid secret")
        self.operations.append("generate")
        return web.json_response(self._conversation_doc("FkGeneratedConv"))

    async def refresh(self, request: web.Request) -> web.StreamResponse:
        credential = self._credential(request)
        if credential == SECRET:
            return self._violation("refresh takes the token, not the secret")
        if credential in self.expired:
            return error(403, "TokenExpired", "Token expired")
        conversation = self.live.pop(credential or "", None)
        if conversation is None:
            return error(403, "BadArgument", "Unknown token")
        self.operations.append("refresh")
        return web.json_response(self._conversation_doc(conversation))

    async def reconnect(self, request: web.Request) -> web.StreamResponse:
        conversation_id = request.match_info["conversation"]
        refused = self._refused(request, conversation_id, secret=True)
        if refused is not None:
            return refused
        if conversation_id not in self.conversations:
            return error(404, "BadArgument", "Conversation not found")
        self.operations.append("reconnect")
        doc = self._conversation_doc(conversation_id, lifetime=False)
        doc["streamUrl"] = f"wss://fake/v3/directline/conversations/{conversation_id}/stream?t=y"
        return web.json_response(doc)

    async def send(self, request: web.Request) -> web.StreamResponse:
        conversation_id = request.match_info["conversation"]
        refused = self._refused(request, conversation_id, secret=False)
        if refused is not None:
            return refused
        conversation = self.conversations.get(conversation_id)
        if conversation is None:
            return error(404, "BadArgument", "Conversation not found")
        body = await request.read()
        problem = activity_problem(request.content_type, body) or request_id_problem(request)
        if problem:
            return self._violation(problem)
        self.operations.append("send")
        if self.mode == "bot_error":
            return error(502, "BotError", "Failed to send activity: bot returned an error")
        if self.mode == "throttle":
            return error(429, "Throttled", "Too many requests", {"Retry-After": "5"})
        activity = orjson.loads(body)
        self.posted.append(activity)
        if self.mode == "several":  # an answer to an earlier turn, come after that turn had ended
            conversation.add({"type": "message", "from": BOT, "text": "Late answer to an older turn."})
        activity_id = conversation.add(activity)
        conversation.user_messages += 1
        if self.bot_url is None:
            self._bot_answers(conversation, activity_id, activity["text"])
        else:
            delivery = asyncio.create_task(self._deliver(self.bot_url, conversation.activities[-1]))
            self._deliveries.add(delivery)
            delivery.add_done_callback(self._deliveries.discard)
        conversation.user_ids.append(activity_id)
        return web.json_response({"id": activity_id})

    async def _deliver(self, bot_url: str, activity: dict[str, Any]) -> None:
        """Post the User's activity to the bot as the Direct Line channel does."""
        incoming = {
            **activity,
            "serviceUrl": self.url,
            "recipient": BOT,
            "from": {**activity["from"], "role": "user"},
            "timestamp": "2026-12-04T05:00:00.000Z",
        }
        async with aiohttp.ClientSession() as session, session.post(bot_url, json=incoming) as answer:
            if not 200 <= answer.status < 300:
                self.violations.append(f"the bot answered {answer.status}: {await answer.text()}")

    async def from_bot(self, request: web.Request) -> web.StreamResponse:
        """A bot's activity sent through the Bot Connector API: added to its conversation."""
        conversation = self.conversations.get(request.match_info["conversation"])
        if conversation is None:
            return error(404, "BadArgument", "Conversation not found")
        activity = await request.json()
        if not isinstance(activity, dict) or not isinstance(activity.get("type"), str):
            return self._violation(f"the bot sent no activity: {activity!r}")
        self.operations.append("bot")
        return web.json_response({"id": conversation.add(activity)})

    def _bot_answers(self, conversation: Conversation, activity_id: str, text: str) -> None:
        def reply(words: str, hint: str | None = None, **more: Any) -> dict[str, Any]:
            activity = {"type": "message", "from": BOT, "text": words, **more}
            if hint is not None:
                activity["inputHint"] = hint
            return activity

        count = conversation.user_messages
        if self.mode == "answer":
            conversation.add(reply(f"You said: {text} (message {count} here)", "expectingInput"))
        elif self.mode == "several":
            if conversation.user_ids:  # an answer to the User's message before this one, come late
                conversation.add(reply("Stale answer to an older turn.", replyToId=conversation.user_ids[-1]))
            conversation.add({"type": "typing", "from": BOT})
            conversation.add(reply("One.", "acceptingInput"))
            conversation.add(reply("Two.", "ignoringInput"))
            conversation.add(reply("Three?", "expectingInput"))
            conversation.add(reply("After the prompt: not this turn's.", "acceptingInput"))
        elif self.mode == "quiet":
            conversation.add(reply("First part."))
            conversation.add(reply("Second part."))
        elif self.mode == "cards":
            conversation.add(reply("Pick one:", "acceptingInput", **CARDS_ACTIVITY))
        elif self.mode == "end":
            conversation.add(reply("Goodbye!", "acceptingInput"))
            conversation.add({"type": "endOfConversation", "from": BOT, "code": "completedSuccessfully"})
        elif self.mode == "hang_up":
            conversation.add({"type": "endOfConversation", "from": BOT})
        elif self.mode == "widget":
            card = {
                "contentType": "application/vnd.microsoft.card.adaptive",
                "content": {"type": "AdaptiveCard"},
            }
            conversation.add(reply("", "acceptingInput", attachments=[card]))
        elif self.mode == "late":
            conversation.pending.append(reply(f"Late: {text}", "expectingInput"))
            conversation.reads_before_pending = 3

    async def read(self, request: web.Request) -> web.StreamResponse:
        conversation_id = request.match_info["conversation"]
        refused = self._refused(request, conversation_id, secret=False)
        if refused is not None:
            return refused
        conversation = self.conversations.get(conversation_id)
        if conversation is None:
            return error(404, "BadArgument", "Conversation not found")
        self.watermarks.append(request.query.get("watermark"))
        watermark = request.query.get("watermark", "0")
        if not watermark.isdigit() or int(watermark) > len(conversation.activities):
            return self._violation(f"a watermark this service never issued: {watermark!r}")
        if problem := request_id_problem(request):
            return self._violation(problem)
        self.operations.append("read")
        if conversation.pending:
            conversation.reads_before_pending -= 1
            if conversation.reads_before_pending <= 0:
                for activity in conversation.pending:
                    conversation.add(activity)
                conversation.pending.clear()
        start = int(watermark)
        page = conversation.activities[start : start + self.page_size]
        next_watermark = start + len(page)
        return web.json_response(
            {
                "activities": page,
                "watermark": next_watermark if self.numeric_watermark else str(next_watermark),
            }
        )


CARDS_ACTIVITY: dict[str, Any] = {
    "attachments": [
        {
            "contentType": "application/vnd.microsoft.card.hero",
            "content": {
                "title": "Order A-1",
                "subtitle": "Shipped Monday",
                "text": "Arrives Thursday.",
                "images": [{"url": "https://cdn.acme.example/a1.png"}],
                "buttons": [
                    {"type": "imBack", "title": "Track it", "value": "track A-1"},
                    {"type": "openUrl", "title": "Open the order", "value": "https://acme.example/o/A-1"},
                    {"type": "messageBack", "title": "Cancel", "text": "cancel A-1", "value": {"o": 1}},
                ],
            },
        },
        {"contentType": "image/png", "contentUrl": "https://cdn.acme.example/label.png", "name": "label"},
        {"contentType": "application/vnd.microsoft.card.adaptive", "content": {"type": "AdaptiveCard"}},
    ],
    "suggestedActions": {
        "to": [],
        "actions": [
            {"type": "imBack", "title": "Yes", "value": "Yes"},
            {"type": "postBack", "title": "Talk to a human", "value": "handoff"},
        ],
    },
}


def error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    """A Bot Framework ErrorResponse."""
    return web.json_response({"error": {"code": code, "message": message}}, status=status, headers=headers)


def request_id_problem(request: web.Request) -> str:
    return "" if request.headers.get("X-Request-Id") else "a turn's call without X-Request-Id"


def activity_problem(content_type: str, raw: bytes) -> str:
    """What is wrong with a posted activity, against the reference and docs/adapters.md ("" if nothing)."""
    if content_type != "application/json":
        return f"Content-Type {content_type}"
    try:
        activity = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "activity is not JSON"
    if not isinstance(activity, dict) or activity.keys() - {"channelData"} != {"type", "from", "text"}:
        return f"activity members {sorted(activity) if isinstance(activity, dict) else activity}"
    trace = activity.get("channelData", {"traceparent": "a turn without a trace"})
    if (
        not isinstance(trace, dict)
        or "traceparent" not in trace
        or trace.keys() - {"traceparent", "tracestate"}
    ):
        return f"channelData is not {{traceparent[, tracestate]}}: {trace}"
    if activity["type"] != "message":
        return "not a message activity"
    sender = activity["from"]
    if not isinstance(sender, dict) or sender.keys() != {"id"} or not _USER_ID.fullmatch(str(sender["id"])):
        return f"from is not {{id: pact-<32 hex>}}: {sender}"
    if not isinstance(activity["text"], str) or not activity["text"]:
        return "no text"
    return ""


@pytest.fixture
async def fake_directline() -> AsyncIterator[FakeDirectLine]:
    """The fake on loopback; its secret and every token it will issue are secrets no log record may hold."""
    tokens = [f"dlt-{index:04d}-Qz8vN2pX7wYk4Rm" for index in range(_TOKENS)]
    remember("the Direct Line secret", SECRET)
    remember("a Direct Line token", *tokens)
    fake = FakeDirectLine(_tokens=iter(tokens))
    await fake.start()
    yield fake
    await fake.close()
    assert not fake.violations, fake.violations
