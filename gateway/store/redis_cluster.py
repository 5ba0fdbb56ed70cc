"""Redis Cluster (``redis+cluster://``, issue 20): a :class:`RedisPipe` per primary, each call to its slot's.

Why not redis-py's ``RedisCluster`` or coredis: per node they are the pooled clients that
``redis_pipe.py`` measured at five to six times this pipe's CPU per script call, and a cluster
only adds routing on top (``python -m bench.redis_client --cluster`` measures the two side by
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
- ``TRYAGAIN`` (a multi-key call in a slot being migrated, its keys split between the two
  nodes) and ``CLUSTERDOWN`` (the cluster lost a slot's primary and has not promoted a replica
  yet): nothing ran, so the call is tried again after a short pause, the map looked up again
  after a ``CLUSTERDOWN``.
- a lost or unreachable connection: the call fails (it may have run: its caller treats the
  outcome as unknown, as on one Redis), and the map is looked up again, since a failover or a
  node that left is the likely cause.

A call follows at most :data:`MAX_REDIRECTS` of those, and fails with the last answer once
``cache.timeout`` has passed since it started: a retry's pause never ends past it, and a retry
still unanswered then is given up. That bound matters beyond the caller's wait: a call's
arguments were computed when it started (a claim's deadlines among them), and a call that ran
late would act on stale ones. A node that stops answering fails the calls sent to it, each
after ``cache.timeout``; calls whose slots live on other primaries go over their own
connections and never wait behind it.

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
from gateway.store.redis_pipe import Arg, RedisPipe, ReplyRefused, Script
from gateway.store.slots import SLOTS, key_slot, placeholders

__all__ = [
    "MAX_REDIRECTS",
    "ClusterObserver",
    "ClusterPipe",
    "CrossSlotError",
    "Node",
    "RedirectKind",
    "RefreshOutcome",
    "open_pipe",
]

MAX_REDIRECTS: Final = 5
"""Redirections and retries one call follows at most: a slot moves once per reshard step, and a
map that still points elsewhere after five is one the next look-up must fix, not this call."""
_RETRY_PAUSE: Final = 0.05
"""Seconds before a ``TRYAGAIN`` or ``CLUSTERDOWN`` call is tried again (doubled each time)."""
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


async def _retry(
    send: Callable[[RedisPipe, bool], Awaitable[Any]], pipe: RedisPipe, asking: bool, deadline: float
) -> Any:
    """A call tried again, given up at the call's ``deadline`` (a loop time): its command is left
    to its connection, which discards the answer, as for any caller that gave up."""
    try:
        async with asyncio.timeout_at(deadline):
            return await send(pipe, asking)
    except TimeoutError:
        raise StoreError("redis: TimeoutError") from None


def _label(node: Node) -> str:
    return f"{node[0]}:{node[1]}"


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

    async def execute(self, *args: Arg, replicated: bool = False, asking: bool = False) -> Any:
        """One command, sent to the primary of its first key's slot (any primary if it has no key)."""
        slot = key_slot(args[1]) if len(args) > 1 and isinstance(args[1], str | bytes) else None
        return await self._call(
            slot, lambda pipe, ask: pipe.execute(*args, replicated=replicated, asking=ask)
        )

    async def run(
        self,
        script: Script,
        keys: Sequence[str | bytes],
        args: Sequence[Arg],
        *,
        replicated: bool = False,
        asking: bool = False,
    ) -> Any:
        """The script on the primary of its keys' one slot; :class:`CrossSlotError` if they span several.

        An empty key (a script's "no such key") is sent as the others' hash tag (:func:`placeholders`).
        """
        named = placeholders(keys)
        slot = common_slot(named)
        return await self._call(
            slot, lambda pipe, ask: pipe.run(script, named, args, replicated=replicated, asking=ask)
        )

    async def _call(self, slot: int | None, send: Callable[[RedisPipe, bool], Awaitable[Any]]) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        node = await self._primary(slot)
        asking = False
        pause = _RETRY_PAUSE
        for attempt in range(MAX_REDIRECTS + 1):
            last = attempt == MAX_REDIRECTS or loop.time() >= deadline
            try:
                # The first attempt is bounded by its connection's own timeout (cache.timeout); a
                # retry by what is left of the call's, so the whole call fails within cache.timeout.
                pipe = self._pipe(node)
                reply = await (_retry(send, pipe, asking, deadline) if attempt else send(pipe, asking))
            except ReplyRefused as refused:
                asking = False
                if refused.redirect is not None and not last:
                    moved_slot, host, port = refused.redirect
                    kind: RedirectKind = "moved" if refused.code == "MOVED" else "ask"
                    self._observe_redirect(node, kind)
                    node = (host, port)
                    if kind == "moved":
                        self._slots[moved_slot] = node
                        self._refresh_soon()
                    else:
                        asking = True
                    continue
                # No pause that would end at or past the deadline: the call fails now, with this answer.
                if (
                    refused.code in ("TRYAGAIN", "CLUSTERDOWN")
                    and not last
                    and loop.time() + pause < deadline
                ):
                    self._observe(node, ok=False)
                    if refused.code == "CLUSTERDOWN":
                        self._refresh_soon()
                    await asyncio.sleep(pause)
                    pause *= 2
                    node = await self._primary(slot)
                    continue
                self._observe(node, ok=False)
                raise
            except StoreError:
                self._observe(node, ok=False)
                self._refresh_soon()
                raise
            self._observe(node, ok=True)
            return reply
        raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover

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
        for node in [*self._primaries(), *self._cluster.seeds]:
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
            except StoreError:
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
        raise StoreError("redis: no cluster node answered CLUSTER SHARDS or CLUSTER SLOTS")

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
