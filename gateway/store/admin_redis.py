"""Listing, closing and erasing an owner's conversations on Redis, over the store's own connection.

Each is a Lua script (``gateway/store/lua/admin_*.lua``), so it is one atomic step against every
replica's turns: the listing (one script for the owner, which counts turns inside Redis, so no
reply crosses the wire), a close, and an erasure (one script per conversation, all sent at once
with the deletions of the adapters' state and the person's §6 counters: one round trip whatever
their number). Every script's keys
are its owner's (under their hash tag in the tagged layout): one slot per script. Key layouts
are :mod:`gateway.store.redis`'s; the scripts reach the first-message records of a conversation's
messages by their key prefix, as :mod:`gateway.store.oauth_redis` does for keys it learns only as
it runs: in the tagged layout that prefix carries the owner's tag, so those keys are in the
script's slot too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from gateway.config import CacheConfig
from gateway.store import keys, lua
from gateway.store.admin import ConversationAdmin, ConversationInfo, Erased
from gateway.store.base import Owner
from gateway.store.redis import INDEX_SLACK_MS, RedisStore
from gateway.store.redis_pipe import Script

__all__ = ["RedisConversationAdmin"]

# Each script is a file of gateway/store/lua (its header: what it takes, returns and why it is one
# script), read once, here.
_LIST = Script(lua.source("admin_list.lua"))
_CLOSE = Script(lua.source("admin_close.lua"))
_ERASE = Script(lua.source("admin_erase.lua"))


class RedisConversationAdmin(ConversationAdmin):
    """The operator's side of a :class:`~gateway.store.redis.RedisStore`, on its connection and clock.

    ``adapter_names`` are the names bot adapters keep per-conversation state under
    (:func:`gateway.store.keys.adapter_key`). Those keys carry no owner tag (an adapter knows the
    conversation, not its owner), so no script touches them: an erasure deletes them with their own
    commands, sent in the same write as the conversations' scripts. Nothing is lost by that: a turn
    running during an erasure may put its adapter state back after either way, and it expires with
    ``conversation_ttl``.
    """

    def __init__(
        self,
        store: RedisStore,
        cache: CacheConfig,
        adapter_names: Sequence[str],
    ) -> None:
        self._store = store
        self._redis = store.redis
        self._cache = cache
        self._adapter_names = tuple(adapter_names)
        self._clock = store.clock

    def _layouts(self, owner: Owner, context_id: str) -> list[str | bytes]:
        """A conversation's key and its owner's index in each layout the store reads ("" if not)."""
        where = self._store.layouts(owner)
        brand, raw = owner.brand_id, owner.digest_bytes
        other = where.other
        return [
            keys.conv_key(brand, context_id, where.tag),
            keys.conv_index_key(brand, raw, where.tag),
            "" if other is None else keys.conv_key(brand, context_id, other),
            b"" if other is None else keys.conv_index_key(brand, raw, other),
            keys.conversation_key(brand, context_id) if where.older else "",
            keys.owner_index_key(brand, owner.digest) if where.older else "",
        ]

    async def _listed(self, owner: Owner) -> list[Any]:
        now_ms = int(self._clock() * 1000)
        where = self._store.layouts(owner)
        brand = owner.brand_id
        found: list[Any] = await self._redis.run(
            _LIST,
            self._layouts(owner, "")[1::2],
            [
                owner.digest_bytes,
                owner.digest,
                keys.conv_key(brand, "", where.tag),
                "" if where.other is None else keys.conv_key(brand, "", where.other),
                keys.conversation_key(brand, "") if where.older else "",
                now_ms,
                self._cache.conversation_ttl * 1000,
                now_ms - INDEX_SLACK_MS,
            ],
        )
        return found

    async def conversations(self, owner: Owner) -> list[ConversationInfo]:
        found = [
            ConversationInfo(
                context_id=context.decode(),
                opened_at=int(opened) / 1000 if opened else None,
                turns=int(replies),
                in_flight=int(running),
                closed=bool(closed),
            )
            for context, opened, closed, replies, running in await self._listed(owner)
        ]
        return sorted(found, key=lambda info: (info.opened_at or 0.0, info.context_id))

    async def close(self, owner: Owner, context_id: str) -> bool:
        closed = await self._redis.run(
            _CLOSE,
            self._layouts(owner, context_id),
            [owner.digest_bytes, owner.digest, context_id, int(self._clock() * 1000), self._cache.closed_ttl],
            replicated=True,
        )
        return bool(closed)

    async def erase(self, owner: Owner, counters: Sequence[str]) -> Erased:
        now_ms = int(self._clock() * 1000)
        indexes = [index for index in self._layouts(owner, "")[1::2] if index]
        listed: list[list[bytes]] = await asyncio.gather(
            *(self._redis.execute("ZRANGE", index, 0, -1) for index in indexes)
        )
        members = sorted({member.decode() for found in listed for member in found})
        # Sent together, so the pipe writes them as one batch: one round trip for all of them. One
        # command per key: a cluster routes each to its own slot.
        answers: list[Any] = await asyncio.gather(
            *(self._erase_one(owner, member, now_ms) for member in members),
            *(
                self._redis.execute("DEL", keys.adapter_key(owner.brand_id, member, name), replicated=True)
                for member in members
                for name in self._adapter_names
            ),
            *(self._redis.execute("DEL", counter, replicated=True) for counter in counters),
        )
        results: list[list[Any]] = answers[: len(members)]
        states: list[int] = answers[len(members) :]
        erased = [result for result in results if result]
        adapter_states = len(members) * len(self._adapter_names)
        return Erased(
            conversations=len(erased),
            replies=sum(int(result[0]) for result in erased),
            in_flight=sum(int(result[1]) for result in erased),
            retry_records=sum(int(result[2]) for result in erased),
            adapter_states=sum(states[:adapter_states]),
            counters=sum(states[adapter_states:]),
        )

    async def _erase_one(self, owner: Owner, context_id: str, now_ms: int) -> list[Any]:
        where = self._store.layouts(owner)
        brand, raw = owner.brand_id, owner.digest_bytes
        result: list[Any] = await self._redis.run(
            _ERASE,
            self._layouts(owner, context_id),
            [
                raw,
                owner.digest,
                context_id,
                keys.first_key(brand, raw, b"", where.tag),
                b"" if where.other is None else keys.first_key(brand, raw, b"", where.other),
                keys.first_message_key(brand, owner.digest, "") if where.older else "",
                self._cache.pending_ttl,
                now_ms,
            ],
            replicated=True,
        )
        return result
