"""Small per-conversation state a bot adapter keeps between turns, beside the conversations.

Some bots are not stateless behind one POST: a Direct Line conversation has its own id, token
and watermark, and an OpenAI-compatible model gets the whole history on every turn. The
adapter keeps that here, under :func:`gateway.store.keys.adapter_key`, as opaque bytes with a
TTL: it puts with ``cache.conversation_ttl`` (refreshed each turn, so the state lives as long
as the conversation stays open) and deletes it itself when its reply ends the conversation.

In the conversation store's own container or connection (:func:`open_adapter_state`), so a
``memory://`` gateway keeps it in-process and a Redis one shares it between replicas, like the
conversation it belongs to.

Its keys carry no owner hash tag (issue 20), unlike the conversation's: an adapter knows the
conversation, not its owner, and no script touches them together with conversation keys (an
erasure deletes them with commands of their own, :mod:`gateway.store.admin_redis`), so each is a
one-key command that a Redis Cluster routes to its own slot.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Final

from gateway.store.memory import MemoryKeyspace
from gateway.store.redis_pipe import RedisPipe

__all__ = ["AdapterState", "MemoryAdapterState", "RedisAdapterState"]

_GONE: Final = (-math.inf, b"")
"""A deleted entry: expired in place, for the keyspace's sweep to remove (only the sweep deletes keys)."""


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


class MemoryAdapterState(AdapterState):
    """Entries ``(expires, value)`` in the conversation store's :class:`MemoryKeyspace`, on its clock."""

    def __init__(self, keyspace: MemoryKeyspace) -> None:
        self._keyspace = keyspace

    async def get(self, key: str) -> bytes | None:
        entry = self._keyspace.entries.get(key)
        if type(entry) is not tuple or entry[0] <= self._keyspace.clock():
            return None
        value: bytes = entry[1]
        return value

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        self._keyspace.put(key, (self._keyspace.clock() + ttl, value))

    async def delete(self, key: str) -> None:
        if key in self._keyspace.entries:
            self._keyspace.entries[key] = _GONE


class RedisAdapterState(AdapterState):
    """Plain strings with a PX expiry on the conversation store's connection; Redis expires them itself."""

    def __init__(self, redis: RedisPipe) -> None:
        self._redis = redis

    async def get(self, key: str) -> bytes | None:
        value: bytes | None = await self._redis.execute("GET", key)
        return value

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        # Whole milliseconds, at least one: PX 0 is an error, and a TTL must not round to "never".
        await self._redis.execute("SET", key, value, "PX", max(1, math.ceil(ttl * 1000)))

    async def delete(self, key: str) -> None:
        await self._redis.execute("DEL", key)
