"""The conversation store interface and the turn protocol every backend implements.

A turn is claimed, run against the bot, then completed or aborted:

* :meth:`ConversationStore.begin_turn` decides, atomically, whether this request runs the
  bot (``NEW``), replays a stored reply (``REPLAY``, §4.3), must be refused because the same
  ``messageId`` is still running (``IN_FLIGHT``), or names a context it may not use
  (``UNKNOWN_CONTEXT``, §4.2) or that is closed (``CLOSED``, §4.2). It also charges the
  request's §6 rate limits in the same step (``RATE_LIMITED`` when one refuses, and then
  nothing is claimed), so a turn costs one store round trip to begin and one to complete.
* :meth:`ConversationStore.complete_turn` stores the reply bytes exactly as sent.
* :meth:`ConversationStore.abort_turn` releases the marker after a failed bot call (or a
  completion that may not have been stored) so the retry runs the turn; a stored reply is
  never released.

Backends keep the whole decision in one atomic step (a Lua script on Redis, a single
synchronous section on the in-memory backend), so any number of concurrent duplicates
produce exactly one bot call.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

from gateway.store.gcra import Hit


class StoreError(Exception):
    """The backend could not be reached or answered nonsense; the request fails with ``INTERNAL``."""


class StoreFull(StoreError):
    """The memory store is at ``cache.max_entries`` and nothing in it may go: a §5 record is refused
    rather than stored past the bound (issue 28, L4). Handlers that can answer it precisely do (the
    device authorization endpoint: ``429`` ``slow_down``); elsewhere it is a store failure."""


@dataclass(frozen=True, slots=True)
class Owner:
    """§4.2: a context belongs to ``(brandId, personal agent, sub)``."""

    brand_id: str
    issuer: str
    sub: str
    digest_bytes: bytes = field(init=False, repr=False, compare=False)
    """128 bits of SHA-256 over the triple, raw: what the memory backend keeps (49 bytes, not 81)."""
    digest: str = field(init=False, repr=False, compare=False)
    """The same 128 bits in hex, for keys and the Redis backend."""

    def __post_init__(self) -> None:
        # Stored instead of the triple: fixed size, and the Brand user id never sits in the store in clear.
        material = "\x00".join((self.brand_id, self.issuer, self.sub)).encode()
        raw = hashlib.sha256(material).digest()[:16]
        object.__setattr__(self, "digest_bytes", raw)
        object.__setattr__(self, "digest", raw.hex())


class TurnStatus(Enum):
    NEW = "new"
    REPLAY = "replay"
    IN_FLIGHT = "in_flight"
    UNKNOWN_CONTEXT = "unknown_context"
    CLOSED = "closed"
    RATE_LIMITED = "rate_limited"
    GRANT_REVOKED = "grant_revoked"
    """§5.5: the delegation token's grant is gone or belongs to another (PA, ``sub``): a 401."""
    USER_MISMATCH = "user_mismatch"
    """§5.5: the context already ran as another Brand user: ``INVALID_PARAMS``."""
    STORE_FULL = "store_full"
    """The memory store is at ``cache.max_entries`` and nothing in it may go: no new conversation
    (a bare 429, §6), and nothing was charged or claimed. Turns of open conversations go on."""


class GrantCheck(NamedTuple):
    """§5.5 checks a delegated turn adds to its begin-turn step (no extra round trip)."""

    grant_key: str
    """:func:`gateway.store.keys.grant_key`: must hold a live grant whose owner is the turn's owner."""
    user_digest: str
    """:func:`gateway.store.keys.user_digest` of the Brand user: the context's user, set on its first
    delegated turn; a later turn as another user is ``USER_MISMATCH``."""


class TurnClaim(NamedTuple):
    """What :meth:`ConversationStore.begin_turn` decided; a named tuple, as it is built per turn."""

    status: TurnStatus
    context_id: str = ""
    new_conversation: bool = False
    reply: bytes | None = None
    waits: tuple[float, ...] = ()
    """``RATE_LIMITED``: seconds to wait per limit passed to ``begin_turn``, in order (0 where allowed)."""
    uncounted: str = ""
    """Why a §6 counter kept apart from the turn's own step could not be charged, when ``begin_turn``'s
    ``fail_open`` served the turn anyway (``""`` when every counter was charged): the caller logs and
    counts it as any uncounted limit."""


def text_digest(text: str) -> bytes:
    """What a first message is recognised by when it is retried without ``contextId`` (§4.3): 128 bits."""
    return hashlib.sha256(text.encode()).digest()[:16]


class ConversationStore(ABC):
    """One interface, two backends: memory (in aiocache's container) and Redis (one pipelined connection)."""

    @abstractmethod
    async def begin_turn(
        self,
        owner: Owner,
        context_id: str | None,
        message_id: str,
        text: str,
        new_context_id: str,
        *,
        limits: Sequence[Hit] = (),
        grant: GrantCheck | None = None,
        fail_open: bool = False,
    ) -> TurnClaim:
        """Claim the turn ``message_id``, after charging ``limits`` (§6 counters, all or nothing).

        ``fail_open`` (``rate_limits.fail_open``): a counter the backend keeps apart from the turn's
        own step (on Redis in the tagged layout, the per-agent one, in a slot of its own) that cannot
        be charged (its Redis Cluster node is down) leaves the turn uncounted by it
        (:attr:`TurnClaim.uncounted`) instead of failing it; the turn's own step failing still fails it.

        With ``grant`` (a turn under a delegation token, §5.5), after the limits and before
        anything else: a grant that is not live or whose owner is not ``owner`` is
        ``GRANT_REVOKED``; a context that already ran as another Brand user is ``USER_MISMATCH``
        (neither claims anything). A context's user is recorded by its first delegated turn;
        a replay is still served only after both checks pass.

        ``STORE_FULL`` (memory store at its bound, before the limits): a message that would open
        a conversation, and nothing is charged or claimed.

        When a limit refuses, nothing is charged or claimed and the claim is ``RATE_LIMITED``
        with the waits. The counters are the rate limiter's own (same keys, same arithmetic,
        same clock), so this and :meth:`gateway.store.limits.RateLimiter.hit_all` share one budget.

        Without ``context_id`` a conversation ``new_context_id`` is opened, unless the same
        owner sent the same ``message_id`` with the same text within the retry window: then
        the claim is about that earlier conversation (§4.3: a first message retried by a
        personal agent that never saw the reply must not open a second conversation, and gets
        that reply again).

        Except when the earlier conversation is gone, or closed (§4.2) without having answered
        this ``message_id``: there is then no reply to replay and no turn of it running, so the
        message is what it says, the start of a conversation. It opens ``new_context_id`` and
        takes the first-message record over, so its own retries find the new conversation.
        Answering ``CLOSED`` would refuse, for the rest of the retry window, a message that names
        no context, when §4.2 says that omitting ``contextId`` is how a personal agent starts
        anew. One that was answered is replayed even if its conversation has since closed: that
        is the reply to this message, and the personal agent may never have seen it.
        """

    @abstractmethod
    async def complete_turn(
        self, owner: Owner, context_id: str, message_id: str, reply: bytes, *, close: bool
    ) -> None:
        """Store the reply bytes for replay and refresh the conversation's idle TTL (or close it)."""

    @abstractmethod
    async def abort_turn(
        self, owner: Owner, context_id: str, message_id: str, *, new_conversation: bool
    ) -> None:
        """Release the in-flight marker; a conversation opened by this turn is forgotten entirely.

        Only a marker: if the turn's reply is stored (its completion reached the store after
        all), this does nothing and a retry replays that reply.
        """

    @abstractmethod
    async def start(self) -> None:
        """Start background upkeep once the event loop runs; :meth:`close` stops it."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise :class:`StoreError` when the backend is unreachable (readiness)."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections."""
