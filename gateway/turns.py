"""One ``message:send`` turn end to end: claim it in the store, run the bot, store the reply.

This is where §4.2 (context ownership, closed contexts) and §4.3 (idempotent retries)
meet the bot call, and where §5.5 (a turn under a delegation token, step-up) and §5.6
(receipts) meet it too. It knows nothing of HTTP: the handler gives it a validated message,
an authenticated caller and the caller's verified delegation, if any, and gets back the
exact reply bytes (a :class:`TurnAnswer`, which says whether they were a stored reply), an
:class:`A2AError`, or :class:`InvalidToken` (the grant was revoked).
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, NamedTuple, NoReturn

from gateway.config import DelegationConfig
from gateway.oauth.access_token import DelegationClaims, InvalidToken
from gateway.oauth.delegation import Delegation
from gateway.oauth.device import start_device_authorization
from gateway.oauth.server import AuthorizationServer
from gateway.ops.limits import Charge, RateLimited, RateLimits
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Spans, TraceContext, traced
from gateway.protocol import errors, receipts
from gateway.protocol.authorization_details import InvalidAuthorizationDetails, details_of_scopes
from gateway.protocol.detail_coverage import coverage, step_up_request
from gateway.protocol.errors import A2AError, Reason
from gateway.protocol.messages import SendMessage, render_reply
from gateway.protocol.stepup import new_task_id, render_step_up
from gateway.protocol.urls import OAuthUrls
from gateway.store.base import (
    ConversationStore,
    GrantCheck,
    Owner,
    StoreError,
    StoreFull,
    TurnClaim,
    TurnStatus,
)
from gateway.upstream.base import BotAdapter, BotBusy, BotReply, Turn, UpstreamError, UserDelegation

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


CONTEXT_OF_ANOTHER_USER: Final = "contextId belongs to another user"
"""§5.5, §6: a token for another Brand user on a context that already ran as one (``INVALID_PARAMS``).

Only the context's own (personal agent, ``sub``) ever gets this far (§4.2), so it leaks nothing."""


STEP_UP_FOR_DETAILS: Final = (
    "This needs your approval first: open the link to see exactly what it would allow."
)
"""§5.5 with RFC 9396: the step-up task's text when the turn needs details the token lacks. The
gateway's own words, never the bot's: a bot whose action was not covered may have written that it
was done, and the person must not read that it was."""


STORE_FULL_RETRY_AFTER: Final = 60
"""``Retry-After`` for a conversation the full memory store refused: one pass of its sweep, which
deletes what has expired by then (gateway/store/memory.py)."""
STORE_FULL_LOG_EVERY: Final = 10.0
"""Seconds between two log lines about refusals for a full store: one line names them all."""


class _Authority(NamedTuple):
    """What a reply needs beyond what the token grants (§5.5), and what covers its bound actions."""

    missing: tuple[str, ...] = ()
    """Scopes the reply requires that the token does not grant."""
    needed: tuple[str, ...] = ()
    """RFC 9396 details no granted detail covers: those of bound actions and those required."""
    covering: tuple[str | None, ...] = ()
    """Per action, the granted detail that covers it (:class:`~gateway.protocol.detail_coverage.Coverage`)."""


class TurnAnswer(NamedTuple):
    """What a turn answered: the exact reply bytes, and whether they are a stored reply replayed (§4.3)."""

    body: bytes
    replayed: bool = False


@dataclass(frozen=True, slots=True)
class _DelegatingBrand:
    """What §5.5 step-up and §5.6 receipts need of one delegating Brand, looked up once per runtime."""

    server: AuthorizationServer
    delegation: DelegationConfig
    urls: OAuthUrls


class TurnService:
    def __init__(
        self,
        store: ConversationStore,
        adapters: Mapping[str, BotAdapter],
        limits: RateLimits,
        metrics: Metrics | None = None,
        *,
        owners: int = 4096,
        oauth: AuthorizationServer | None = None,
        spans: Spans | None = None,
    ) -> None:
        self._store = store
        self._spans = spans
        self._adapters = adapters
        self._limits = limits
        self._metrics = metrics
        self._owners_size = owners
        self._owners: OrderedDict[tuple[str, str, str], Owner] = OrderedDict()
        self._store_full_logged = -math.inf
        self._store_full_unlogged = 0
        self._delegating: dict[str, _DelegatingBrand] = (
            {}
            if oauth is None
            else {
                brand.id: _DelegatingBrand(oauth, brand.delegation, oauth.urls(brand))
                for brand in oauth.config.brands.values()
                if brand.delegation is not None
            }
        )

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
                # O(1): a plain dict's first key is found past every slot deleted before it.
                self._owners.popitem(last=False)
            self._owners[key] = owner
        return owner

    def _observe_bot(self, brand_id: str, outcome: str, started: float) -> None:
        if self._metrics is not None:
            self._metrics.observe_bot_call(brand_id, outcome, time.perf_counter() - started)

    def _store_full(self, brand_id: str, request_id: str) -> RateLimited:
        """A conversation the memory store had no room for (``cache.max_entries``): a bare 429 (§6),
        counted as ``pact_rate_limited_total{limit="store_full"}``, and logged, one line for all
        refusals in :data:`STORE_FULL_LOG_EVERY` seconds."""
        if self._metrics is not None:
            self._metrics.rate_limited.labels(brand=brand_id, limit="store_full").inc()
        self._store_full_unlogged += 1
        now = time.monotonic()
        if now >= self._store_full_logged + STORE_FULL_LOG_EVERY:
            log.warning(
                "store full: %d new conversation(s) refused with 429; raise cache.max_entries "
                "(and the memory limit) or use Redis",
                self._store_full_unlogged,
                extra={"request_id": request_id, "brand": brand_id},
            )
            self._store_full_logged = now
            self._store_full_unlogged = 0
        return RateLimited(STORE_FULL_RETRY_AFTER, "store_full")

    def _store_failed(self, operation: str) -> None:
        if self._metrics is not None:
            self._metrics.store_error(operation)

    async def _claim(
        self, owner: Owner, message: SendMessage, charge: Charge, request_id: str, grant: GrantCheck | None
    ) -> TurnClaim:
        # The store reads the new conversation's id only for a message without ``contextId``
        # (ConversationStore.begin_turn), so later turns skip minting one.
        context_id = message.context_id
        try:
            return await traced(
                self._spans,
                "pact.store.begin_turn",
                self._store.begin_turn(
                    owner,
                    context_id,
                    message.message_id,
                    message.text,
                    new_context_id() if context_id is None else "",
                    limits=charge.hits,
                    grant=grant,
                    fail_open=charge.fail_open,
                ),
            )
        except StoreError as exc:
            self._store_failed("begin_turn")
            log.error("store unavailable while claiming a turn: %s", exc, extra={"request_id": request_id})
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None

    async def send(
        self,
        owner: Owner,
        message: SendMessage,
        charge: Charge,
        request_id: str,
        delegation: Delegation | None = None,
        trace: TraceContext | None = None,
    ) -> TurnAnswer:
        """Run the turn, charging ``charge`` (§6) in the same store step that claims it.

        The store is needed for the turn anyway, so a failure of the turn's store step is
        ``INTERNAL`` whatever ``rate_limits.fail_open`` says, and the hot path saves the limits' own
        round trip; a counter the store keeps apart (a Redis Cluster node of its own) that cannot be
        charged is what ``fail_open`` decides, as it is for every other limit.
        Under a ``delegation`` (§5.5) that same step checks the grant and the context's user.
        The bot is called as a child of ``trace``'s span (W3C Trace Context).
        """
        claim = await self._claim(
            owner, message, charge, request_id, None if delegation is None else delegation.grant
        )
        if claim.uncounted:
            self._limits.not_counted(charge, claim.uncounted, fail_open=True)
        if claim.status is TurnStatus.RATE_LIMITED:
            # Nothing was charged or claimed: the retry after Retry-After runs the turn.
            raise self._limits.refusal(charge, claim.waits)
        if claim.status is TurnStatus.STORE_FULL:
            # Nothing was charged or claimed: live conversations are kept and a new one must wait.
            raise self._store_full(owner.brand_id, request_id)
        if claim.status is TurnStatus.GRANT_REVOKED:
            # §5.5: revoked (or never this PA and sub's): the token stops working at once.
            raise InvalidToken("grant_revoked")
        if claim.status is TurnStatus.USER_MISMATCH:
            raise A2AError(Reason.INVALID_PARAMS, CONTEXT_OF_ANOTHER_USER)
        if claim.status is TurnStatus.REPLAY:
            assert claim.reply is not None
            self._check_replayed_grant(claim.reply, delegation)
            if self._metrics is not None:
                self._metrics.retry_served(owner.brand_id)
            return TurnAnswer(claim.reply, replayed=True)
        if claim.status is TurnStatus.UNKNOWN_CONTEXT:
            # §4.2: foreign and unknown contexts get the same answer.
            raise A2AError(Reason.INVALID_PARAMS, errors.UNKNOWN_CONTEXT)
        if claim.status is TurnStatus.CLOSED:
            raise A2AError(Reason.UNSUPPORTED_OPERATION, errors.CONTEXT_CLOSED)
        if claim.status is TurnStatus.IN_FLIGHT:
            # §4.3: a repeat with no stored reply yet.
            raise A2AError(Reason.INVALID_PARAMS, errors.DUPLICATE_IN_FLIGHT)
        return TurnAnswer(await self._run(owner, message, claim, request_id, delegation, trace))

    @staticmethod
    def _check_replayed_grant(reply: bytes, delegation: Delegation | None) -> None:
        """§4.3 with §5.5: a reply served under a grant is replayed only under that grant, still live.

        The begin-turn step has already checked the request's own grant is live (a revoked one
        never reaches here), so the request must carry it: a retry without the delegation header,
        or under another grant (one that superseded a since-revoked grant), would otherwise read
        a reply, and its receipt, that only that grant's holder may see. It is answered as a
        revoked delegation is (``401 invalid_token``): the grant the reply was served under is
        not what the request presents.
        """
        grant_id = receipts.receipt_grant(reply)
        if grant_id is not None and (delegation is None or delegation.claims.grant_id != grant_id):
            raise InvalidToken("replay_needs_its_grant")

    async def _run(
        self,
        owner: Owner,
        message: SendMessage,
        claim: TurnClaim,
        request_id: str,
        delegation: Delegation | None,
        trace: TraceContext | None,
    ) -> bytes:
        granted = None if delegation is None else delegation.claims
        bot_details = () if granted is None else self._bot_details(owner.brand_id, granted)
        turn = Turn(
            brand_id=owner.brand_id,
            conversation_id=claim.context_id,
            message_id=message.message_id,
            text=message.text,
            pa_issuer=owner.issuer,
            sub=owner.sub,
            new_conversation=claim.new_conversation,
            request_id=request_id,
            delegation=None
            if granted is None
            else UserDelegation(granted.user, granted.scopes, granted.grant_id, bot_details),
            trace=trace,
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
            raise RateLimited(busy.retry_after, busy.limit) from None
        except asyncio.CancelledError:
            self._observe_bot(owner.brand_id, "cancelled", started)
            await asyncio.shield(self._release(owner, claim, message, request_id))
            raise
        except Exception as exc:
            # Anything else the adapter raised (a reply it could not handle, a bug) is the bot's
            # turn failing all the same: INTERNAL, never a 500 with a traceback, and released so the
            # retry runs it (§4.3). Only the type is logged: a message could quote the bot's reply.
            self._observe_bot(owner.brand_id, "adapter_error", started)
            log.error(
                "bot call failed: adapter_error: %s",
                type(exc).__name__,
                extra={"request_id": request_id, "brand": owner.brand_id},
            )
            await self._release(owner, claim, message, request_id)
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None
        self._observe_bot(owner.brand_id, "ok", started)
        authority = _Authority()
        if reply.requires_scopes or reply.actions or reply.scopes_used or reply.requires_details:
            authority = await self._check_authority(
                owner, message, claim, request_id, reply, delegation, bot_details
            )
            if authority.missing or authority.needed:
                return await self._step_up(owner, message, claim, request_id, reply, authority)
        if delegation is None:
            body = render_reply(new_reply_id(), claim.context_id, reply.text)
        else:
            try:
                body = await self._delegated_reply(
                    owner, message, claim, reply, delegation, authority.covering
                )
            except asyncio.CancelledError:
                # Cancelled while its receipt waited for the batch: the turn is not stored, so
                # its in-flight marker goes, and the retry runs it (§4.3).
                await asyncio.shield(self._release(owner, claim, message, request_id))
                raise
        # A completion that fails may still have been stored (a timeout after Redis ran it): the
        # release that follows drops only an in-flight marker, so either the retry replays the
        # stored reply or it runs the turn, rather than "still being processed" for pending_ttl.
        try:
            await traced(
                self._spans,
                "pact.store.complete_turn",
                self._store.complete_turn(owner, claim.context_id, message.message_id, body, close=reply.end),
            )
        except StoreError as exc:
            self._store_failed("complete_turn")
            log.error("store unavailable while saving a reply: %s", exc, extra={"request_id": request_id})
            await self._release(owner, claim, message, request_id)
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None
        except asyncio.CancelledError:
            await asyncio.shield(self._release(owner, claim, message, request_id))
            raise
        return body

    def _bot_details(self, brand_id: str, granted: DelegationClaims) -> tuple[str, ...]:
        """The token's RFC 9396 details the bot is told of: those of a type the Brand still accepts,
        under a scope the token carries. A type removed by a reload covers nothing any more
        (:func:`~gateway.protocol.authorization_details.covers`), so the bot is not told it may act."""
        if not granted.authorization_details:
            return ()
        types = self._delegating[brand_id].delegation.authorization_details
        return details_of_scopes(granted.authorization_details, types, granted.scopes)

    async def _check_authority(
        self,
        owner: Owner,
        message: SendMessage,
        claim: TurnClaim,
        request_id: str,
        reply: BotReply,
        delegation: Delegation | None,
        details: tuple[str, ...],
    ) -> _Authority:
        """What the turn needs but was not granted (§5.5), after refusing a bot that overreached.

        A reply that claims a scope the token does not carry (or any action or scope at all
        without a token), or an action bound to a resource by a detail its Brand does not accept,
        is the bot acting beyond what the User could grant: it is logged, never reaches the
        personal agent, and nothing is stored (``INTERNAL``, released like a failed call). An
        action whose detail the token's ``details`` (those the bot was told of) do not cover
        (RFC 9396) is not refused but asked for: a step-up, and the action is never signed into a
        receipt.
        """
        granted = () if delegation is None else delegation.claims.scopes
        if delegation is None and (reply.actions or reply.scopes_used):
            overreach = "actions or scopes_used without a delegation token"
        else:
            ungranted = [scope for scope in reply.scopes_used if scope not in granted]
            overreach = f"scopes_used not granted: {' '.join(ungranted)}" if ungranted else ""
        if overreach:
            await self._refuse_reply(owner, message, claim, request_id, overreach)
        missing = tuple(scope for scope in reply.requires_scopes if scope not in granted)
        if not reply.action_details and not reply.requires_details:
            return _Authority(missing)
        brand = self._delegating.get(owner.brand_id)
        types = {} if brand is None else brand.delegation.authorization_details
        try:
            covered = coverage(details, reply.action_details, reply.requires_details, types)
        except InvalidAuthorizationDetails as exc:
            # The reason is one of the fixed sentences: it never quotes what the bot sent.
            await self._refuse_reply(
                owner, message, claim, request_id, f"an action's authorization_detail: {exc}"
            )
        pairs = zip(reply.action_details, covered.covering, strict=True)
        uncovered = sum(1 for used, match in pairs if used and not match)
        if uncovered:
            log.warning(
                "bot reported %d action(s) its delegation's authorization details do not cover: "
                "not signed, the person is asked (step-up)",
                uncovered,
                extra={"request_id": request_id, "brand": owner.brand_id},
            )
        return _Authority(missing, covered.needed, covered.covering)

    async def _refuse_reply(
        self, owner: Owner, message: SendMessage, claim: TurnClaim, request_id: str, why: str
    ) -> NoReturn:
        """A bot reply that overreached: logged with ``why``, released, ``INTERNAL``."""
        log.error("bot reply refused: %s", why, extra={"request_id": request_id, "brand": owner.brand_id})
        await self._release(owner, claim, message, request_id)
        raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR)

    async def _step_up(
        self,
        owner: Owner,
        message: SendMessage,
        claim: TurnClaim,
        request_id: str,
        reply: BotReply,
        authority: _Authority,
    ) -> bytes:
        """§5.5: not a failure but a ``TASK_STATE_AUTH_REQUIRED`` task naming a fresh device authorization.

        The authorization is for the missing scopes and the RFC 9396 details no granted one
        covers (each with the scope it is a condition of), bound to this personal agent and
        ``sub`` (§5.3). The task is not the turn's reply: the turn is released and the
        conversation kept, even one this turn opened, so the personal agent re-sends the same (or
        a new) ``messageId`` on the same ``contextId`` once it holds the new token. When details
        are asked, the task's text is :data:`STEP_UP_FOR_DETAILS`, not the bot's.
        """
        brand = self._delegating.get(owner.brand_id)
        card = {} if brand is None else brand.delegation.scopes
        unknown = [scope for scope in authority.missing if scope not in card]
        if brand is None or unknown:
            why = "the Brand does not offer delegation" if brand is None else f"not on the card: {unknown}"
            log.error(
                "bot asked for scopes it cannot be granted (%s)",
                why,
                extra={"request_id": request_id, "brand": owner.brand_id},
            )
            await self._release(owner, claim, message, request_id)
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR)
        try:
            scopes, details = step_up_request(authority.missing, authority.needed, brand.delegation)
        except InvalidAuthorizationDetails as exc:
            log.error(
                "bot asked for authorization details that cannot be granted (%s)",
                exc,
                extra={"request_id": request_id, "brand": owner.brand_id},
            )
            await self._release(owner, claim, message, request_id)
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None
        try:
            started = await start_device_authorization(
                brand.server.store,
                brand.delegation,
                brand.urls,
                brand_id=owner.brand_id,
                client_id=owner.issuer,
                owner_digest=owner.digest,
                scopes=scopes,
                details=details,
                now=brand.server.clock(),
            )
        except StoreFull:
            # The memory store at its bound with nothing that may go: the §6 answer a new conversation
            # gets there too, and the message released so that its retry runs the turn again.
            await self._release(owner, claim, message, request_id)
            raise self._store_full(owner.brand_id, request_id) from None
        except StoreError as exc:
            self._store_failed("create_authorization")
            log.error("store unavailable while starting a step-up: %s", exc, extra={"request_id": request_id})
            await self._release(owner, claim, message, request_id)
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None
        await self._release(owner, claim, message, request_id, keep_conversation=True)
        if self._metrics is not None:
            self._metrics.delegation_event(owner.brand_id, "step_up")
        return render_step_up(
            task_id=new_task_id(),
            reply_id=new_reply_id(),
            context_id=claim.context_id,
            text=STEP_UP_FOR_DETAILS if details else reply.text,
            missing_scopes=scopes,
            verification_uri_complete=started.verification_uri_complete,
            device_code=started.device_code,
            user_code=started.user_code,
            interval=started.interval,
            expires_in=started.expires_in,
            authorization_details=details,
        )

    async def _delegated_reply(
        self,
        owner: Owner,
        message: SendMessage,
        claim: TurnClaim,
        reply: BotReply,
        delegation: Delegation,
        covering: tuple[str | None, ...] = (),
    ) -> bytes:
        """The reply with its signed §5.6 receipt; stored whole, so a retry returns the same receipt.

        An action bound to a resource names the granted detail that ``covering`` says allowed it
        (RFC 9396). The signature comes from the keys' :class:`~gateway.provider_keys.SigningBatch`,
        signed back to back with the other receipts asked for in the same event-loop pass.
        """
        # Verified against this runtime's server, so the Brand delegates in this runtime.
        brand = self._delegating[owner.brand_id]
        granted = delegation.claims
        actions = reply.actions
        if covering:
            actions = tuple(
                action if detail is None else action._replace(authorization_detail=detail)
                for action, detail in zip(actions, covering, strict=True)
            )
        claims = receipts.receipt_claims(
            grant_id=granted.grant_id,
            user=granted.user,
            pa=owner.issuer,
            brand=brand.urls.interface,
            scopes_used=reply.scopes_used,
            actions=actions,
            ts=receipts.timestamp(brand.server.clock()),
            context_id=claim.context_id,
            message_id=message.message_id,
        )
        jws = await brand.server.keys.batch.sign(receipts.receipt_payload(claims), receipts.RECEIPT_TYP)
        if self._metrics is not None:
            self._metrics.delegation_event(owner.brand_id, "delegated_turn")
            self._metrics.delegation_event(owner.brand_id, "receipt_signed")
        metadata = receipts.receipt_metadata(jws, claims)
        return render_reply(new_reply_id(), claim.context_id, reply.text, metadata)

    async def _release(
        self,
        owner: Owner,
        claim: TurnClaim,
        message: SendMessage,
        request_id: str,
        *,
        keep_conversation: bool = False,
    ) -> None:
        # §4.3: nothing is stored for a failed turn, and the retry must be able to run it. A
        # conversation this turn opened is forgotten, unless the turn only paused (§5.5 step-up).
        # One the message named is kept even if no turn of it was ever answered: the personal
        # agent learnt its contextId from a step-up task, and must be able to continue it.
        forget = claim.new_conversation and message.context_id is None and not keep_conversation
        try:
            await traced(
                self._spans,
                "pact.store.abort_turn",
                self._store.abort_turn(owner, claim.context_id, message.message_id, new_conversation=forget),
            )
        except StoreError as exc:
            self._store_failed("abort_turn")
            # The store tries it again in the background until the marker would lapse (RedisStore).
            log.warning(
                "could not release an in-flight marker yet: %s", exc, extra={"request_id": request_id}
            )
