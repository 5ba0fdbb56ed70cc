"""Listing, closing and erasing an owner's conversations in the memory store's own keyspace.

Each method reads, decides and writes with no ``await`` that could suspend, so it is one atomic
step against every turn of the process, as the store's own steps are. Nothing is deleted here
(only the keyspace's sweep deletes keys, see :mod:`gateway.store.memory`): what is erased is
replaced at once by a record that holds nothing of it (expired, or the conversation's tombstone),
and the sweep removes those keys within about a minute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final

from gateway.config import CacheConfig
from gateway.store import keys
from gateway.store.adapter_state_memory import MemoryAdapterState
from gateway.store.admin import ConversationAdmin, ConversationInfo, Erased
from gateway.store.base import Owner
from gateway.store.gcra import US
from gateway.store.memory import ERASED, MemoryKeyspace, index_conversations, live_conversation

__all__ = ["MemoryConversationAdmin"]

_FORGOTTEN_FIRST: Final = (-math.inf, "", b"")
"""A first-message record erased: expired, and naming neither conversation nor text digest."""
_FORGOTTEN_INDEX: Final = (-math.inf, 0)
"""An owner's index erased."""


class MemoryConversationAdmin(ConversationAdmin):
    """The operator's side of a :class:`~gateway.store.memory.MemoryStore`, on its keyspace and clock.

    ``adapter_names`` are the names bot adapters keep per-conversation state under
    (:func:`gateway.store.keys.adapter_key`).
    """

    def __init__(self, keyspace: MemoryKeyspace, cache: CacheConfig, adapter_names: Sequence[str]) -> None:
        self._keyspace = keyspace
        self._cache = cache
        self._adapter_names = tuple(adapter_names)
        self._adapter_state = MemoryAdapterState(keyspace)

    def _owned(self, owner: Owner, now: float) -> dict[str, tuple[float, tuple[Any, ...]]]:
        """``owner``'s live conversations by key: when each opened, and its record."""
        entries = self._keyspace.entries
        index = entries.get(owner.digest_bytes)
        if type(index) is not tuple:
            return {}
        owned: dict[str, tuple[float, tuple[Any, ...]]] = {}
        # A key named twice (a conversation whose record was lost and written anew): the later one counts.
        for key, opened in index_conversations(index):
            conversation = live_conversation(entries.get(key), now)
            if conversation is not None and conversation[1] == owner.digest_bytes:
                owned[key] = (opened, conversation)
        return owned

    async def conversations(self, owner: Owner) -> list[ConversationInfo]:
        now = self._keyspace.clock()
        found: list[ConversationInfo] = []
        for key, (opened, conversation) in self._owned(owner, now).items():
            expires, _, _, closed, turns, _ = conversation
            values = turns[1::2]
            found.append(
                ConversationInfo(
                    context_id=keys.context_of(owner.brand_id, key),
                    opened_at=opened,
                    turns=sum(isinstance(value, bytes) for value in values),
                    in_flight=sum(isinstance(value, float) and value > now for value in values),
                    # As MemoryStore._decide reads it: idle past conversation_ttl is closed.
                    closed=closed or now > expires - self._cache.closed_ttl,
                )
            )
        return sorted(found, key=lambda info: (info.opened_at or 0.0, info.context_id))

    async def close(self, owner: Owner, context_id: str) -> bool:
        now = self._keyspace.clock()
        key = keys.conversation_key(owner.brand_id, context_id)
        entries = self._keyspace.entries
        conversation = live_conversation(entries.get(key), now)
        if conversation is None or conversation[1] != owner.digest_bytes:
            return False
        _, digest, answered, closed, turns, user = conversation
        if not closed:
            # The owner's index already outlives this: a close only ever shortens a conversation's life.
            entries[key] = (now + self._cache.closed_ttl, digest, answered, True, turns, user)
        return True

    async def erase(self, owner: Owner, counters: Sequence[str]) -> Erased:
        now = self._keyspace.clock()
        entries = self._keyspace.entries
        conversations = replies = in_flight = retry_records = adapter_states = 0
        for key, (_, conversation) in self._owned(owner, now).items():
            turns = conversation[4]
            for message_id, value in zip(turns[::2], turns[1::2], strict=True):
                if isinstance(value, bytes):
                    replies += 1
                elif value > now:
                    in_flight += 1
                first_key = keys.first_message_key(owner.brand_id, owner.digest, message_id)
                first = entries.get(first_key)
                if type(first) is tuple and len(first) == len(_FORGOTTEN_FIRST):
                    retry_records += first[0] > now
                    entries[first_key] = _FORGOTTEN_FIRST
            context_id = keys.context_of(owner.brand_id, key)
            for name in self._adapter_names:
                state_key = keys.adapter_key(owner.brand_id, context_id, name)
                adapter_states += await self._adapter_state.get(state_key) is not None
                await self._adapter_state.delete(state_key)
            entries[key] = (now + self._cache.pending_ttl, ERASED, True, True, (), None)
            conversations += 1
        if owner.digest_bytes in entries:
            entries[owner.digest_bytes] = _FORGOTTEN_INDEX
        now_micros = int(now * US)
        counted = 0
        for counter in counters:
            tat = entries.get(counter)
            if type(tat) is int:
                counted += tat > now_micros
                entries[counter] = 0  # a tat in the past: an idle counter, which the sweep removes
        return Erased(conversations, replies, in_flight, retry_records, adapter_states, counted)
