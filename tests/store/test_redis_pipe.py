"""The pipelined Redis connection: replies matched in order, errors, handshake, and every way it breaks.

What a real server does (concurrency, scripts, error replies, SELECT, AUTH, CLIENT KILL) runs
against the test Redis (database 15). What a real server will not do on demand (stay silent,
hang up mid-queue, send garbage, answer only when told) is a :class:`FakeRedis` in this module.
Nothing here sleeps for a guessed time: tests wait on what the fake server has seen.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import suppress
from typing import Any
from urllib.parse import quote

import hiredis
import pytest
import redis.asyncio as aioredis

from gateway.config import CacheConfig
from gateway.redis_url import ClusterAddress, parse_redis_url
from gateway.store.base import StoreError
from gateway.store.redis import RedisStore
from gateway.store.redis_pipe import DEFAULT_TIMEOUT, RedisAddress, RedisPipe, ReplyRefused, Script, _Protocol
from tests.support.commands import recorded_commands
from tests.support.redis import TEST_REDIS_URL

WAIT = 2.0
"""Upper bound on waiting for something the fake server must see; only reached when a test fails."""


class FakeRedis:
    """A TCP server that reads RESP commands, records them, and answers only what the test says.

    ``auto`` maps a command name (upper-case bytes) to the raw reply written the moment that
    command arrives; every other command waits until the test writes to ``connections[i]``.
    """

    def __init__(self) -> None:
        self.auto: dict[bytes, bytes] = {}
        self.connections: list[asyncio.StreamWriter] = []
        self.commands: list[list[bytes]] = []
        self.closed = 0
        """Connections the client side ended (EOF or reset)."""
        self._changed = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self, sock: socket.socket | None = None) -> None:
        if sock is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        else:
            self._server = await asyncio.start_server(self._serve, sock=sock)
        self.port = self._server.sockets[0].getsockname()[1]

    def url(self, path: str = "") -> str:
        return f"redis://127.0.0.1:{self.port}{path}"

    def names(self) -> list[bytes]:
        return [command[0].upper() for command in self.commands]

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(condition), WAIT)

    async def reply(self, connection: int, data: bytes) -> None:
        writer = self.connections[connection]
        writer.write(data)
        await writer.drain()

    async def hang_up(self, connection: int) -> None:
        writer = self.connections[connection]
        writer.close()
        with suppress(ConnectionError):
            await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append(writer)
        await self._notify()
        parser = hiredis.Reader()
        try:
            while data := await reader.read(65536):
                parser.feed(data)
                while (command := parser.gets()) is not False:
                    self.commands.append(command)
                    answer = self.auto.get(command[0].upper())
                    if answer is not None:
                        writer.write(answer)
                await self._notify()
        except ConnectionError:
            pass  # the client aborted (RST): the same as EOF for what the tests count
        finally:
            self.closed += 1
            writer.close()
            await self._notify()

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def stop(self) -> None:
        for writer in self.connections:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def fake_redis() -> AsyncIterator[FakeRedis]:
    server = FakeRedis()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def pipes() -> AsyncIterator[Callable[..., RedisPipe]]:
    """Opens pipes (``url``, optional ``timeout`` and ``replicas``) and closes every one after the test."""
    opened: list[RedisPipe] = []

    def open_pipe(url: str, timeout: float = 2.0, replicas: int = 0) -> RedisPipe:
        address = parse_redis_url(url)
        assert not isinstance(address, ClusterAddress), "a cluster's pipe is ClusterPipe"
        pipe = RedisPipe(address, timeout=timeout, replicas=replicas)
        opened.append(pipe)
        return pipe

    yield open_pipe
    for pipe in opened:
        await pipe.close()


async def outcomes(tasks: list[asyncio.Task[Any]]) -> list[Any]:
    """Each task's result or exception, so a test can assert on all of them at once."""
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def next_command_reconnects(pipe: RedisPipe, fake_redis: FakeRedis) -> None:
    """After a failure, the next command opens a second connection and is answered on it."""
    fake_redis.auto[b"PING"] = b"+PONG\r\n"
    assert await pipe.execute("PING") == b"PONG"
    assert len(fake_redis.connections) == 2


def assert_all_store_errors(results: list[Any], message: str) -> None:
    assert results, "no commands ran"
    for result in results:
        assert isinstance(result, StoreError), result
        assert str(result) == message


def assert_no_asyncio_errors(caplog: pytest.LogCaptureFixture) -> None:
    # An exception escaping the protocol's callbacks also ends the connection, but through
    # asyncio's "Fatal error" log: bad input must be handled by the pipe itself.
    logged = [r.getMessage() for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]
    assert logged == []


# --- against the real Redis -------------------------------------------------------------------


async def test_replies_match_their_commands_under_concurrency(
    redis_url: str, redis_client: aioredis.Redis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(redis_url)
    echoes = [asyncio.create_task(pipe.execute("ECHO", f"value-{i}")) for i in range(500)]
    increments = [asyncio.create_task(pipe.execute("INCRBY", f"counter:{i}", i)) for i in range(500)]

    assert await asyncio.gather(*echoes) == [f"value-{i}".encode() for i in range(500)]
    assert await asyncio.gather(*increments) == list(range(500))
    stored = await redis_client.mget([f"counter:{i}" for i in range(500)])
    assert stored == [str(i).encode() for i in range(500)]


async def test_replies_come_back_as_hiredis_parses_them(
    redis_url: str, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(redis_url)
    assert await pipe.execute("SET", "k", b"\x00\xffbinary") == b"OK"
    assert await pipe.execute("GET", "k") == b"\x00\xffbinary"
    assert await pipe.execute("GET", "missing") is None
    assert await pipe.execute("RPUSH", "list", "a", "b") == 2
    assert await pipe.execute("LRANGE", "list", 0, -1) == [b"a", b"b"]
    assert await pipe.execute("PING") == b"PONG"


async def test_run_loads_a_missing_script_with_eval_then_calls_it_by_sha(
    redis_url: str, redis_client: aioredis.Redis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(redis_url)
    script = Script("return redis.call('INCRBY', KEYS[1], ARGV[1])")
    await pipe.ping()  # connected before the flush, so the flush is what makes the script missing
    await redis_client.script_flush()

    with recorded_commands(pipe) as first:
        assert await pipe.run(script, ["n"], [5]) == 5
    with recorded_commands(pipe) as second:
        assert await pipe.run(script, ["n"], [2]) == 7

    assert first == ["EVALSHA", "EVAL"]
    assert second == ["EVALSHA"]
    assert await redis_client.script_exists(script.sha) == [True]


def test_script_sha_is_the_sha1_redis_uses() -> None:
    # The value redis-cli SCRIPT LOAD prints for this source: a mismatch would mean EVALSHA never hits.
    assert Script("return 1").sha == "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"


async def test_error_reply_raises_reply_refused_with_only_its_code(
    redis_url: str, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(redis_url)
    client_id = await pipe.execute("CLIENT", "ID")
    await pipe.execute("HSET", "secret-key", "field", "secret-value")

    with pytest.raises(ReplyRefused) as refused:
        await pipe.execute("GET", "secret-key")

    assert refused.value.code == "WRONGTYPE"
    assert str(refused.value) == "redis: WRONGTYPE"
    assert isinstance(refused.value, StoreError)
    # The same connection goes on answering, in order.
    assert await pipe.execute("HGET", "secret-key", "field") == b"secret-value"
    assert await pipe.execute("CLIENT", "ID") == client_id


async def test_error_between_concurrent_commands_fails_only_its_own(
    redis_url: str, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(redis_url)
    await pipe.execute("HSET", "hash", "f", "v")
    tasks = [
        asyncio.create_task(pipe.execute("ECHO", "before")),
        asyncio.create_task(pipe.execute("GET", "hash")),
        asyncio.create_task(pipe.execute("ECHO", "after")),
    ]
    before, failed, after = await outcomes(tasks)
    assert before == b"before"
    assert isinstance(failed, ReplyRefused)
    assert failed.code == "WRONGTYPE"
    assert after == b"after"


@pytest.mark.parametrize(
    ("source", "code"),
    [
        ("error('secret-data')", "ERR"),
        ("return redis.error_reply('BADTHING secret-data')", "BADTHING"),
    ],
)
async def test_script_error_is_reply_refused_without_its_text(
    redis_url: str, pipes: Callable[..., RedisPipe], source: str, code: str
) -> None:
    pipe = pipes(redis_url)
    script = Script(source)
    await pipe.run(Script("return 1"), [], [])  # a cached script, so the second call below is one EVALSHA

    with pytest.raises(ReplyRefused) as first:
        await pipe.run(script, [], [])
    with recorded_commands(pipe) as sent, pytest.raises(ReplyRefused) as second:
        await pipe.run(script, [], [])

    for refused in (first.value, second.value):
        assert refused.code == code
        assert "secret-data" not in str(refused)
        assert "secret-data" not in repr(refused)
    # Only NOSCRIPT falls back to EVAL: a script that fails is not sent a second time.
    assert sent == ["EVALSHA"]
    assert await pipe.execute("ECHO", "still here") == b"still here"


async def test_select_puts_keys_in_the_urls_database(
    redis_url: str, redis_client: aioredis.Redis, pipes: Callable[..., RedisPipe]
) -> None:
    assert not redis_url.endswith("/0")  # a database SELECT must choose
    pipe = pipes(redis_url)
    await pipe.execute("SET", "selected", "yes")
    assert await redis_client.get("selected") == b"yes"


TEST_DB = TEST_REDIS_URL.rsplit("/", 1)[1]
ACL_USER = "pact-pipe-test"
ACL_PASSWORD = "s0me pass@word/:%"
"""Characters a URL must percent-encode, so the test also covers decoding them."""


@pytest.fixture
async def acl_user(redis_client: aioredis.Redis) -> AsyncIterator[str]:
    """An ACL user on the real Redis for the test's duration; the URL that logs in as it."""
    await redis_client.acl_setuser(
        ACL_USER, enabled=True, passwords=[f"+{ACL_PASSWORD}"], keys=["*"], commands=["+@all"], reset=True
    )
    yield f"redis://{quote(ACL_USER, safe='')}:{quote(ACL_PASSWORD, safe='')}@127.0.0.1:6379/{TEST_DB}"
    await redis_client.acl_deluser(ACL_USER)


async def test_auth_logs_in_as_the_urls_user(
    acl_user: str, redis_client: aioredis.Redis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(acl_user)
    assert await pipe.execute("ACL", "WHOAMI") == ACL_USER.encode()
    await pipe.execute("SET", "authed", "1")
    assert await redis_client.get("authed") == b"1"  # SELECT ran after AUTH: the key is in the test db


async def test_wrong_password_is_refused_at_the_handshake_without_revealing_it(
    acl_user: str, pipes: Callable[..., RedisPipe]
) -> None:
    wrong = "not-the-s3cret"
    pipe = pipes(f"redis://{ACL_USER}:{wrong}@127.0.0.1:6379/{TEST_DB}")

    with pytest.raises(StoreError) as refused:
        await pipe.ping()

    assert str(refused.value) == "redis: handshake refused (WRONGPASS)"
    assert wrong not in repr(refused.value)
    assert refused.value.__cause__ is None
    assert refused.value.__suppress_context__


def test_address_repr_hides_the_password() -> None:
    address = RedisAddress.from_url("rediss://someone:hunter2-secret@cache.internal:6380/3")
    assert "hunter2-secret" not in repr(address)
    assert "hunter2-secret" not in str(address)
    assert address.password == "hunter2-secret"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://127.0.0.1:6379", RedisAddress("127.0.0.1", 6379, 0, None, None, tls=False)),
        ("redis://cache", RedisAddress("cache", 6379, 0, None, None, tls=False)),
        ("redis://:pw@cache:7000/2", RedisAddress("cache", 7000, 2, None, "pw", tls=False)),
        (
            "rediss://u%40x:p%2Fw%20d@cache.internal:6380/15",
            RedisAddress("cache.internal", 6380, 15, "u@x", "p/w d", tls=True),
        ),
    ],
)
def test_address_from_url_reads_host_port_db_user_password_and_tls(url: str, expected: RedisAddress) -> None:
    assert RedisAddress.from_url(url) == expected


@pytest.mark.parametrize(
    ("url", "handshake"),
    [
        ("redis://cache", []),
        ("redis://cache/0", []),
        ("redis://cache/4", [("SELECT", 4)]),
        ("redis://:pw@cache", [("AUTH", "pw")]),
        ("redis://u:pw@cache/4", [("AUTH", "u", "pw"), ("SELECT", 4)]),
    ],
)
def test_handshake_authenticates_then_selects(url: str, handshake: list[tuple[Any, ...]]) -> None:
    assert RedisAddress.from_url(url).handshake() == handshake


async def test_killed_connection_is_replaced_by_a_new_one(
    redis_url: str, redis_client: aioredis.Redis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(redis_url)
    first_id = await pipe.execute("CLIENT", "ID")
    assert await redis_client.client_kill_filter(_id=str(first_id)) == 1

    # The kill reaches the pipe asynchronously: a command sent before it notices may fail, but
    # the one after that must run on a new connection.
    new_id = None
    for _ in range(3):
        with suppress(StoreError):
            new_id = await pipe.execute("CLIENT", "ID")
            break
    assert new_id is not None
    assert new_id != first_id


# --- against a fake server ---------------------------------------------------------------------


async def test_handshake_goes_before_every_command_on_the_connection(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    fake_redis.auto = {b"AUTH": b"+OK\r\n", b"SELECT": b"+OK\r\n", b"PING": b"+PONG\r\n"}
    pipe = pipes(fake_redis.url("/3").replace("redis://", "redis://user:pw@"))

    await asyncio.gather(*(pipe.ping() for _ in range(3)))

    assert fake_redis.commands == [[b"AUTH", b"user", b"pw"], [b"SELECT", b"3"]] + [[b"PING"]] * 3


async def test_a_connection_that_never_answers_fails_each_command_and_the_next_one_reconnects(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(fake_redis.url(), timeout=0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()

    results = await outcomes([asyncio.create_task(pipe.execute("ECHO", str(i))) for i in range(5)])

    assert_all_store_errors(results, "redis: TimeoutError")
    assert loop.time() - started >= 0.2  # not before the deadline
    assert len(fake_redis.connections) == 1
    await fake_redis.wait_until(lambda: fake_redis.closed == 1)  # the stuck connection was dropped

    await next_command_reconnects(pipe, fake_redis)


async def test_each_command_gets_its_full_timeout_from_when_it_was_sent(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    fake_redis.auto[b"PING"] = b"+PONG\r\n"
    pipe = pipes(fake_redis.url(), timeout=0.3)
    loop = asyncio.get_running_loop()
    await pipe.ping()  # answered at once; the watchdog still wakes at this command's deadline
    # The gap puts the next command's deadline after the watchdog's first wake-up. A longer gap
    # (a slow machine) only weakens the test; it cannot make a correct pipe fail it.
    await asyncio.sleep(0.15)
    sent = loop.time()

    with pytest.raises(StoreError, match=r"^redis: TimeoutError$"):
        await pipe.execute("ECHO", "never answered")

    assert loop.time() - sent >= 0.3


async def test_handshake_that_gets_no_answer_times_out(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(fake_redis.url("/1"), timeout=0.2)

    results = await outcomes([asyncio.create_task(pipe.ping()) for _ in range(3)])

    assert_all_store_errors(results, "redis: TimeoutError")
    assert fake_redis.names() == [b"SELECT"]  # one handshake; no command went out on the stuck connection
    await fake_redis.wait_until(lambda: fake_redis.closed == 1)


async def test_lost_connection_fails_waiting_commands_and_the_next_command_reconnects(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(fake_redis.url())
    tasks = [asyncio.create_task(pipe.execute("ECHO", str(i))) for i in range(3)]
    await fake_redis.wait_until(lambda: len(fake_redis.commands) == 3)

    await fake_redis.hang_up(0)

    assert_all_store_errors(await outcomes(tasks), "redis: ConnectionError")
    await next_command_reconnects(pipe, fake_redis)


async def test_a_cancelled_command_keeps_its_place_so_the_next_gets_its_own_reply(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(fake_redis.url())
    first = asyncio.create_task(pipe.execute("ECHO", "a"))
    await fake_redis.wait_until(lambda: len(fake_redis.commands) == 1)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first

    second = asyncio.create_task(pipe.execute("ECHO", "b"))
    await fake_redis.wait_until(lambda: len(fake_redis.commands) == 2)
    await fake_redis.reply(0, b"$1\r\na\r\n$1\r\nb\r\n")

    assert await second == b"b"
    fake_redis.auto[b"ECHO"] = b"$1\r\nc\r\n"
    assert await pipe.execute("ECHO", "c") == b"c"
    assert len(fake_redis.connections) == 1


async def test_concurrent_first_commands_share_one_connection_attempt(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    fake_redis.auto[b"PING"] = b"+PONG\r\n"
    pipe = pipes(fake_redis.url("/1"))  # a handshake (SELECT) the server answers only when told
    tasks = [asyncio.create_task(pipe.ping()) for _ in range(20)]
    await fake_redis.wait_until(lambda: len(fake_redis.commands) == 1)

    await fake_redis.reply(0, b"+OK\r\n")

    assert await outcomes(tasks) == [None] * 20
    assert len(fake_redis.connections) == 1
    assert fake_redis.names() == [b"SELECT"] + [b"PING"] * 20


async def test_refused_connection_fails_every_waiting_command_and_is_retried_by_the_next(
    monkeypatch: pytest.MonkeyPatch, pipes: Callable[..., RedisPipe]
) -> None:
    loop = asyncio.get_running_loop()
    attempts = 0
    create_connection = loop.create_connection

    async def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal attempts
        attempts += 1
        return await create_connection(*args, **kwargs)

    monkeypatch.setattr(loop, "create_connection", counting)
    # A bound socket that does not listen refuses connections; listening on it later "starts Redis"
    # on the same port, without racing another process for a freed port number.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        pipe = pipes(f"redis://127.0.0.1:{sock.getsockname()[1]}")

        results = await outcomes([asyncio.create_task(pipe.ping()) for _ in range(20)])

        assert_all_store_errors(results, "redis: ConnectionRefusedError")
        assert attempts == 1

        server = FakeRedis()
        server.auto[b"PING"] = b"+PONG\r\n"
        await server.start(sock=sock)
        try:
            await pipe.ping()
        finally:
            await pipe.close()
            await server.stop()
    assert attempts == 2


async def test_bytes_that_are_not_resp_fail_waiting_commands_with_a_protocol_error(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe], caplog: pytest.LogCaptureFixture
) -> None:
    pipe = pipes(fake_redis.url())
    tasks = [asyncio.create_task(pipe.execute("ECHO", str(i))) for i in range(3)]
    await fake_redis.wait_until(lambda: len(fake_redis.commands) == 3)

    await fake_redis.reply(0, b"HTTP/1.1 200 OK\r\n")

    assert_all_store_errors(await outcomes(tasks), "redis: protocol error")
    await fake_redis.wait_until(lambda: fake_redis.closed == 1)
    await next_command_reconnects(pipe, fake_redis)
    assert_no_asyncio_errors(caplog)


async def test_a_reply_nobody_asked_for_drops_the_connection(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe], caplog: pytest.LogCaptureFixture
) -> None:
    fake_redis.auto[b"PING"] = b"+PONG\r\n"
    pipe = pipes(fake_redis.url())
    assert await pipe.execute("PING") == b"PONG"

    await fake_redis.reply(0, b"+STRAY\r\n")
    await fake_redis.wait_until(lambda: fake_redis.closed == 1)

    # Had the stray reply been kept, this PING would have been handed "STRAY".
    assert await pipe.execute("PING") == b"PONG"
    assert len(fake_redis.connections) == 2
    assert_no_asyncio_errors(caplog)


async def test_close_fails_waiting_commands_and_a_later_command_reconnects(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(fake_redis.url())
    tasks = [asyncio.create_task(pipe.execute("ECHO", str(i))) for i in range(3)]
    await fake_redis.wait_until(lambda: len(fake_redis.commands) == 3)

    await pipe.close()

    assert_all_store_errors(await outcomes(tasks), "redis: closed")
    await fake_redis.wait_until(lambda: fake_redis.closed == 1)
    await next_command_reconnects(pipe, fake_redis)


async def test_close_while_connecting_fails_waiting_commands_with_store_error(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(fake_redis.url("/1"))  # the SELECT is never answered: the connect is still running
    tasks = [asyncio.create_task(pipe.ping()) for _ in range(3)]
    await fake_redis.wait_until(lambda: len(fake_redis.commands) == 1)

    await pipe.close()

    # A caller nobody cancelled must not see CancelledError: to asyncio that means "you were cancelled".
    results = await outcomes(tasks)
    assert all(isinstance(result, StoreError) for result in results), results
    await fake_redis.wait_until(lambda: fake_redis.closed == 1)


async def test_a_connect_whose_only_caller_was_cancelled_is_not_reused_by_the_next_command(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(fake_redis.url("/1"))
    abandoned = asyncio.create_task(pipe.ping())
    await fake_redis.wait_until(lambda: len(fake_redis.commands) == 1)
    abandoned.cancel()
    with pytest.raises(asyncio.CancelledError):
        await abandoned
    # The connect goes on without its caller and fails; the pipe drops that connection.
    await fake_redis.reply(0, b"-ERR DB index is out of range\r\n")
    await fake_redis.wait_until(lambda: fake_redis.closed == 1)

    fake_redis.auto = {b"SELECT": b"+OK\r\n", b"PING": b"+PONG\r\n"}
    await pipe.ping()  # a fresh attempt, not the abandoned attempt's old failure

    assert len(fake_redis.connections) == 2


async def test_the_stores_connection_takes_cache_timeout(fake_redis: FakeRedis) -> None:
    """``cache.timeout`` is the store's deadline: a silent server fails the readiness ping after it."""
    store = RedisStore(CacheConfig(url=fake_redis.url(), timeout=0.2))
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(StoreError, match="redis: TimeoutError"):
            await store.ping()
        assert 0.2 <= loop.time() - started < DEFAULT_TIMEOUT
    finally:
        await store.close()


# --- when commands leave: one write per pass under load, at once when alone ---------------------


class RecordingTransport(asyncio.Transport):
    """Where the pipe's protocol writes; each ``write`` call kept as it was made (no socket merges them)."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.ended: str | None = None
        """``"closed"`` (gracefully) or ``"aborted"`` once the protocol ended the connection."""

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.ended = self.ended or "closed"

    def abort(self) -> None:
        self.ended = self.ended or "aborted"


def _protocol() -> tuple[_Protocol, RecordingTransport]:
    protocol = _Protocol(asyncio.get_running_loop())
    transport = RecordingTransport()
    protocol.connection_made(transport)
    return protocol, transport


async def _next_pass() -> None:
    await asyncio.sleep(0)


async def test_a_lone_command_on_an_idle_connection_is_written_at_once() -> None:
    protocol, transport = _protocol()
    deadline = asyncio.get_running_loop().time() + WAIT
    answer = protocol.send(b"A", deadline)
    assert transport.writes == [b"A"]  # before the loop has run another pass
    protocol.data_received(b"+OK\r\n")
    assert await answer == b"OK"
    protocol.send(b"B", deadline)
    assert transport.writes == [b"A", b"B"]


async def test_commands_sent_while_one_waits_leave_together_at_the_next_pass() -> None:
    protocol, transport = _protocol()
    deadline = asyncio.get_running_loop().time() + WAIT
    answers = [protocol.send(command, deadline) for command in (b"A", b"B", b"C")]
    assert transport.writes == [b"A"]
    await _next_pass()
    assert transport.writes == [b"A", b"BC"]
    protocol.data_received(b"+1\r\n+2\r\n+3\r\n")
    assert await asyncio.gather(*answers) == [b"1", b"2", b"3"]


async def test_after_a_batch_the_next_command_waits_for_its_pass_until_a_batch_is_alone_again() -> None:
    protocol, transport = _protocol()
    deadline = asyncio.get_running_loop().time() + WAIT
    for command in (b"A", b"B", b"C"):
        protocol.send(command, deadline)
    await _next_pass()
    protocol.data_received(b"+1\r\n+2\r\n+3\r\n")
    # Idle again, but the last batch held two commands: others are likely sending alongside.
    protocol.send(b"D", deadline)
    assert transport.writes == [b"A", b"BC"]
    await _next_pass()
    assert transport.writes == [b"A", b"BC", b"D"]
    protocol.data_received(b"+4\r\n")
    # That batch was D alone, so the next command on the idle connection goes at once.
    protocol.send(b"E", deadline)
    assert transport.writes == [b"A", b"BC", b"D", b"E"]
    protocol.data_received(b"+5\r\n")


# --- the failure model: a slow command fails alone (issue 12, row 5) ---------------------------


async def test_a_command_past_its_deadline_fails_alone_and_those_behind_it_keep_their_own() -> None:
    """One slow command costs only itself: the connection is retired, not dropped with all on it."""
    protocol, transport = _protocol()
    now = asyncio.get_running_loop().time()
    slow = protocol.send(b"SLOW", now + 0.05)
    behind = protocol.send(b"BEHIND", now + WAIT)

    with pytest.raises(StoreError, match=r"^redis: TimeoutError$"):
        await slow

    assert not behind.done()
    assert not protocol.open  # no new command goes on it
    assert transport.ended is None  # but it stays up for the command still waiting
    protocol.data_received(b"+late\r\n")  # the slow command's answer, read and dropped
    assert not behind.done()
    protocol.data_received(b"+in time\r\n")
    assert await behind == b"in time"
    assert transport.ended == "closed"  # nothing waits on it any more


async def test_a_retired_connection_that_never_answers_is_aborted_once_nobody_waits() -> None:
    protocol, transport = _protocol()
    now = asyncio.get_running_loop().time()
    first = protocol.send(b"A", now + 0.05)
    second = protocol.send(b"B", now + 0.1)

    for command in (first, second):
        with pytest.raises(StoreError, match=r"^redis: TimeoutError$"):
            await command

    assert transport.ended == "aborted"


async def test_after_a_timeout_new_commands_take_a_new_connection_while_the_old_one_drains(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    pipe = pipes(fake_redis.url(), timeout=2.0)
    slow = asyncio.create_task(pipe.execute("ECHO", "slow"))
    await fake_redis.wait_until(lambda: len(fake_redis.commands) == 1)
    # A gap, so the second command's deadline is a second after the first's: it still has that
    # second when the first fails. The machine would have to stall for that second to fail this.
    await asyncio.sleep(1.0)
    behind = asyncio.create_task(pipe.execute("ECHO", "behind"))
    await fake_redis.wait_until(lambda: len(fake_redis.commands) == 2)

    with pytest.raises(StoreError, match=r"^redis: TimeoutError$"):
        await slow
    await next_command_reconnects(pipe, fake_redis)
    await fake_redis.reply(0, b"$4\r\nslow\r\n$6\r\nbehind\r\n")

    assert await behind == b"behind"
    await fake_redis.wait_until(lambda: fake_redis.closed == 1)  # drained, then closed


# --- answers that mean "not a primary that can serve you" (issue 12, row 6) ---------------------


@pytest.mark.parametrize(
    "answer",
    [
        b"-READONLY You can't write against a read only replica.\r\n",
        b"-LOADING Redis is loading the dataset in memory\r\n",
        b"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n",
    ],
    ids=["READONLY", "LOADING", "MASTERDOWN"],
)
async def test_an_answer_saying_the_server_cannot_serve_makes_the_next_command_reconnect(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe], answer: bytes
) -> None:
    fake_redis.auto[b"SET"] = answer
    pipe = pipes(fake_redis.url())

    with pytest.raises(ReplyRefused) as refused:
        await pipe.execute("SET", "k", "v")

    assert refused.value.code == answer[1:].split(b" ", 1)[0].decode()
    await fake_redis.wait_until(lambda: fake_redis.closed == 1)
    await next_command_reconnects(pipe, fake_redis)


async def test_other_error_answers_keep_the_connection(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    fake_redis.auto[b"GET"] = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n"
    fake_redis.auto[b"PING"] = b"+PONG\r\n"
    pipe = pipes(fake_redis.url())
    with pytest.raises(ReplyRefused):
        await pipe.execute("GET", "k")
    assert await pipe.execute("PING") == b"PONG"
    assert (len(fake_redis.connections), fake_redis.closed) == (1, 0)


# --- WAIT: a write counts once replicas hold it -------------------------------------------------


async def test_a_replicated_call_sends_wait_right_behind_its_script(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    fake_redis.auto = {b"EVALSHA": b":7\r\n", b"WAIT": b":1\r\n"}
    pipe = pipes(fake_redis.url(), timeout=2.0, replicas=1)
    script = Script("return 7")

    assert await pipe.run(script, ["k"], [1], replicated=True) == 7
    assert await pipe.run(script, ["k"], [1]) == 7  # not asked to: no WAIT

    # Half the timeout, so an unacknowledged WAIT answers before the command's own deadline.
    assert fake_redis.commands == [
        [b"EVALSHA", script.sha.encode(), b"1", b"k", b"1"],
        [b"WAIT", b"1", b"1000"],
        [b"EVALSHA", script.sha.encode(), b"1", b"k", b"1"],
    ]


async def test_a_replicated_call_loads_a_missing_script_and_waits_again(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    fake_redis.auto = {
        b"EVALSHA": b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
        b"EVAL": b":7\r\n",
        b"WAIT": b":1\r\n",
    }
    pipe = pipes(fake_redis.url(), replicas=1)

    assert await pipe.run(Script("return 7"), [], [], replicated=True) == 7

    assert fake_redis.names() == [b"EVALSHA", b"WAIT", b"EVAL", b"WAIT"]
    assert len(fake_redis.connections) == 1


async def test_a_pipe_without_replicas_sends_no_wait(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    fake_redis.auto = {b"EVALSHA": b":7\r\n"}
    pipe = pipes(fake_redis.url())
    assert await pipe.run(Script("return 7"), [], [], replicated=True) == 7
    assert fake_redis.names() == [b"EVALSHA"]


async def test_a_write_no_replica_acknowledged_fails_and_the_next_command_reconnects(
    fake_redis: FakeRedis, pipes: Callable[..., RedisPipe]
) -> None:
    fake_redis.auto = {b"EVALSHA": b":7\r\n", b"WAIT": b":0\r\n"}
    pipe = pipes(fake_redis.url(), replicas=1)

    with pytest.raises(StoreError, match=r"^redis: 0 of 1 replicas acknowledged$"):
        await pipe.run(Script("return 7"), [], [], replicated=True)

    await fake_redis.wait_until(lambda: fake_redis.closed == 1)
    await next_command_reconnects(pipe, fake_redis)


# --- Sentinel: where the primary is ------------------------------------------------------------


def resp_array(*items: str | int) -> bytes:
    out = [f"*{len(items)}\r\n".encode()]
    for item in items:
        text = str(item).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(text), text))
    return b"".join(out)


def master_state(port: int, flags: str = "master") -> bytes:
    """What ``SENTINEL MASTER pact`` answers: a flat list of fields (RESP2), the ones the pipe reads."""
    return resp_array("name", "pact", "ip", "127.0.0.1", "port", port, "flags", flags, "num-slaves", 1)


@pytest.fixture
async def fake_servers() -> AsyncIterator[Callable[[], Awaitable[FakeRedis]]]:
    """More :class:`FakeRedis` servers (sentinels, primaries); all stopped after the test."""
    started: list[FakeRedis] = []

    async def start() -> FakeRedis:
        server = FakeRedis()
        await server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        await server.stop()


async def test_a_sentinel_url_connects_to_the_primary_the_first_answering_sentinel_names(
    fake_servers: Callable[[], Awaitable[FakeRedis]], pipes: Callable[..., RedisPipe]
) -> None:
    primary = await fake_servers()
    primary.auto = {b"AUTH": b"+OK\r\n", b"SELECT": b"+OK\r\n", b"PING": b"+PONG\r\n"}
    sentinel = await fake_servers()
    sentinel.auto = {b"AUTH": b"+OK\r\n", b"SENTINEL": master_state(primary.port)}
    with socket.socket() as down:  # bound, not listening: a sentinel that refuses connections
        down.bind(("127.0.0.1", 0))
        hosts = f"127.0.0.1:{down.getsockname()[1]},127.0.0.1:{sentinel.port}"
        pipe = pipes(f"redis+sentinel://app:pw@{hosts}/pact/2?sentinel_password=s%20pw")

        await pipe.ping()

    assert sentinel.commands == [[b"AUTH", b"s pw"], [b"SENTINEL", b"MASTER", b"pact"]]
    assert primary.commands == [[b"AUTH", b"app", b"pw"], [b"SELECT", b"2"], [b"PING"]]


async def test_a_primary_flagged_down_is_not_taken(
    fake_servers: Callable[[], Awaitable[FakeRedis]], pipes: Callable[..., RedisPipe]
) -> None:
    primary = await fake_servers()
    sentinel = await fake_servers()
    sentinel.auto = {b"SENTINEL": master_state(primary.port, "master,s_down")}
    pipe = pipes(f"redis+sentinel://127.0.0.1:{sentinel.port}/pact")

    with pytest.raises(StoreError, match=r"^redis: no sentinel names a primary$"):
        await pipe.ping()

    assert primary.connections == []


async def test_a_demoted_primary_makes_the_pipe_ask_the_sentinels_again(
    fake_servers: Callable[[], Awaitable[FakeRedis]], pipes: Callable[..., RedisPipe]
) -> None:
    old = await fake_servers()
    old.auto = {b"SET": b"-READONLY You can't write against a read only replica.\r\n"}
    new = await fake_servers()
    new.auto = {b"SET": b"+OK\r\n"}
    sentinel = await fake_servers()
    sentinel.auto = {b"SENTINEL": master_state(old.port)}
    pipe = pipes(f"redis+sentinel://127.0.0.1:{sentinel.port}/pact")
    with pytest.raises(ReplyRefused, match="READONLY"):
        await pipe.execute("SET", "k", "v")

    sentinel.auto[b"SENTINEL"] = master_state(new.port)  # the failover, as Sentinel now tells it
    assert await pipe.execute("SET", "k", "v") == b"OK"

    assert sentinel.names() == [b"SENTINEL", b"SENTINEL"]
    assert [len(old.commands), len(new.commands)] == [1, 1]
