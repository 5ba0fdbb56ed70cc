"""The Redis backend: each turn decision in one Lua script, over one pipelined connection.

A conversation is one hash at :func:`keys.conv_key`, laid out to stay small (issue 17: about
260 bytes, listpack-encoded, where the previous layout took about 780 in a hash table): ``o``
the owner's digest (16 raw bytes), ``t`` the time it opened (ms: the operator's listing is in
opening order) and ``l`` the last turn's time as ms after ``t`` (a small integer), ``c`` and
``a`` only once closed or answered, ``u`` the Brand user's digest (raw) once a delegated turn
ran in it (§5.5), and one field per turn named by :func:`keys.message_digest` (8 bytes) holding
``P{deadline ms}|{claim token}`` while in flight or the stored reply once answered
(:mod:`gateway.store.replies`, in pieces no longer than a listpack value, see
``lua/lib/reply.lua``). Scripts (``gateway/store/lua``) make the in-flight marker atomic across
replicas and keep the hot path to two round trips per turn: one script begins it, charging the
request's §6 rate limits first (the same GCRA code as the separate limit check,
``lua/lib/gcra.lua``) and, for a delegated turn, checking its grant (the hash
:mod:`gateway.store.oauth_redis` keeps) in the same script; one completes it. The connection is
:class:`RedisPipe`'s (see ``redis_pipe.py`` for why not a pooled client).

Hash tags (issue 20): with ``cache.key_layout: tagged`` (the default) every key a conversation's
script touches carries its owner's tag (:func:`keys.owner_tag`): the conversation, the owner's
index, the first-message records, the released-claim key, the §6 per-person counter and a
delegated turn's grant (:attr:`GrantCheck.grant_key`, under the same tag for a grant minted since),
so each script stays in one Redis Cluster slot (``tests/store/test_redis_slots.py``). The §6
per-agent counter is in a slot of its own (its agent's tag): it is charged by :data:`CHARGE`, sent
beside the begin-turn script in the same write, so a turn still costs one round trip to begin.
The charge stays all or nothing: if the per-person counter refuses, the per-agent charge is given
back (:data:`REFUND`); if the per-agent counter refuses, the claim the script made is released and
the per-person charge given back, both before the ``429`` (one more round trip, refusal path only).
With ``previous`` the keys are exactly the previous release's (untagged, every counter in the
turn's script), for a rolling upgrade beside its replicas.

Each owner's conversations are also members of a sorted set (:func:`keys.conv_index_key`),
scored by their deadline in s, which the scripts that open and complete them keep up to date
in the same step and keep as long-lived as the longest of them, for listing and erasing them
(``admin_redis.py``). An erased conversation leaves a tombstone for ``pending_ttl``, a hash of
``e`` alone, over which a turn still running stores nothing. A first message's §4.3 record is a
string at :func:`keys.first_key`: its text's digest (:data:`FIRST_DIGEST` raw bytes) then its
``contextId``, 44 bytes for a UUID, which Redis keeps in the same allocation as the key's object.

Every layout is read, whichever is written: the other current one (tagged or untagged: the same
hash under another key, moved with a ``RENAME`` and its index entry, ``lua/lib/move.lua``) and the
older ``b17dd54`` one (``conv:``, ``owner:`` and ``first:`` keys, hex digests, ms,
``m:{messageId}`` fields, converted by ``lua/lib/upgrade.lua`` with the first-message records of its
turns). A conversation found elsewhere is moved into the written layout by its owner's next turn,
inside the begin-turn script; a first message recorded in any layout is found by a retry; a reply
and a release go to whichever layout holds the conversation by then (a replica with the other
setting may have moved it meanwhile). So replicas writing either layout serve side by side, and
this release with ``previous`` beside the previous release's (docs/capacity.md, Upgrading). On a
Redis Cluster (``reads_previous=False``) the untagged layouts do not exist: their keys are passed
as ``""``, which every script skips, so that all of a script's keys share a slot.

A claim whose outcome is unknown (the connection timed out or broke after the script was
sent, or the caller was cancelled) is released at once, not left to ``pending_ttl``: otherwise
the agent's retry would be refused as "still being processed" for a minute. Each begin-turn
attempt carries a random token in its marker; the release (``lua/turn_release.lua`` with that token)
removes only a marker carrying it, and first marks the token released for ``pending_ttl``
(:func:`keys.released_claim_key`), so the script, should it reach Redis only after the release
(over the old connection), claims nothing.

With ``cache.wait_replicas`` (1 by default under Sentinel), claims and replies are written with
``WAIT`` behind them (:meth:`RedisPipe.execute`): a turn runs the bot only once its marker is on
a replica, and a reply is returned only once a replica holds it, so a failover that promotes that
replica keeps both.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple, Protocol

from gateway.config import CacheConfig
from gateway.store import keys, lua, replies
from gateway.store.base import (
    ConversationStore,
    GrantCheck,
    Owner,
    StoreError,
    TurnClaim,
    TurnStatus,
    text_digest,
)
from gateway.store.gcra import US, Hit, script_arguments, time_argument
from gateway.store.redis_cluster import ClusterObserver, ClusterPipe, open_pipe
from gateway.store.redis_pipe import NOT_RUN_CODES, RedisPipe, ReplyRefused, Script
from gateway.store.slots import hashed_part

log = logging.getLogger("pact_gateway.store")

# Each script is a file of gateway/store/lua (its header: what it takes, returns and why it is one
# script), read once, here; the names are those the rest of the store, and its tests, call them by.
REPLY_LUA: Final = lua.library("lib/reply.lua")
"""Lua defining ``put_reply`` and ``get_reply``: a stored reply in pieces no longer than a listpack value."""
_OPEN = Script(lua.source("turn_open.lua"))
_CONTINUE = Script(lua.source("turn_continue.lua"))
_COMPLETE = Script(lua.source("turn_complete.lua"))
_ABORT = Script(lua.source("turn_release.lua"))
CHARGE = Script(lua.source("limit_charge.lua"))
"""A §6 charge on its own: the rate limiter's, and a turn's counters in another slot than its conversation."""
REFUND = Script(lua.source("limit_refund.lua"))
"""One charge given back to each counter: what a request another counter refused had charged."""
PEEK = Script(lua.source("limit_peek.lua"))
"""The counters and the node's clock read, no write: what a charge would decide on."""

_READY_KEY: Final = f"{keys.PREFIX}:readyz"
"""Deleted (it never exists) by the readiness check: a write that only a primary accepts, and that
changes nothing, so it reaches neither the replicas nor the append-only file."""
INDEX_SLACK_MS: Final = 60_000
"""How long past its deadline a conversation stays in its owner's index: the deadline is taken on the
gateway's clock, the expiry on Redis's, and a conversation must never leave the index before it expires."""
FIRST_DIGEST: Final = 8
"""Bytes of a first message's text digest in its record (``lua/lib/upgrade.lua`` takes as many hex digits
of the previous release's): it only tells one text sent under the same owner and ``messageId`` within
the retry window from another, and 64 bits do that; with them a record fits Redis's one-allocation
string (44 bytes)."""
LATE_RELEASE_PAUSE: Final = 0.25
"""Seconds before a release that failed is tried again in the background (doubled each time, up to
:data:`LATE_RELEASE_MAX_PAUSE`): a failover's promotion takes seconds, and once it is done the
marker should go within a fraction of one."""
LATE_RELEASE_MAX_PAUSE: Final = 1.0
"""The longest pause between two tries of a late release: how long after Redis answers again a
marker may still stand."""
LateOutcome = Literal["released", "abandoned"]
"""What became of a release tried again in the background: done, or given up when its marker lapsed."""
_TAKEOVERS: Final = 3
"""Rounds a retried first message may go through when concurrent copies of it keep taking its
first-message record over; past them it is one of those duplicates, answered as still in flight."""


def _token() -> str:
    """A begin-turn attempt's token: 64 random bits; it names no one and grants nothing."""
    return f"{random.getrandbits(64):016x}"


class ReleaseObserver(Protocol):
    """Who hears of releases tried again in the background (``gateway.ops.metrics.Metrics``)."""

    def late_release(self, outcome: LateOutcome) -> None:
        """A release that had failed: ``released`` later, or ``abandoned`` when its marker lapsed."""


class Layouts(NamedTuple):
    """Where one owner's conversations are: the layout written (``tag``: the owner's tag, or ``""``
    for the previous release's keys), the other current one (``other``, ``None`` where not read) and
    whether the older ``conv:`` layout is read too (``older``)."""

    tag: str
    other: str | None
    older: bool


@dataclass
class _ApartCharge:
    """A turn's §6 counters charged beside its script (the per-agent one, tagged layout), and what
    became of them: with ``fail_open`` (``rate_limits.fail_open``) a charge that fails (its node is
    down) leaves the turn ``uncounted`` by them, for that failure's reason, rather than failing it."""

    fail_open: bool
    uncounted: str = ""


class RedisStore(ConversationStore):
    """Conversations on Redis, in the layout ``cache.key_layout`` names, reading every layout.

    ``reads_previous``: read the untagged layouts too (the previous release's, and the older
    ``conv:`` one). True on a single Redis and under Sentinel, where a script may touch keys of
    any slot; False on a Redis Cluster, which never held them (the previous release could not run
    on one, and only ``tagged`` is allowed there) and where every key of a script must share its
    slot: their keys are then passed as ``""``, which the scripts skip.
    ``slot_bound``: whether a script may touch keys of one hash slot only: on a Redis Cluster
    (``None``: as the connection is); a test on one Redis passes ``True`` to run as on a cluster.
    ``cluster_observer`` hears what the cluster client does, on a Redis Cluster; ``release_observer``
    how the releases tried again in the background ended.

    A release that fails (a failover, a node gone) is not dropped: an in-flight marker left behind
    would answer every retry of its message "still being processed" until ``cache.pending_ttl``
    (issue 27). Releases are idempotent, so it is tried again in the background, paced, until it
    is done or its marker has lapsed anyway (``pending_ttl`` after the failure, which is later than
    the claim); one that never got through is logged once and counted. What is held meanwhile is
    one task per turn whose release failed in the last ``pending_ttl``: no more than the turns that
    were in flight when the store went away, and what they held already.
    ``clock``: a test's clock, then the time of everything here, §6 counters included; without
    one, the wall clock, and each §6 counter's node's own clock (:mod:`gateway.store.gcra`).
    """

    def __init__(
        self,
        config: CacheConfig,
        *,
        clock: Callable[[], float] | None = None,
        reads_previous: bool = True,
        slot_bound: bool | None = None,
        cluster_observer: ClusterObserver | None = None,
        release_observer: ReleaseObserver | None = None,
    ) -> None:
        self._config = config
        self._release_observer = release_observer
        self._late: set[asyncio.Task[None]] = set()
        self._clock = clock or time.time
        self._counter_clock = clock
        self._tagged = config.key_layout == "tagged"
        self._redis = open_pipe(config, cluster_observer)
        self._reads_previous = reads_previous and not isinstance(self._redis, ClusterPipe)
        self._slot_bound = isinstance(self._redis, ClusterPipe) if slot_bound is None else slot_bound

    @property
    def redis(self) -> RedisPipe:
        """The connection; other Redis state (rate limits, grants) shares it."""
        return self._redis

    @property
    def counter_clock(self) -> Callable[[], float] | None:
        """The clock the §6 counters are charged by: ``None`` for each counter's node's own."""
        return self._counter_clock

    def _counter_now(self, now: float) -> int | None:
        """A charge's time (µs) for a turn begun at ``now``: ``None`` (the node's, as it runs) unless
        the store was given a clock."""
        return None if self._counter_clock is None else int(now * US)

    @property
    def tagged(self) -> bool:
        """Whether this store writes the tagged layout (``cache.key_layout``)."""
        return self._tagged

    @property
    def reads_previous(self) -> bool:
        """Whether the untagged layouts are read (see the class docstring)."""
        return self._reads_previous

    def layouts(self, owner: Owner) -> Layouts:
        """Where ``owner``'s conversations may be, for this store and the admin beside it."""
        tag = keys.owner_tag(owner.digest)
        if self._tagged:
            return Layouts(tag, "" if self._reads_previous else None, self._reads_previous)
        return Layouts("", tag, True)

    @property
    def _record_ttl(self) -> int:
        return self._config.conversation_ttl + self._config.closed_ttl

    def _grant_may_be_owners(self, grant_key: str, owner: Owner) -> bool:
        """§5.5 without a round trip where the key decides: a grant under a hash tag is its owner's
        (grant ids carry it, :func:`keys.grant_key`), so one under another owner's tag is never
        ``owner``'s, and an untagged one exists only where the untagged layouts are read. On a Redis
        Cluster the begin-turn script could not even read such a grant (another slot)."""
        part = hashed_part(grant_key.encode())
        if part == grant_key.encode():
            return self._reads_previous
        return part == keys.owner_tag(owner.digest).encode()

    def _split(self, owner: Owner, limits: Sequence[Hit]) -> tuple[list[Hit], list[Hit]]:
        """The counters the turn's script charges, and those charged beside it (:data:`CHARGE`).

        On a Redis Cluster (tagged, the only layout there) a counter rides in the script only if it
        is under the owner's tag (the per-person one, :func:`gateway.ops.limits.RateLimits.charge`);
        the per-agent counter is in a slot of its own. On one Redis or under Sentinel, where a script
        may touch any key, every counter rides in the script, whatever the layout: a call apart cost
        a turn 255,000 instructions (a sixth of a Redis turn, ``python -m bench turn_count`` on
        Redis) for no round trip saved.
        """
        if not (self._tagged and self._slot_bound):
            return list(limits), []
        tag = keys.owner_tag(owner.digest).encode()
        inline: list[Hit] = []
        apart: list[Hit] = []
        for hit in limits:
            (inline if hashed_part(hit.key.encode()) == tag else apart).append(hit)
        return inline, apart

    async def _claiming(
        self,
        script: Script,
        keys_: list[str | bytes],
        args: list[Any],
        release: tuple[Owner, str, bytes, str, bool],
        charge: tuple[Sequence[Hit], Sequence[Hit], int | None] = ((), (), None),
        outcome: _ApartCharge | None = None,
    ) -> list[Any]:
        """Run a begin-turn script; if its outcome is unknown, release what it may have claimed.

        ``release`` is ``(owner, context id, turn field, token, new conversation)``: what
        :meth:`abort_turn` would be given (its ``messageId`` as :func:`keys.message_digest`),
        plus the attempt's token. The release runs whatever went wrong (a timeout, a broken
        connection, an error answer, the caller cancelled), on a new connection if need be,
        shielded from cancellation; if Redis cannot be reached for it either, it is tried again in
        the background (:meth:`_release_later`). Only an answer given instead of running the
        script (:data:`~gateway.store.redis_pipe.NOT_RUN_CODES`: a slot migrating, the cluster
        down) needs none: it claimed nothing.

        ``charge`` is ``(every limit of the turn, those charged apart, now)`` (µs, ``None`` for the
        counters' node's clock): the counters apart are charged by their own script, started
        before this one's so that the pipe sends both in one write (one round trip). The charge
        stays all or nothing, as in one script: when a counter refuses, those that allowed on the
        other side are given back (:data:`REFUND`, sent with the claim's release when the turn's
        script claimed), one more round trip on the refusal path only; the answer is then
        ``{'limited', wait per limit}`` in ``limits``' order. When that charge fails and
        ``outcome`` says to serve anyway, the turn goes on and ``outcome`` records it as uncounted.
        """
        limits, apart, now = charge
        charged = asyncio.ensure_future(charge_by_slot(self._redis, apart, now)) if apart else None
        try:
            result: list[Any] = await self._redis.run(script, keys_, args, replicated=True)
        except BaseException as failed:
            if charged is not None:
                # Its answer no longer matters (the turn fails); its failure is not to be logged as lost.
                charged.cancel()
                charged.add_done_callback(_settled)
            # A script refused unrun (a slot still migrating when cache.timeout ended) claimed nothing.
            if not (isinstance(failed, ReplyRefused) and failed.code in NOT_RUN_CODES):
                await asyncio.shield(self._release(*release))
            raise
        apart_keys = {hit.key for hit in apart}
        inline = [hit for hit in limits if hit.key not in apart_keys]
        # The script charged its own counters unless it refused or did nothing (a released attempt).
        spent_here = result[0] not in (b"limited", b"released")
        claimed = result[0] == b"new"
        try:
            waits = {} if charged is None else await self._charged_apart(charged, outcome)
        except BaseException:
            await asyncio.shield(
                self._give_back(release if claimed else None, inline if spent_here else [], now)
            )
            raise
        refused_here = result[0] == b"limited"
        if charged is None or (not any(waits.values()) and not refused_here):
            return result
        # Given back: what was charged and allowed on each side of the one that refused.
        back = [hit for hit in apart if waits.get(hit.key) == 0]
        if spent_here:
            back += inline
        await asyncio.shield(self._give_back(release if claimed else None, back, now))
        script_waits = iter(result[1:] if refused_here else ())
        return [
            b"limited",
            *(
                waits.get(hit.key, 0) if hit.key in apart_keys else int(next(script_waits, 0))
                for hit in limits
            ),
        ]

    @staticmethod
    async def _charged_apart(
        charged: asyncio.Future[dict[str, int]], outcome: _ApartCharge | None
    ) -> dict[str, int]:
        """The counters charged apart: their waits, or none (not counted) if their charge failed
        and ``outcome`` serves anyway; otherwise the failure, which fails the claim."""
        try:
            return await charged
        except StoreError as failed:
            if outcome is None or not outcome.fail_open:
                raise
            outcome.uncounted = str(failed)
            return {}

    async def _give_back(
        self, release: tuple[Owner, str, bytes, str, bool] | None, hits: Sequence[Hit], now: int | None
    ) -> None:
        """A refused or failed turn's aftermath: its claim released (``release``, if the script
        claimed) and ``hits`` refunded, sent together. A failure leaves the marker to ``pending_ttl``
        and the charge to lapse (a burst's worth at most): the refusal is answered either way."""
        with contextlib.suppress(StoreError):
            await asyncio.gather(
                *((self._release(*release),) if release is not None else ()),
                *((refund_by_slot(self._redis, hits, now),) if hits else ()),
            )

    async def _release(
        self, owner: Owner, context_id: str, field: bytes, token: str, new_conversation: bool
    ) -> None:
        """A claim's release by its token (only its own marker, however late), tried again in the
        background if it fails now."""
        release = functools.partial(self._abort, owner, context_id, field, new_conversation, token, "")
        try:
            await release()
        except StoreError:
            self._release_later(release)

    def _release_later(self, release: Callable[[], Awaitable[None]]) -> None:
        task = asyncio.get_running_loop().create_task(
            self._releasing(release, time.monotonic() + self._config.pending_ttl)
        )
        self._late.add(task)
        task.add_done_callback(self._late.discard)

    async def _releasing(self, release: Callable[[], Awaitable[None]], until: float) -> None:
        """``release`` tried again until it is done or ``until`` (a monotonic time): then its marker
        has lapsed, and what it could not do is said once (a log line, a metric)."""
        pause = LATE_RELEASE_PAUSE
        failure = ""
        while (left := until - time.monotonic()) > 0:
            await asyncio.sleep(min(pause, left))
            try:
                await release()
            except StoreError as exc:
                failure = str(exc)
                pause = min(2 * pause, LATE_RELEASE_MAX_PAUSE)
                continue
            self._late_released("released")
            return
        self._late_released("abandoned")
        log.error(
            "an in-flight marker stayed until cache.pending_ttl (%ds): its release failed until then "
            "(%s), so retries of its message were answered 'still being processed'",
            self._config.pending_ttl,
            failure or "no time to retry",
        )

    def _late_released(self, outcome: LateOutcome) -> None:
        if self._release_observer is not None:
            self._release_observer.late_release(outcome)

    async def _open(
        self,
        owner: Owner,
        context_id: str,
        first: bytes | None,
        field: bytes,
        digest: bytes,
        now: float,
        token: str,
        *,
        message_id: str,
        takes_over: bytes = b"",
        limits: Sequence[Hit] = (),
        grant: GrantCheck | None = None,
        outcome: _ApartCharge | None = None,
    ) -> list[Any]:
        """``first``: the message's first-message key in the written layout, or ``None`` (no check)."""
        inline, apart = self._split(owner, limits)
        limit_keys, limit_args = script_arguments(inline, self._counter_now(now))
        now_ms = int(now * 1000)
        where = self.layouts(owner)
        brand, raw = owner.brand_id, owner.digest_bytes
        checked = first is not None
        return await self._claiming(
            _OPEN,
            [
                *limit_keys,
                keys.conv_key(brand, context_id, where.tag),
                first or b"",
                "" if grant is None else grant.grant_key,
                keys.conv_index_key(brand, raw, where.tag),
                keys.first_message_key(brand, owner.digest, message_id) if checked and where.older else "",
                keys.first_key(brand, raw, field, where.other)
                if checked and where.other is not None
                else b"",
                keys.claim_released_key(brand, token, where.tag),
            ],
            [
                *limit_args,
                raw,
                owner.digest,
                field,
                now_ms,
                now_ms + self._config.pending_ttl * 1000,
                self._record_ttl,
                self._config.retry_window,
                digest + context_id.encode(),
                b"" if grant is None else bytes.fromhex(grant.user_digest),
                takes_over,
                context_id,
                (now_ms - INDEX_SLACK_MS) // 1000,
                token,
            ],
            (owner, context_id, field, token, True),
            (limits, apart, self._counter_now(now)),
            outcome,
        )

    async def _continue(
        self,
        owner: Owner,
        context_id: str,
        field: bytes,
        now: float,
        token: str,
        limits: Sequence[Hit] = (),
        grant: GrantCheck | None = None,
        outcome: _ApartCharge | None = None,
    ) -> TurnClaim:
        inline, apart = self._split(owner, limits)
        limit_keys, limit_args = script_arguments(inline, self._counter_now(now))
        now_ms = int(now * 1000)
        where = self.layouts(owner)
        brand, raw = owner.brand_id, owner.digest_bytes
        other = where.other
        result = await self._claiming(
            _CONTINUE,
            [
                *limit_keys,
                keys.conv_key(brand, context_id, where.tag),
                "" if grant is None else grant.grant_key,
                keys.conversation_key(brand, context_id) if where.older else "",
                keys.conv_index_key(brand, raw, where.tag),
                "" if other is None else keys.conv_key(brand, context_id, other),
                b"" if other is None else keys.conv_index_key(brand, raw, other),
                keys.claim_released_key(brand, token, where.tag),
            ],
            [
                *limit_args,
                raw,
                owner.digest,
                field,
                now_ms,
                now_ms + self._config.pending_ttl * 1000,
                self._config.conversation_ttl * 1000,
                b"" if grant is None else bytes.fromhex(grant.user_digest),
                context_id,
                keys.first_message_key(brand, owner.digest, ""),
                keys.first_key(brand, raw, b"", where.tag),
                token,
            ],
            (owner, context_id, field, token, False),
            (limits, apart, self._counter_now(now)),
            outcome,
        )

        verdict = result[0]
        if verdict == b"unknown":
            return TurnClaim(TurnStatus.UNKNOWN_CONTEXT)
        if verdict == b"replay":
            return TurnClaim(TurnStatus.REPLAY, context_id, reply=replies.unpack(result[1], context_id))
        if verdict == b"closed":
            return TurnClaim(TurnStatus.CLOSED, context_id)
        if verdict == b"in_flight":
            return TurnClaim(TurnStatus.IN_FLIGHT, context_id)
        if verdict == b"limited":
            return _limited(result)
        if verdict == b"revoked":
            return TurnClaim(TurnStatus.GRANT_REVOKED)
        if verdict == b"mismatch":
            return TurnClaim(TurnStatus.USER_MISMATCH)
        return TurnClaim(TurnStatus.NEW, context_id, new_conversation=len(result) < 2 or result[1] != b"1")

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
        """One round trip on the hot path (the limits and the grant check ride along in the script).

        Rarer paths, none of which charges the limits again: a first message retried without
        ``contextId`` within the retry window takes a second (``_CONTINUE`` claims the earlier
        conversation); one whose ``messageId`` an earlier, different first message used takes a
        second too (its own ``_OPEN`` without the retry check), and a third when the retried
        message's earlier conversation is gone or was closed without answering it (an
        ``_OPEN`` that takes the first-message record over, unless a concurrent copy of the
        message took it first: then the next round claims that copy's conversation).
        """
        outcome = _ApartCharge(fail_open)
        claim = await self._begin(owner, context_id, message_id, text, new_context_id, limits, grant, outcome)
        return claim._replace(uncounted=outcome.uncounted) if outcome.uncounted else claim

    async def _begin(
        self,
        owner: Owner,
        context_id: str | None,
        message_id: str,
        text: str,
        new_context_id: str,
        limits: Sequence[Hit],
        grant: GrantCheck | None,
        outcome: _ApartCharge,
    ) -> TurnClaim:
        if grant is not None and not self._grant_may_be_owners(grant.grant_key, owner):
            return TurnClaim(TurnStatus.GRANT_REVOKED)
        now = self._clock()
        token = _token()
        field = keys.message_digest(message_id)
        if context_id is not None:
            return await self._continue(owner, context_id, field, now, token, limits, grant, outcome)
        digest = text_digest(text)[:FIRST_DIGEST]
        first = keys.first_key(owner.brand_id, owner.digest_bytes, field, self.layouts(owner).tag)
        result = await self._open(
            owner,
            new_context_id,
            first,
            field,
            digest,
            now,
            token,
            message_id=message_id,
            limits=limits,
            grant=grant,
            outcome=outcome,
        )
        for _ in range(_TAKEOVERS):
            if result[0] == b"new":
                return TurnClaim(TurnStatus.NEW, new_context_id, new_conversation=True)
            if result[0] == b"limited":
                return _limited(result)
            if result[0] == b"revoked":
                return TurnClaim(TurnStatus.GRANT_REVOKED)
            earlier: bytes = result[1]
            earlier_digest, earlier_context = earlier[: len(digest)], earlier[len(digest) :].decode()
            if earlier_digest != digest:
                # A different first message that reuses a messageId opens its own conversation, unchecked.
                result = await self._open(
                    owner, new_context_id, None, field, digest, now, token, message_id=message_id, grant=grant
                )
                if result[0] == b"revoked":
                    return TurnClaim(TurnStatus.GRANT_REVOKED)
                return TurnClaim(TurnStatus.NEW, new_context_id, new_conversation=True)
            # The grant is checked again by each later script: it may have been revoked in between.
            claim = await self._continue(owner, earlier_context, field, now, token, grant=grant)
            if claim.status not in (TurnStatus.UNKNOWN_CONTEXT, TurnStatus.CLOSED):
                return claim
            # §4.3 with §4.2 (see ConversationStore.begin_turn): nothing of this message to replay,
            # so it starts the conversation it asks for, and becomes what a later retry finds.
            result = await self._open(
                owner,
                new_context_id,
                first,
                field,
                digest,
                now,
                token,
                message_id=message_id,
                takes_over=earlier,
                grant=grant,
            )
        return TurnClaim(TurnStatus.IN_FLIGHT)

    async def complete_turn(
        self, owner: Owner, context_id: str, message_id: str, reply: bytes, *, close: bool
    ) -> None:
        where = self.layouts(owner)
        other = where.other
        await self._redis.run(
            _COMPLETE,
            [
                keys.conv_key(owner.brand_id, context_id, where.tag),
                keys.conv_index_key(owner.brand_id, owner.digest_bytes, where.tag),
                "" if other is None else keys.conv_key(owner.brand_id, context_id, other),
                b"" if other is None else keys.conv_index_key(owner.brand_id, owner.digest_bytes, other),
            ],
            [
                owner.digest_bytes,
                keys.message_digest(message_id),
                replies.pack(reply, context_id),
                int(self._clock() * 1000),
                1 if close else 0,
                self._config.closed_ttl if close else self._record_ttl,
                context_id,
            ],
            replicated=True,
            idempotent=True,  # the same reply stored twice is stored once
        )

    async def abort_turn(
        self, owner: Owner, context_id: str, message_id: str, *, new_conversation: bool
    ) -> None:
        """The turn's marker released, within ``cache.timeout`` (sent again through a failover); if
        that fails, :class:`StoreError` all the same, and it is tried again in the background.

        Without the claim's token, a late release is bounded by time instead: the turn's marker has a
        deadline of at most now + ``pending_ttl``, and a claim made after it lapsed has a later one,
        which no release sent for this turn removes."""
        latest = int(self._clock() * 1000) + self._config.pending_ttl * 1000
        release = functools.partial(
            self._abort, owner, context_id, keys.message_digest(message_id), new_conversation, "", latest
        )
        try:
            await release()
        except StoreError:
            self._release_later(release)
            raise

    async def _abort(
        self,
        owner: Owner,
        context_id: str,
        field: bytes,
        new_conversation: bool,
        token: str,
        latest: int | str,
    ) -> None:
        where = self.layouts(owner)
        await self._redis.run(
            _ABORT,
            [
                keys.conv_key(owner.brand_id, context_id, where.tag),
                keys.first_key(owner.brand_id, owner.digest_bytes, field, where.tag),
                keys.claim_released_key(owner.brand_id, token, where.tag),
                "" if where.other is None else keys.conv_key(owner.brand_id, context_id, where.other),
            ],
            [
                owner.digest_bytes,
                field,
                1 if new_conversation else 0,
                context_id,
                token,
                self._config.pending_ttl,
                latest,
            ],
            idempotent=True,
        )

    async def start(self) -> None:
        """Nothing to start: Redis expires the keys itself."""

    async def ping(self) -> None:
        """Ready as turns are: a write only a primary accepts, with the replicas turns wait for.

        A replica (``READONLY``), a server still loading, or a primary without the replicas
        ``cache.replicas`` asks for fails it, and makes the pipe reconnect (under Sentinel, to
        the primary the sentinels name now). On a Redis Cluster the same write goes to every
        primary, once every slot is served (:meth:`ClusterPipe.ping`, issue 20).
        """
        if isinstance(self._redis, ClusterPipe):
            await self._redis.ping()
            return
        await self._redis.execute("DEL", _READY_KEY, replicated=True)

    @property
    def clock(self) -> Callable[[], float]:
        """This store's time; the rate limiter beside it keeps the same, so both charge one budget alike."""
        return self._clock

    async def close(self) -> None:
        for task in self._late:
            task.cancel()
        await asyncio.gather(*self._late, return_exceptions=True)
        await self._redis.close()


def by_slot(hits: Sequence[Hit]) -> list[list[Hit]]:
    """``hits`` grouped by hash slot: what one script may charge together on a Redis Cluster."""
    groups: dict[bytes, list[Hit]] = {}
    for hit in hits:
        groups.setdefault(hashed_part(hit.key.encode()), []).append(hit)
    return list(groups.values())


async def refund_by_slot(redis: RedisPipe, hits: Sequence[Hit], now: int | None) -> None:
    """Give back one charge of each of ``hits`` made at ``now`` (µs, ``None`` for the counters'
    node's clock), one :data:`REFUND` per slot, sent together: what a request that another counter
    refused had charged (all or nothing, §6)."""
    at = time_argument(now)
    await asyncio.gather(
        *(
            redis.run(REFUND, [hit.key for hit in group], [at, *(hit.rule.interval_us for hit in group)])
            for group in by_slot(hits)
        )
    )


async def charge_by_slot(redis: RedisPipe, hits: Sequence[Hit], now: int | None) -> dict[str, int]:
    """Charge ``hits`` at ``now`` (µs, ``None`` for the counters' node's clock), one :data:`CHARGE`
    per hash slot (each all or nothing), the scripts sent together: the wait per key (µs, 0 where
    allowed)."""
    groups = by_slot(hits)
    answers: list[list[Any]] = await asyncio.gather(
        *(redis.run(CHARGE, *script_arguments(group, now)) for group in groups)
    )
    return {
        hit.key: int(wait)
        for group, waits in zip(groups, answers, strict=True)
        for hit, wait in zip(group, waits, strict=True)
    }


def _settled(task: asyncio.Future[Any]) -> None:
    """Marks a task's outcome as seen, whatever it was."""
    if not task.cancelled():
        task.exception()


def _limited(result: list[Any]) -> TurnClaim:
    """A begin-turn script's ``{'limited', wait, ...}`` (µs per limit) as a claim."""
    return TurnClaim(TurnStatus.RATE_LIMITED, waits=tuple(int(wait) / US for wait in result[1:]))
