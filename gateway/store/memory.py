"""The in-memory backend: one process, entries in aiocache's ``SimpleMemoryCache``, no timers.

Every entry carries its own deadline, so expiry costs no per-key timer (aiocache's TTLs are an
``asyncio`` ``TimerHandle`` per key, created and cancelled on every write, about 700 bytes and
two timer operations per turn). A read treats an entry past its deadline as absent (a write
reuses it in place); a sweep task (:meth:`MemoryKeyspace.start`, started and stopped with the
app) deletes such entries a bounded batch per tick, so memory stays bounded without the read
path doing any of it. Only the sweep deletes keys, and the bound (:meth:`MemoryKeyspace.make_room`),
each a key it has just taken off the sweep's ring, so every key stays in the ring once.

The entries:

* a conversation (:data:`_Conversation`): ``expires``, owner digest (16 raw bytes), flags,
  its turns as one flat tuple ``(messageId, reply bytes | in-flight deadline, …)`` and the
  Brand user it runs as (§5.5, 16 raw bytes, ``None`` until its first delegated turn);
* a first-message record (:data:`_FirstMessage`, §4.3): ``expires``, the conversation's key
  (the very string object the conversation is stored under, so it costs nothing) and the
  text digest;
* an owner's index (:data:`OwnerIndex`): the keys of the conversations one owner opened, so
  gateway/store/admin_memory.py can list and erase them. Written when a conversation opens,
  and never by a turn: its deadline is only the sweep's cue to look again, and the sweep
  keeps it, dead conversations dropped, while one of them lives (readers never go by it).
  Its key is the owner digest (raw bytes) the conversations already hold, not a string of its
  own (no other key is bytes): with a deadline shared with a conversation's, the index of an
  owner with one conversation costs about 150 bytes, not 320 (``python -m bench memory``).
  A flat tuple while the owner has a few conversations; past :data:`_INDEX_TUPLE_MAX`, a dict
  that grows in place, so a new conversation costs the same at a person's 100,000th as at
  their first (issue 17: rebuilding the tuple cost 4.3 ms at 100,000);
* a §6 GCRA counter: its ``tat`` as an ``int`` in microseconds, which is also its deadline
  (a ``tat`` in the past is an idle key, see :mod:`gateway.store.gcra`);
* the §5 flow's records (:mod:`gateway.store.oauth_memory`), each a tuple led by its deadline;
  of those, this module reads only a grant (:data:`GrantRecord`), in the begin-turn step.

The hot path reads and writes the backend's dictionary directly rather than through
aiocache's awaitable API: each of those calls goes through four decorator layers (about 4 µs a
call with aiocache 0.12.3, 10 µs for a write with a TTL, against 0.05 µs for a dictionary read),
and with no TTLs the dictionary *is* the backend's whole state, so nothing aiocache keeps is
bypassed (``tests/store/test_memory_sweep.py`` pins that aiocache's own API sees the entries).
It also makes every decision plainly atomic: :meth:`MemoryStore.begin_turn` reads, decides and
writes with no ``await`` at all, so any number of concurrent duplicates see the in-flight
marker the first one set, and a rate-limit charge is all or nothing.

With ``cache.max_entries`` the keyspace is bounded and behaves like a cache (issue 29,
:meth:`MemoryKeyspace.make_room`): a new conversation makes room by dropping expired entries,
then conversations closed or idle whose last turn is older than the retry window, closed first,
then the least recently used of those it looks at; it is refused (``STORE_FULL``) only when
nothing may go, and never drops a stored reply a retry may still ask for or a running turn. One
person holds at most ``cache.person_share`` of the bound (:attr:`MemoryStore.person_limit`): past
it their own least recently used conversation makes room, never anyone else's. The memory store
is not durable: a restart forgets it all.

Records are exact tuples of plain values (bytes, str, float, bool, and a tuple of those), and a
change stores a new tuple. CPython's cyclic collector stops tracking such a tuple within the
first two collections it survives (the inner turns tuple, then the record), so stored records
never reach the generation full collections walk. As slotted objects they stayed tracked, and
each full collection walked all of them: at 100,000 conversations, 240,000 tracked objects and a
46 ms pause, against 40,000 and 10 ms now. The dictionary that holds them is never untracked
(:class:`_Entries`), so it stays frozen with the app, and the sweep collects the young records
every :attr:`MemoryKeyspace.YOUNG_COLLECT_WRITES` writes (:meth:`MemoryKeyspace.collect_young`):
no collection walks the store, and none walks more than a few thousand new records
(``python -m bench memory --at-bound``, docs/capacity.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Final, Protocol, TypeAlias, TypeGuard

from aiocache import SimpleMemoryCache

from gateway.config import CacheConfig
from gateway.store import keys
from gateway.store.base import ConversationStore, GrantCheck, Owner, TurnClaim, TurnStatus, text_digest
from gateway.store.gcra import US, Hit, gcra
from gateway.store.oauth import Grant, RefreshFamily

log = logging.getLogger("pact_gateway.store")

__all__ = [
    "ERASED",
    "GrantRecord",
    "KeyspaceObserver",
    "MemoryKeyspace",
    "MemoryStore",
    "OwnerIndex",
    "index_conversations",
    "live_conversation",
    "live_grant",
]


_Conversation: TypeAlias = tuple[float, bytes, bool, bool, tuple[Any, ...], bytes | None]
"""``(expires, owner digest, answered, closed, turns, user digest)``; ``expires`` (seconds) decides
CLOSED and absence."""
_FirstMessage: TypeAlias = tuple[float, str, bytes]
"""§4.3 ``(expires, conversation key, text digest)``: a first message recently opened that conversation."""
GrantRecord: TypeAlias = tuple[float, Grant, RefreshFamily]
"""§5.4 ``(expires, grant, its refresh family)`` at :func:`keys.grant_key`; revoked is expired
in place. Kept by :class:`gateway.store.oauth_memory.MemoryOAuthStore`, read by every delegated turn."""
OwnerIndex: TypeAlias = tuple[Any, ...]
"""At :attr:`Owner.digest_bytes`: ``(deadline, conversations kept at the last prune, conversation key,
opened, conversation key, opened, …)``, flat (one tuple, not two), for up to :data:`_INDEX_TUPLE_MAX`
conversations; past them ``(deadline, conversations kept at the last prune, {conversation key:
opened})``, the dict changed in place. The deadline is when the sweep looks at it again
(:func:`_renewed_index`), not when it ends."""
Key: TypeAlias = str | bytes
"""A key of the keyspace: a string, or an owner digest for an owner's index."""
ERASED: Final = b""
"""The owner digest of an erased conversation's tombstone: no owner's matches it, so its ``contextId``
answers as unknown, and a turn that was running when it was erased stores nothing."""
_INDEX_TUPLE_MAX: Final = 8
"""Conversations an owner's index holds as a flat tuple (rebuilt, at most 16 items, for each new one).
Past them it becomes a dict: a person with one conversation, the common case, pays 150 bytes, not a
dict's 400, and a person with thousands pays O(1) per new one, not a copy of them all."""
_OPEN_ENTRIES: Final = 3
"""Entries a new conversation may add: its record, its first-message record, its owner's index."""
_TURN_ENTRIES: Final = 2
"""Entries a person's new conversation adds once they have an index: its record, its first-message record."""
_Entry: TypeAlias = "tuple[Any, ...] | int"
"""A GCRA ``tat``, or a tuple whose first element is its deadline in seconds (what the sweep reads)."""
_RINGED: Final = object()
"""What a key that is no ghost pops as (:meth:`MemoryKeyspace.put`)."""
_EXPIRES: Final = 0
_OWNER: Final = 1
_CLOSED: Final = 3
_TURNS: Final = 4
_USER: Final = 5


def _is_conversation(entry: object) -> TypeGuard[_Conversation]:
    return type(entry) is tuple and len(entry) == 6


def _is_first_message(entry: object) -> TypeGuard[_FirstMessage]:
    return type(entry) is tuple and len(entry) == 3


def live_conversation(entry: object, now: float) -> _Conversation | None:
    """``entry`` if it is a conversation record (or an erased one's tombstone) still live at ``now``."""
    return entry if _is_conversation(entry) and entry[_EXPIRES] > now else None


def index_conversations(index: OwnerIndex) -> Iterator[tuple[str, float]]:
    """``(conversation key, opened)`` of each conversation an owner's index names, live or not."""
    if len(index) == 3 and type(index[2]) is dict:
        return iter(index[2].items())
    return zip(index[2::2], index[3::2], strict=True)


def _theirs(entries: dict[Key, Any], digest: bytes, key: str, now: float) -> bool:
    conversation = live_conversation(entries.get(key), now)
    return conversation is not None and conversation[_OWNER] == digest


def _live_pairs(entries: dict[Key, Any], digest: bytes, pairs: Sequence[Any], now: float) -> list[Any]:
    """The ``(conversation key, opened)`` pairs of an owner's index whose conversation is live and theirs."""
    live: list[Any] = []
    for key, opened in zip(pairs[::2], pairs[1::2], strict=True):
        if _theirs(entries, digest, key, now):
            live += (key, opened)
    return live


def _prune(entries: dict[Key, Any], digest: bytes, conversations: dict[str, float], now: float) -> None:
    """Drop, in place, the conversations of a large owner's index that are gone or not theirs."""
    for key in [key for key in conversations if not _theirs(entries, digest, key, now)]:
        del conversations[key]


def _renewed_index(
    entries: dict[Key, Any], digest: bytes, index: OwnerIndex, now: float
) -> OwnerIndex | None:
    """An owner's index past its deadline: its live conversations, until the last of them expires;
    ``None`` once none lives (then the sweep deletes it)."""
    if len(index) == 3 and type(index[2]) is dict:
        conversations: dict[str, float] = index[2]
        _prune(entries, digest, conversations, now)
        if not conversations:
            return None
        return (max(entries[key][_EXPIRES] for key in conversations), len(conversations), conversations)
    pairs = _live_pairs(entries, digest, index[2:], now)
    if not pairs:
        return None
    # The latest conversation's own deadline, the very float object: the index adds none.
    deadline = max(entries[key][_EXPIRES] for key in pairs[::2])
    return (deadline, len(pairs) // 2, *pairs)


def live_grant(entry: object, now: float) -> GrantRecord | None:
    """``entry`` if it is a grant record still live at ``now``."""
    if type(entry) is tuple and len(entry) == 3 and type(entry[1]) is Grant and entry[_EXPIRES] > now:
        record: GrantRecord = entry
        return record
    return None


def _value_index(turns: tuple[Any, ...], message_id: str) -> int:
    """Where ``message_id``'s value sits in ``turns``, or -1 for a turn not seen.

    A membership test before ``index``: most lookups are for a messageId not seen yet, and
    raising and catching ``index``'s ValueError costs more than scanning twice (conversations
    are a handful of turns, so a scan is a few C comparisons).
    """
    ids = turns[::2]
    return 2 * ids.index(message_id) + 1 if message_id in ids else -1


def _turn(turns: tuple[Any, ...], message_id: str) -> bytes | float | None:
    """The reply bytes, the in-flight deadline, or ``None`` for a turn not seen."""
    index = _value_index(turns, message_id)
    if index < 0:
        return None
    value: bytes | float = turns[index]
    return value


def _with_turn(turns: tuple[Any, ...], message_id: str, value: bytes | float) -> tuple[Any, ...]:
    # A flat tuple, not a dict: 56 bytes for a one-turn conversation instead of 184.
    index = _value_index(turns, message_id)
    if index < 0:
        return (*turns, message_id, value)
    return (*turns[:index], value, *turns[index + 1 :])


def _without_turn(turns: tuple[Any, ...], message_id: str) -> tuple[Any, ...]:
    index = _value_index(turns, message_id)
    return turns[: index - 1] + turns[index + 1 :]


class KeyspaceObserver(Protocol):
    """What the keyspace reports for its metrics (:class:`gateway.ops.metrics.Metrics` is one)."""

    def store_size(self, entries: int, max_entries: int) -> None:
        """Each sweep tick: the entries held, and ``cache.max_entries``."""

    def store_evicted(self, reason: str) -> None:
        """One entry dropped to make room: ``expired``; a conversation ``closed`` or ``idle`` past
        ``retry_window`` (the least recently used of a sample); ``share``, a person's own past their
        ``cache.person_share``."""


class EvictionPolicy(Protocol):
    """Which conversations may go for room (:class:`MemoryStore` is the one policy)."""

    def victim(self, entry: Any, now: float) -> tuple[float, str] | None:
        """``(last used, reason)`` if the live ``entry`` is a conversation that may go, else ``None``."""

    def forget(self, key: Key, entry: Any) -> None:
        """The conversation ``entry`` at ``key`` is about to go: drop what names it (its owner's index)."""


class _Entries(dict[Key, Any]):
    """The keyspace's dictionary: a ``dict`` the cyclic collector never stops tracking.

    CPython untracks an exact ``dict`` whose values are all untracked (every stored record soon is,
    see the module docstring) during a full collection, and tracks it again, in the youngest
    generation, as soon as a new record goes in: the next young collection then walks every entry
    (46.7 ms at 300,000 entries, ``python -m bench memory --at-bound``), and every full one after.
    A subclass is never untracked, so the dictionary stays where ``gc.freeze()`` put it when the
    gateway started (:func:`gateway.process.server.settle_heap`): the permanent generation, which
    no collection walks, whatever the store holds.
    """

    __slots__ = ()


def _expired(entry: _Entry, now: float, now_micros: int) -> bool:
    if isinstance(entry, int):
        return entry <= now_micros  # a GCRA tat: idle once now has passed it
    deadline: float = entry[_EXPIRES]
    return deadline <= now


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

    YOUNG_COLLECT_WRITES: Final = 2_000
    """Conversation records written between two young collections (:meth:`collect_young`)."""
    EVICTION_LOG_EVERY: Final = 60.0
    """Seconds between two summary lines of evictions (one line for all of them, never one each)."""
    SWEEP_MIN_BATCH: Final = 256
    SWEEP_PASS_TICKS: Final = 240
    EVICT_SCAN: Final = 32
    """Keys :meth:`make_room` looks at, at most, for one new conversation: its work is O(1)."""
    MAX_HINTS: Final = 4096
    """Conversations that could go kept for the next new conversations (:attr:`_hints`), at most."""

    def __init__(
        self,
        clock: Callable[[], float],
        *,
        sweep_interval: float = 0.25,
        max_entries: int | None = None,
        observer: KeyspaceObserver | None = None,
        policy: EvictionPolicy | None = None,
    ) -> None:
        self.clock = clock
        self._policy = policy
        """Which conversations the sweep may hint at for :meth:`make_room` (``None``: none)."""
        self.cache = SimpleMemoryCache(timeout=None)
        """The container; its awaitable API sees every entry (timeout=None: no asyncio.wait_for)."""
        self.cache._cache = _Entries()
        self.max_entries = max_entries
        """``cache.max_entries``: what :meth:`make_room` keeps the keyspace within (``None``: unbounded)."""
        self._observer = observer
        self._sweep_interval = sweep_interval
        self._ring: deque[Key] = deque()
        self._hints: deque[Key] = deque(maxlen=self.MAX_HINTS)
        """Conversations :meth:`make_room` found that could go and did not need yet, for its next call
        (a key also stays in the ring; a hint is checked again before it is acted on)."""
        self._ghosts: dict[Key, None] = {}
        """Keys dropped for room while still in the ring (:meth:`drop`), until the sweep reaches them."""
        self.writes = 0
        """Conversation records written since :meth:`collect_young` last collected."""
        self._evicted: dict[str, int] = {}
        """Entries dropped for room since the last summary line, by reason."""
        self._evictions_logged = -math.inf
        self._task: asyncio.Task[None] | None = None

    @property
    def entries(self) -> dict[Key, Any]:
        """The backend's own dictionary (aiocache 0.12's ``SimpleMemoryBackend._cache``).

        Read as an attribute each time, never kept: aiocache's ``clear()`` replaces it.
        """
        entries: dict[Key, Any] = self.cache._cache
        return entries

    def put(self, key: Key, value: _Entry) -> None:
        """Store ``value`` under ``key``; a new key joins the sweep's ring (an expired one is reused)."""
        entries = self.entries
        if key not in entries and self._ghosts.pop(key, _RINGED) is _RINGED:
            self._ring.append(key)
        entries[key] = value

    def charge(self, hits: Sequence[Hit], now_micros: int) -> list[int]:
        """GCRA over ``hits`` at ``now_micros``, all or nothing: the waits in µs, all 0 when charged."""
        entries = self.entries
        # One plain loop, no comprehension frames: this runs on every turn (1.5 -> 1.3 µs for two limits).
        tats: list[int] = []
        waits: list[int] = []
        for hit in hits:
            tat = entries.get(hit.key)
            tat, wait = gcra(tat if type(tat) is int else None, now_micros, hit.rule)
            tats.append(tat)
            waits.append(wait)
        if not any(waits):
            for hit, tat in zip(hits, tats, strict=True):
                self.put(hit.key, tat)
        return waits

    def sweep(self) -> int:
        """One tick of the sweep: look at the ring's next batch, delete the expired; how many went."""
        entries, ring = self.entries, self._ring
        batch = min(len(ring), max(self.SWEEP_MIN_BATCH, math.ceil(len(ring) / self.SWEEP_PASS_TICKS)))
        now = self.clock()
        now_micros = int(now * US)
        deleted = 0
        policy, hints = self._policy, self._hints
        # Near the bound, the conversations that could go are noted as the sweep passes them, so
        # a new conversation finds them even where the ring's front is all new keys.
        hinting = self.max_entries is not None and len(entries) * 8 >= self.max_entries * 7
        for _ in range(batch):
            key = ring.popleft()
            entry = entries.get(key)
            if entry is None:
                self._ghosts.pop(key, None)  # dropped for room (or by aiocache's own API): untracked now
                continue
            if _expired(entry, now, now_micros):
                renewed = _renewed_index(entries, key, entry, now) if type(key) is bytes else None
                if renewed is None:
                    del entries[key]
                    deleted += 1
                    continue
                entries[key] = renewed
            elif hinting and type(key) is not bytes and policy is not None and policy.victim(entry, now):
                hints.append(key)
            ring.append(key)
        return deleted

    def fits(self, need: int) -> bool:
        """Whether ``need`` more entries fit within :attr:`max_entries` as things stand."""
        return self.max_entries is None or len(self.entries) + need <= self.max_entries

    def room(self, need: int, now: float) -> bool:
        """Whether ``need`` more entries fit, after making room as a new conversation would (for the
        §5 records, :class:`gateway.store.oauth_memory.MemoryOAuthStore`)."""
        return self.fits(need) or self.make_room(need, now, self._policy)

    def drop(self, key: Key, reason: str, *, ringed: bool = True) -> None:
        """Delete a live ``key`` to make room, counted by ``reason`` (metrics, and the log's summary).

        ``ringed``: the key is still in the sweep's ring (not just taken off it). It is remembered as
        a ghost until the sweep reaches its place, so that a key made again meanwhile takes that
        place instead of joining the ring twice (a ghost is a key and ``None`` in a dict of atoms,
        which the collector does not track).
        """
        del self.entries[key]
        if ringed:
            self._ghosts[key] = None
        self._evicted[reason] = self._evicted.get(reason, 0) + 1
        if self._observer is not None:
            self._observer.store_evicted(reason)

    def make_room(self, need: int, now: float, policy: EvictionPolicy | None) -> bool:
        """Whether ``need`` more entries fit within :attr:`max_entries`, after dropping some if not.

        Looks at the sweep ring's next :attr:`EVICT_SCAN` keys at most (the oldest first) and
        drops those expired; if that is not room enough, the conversations that ``policy`` names
        victims (``None``: none may go), among those keys and the :attr:`EVICT_SCAN` first hints
        (those earlier calls found and did not need), go: closed ones first, then the least
        recently used (a sampled LRU, as Redis's ``allkeys-lru`` samples keys: no ordered
        structure to keep per turn, nothing for the collector to walk). The ones not needed are
        hints for the next call, so a run of new keys in the ring hides none of them. Every live
        key looked at goes back to the ring's end, as the sweep would put it; an owner's index
        goes only with its last conversation (:meth:`EvictionPolicy.forget`; keeping it is what
        lets an erasure find every conversation). At most :attr:`EVICT_SCAN` ring keys and as
        many hints per call whatever the size, so a store held full of what may not go costs
        each refused conversation the same bounded look; the sweep keeps deleting what expires.
        """
        if self.fits(need):
            return True
        entries, ring = self.entries, self._ring
        now_micros = int(now * US)
        candidates: list[tuple[bool, float, Key]] = []
        for _ in range(min(len(ring), self.EVICT_SCAN)):
            key = ring.popleft()
            entry = entries.get(key)
            if entry is None:
                self._ghosts.pop(key, None)
                continue
            if type(key) is not bytes and _expired(entry, now, now_micros):
                self.drop(key, "expired", ringed=False)
                if self.fits(need):
                    return True
                continue
            ring.append(key)
            chosen = None if policy is None or type(key) is bytes else policy.victim(entry, now)
            if chosen is not None:
                candidates.append((chosen[1] != "closed", chosen[0], key))
        if policy is None:
            return False
        hints = self._hints
        for _ in range(min(len(hints), self.EVICT_SCAN)):
            key = hints.popleft()
            entry = entries.get(key)
            chosen = None if entry is None else policy.victim(entry, now)
            if chosen is not None:
                candidates.append((chosen[1] != "closed", chosen[0], key))
        candidates.sort()
        for position, (idle, _, key) in enumerate(candidates):
            if self.fits(need):
                # Kept for the next new conversation, least recently used first: found once, not lost
                # behind the ring's newer keys.
                hints.extendleft(candidate[2] for candidate in reversed(candidates[position:]))
                return True
            entry = entries.get(key)
            if entry is not None:  # (a key both hinted and met in the ring is a candidate twice)
                policy.forget(key, entry)
                self.drop(key, "idle" if idle else "closed")
        return self.fits(need)

    def log_evictions(self, now: float) -> None:
        """One summary line for the evictions since the last, at most every :attr:`EVICTION_LOG_EVERY` s."""
        if not self._evicted or now < self._evictions_logged + self.EVICTION_LOG_EVERY:
            return
        counts = ", ".join(f"{reason} {count}" for reason, count in sorted(self._evicted.items()))
        log.info(
            "memory store at its bound: %d entries dropped for room since the last summary (%s); %d of %s",
            sum(self._evicted.values()),
            counts,
            len(self.entries),
            self.max_entries,
        )
        self._evicted = {}
        self._evictions_logged = now

    def _report(self) -> None:
        self.log_evictions(self.clock())
        if self._observer is not None and self.max_entries is not None:
            self._observer.store_size(len(self.entries), self.max_entries)

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(self._sweep_interval)
            self.sweep()
            self._report()
            self.collect_young()

    def collect_young(self) -> None:
        """A young collection once :attr:`YOUNG_COLLECT_WRITES` records were written since the last one.

        A new record is a tuple, tracked until a collection looks at it (then untracked, never walked
        again). CPython collects the young generation when its allocations outnumber its
        deallocations by the threshold, and counts as deallocations the records a store in its
        steady state drops (expired, or evicted at the bound), old and untracked as they are: so
        the count stays level while the young generation fills with new records, until one
        collection walks them all (77 ms at five times the default bound,
        ``python -m bench memory --at-bound``). Collected every few thousand writes instead, the
        young generation never holds more than those; a young collection walks only it (the
        store's dictionary and ring are frozen, see :class:`_Entries`). Two: the first untracks a
        record's inner turns tuple (the collector meets the record first) and moves the record to
        the middle generation; the second, of the middle generation, untracks the record."""
        if self.writes >= self.YOUNG_COLLECT_WRITES:
            self.writes = 0
            gc.collect(0)
            gc.collect(1)

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
        self,
        config: CacheConfig,
        *,
        clock: Callable[[], float] = time.time,
        sweep_interval: float = 0.25,
        observer: KeyspaceObserver | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self.keyspace = MemoryKeyspace(
            clock,
            sweep_interval=sweep_interval,
            max_entries=config.max_entries,
            observer=observer,
            policy=self,
        )
        """Where conversations live; the rate limiter beside this store keeps its counters here too."""

    def victim(self, entry: Any, now: float) -> tuple[float, str] | None:
        """``(last used, reason)`` if ``entry`` is a conversation that may go to make room, else ``None``.

        Its last turn older than ``retry_window`` and none of its turns running: ``closed`` if it
        now only answers ``CLOSED`` (closed, or idle past ``conversation_ttl``), ``idle`` if it is
        open. Dropped, it answers as unknown (§4.2 ``INVALID_PARAMS``), which a PACT agent meets by
        opening a new conversation; a stored reply a retry may still ask for (§4.3), a running turn
        and an erased one's tombstone (which keeps a running turn from storing its reply) never go.
        """
        if not _is_conversation(entry) or entry[_OWNER] == ERASED:
            return None
        expires, _, _, closed, turns, _ = entry
        closed_ttl = self._config.closed_ttl
        last_turn = expires - (closed_ttl if closed else self._record_ttl)
        if now < last_turn + self._config.retry_window:
            return None
        if any(type(value) is float and value > now for value in turns[1::2]):
            return None
        return last_turn, "closed" if closed or now > expires - closed_ttl else "idle"

    def forget(self, key: Key, entry: Any) -> None:
        """Take the conversation at ``key``, about to be dropped for room, out of its owner's index;
        an index left naming none goes with it (else the indexes of people whose conversations were
        dropped would fill the store in their place)."""
        entries = self.keyspace.entries
        digest: bytes = entry[_OWNER]
        index = entries.get(digest)
        if type(index) is not tuple:
            return
        if len(index) == 3 and type(index[2]) is dict:
            index[2].pop(key, None)
            if not index[2]:
                self.keyspace.drop(digest, "index")
            return
        pairs = index[2:]
        kept = [item for pair in zip(pairs[::2], pairs[1::2], strict=True) if pair[0] != key for item in pair]
        if kept:
            entries[digest] = (index[0], index[1], *kept)
        else:
            self.keyspace.drop(digest, "index")

    def _room(self, owner: Owner, now: float) -> bool:
        """Whether a new conversation of ``owner`` may open: within their share and ``cache.max_entries``.

        A person holding :attr:`person_limit` conversations makes room from their own, the least
        recently used first, whether or not the store is full, and is refused when none of theirs
        may go: no one person can take the store from the others. Anyone else makes room at the
        bound from the sampled least recently used of all (:meth:`MemoryKeyspace.make_room`).
        """
        keyspace = self.keyspace
        # Its record and first-message record, and its owner's index unless they have one.
        need = _OPEN_ENTRIES - (owner.digest_bytes in keyspace.entries)
        own = self._own_victims(owner, now)
        if own is None:
            return keyspace.fits(need) or keyspace.make_room(need, now, self)
        for position, (_, key, first_key) in enumerate(sorted(own)):
            # One of theirs for the share; more only if the store is full and nothing expired is left.
            if position and (keyspace.fits(need) or keyspace.make_room(need, now, None)):
                return True
            keyspace.drop(key, "share")
            first = keyspace.entries.get(first_key)
            if _is_first_message(first) and first[_EXPIRES] <= now:
                keyspace.drop(first_key, "expired")  # its retry window is over (the sweep's anyway)
        return bool(own) and (keyspace.fits(need) or keyspace.make_room(need, now, None))

    @property
    def person_limit(self) -> int | None:
        """Conversations one person may hold: ``cache.person_share`` of ``cache.max_entries``, each
        conversation counted as the two entries it adds beside its owner's index; ``None``: unbounded."""
        if self._config.max_entries is None:
            return None
        return max(1, int(self._config.person_share * self._config.max_entries) // _TURN_ENTRIES)

    def _own_victims(self, owner: Owner, now: float) -> list[tuple[float, str, str]] | None:
        """``None`` if ``owner`` holds fewer conversations than :attr:`person_limit`; else
        ``(last used, key, first-message key)`` of those of them that may go, among the first
        :attr:`MemoryKeyspace.EVICT_SCAN` live ones they opened (a bounded look).

        A large index's count includes conversations gone since its last prune; the ones this look
        meets are dropped from it on the way, so a person making room keeps their index's front clean.
        """
        limit = self.person_limit
        entries = self.keyspace.entries
        digest = owner.digest_bytes
        index = entries.get(digest)
        if limit is None or type(index) is not tuple:
            return None
        large = len(index) == 3 and type(index[2]) is dict
        held = len(index[2]) if large else (len(index) - 2) // 2
        if held < limit:
            return None
        found: list[tuple[float, str, str]] = []
        live = 0
        dead: list[str] = []
        for key, _ in index_conversations(index):
            conversation = live_conversation(entries.get(key), now)
            if conversation is None or conversation[_OWNER] != digest:
                dead.append(key)
                continue
            live += 1
            chosen = self.victim(conversation, now)
            if chosen is not None:
                first = keys.first_message_key(owner.brand_id, owner.digest, conversation[_TURNS][0])
                found.append((chosen[0], key, first))
            if live >= MemoryKeyspace.EVICT_SCAN:
                break
        if large:
            for key in dead:
                del index[2][key]
            held = len(index[2])
        else:
            held = live
        return found if held >= limit else None

    @property
    def _record_ttl(self) -> int:
        # An idle conversation is remembered past its idle TTL so it answers CLOSED, not unknown (§4.2).
        return self._config.conversation_ttl + self._config.closed_ttl

    def _conversation(self, key: str, now: float) -> _Conversation | None:
        entry = self.keyspace.entries.get(key)
        return entry if _is_conversation(entry) and entry[_EXPIRES] > now else None

    def _open(
        self, key: str, context_id: str, owner: Owner, message_id: str, now: float, user: bytes | None
    ) -> TurnClaim:
        turns = (message_id, now + self._config.pending_ttl)
        expires = now + self._record_ttl
        self.keyspace.put(key, (expires, owner.digest_bytes, False, False, turns, user))
        self.keyspace.writes += 1
        self._index(owner, key, now, expires)
        return TurnClaim(TurnStatus.NEW, context_id, new_conversation=True)

    def _index(self, owner: Owner, key: str, now: float, expires: float) -> None:
        """Add the conversation ``key``, opened at ``now`` and kept until ``expires``, to its owner's index.

        Once per conversation, not per turn, and O(1) amortized whatever the owner holds: a
        small index is a tuple of at most :data:`_INDEX_TUPLE_MAX` conversations, rebuilt (its
        dead ones dropped when it is full, a bounded look); a larger one is a dict changed in
        place, its dead conversations dropped when it has doubled since the last drop, so that
        work stays in proportion to the conversations opened, and the index in proportion to
        the live ones. No conversation of the index outlives this new one (none was kept past
        its last turn + ``record_ttl``), so its deadline, the very float object, becomes the
        index's.
        """
        entries = self.keyspace.entries
        digest = owner.digest_bytes
        index = entries.get(digest)
        if type(index) is not tuple:
            self.keyspace.put(digest, (expires, 0, key, now))
            return
        pruned: int = index[1]
        if len(index) == 3 and type(index[2]) is dict:
            conversations: dict[str, float] = index[2]
            if len(conversations) >= 2 * max(pruned, _INDEX_TUPLE_MAX):
                _prune(entries, digest, conversations, now)
                pruned = len(conversations)
            conversations[key] = now
            entries[digest] = (expires, pruned, conversations)
            return
        pairs: Sequence[Any] = index[2:]
        if len(pairs) >= 2 * _INDEX_TUPLE_MAX:  # two items a conversation
            pairs = _live_pairs(entries, digest, pairs, now)
            if len(pairs) >= 2 * _INDEX_TUPLE_MAX:
                # Insertion order kept: a key named twice keeps its later opening, as readers expect.
                grown = dict(zip(pairs[::2], pairs[1::2], strict=True))
                grown[key] = now
                entries[digest] = (expires, len(pairs) // 2, grown)
                return
            pruned = len(pairs) // 2
        entries[digest] = (expires, pruned, *pairs, key, now)

    def _decide(
        self, key: str, owner: Owner, context_id: str, message_id: str, now: float, user: bytes | None
    ) -> TurnClaim:
        """The claim on an existing conversation; ``user`` is the delegated turn's Brand user (§5.5)."""
        conversation = self._conversation(key, now)
        if conversation is None or conversation[_OWNER] != owner.digest_bytes:
            return TurnClaim(TurnStatus.UNKNOWN_CONTEXT)
        expires, digest, answered, closed, turns, recorded = conversation
        if user is not None:
            # Before the replay: a stored reply is the context's user's, served to no one else.
            if recorded is None:
                recorded = user
            elif recorded != user:
                return TurnClaim(TurnStatus.USER_MISMATCH)
        turn = _turn(turns, message_id)
        if isinstance(turn, bytes):
            return TurnClaim(TurnStatus.REPLAY, context_id, reply=turn)
        # §4.3 before §4.2: a messageId still running is a repeat with no reply yet, even once closed.
        if turn is not None and turn > now:
            return TurnClaim(TurnStatus.IN_FLIGHT, context_id)
        # An open record expires closed_ttl after its idle TTL ran out: past that point it is CLOSED.
        if closed or now > expires - self._config.closed_ttl:
            return TurnClaim(TurnStatus.CLOSED, context_id)
        turns = _with_turn(turns, message_id, now + self._config.pending_ttl)
        self.keyspace.entries[key] = (expires, digest, answered, closed, turns, recorded)
        self.keyspace.writes += 1
        return TurnClaim(TurnStatus.NEW, context_id, new_conversation=not answered)

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
        now = self._clock()
        entries = self.keyspace.entries
        if context_id is not None:
            first_key, digest, earlier = "", b"", None
        else:
            first_key = keys.first_message_key(owner.brand_id, owner.digest, message_id)
            digest = text_digest(text)
            earlier = entries.get(first_key)
            if not _is_first_message(earlier) or earlier[_EXPIRES] <= now:
                earlier = None
            # Before the limits: a refused conversation is charged nothing. A retried first message
            # is not refused: what it asks for (a reply, or its turn's fate) is already stored.
            opens = earlier is None or earlier[2] != digest
            if opens and not self._room(owner, now):
                return TurnClaim(TurnStatus.STORE_FULL)
        if limits:
            waits = self.keyspace.charge(limits, int(now * US))
            if any(waits):
                return TurnClaim(TurnStatus.RATE_LIMITED, waits=tuple(wait / US for wait in waits))
        user: bytes | None = None
        if grant is not None:
            record = live_grant(entries.get(grant.grant_key), now)
            if record is None or record[1].owner_digest != owner.digest:
                return TurnClaim(TurnStatus.GRANT_REVOKED)
            user = bytes.fromhex(grant.user_digest)
        if context_id is not None:
            key = keys.conversation_key(owner.brand_id, context_id)
            return self._decide(key, owner, context_id, message_id, now, user)
        new_key = keys.conversation_key(owner.brand_id, new_context_id)
        if earlier is None:
            self.keyspace.put(first_key, (now + self._config.retry_window, new_key, digest))
            return self._open(new_key, new_context_id, owner, message_id, now, user)
        _, earlier_key, earlier_digest = earlier
        if earlier_digest != digest:
            # A different first message reusing a messageId opens its own conversation.
            return self._open(new_key, new_context_id, owner, message_id, now, user)
        earlier_context = keys.context_of(owner.brand_id, earlier_key)
        claim = self._decide(earlier_key, owner, earlier_context, message_id, now, user)
        if claim.status not in (TurnStatus.UNKNOWN_CONTEXT, TurnStatus.CLOSED):
            return claim
        # §4.3 with §4.2 (see ConversationStore.begin_turn): nothing of this message to replay, so
        # it starts the conversation it asks for, and becomes what a later retry finds.
        if not self._room(owner, now):
            return TurnClaim(TurnStatus.STORE_FULL)
        self.keyspace.put(first_key, (now + self._config.retry_window, new_key, digest))
        return self._open(new_key, new_context_id, owner, message_id, now, user)

    async def complete_turn(
        self, owner: Owner, context_id: str, message_id: str, reply: bytes, *, close: bool
    ) -> None:
        key = keys.conversation_key(owner.brand_id, context_id)
        now = self._clock()
        conversation = self._conversation(key, now)
        expires = now + (self._config.closed_ttl if close else self._record_ttl)
        if conversation is None:
            closed, turns, user = False, (), None
            # A fresh record: indexed anew (an index that still names the old one names it twice).
            self._index(owner, key, now, expires)
        elif conversation[_OWNER] == ERASED:
            return  # erased while this turn ran: its reply is forgotten with the rest
        else:
            closed, turns, user = conversation[_CLOSED], conversation[_TURNS], conversation[_USER]
        self.keyspace.writes += 1
        self.keyspace.put(
            key,
            (expires, owner.digest_bytes, True, closed or close, _with_turn(turns, message_id, reply), user),
        )

    async def abort_turn(
        self, owner: Owner, context_id: str, message_id: str, *, new_conversation: bool
    ) -> None:
        key = keys.conversation_key(owner.brand_id, context_id)
        now = self._clock()
        conversation = self._conversation(key, now)
        if conversation is None or conversation[_OWNER] != owner.digest_bytes:
            return
        entries = self.keyspace.entries
        expires, digest, answered, closed, turns, user = conversation
        if not isinstance(_turn(turns, message_id), float):
            return  # answered (a completion got through) or never claimed: nothing to release
        if new_conversation:
            # Expired where they stand (only the sweep deletes keys): from now on both read as absent.
            entries[key] = (-math.inf, digest, answered, closed, turns, user)
            first_key = keys.first_message_key(owner.brand_id, owner.digest, message_id)
            earlier = entries.get(first_key)
            if _is_first_message(earlier) and earlier[1] == key:
                entries[first_key] = (-math.inf, *earlier[1:])
        else:
            entries[key] = (expires, digest, answered, closed, _without_turn(turns, message_id), user)

    async def start(self) -> None:
        """The expiry sweep over conversations, first-message records and rate-limit counters."""
        self.keyspace.start()

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        await self.keyspace.close()
