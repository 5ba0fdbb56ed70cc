"""One ``message:send`` turn end to end: claim it in the store, run the bot, store the reply.

This is where §4.2 (context ownership, closed contexts) and §4.3 (idempotent retries)
meet the bot call. It knows nothing of HTTP: the handler gives it a validated message and
an authenticated caller, and gets back the exact reply bytes or an :class:`A2AError`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping

from gateway.protocol import errors
from gateway.protocol.errors import A2AError, Reason
from gateway.protocol.messages import SendMessage, render_reply
from gateway.store.base import ConversationStore, Owner, StoreError, TurnClaim, TurnStatus
from gateway.upstream.base import BotAdapter, Turn, UpstreamError

log = logging.getLogger("pact_gateway.turns")


def new_context_id() -> str:
    """An opaque, unguessable ``contextId`` (§4.2): 122 random bits from the OS CSPRNG."""
    return str(uuid.uuid4())


def new_reply_id() -> str:
    return f"r-{uuid.uuid4().hex}"


class TurnService:
    def __init__(self, store: ConversationStore, adapters: Mapping[str, BotAdapter]) -> None:
        self._store = store
        self._adapters = adapters

    async def _claim(self, owner: Owner, message: SendMessage, request_id: str) -> TurnClaim:
        try:
            return await self._store.begin_turn(
                owner, message.context_id, message.message_id, message.text, new_context_id()
            )
        except StoreError as exc:
            log.error("store unavailable while claiming a turn: %s", exc, extra={"request_id": request_id})
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None

    async def send(self, owner: Owner, message: SendMessage, request_id: str) -> bytes:
        claim = await self._claim(owner, message, request_id)
        if claim.status is TurnStatus.REPLAY:
            assert claim.reply is not None
            return claim.reply
        if claim.status is TurnStatus.UNKNOWN_CONTEXT:
            # §4.2: foreign and unknown contexts get the same answer.
            raise A2AError(Reason.INVALID_PARAMS, errors.UNKNOWN_CONTEXT)
        if claim.status is TurnStatus.CLOSED:
            raise A2AError(Reason.UNSUPPORTED_OPERATION, errors.CONTEXT_CLOSED)
        if claim.status is TurnStatus.IN_FLIGHT:
            # §4.3: a repeat with no stored reply yet.
            raise A2AError(Reason.INVALID_PARAMS, errors.DUPLICATE_IN_FLIGHT)
        return await self._run(owner, message, claim, request_id)

    async def _run(self, owner: Owner, message: SendMessage, claim: TurnClaim, request_id: str) -> bytes:
        turn = Turn(
            brand_id=owner.brand_id,
            conversation_id=claim.context_id,
            message_id=message.message_id,
            text=message.text,
            pa_issuer=owner.issuer,
            sub=owner.sub,
            new_conversation=claim.new_conversation,
            request_id=request_id,
        )
        try:
            reply = await self._adapters[owner.brand_id].send(turn)
        except UpstreamError as exc:
            log.error("bot call failed: %s", exc, extra={"request_id": request_id, "brand": owner.brand_id})
            await self._release(owner, claim, message, request_id)
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None
        except asyncio.CancelledError:
            await asyncio.shield(self._release(owner, claim, message, request_id))
            raise
        body = render_reply(new_reply_id(), claim.context_id, reply.text)
        try:
            await self._store.complete_turn(
                owner, claim.context_id, message.message_id, body, close=reply.end
            )
        except StoreError as exc:
            log.error("store unavailable while saving a reply: %s", exc, extra={"request_id": request_id})
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None
        return body

    async def _release(self, owner: Owner, claim: TurnClaim, message: SendMessage, request_id: str) -> None:
        # §4.3: nothing is stored for a failed turn, and the retry must be able to run it.
        try:
            await self._store.abort_turn(
                owner, claim.context_id, message.message_id, new_conversation=claim.new_conversation
            )
        except StoreError as exc:
            log.warning("could not release an in-flight marker: %s", exc, extra={"request_id": request_id})
