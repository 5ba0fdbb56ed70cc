"""Adapter state in a ``memory://`` gateway: in the conversation store's own keyspace, on its clock."""

from __future__ import annotations

import math
from typing import Final

from gateway.store.adapter_state import AdapterState
from gateway.store.memory import MemoryKeyspace

__all__ = ["MemoryAdapterState"]

_GONE: Final = (-math.inf, b"")
"""A deleted entry: expired in place, for the keyspace's sweep to remove (only the sweep deletes keys)."""


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
