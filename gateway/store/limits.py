"""Rate-limit counters in the store, so a limit holds across every replica (§6).

The arithmetic is GCRA, all or nothing over the limits of one request
(:mod:`gateway.store.gcra`). This module is the *separate* charge, for operations that do not
begin a turn: on Redis one Lua script over all the keys (one round trip whatever the number of
limits), in memory one synchronous section over the store's own container. ``message:send``
charges the same counters inside :meth:`ConversationStore.begin_turn` instead, with the same
code, keys and clock, so the two paths draw on one budget.

A budget of failures (wrong ``user_code``s, RFC 8628 §5.1) is *reserved* before the attempt is
looked at (:meth:`RateLimiter.reserve`, one atomic step: one script on Redis) and given back
when the attempt succeeded (:meth:`RateLimiter.give_back`): looked at in one step and spent in
another, concurrent attempts would all pass the look (issue 28 M1).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gateway.store import lua
from gateway.store.base import ConversationStore
from gateway.store.gcra import US, Hit, Rule, gcra, now_us, script_arguments, time_argument
from gateway.store.memory import MemoryKeyspace, MemoryStore
from gateway.store.redis import CHARGE, PEEK, REFUND, RedisStore, by_slot, charge_by_slot, refund_by_slot
from gateway.store.redis_pipe import RedisPipe, Script

__all__ = [
    "GRACE",
    "REFUSED",
    "RESERVE",
    "SHARED",
    "Hit",
    "MemoryRateLimiter",
    "RateLimiter",
    "RedisRateLimiter",
    "Reservation",
    "Rule",
    "decide",
    "gcra",
    "now_us",
    "open_rate_limiter",
]


REFUSED: Final = 0
"""A reservation's mode: nothing taken."""
SHARED: Final = 1
"""A reservation's mode: the attempt's own budgets and the shared one taken."""
GRACE: Final = 2
"""A reservation's mode: the shared budget had nothing left; the attempt's own budgets and its grace taken."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """What :meth:`RateLimiter.reserve` decided, for the caller to answer and later give back."""

    mode: int
    """:data:`REFUSED`, :data:`SHARED` or :data:`GRACE`."""
    waits: tuple[float, ...]
    """Per counter, in the order given (own, shared, grace): seconds until it has a token, 0 where it has."""
    taken: tuple[Hit, ...]
    """The counters charged: what :meth:`RateLimiter.give_back` returns when the attempt succeeded."""
    emptied: tuple[Hit, ...]
    """The counters this reservation left without a token (the next attempt will wait on them)."""


def decide(waits: Sequence[int], own: int, shared: int, grace: int) -> tuple[int, list[bool]]:
    """Which counters one reservation charges, from each counter's wait (µs, 0 where it has a token):
    its mode and a flag per counter. The rule :data:`RESERVE` runs in Lua, for the memory backend.

    Every ``own`` counter must have a token. With every ``shared`` one too, all of those are
    charged, and each ``grace`` counter that has a token as well: a failure marks its subjects as
    having failed recently. Otherwise, when there is a grace and every grace counter has a token,
    the own and the grace counters are charged instead. Else nothing is.
    """
    n = own + shared + grace
    if any(waits[:own]):
        return REFUSED, [False] * n
    if not any(waits[own : own + shared]):
        return SHARED, [True] * (own + shared) + [not wait for wait in waits[own + shared :]]
    if grace and not any(waits[own + shared :]):
        return GRACE, [True] * own + [False] * shared + [True] * grace
    return REFUSED, [False] * n


RESERVE = Script(lua.source("limit_reserve.lua"))
"""What :func:`decide` says, charged atomically on Redis (``gateway/store/lua/limit_reserve.lua``)."""


def _reservation(
    hits: Sequence[Hit], mode: int, waits: Sequence[int], charged: Sequence[bool], emptied: Sequence[bool]
) -> Reservation:
    return Reservation(
        mode,
        tuple(wait / US for wait in waits),
        tuple(hit for hit, taken in zip(hits, charged, strict=True) if taken),
        tuple(hit for hit, gone in zip(hits, emptied, strict=True) if gone),
    )


class RateLimiter(ABC):
    """Counters behind one interface; every operation raises :class:`StoreError` when the store fails."""

    tagged = False
    """Whether counters are named in the tagged key layout (``cache.key_layout``, Redis only)."""

    async def hit(self, key: str, rate: float, burst: int) -> float:
        """Charge one request to ``key``: 0 when allowed, else the seconds to wait (nothing charged)."""
        (wait,) = await self.hit_all([Hit(key, Rule(rate, burst))])
        return wait

    @abstractmethod
    async def hit_all(self, hits: Sequence[Hit]) -> list[float]:
        """Charge one request to every key (distinct keys), all or nothing, in one step.

        Returns the wait per hit, in order: all zeros means allowed and charged; any
        positive wait means refused, and no counter was charged.
        """

    @abstractmethod
    async def waits(self, hits: Sequence[Hit]) -> list[float]:
        """What :meth:`hit_all` would answer now, charging nothing: a budget looked at, not spent.

        Only for an attempt already known to have succeeded (a right introspection credential),
        which must be refused exactly when a failed one would be; a failure is reserved
        (:meth:`reserve`), never looked at and spent later.
        """

    @abstractmethod
    async def reserve(
        self, own: Sequence[Hit], shared: Sequence[Hit] = (), grace: Sequence[Hit] = ()
    ) -> Reservation:
        """Take a token for one attempt, atomically, before the attempt is looked at (:func:`decide`).

        ``own`` are the attempt's own budgets (its account's, its address's), ``shared`` one that
        everyone draws on (the Brand's) and ``grace`` what lets an attempt through while the shared
        budget is spent (one token per subject per long interval): so a shared budget an attacker
        keeps spent bounds the attacker without refusing who has not failed recently. All of one
        hash slot in the tagged layout: the script is one, on a Redis Cluster too.
        """

    @abstractmethod
    async def give_back(self, hits: Sequence[Hit]) -> None:
        """Return one token to each of ``hits`` (a reservation's :attr:`~Reservation.taken`): the
        attempt succeeded, and only failures spend a budget of failures."""

    @abstractmethod
    async def close(self) -> None:
        """Release what this limiter owns (not a connection or container it shares)."""


class MemoryRateLimiter(RateLimiter):
    """One process only, for ``memory://`` deployments and tests: counters in a :class:`MemoryKeyspace`.

    The keyspace's owner (the :class:`MemoryStore`, or a test) runs its sweep and closes it.
    """

    def __init__(self, keyspace: MemoryKeyspace) -> None:
        self._keyspace = keyspace

    async def hit_all(self, hits: Sequence[Hit]) -> list[float]:
        waits = self._keyspace.charge(hits, now_us(self._keyspace.clock))
        return [wait / US for wait in waits]

    async def waits(self, hits: Sequence[Hit]) -> list[float]:
        entries, now = self._keyspace.entries, now_us(self._keyspace.clock)
        return [gcra(_tat(entries.get(hit.key)), now, hit.rule)[1] / US for hit in hits]

    async def reserve(
        self, own: Sequence[Hit], shared: Sequence[Hit] = (), grace: Sequence[Hit] = ()
    ) -> Reservation:
        # No await from the look to the charge: atomic within the one process this store serves.
        keyspace = self._keyspace
        entries, now = keyspace.entries, now_us(keyspace.clock)
        hits = [*own, *shared, *grace]
        steps = [gcra(_tat(entries.get(hit.key)), now, hit.rule) for hit in hits]
        mode, charged = decide([wait for _, wait in steps], len(own), len(shared), len(grace))
        emptied = []
        for hit, (tat, _), taken in zip(hits, steps, charged, strict=True):
            if taken:
                keyspace.put(hit.key, tat)
            emptied.append(taken and gcra(tat, now, hit.rule)[1] > 0)
        return _reservation(hits, mode, [wait for _, wait in steps], charged, emptied)

    async def give_back(self, hits: Sequence[Hit]) -> None:
        entries, now = self._keyspace.entries, now_us(self._keyspace.clock)
        for hit in hits:
            tat = _tat(entries.get(hit.key))
            if tat is None:
                continue
            if tat - hit.rule.interval_us > now:
                entries[hit.key] = tat - hit.rule.interval_us
            else:  # idle again, as REFUND leaves it on Redis (the sweep drops its ring entry)
                entries.pop(hit.key, None)

    async def close(self) -> None:
        return None


class RedisRateLimiter(RateLimiter):
    """Counters on the conversation store's Redis, through its connection (no second one).

    Tagged, the counters of one request may sit in different slots (a person's under their
    owner's tag, a personal agent's under its own): each slot's are charged all or nothing by one
    script, the scripts sent together (one round trip); when one refuses, the others' charges are
    given back (:func:`~gateway.store.redis.refund_by_slot`, a second round trip on the refusal
    path only), so the request is still charged all or nothing. In the previous layout every
    counter is charged by one script.
    """

    def __init__(
        self, redis: RedisPipe, *, clock: Callable[[], float] | None = None, tagged: bool = False
    ) -> None:
        # Without a clock (a test's), each counter is charged at its node's time as the script runs
        # (gateway/store/gcra.py says why).
        self._clock = clock
        self._redis = redis
        self.tagged = tagged

    def _now(self) -> int | None:
        """The time charges and looks are made at (µs): ``None`` for the counters' node's clock."""
        return None if self._clock is None else now_us(self._clock)

    async def hit_all(self, hits: Sequence[Hit]) -> list[float]:
        now = self._now()
        if self.tagged:
            waits = await charge_by_slot(self._redis, hits, now)
            if any(waits.values()):
                await refund_by_slot(self._redis, [hit for hit in hits if not waits[hit.key]], now)
            return [waits[hit.key] / US for hit in hits]
        keys, args = script_arguments(hits, now)
        answered = await self._redis.run(CHARGE, keys, args)
        return [int(wait) / US for wait in answered]

    async def waits(self, hits: Sequence[Hit]) -> list[float]:
        # The same GCRA step as the script, on the counters as they stand and on the clock they are
        # charged by (PEEK: one read, no write); one per slot when tagged, sent together.
        groups = by_slot(hits) if self.tagged else [list(hits)]
        at = time_argument(self._now())
        answers: list[list[Any]] = await asyncio.gather(
            *(self._redis.run(PEEK, [hit.key for hit in group], [at]) for group in groups)
        )
        waits = {
            hit.key: gcra(_tat(tat), int(now), hit.rule)[1] / US
            for group, (now, *tats) in zip(groups, answers, strict=True)
            for hit, tat in zip(group, tats, strict=True)
        }
        return [waits[hit.key] for hit in hits]

    async def reserve(
        self, own: Sequence[Hit], shared: Sequence[Hit] = (), grace: Sequence[Hit] = ()
    ) -> Reservation:
        hits = [*own, *shared, *grace]
        if self.tagged and len(by_slot(hits)) > 1:
            raise ValueError("a reservation's counters must share one hash slot")
        keys, args = script_arguments(hits, self._now())
        answer = await self._redis.run(RESERVE, keys, [len(own), len(shared), len(grace), *args[1:]])
        mode, flat = int(answer[0]), [int(value) for value in answer[1:]]
        return _reservation(
            hits, mode, flat[0::3], [bool(x) for x in flat[1::3]], [bool(x) for x in flat[2::3]]
        )

    async def give_back(self, hits: Sequence[Hit]) -> None:
        if not hits:
            return
        if self.tagged:
            await refund_by_slot(self._redis, hits, self._now())
            return
        at = time_argument(self._now())
        await self._redis.run(
            REFUND, [hit.key for hit in hits], [at, *(hit.rule.interval_us for hit in hits)]
        )

    async def close(self) -> None:
        return None


def _tat(stored: object) -> int | None:
    """A counter's theoretical arrival time as either backend keeps it (int, or Redis' digits)."""
    if type(stored) is int:
        return stored
    return int(stored) if isinstance(stored, bytes) and stored else None


def open_rate_limiter(store: ConversationStore) -> RateLimiter:
    """The limiter beside ``store``: its Redis pool or its memory container, and its clock.

    Sharing the clock matters because ``message:send`` charges the same counters inside the
    store's begin-turn step: both paths must agree on what "now" is.
    """
    if isinstance(store, RedisStore):
        return RedisRateLimiter(store.redis, clock=store.counter_clock, tagged=store.tagged)
    if isinstance(store, MemoryStore):
        return MemoryRateLimiter(store.keyspace)
    raise TypeError(f"no rate limiter for {type(store).__name__}")
