"""The in-memory backend: one process, entries in aiocache's ``SimpleMemoryCache``, no timers.

Every entry carries its own deadline, so expiry costs no per-key timer (aiocache's TTLs are an
``asyncio`` ``TimerHandle`` per key, created and cancelled on every write, about 700 bytes and
two timer operations per turn). A read treats an entry past its deadline as absent (a write
reuses it in place); a sweep task (:meth:`MemoryKeyspace.start`, started and stopped with the
app) deletes such entries a bounded batch per tick, so memory stays bounded without the read
path doing any of it. Only the sweep deletes keys.

The entries:

* a conversation (:class:`_Conversation`): owner digest (16 raw bytes), ``expires``, flags,
  and its turns as one flat tuple ``(messageId, reply bytes | in-flight deadline, …)``;
* a first-message record (:class:`_FirstMessage`, §4.3): the conversation's key (the very
  string object the conversation is stored under, so it costs nothing), the text digest and
  ``expires``;
* a §6 GCRA counter: its ``tat`` as an ``int`` in microseconds, which is also its deadline
  (a ``tat`` in the past is an idle key, see :mod:`gateway.store.gcra`).

The hot path reads and writes the backend's dictionary directly rather than through
aiocache's awaitable API: each of those calls goes through four decorator layers (about 4 µs a
call with aiocache 0.12.3, 10 µs for a write with a TTL, against 0.05 µs for a dictionary read),
and with no TTLs the dictionary *is* the backend's whole state, so nothing aiocache keeps is
bypassed (``tests/store/test_memory_sweep.py`` pins that aiocache's own API sees the entries).
It also makes every decision plainly atomic: :meth:`MemoryStore.begin_turn` reads, decides and
writes with no ``await`` at all, so any number of concurrent duplicates see the in-flight
marker the first one set, and a rate-limit charge is all or nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias

from aiocache import SimpleMemoryCache

from gateway.config import CacheConfig
from gateway.store import keys
from gateway.store.base import ConversationStore, Owner, TurnClaim, TurnStatus, text_digest
from gateway.store.gcra import US, Hit, gcra

__all__ = ["MemoryKeyspace", "MemoryStore"]


class _Conversation:
    """A conversation record (§4.2); ``expires`` in clock seconds decides both CLOSED and absence."""

    __slots__ = ("answered", "closed", "expires", "owner", "turns")

    def __init__(self, owner: bytes, expires: float, turns: tuple[str | bytes | float, ...]) -> None:
        self.owner = owner
        self.expires = expires
        self.answered = False
        self.closed = False
        self.turns = turns

    def turn(self, message_id: str) -> bytes | float | None:
        """The reply bytes, the in-flight deadline, or ``None`` for a turn not seen."""
        turns = self.turns
        try:
            index = turns[::2].index(message_id)
        except ValueError:
            return None
        value = turns[2 * index + 1]
        return None if isinstance(value, str) else value

    def set_turn(self, message_id: str, value: bytes | float) -> None:
        # A flat tuple, not a dict: 56 bytes for a one-turn conversation instead of 184, and
        # conversations are a handful of turns, so the linear scan is a few C comparisons.
        turns = self.turns
        try:
            index = 2 * turns[::2].index(message_id)
        except ValueError:
            self.turns = (*turns, message_id, value)
        else:
            self.turns = (*turns[: index + 1], value, *turns[index + 2 :])

    def drop_turn(self, message_id: str) -> None:
        index = 2 * self.turns[::2].index(message_id)
        self.turns = self.turns[:index] + self.turns[index + 2 :]


class _FirstMessage:
    """§4.3: a first message recently opened ``conversation_key``, recognised by its text digest."""

    __slots__ = ("conversation_key", "digest", "expires")

    def __init__(self, conversation_key: str, digest: bytes, expires: float) -> None:
        self.conversation_key = conversation_key
        self.digest = digest
        self.expires = expires


_Entry: TypeAlias = "_Conversation | _FirstMessage | int"


def _expired(entry: _Entry, now: float, now_micros: int) -> bool:
    if isinstance(entry, int):
        return entry <= now_micros  # a GCRA tat: idle once now has passed it
    return entry.expires <= now


class MemoryKeyspace:
    """The memory backend's one container: a ``SimpleMemoryCache`` without TTLs, and its sweep.

    Shared by the conversation store and the rate limiter beside it (one clock, one sweep).
    Every key is also queued once in a ring (a ``deque`` of the very key objects, about 8.5
    bytes a key) when :meth:`put` creates it. A sweep tick, every ``sweep_interval`` seconds,
    takes a batch off the ring's front, deletes the expired keys and queues the others again
    at the back: at least ``SWEEP_MIN_BATCH`` keys, and enough that a whole pass takes at most
    ``SWEEP_PASS_TICKS`` ticks (a minute with the default interval), so an expired entry
    lingers about a minute at most whatever the size. Nothing in a tick is proportional to the
    store's size beyond its batch: a snapshot of the key list instead would stall the loop for
    7 ms per pass at 200,000 keys on the development machine.
    """

    SWEEP_MIN_BATCH: Final = 256
    SWEEP_PASS_TICKS: Final = 240

    def __init__(self, clock: Callable[[], float], *, sweep_interval: float = 0.25) -> None:
        self.clock = clock
        self.cache = SimpleMemoryCache(timeout=None)
        """The container; its awaitable API sees every entry (timeout=None: no asyncio.wait_for)."""
        self._sweep_interval = sweep_interval
        self._ring: deque[str] = deque()
        self._task: asyncio.Task[None] | None = None

    @property
    def entries(self) -> dict[str, Any]:
        """The backend's own dictionary (aiocache 0.12's ``SimpleMemoryBackend._cache``).

        Read as an attribute each time, never kept: aiocache's ``clear()`` replaces it.
        """
        entries: dict[str, Any] = self.cache._cache
        return entries

    def put(self, key: str, value: _Entry) -> None:
        """Store ``value`` under ``key``; a new key joins the sweep's ring (an expired one is reused)."""
        entries = self.entries
        if key not in entries:
            self._ring.append(key)
        entries[key] = value

    def charge(self, hits: Sequence[Hit], now_micros: int) -> list[int]:
        """GCRA over ``hits`` at ``now_micros``, all or nothing: the waits in µs, all 0 when charged."""
        entries = self.entries
        # One step per hit straight from the entry it reads, with no lists of tats built only to
        # be zipped back together: this runs on every turn (2.2 -> 1.5 µs for two limits, timeit).
        steps = [
            gcra(tat if isinstance(tat := entries.get(hit.key), int) else None, now_micros, hit.rule)
            for hit in hits
        ]
        waits = [wait for _, wait in steps]
        if not any(waits):
            for hit, (tat, _) in zip(hits, steps, strict=True):
                self.put(hit.key, tat)
        return waits

    def sweep(self) -> int:
        """One tick of the sweep: look at the ring's next batch, delete the expired; how many went."""
        entries, ring = self.entries, self._ring
        batch = min(len(ring), max(self.SWEEP_MIN_BATCH, math.ceil(len(ring) / self.SWEEP_PASS_TICKS)))
        now = self.clock()
        now_micros = int(now * US)
        deleted = 0
        for _ in range(batch):
            key = ring.popleft()
            entry = entries.get(key)
            if entry is None:
                continue  # only aiocache's own API could have deleted it: nothing left to track
            if _expired(entry, now, now_micros):
                del entries[key]
                deleted += 1
            else:
                ring.append(key)
        return deleted

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            self.sweep()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._sweep_forever(), name="pact-store-sweep"
            )

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.cache.close()


class MemoryStore(ConversationStore):
    def __init__(
        self, config: CacheConfig, *, clock: Callable[[], float] = time.time, sweep_interval: float = 0.25
    ) -> None:
        self._config = config
        self._clock = clock
        self.keyspace = MemoryKeyspace(clock, sweep_interval=sweep_interval)
        """Where conversations live; the rate limiter beside this store keeps its counters here too."""

    @property
    def _record_ttl(self) -> int:
        # An idle conversation is remembered past its idle TTL so it answers CLOSED, not unknown (§4.2).
        return self._config.conversation_ttl + self._config.closed_ttl

    def _conversation(self, key: str, now: float) -> _Conversation | None:
        entry = self.keyspace.entries.get(key)
        return entry if isinstance(entry, _Conversation) and entry.expires > now else None

    def _open(self, key: str, context_id: str, owner: Owner, message_id: str, now: float) -> TurnClaim:
        turns = (message_id, now + self._config.pending_ttl)
        self.keyspace.put(key, _Conversation(owner.digest_bytes, now + self._record_ttl, turns))
        return TurnClaim(TurnStatus.NEW, context_id, new_conversation=True)

    def _decide(
        self, conversation: _Conversation | None, owner: Owner, context_id: str, message_id: str, now: float
    ) -> TurnClaim:
        if conversation is None or conversation.owner != owner.digest_bytes:
            return TurnClaim(TurnStatus.UNKNOWN_CONTEXT)
        turn = conversation.turn(message_id)
        if isinstance(turn, bytes):
            return TurnClaim(TurnStatus.REPLAY, context_id, reply=turn)
        # An open record expires closed_ttl after its idle TTL ran out: past that point it is CLOSED.
        if conversation.closed or now > conversation.expires - self._config.closed_ttl:
            return TurnClaim(TurnStatus.CLOSED, context_id)
        if turn is not None and turn > now:
            return TurnClaim(TurnStatus.IN_FLIGHT, context_id)
        conversation.set_turn(message_id, now + self._config.pending_ttl)
        return TurnClaim(TurnStatus.NEW, context_id, new_conversation=not conversation.answered)

    async def begin_turn(
        self,
        owner: Owner,
        context_id: str | None,
        message_id: str,
        text: str,
        new_context_id: str,
        *,
        limits: Sequence[Hit] = (),
    ) -> TurnClaim:
        now = self._clock()
        if limits:
            waits = self.keyspace.charge(limits, int(now * US))
            if any(waits):
                return TurnClaim(TurnStatus.RATE_LIMITED, waits=tuple(wait / US for wait in waits))
        if context_id is not None:
            conversation = self._conversation(keys.conversation_key(owner.brand_id, context_id), now)
            return self._decide(conversation, owner, context_id, message_id, now)
        entries = self.keyspace.entries
        first_key = keys.first_message_key(owner.brand_id, owner.digest, message_id)
        digest = text_digest(text)
        earlier = entries.get(first_key)
        new_key = keys.conversation_key(owner.brand_id, new_context_id)
        if not isinstance(earlier, _FirstMessage) or earlier.expires <= now:
            self.keyspace.put(first_key, _FirstMessage(new_key, digest, now + self._config.retry_window))
            return self._open(new_key, new_context_id, owner, message_id, now)
        if earlier.digest != digest:
            # A different first message reusing a messageId opens its own conversation.
            return self._open(new_key, new_context_id, owner, message_id, now)
        earlier_context = keys.context_of(owner.brand_id, earlier.conversation_key)
        conversation = self._conversation(earlier.conversation_key, now)
        claim = self._decide(conversation, owner, earlier_context, message_id, now)
        if claim.status is TurnStatus.UNKNOWN_CONTEXT:
            return self._open(new_key, new_context_id, owner, message_id, now)
        return claim

    async def complete_turn(
        self, owner: Owner, context_id: str, message_id: str, reply: bytes, *, close: bool
    ) -> None:
        key = keys.conversation_key(owner.brand_id, context_id)
        now = self._clock()
        conversation = self._conversation(key, now)
        if conversation is None:
            conversation = _Conversation(owner.digest_bytes, now, ())
            self.keyspace.put(key, conversation)
        conversation.set_turn(message_id, reply)
        conversation.answered = True
        conversation.closed = conversation.closed or close
        conversation.expires = now + (self._config.closed_ttl if close else self._record_ttl)

    async def abort_turn(
        self, owner: Owner, context_id: str, message_id: str, *, new_conversation: bool
    ) -> None:
        key = keys.conversation_key(owner.brand_id, context_id)
        now = self._clock()
        conversation = self._conversation(key, now)
        if conversation is None or conversation.owner != owner.digest_bytes:
            return
        if new_conversation:
            # Expired in place (only the sweep deletes keys): from now on both read as absent.
            conversation.expires = -math.inf
            first_key = keys.first_message_key(owner.brand_id, owner.digest, message_id)
            earlier = self.keyspace.entries.get(first_key)
            if isinstance(earlier, _FirstMessage) and earlier.conversation_key == key:
                earlier.expires = -math.inf
        elif isinstance(conversation.turn(message_id), float):
            conversation.drop_turn(message_id)

    async def start(self) -> None:
        """The expiry sweep over conversations, first-message records and rate-limit counters."""
        self.keyspace.start()

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        await self.keyspace.close()
