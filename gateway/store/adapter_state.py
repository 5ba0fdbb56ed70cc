"""Small per-conversation state a bot adapter keeps between turns, beside the conversations.

Some bots are not stateless behind one POST: a Direct Line conversation has its own id, token
and watermark, and an OpenAI-compatible model gets the whole history on every turn. The
adapter keeps that here, under :func:`gateway.store.keys.adapter_key`, as opaque bytes with a
TTL: it puts with ``cache.conversation_ttl`` (refreshed each turn, so the state lives as long
as the conversation stays open) and deletes it itself when its reply ends the conversation.

In the conversation store's own container or connection (:func:`~gateway.store.factory.open_adapter_state`:
:mod:`~gateway.store.adapter_state_memory` or :mod:`~gateway.store.adapter_state_redis`), so a
``memory://`` gateway keeps it in-process and a Redis one shares it between replicas, like the
conversation it belongs to.

Its keys carry no owner hash tag (issue 20), unlike the conversation's: an adapter knows the
conversation, not its owner, and no script touches them together with conversation keys (an
erasure deletes them with commands of their own, :mod:`gateway.store.admin_redis`), so each is a
one-key command that a Redis Cluster routes to its own slot.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

__all__ = ["AdapterState"]


class AdapterState(ABC):
    """Bytes by key with a TTL; every operation raises :class:`~gateway.store.base.StoreError` on failure."""

    @abstractmethod
    async def get(self, key: str) -> bytes | None:
        """The value under ``key``, or ``None`` when there is none or it expired."""

    @abstractmethod
    async def put(self, key: str, value: bytes, ttl: float) -> None:
        """Store ``value`` under ``key`` for ``ttl`` seconds (> 0), replacing what was there."""

    @abstractmethod
    async def delete(self, key: str) -> None:
        """Forget ``key``; forgetting a key that is not there is no error."""
