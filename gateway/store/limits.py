"""Rate-limit counters in the store, so a limit holds across every replica (§6).

The arithmetic is GCRA, all or nothing over the limits of one request
(:mod:`gateway.store.gcra`). This module is the *separate* charge, for operations that do not
begin a turn: on Redis one Lua script over all the keys (one round trip whatever the number of
limits), in memory one synchronous section over the store's own container. ``message:send``
charges the same counters inside :meth:`ConversationStore.begin_turn` instead, with the same
code, keys and clock, so the two paths draw on one budget.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from gateway.store.base import ConversationStore
from gateway.store.gcra import US, Hit, Rule, gcra, now_us, script_arguments, time_argument
from gateway.store.memory import MemoryKeyspace, MemoryStore
from gateway.store.redis import CHARGE, PEEK, RedisStore, by_slot, charge_by_slot, refund_by_slot
from gateway.store.redis_pipe import RedisPipe

__all__ = [
    "Hit",
    "MemoryRateLimiter",
    "RateLimiter",
    "RedisRateLimiter",
    "Rule",
    "gcra",
    "now_us",
    "open_rate_limiter",
]


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

        For budgets charged only after the fact (a wrong ``user_code`` is known to be wrong only
        once looked up), which must be checked before the next attempt is even looked at.
        """

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
