"""One pipelined Redis connection per process: commands written as they come, replies matched in order.

Why not a pooled client: every turn is two script calls, and the client's own per-command
machinery was most of the Redis backend's cost. At 32 concurrent callers on one core
(a bench tool since folded out), redis-py 8 with hiredis spends about 57 µs of CPU per
``EVALSHA`` (a pool lock, retry and observability hooks, a ``wait_for`` task per write and a
timeout per read) and coredis 6 about 61 µs; this connection spends about 10 µs. RESP answers
in request order, so one connection carries every concurrent turn: writes coalesce, the
server reads them in batches, and one watchdog timer bounds how long any command may wait.
The wire format is hiredis's (its reader and ``pack_command``, the C code redis-py uses).

Failure model. A command that gets no answer within ``timeout`` fails alone, with
:class:`~gateway.store.base.StoreError` (``redis: TimeoutError``), and its connection is retired:
no new command is written to it, while the commands already on it keep their own deadlines and
get their answers if the server catches up (a slow script or a stalled fork delays everything
behind it, but need not fail what still has time). Once nothing waits on a retired connection it
is closed, or aborted if it never answered; the next command opens a new one. A connection that
breaks fails everything on it (``redis: ConnectionError``). A command that failed this way may
still have run: its caller must treat the outcome as unknown (``RedisStore.begin_turn`` does). A
caller that gives up (its task is cancelled) leaves its slot in the queue, and its answer is read
and discarded, so the order never slips.

Answers that say the server cannot serve us any more retire the connection too: ``READONLY`` (a
primary demoted by a failover), ``LOADING`` (a restarted server reading its data back),
``MASTERDOWN`` (a replica cut off from its primary). The command that got one fails with it; the
next reconnects, and under Sentinel that asks the sentinels again where the primary is.

Sentinel (``redis+sentinel://``, :class:`~gateway.redis_url.SentinelAddress`): every connection
attempt first asks the sentinels, in turn, for the service's primary (``SENTINEL MASTER``, each
sentinel over a pipe of its own), and takes the first that names one not flagged down. A
failover is noticed through the connection: the old primary's ``READONLY`` once demoted, its
connections killed, or, with ``replicas`` set, a ``WAIT`` that finds no replica (Sentinel
leaves the old primary writable for about ten seconds after promoting its replica, and what is
written there in that time is lost). Each of those retires the connection, so the next command
asks again.

Durable writes (``replicas`` > 0): a command or script sent with ``replicated=True`` has ``WAIT``
right behind it, on the same connection (``WAIT`` counts that connection's writes), and
fails the call unless that many replicas acknowledged within half the timeout. It costs no
round trip of its own, but ``WAIT`` holds the connection until the acknowledgement, so every
command behind it waits that long too.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import ssl
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import hiredis

from gateway.redis_url import RedisAddress, SentinelAddress
from gateway.store.base import StoreError

__all__ = [
    "DEFAULT_TIMEOUT",
    "NOT_RUN_CODES",
    "RECONNECT_CODES",
    "Arg",
    "RedisAddress",
    "RedisPipe",
    "ReplyRefused",
    "Script",
    "SentinelAddress",
]

Arg = str | bytes | int
DEFAULT_TIMEOUT = 2.0
"""Seconds a command (or a connection attempt) may take before the connection is declared stuck."""
RECONNECT_CODES: Final = frozenset({"READONLY", "LOADING", "MASTERDOWN"})
"""Error answers that mean this server cannot serve the gateway now: reconnect (and re-ask Sentinel)."""
NOT_RUN_CODES: Final = frozenset({"MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", *RECONNECT_CODES})
"""Error answers given instead of running the command (a Redis Cluster's routing, a server that
cannot serve now): a call refused so did nothing, and has nothing to undo."""


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script, called by its SHA-1 and loaded on the server the first time it is missing."""

    source: str
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha", hashlib.sha1(self.source.encode(), usedforsecurity=False).hexdigest())


def _pack(command: tuple[Arg, ...]) -> bytes:
    # hiredis's type stub declares a one-element tuple and no result; the C function packs any length.
    packed: bytes = hiredis.pack_command(command)  # type: ignore[arg-type]
    return packed


class ReplyRefused(StoreError):
    """Redis answered a command with an error reply; only its code is kept (the text may quote data).

    A Redis Cluster redirection (``MOVED <slot> <host>:<port>``, ``ASK …``) quotes no data but
    where the slot is served now: :attr:`redirect` keeps that for the cluster client.
    """

    def __init__(self, reply: hiredis.ReplyError) -> None:
        words = str(reply).split(" ")
        self.code = words[0]
        self.cluster_disabled = self.code == "ERR" and "cluster support disabled" in str(reply)
        """Whether a plain Redis refused a ``CLUSTER`` command (a fixed text, quoting no data): what
        a cluster URL naming a server that is not a cluster node meets."""
        self.redirect: tuple[int, str, int] | None = None
        if self.code in ("MOVED", "ASK") and len(words) == 3 and words[1].isdigit():
            host, _, port = words[2].rpartition(":")
            if port.isdigit():
                self.redirect = int(words[1]), host, int(port)
        super().__init__(f"redis: {self.code}")


class _Protocol(asyncio.Protocol):
    """The socket's side: feeds bytes to hiredis and hands each reply to the oldest waiting command."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, on_lost: Callable[[_Protocol], None] | None = None
    ) -> None:
        self._loop = loop
        self._on_lost = on_lost
        self._reader = hiredis.Reader()
        self._waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._transport: asyncio.Transport | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._unsent: list[bytes] = []
        # Whether the last batch held one command: then no one is sending alongside (see send).
        self._alone = True
        self._connected = False
        self._retired = False
        self.open = False
        """Whether new commands may go on this connection: connected, and not retired."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # An idle connection that a NAT or firewall dropped is noticed by the kernel.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._connected = True
        self.open = True

    def send(self, packed: bytes, deadline: float) -> asyncio.Future[Any]:
        # Commands sent in one pass of the event loop leave together in one write at the start of
        # the next: one system call here and one read on the server for the batch (bench: 7.5 ->
        # 5.5 µs of client CPU and 6.0 -> 4.8 µs of server CPU per script call at 32 concurrent
        # callers). Except when the connection is idle and its last batch was a lone command:
        # then nobody is likely to send alongside, and holding the command back would cost a
        # pass of the loop for nothing (docs/performance.md has both sides measured).
        future: asyncio.Future[Any] = self._loop.create_future()
        if not self._waiting and self._alone:
            if self._connected and self._transport is not None:
                self._transport.write(packed)
        else:
            if not self._unsent:
                self._loop.call_soon(self._flush)
            self._unsent.append(packed)
        self._waiting.append((future, deadline))
        if self._watchdog is None:
            self._watchdog = self._loop.call_at(deadline, self._check_deadlines)
        return future

    def _flush(self) -> None:
        unsent, self._unsent = self._unsent, []
        self._alone = len(unsent) == 1
        # A retired connection still sends what was queued on it: those commands wait for answers.
        if self._connected and self._transport is not None:
            self._transport.write(b"".join(unsent))

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        waiting = self._waiting
        try:
            while (reply := self._reader.gets()) is not False:
                future, _ = waiting.popleft()
                if not future.done():
                    future.set_result(reply)
        except (hiredis.ProtocolError, IndexError):
            # Bytes that are not RESP, or a reply nobody asked for: nothing later can be trusted.
            self.abort("redis: protocol error")
            return
        if self._retired and not waiting:
            self._close()

    def _check_deadlines(self) -> None:
        """One timer for the whole queue: it sleeps until the oldest live command's deadline.

        Deadlines never decrease along the queue (each is its send time plus one timeout), so
        the expired commands are the live ones before the first with time left.
        """
        self._watchdog = None
        now = self._loop.time()
        for future, deadline in self._waiting:
            if future.done():
                continue  # failed already, or its caller gave up: only its slot remains
            if deadline > now:
                self._watchdog = self._loop.call_at(deadline, self._check_deadlines)
                return
            future.set_exception(StoreError("redis: TimeoutError"))
            self.retire()
        if self._retired and self._waiting:
            # Nobody waits any more on a connection that stopped answering: its slots would never clear.
            self.abort("redis: TimeoutError")

    def retire(self) -> None:
        """Write no new command on this connection; close it once the commands on it are answered."""
        self.open = False
        self._retired = True
        if not self._waiting:
            self._close()

    def _close(self) -> None:
        self._connected = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._transport is not None:
            self._transport.close()

    def abort(self, reason: str) -> None:
        """Fail every waiting command with a :class:`StoreError` of ``reason``; drop the connection."""
        self._fail_all(reason)
        if self._transport is not None:
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all("redis: ConnectionError")
        if self._on_lost is not None:
            self._on_lost(self)

    def _fail_all(self, reason: str) -> None:
        self.open = False
        self._connected = False
        self._unsent.clear()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._waiting:
            future, _ = self._waiting.popleft()
            if not future.done():
                future.set_exception(StoreError(reason))  # one each: a shared one would pile up tracebacks


class _Sentinels:
    """Where a Sentinel-watched primary is: the sentinels asked in turn, the first good answer taken.

    As Sentinel's client guidelines say, the sentinel that answered moves to the front, so the
    next look-up asks it first. Each sentinel has a pipe of its own (the same timeout, and the
    same reconnecting), kept open between look-ups.
    """

    def __init__(self, address: SentinelAddress, timeout: float) -> None:
        self._service = address.service
        self._pipes = [
            RedisPipe(address.sentinel_address(host, port), timeout=timeout)
            for host, port in address.sentinels
        ]

    async def primary(self) -> tuple[str, int]:
        for index, pipe in enumerate(self._pipes):
            try:
                reply = await pipe.execute("SENTINEL", "MASTER", self._service)
            except StoreError:
                continue  # down, slow, or does not watch the service: ask the next
            try:
                state = dict(zip(reply[::2], reply[1::2], strict=True))
                flags = set(state[b"flags"].split(b","))
                primary = state[b"ip"].decode(), int(state[b"port"])
            except (TypeError, ValueError, KeyError, AttributeError):
                continue  # not what a sentinel answers: ask the next
            if b"master" not in flags or flags & {b"s_down", b"o_down"}:
                continue  # a failover is under way: another sentinel may already know the new primary
            self._pipes.insert(0, self._pipes.pop(index))
            return primary
        raise StoreError("redis: no sentinel names a primary")

    async def close(self) -> None:
        for pipe in self._pipes:
            await pipe.close()


class RedisPipe:
    """Commands and scripts over one lazily opened, pipelined connection; failures are :class:`StoreError`.

    The connection opens on the first command, in the event loop that sends it (each worker
    process has its own), and reopens on the first command after it was lost or retired.
    ``replicas`` is how many replicas a ``replicated`` call waits for (see the module's docstring).
    """

    def __init__(
        self,
        address: RedisAddress | SentinelAddress,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        replicas: int = 0,
    ) -> None:
        self._address = address
        self._timeout = timeout
        self._replicas = replicas
        # Half the timeout: a WAIT that runs out still answers (0 replicas) before its deadline.
        self._wait_ms = max(1, int(timeout * 500))
        self._sentinels = _Sentinels(address, timeout) if isinstance(address, SentinelAddress) else None
        self._protocol: _Protocol | None = None
        self._connections: set[_Protocol] = set()
        """Every connection not yet lost: the current one, and retired ones still draining."""
        self._connecting: asyncio.Task[_Protocol] | None = None

    async def execute(
        self, *args: Arg, replicated: bool = False, asking: bool = False, idempotent: bool = False
    ) -> Any:
        """One command; its reply as hiredis parses it (bytes, int, list, ``None``).

        ``replicated``: also wait for the pipe's ``replicas`` to hold what the connection wrote.
        ``asking``: send ``ASKING`` right before it, on the same connection and in the same write
        (Redis Cluster's one-shot permission for a slot being imported, which only applies to the
        connection's next command).
        ``idempotent``: sending the command twice does what sending it once does, so a failed
        attempt may be sent again: a Redis Cluster does so after a failover, within the timeout
        (:class:`~gateway.store.redis_cluster.ClusterPipe`); one connection has no other node to
        send it to, and sends every command once.
        """
        protocol = await self._connected()
        deadline = asyncio.get_running_loop().time() + self._timeout
        waits = replicated and self._replicas
        if not (waits or asking):
            return _checked(protocol, await protocol.send(_pack(args), deadline))
        # Sent in this order now, with no await between: no other caller's command comes between.
        commands: list[tuple[Arg, ...]] = [("ASKING",)] if asking else []
        commands.append(args)
        if waits:
            commands.append(("WAIT", self._replicas, self._wait_ms))
        answers: list[Any] = await asyncio.gather(
            *(protocol.send(_pack(command), deadline) for command in commands), return_exceptions=True
        )
        if asking:
            _checked(protocol, answers.pop(0))
        if not waits:
            return _checked(protocol, answers[0])
        reply, acks = answers
        result = _checked(protocol, reply)
        acknowledged: int = _checked(protocol, acks)
        if acknowledged < self._replicas:
            # The primary lost its replicas: perhaps a failover promoted one and left this one
            # writable but doomed. Reconnecting asks Sentinel again.
            protocol.retire()
            raise StoreError(f"redis: {acknowledged} of {self._replicas} replicas acknowledged")
        return result

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
        """``EVALSHA``, falling back to ``EVAL`` (which caches the script) after a restart or flush.

        ``replicated``, ``asking``, ``idempotent``: as for :meth:`execute`."""
        try:
            return await self.execute(
                "EVALSHA", script.sha, len(keys), *keys, *args, replicated=replicated, asking=asking
            )
        except ReplyRefused as refused:
            if refused.code != "NOSCRIPT":
                raise
        return await self.execute(
            "EVAL", script.source, len(keys), *keys, *args, replicated=replicated, asking=asking
        )

    async def ping(self) -> None:
        await self.execute("PING")

    async def _connected(self) -> _Protocol:
        protocol = self._protocol
        if protocol is None or not protocol.open:
            protocol = await self._reconnect()
        return protocol

    async def _reconnect(self) -> _Protocol:
        # Single flight: every command arriving while the connection is down waits on one attempt,
        # shielded so that one caller giving up does not cancel it for the others.
        connecting = self._connecting
        if connecting is None:
            connecting = self._connecting = asyncio.ensure_future(self._connect())
            # Forgotten when it ends, whoever still waits: a later command must try afresh.
            connecting.add_done_callback(self._forget_attempt)
        try:
            protocol = await asyncio.shield(connecting)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if connecting.cancelled() and task is not None and task.cancelling() == 0:
                raise StoreError("redis: closed") from None  # close() ended the attempt, not our caller
            raise
        if not protocol.open:  # lost between the handshake and this caller resuming
            raise StoreError("redis: ConnectionError")
        return protocol

    def _forget_attempt(self, attempt: asyncio.Future[_Protocol]) -> None:
        if self._connecting is attempt:
            self._connecting = None

    async def _connect(self) -> _Protocol:
        loop = asyncio.get_running_loop()
        address = self._address
        if self._sentinels is None:
            assert isinstance(address, RedisAddress)
            host, port = address.host, address.port
        else:
            host, port = await self._sentinels.primary()
        tls = ssl.create_default_context() if address.tls else None
        try:
            async with asyncio.timeout(self._timeout):
                _, protocol = await loop.create_connection(
                    lambda: _Protocol(loop, self._connections.discard), host, port, ssl=tls
                )
        except TimeoutError:
            raise StoreError("redis: TimeoutError") from None
        except OSError as exc:  # ssl.SSLError is an OSError
            raise StoreError(f"redis: {type(exc).__name__}") from None
        self._connections.add(protocol)
        deadline = loop.time() + self._timeout
        try:
            for reply in await asyncio.gather(
                *(protocol.send(_pack(command), deadline) for command in address.handshake())
            ):
                if isinstance(reply, hiredis.ReplyError):
                    raise ReplyRefused(reply)
        except BaseException as exc:
            protocol.abort("redis: handshake failed")
            if isinstance(exc, ReplyRefused):
                raise StoreError(f"redis: handshake refused ({exc.code})") from None
            raise
        self._protocol = protocol
        return protocol

    async def close(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        for protocol in list(self._connections):
            protocol.abort("redis: closed")
        self._protocol = None
        if self._sentinels is not None:
            await self._sentinels.close()


def _checked(protocol: _Protocol, reply: Any) -> Any:
    """``reply``; :class:`ReplyRefused` for an error answer (retiring ``protocol`` if it says to); a
    failure gathered in its place (``StoreError``, ``CancelledError``) raised again."""
    if isinstance(reply, hiredis.ReplyError):
        refused = ReplyRefused(reply)
        if refused.code in RECONNECT_CODES:
            protocol.retire()
        raise refused
    if isinstance(reply, BaseException):
        raise reply
    return reply
