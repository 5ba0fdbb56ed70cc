"""§6 rate limits as the gateway applies them: which counters a request charges, and what a refusal is.

§6: "``429`` with ``Retry-After`` when a Provider rate-limits a personal agent or a
``(personal agent, sub)``". Both limits are per Brand (the counters live under
``pact:{brand}:rl:``), so a personal agent busy at one Brand keeps its budget at another,
and each Brand can be given its own numbers.

The rules are pure (:func:`a2a_limits`, :func:`retry_after`); :class:`RateLimits` is the one
place that names the counters a request charges (a :class:`Charge`), talks to them, counts
refusals and store failures, decides what a store failure means (``rate_limits.fail_open``)
and turns waits into a :class:`RateLimited` verdict, whether the waits came from its own
charge or from a ``message:send`` turn that charged them inside the store's begin step. The
same :meth:`RateLimits.enforce` takes any named :class:`Limit`, so endpoints without a PA
identity (the Delegated profile's OAuth endpoints, keyed by client address) reuse it
unchanged. A budget of failures (wrong ``user_code``s, RFC 8628 §5.1) is the same counter,
reserved before an attempt is looked at (:meth:`RateLimits.reserve`, atomically: looked at in one
step and spent in another, concurrent attempts all passed the look, issue 28 M1) and given back
when the attempt succeeded (:meth:`RateLimits.give_back`), so only failures spend it.

:class:`BotCalls` is the one limit that is not §6's: the process's ceiling on bot calls in
flight, every Brand together (``limits.max_bot_calls``). It refuses the same way, a bare ``429``.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gateway.config import RateLimitsConfig, RateRule
from gateway.ops.metrics import Metrics
from gateway.protocol import errors
from gateway.protocol.errors import A2AError, Reason
from gateway.store import keys
from gateway.store.base import Owner, StoreError
from gateway.store.limits import REFUSED, Hit, RateLimiter, Reservation, Rule

__all__ = [
    "BOT_CALLS",
    "BotCalls",
    "Charge",
    "FailureBudgets",
    "Limit",
    "RateLimited",
    "RateLimits",
    "Reserved",
    "a2a_limits",
    "named_limit",
    "person_counters",
    "retry_after",
    "subject_digest",
    "wrong_user_code_limits",
]

log = logging.getLogger("pact_gateway.limits")

PER_AGENT = "per_agent"
PER_USER = "per_user"
DEVICE_AUTHORIZATION = "device_authorization"
LOGIN_ASSERTION = "login_assertion"
CONSENT_DECISION = "consent_decision"
WRONG_USER_CODE_PER_USER = "wrong_user_code_per_user"
WRONG_USER_CODE_PER_ADDRESS = "wrong_user_code_per_address"
WRONG_USER_CODE_PER_BRAND = "wrong_user_code_per_brand"
WRONG_USER_CODE_GRACE = "wrong_user_code_grace"
BOT_CALLS = "bot_calls"
"""The ``limit`` label of a turn refused at the process's ceiling on bot calls in flight."""


class RateLimited(Exception):
    """§6: answer a bare ``429`` with ``Retry-After: {retry_after}`` (whole seconds, at least 1).

    Not an A2A error: it has no envelope. ``limit`` is a bounded name for logs and metrics.
    """

    def __init__(self, retry_after: int, limit: str) -> None:
        super().__init__(f"rate limited by {limit}; retry after {retry_after} s")
        self.retry_after = retry_after
        self.limit = limit


@dataclass(frozen=True, slots=True)
class Limit:
    """One named limit on one subject. ``subject`` is hashed into the key, never stored in clear."""

    name: str
    subject: str
    rule: Rule


def subject_digest(*parts: str) -> str:
    """Fixed-size and one-way: the store never holds an issuer, a ``sub`` or an address in clear."""
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:32]


def named_limit(name: str, rule: RateRule, *subject: str) -> list[Limit]:
    """``[Limit]`` for ``rule`` on the subject named by ``subject`` (hashed), or ``[]`` when disabled."""
    charged = _rule(rule)
    return [] if charged is None else [Limit(name, subject_digest(*subject), charged)]


@dataclass(frozen=True, slots=True)
class FailureBudgets:
    """The budgets one attempt reserves (:meth:`RateLimits.reserve`): its ``own`` (its account's,
    its address's), a ``shared`` one everyone draws on, and the ``grace`` that lets it through
    while the shared one is spent, if its subjects have not failed recently."""

    own: tuple[Limit, ...]
    shared: tuple[Limit, ...] = ()
    grace: tuple[Limit, ...] = ()


def wrong_user_code_limits(settings: RateLimitsConfig, user: str, address: str) -> FailureBudgets:
    """RFC 8628 §5.1: the budgets a wrong ``user_code`` at one Brand spends, per Brand login user
    (``user``, its ``sub``), per client address, and the Brand's own (the whole Brand's guessing
    rate, whoever guesses: what makes a distributed search of the code space slow).

    The Brand's budget must not become a switch that turns every sign-in off (issue 28 M2): while
    it is spent, a Brand user *and* an address that have not tried a wrong code within the grace
    interval (``wrong_user_code_grace``, one a day by default) may still try, a token of each
    taken. A wrong code marks both, whichever budget it was charged to: an attacker's accounts
    and addresses are slowed to the Brand's rate, a User who has not missed is served. The bound
    this keeps on guessing is in THREAT_MODEL.md (F1).
    """
    grace = settings.wrong_user_code_grace
    return FailureBudgets(
        own=(
            *named_limit(WRONG_USER_CODE_PER_USER, settings.wrong_user_code_per_user, "user", user),
            *named_limit(
                WRONG_USER_CODE_PER_ADDRESS, settings.wrong_user_code_per_address, "address", address
            ),
        ),
        shared=tuple(named_limit(WRONG_USER_CODE_PER_BRAND, settings.wrong_user_code_per_brand, "brand")),
        grace=(
            *named_limit(WRONG_USER_CODE_GRACE, grace, "user", user),
            *named_limit(WRONG_USER_CODE_GRACE, grace, "address", address),
        ),
    )


@dataclass(frozen=True, slots=True)
class Reserved:
    """A reservation made at one Brand: what to give back, and which budgets it spent to the last."""

    brand_id: str
    taken: tuple[Hit, ...]
    emptied: tuple[str, ...]
    """The names of the budgets this attempt left without a token (the next attempt will wait)."""


def retry_after(wait: float) -> int:
    """``Retry-After`` is whole seconds: round up, and never 0 (which would invite an instant retry)."""
    return max(1, math.ceil(wait))


def _tag(limit: Limit, owner_tag: str, tagged: bool) -> str:
    """A counter's hash tag in the tagged layout (see :meth:`RateLimits.charge`), ``""`` otherwise."""
    if not tagged:
        return ""
    return owner_tag if limit.name == PER_USER and owner_tag else keys.owner_tag(limit.subject)


def person_counters(person: Owner) -> list[str]:
    """The §6 ``per_user`` counter of ``person`` in both layouts, for an erasure: replicas writing
    either may have charged it (a rolling switch of ``cache.key_layout`` keeps two budgets until the
    older counter idles out, a burst at most)."""
    subject = subject_digest(person.issuer, person.sub)
    return [
        keys.limit_key(person.brand_id, PER_USER, subject, keys.owner_tag(person.digest)),
        keys.limit_key(person.brand_id, PER_USER, subject),
    ]


def _rule(rule: RateRule) -> Rule | None:
    return Rule(rule.rate, rule.burst) if rule.enabled else None


def a2a_limits(settings: RateLimitsConfig, issuer: str, sub: str) -> list[Limit]:
    """§6: what one A2A operation by ``(issuer, sub)`` charges: its personal agent, and the pair."""
    out: list[Limit] = []
    per_agent = _rule(settings.per_agent)
    if per_agent is not None:
        out.append(Limit(PER_AGENT, subject_digest(issuer), per_agent))
    per_user = _rule(settings.per_user)
    if per_user is not None:
        out.append(Limit(PER_USER, subject_digest(issuer, sub), per_user))
    return out


@dataclass(frozen=True, slots=True)
class Charge:
    """What one request charges at one Brand: its limits' names and their counters, in one order."""

    brand_id: str
    names: tuple[str, ...]
    hits: tuple[Hit, ...]
    fail_open: bool = False
    """``rate_limits.fail_open`` where the charge is made inside the turn's store step (A2A)."""


class RateLimits:
    """Applies named limits through a :class:`RateLimiter` (memory or the shared Redis).

    The A2A charge of each recent ``(Brand, personal agent, sub)`` is kept (up to
    ``identities`` of them, least recently used first out): naming it hashes both subjects and
    formats both keys, about 9 µs, against 0.4 µs to find it again, and a personal agent's
    requests repeat the same identity. A reload builds a new :class:`RateLimits`, and an entry
    is only used for the very settings object it was named under, so it never outlives its rules.
    """

    def __init__(
        self, limiter: RateLimiter, *, metrics: Metrics | None = None, identities: int = 4096
    ) -> None:
        self._limiter = limiter
        self._metrics = metrics
        self._identities = identities
        self._a2a: OrderedDict[tuple[str, str, str], tuple[RateLimitsConfig, Charge]] = OrderedDict()

    def charge(self, brand_id: str, limits: Sequence[Limit], *, owner_tag: str = "") -> Charge:
        """The counters ``limits`` name at ``brand_id``, in the limiter's key layout.

        Tagged (:attr:`RateLimiter.tagged`), each counter carries a hash tag: the per-person one
        ``owner_tag`` (:func:`gateway.store.keys.owner_tag`, given for an A2A charge), so that it
        rides in its owner's turn script; any other its own subject's, a slot of its own. Otherwise
        the previous release's keys.
        """
        tagged = self._limiter.tagged
        return Charge(
            brand_id,
            tuple(limit.name for limit in limits),
            tuple(
                Hit(
                    keys.limit_key(brand_id, limit.name, limit.subject, _tag(limit, owner_tag, tagged)),
                    limit.rule,
                )
                for limit in limits
            ),
        )

    def a2a_charge(self, brand_id: str, settings: RateLimitsConfig, issuer: str, sub: str) -> Charge:
        """§6: what one A2A operation by ``(issuer, sub)`` at ``brand_id`` charges under ``settings``."""
        identity = (brand_id, issuer, sub)
        cached = self._a2a.get(identity)
        if cached is not None and cached[0] is settings:
            self._a2a.move_to_end(identity)
            return cached[1]
        owner_tag = keys.owner_tag(Owner(brand_id, issuer, sub).digest) if self._limiter.tagged else ""
        charge = replace(
            self.charge(brand_id, a2a_limits(settings, issuer, sub), owner_tag=owner_tag),
            fail_open=settings.fail_open,
        )
        self._a2a[identity] = (settings, charge)
        if len(self._a2a) > self._identities:
            self._a2a.popitem(last=False)
        return charge

    async def enforce(self, brand_id: str, limits: Sequence[Limit], *, fail_open: bool) -> None:
        """Charge every limit at once (one store round trip) or raise :class:`RateLimited`.

        A store failure is logged and counted; with ``fail_open`` the request goes on
        uncounted, otherwise the :class:`StoreError` propagates for the caller to answer.
        """
        await self._apply(self.charge(brand_id, limits), fail_open=fail_open)

    async def _apply(self, charge: Charge, *, fail_open: bool) -> None:
        waits = await self._waits(charge, fail_open=fail_open, spend=True)
        if any(wait > 0 for wait in waits):
            raise self.refusal(charge, waits)

    async def _waits(self, charge: Charge, *, fail_open: bool, spend: bool) -> Sequence[float]:
        """The limiter's waits for ``charge`` (charged when ``spend``); none when it could not count
        and ``fail_open`` says to serve anyway, else its :class:`StoreError`."""
        if not charge.hits:
            return ()
        try:
            if spend:
                return await self._limiter.hit_all(charge.hits)
            return await self._limiter.waits(charge.hits)
        except StoreError as exc:
            self.not_counted(charge, str(exc), fail_open=fail_open)
            if fail_open:
                return ()
            raise

    def not_counted(self, charge: Charge, why: str, *, fail_open: bool) -> None:
        """Log and count a charge the store could not make (``why``), served or refused as
        ``fail_open`` says: here, or by a turn's store step (:attr:`TurnClaim.uncounted`)."""
        if self._metrics is not None:
            self._metrics.store_error("rate_limit")
        log.warning(
            "rate limits not counted (%s): %s",
            "serving anyway" if fail_open else "refusing",
            why,
            extra={"brand": charge.brand_id},
        )

    def _failure_hits(self, brand_id: str, limits: Sequence[Limit]) -> tuple[Hit, ...]:
        """The counters of a budget of failures at ``brand_id``. Tagged, all under one tag, the
        Brand's: a reservation is one script, and on a Redis Cluster a script's keys share a slot."""
        tag = keys.owner_tag(subject_digest(brand_id, "failures")) if self._limiter.tagged else ""
        return tuple(
            Hit(keys.limit_key(brand_id, limit.name, limit.subject, tag), limit.rule) for limit in limits
        )

    async def check_budget(self, brand_id: str, limits: Sequence[Limit], *, fail_open: bool) -> None:
        """Raise :class:`RateLimited` when any of ``limits``, a budget of failures, is spent, charging
        nothing: for an attempt already known to succeed, which must be refused exactly when a
        failed one would be (else the answer tells which it was)."""
        charge = Charge(brand_id, tuple(limit.name for limit in limits), self._failure_hits(brand_id, limits))
        waits = await self._waits(charge, fail_open=fail_open, spend=False)
        if any(wait > 0 for wait in waits):
            raise self.refusal(charge, waits)

    async def reserve(self, brand_id: str, budgets: FailureBudgets, *, fail_open: bool) -> Reserved:
        """Take a token of ``budgets`` for one attempt before it is looked at, or raise
        :class:`RateLimited`: one atomic step, so concurrent attempts cannot all pass a look.

        The caller gives it back (:meth:`give_back`) when the attempt succeeded. A store failure is
        as for :meth:`enforce`: with ``fail_open`` the attempt goes on uncounted (nothing reserved).
        """
        own = self._failure_hits(brand_id, budgets.own)
        shared = self._failure_hits(brand_id, budgets.shared)
        grace = self._failure_hits(brand_id, budgets.grace) if shared else ()
        names = tuple(limit.name for limit in (*budgets.own, *budgets.shared, *budgets.grace[: len(grace)]))
        if not names:
            return Reserved(brand_id, (), ())
        try:
            reservation = await self._limiter.reserve(own, shared, grace)
        except StoreError as exc:
            self.not_counted(Charge(brand_id, names, (*own, *shared, *grace)), str(exc), fail_open=fail_open)
            if fail_open:
                return Reserved(brand_id, (), ())
            raise
        if reservation.mode == REFUSED:
            raise self._failure_refusal(brand_id, names, reservation, len(own), len(shared))
        emptied = {hit.key for hit in reservation.emptied}
        counted = zip(names[: len(own) + len(shared)], (*own, *shared), strict=True)
        return Reserved(
            brand_id, reservation.taken, tuple(name for name, hit in counted if hit.key in emptied)
        )

    def _failure_refusal(
        self, brand_id: str, names: tuple[str, ...], reservation: Reservation, own: int, shared: int
    ) -> RateLimited:
        """The verdict for a refused reservation: its own budget's wait when one is spent, else the
        shared budget's, or sooner when the attempt's grace comes back first (either lets it in)."""
        waits = reservation.waits
        if any(waits[:own]):
            return self.refusal(Charge(brand_id, names[:own], ()), waits[:own])
        wait = max(waits[own : own + shared])
        if waits[own + shared :]:
            wait = min(wait, max(waits[own + shared :]))
        return self.refusal(Charge(brand_id, (names[own],), ()), (wait,))

    async def give_back(self, reserved: Reserved) -> None:
        """Return what ``reserved`` took: the attempt succeeded (or had no answer), and only failures
        spend a budget of failures. A store failure here is logged and counted, never the User's:
        their attempt already had its answer, and the token comes back by itself over time."""
        if not reserved.taken:
            return
        try:
            await self._limiter.give_back(reserved.taken)
        except StoreError as exc:
            if self._metrics is not None:
                self._metrics.store_error("rate_limit")
            log.warning(
                "a reserved attempt could not be given back: %s", exc, extra={"brand": reserved.brand_id}
            )

    def refusal(self, charge: Charge, waits: Sequence[float]) -> RateLimited:
        """The verdict for a refused ``charge`` (some wait > 0), counted once, for the caller to raise.

        ``waits`` come from the limiter or from a ``RATE_LIMITED`` turn claim, in ``charge`` order.
        """
        wait, binding = max(zip(waits, charge.names, strict=True))
        if self._metrics is not None:
            self._metrics.rate_limited.labels(brand=charge.brand_id, limit=binding).inc()
        log.debug("rate limited by %s for %.3f s", binding, wait, extra={"brand": charge.brand_id})
        return RateLimited(retry_after(wait), binding)

    async def check_a2a(self, brand_id: str, settings: RateLimitsConfig, issuer: str, sub: str) -> None:
        """§6 for an A2A operation, after authentication and the Brand lookup, before the body.

        Fail-closed (``fail_open: false``) answers ``INTERNAL``, not 429: the Provider could not
        count, which is its failure, and a 429 would tell the personal agent it was too fast.
        """
        try:
            await self._apply(self.a2a_charge(brand_id, settings, issuer, sub), fail_open=settings.fail_open)
        except StoreError:
            raise A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR) from None

    async def close(self) -> None:
        await self._limiter.close()


class BotCalls:
    """``limits.max_bot_calls``: bot calls in flight in this process, every Brand together.

    Each Brand's ``upstream.max_concurrency`` protects its own bot; this bounds what the process
    holds for all of them at once (a turn in flight keeps two connections, its request and its
    bot call: docs/capacity.md, "Slow bots"), so a process fronting many Brands cannot be driven
    out of memory by their caps added up. One object lives as long as the app: a reload sets the
    new :attr:`limit`, and calls already in flight stay counted. A call over the ceiling is
    refused at once rather than queued: queueing would hold the very memory the ceiling bounds.
    """

    def __init__(self, limit: int, *, metrics: Metrics | None = None) -> None:
        self.limit = limit
        self.in_flight = 0
        self._metrics = metrics

    def enter(self, brand_id: str) -> bool:
        """Count one more call for ``brand_id``; ``False`` (counted as refused) at the ceiling."""
        if self.in_flight >= self.limit:
            if self._metrics is not None:
                self._metrics.rate_limited.labels(brand=brand_id, limit=BOT_CALLS).inc()
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1
