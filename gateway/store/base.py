"""The conversation store interface and the turn protocol every backend implements.

A turn is claimed, run against the bot, then completed or aborted:

* :meth:`ConversationStore.begin_turn` decides, atomically, whether this request runs the
  bot (``NEW``), replays a stored reply (``REPLAY``, §4.3), must be refused because the same
  ``messageId`` is still running (``IN_FLIGHT``), or names a context it may not use
  (``UNKNOWN_CONTEXT``, §4.2) or that is closed (``CLOSED``, §4.2).
* :meth:`ConversationStore.complete_turn` stores the reply bytes exactly as sent.
* :meth:`ConversationStore.abort_turn` releases the marker after a failed bot call so the
  retry runs the turn (nothing is stored).

Backends keep the whole decision in one atomic step (a Lua script on Redis, a single
synchronous section on the in-memory backend), so any number of concurrent duplicates
produce exactly one bot call.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import Enum


class StoreError(Exception):
    """The backend could not be reached or answered nonsense; the request fails with ``INTERNAL``."""


@dataclass(frozen=True, slots=True)
class Owner:
    """§4.2: a context belongs to ``(brandId, personal agent, sub)``."""

    brand_id: str
    issuer: str
    sub: str
    digest: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Stored instead of the triple: fixed size, and the Brand user id never sits in the store in clear.
        material = "\x00".join((self.brand_id, self.issuer, self.sub)).encode()
        object.__setattr__(self, "digest", hashlib.sha256(material).hexdigest()[:32])


class TurnStatus(Enum):
    NEW = "new"
    REPLAY = "replay"
    IN_FLIGHT = "in_flight"
    UNKNOWN_CONTEXT = "unknown_context"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class TurnClaim:
    status: TurnStatus
    context_id: str = ""
    new_conversation: bool = False
    reply: bytes | None = None


def text_digest(text: str) -> str:
    """What a first message is recognised by when it is retried without ``contextId`` (§4.3)."""
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class ConversationStore(ABC):
    """One interface, two backends (memory and Redis, both on aiocache)."""

    @abstractmethod
    async def begin_turn(
        self, owner: Owner, context_id: str | None, message_id: str, text: str, new_context_id: str
    ) -> TurnClaim:
        """Claim the turn ``message_id``.

        Without ``context_id`` a conversation ``new_context_id`` is opened, unless the same
        owner sent the same ``message_id`` with the same text within the retry window: then
        the claim is about that earlier conversation (a first message retried by a personal
        agent that never saw the reply must not open a second conversation).
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
        """Release the in-flight marker; a conversation opened by this turn is forgotten entirely."""

    @abstractmethod
    async def ping(self) -> None:
        """Raise :class:`StoreError` when the backend is unreachable (readiness)."""

    @abstractmethod
    async def close(self) -> None:
        """Release connections."""
