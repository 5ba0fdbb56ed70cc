"""Protecting a Brand's bot: a cap on concurrent calls, and a circuit breaker.

:class:`GuardedBot` wraps any :class:`~gateway.upstream.base.BotAdapter`, so the turn logic
never knows it is there. It speaks the adapter protocol's own failures:

* **Concurrency cap** (``upstream.max_concurrency``). A call beyond the cap waits up to
  ``upstream.queue_timeout`` for a slot, then raises :class:`BotBusy`: the personal agent gets
  a bare ``429`` with ``Retry-After: 1`` (§6), nothing was sent to the bot, and the turn's
  in-flight marker is released so the retry runs it. A bot that is merely slow is not
  drowned by the requests queueing in front of it.
* **The process's ceiling** (``limits.max_bot_calls``, a :class:`~gateway.ops.limits.BotCalls`
  shared by every Brand's guard). A call that has its Brand's slot but would pass the ceiling
  is refused at once the same way, counted under ``limit="bot_calls"``.
* **Circuit breaker** (``upstream.circuit_breaker``). After ``failures`` consecutive failed
  calls within ``window`` seconds it opens: turns fail fast with ``UpstreamError`` (so
  ``INTERNAL``, nothing stored, marker released, exactly like a failed call) without
  waiting out a dead bot's timeout. After ``cooldown`` seconds one probe call goes through
  (half-open); its success closes the circuit, its failure re-opens it.
* **The bot's own 429** (:class:`UpstreamThrottled`, raised by an adapter whose bot or model
  provider answered ``429``). No turn is sent to that bot until its ``Retry-After`` has passed
  (bounded by :data:`~gateway.upstream.base.MAX_THROTTLE_SECONDS`); the throttled turn and every
  turn meanwhile raise :class:`BotBusy` with the time left, so the personal agent gets a bare
  ``429`` (§6), nothing is stored and the in-flight marker is released. It is not a failure
  for the breaker: the bot answered, it asked for less traffic, and opening the circuit would
  only turn its precise wait into ``INTERNAL`` for ``cooldown`` seconds.

Both are per process, on purpose. The cap protects the bot from what *this* process sends;
the operator sizes it as the bot's capacity divided by the number of gateway processes. The
breaker's state is what this process observes on its own path to the bot (its connection
pool, its network route): sharing it through Redis would cost a round trip per turn and
would let one replica's broken path open the circuit for replicas that reach the bot fine.
A replica whose breaker is open still learns within ``cooldown`` seconds that the bot is back.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from enum import Enum, IntEnum

from gateway.config import CircuitBreakerConfig, UpstreamConfig
from gateway.ops.limits import BOT_CALLS, BotCalls
from gateway.ops.metrics import Metrics
from gateway.upstream.base import BotAdapter, BotBusy, BotReply, Turn, UpstreamError, UpstreamThrottled

__all__ = ["CircuitBreaker", "CircuitState", "GuardedBot", "Permit"]

log = logging.getLogger("pact_gateway.upstream")

BUSY_RETRY_AFTER = 1
"""Seconds a turn refused at the concurrency cap is told to wait: slots free at bot-call speed."""


class CircuitState(IntEnum):
    """Values are what the ``pact_circuit_state`` gauge exports."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class Permit(Enum):
    """Why a call was let through: an ordinary call, or the one half-open probe."""

    CALL = "call"
    PROBE = "probe"


class CircuitBreaker:
    """The breaker's rules with no I/O and no clock of its own: every method is given ``now``.

    Only the probe's result moves a half-open or open circuit; ordinary calls that were
    already running when it opened finish without effect, so a late success from before
    the outage cannot close a circuit that a probe has not tested.
    """

    def __init__(self, settings: CircuitBreakerConfig) -> None:
        self._settings = settings
        self._failures: deque[float] = deque(maxlen=settings.failures)
        self._state = CircuitState.CLOSED
        self._opened_at = 0.0

    @property
    def state(self) -> CircuitState:
        return self._state

    def admit(self, now: float) -> Permit | None:
        """A permit to call the bot, or ``None`` to fail fast without calling it."""
        if not self._settings.enabled or self._state is CircuitState.CLOSED:
            return Permit.CALL
        if self._state is CircuitState.OPEN and now - self._opened_at >= self._settings.cooldown:
            self._state = CircuitState.HALF_OPEN
            return Permit.PROBE
        return None

    def succeeded(self, permit: Permit) -> None:
        if permit is Permit.PROBE or self._state is CircuitState.CLOSED:
            self._state = CircuitState.CLOSED
            self._failures.clear()

    def failed(self, permit: Permit, now: float) -> None:
        if permit is Permit.PROBE:
            self._open(now)
            return
        if self._state is not CircuitState.CLOSED or not self._settings.enabled:
            return
        self._failures.append(now)
        streak_full = len(self._failures) == self._settings.failures
        if streak_full and now - self._failures[0] <= self._settings.window:
            self._open(now)

    def abandoned(self, permit: Permit) -> None:
        """The call never reached a verdict (cancelled, or no free slot): the next turn probes instead."""
        if permit is Permit.PROBE and self._state is CircuitState.HALF_OPEN:
            self._state = CircuitState.OPEN  # ``_opened_at`` is unchanged, so the cool-down has passed

    def _open(self, now: float) -> None:
        self._state = CircuitState.OPEN
        self._opened_at = now
        self._failures.clear()


class GuardedBot:
    """A :class:`BotAdapter` that caps concurrent calls and breaks the circuit for one Brand's bot."""

    def __init__(
        self,
        inner: BotAdapter,
        brand_id: str,
        upstream: UpstreamConfig,
        *,
        metrics: Metrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        ceiling: BotCalls | None = None,
    ) -> None:
        self._inner = inner
        self._ceiling = ceiling
        self._brand_id = brand_id
        self._queue_timeout = upstream.queue_timeout
        self._slots = asyncio.Semaphore(upstream.max_concurrency)
        self._breaker = CircuitBreaker(upstream.circuit_breaker)
        self._metrics = metrics
        self._clock = clock
        self._published: CircuitState | None = None
        self._throttled_until = 0.0
        self._publish()

    @property
    def circuit_state(self) -> CircuitState:
        return self._breaker.state

    async def probe(self) -> str:
        """The inner adapter's probe, outside the cap and the breaker: it sends no turn, so it
        neither takes a turn's slot nor counts as the bot's health."""
        return await self._inner.probe()

    async def send(self, turn: Turn) -> BotReply:
        now = self._clock()
        if now < self._throttled_until:
            raise self._busy("upstream_retry_after", self._throttled_until - now)
        permit = self._breaker.admit(now)
        self._publish()
        if permit is None:
            raise UpstreamError("circuit_open", "the bot's circuit breaker is open")
        try:
            await self._acquire_slot()
        except BaseException:
            self._breaker.abandoned(permit)
            self._publish()
            raise
        if self._ceiling is not None and not self._ceiling.enter(self._brand_id):
            self._slots.release()
            self._breaker.abandoned(permit)
            self._publish()
            raise BotBusy(BUSY_RETRY_AFTER, BOT_CALLS)
        try:
            reply = await self._inner.send(turn)
        except UpstreamThrottled as throttled:
            # The bot answered: no verdict on its health (a probe leaves the next turn to probe).
            self._breaker.abandoned(permit)
            wait = throttled.retry_after
            self._throttled_until = max(self._throttled_until, self._clock() + wait)
            log.warning(
                "bot answered 429: no calls for %.1f s (%s)",
                wait,
                throttled.detail,
                extra={"brand": self._brand_id, "request_id": turn.request_id},
            )
            raise self._busy("upstream_retry_after", wait) from None
        except Exception:
            # An UpstreamError, or anything else the adapter raised: either way the bot's turn failed.
            self._breaker.failed(permit, self._clock())
            raise
        except BaseException:
            self._breaker.abandoned(permit)
            raise
        else:
            self._breaker.succeeded(permit)
            return reply
        finally:
            if self._ceiling is not None:
                self._ceiling.leave()
            self._slots.release()
            self._publish()

    async def _acquire_slot(self) -> None:
        """Take a slot, waiting up to ``queue_timeout`` for one; :class:`BotBusy` when none frees.

        A free slot is taken at once, without the timeout's timer and cancel scope: that is
        almost every call, and ``locked()`` is false only when no earlier caller is queued, so
        the short cut never jumps the queue.
        """
        if not self._slots.locked():
            await self._slots.acquire()  # returns without suspending: a slot is free
            return
        try:
            async with asyncio.timeout(self._queue_timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise self._busy("concurrency", BUSY_RETRY_AFTER) from None

    def _busy(self, limit: str, wait: float) -> BotBusy:
        """The refusal for a turn held back from the bot, counted under ``limit``.

        ``Retry-After`` is whole seconds, rounded up and at least 1 (as the §6 limits round).
        """
        if self._metrics is not None:
            self._metrics.rate_limited.labels(brand=self._brand_id, limit=limit).inc()
        return BotBusy(max(1, math.ceil(wait)), limit)

    def _publish(self) -> None:
        state = self._breaker.state
        if state is self._published:
            return
        if self._published is not None:
            log.warning("bot circuit %s", state.name.lower(), extra={"brand": self._brand_id})
        self._published = state
        if self._metrics is not None:
            self._metrics.circuit_state.labels(brand=self._brand_id).set(state.value)
