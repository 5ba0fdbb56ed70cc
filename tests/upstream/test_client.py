"""The gateway's own HTTP/1.1 client for bot calls (gateway/upstream/client.py), against real servers:
aiohttp's for well-behaved bots, raw sockets for the ones that misbehave on the wire."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import ipaddress
import ssl
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from gateway.upstream.base import UpstreamError
from gateway.upstream.client import (
    MAX_FIELDS,
    MAX_HEAD_BYTES,
    MAX_LINE_BYTES,
    BotClient,
    Target,
    WireReply,
    _Connection,
)

LIMIT = 1024
Raw = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Bot:
    """An aiohttp bot that answers each call with its request id, and remembers what it was sent."""

    def __init__(self) -> None:
        self.peers: list[int] = []
        self.seen: list[dict[str, str]] = []
        self.delay = 0.0
        self.close_after = False

    async def chat(self, request: web.Request) -> web.Response:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.peers.append(peer[1] if peer else 0)
        self.seen.append(dict(request.headers))
        await request.read()
        if self.delay:
            await asyncio.sleep(self.delay)
        headers = {"Set-Cookie": "session=alice"}
        if self.close_after:
            headers["Connection"] = "close"
        return web.Response(body=request.headers.get("X-Request-Id", "").encode(), headers=headers)


async def serve(bot: Bot, tls: ssl.SSLContext | None = None) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_post("/chat", bot.chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    server = site._server
    assert isinstance(server, asyncio.base_events.Server)
    return runner, server.sockets[0].getsockname()[1]


@pytest.fixture
async def bot() -> AsyncIterator[tuple[Bot, Target]]:
    fake = Bot()
    runner, port = await serve(fake)
    yield fake, Target.parse(f"http://127.0.0.1:{port}/chat")
    await runner.cleanup()


@pytest.fixture
async def raw() -> AsyncIterator[Callable[[Raw], Awaitable[Target]]]:
    """A server that runs ``handler`` on each connection: it reads the request and writes what it likes."""
    servers: list[asyncio.Server] = []

    async def start(handler: Raw) -> Target:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return Target.parse(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/chat")

    yield start
    for server in servers:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    return head + await reader.readexactly(length)


def answering(*pieces: bytes, close: bool = True) -> Raw:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.01)
        if close:
            writer.close()

    return handler


async def call(
    client: BotClient, target: Target, request_id: str = "r-1", within: float = 5.0, limit: int = LIMIT
) -> WireReply:
    return await client.request(
        "POST", target, headers={"X-Request-Id": request_id}, body=b"{}", within=within, limit=limit
    )


# Connections: kept, expired, closed.


async def test_a_kept_alive_connection_carries_the_next_call(bot: tuple[Bot, Target]) -> None:
    fake, target = bot
    async with BotClient() as client:
        assert (await call(client, target, "r-1")).body == b"r-1"
        assert client.idle_connections == 1
        assert (await call(client, target, "r-2")).body == b"r-2"
    assert len(fake.peers) == 2
    assert fake.peers[0] == fake.peers[1]


async def test_a_connection_idle_past_the_keepalive_is_closed_not_reused(bot: tuple[Bot, Target]) -> None:
    fake, target = bot
    async with BotClient(keepalive=0.05) as client:
        await call(client, target)
        await asyncio.sleep(0.2)
        assert client.idle_connections == 0  # swept, not left open until the next call
        await call(client, target)
    assert fake.peers[0] != fake.peers[1]


async def test_an_answer_saying_connection_close_is_not_pooled(bot: tuple[Bot, Target]) -> None:
    fake, target = bot
    fake.close_after = True
    async with BotClient() as client:
        await call(client, target)
        assert client.idle_connections == 0
        assert (await call(client, target, "r-2")).body == b"r-2"


async def test_a_pooled_connection_the_bot_closed_is_not_used(
    raw: Callable[[Raw], Awaitable[Target]],
) -> None:
    """A bot that ends idle connections soon (uvicorn keeps them 5 s) must not fail the next turn."""
    target = await raw(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
    async with BotClient() as client:
        await call(client, target)
        await asyncio.sleep(0.05)
        assert client.idle_connections == 0
        assert (await call(client, target)).body == b"ok"


async def test_a_named_bot_is_looked_up_once_for_a_burst_of_new_connections(
    bot: tuple[Bot, Target], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``localhost`` is ``::1`` first here and the bot listens on ``127.0.0.1`` only: the next address
    answers. Five connections opened at once share one lookup."""
    fake, target = bot
    loop = asyncio.get_running_loop()
    lookups: list[str] = []
    resolve = loop.getaddrinfo

    async def counted(host: str, port: int, **options: Any) -> Any:
        lookups.append(host)
        return await resolve(host, port, **options)

    monkeypatch.setattr(loop, "getaddrinfo", counted)
    named = Target.parse(f"http://localhost:{target.port}/chat")
    async with BotClient() as client:
        replies = await asyncio.gather(*(call(client, named, f"r-{n}") for n in range(5)))
    assert [reply.body for reply in replies] == [f"r-{n}".encode() for n in range(5)]
    assert lookups == ["localhost"]
    assert len(set(fake.peers)) == 5


async def test_the_bot_sees_no_cookie_and_no_compression_asked(bot: tuple[Bot, Target]) -> None:
    """One client carries every User's turns: a cookie the bot set on one must never ride on the next."""
    fake, target = bot
    async with BotClient() as client:
        await call(client, target)
        await call(client, target)
    second = {name.lower(): value for name, value in fake.seen[1].items()}
    assert "cookie" not in second
    assert "accept-encoding" not in second
    assert second["host"] == f"127.0.0.1:{target.port}"
    assert second["user-agent"] == "pact-gateway"
    assert second["content-length"] == "2"


# Answers on the wire.


@pytest.mark.parametrize(
    "pieces",
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello", b" world"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", b"6\r\n world\r\n0\r\n\r\n"),
        (b"HTTP/1.0 200 OK\r\n\r\nhello", b" world"),  # the body ends with the connection
        (
            b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world",
        ),
        (b"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world",),
        (b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world",),  # llhttp skips the empty line
        (b"HTTP/1.1 200 OK\r\nContent-", b"Length: 11\r\n\r\nhello", b" world"),
    ],
    ids=[
        "length",
        "chunked",
        "until-close",
        "early-hints",
        "early-hints-in-one-read",
        "after-an-empty-line",
        "head-in-pieces",
    ],
)
async def test_an_answer_is_read_whole_however_it_is_framed(
    raw: Callable[[Raw], Awaitable[Target]], pieces: tuple[bytes, ...]
) -> None:
    target = await raw(answering(*pieces))
    async with BotClient() as client:
        reply = await call(client, target)
    assert (reply.status, reply.body) == (200, b"hello world")


async def test_headers_come_back_by_lower_case_name(raw: Callable[[Raw], Awaitable[Target]]) -> None:
    target = await raw(answering(b"HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n"))
    async with BotClient() as client:
        reply = await call(client, target)
    assert (reply.status, reply.headers["retry-after"]) == (429, "7")


@pytest.mark.parametrize(
    ("pieces", "reason", "said"),
    [
        ((), "connect", "the server closed the connection without answering"),
        ((b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc",), "protocol", "the answer's body broke off"),
        ((b"SSH-2.0-OpenSSH_9.2\r\n",), "protocol", "not a valid HTTP answer"),
        ((b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n",), "bad_body", "reply larger than 1024 bytes"),
        ((b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",), "bad_body", "gzip"),
        (
            (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",),
            "protocol",
            "",
        ),
    ],
    ids=["no-answer", "broken-body", "not-http", "too-long", "compressed", "upgrade"],
)
async def test_a_bad_answer_fails_the_call_with_its_cause_and_closes_the_connection(
    raw: Callable[[Raw], Awaitable[Target]], pieces: tuple[bytes, ...], reason: str, said: str
) -> None:
    target = await raw(answering(*pieces, close=not pieces or reason != "bad_body"))
    async with BotClient() as client:
        with pytest.raises(UpstreamError) as failure:
            await call(client, target)
        assert client.idle_connections == 0
    assert failure.value.reason == reason
    assert said in str(failure.value)


# Bounds on what a bot's answer makes the client hold (issue 28 M4): a hostile bot must not grow the
# process that serves every Brand. Each bound is past in a way of its own; the call fails as a bad head
# naming the target, the connection is closed (the bot sees it end), and nothing is pooled.

OK_HEAD = b"HTTP/1.1 200 OK\r\n"
CHUNKED = OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n"


def fields(count: int, size: int = 1) -> bytes:
    """``count`` distinct field lines, each with a value of ``size`` bytes."""
    return b"".join(b"X-%d: %s\r\n" % (n, b"v" * size) for n in range(count))


def until_closed(*pieces: bytes, seen: list[str]) -> Raw:
    """Writes ``pieces`` (10 ms apart), then waits for the client to end the connection; notes ``closed``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.01)
        with contextlib.suppress(ConnectionError):
            if await asyncio.wait_for(reader.read(), 5) == b"":
                seen.append("closed")
        writer.close()

    return handler


@pytest.mark.parametrize(
    ("pieces", "cause"),
    [
        (
            (b"HTTP/1.1 200 " + b"O" * MAX_LINE_BYTES + b"\r\nContent-Length: 0\r\n\r\n",),
            "a head line longer",
        ),
        ((b"HTTP/1.1 200 ", *[b"O" * 1000] * 9), "a head line longer"),
        (
            (OK_HEAD + b"X-Long: " + b"v" * MAX_LINE_BYTES + b"\r\nContent-Length: 0\r\n\r\n",),
            "a head line longer",
        ),
        ((OK_HEAD, b"X-Long: ", *[b"v" * 1000] * 9), "a head line longer"),
        ((OK_HEAD + fields(20, 4000) + b"Content-Length: 0\r\n\r\n",), "a head longer than 65536 bytes"),
        ((OK_HEAD + fields(MAX_FIELDS) + b"Content-Length: 0\r\n\r\n",), "more than 100 header fields"),
        (
            (b"HTTP/1.1 103 Early Hints\r\n" + fields(60) + b"\r\n", OK_HEAD + fields(50)),
            "more than 100 header",
        ),
        ((CHUNKED + fields(MAX_FIELDS + 1) + b"\r\n",), "more than 100 trailer fields"),
        ((CHUNKED + b"X-T: " + b"v" * MAX_LINE_BYTES + b"\r\n\r\n",), "a trailer field line longer"),
        ((CHUNKED, b"X-T: ", *[b"v" * 1000] * 9), "a chunk or trailer line longer"),
        ((CHUNKED + fields(20, 4000) + b"\r\n",), "trailers longer than 65536 bytes"),
    ],
    ids=[
        "status-line",
        "status-line-in-pieces",
        "header-line",
        "header-line-in-pieces",
        "all-headers",
        "header-count",
        "header-count-with-interim",
        "trailer-count",
        "trailer-line",
        "trailer-line-in-pieces",
        "all-trailers",
    ],
)
async def test_an_answer_past_a_head_or_trailer_bound_fails_as_a_bad_head_and_closes_its_connection(
    raw: Callable[[Raw], Awaitable[Target]], pieces: tuple[bytes, ...], cause: str
) -> None:
    seen: list[str] = []
    target = await raw(until_closed(*pieces, seen=seen))
    async with BotClient() as client:
        with pytest.raises(UpstreamError) as failure:
            await call(client, target)
        assert client.idle_connections == 0
        await asyncio.sleep(0.1)
        assert seen == ["closed"]
    assert failure.value.reason == "bad_head"
    assert failure.value.detail.startswith(f"127.0.0.1:{target.port}: {cause}")


async def test_an_answer_at_every_bound_is_read_whole(raw: Callable[[Raw], Awaitable[Target]]) -> None:
    """The bounds are inclusive: 100 fields, a line of 8 KiB with its CRLF, 64 KiB of head, and as much again
    of trailers, even when each arrives in pieces."""
    line = b"X-Long: " + b"v" * (MAX_LINE_BYTES - 10) + b"\r\n"
    assert len(line) == MAX_LINE_BYTES
    framing = b"Transfer-Encoding: chunked\r\n\r\n"
    head = OK_HEAD + line + fields(MAX_FIELDS - 2, 560) + framing
    head = head.replace(b"X-0: ", b"X-0: " + b"v" * (MAX_HEAD_BYTES - len(head)), 1)
    assert len(head) == MAX_HEAD_BYTES
    trailers = fields(MAX_FIELDS - 1) + b"X-Last: " + b"v" * 6000 + b"\r\n\r\n"
    pieces = [head[:100], head[100:9000], head[9000:], b"2\r\nok\r\n0\r\n", trailers[:5], trailers[5:]]
    target = await raw(answering(*pieces))
    async with BotClient() as client:
        reply = await call(client, target)
    assert (reply.status, reply.body, len(reply.headers)) == (200, b"ok", MAX_FIELDS)
    assert "x-last" not in reply.headers  # trailers are not merged into the head (RFC 9110 §6.5.1)


async def test_a_bot_streaming_headers_without_end_is_cut_off_at_the_cap_with_memory_bounded(
    raw: Callable[[Raw], Awaitable[Target]],
) -> None:
    """Issue 28 M4: a status line, then distinct 4 KB headers without end within the deadline (the review's
    RSS 625 -> 2,874 MiB). The client stops reading at the head's cap and closes: the bot gets to write
    what the sockets' buffers take and no more, and the process holds far less than the bot sent."""
    sent: list[int] = []
    value = b"v" * 4000

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK_HEAD)
        with contextlib.suppress(ConnectionError):
            for n in range(16_384):  # 64 MiB at most: far more than any buffer between the two
                writer.write(b"X-%d: %s\r\n" % (n, value))
                await writer.drain()
                sent.append(4010)
        writer.close()

    target = await raw(endless)
    tracemalloc.start()
    try:
        async with BotClient() as client:
            with pytest.raises(UpstreamError) as failure:
                await call(client, target, within=30.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (failure.value.reason, failure.value.detail) == (
        "bad_head",
        f"127.0.0.1:{target.port}: a head longer than {MAX_HEAD_BYTES} bytes",
    )
    assert sum(sent) < 16 * 1024 * 1024
    assert peak < 4 * 1024 * 1024


async def test_a_header_value_without_end_is_cut_off_at_the_line_cap(
    raw: Callable[[Raw], Awaitable[Target]],
) -> None:
    """One header value sent a byte at a time: the client holds one unfinished line, never more than
    :data:`MAX_LINE_BYTES`, and stops there (httptools would join the pieces, quadratic in the value)."""
    sent: list[int] = []

    async def dribble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK_HEAD + b"X-Long: ")
        with contextlib.suppress(ConnectionError):
            for _ in range(4 * MAX_LINE_BYTES):
                writer.write(b"v" * 16)
                await writer.drain()
                sent.append(16)
                await asyncio.sleep(0)
        writer.close()

    target = await raw(dribble)
    async with BotClient() as client:
        with pytest.raises(UpstreamError) as failure:
            await call(client, target, within=30.0)
    assert failure.value.reason == "bad_head"
    assert f"a head line longer than {MAX_LINE_BYTES} bytes" in failure.value.detail
    assert sum(sent) < 16 * MAX_LINE_BYTES


def live_connections() -> int:
    return sum(type(thing) is _Connection for thing in gc.get_objects())


@pytest.mark.parametrize(
    "answer",
    [
        OK_HEAD + fields(MAX_FIELDS + 1) + b"Content-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
    ],
    ids=["bad-head", "too-long", "connection-close"],
)
async def test_a_closed_connection_is_freed_at_once_without_the_cyclic_collector(
    raw: Callable[[Raw], Awaitable[Target]], answer: bytes
) -> None:
    """Issue 28 M4: connection and parser referred to each other, so what a closed connection had read
    stayed until the cyclic collector ran. With the collector off, nothing of it is left once asyncio
    has run the connection's end (one turn of the loop)."""
    target = await raw(until_closed(answer, seen=[]))
    async with BotClient() as client:
        gc.collect()
        before = live_connections()
        gc.disable()
        try:
            with contextlib.suppress(UpstreamError):
                await call(client, target)
            for _ in range(3):
                await asyncio.sleep(0)
            left = live_connections() - before
        finally:
            gc.enable()
    assert left == 0


# Answers out of step with the calls (issue 28 L1): one read carrying the end of one answer and the start
# of another must not leave the connection pooled, nor add the second's headers to the first.


@pytest.mark.parametrize(
    "first",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\n\r\n",
    ],
    ids=["length", "chunked", "no-body"],
)
async def test_a_byte_after_the_answer_in_the_same_read_closes_the_connection(
    raw: Callable[[Raw], Awaitable[Target]], first: bytes
) -> None:
    stray = b"HTTP/1.1 200 OK\r\nX-Stray: 1\r\nContent-Length: 5\r\n\r\nstray"
    target = await raw(answering(first + stray, close=False))
    async with BotClient() as client:
        reply = await call(client, target)
        assert client.idle_connections == 0
    assert reply.body == (b"" if b"204" in first else b"ok")
    assert "x-stray" not in reply.headers


async def test_the_next_call_after_a_stray_answer_gets_its_own(
    raw: Callable[[Raw], Awaitable[Target]],
) -> None:
    """The review's symptom: the next User's turn on that connection failed ("not a valid HTTP answer")."""
    answers = [b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirstHTTP/1.1 200 OK\r\nContent-Len", b""]
    peers: list[int] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peers.append(writer.get_extra_info("peername")[1])
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                await read_request(reader)
                writer.write(answers.pop(0) or b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext")
                await writer.drain()
        writer.close()

    target = await raw(handler)
    async with BotClient() as client:
        assert (await call(client, target)).body == b"first"
        assert (await call(client, target)).body == b"next"
    assert len(set(peers)) == 2


async def test_a_refused_call_names_its_target_never_a_credential_path_or_query() -> None:
    """Issue 19: the log and the probe say ``host:port: cause``, never the URL's secrets, path or query."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    async with BotClient() as client:
        with pytest.raises(UpstreamError) as failure:
            await call(client, Target.parse(f"http://bot:s3cret@127.0.0.1:{port}/chat?key=s3cret"))
    assert (failure.value.reason, failure.value.detail) == (
        "connect",
        f"127.0.0.1:{port}: connection refused",
    )


def test_an_ipv6_target_is_named_in_brackets() -> None:
    target = Target.parse("https://[::1]/chat?x=1")
    assert (target.label, target.host_header, target.path) == ("[::1]:443", "[::1]", "/chat?x=1")


async def test_a_header_with_a_line_break_is_refused_and_nothing_is_sent(bot: tuple[Bot, Target]) -> None:
    fake, target = bot
    async with BotClient() as client:
        with pytest.raises(UpstreamError) as failure:
            await client.request(
                "POST", target, headers={"X-Note": "a\r\nX-Admin: yes"}, body=b"{}", within=5, limit=LIMIT
            )
    assert failure.value.reason == "protocol"
    assert fake.peers == []


# Deadlines and cancellation: a late answer must never become the next call's.


async def test_a_call_past_its_deadline_fails_and_its_late_answer_reaches_no_one(
    bot: tuple[Bot, Target],
) -> None:
    fake, target = bot
    fake.delay = 0.3
    async with BotClient() as client:
        with pytest.raises(UpstreamError) as failure:
            await call(client, target, "late", within=0.1)
        assert failure.value.reason == "timeout"
        assert client.idle_connections == 0
        fake.delay = 0.0
        await asyncio.sleep(0.3)
        assert (await call(client, target, "next")).body == b"next"


async def test_a_cancelled_call_closes_its_connection(bot: tuple[Bot, Target]) -> None:
    fake, target = bot
    fake.delay = 0.3
    async with BotClient() as client:
        task = asyncio.create_task(call(client, target, "gone"))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert client.idle_connections == 0
        fake.delay = 0.0
        assert (await call(client, target, "next")).body == b"next"


# TLS: the system's trust store and the bot's name, or a trust store of the operator's.


def certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "bot.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "bot.pem", directory / "bot.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


async def test_an_https_bot_is_verified(tmp_path: Path) -> None:
    cert_path, key_path = certificate(tmp_path)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert_path, key_path)
    fake = Bot()
    runner, port = await serve(fake, served)
    target = Target.parse(f"https://127.0.0.1:{port}/chat")
    try:
        trusting = ssl.create_default_context(cafile=str(cert_path))
        async with BotClient(tls=trusting) as client:
            assert (await call(client, target, "over-tls")).body == b"over-tls"
        async with BotClient() as client:
            with pytest.raises(UpstreamError) as failure:
                await call(client, target)
    finally:
        await runner.cleanup()
    assert failure.value.reason == "connect"
    assert failure.value.detail.startswith(f"127.0.0.1:{port}: self")  # "self-signed certificate"
