"""The in-memory backend: aiocache's ``SimpleMemoryCache`` in one process.

Each conversation is one small object holding its owner digest, state and turns. Every
decision in :meth:`MemoryStore.begin_turn` reads and mutates that object with no ``await``
in between that could suspend (aiocache's memory backend never yields when its operation
timeout is off), which is what makes the in-flight marker atomic here: any number of
concurrent duplicates see the marker the first one set.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aiocache import SimpleMemoryCache

from gateway.config import CacheConfig
from gateway.store import keys
from gateway.store.base import ConversationStore, Owner, TurnClaim, TurnStatus, text_digest


class _Conversation:
    """A conversation record; ``turns`` maps a turn field to its reply bytes or in-flight deadline."""

    __slots__ = ("answered", "closed", "last", "owner", "turns")

    def __init__(self, owner: str, last: float) -> None:
        self.owner = owner
        self.answered = False
        self.closed = False
        self.last = last
        self.turns: dict[str, bytes | float] = {}


class MemoryStore(ConversationStore):
    def __init__(self, config: CacheConfig, *, clock: Callable[[], float] = time.time) -> None:
        self._config = config
        self._clock = clock
        # timeout=None: no asyncio.wait_for task per call, and no suspension inside a decision.
        self._cache = SimpleMemoryCache(timeout=None)

    @property
    def _record_ttl(self) -> int:
        # An idle conversation is remembered past its idle TTL so it answers CLOSED, not unknown (§4.2).
        return self._config.conversation_ttl + self._config.closed_ttl

    async def _open(self, owner: Owner, context_id: str, field: str, now: float) -> TurnClaim:
        conversation = _Conversation(owner.digest, now)
        conversation.turns[field] = now + self._config.pending_ttl
        await self._cache.set(
            keys.conversation_key(owner.brand_id, context_id), conversation, ttl=self._record_ttl
        )
        return TurnClaim(TurnStatus.NEW, context_id, new_conversation=True)

    def _decide(
        self, conversation: _Conversation | None, owner: Owner, context_id: str, field: str, now: float
    ) -> TurnClaim:
        if conversation is None or conversation.owner != owner.digest:
            return TurnClaim(TurnStatus.UNKNOWN_CONTEXT)
        turn = conversation.turns.get(field)
        if isinstance(turn, bytes):
            return TurnClaim(TurnStatus.REPLAY, context_id, reply=turn)
        if conversation.closed or now - conversation.last > self._config.conversation_ttl:
            return TurnClaim(TurnStatus.CLOSED, context_id)
        if turn is not None and turn > now:
            return TurnClaim(TurnStatus.IN_FLIGHT, context_id)
        conversation.turns[field] = now + self._config.pending_ttl
        return TurnClaim(TurnStatus.NEW, context_id, new_conversation=not conversation.answered)

    async def begin_turn(
        self, owner: Owner, context_id: str | None, message_id: str, text: str, new_context_id: str
    ) -> TurnClaim:
        now = self._clock()
        field = keys.turn_field(message_id)
        if context_id is not None:
            conversation = await self._cache.get(keys.conversation_key(owner.brand_id, context_id))
            return self._decide(conversation, owner, context_id, field, now)
        first_key = keys.first_message_key(owner.brand_id, owner.digest, message_id)
        digest = text_digest(text)
        earlier = await self._cache.get(first_key)
        if earlier is None:
            await self._cache.set(first_key, (new_context_id, digest), ttl=self._config.retry_window)
            return await self._open(owner, new_context_id, field, now)
        earlier_context, earlier_digest = earlier
        if earlier_digest != digest:
            return await self._open(owner, new_context_id, field, now)
        conversation = await self._cache.get(keys.conversation_key(owner.brand_id, earlier_context))
        claim = self._decide(conversation, owner, earlier_context, field, now)
        if claim.status is TurnStatus.UNKNOWN_CONTEXT:
            return await self._open(owner, new_context_id, field, now)
        return claim

    async def complete_turn(
        self, owner: Owner, context_id: str, message_id: str, reply: bytes, *, close: bool
    ) -> None:
        key = keys.conversation_key(owner.brand_id, context_id)
        conversation: _Conversation | None = await self._cache.get(key)
        if conversation is None:
            conversation = _Conversation(owner.digest, self._clock())
            await self._cache.set(key, conversation)
        conversation.turns[keys.turn_field(message_id)] = reply
        conversation.last = self._clock()
        conversation.answered = True
        conversation.closed = conversation.closed or close
        await self._cache.expire(key, self._config.closed_ttl if close else self._record_ttl)

    async def abort_turn(
        self, owner: Owner, context_id: str, message_id: str, *, new_conversation: bool
    ) -> None:
        key = keys.conversation_key(owner.brand_id, context_id)
        conversation: _Conversation | None = await self._cache.get(key)
        if conversation is None or conversation.owner != owner.digest:
            return
        field = keys.turn_field(message_id)
        if new_conversation:
            await self._cache.delete(key)
            first_key = keys.first_message_key(owner.brand_id, owner.digest, message_id)
            earlier = await self._cache.get(first_key)
            if earlier is not None and earlier[0] == context_id:
                await self._cache.delete(first_key)
        elif isinstance(conversation.turns.get(field), float):
            del conversation.turns[field]

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        await self._cache.close()
