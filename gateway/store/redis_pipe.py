"""One pipelined Redis connection per process: commands written as they come, replies matched in order.

Why not a pooled client: every turn is two script calls, and the client's own per-command
machinery was most of the Redis backend's cost. At 32 concurrent callers on one core
(``bench/redis_client.py``), redis-py 8 with hiredis spends about 57 µs of CPU per
``EVALSHA`` (a pool lock, retry and observability hooks, a ``wait_for`` task per write and a
timeout per read) and coredis 6 about 61 µs; this connection spends about 10 µs. RESP answers
in request order, so one connection carries every concurrent turn: writes coalesce, the
server reads them in batches, and one watchdog timer bounds how long any command may wait.
The wire format is hiredis's (its reader and ``pack_command``, the C code redis-py uses).

Failure model: a command that gets no answer within ``timeout`` means the connection is stuck,
and everything queued behind it is stuck too, so the connection is dropped and every waiting
command fails with :class:`~gateway.store.base.StoreError`; the next command reconnects. A
caller that gives up (its task is cancelled) leaves its slot in the queue, and its answer is
read and discarded, so the order never slips.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import ssl
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import hiredis

from gateway.store.base import StoreError

Arg = str | bytes | int
DEFAULT_TIMEOUT = 2.0
"""Seconds a command (or a connection attempt) may take before the connection is declared stuck."""


@dataclass(frozen=True, slots=True)
class RedisAddress:
    """Where and as whom to connect, from a ``redis://`` or ``rediss://`` (TLS) URL."""

    host: str
    port: int
    db: int
    username: str | None
    password: str | None = field(repr=False)
    tls: bool

    @classmethod
    def from_url(cls, url: str) -> RedisAddress:
        parts = urlsplit(url)
        db = parts.path.lstrip("/") or "0"
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 6379,
            db=int(db),
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            tls=parts.scheme == "rediss",
        )

    def handshake(self) -> list[tuple[Arg, ...]]:
        """The commands a fresh connection sends before any other: authenticate, pick the database."""
        commands: list[tuple[Arg, ...]] = []
        if self.password is not None:
            commands.append(
                ("AUTH", self.username, self.password) if self.username else ("AUTH", self.password)
            )
        if self.db:
            commands.append(("SELECT", self.db))
        return commands


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
    """Redis answered a command with an error reply; only its code is kept (the text may quote data)."""

    def __init__(self, reply: hiredis.ReplyError) -> None:
        self.code = str(reply).split(" ", 1)[0]
        super().__init__(f"redis: {self.code}")


class _Protocol(asyncio.Protocol):
    """The socket's side: feeds bytes to hiredis and hands each reply to the oldest waiting command."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._reader = hiredis.Reader()
        self._waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._transport: asyncio.Transport | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self._unsent: list[bytes] = []
        # Whether the last batch held one command: then no one is sending alongside (see send).
        self._alone = True
        self.open = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            # An idle connection that a NAT or firewall dropped is noticed by the kernel.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
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
            if self.open and self._transport is not None:
                self._transport.write(packed)
        else:
            if not self._unsent:
                self._loop.call_soon(self._flush)
            self._unsent.append(packed)
        self._waiting.append((future, deadline))
        if self._watchdog is None:
            self._watchdog = self._loop.call_at(deadline, self._check_oldest)
        return future

    def _flush(self) -> None:
        unsent, self._unsent = self._unsent, []
        self._alone = len(unsent) == 1
        if self.open and self._transport is not None:
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

    def _check_oldest(self) -> None:
        """One timer for the whole queue: it sleeps until the oldest command's deadline."""
        self._watchdog = None
        if not self._waiting:
            return
        deadline = self._waiting[0][1]
        if deadline <= self._loop.time():
            self.abort("redis: TimeoutError")
        else:
            self._watchdog = self._loop.call_at(deadline, self._check_oldest)

    def abort(self, reason: str) -> None:
        """Fail every waiting command with a :class:`StoreError` of ``reason``; drop the connection."""
        self._fail_all(reason)
        if self._transport is not None:
            self._transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail_all("redis: ConnectionError")

    def _fail_all(self, reason: str) -> None:
        self.open = False
        self._unsent.clear()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._waiting:
            future, _ = self._waiting.popleft()
            if not future.done():
                future.set_exception(StoreError(reason))  # one each: a shared one would pile up tracebacks


class RedisPipe:
    """Commands and scripts over one lazily opened, pipelined connection; failures are :class:`StoreError`.

    The connection opens on the first command, in the event loop that sends it (each worker
    process has its own), and reopens on the first command after it was lost.
    """

    def __init__(self, address: RedisAddress, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self._address = address
        self._timeout = timeout
        self._protocol: _Protocol | None = None
        self._connecting: asyncio.Task[_Protocol] | None = None

    async def execute(self, *args: Arg) -> Any:
        """One command; its reply as hiredis parses it (bytes, int, list, ``None``)."""
        protocol = self._protocol
        if protocol is None or not protocol.open:
            protocol = await self._reconnect()
        loop = asyncio.get_running_loop()
        reply = await protocol.send(_pack(args), loop.time() + self._timeout)
        if isinstance(reply, hiredis.ReplyError):
            raise ReplyRefused(reply)
        return reply

    async def run(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """``EVALSHA``, falling back to ``EVAL`` (which caches the script) after a restart or flush."""
        try:
            return await self.execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except ReplyRefused as refused:
            if refused.code != "NOSCRIPT":
                raise
        return await self.execute("EVAL", script.source, len(keys), *keys, *args)

    async def ping(self) -> None:
        await self.execute("PING")

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
        tls = ssl.create_default_context() if address.tls else None
        try:
            async with asyncio.timeout(self._timeout):
                _, protocol = await loop.create_connection(
                    lambda: _Protocol(loop), address.host, address.port, ssl=tls
                )
        except TimeoutError:
            raise StoreError("redis: TimeoutError") from None
        except OSError as exc:  # ssl.SSLError is an OSError
            raise StoreError(f"redis: {type(exc).__name__}") from None
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
        if self._protocol is not None:
            self._protocol.abort("redis: closed")
            self._protocol = None
