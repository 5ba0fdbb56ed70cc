"""One owner's conversations as an operator sees them: listed, closed, or erased with what hangs on them.

The turn protocol (:mod:`gateway.store.base`) finds a conversation by its ``contextId`` alone, and
keeps only a digest of its owner inside. An operator asked to forget a person knows who they
are, not their ``contextId`` s, so each backend also keeps an index of an owner's conversations
(on Redis at :func:`gateway.store.keys.owner_index_key`, in memory under the owner's digest):
written by the very step that opens a conversation (no round trip of its own on a turn), kept
as long as the longest-lived conversation it names, and cleared of dead ones as it goes.

Erasing a conversation removes, in one atomic step of the backend: its record (every turn, every
stored reply, the Brand user it ran as), the first-message records of its messages (§4.3), the
state bot adapters keep for it (:mod:`gateway.store.adapter_state`), and its place in the index.
It leaves a tombstone for ``cache.pending_ttl`` (longer than any turn, see
``gateway.config.build._check_pending_ttl``): a turn that was running stores no reply over it, and
the ``contextId`` answers as an unknown one would, then as now.

Not reached: a conversation the index does not name. That is one stored by a gateway from before
the index, until its next turn indexes it, or one whose record was lost; either expires on its own
within ``cache.conversation_ttl + cache.closed_ttl``. A first message whose turn failed leaves a
first-message record (no text, a digest of it) that lapses after ``cache.retry_window``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.store.base import Owner

__all__ = ["ConversationAdmin", "ConversationInfo", "Erased"]


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    """What an operator may see of a conversation: never a text or a reply."""

    context_id: str
    opened_at: float | None
    """Wall-clock seconds; ``None`` for a Redis conversation opened before the gateway kept the time."""
    turns: int
    """Answered turns: the replies stored for retries (§4.3)."""
    in_flight: int
    """Turns running now (their in-flight marker is live)."""
    closed: bool
    """Closed by the bot or an operator, or idle past ``cache.conversation_ttl`` (§4.2)."""


@dataclass(frozen=True, slots=True)
class Erased:
    """What one erasure removed, by kind."""

    conversations: int = 0
    replies: int = 0
    """Stored replies among those conversations' turns."""
    in_flight: int = 0
    """Turns that were running: their replies will not be stored."""
    retry_records: int = 0
    """First-message records (§4.3) still live."""
    adapter_states: int = 0
    """Bot adapters' per-conversation state (a model's history, a Direct Line conversation)."""
    counters: int = 0
    """§6 rate-limit counters still counting."""


class ConversationAdmin(ABC):
    """The operator's side of a :class:`~gateway.store.base.ConversationStore`, on the same backend.

    Opened beside it by :func:`gateway.store.factory.open_conversation_admin`. Every method
    raises :class:`~gateway.store.base.StoreError` when the backend fails.
    """

    @abstractmethod
    async def conversations(self, owner: Owner) -> list[ConversationInfo]:
        """``owner``'s conversations the store still holds (open or closed), oldest first."""

    @abstractmethod
    async def close(self, owner: Owner, context_id: str) -> bool:
        """Close ``owner``'s conversation ``context_id`` as the bot's last reply would (§4.2): later turns
        answer ``UNSUPPORTED_OPERATION``, stored replies are still replayed, and it is remembered for
        ``cache.closed_ttl``. ``False`` when ``owner`` has no such conversation; closing a closed
        one changes nothing."""

    @abstractmethod
    async def erase(self, owner: Owner, counters: Sequence[str]) -> Erased:
        """Remove every conversation of ``owner`` with what hangs on it (see the module docstring), and
        the rate-limit counters at the keys ``counters``."""
