"""Redis Cluster (``redis+cluster://``, issue 20): a :class:`RedisPipe` per primary, each call to its slot's.

Why not redis-py's ``RedisCluster`` or coredis: per node they are the pooled clients that
``redis_pipe.py`` measured at five to six times this pipe's CPU per script call, and a cluster
only adds routing on top (a bench tool since folded out measured the two side by
side on a real cluster; docs/operations.md, Redis Cluster, has the figures). Routing is a table
look-up and a CRC16 of the key's hash tag (:mod:`gateway.store.slots`); everything a node's
connection does (pipelining, ``cache.timeout`` per command, ``WAIT`` behind a ``replicated``
call, ``READONLY``/``LOADING`` retiring the connection) is :class:`RedisPipe`'s, unchanged.

The slot map. Learned from the first node that answers, the known primaries first and then the
URL's seeds, with ``CLUSTER SHARDS`` (Redis 7) or ``CLUSTER SLOTS`` where that is unknown; one
look-up at a time, whoever asks for it. A call is sent to its slot's primary and:

- ``MOVED <slot> <node>``: the slot has moved for good (a reshard, or a failover told by the
  node that was demoted): the call goes to the named node, that slot is remapped at once, and the
  whole map is looked up again in the background (a failover moves thousands of slots at once).
- ``ASK <slot> <node>``: the slot is being migrated and this key is already on the importing
  node: the call goes there once, behind ``ASKING`` (on the same connection), the map unchanged.
- ``TRYAGAIN`` (a multi-key call in a slot being migrated while the node that was asked lacks
  one of its keys: on the importing node behind ``ASKING``, any key of the call not moved yet or
  not existing at all, such as a script's placeholder or a claim's released-token key, so every
  script of that slot meets it until the slot is assigned), ``CLUSTERDOWN`` (the cluster lost a
  slot's primary and has not promoted a replica yet) and the answers of a node that cannot serve
  us now (``LOADING``, ``READONLY``, ``MASTERDOWN``): nothing ran, so the call is tried again
  after a pause (doubled each time, up to :data:`MAX_PAUSE`), the map looked up again unless it
  was ``TRYAGAIN``.
- a lost or unreachable connection (or ``WAIT`` short of its replicas): the call may have run.
  The map is looked up again, since a failover or a node that left is the likely cause; a call
  sent as ``idempotent`` (a reply stored, a claim released: sending it twice does what once
  does) is then tried again after a pause like the above, on the slot's primary as the map names
  it by then; any other fails at once, and its caller treats the outcome as unknown, as on one
  Redis.

Redirects are followed at once, the first :data:`FREE_HOPS` of a call; later ones wait the
call's pause first (two nodes whose maps disagree would otherwise bounce it back and forth as
fast as the network allows). Nothing counts them: a call fails with the last answer once
``cache.timeout`` has passed since it started (a slot being migrated answers ``TRYAGAIN`` for as
long as the migration of its keys takes, which is no number of redirects). A retry is started
only with a tenth of the timeout still ahead of it, and one still unanswered at the deadline is
given up. That bound matters beyond the caller's wait: a call's arguments were computed when it
started (a claim's deadlines among them), and a call that ran late would act on stale ones. A
node that stops answering fails the calls sent to it, each after ``cache.timeout``; calls whose
slots live on other primaries go over their own connections and never wait behind it.

Every key of one call must hash to one slot (a Lua script may only touch keys of its slot): a
call whose keys do not is a programming error, refused with :class:`CrossSlotError` before
anything is sent. That includes an empty placeholder key (slot 0), which the server would refuse
with ``CROSSSLOT`` too: a placeholder must carry the call's tag.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, Literal, Protocol

from gateway.config import CacheConfig
from gateway.redis_url import ClusterAddress, parse_redis_url
from gateway.store.base import StoreError
from gateway.store.redis_pipe import NOT_RUN_CODES, Arg, RedisPipe, ReplyRefused, Script
from gateway.store.slots import SLOTS, key_slot, placeholders

__all__ = [
    "FREE_HOPS",
    "MAX_PAUSE",
    "ClusterObserver",
    "ClusterPipe",
    "CrossSlotError",
    "Node",
    "RedirectKind",
    "RefreshOutcome",
    "open_pipe",
]

FREE_HOPS: Final = 2
"""Redirects a call follows at once (a ``MOVED`` after a reshard, an ``ASK`` during one); past
them each waits the call's pause first: a map still in flux, not something to hammer."""
_RETRY_PAUSE: Final = 0.05
"""Seconds before a call that nothing ran (``TRYAGAIN``, ``CLUSTERDOWN``), or a failed idempotent
one, is tried again; doubled each time up to :data:`MAX_PAUSE`."""
MAX_PAUSE: Final = 0.2
"""The longest pause between two tries of a call: what a turn may wait beyond the moment its slot
is served again (a reshard's ``SETSLOT … NODE``, a replica promoted)."""
_NOTHING_RAN: Final = NOT_RUN_CODES - {"MOVED", "ASK"}
"""Error answers after which the call did not run, other than a redirect: it may be sent again after a
pause, idempotent or not."""
_REFRESH_GAP: Final = 0.1
"""Seconds at least between two map look-ups: a burst of failures asks the cluster once."""

Node = tuple[str, int]
RedirectKind = Literal["moved", "ask"]
RefreshOutcome = Literal["ok", "fallback", "failed", "incomplete"]


class CrossSlotError(ValueError):
    """The keys of one call hash to more than one slot: no cluster node could run it."""


class ClusterObserver(Protocol):
    """Who hears what the cluster client does (``gateway.ops.metrics.Metrics`` in the gateway)."""

    def cluster_command(self, node: str, ok: bool) -> None:
        """A call answered by ``node`` (``host:port``), or failed there (``ok`` false)."""

    def cluster_redirect(self, node: str, kind: RedirectKind) -> None:
        """``node`` redirected a call (``MOVED`` or ``ASK``)."""

    def cluster_refresh(self, outcome: RefreshOutcome) -> None:
        """A look-up of the slot map: ``ok`` (``CLUSTER SHARDS``), ``fallback`` (``CLUSTER SLOTS``),
        ``incomplete`` (an answer that leaves slots unserved) or ``failed`` (no node answered)."""


def _label(node: Node) -> str:
    return f"{node[0]}:{node[1]}"


_WHY: Final = {
    "ConnectionRefusedError": "connection refused",
    "TimeoutError": "no answer within cache.timeout",
    "ConnectionError": "connection lost",
    "gaierror": "host name not found",
}
"""What an operator reads for a node's failure, by the :class:`StoreError` the pipe raised."""


def _why(failed: StoreError) -> str:
    """Why one node did not give the slot map, in a few words (never a server's own error text)."""
    if isinstance(failed, ReplyRefused):
        return "cluster support disabled" if failed.cluster_disabled else f"refused ({failed.code})"
    reason = str(failed).removeprefix("redis: ")
    return _WHY.get(reason, reason)


class ClusterPipe(RedisPipe):
    """:class:`RedisPipe`'s calls over a Redis Cluster: each sent to its slot's primary (module docstring).

    A :class:`RedisPipe` to the modules that take one (the store, the rate limits, OAuth, admin):
    every public method is this class's own, and none of the base class's connection state is
    used; each node's connection is a plain :class:`RedisPipe` of its own.
    """

    def __init__(
        self,
        address: ClusterAddress,
        *,
        timeout: float,
        replicas: int = 0,
        observer: ClusterObserver | None = None,
    ) -> None:
        # The base's __init__ is not called: this pipe owns no connection of its own.
        self._cluster = address
        self._timeout = timeout
        self._replicas = replicas
        self._observer = observer
        self._nodes: dict[Node, RedisPipe] = {}
        self._slots: list[Node | None] = [None] * SLOTS
        self._replicas_online: dict[Node, int] = {}
        self._refreshing: asyncio.Task[None] | None = None
        self._last_refresh = float("-inf")
        self._background: set[asyncio.Task[None]] = set()
        self._ready_keys: dict[int, str] = {}

    # -- calls ------------------------------------------------------------------------------------

    async def execute(
        self, *args: Arg, replicated: bool = False, asking: bool = False, idempotent: bool = False
    ) -> Any:
        """One command, sent to the primary of its first key's slot (any primary if it has no key)."""
        slot = key_slot(args[1]) if len(args) > 1 and isinstance(args[1], str | bytes) else None
        return await self._call(
            slot, lambda pipe, ask: pipe.execute(*args, replicated=replicated, asking=ask), idempotent
        )

    async def run(
        self,
        script: Script,
        keys: Sequence[str | bytes],
        args: Sequence[Arg],
        *,
        replicated: bool = False,
        asking: bool = False,
        idempotent: bool = False,
    ) -> Any:
        """The script on the primary of its keys' one slot; :class:`CrossSlotError` if they span several.

        An empty key (a script's "no such key") is sent as the others' hash tag (:func:`placeholders`).
        """
        named = placeholders(keys)
        slot = common_slot(named)
        return await self._call(
            slot,
            lambda pipe, ask: pipe.run(script, named, args, replicated=replicated, asking=ask),
            idempotent,
        )

    async def _call(
        self, slot: int | None, send: Callable[[RedisPipe, bool], Awaitable[Any]], idempotent: bool = False
    ) -> Any:
        loop = asyncio.get_running_loop()
        # A try is started only with a tenth of the timeout left for it: one cut short by the
        # deadline leaves its outcome unknown, where the answer it would have had says more.
        last_start = loop.time() + self._timeout * 0.9
        deadline = loop.time() + self._timeout
        node: Node | None = None
        asking = False
        pause = _RETRY_PAUSE
        hops = 0
        retried = False
        refused_last: ReplyRefused | None = None
        while True:
            try:
                # The first attempt is bounded by its connection's own timeout (cache.timeout); a
                # retry by what is left of the call's, so the whole call fails within cache.timeout.
                # A retry's command is then left to its connection, which discards the answer, as
                # for any caller that gave up.
                async with asyncio.timeout_at(deadline if retried else None):
                    if node is None:
                        node = await self._primary(slot)
                    reply = await send(self._pipe(node), asking)
            except TimeoutError:
                if node is not None:
                    self._observe(node, ok=False)
                elif refused_last is not None:
                    raise refused_last from None  # cut short looking the map up: nothing was sent
                raise StoreError("redis: TimeoutError") from None
            except ReplyRefused as refused:
                assert node is not None  # the map look-up raises StoreError, never an answer
                asking = False
                refused_last = refused
                # No try that would start too late: the call fails now, with this answer.
                waits = refused.redirect is None or hops >= FREE_HOPS
                if (refused.redirect is None and refused.code not in _NOTHING_RAN) or (
                    loop.time() + (pause if waits else 0.0) >= last_start
                ):
                    self._observe(node, ok=False)
                    raise
                if refused.redirect is not None:
                    moved_slot, host, port = refused.redirect
                    kind: RedirectKind = "moved" if refused.code == "MOVED" else "ask"
                    self._observe_redirect(node, kind)
                    node = (host, port)
                    if kind == "moved":
                        self._slots[moved_slot] = node
                        self._refresh_soon()
                    else:
                        asking = True
                    hops += 1
                else:
                    self._observe(node, ok=False)
                    if refused.code != "TRYAGAIN":  # the map moved, or is moving (a failover)
                        self._refresh_soon()
                    hops = 0
                    node = None  # the slot's primary again, as the map has it by then
                if waits:
                    await asyncio.sleep(pause)
                    pause = min(2 * pause, MAX_PAUSE)
                retried = True
                continue
            except StoreError:
                # No node to send to (the map has none for the slot: a failover, a slot taken down)
                # sent nothing, so any call may wait for one; a call sent may have run.
                sent = node is not None
                if node is not None:
                    self._observe(node, ok=False)
                self._refresh_soon()
                if (sent and not idempotent) or loop.time() + pause >= last_start:
                    if not sent and refused_last is not None:
                        raise refused_last from None  # what the cluster last answered: it ran nothing
                    raise
                await asyncio.sleep(pause)
                pause = min(2 * pause, MAX_PAUSE)
                hops = 0
                node = None
                retried = True
                continue
            self._observe(node, ok=True)
            return reply

    async def on_each_primary(self, *args: Arg) -> dict[str, Any]:
        """A keyless command (``DBSIZE``, ``INFO memory``) on every primary of the current map, by
        ``host:port``: what holds in the whole keyspace, or per shard, is their sum or their spread
        (the capacity bench's bytes per shard; the store suite's count of what a flow left)."""
        if None in self._slots:
            await self._refresh()
        primaries = self._primaries()
        answers = await asyncio.gather(*(self._pipe(node).execute(*args) for node in primaries))
        return {f"{host}:{port}": answer for (host, port), answer in zip(primaries, answers, strict=True)}

    async def _primary(self, slot: int | None) -> Node:
        """The primary serving ``slot`` (any primary for ``None``), looking the map up if unknown."""
        for _ in range(2):
            node = self._slots[slot] if slot is not None else next(iter(self._primaries()), None)
            if node is not None:
                return node
            await self._refresh()
        raise StoreError("redis: no cluster node serves the slot")

    def _pipe(self, node: Node) -> RedisPipe:
        pipe = self._nodes.get(node)
        if pipe is None:
            pipe = self._nodes[node] = RedisPipe(
                self._cluster.node(*node), timeout=self._timeout, replicas=self._replicas
            )
        return pipe

    def _primaries(self) -> list[Node]:
        return list(dict.fromkeys(node for node in self._slots if node is not None))

    # -- the slot map -----------------------------------------------------------------------------

    def _refresh_soon(self) -> None:
        """A look-up in the background, unless one runs already or ran a moment ago."""
        loop = asyncio.get_running_loop()
        if self._refreshing is not None or loop.time() - self._last_refresh < _REFRESH_GAP:
            return
        task = loop.create_task(self._refresh())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _refresh(self) -> None:
        """Look the slot map up (single flight: every caller waits on the same look-up)."""
        refreshing = self._refreshing
        if refreshing is None:
            refreshing = self._refreshing = asyncio.ensure_future(self._look_up())
            refreshing.add_done_callback(self._forget_refresh)
        await asyncio.shield(refreshing)

    def _forget_refresh(self, task: asyncio.Future[None]) -> None:
        if self._refreshing is task:
            self._refreshing = None
        if not task.cancelled():
            task.exception()  # retrieved: a failed look-up is reported through the observer

    async def _look_up(self) -> None:
        self._last_refresh = asyncio.get_running_loop().time()
        tried: list[str] = []
        for node in dict.fromkeys([*self._primaries(), *self._cluster.seeds]):
            pipe = self._pipe(node)
            outcome: RefreshOutcome = "ok"
            try:
                try:
                    shards = _parse_shards(await pipe.execute("CLUSTER", "SHARDS"), tls=self._cluster.tls)
                except ReplyRefused as refused:
                    if refused.code != "ERR":  # an older server: "unknown subcommand"
                        raise
                    outcome = "fallback"
                    shards = _parse_slots(await pipe.execute("CLUSTER", "SLOTS"))
            except StoreError as failed:
                tried.append(f"{_label(node)}: {_why(failed)}")
                continue  # down, or not a cluster node: ask the next
            slots: list[Node | None] = [None] * SLOTS
            replicas: dict[Node, int] = {}
            for primary, ranges, online in shards:
                replicas[primary] = online
                for start, end in ranges:
                    slots[start : end + 1] = [primary] * (end + 1 - start)
            self._slots = slots
            self._replicas_online = replicas
            self._notify("incomplete" if None in slots else outcome)
            return
        self._notify("failed")
        # Named node by node (/readyz shows it): a seed refused, a plain Redis, a wrong port.
        answers = "; ".join(tried)
        raise StoreError(f"redis: no cluster node answered CLUSTER SHARDS or CLUSTER SLOTS ({answers})")

    # -- readiness, closing -----------------------------------------------------------------------

    async def ping(self) -> None:
        """Ready when every slot is served by a reachable, writable primary with the replicas
        ``cache.wait_replicas`` asks for: a fresh look-up of the map, then on every primary a
        write (``DEL`` of a key of its own slots) followed by ``WAIT`` when replicas are asked for.
        """
        await self._refresh()
        if None in self._slots:
            served = SLOTS - self._slots.count(None)
            raise StoreError(f"redis: {served} of {SLOTS} cluster slots served")
        primaries = self._primaries()
        results = await asyncio.gather(*(self._ready(node) for node in primaries), return_exceptions=True)
        for node, result in zip(primaries, results, strict=True):
            self._observe(node, ok=not isinstance(result, BaseException))
        for result in results:
            if isinstance(result, BaseException):
                raise result

    async def _ready(self, node: Node) -> None:
        slot = self._slots.index(node)
        await self._pipe(node).execute("DEL", self._ready_key(slot), replicated=True)

    def _ready_key(self, slot: int) -> str:
        """A key of ``slot``, found once by trying tags in turn (about 16k CRCs for the first)."""
        key = self._ready_keys.get(slot)
        if key is None:
            number = 0
            while key_slot(candidate := f"pact:ready:{{{number}}}") != slot:
                number += 1
            key = self._ready_keys[slot] = candidate
        return key

    async def close(self) -> None:
        for task in [*self._background, *([self._refreshing] if self._refreshing else [])]:
            task.cancel()
        for pipe in self._nodes.values():
            await pipe.close()
        self._nodes.clear()

    # -- observation ------------------------------------------------------------------------------

    def _observe(self, node: Node, *, ok: bool) -> None:
        if self._observer is not None:
            self._observer.cluster_command(_label(node), ok)

    def _observe_redirect(self, node: Node, kind: RedirectKind) -> None:
        if self._observer is not None:
            self._observer.cluster_redirect(_label(node), kind)

    def _notify(self, outcome: RefreshOutcome) -> None:
        if self._observer is not None:
            self._observer.cluster_refresh(outcome)


def common_slot(keys: Iterable[str | bytes]) -> int | None:
    """The one slot of ``keys``, ``None`` if there is none; :class:`CrossSlotError` if they span several.

    An empty key counts like any other: the server checks every key a script is given, and ``""``
    is in slot 0 (``CROSSSLOT`` beside a key of any other slot); :meth:`ClusterPipe.run` names
    them by the call's hash tag first (:func:`gateway.store.slots.placeholders`)."""
    slots = {key_slot(key) for key in keys}
    if len(slots) > 1:
        raise CrossSlotError(f"keys of one call span cluster slots {sorted(slots)}: give them one hash tag")
    return next(iter(slots), None)


def _pairs(flat: Sequence[Any]) -> dict[bytes, Any]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _parse_shards(reply: Any, *, tls: bool) -> list[tuple[Node, list[tuple[int, int]], int]]:
    """``CLUSTER SHARDS`` (RESP2): each shard's primary, slot ranges and replicas online."""
    try:
        shards = []
        for shard in reply:
            fields = _pairs(shard)
            bounds = [int(bound) for bound in fields[b"slots"]]
            ranges = list(zip(bounds[::2], bounds[1::2], strict=True))
            primary: Node | None = None
            online = 0
            for raw in fields[b"nodes"]:
                node = _pairs(raw)
                if node.get(b"health") != b"online":
                    continue
                if node[b"role"] == b"master":
                    endpoint = node.get(b"endpoint", b"?")
                    host = (node[b"ip"] if endpoint in (b"?", b"") else endpoint).decode()
                    primary = host, int(node[b"tls-port" if tls else b"port"])
                else:
                    online += 1
            if primary is not None and ranges:
                shards.append((primary, ranges, online))
    except (TypeError, ValueError, KeyError, AttributeError):
        raise StoreError("redis: CLUSTER SHARDS answer not understood") from None
    return shards


def _parse_slots(reply: Any) -> list[tuple[Node, list[tuple[int, int]], int]]:
    """``CLUSTER SLOTS``: each range's primary and its replicas (their health is not told)."""
    try:
        return [
            ((entry[2][0].decode(), int(entry[2][1])), [(int(entry[0]), int(entry[1]))], len(entry) - 3)
            for entry in reply
        ]
    except (TypeError, ValueError, IndexError, AttributeError):
        raise StoreError("redis: CLUSTER SLOTS answer not understood") from None


def open_pipe(config: CacheConfig, observer: ClusterObserver | None = None) -> RedisPipe:
    """The pipe ``config.url`` names: a :class:`ClusterPipe` for a cluster URL, else a :class:`RedisPipe`."""
    address = parse_redis_url(config.url)
    if isinstance(address, ClusterAddress):
        return ClusterPipe(address, timeout=config.timeout, replicas=config.replicas, observer=observer)
    return RedisPipe(address, timeout=config.timeout, replicas=config.replicas)
