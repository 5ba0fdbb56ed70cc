"""Rate-limit counters in the store, so a limit holds across every replica (§6).

The algorithm is GCRA (the generic cell rate algorithm, a token bucket kept as one number):
each key stores its *theoretical arrival time* ``tat``. A request costs one emission interval
``1/rate``; it is allowed while ``tat`` stays within ``burst`` intervals of now. One integer per
key, no background refill, and the key expires as soon as it is back to idle.

Several limits that apply to one request are checked together, all or nothing: either every
counter is charged or none is, so a request refused by its per-user limit does not also eat
into its personal agent's budget. On Redis that is one Lua script over all the keys, one
round trip per request whatever the number of limits; in memory it is one synchronous
section (aiocache's memory backend never suspends with its operation timeout off).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis.asyncio as aioredis
from aiocache import SimpleMemoryCache
from redis.exceptions import RedisError

from gateway.store.base import ConversationStore, StoreError
from gateway.store.redis import RedisStore

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


_US = 1_000_000


@dataclass(frozen=True, slots=True)
class Rule:
    """``rate`` requests per second sustained; ``burst`` requests at once from idle."""

    rate: float
    burst: int

    def __post_init__(self) -> None:
        if not (self.rate > 0 and self.burst >= 1):
            raise ValueError("a rate limit needs rate > 0 and burst >= 1")

    @property
    def interval_us(self) -> int:
        """Microseconds one request costs. Whole microseconds keep both backends' arithmetic exact."""
        return max(1, round(_US / self.rate))

    @property
    def tolerance_us(self) -> int:
        """How far ahead of now ``tat`` may run: ``burst`` requests' worth."""
        return self.burst * self.interval_us


@dataclass(frozen=True, slots=True)
class Hit:
    """One counter to charge: a store key and the rule it is held to."""

    key: str
    rule: Rule


def gcra(tat_us: int | None, now_us: int, rule: Rule) -> tuple[int, int]:
    """One GCRA step in microseconds: ``(new_tat, wait)``, ``wait`` 0 when allowed.

    ``tat_us`` is ``None`` for an idle key. The Redis script computes exactly this; integers
    (below 2**53, so exact in Lua's doubles too) mean a request at the edge of its burst
    is never refused by a rounding error.
    """
    new_tat = max(tat_us if tat_us is not None else now_us, now_us) + rule.interval_us
    return new_tat, max(0, new_tat - rule.tolerance_us - now_us)


def now_us(clock: Callable[[], float]) -> int:
    return int(clock() * _US)


class RateLimiter(ABC):
    """Counters behind one interface; every operation raises :class:`StoreError` when the store fails."""

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
    async def close(self) -> None:
        """Release what this limiter owns (not a connection pool it shares)."""


class MemoryRateLimiter(RateLimiter):
    """One process only, for ``memory://`` deployments and tests."""

    def __init__(self, *, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        # timeout=None: no asyncio.wait_for task per call, and no suspension between read and write.
        self._cache = SimpleMemoryCache(timeout=None)

    async def hit_all(self, hits: Sequence[Hit]) -> list[float]:
        now = now_us(self._clock)
        tats: list[int | None] = await self._cache.multi_get([hit.key for hit in hits])
        steps = [gcra(tat, now, hit.rule) for tat, hit in zip(tats, hits, strict=True)]
        if any(wait for _, wait in steps):
            return [wait / _US for _, wait in steps]
        for hit, (new_tat, _) in zip(hits, steps, strict=True):
            # The key is idle again once now passes its tat: let it expire then.
            await self._cache.set(hit.key, new_tat, ttl=(new_tat - now) / _US)
        return [0.0] * len(hits)

    async def close(self) -> None:
        await self._cache.close()


# gcra() over every key, all or nothing. ARGV[1] now; then per key: interval, tolerance (all in µs).
# Returns one integer per key: 0 allowed, else the microseconds to wait.
_HIT_ALL = """
local now = tonumber(ARGV[1])
local tats = {}
local waits = {}
local refused = false
for i = 1, #KEYS do
  local tat = tonumber(redis.call('GET', KEYS[i]) or '0')
  if tat < now then tat = now end
  tats[i] = tat + tonumber(ARGV[2 * i])
  local wait = tats[i] - tonumber(ARGV[2 * i + 1]) - now
  if wait > 0 then
    refused = true
    waits[i] = wait
  else
    waits[i] = 0
  end
end
if not refused then
  for i = 1, #KEYS do
    redis.call('SET', KEYS[i], string.format('%d', tats[i]), 'PX', math.ceil((tats[i] - now) / 1000))
  end
end
return waits
"""


class RedisRateLimiter(RateLimiter):
    """Counters on the conversation store's Redis, through its connection pool (no second pool)."""

    def __init__(self, client: aioredis.Redis, *, clock: Callable[[], float] = time.time) -> None:
        # The replicas' wall clocks meet in one counter: NTP-level skew (ms) shifts a limit by
        # skew × rate requests, which is noise next to a burst.
        self._clock = clock
        self._script = client.register_script(_HIT_ALL)

    async def hit_all(self, hits: Sequence[Hit]) -> list[float]:
        args = [now_us(self._clock)]
        for hit in hits:
            args += [hit.rule.interval_us, hit.rule.tolerance_us]
        try:
            waits = await self._script(keys=[hit.key for hit in hits], args=args)
        except (RedisError, OSError) as exc:
            raise StoreError(f"redis: {type(exc).__name__}") from exc
        return [int(wait) / _US for wait in waits]

    async def close(self) -> None:
        return None


def open_rate_limiter(store: ConversationStore, *, clock: Callable[[], float] = time.time) -> RateLimiter:
    """The limiter beside ``store``: on its Redis (same pool) when it has one, else in this process."""
    if isinstance(store, RedisStore):
        return RedisRateLimiter(store.client, clock=clock)
    return MemoryRateLimiter(clock=clock)
