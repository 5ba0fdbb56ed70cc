"""A Bot Framework bot through Direct Line 3.0 (Azure Bot Service, Copilot Studio):
``upstream.adapter: directline``, ``upstream.url`` the Direct Line base URI
(``https://directline.botframework.com``, or a regional one).

One Direct Line conversation per PACT conversation. Its id, token (sealed under a key derived from
the Brand's secret, see :class:`Line`), watermark and what the bot said after the last turn are kept
in the store (:mod:`gateway.store.adapter_state`, for ``cache.conversation_ttl`` after the last turn),
so any replica continues it. Each request carries ``Authorization: Bearer <secret or token>``,
the Brand's static headers and ``X-Request-Id``:

* first turn: ``POST /v3/directline/conversations`` with the secret → ``201 {"conversationId",
  "token", "expires_in", "streamUrl"}`` (the stream is not used: the adapter polls);
* a turn past half the token's ``expires_in``: ``POST /v3/directline/tokens/refresh`` with the
  token → ``{"conversationId", "token", "expires_in"}``;
* each turn: ``POST /v3/directline/conversations/{id}/activities`` with the token and
  ``{"type": "message", "from": {"id": "pact-<32 hex>"}, "text": <text>, "channelData":
  {"traceparent": …}}`` → ``{"id": <activity id>}``. ``from.id`` is a stable pseudonym of (Brand,
  personal agent, ``sub``) (:func:`~gateway.upstream.wire.user_handle`): the bot recognizes a
  returning User, and never sees a ``sub``;
* then ``GET /v3/directline/conversations/{id}/activities?watermark=<w>`` every
  ``poll_interval`` s, paging on at once while a read returns activities and advances the
  watermark (a JSON string or number; kept as a string), until the bot's answer is complete.

The answer is every activity from the bot after the posted one (Direct Line returns the User's own
messages too, in order, so the posted id marks where this turn's answer starts). What the bot sent
before it came after the last turn's answer was complete (a proactive message, one later than the
quiet period, one after a prompt): it is owed to the User and opens this turn's reply, counted in
``pact_directline_late_messages_total{outcome="delivered"}``. Only an answer to a message whose turn
failed (its ``replyToId`` names that activity) is dropped, since the agent retries that message
(§4.3) and the retry gets its own answer; that, and a message after the bot's
``endOfConversation``, is counted as ``dropped`` and logged. A ``replyToId`` says nothing else:
botbuilder-python sets none with ``send_activity`` on Direct Line but the posted id with
``activity.create_reply``, and a proactive message (``continue_conversation``) carries the id of the
continuation activity the SDK made up. The answer is complete at the bot's first message with
``inputHint: expectingInput`` (a prompt: the bot waits for the User), at its ``endOfConversation``,
or once at least one message came and ``quiet_period`` s passed with no new message or ``typing``
from the bot (a proactive ``typing`` too). ``acceptingInput`` is not an end: the Bot Framework
SDKs' ``MessageFactory`` (Python and JavaScript) put it on every message by default, so a bot that
says "Let me look that up…" and then the answer sends two of them. All within ``upstream.timeout``,
else ``timeout``. Each posted activity carries the turn's W3C ``traceparent`` (and ``tracestate``)
in its ``channelData``: Direct Line passes ``channelData`` to the bot, but no HTTP header.

The reply is the answer's messages in order, a blank line between them: each message's
``text``; hero and thumbnail cards (``application/vnd.microsoft.card.hero``/``.thumbnail``) as
their ``title``, ``subtitle``, ``text`` and buttons; ``suggestedActions`` as buttons; image
and file attachments as ``Image: <url>`` / ``Attachment: <url>``. A button is a line
``- <title> (reply: <value>)``, or ``(open: <url>)`` for a link, as the ``rasa`` adapter
writes them. An answer with nothing renderable is ``upstream.directline.no_answer``. An
``endOfConversation`` closes the PACT conversation (§4.2): the reply (the messages before it, a
goodbye) is sent with ``end`` and the kept state is deleted.

Token expiry: a ``401``/``403`` from a conversation call (``TokenExpired``: an expired token
cannot be refreshed) is answered by asking for a fresh token with the secret, ``GET
/v3/directline/conversations/{id}`` (Direct Line's reconnect), and the call is made once more;
a ``404`` (Direct Line no longer knows the conversation) starts a new one. Failures: ``auth``
(401/403 with the secret), ``bot_error`` (502: the bot failed or is down), ``status``,
``bad_body``, ``timeout``; a ``429`` is :class:`UpstreamThrottled`. These are §3 turns.

Probe: ``POST /v3/directline/tokens/generate`` with the secret: it proves the secret and, unlike
starting a conversation, neither contacts the bot nor opens a conversation there.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final
from urllib.parse import quote

import orjson

from gateway.config import CacheConfig, UpstreamConfig
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import trace_headers
from gateway.sealing import SealingKey, open_sealed, seal, sealing_key
from gateway.store import keys
from gateway.store.adapter_state import AdapterState
from gateway.store.base import StoreError
from gateway.upstream.base import BotReply, Turn, UpstreamError, UpstreamThrottled, retry_after_seconds
from gateway.upstream.client import BotClient
from gateway.upstream.json_call import JsonAnswer, request_json, status_detail
from gateway.upstream.wire import MAX_REPLY_BYTES, user_handle
from gateway.wire import json_bytes

__all__ = ["AnswerReader", "DirectLineAdapter", "Line", "render_activity", "token_key"]

log = logging.getLogger("pact_gateway.upstream")

STATE_NAME: Final = "directline"
EXPECTING_INPUT: Final = "expectingInput"
CARDS: Final = frozenset(("application/vnd.microsoft.card.hero", "application/vnd.microsoft.card.thumbnail"))
ENDED_TEXT: Final = "The conversation has ended."
"""The reply when the bot ended the conversation without a word."""
DEFAULT_TOKEN_SECONDS: Final = 1800.0
"""A token's lifetime when an answer does not say (Direct Line's documented 30 minutes)."""
_LINKS: Final = frozenset(("openUrl", "signin", "downloadFile", "playAudio", "playVideo", "showImage"))
_READ: Final = frozenset(("message", "typing", "endOfConversation"))
"""The activity types an answer is made of; anything else from the bot (an ``event``) is not for the User."""
_TOKEN_PURPOSE: Final = b"pact-gateway directline token v1"


@dataclass(slots=True)
class Line:
    """The Direct Line conversation behind one PACT conversation: what the store keeps between turns.

    ``refresh_at`` is wall-clock seconds: past it, the token is refreshed before the turn. The token
    is kept sealed (:func:`gateway.sealing.seal`) under a key derived from the Brand's Direct Line
    secret, which the gateway holds only in its configuration: whoever reads the store alone cannot
    use the token, and whoever holds the secret can mint tokens anyway (THREAT_MODEL.md).
    """

    conversation_id: str = ""
    token: str = ""
    refresh_at: float = 0.0
    watermark: str | None = None
    failed_post: str | None = None
    """The activity posted by the last turn that failed after posting: the bot's answers to it are
    dropped, whenever they come, since the agent retries that message (§4.3) and its retry gets an
    answer of its own. One id, so the line stays the same size however many turns fail."""
    late: list[str] = field(default_factory=list)
    """Messages the bot sent after a turn's answer was complete, rendered, owed to the User: they open
    the next turn's reply (at most :data:`MAX_REPLY_BYTES` of text in all)."""

    def dump(self, key: SealingKey, context: bytes) -> bytes:
        sealed = base64.b64encode(seal(key, context, self.token.encode())).decode() if self.token else ""
        return json_bytes(
            [self.conversation_id, sealed, self.refresh_at, self.watermark, self.failed_post, self.late]
        )

    @classmethod
    def load(cls, raw: bytes, key: SealingKey, context: bytes) -> Line:
        """The stored line, or a fresh one (a new Direct Line conversation) if what is stored is not one.

        A token that does not open (the Brand's secret changed, or a line of a release that kept it
        in clear) is left out: the turn then gets a fresh one for the same conversation from the
        secret, so the conversation goes on.
        """
        try:
            fields = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return cls()
        if not isinstance(fields, list) or len(fields) not in (4, 6):
            return cls()
        conversation_id, sealed, refresh_at, watermark, *more = fields
        failed_post, late = more or (None, [])
        if not isinstance(conversation_id, str) or not isinstance(sealed, str):
            return cls()
        if not isinstance(refresh_at, int | float) or not isinstance(watermark, str | None):
            return cls()
        if not isinstance(failed_post, str | None) or not isinstance(late, list):
            return cls()
        if not all(isinstance(message, str) for message in late):
            return cls()
        token = _open_token(key, context, sealed) if len(fields) == 6 else ""
        return cls(conversation_id, token, refresh_at, watermark, failed_post, late)


def token_key(secret: str) -> SealingKey:
    """The key a Brand's Direct Line tokens are sealed under in the store: derived from its secret."""
    return sealing_key(secret, _TOKEN_PURPOSE)


def _open_token(key: SealingKey, context: bytes, sealed: str) -> str:
    try:
        opened = open_sealed(key, context, base64.b64decode(sealed, validate=True))
    except binascii.Error:
        return ""
    return opened.decode() if opened is not None else ""


class DirectLineAdapter:
    def __init__(
        self,
        upstream: UpstreamConfig,
        client: BotClient,
        state: AdapterState,
        *,
        cache: CacheConfig,
        metrics: Metrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        settings = upstream.directline
        if settings is None:
            raise ValueError("the directline adapter needs upstream.directline")
        self._settings = settings
        # Derived once: the secret is in the configuration only, never in the store (see Line).
        self._token_key = token_key(settings.secret)
        self._metrics = metrics
        base = upstream.url.rstrip("/") + "/v3/directline"
        self._conversations = f"{base}/conversations"
        self._refresh_url = f"{base}/tokens/refresh"
        self._generate_url = f"{base}/tokens/generate"
        self._headers: Mapping[str, str] = upstream.headers
        self._timeout = upstream.timeout
        self._client = client
        self._state = state
        self._ttl = cache.conversation_ttl
        self._clock = clock

    async def send(self, turn: Turn) -> BotReply:
        key = keys.adapter_key(turn.brand_id, turn.conversation_id, STATE_NAME)
        line = Line() if turn.new_conversation else await self._load(key)
        kept = replace(line, late=list(line.late))
        answer = AnswerReader(f"pact-{user_handle(turn)}", line)
        try:
            async with asyncio.timeout(self._timeout):
                reply = await self._turn(line, turn, answer)
        except TimeoutError:
            failure = UpstreamError("timeout", f"no complete answer within {self._timeout} s")
        except UpstreamError as exc:
            failure = exc
        else:
            self._count_late(turn, answer)
            await self._save(key, line, ended=reply.end)
            return reply
        # Nothing owed is lost with the turn: the next one delivers it.
        line.late = answer.late + answer.after
        self._count_late(turn, answer)
        if not turn.new_conversation and line.conversation_id and line != kept:
            # A new token (or conversation) obtained on the way still serves the next turn, and
            # the token it replaced may no longer work; the failed turn's activity and what the bot
            # said between turns matter to the next turn too. A failed first turn keeps nothing: its
            # PACT conversation is forgotten (§4.3), so nothing would ever read it.
            with contextlib.suppress(UpstreamError):  # the turn fails anyway; the next re-obtains a token
                await self._save(key, line, ended=False)
        raise failure

    def _count_late(self, turn: Turn, answer: AnswerReader) -> None:
        """Late messages delivered, and the ones dropped (counted and logged once per turn)."""
        metric = self._metrics.directline_late_messages
        if answer.delivered:
            metric.labels(turn.brand_id, "delivered").inc(answer.delivered)
        if answer.dropped:
            metric.labels(turn.brand_id, "dropped").inc(answer.dropped)
            log.warning(
                "Direct Line: %d bot message(s) dropped: answers to a failed turn's message, sent "
                "after the bot ended the conversation, or past the bound of owed text",
                answer.dropped,
                extra={"request_id": turn.request_id, "brand": turn.brand_id},
            )

    async def probe(self) -> str:
        answer = await self._call("POST", self._generate_url, self._settings.secret, None)
        if answer.status != 200:
            raise self._failure(answer, "generate token")
        doc = answer.doc
        if not isinstance(doc, dict) or not isinstance(doc.get("token"), str):
            raise UpstreamError("bad_body", "generate token: no token")
        return f"Direct Line: secret accepted (token for {_lifetime(doc):.0f} s; no conversation opened)"

    async def _turn(self, line: Line, turn: Turn, answer: AnswerReader) -> BotReply:
        user = f"pact-{user_handle(turn)}"
        if not line.conversation_id:
            await self._start(line, turn.request_id)
        elif not line.token:
            await self._reconnect(line, turn.request_id)  # the kept token did not open (see Line.load)
        elif self._clock() >= line.refresh_at:
            await self._refresh(line, turn.request_id)
        activity_id = await self._post(line, turn, user)
        answer.posted(activity_id)
        failed_before, line.failed_post = line.failed_post, activity_id  # until the answer is complete
        reply = await self._collect(line, turn.request_id, answer)
        # A turn that failed stays the one whose answers are dropped, however late they come: the
        # agent has had its retry's answer by now.
        line.failed_post = failed_before
        return reply

    async def _start(self, line: Line, request_id: str) -> None:
        answer = await self._call("POST", self._conversations, self._settings.secret, request_id)
        if answer.status not in (200, 201):
            raise self._failure(answer, "start conversation")
        self._take_token(line, answer.doc, "start conversation")
        line.watermark = None

    async def _refresh(self, line: Line, request_id: str) -> None:
        answer = await self._call("POST", self._refresh_url, line.token, request_id)
        if answer.status in (401, 403):
            await self._reconnect(line, request_id)  # expired: only the secret gets a new token now
            return
        if answer.status != 200:
            raise self._failure(answer, "refresh token")
        self._take_token(line, answer.doc, "refresh token")

    async def _reconnect(self, line: Line, request_id: str) -> None:
        """A fresh token for the same conversation, from the secret; a new conversation if it is gone."""
        url = f"{self._conversations}/{quote(line.conversation_id, safe='')}"
        answer = await self._call("GET", url, self._settings.secret, request_id)
        if answer.status == 404:
            await self._start(line, request_id)
            return
        if answer.status != 200:
            raise self._failure(answer, "reconnect")
        self._take_token(line, answer.doc, "reconnect")

    async def _post(self, line: Line, turn: Turn, user: str) -> str:
        """Send the User's message; once more after a new token (401, 403) or a new conversation (404)."""
        activity: dict[str, Any] = {"type": "message", "from": {"id": user}, "text": turn.text}
        if turn.trace is not None:
            # Direct Line forwards no HTTP header to the bot, but the activity's channelData reaches it.
            activity["channelData"] = trace_headers(turn.trace)
        body = json_bytes(activity)
        answer = await self._call("POST", self._activities(line), line.token, turn.request_id, body)
        if answer.status in (401, 403, 404):
            if answer.status == 404:
                await self._start(line, turn.request_id)
            else:
                await self._reconnect(line, turn.request_id)
            answer = await self._call("POST", self._activities(line), line.token, turn.request_id, body)
        if not 200 <= answer.status < 300:
            raise self._failure(answer, "send activity")
        activity_id = answer.doc.get("id") if isinstance(answer.doc, dict) else None
        if not isinstance(activity_id, str) or not activity_id:
            raise UpstreamError("bad_body", "send activity: no activity id")
        return activity_id

    def _activities(self, line: Line) -> str:
        return f"{self._conversations}/{quote(line.conversation_id, safe='')}/activities"

    async def _collect(self, line: Line, request_id: str, answer: AnswerReader) -> BotReply:
        loop = asyncio.get_running_loop()
        # A service that ignored the watermark would send activities again: each is taken once.
        seen: set[str] = set()
        last_heard: float | None = None
        reconnected = False
        while True:
            watermark = line.watermark
            url = self._activities(line)
            if watermark is not None:
                url += f"?watermark={quote(watermark, safe='')}"
            response = await self._call("GET", url, line.token, request_id)
            if response.status in (401, 403) and not reconnected:
                reconnected = True
                await self._reconnect(line, request_id)
                continue
            if response.status != 200:
                raise self._failure(response, "get activities")
            activities, line.watermark = _activity_set(response.doc, watermark)
            fresh = [a for a in activities if not (isinstance(a.get("id"), str) and a["id"] in seen)]
            seen.update(a["id"] for a in fresh if isinstance(a.get("id"), str))
            heard = answer.take(fresh)
            if answer.complete:
                return self._reply(line, answer)
            now = loop.time()
            if heard:
                last_heard = now
            if fresh and line.watermark != watermark:
                continue  # more may be waiting past the new watermark: page on at once
            if answer.messages and last_heard is not None and now - last_heard >= self._settings.quiet_period:
                return self._reply(line, answer)
            await asyncio.sleep(self._settings.poll_interval)

    def _reply(self, line: Line, answer: AnswerReader) -> BotReply:
        """The late messages, then this turn's answer; the messages after its end wait in ``line``.

        Late messages join while the reply stays within :data:`MAX_REPLY_BYTES`; the rest wait for the
        next turn (the answer alone past the bound is ``bad_body``, as in every adapter).
        """
        text = "\n\n".join(message for message in answer.messages if message)
        if len(text) > MAX_REPLY_BYTES:
            raise UpstreamError("bad_body", "answer larger than 1 MiB of text")
        if not text:
            text = ENDED_TEXT if answer.ended else self._settings.no_answer
        room = MAX_REPLY_BYTES - len(text)
        owed = [message for message in answer.late if message]
        fit = 0
        while fit < len(owed) and len(owed[fit]) + 2 <= room:
            room -= len(owed[fit]) + 2
            fit += 1
        line.late = owed[fit:] + answer.after
        answer.delivered = fit
        return BotReply("\n\n".join([*owed[:fit], text]), end=answer.ended)

    def _take_token(self, line: Line, doc: Any, what: str) -> None:
        if not isinstance(doc, dict):
            raise UpstreamError("bad_body", f"{what}: not a JSON object")
        conversation_id, token = doc.get("conversationId"), doc.get("token")
        if (
            not isinstance(conversation_id, str)
            or not conversation_id
            or not isinstance(token, str)
            or not token
        ):
            raise UpstreamError("bad_body", f"{what}: no conversationId and token")
        line.conversation_id, line.token = conversation_id, token
        # Refreshed at half its life: a turn never starts with a token about to lapse.
        line.refresh_at = self._clock() + _lifetime(doc) / 2

    async def _load(self, key: str) -> Line:
        try:
            raw = await self._state.get(key)
        except StoreError as exc:
            raise UpstreamError("store", f"conversation not read: {exc}") from None
        return Line() if raw is None else Line.load(raw, self._token_key, key.encode())

    async def _save(self, key: str, line: Line, *, ended: bool) -> None:
        try:
            if ended:
                await self._state.delete(key)
            else:
                await self._state.put(key, line.dump(self._token_key, key.encode()), self._ttl)
        except StoreError as exc:
            raise UpstreamError("store", f"conversation not saved: {exc}") from None

    async def _call(
        self, method: str, url: str, credential: str, request_id: str | None, body: bytes | None = None
    ) -> JsonAnswer:
        headers = {**self._headers, "Authorization": f"Bearer {credential}"}
        if request_id is not None:
            headers["X-Request-Id"] = request_id
        if body is not None:
            headers["Content-Type"] = "application/json"
        return await request_json(self._client, method, url, headers=headers, within=self._timeout, body=body)

    def _failure(self, answer: JsonAnswer, what: str) -> UpstreamError:
        detail = f"{what}: {status_detail(answer.status, answer.doc)}"
        if answer.status == 429:
            return UpstreamThrottled(retry_after_seconds(answer.retry_after, self._clock()), detail)
        if answer.status in (401, 403):
            return UpstreamError("auth", detail)
        return UpstreamError("bot_error" if answer.status == 502 else "status", detail)


def _lifetime(doc: Mapping[str, Any]) -> float:
    seconds = doc.get("expires_in")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds >= 0:
        return float(seconds)
    return DEFAULT_TOKEN_SECONDS


def _activity_set(doc: Any, watermark: str | None) -> tuple[list[dict[str, Any]], str | None]:
    """An ActivitySet's activities and the watermark to read from next (the old one when it has none).

    The reference types the watermark as a string; some Direct Line implementations send a JSON
    number, which is read the same way (ignoring it would read the whole history on every poll).
    """
    activities = doc.get("activities") if isinstance(doc, dict) else None
    if not isinstance(activities, list) or not all(isinstance(a, dict) for a in activities):
        raise UpstreamError("bad_body", "get activities: not an ActivitySet")
    new = doc.get("watermark")
    if isinstance(new, int) and not isinstance(new, bool) and new >= 0:
        return activities, str(new)
    return activities, new if isinstance(new, str) and new else watermark


class AnswerReader:
    """The bot's answer to one turn, taken from the pages of activities as they are read (in order,
    each activity once), and what the bot said between turns.

    The turn's answer is what follows its posted activity (:meth:`posted`), up to its end. What the
    bot sent before the posted activity came after the last turn's answer was complete (a proactive
    message, or one later than the quiet period): it is ``late``, owed to the User, and opens this
    turn's reply; so does what :class:`Line` kept from the last turn (messages after the end of its
    answer). The one thing not delivered is an answer to another message the gateway posted whose
    turn failed (``replyToId`` naming it): the agent retries that message (§4.3) and the retry has its
    own answer. A ``replyToId`` is otherwise no sign of another turn: botbuilder-python sets it to the
    posted activity's id when a bot answers with ``activity.create_reply``, and a proactive message
    (``continue_conversation``) carries the id of the continuation activity the SDK made up.
    """

    __slots__ = (
        "_activity_id",
        "_after",
        "_kept",
        "_others",
        "_user",
        "after",
        "complete",
        "delivered",
        "dropped",
        "ended",
        "late",
        "messages",
    )

    def __init__(self, user: str, line: Line) -> None:
        self._user = user
        self._activity_id: str | None = None
        self._after = False
        # Posted activities whose answers are not the User's any more: the failed turn's, and any
        # other of the gateway's own messages met before this turn's (posted, never read: failed too).
        self._others: set[str] = {line.failed_post} if line.failed_post is not None else set()
        self.late = list(line.late)
        """Messages from between turns, rendered, in order: they open the reply."""
        self._kept = sum(len(message) for message in self.late)
        self.messages: list[str] = []
        """This turn's rendered messages, in order (empty strings for messages with nothing renderable)."""
        self.after: list[str] = []
        """Messages that came after the end of this turn's answer in the pages read: the next turn's."""
        self.delivered = 0
        """Late messages the reply carried (set when the reply is made)."""
        self.dropped = 0
        """Messages not delivered: answers to a failed turn's message, messages after the bot's
        ``endOfConversation``, and what exceeds the bound of owed text."""
        self.complete = False
        self.ended = False

    def posted(self, activity_id: str) -> None:
        """The id Direct Line gave this turn's activity: the answer is what follows it (and an answer
        to it is this turn's, even from a service that gave a failed turn's activity the same id)."""
        self._activity_id = activity_id
        self._others.discard(activity_id)

    def take(self, activities: list[dict[str, Any]]) -> bool:
        """Read one page; whether the bot was heard in it (a message or ``typing`` of this turn), which
        restarts the quiet period. Past the end of the answer, messages are kept for the next turn.
        """
        heard = False
        for activity in activities:
            activity_id = activity.get("id")
            if activity_id is not None and activity_id == self._activity_id:
                self._after = True
                continue
            sender = activity.get("from")
            if isinstance(sender, dict) and sender.get("id") == self._user:
                # The User's own messages come back in the activity set too; one before this turn's
                # was posted by a turn that failed before it read anything.
                if isinstance(activity_id, str) and not self._after:
                    self._others.add(activity_id)
                continue
            kind = activity.get("type")
            if kind not in _READ:
                continue
            reply_to = activity.get("replyToId")
            if reply_to is not None and reply_to == self._activity_id:
                self._after = True  # an answer to this turn's activity: it was posted before, listed or not
            if reply_to in self._others:
                if kind == "message":
                    self.dropped += 1
            elif self.complete or not self._after:
                if kind == "message":
                    self._owe(self.after if self.complete else self.late, render_activity(activity))
            elif kind == "endOfConversation":
                self.complete = self.ended = True
            elif kind == "typing":
                heard = True
            else:
                heard = True
                self.messages.append(render_activity(activity))
                # A prompt: the bot now waits for the User (``acceptingInput`` does not say that).
                self.complete = activity.get("inputHint") == EXPECTING_INPUT
        return heard

    def _owe(self, messages: list[str], message: str) -> None:
        """Keep ``message`` for a later reply, unless the owed text would pass the reply's bound, or the
        bot has ended the conversation (nothing reads a closed one)."""
        if self.ended or self._kept + len(message) > MAX_REPLY_BYTES:
            self.dropped += 1
            return
        self._kept += len(message)
        messages.append(message)


def render_activity(activity: Mapping[str, Any]) -> str:
    """One message activity as lines a User can read and act on; ``""`` if nothing in it renders."""
    lines: list[str] = []
    text = activity.get("text")
    if isinstance(text, str) and text.strip():
        lines.append(text.strip())
    attachments = activity.get("attachments")
    for attachment in attachments if isinstance(attachments, list) else ():
        lines.extend(_attachment_lines(attachment))
    suggested = activity.get("suggestedActions")
    actions = suggested.get("actions") if isinstance(suggested, dict) else None
    lines.extend(_action_lines(actions))
    return "\n".join(lines)


def _attachment_lines(attachment: Any) -> list[str]:
    if not isinstance(attachment, dict):
        return []
    kind = attachment.get("contentType")
    content = attachment.get("content")
    if kind in CARDS and isinstance(content, dict):
        lines = [line for name in ("title", "subtitle", "text") if (line := _clean(content.get(name)))]
        return lines + _action_lines(content.get("buttons"))
    url = _one_line(attachment.get("contentUrl"))
    if not url:
        return []  # an Adaptive Card or other widget JSON is not text a User can read
    label = "Image" if isinstance(kind, str) and kind.startswith("image/") else "Attachment"
    return [f"{label}: {url}"]


def _action_lines(actions: Any) -> list[str]:
    """CardActions as ``- title (reply: value)`` or ``(open: url)``; ones with neither are left out."""
    if not isinstance(actions, list):
        return []
    lines: list[str] = []
    for action in actions:
        if not isinstance(action, dict):
            continue
        kind = action.get("type")
        title = _one_line(action.get("title"))
        # A messageBack's ``text`` is what the bot receives; its ``value`` is hidden JSON.
        target = _one_line(action.get("text") if kind == "messageBack" else action.get("value"))
        if not target:
            line = title
        elif not title or title == target:
            line = target
        else:
            line = f"{title} ({'open' if kind in _LINKS else 'reply'}: {target})"
        if line:
            lines.append(f"- {line}")
    return lines


def _clean(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _one_line(value: Any) -> str:
    """A string with its whitespace runs collapsed (a title or URL must not break the line it is on)."""
    return " ".join(value.split()) if isinstance(value, str) else ""
