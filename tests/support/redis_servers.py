"""Redis servers of a test's own: real ``redis-server`` processes on loopback, and a proxy in front of one.

The shared Redis at 6379 is never stopped, demoted or stalled: tests that need that start their
own servers (``redis-server`` on free ports, under the test's tmp dir, no snapshots) through the
``redis_servers`` fixture, which stops every one of them when the test ends, however it ends.
:class:`RedisProxy` makes what a real server will not do on demand: a connection that stops
passing bytes (a stalled network path) while new connections flow, or an address that moves to
another server (a Service or DNS name after a failover).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

START_LIMIT = 15.0
"""Seconds a server gets to answer PING after it was started (loading an AOF included)."""
STOP_LIMIT = 10.0
"""Seconds a server gets to exit after SIGTERM before it is killed."""


def free_port() -> int:
    """A loopback TCP port free right now (the server binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@dataclass
class RedisServer:
    """One ``redis-server`` child process (or a sentinel, with ``sentinel=True``) on 127.0.0.1."""

    directory: Path
    port: int
    options: tuple[str, ...]
    sentinel: bool = False
    process: asyncio.subprocess.Process | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self) -> aioredis.Redis:
        """A redis-py client of the test's (it must close it), to look at and steer the server."""
        return aioredis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self.sentinel:
            # A sentinel rewrites its configuration file, so it must have one of its own.
            conf = self.directory / "sentinel.conf"
            conf.write_text("\n".join(self.options) + "\n", encoding="utf-8")
            argv = ["redis-server", str(conf), "--sentinel", "--port", str(self.port)]
        else:
            argv = ["redis-server", "--port", str(self.port), *self.options]
        argv += ["--bind", "127.0.0.1", "--dir", str(self.directory), "--logfile", "redis.log"]
        self.process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL
        )
        await self.wait_answering()

    async def wait_answering(self) -> None:
        """Until PING answers PONG (a server loading its data answers LOADING)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + START_LIMIT
        client = self.client()
        try:
            while True:
                assert self.process is not None
                assert self.process.returncode is None, self.log_tail()
                with contextlib.suppress(RedisError, OSError):
                    if await client.ping():
                        return
                assert loop.time() < deadline, f"redis-server on {self.port} not up in {START_LIMIT} s"
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final save; what was acknowledged must be in the AOF already."""
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)

    async def stop(self) -> None:
        process = self.process
        if process is None:
            return
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), STOP_LIMIT)
            except TimeoutError:
                process.kill()
                await process.wait()
        else:
            await process.wait()
        self.process = None

    def log_tail(self) -> str:
        log = self.directory / "redis.log"
        return log.read_text(encoding="utf-8")[-2000:] if log.exists() else "(no log)"


@dataclass
class RedisServers:
    """What the ``redis_servers`` fixture gives: start servers, sentinels and proxies; all stopped after."""

    root: Path
    started: list[RedisServer] = field(default_factory=list)
    proxies: list[RedisProxy] = field(default_factory=list)

    async def server(self, name: str, *options: str, appendonly: bool = False) -> RedisServer:
        """A server under ``root/name``; no RDB snapshots, AOF only when asked (``appendonly``)."""
        persistence = ("--save", "", "--appendonly", "yes" if appendonly else "no")
        server = RedisServer(self.root / name, free_port(), (*persistence, *options))
        self.started.append(server)
        await server.start()
        return server

    async def restart(self, server: RedisServer) -> None:
        """The same server again: same port, same directory (so the same AOF)."""
        await server.stop()
        await server.start()

    async def sentinel(self, name: str, primary: RedisServer, service: str) -> RedisServer:
        """A sentinel watching ``primary`` as ``service``, alone in its quorum, quick to act."""
        options = (
            f"sentinel monitor {service} 127.0.0.1 {primary.port} 1",
            f"sentinel down-after-milliseconds {service} 1000",
            f"sentinel failover-timeout {service} 10000",
        )
        server = RedisServer(self.root / name, free_port(), options, sentinel=True)
        self.started.append(server)
        await server.start()
        return server

    async def proxy(self, port: int) -> RedisProxy:
        """A :class:`RedisProxy` to the Redis on ``port`` (one of these servers, or the shared one)."""
        proxy = RedisProxy(port)
        self.proxies.append(proxy)
        await proxy.start()
        return proxy

    async def stop_all(self) -> None:
        for proxy in self.proxies:
            await proxy.stop()
        for server in self.started:
            await server.stop()


@pytest.fixture
async def redis_servers(tmp_path: Path) -> AsyncIterator[RedisServers]:
    servers = RedisServers(tmp_path / "redis")
    try:
        yield servers
    finally:
        await servers.stop_all()


async def wait_for(condition: Callable[[], Awaitable[bool]], limit: float, what: str) -> None:
    """Poll ``condition`` every 50 ms until true; fail after ``limit`` seconds, saying ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not await condition():
        assert loop.time() < deadline, f"not within {limit} s: {what}"
        await asyncio.sleep(0.05)


@dataclass
class _Link:
    """One client connection through the proxy and its own connection to the server."""

    stalled_requests: bool = False
    stalled_replies: bool = False
    released: asyncio.Event = field(default_factory=asyncio.Event)
    replies: int = 0
    """Bytes the server sent on this link (counted even while they are held)."""


class RedisProxy:
    """A TCP forwarder on 127.0.0.1 to a Redis port, whose connections the test can stall or move.

    :meth:`stall_requests` / :meth:`stall_replies` hold the bytes of every connection open now in
    one direction (a stuck path); connections opened later flow. :meth:`release` lets the held
    bytes go, requests even when their client has gone meanwhile (a command that reaches Redis
    late). Setting :attr:`target_port` sends connections opened from then on to another server.
    """

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.links: list[_Link] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def stall_requests(self) -> None:
        for link in self.links:
            link.stalled_requests = True
            link.released.clear()

    def stall_replies(self) -> None:
        for link in self.links:
            link.stalled_replies = True
            link.released.clear()

    def release(self) -> None:
        for link in self.links:
            link.stalled_requests = link.stalled_replies = False
            link.released.set()

    async def _accept(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            client_writer.close()
            return
        link = _Link()
        link.released.set()
        self.links.append(link)
        self._writers += [client_writer, server_writer]
        for pump in (
            self._pump(client_reader, server_writer, link, requests=True),
            self._pump(server_reader, client_writer, link, requests=False),
        ):
            task = asyncio.get_running_loop().create_task(pump)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link, *, requests: bool
    ) -> None:
        held: list[bytes] = []
        with contextlib.suppress(ConnectionError):
            while True:
                try:
                    data = await reader.read(65536)
                except ConnectionError:
                    data = b""
                if not requests:
                    link.replies += len(data)
                if data:
                    held.append(data)
                if link.stalled_requests if requests else link.stalled_replies:
                    if data:
                        continue
                    await link.released.wait()  # the other side has gone: what it sent still goes on
                writer.write(b"".join(held))
                held.clear()
                await writer.drain()
                if not data:
                    break
        if requests:
            # The client has gone, but the server's end stays open (until stop): Redis drops the
            # answers of a connection that ended, and a command that arrived late must be answered.
            return
        writer.close()

    async def stop(self) -> None:
        """Close everything; bytes still held are dropped, never delivered."""
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._server is not None:
            await self._server.wait_closed()
