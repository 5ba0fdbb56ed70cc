"""One ``message:send`` turn end to end: claim it in the store, run the bot, store the reply.

This is where §4.2 (context ownership, closed contexts) and §4.3 (idempotent retries)
meet the bot call. It knows nothing of HTTP: the handler gives it a validated message and
an authenticated caller, and gets back the exact reply bytes or an :class:`A2AError`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Mapping

from gateway.ops.limits import Charge, RateLimited, RateLimits
from gateway.ops.metrics import Metrics
from gateway.protocol import errors
from gateway.protocol.errors import A2AError, Reason
from gateway.protocol.messages import SendMessage, render_reply
from gateway.store.base import ConversationStore, Owner, StoreError, TurnClaim, TurnStatus
from gateway.upstream.base import BotAdapter, BotBusy, Turn, UpstreamError

log = logging.getLogger("pact_gateway.turns")


def new_context_id() -> str:
    """An opaque, unguessable ``contextId`` (§4.2): 122 random bits from the OS CSPRNG."""
    return str(uuid.uuid4())


def new_reply_id() -> str:
    """``r-`` and 32 hex digits: the agent message's ``messageId``, unique in practice.

    Unlike a ``contextId`` it grants nothing to whoever knows it, so it needs no CSPRNG and
    no system call per turn (see :func:`gateway.http.middlewares.new_request_id`).
    """
    return f"r-{random.getrandbits(128):032x}"


class TurnService:
    def __init__(
        self,
        store: ConversationStore,
        adapters: Mapping[str, BotAdapter],
        limits: RateLimits,
        metrics: Metrics | None = None,
        *,
        owners: int = 4096,
    ) -> None:
        self._store = store
        self._adapters = adapters
        self._limits = limits
        self._metrics = metrics
        self._owners_size = owners
        self._owners: dict[tuple[str, str, str], Owner] = {}

    def owner(self, brand_id: str, issuer: str, sub: str) -> Owner:
        """The :class:`Owner` of ``(brand_id, issuer, sub)``, kept for the last ``owners`` of them.

        Building one hashes the triple (SHA-256), and a personal agent's turns repeat the same
        few Users. When full, the oldest entry goes: a miss only costs that hash again.
        """
        key = (brand_id, issuer, sub)
        owner = self._owners.get(key)
        if owner is None:
            owner = Owner(brand_id, issuer, sub)
            if len(self._owners) >= self._owners_size:
                del self._owners[next(iter(self._owners))]
            self._owners[key] = owner
        return owner

    def _observe_bot(self, brand_id: str, outcome: str, started: float) -> None:
        if self._metrics is not None:
            self._metrics.observe_bot_call(brand_id, outcome, time.perf_counter() - started)

    def _store_failed(self, operation: str) -> None:
        if self._metrics is not None:
            self._metrics.store_error(operation)

    async def _claim(self, owner: Owner, message: SendMessage, charge: Charge, request_id: str) -> TurnClaim:
        # The store reads the new conversation's id only for a message without ``contextId``
        # (ConversationStore.begin_turn), so later turns skip minting one.
        context_id = message.context_id
        try:
            return await self._store.begin_turn(
                owner,
                context_id,
                message.message_id,
                message.text,
                new_context_id() if context_id is None else "",
                limits=charge.hits,
            )
        except StoreError as exc:
            self._store_failed("begin_turn")
            log.error("store unavailable while claiming a turn: %s", exc, extra={"request_id": request_id})
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None

    async def send(self, owner: Owner, message: SendMessage, charge: Charge, request_id: str) -> bytes:
        """Run the turn, charging ``charge`` (§6) in the same store step that claims it.

        The store is needed for the turn anyway, so a store failure is ``INTERNAL`` whatever
        ``rate_limits.fail_open`` says, and the hot path saves the limits' own round trip.
        """
        claim = await self._claim(owner, message, charge, request_id)
        if claim.status is TurnStatus.RATE_LIMITED:
            # Nothing was charged or claimed: the retry after Retry-After runs the turn.
            raise self._limits.refusal(charge, claim.waits)
        if claim.status is TurnStatus.REPLAY:
            assert claim.reply is not None
            if self._metrics is not None:
                self._metrics.retry_served(owner.brand_id)
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
        started = time.perf_counter()
        try:
            reply = await self._adapters[owner.brand_id].send(turn)
        except UpstreamError as exc:
            self._observe_bot(owner.brand_id, exc.reason, started)
            log.error("bot call failed: %s", exc, extra={"request_id": request_id, "brand": owner.brand_id})
            await self._release(owner, claim, message, request_id)
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None
        except BotBusy as busy:
            # §6: the bot is at its concurrency cap; it never saw the turn, so the retry must run it.
            await self._release(owner, claim, message, request_id)
            raise RateLimited(busy.retry_after, "concurrency") from None
        except asyncio.CancelledError:
            self._observe_bot(owner.brand_id, "cancelled", started)
            await asyncio.shield(self._release(owner, claim, message, request_id))
            raise
        self._observe_bot(owner.brand_id, "ok", started)
        body = render_reply(new_reply_id(), claim.context_id, reply.text)
        try:
            await self._store.complete_turn(
                owner, claim.context_id, message.message_id, body, close=reply.end
            )
        except StoreError as exc:
            self._store_failed("complete_turn")
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
            self._store_failed("abort_turn")
            log.warning("could not release an in-flight marker: %s", exc, extra={"request_id": request_id})
