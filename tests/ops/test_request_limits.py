"""The A2A listener's HTTP edge over raw sockets: ``limits.request_timeout`` and the parser's refusals.

Review rows 3 and 12. Each test talks to the server ``pact-gateway serve`` builds
(:class:`gateway.process.server.GatewayServer`, in this process so its logs can be read; the last
one to the real subprocess), never the aiohttp test server, whose runner has neither rule.
Every exchange ends within :data:`BOUND` seconds or the test fails: before the fix a slow
header held its connection for as long as the client liked.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.config import load_config
from gateway.http.connection import MAX_FIELD_BYTES, MAX_HEADERS, MAX_TARGET_BYTES
from gateway.ops.metrics import Metrics
from gateway.process.server import GatewayServer
from tests.ops.conftest import CapturedLogs, Processes, free_port
from tests.support.bot import ControlledBot
from tests.support.delegation import BrandLogin, enable_delegation
from tests.support.gateway import AUDIENCE, base_config
from tests.support.pa import FakeJwksServer, PAKey

REQUEST_TIMEOUT = 2.0
"""``limits.request_timeout`` in these tests."""
BOUND = 15.0
"""Seconds within which every exchange here ends (generous: the machine is shared and noisy)."""
TRICKLE = 0.1
"""Seconds between the bytes of a slow body, as in the review."""
CARD = "/a2a/acme/.well-known/agent-card.json"


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


async def read_answer(reader: asyncio.StreamReader) -> Answer:
    """One HTTP/1.1 response: status line, headers, and a Content-Length body (none without one)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return Answer(int(status_line.split()[1]), headers, body)


async def closed(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection (with nothing more to read) within :data:`BOUND`."""
    try:
        async with asyncio.timeout(BOUND):
            return await reader.read() == b""
    except ConnectionResetError:
        return True


@dataclass
class Edge:
    """A gateway listening on ``port`` the way ``serve`` runs it, and a way to mint its tokens."""

    port: int
    mint: Callable[[], str]

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            yield reader, writer
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


@pytest.fixture
async def edge(
    jwks_server: FakeJwksServer,
    pa_issuer: str,
    es256_key: PAKey,
    bot: ControlledBot,
    json_logs: CapturedLogs,
    tmp_path: Path,
) -> AsyncIterator[Edge]:
    raw = base_config(pa_issuer, jwks_server.jwks_uri, bot.url, "memory://")
    raw["listen"] = {"host": "127.0.0.1", "port": free_port()}
    raw["limits"] = {"request_timeout": REQUEST_TIMEOUT}
    config = load_config(raw, {})
    server = GatewayServer(tmp_path / "gw.yaml", config, metrics=Metrics())
    await server.start()
    try:
        yield Edge(config.listen.port, lambda: es256_key.mint(pa_issuer, "alice", AUDIENCE))
    finally:
        await server.stop()


def request_head(method: str, path: str, *headers: str) -> bytes:
    return "\r\n".join([f"{method} {path} HTTP/1.1", "Host: gw.test", *headers, "", ""]).encode("latin-1")


def turn_body() -> bytes:
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "Hi, where is my order?"}]}
    return orjson.dumps({"message": message})


async def trickle(writer: asyncio.StreamWriter, data: bytes, sent: list[int]) -> None:
    """``data`` a byte every :data:`TRICKLE` seconds, counting what went out, until the peer is gone."""
    with contextlib.suppress(ConnectionError):
        for byte in data:
            writer.write(bytes([byte]))
            await writer.drain()
            sent.append(1)
            await asyncio.sleep(TRICKLE)


@dataclass
class Slow:
    """A connection sending its request slowly: ``sent`` counts the slow bytes gone so far."""

    reader: asyncio.StreamReader
    sent: list[int]

    async def answer(self) -> Answer:
        async with asyncio.timeout(BOUND):
            return await read_answer(self.reader)


@contextlib.asynccontextmanager
async def trickling(port: int, head: bytes, slow: bytes) -> AsyncIterator[Slow]:
    """Send ``head`` at once, then ``slow`` byte by byte until it is all sent, the server hangs up, or
    the block ends."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    sent: list[int] = []
    sender = asyncio.create_task(trickle(writer, slow, sent))
    try:
        yield Slow(reader, sent)
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def assert_bare(answer: Answer, status: int) -> None:
    """A status with no body and no A2A envelope, and the connection marked to close."""
    assert answer.status == status, answer
    assert answer.body == b""
    assert "application/a2a+json" not in answer.headers.get("content-type", "")
    assert answer.headers.get("connection", "").lower() == "close"


# Row 3: limits.request_timeout bounds reading a request.


async def test_rfc9110_a_body_trickled_past_request_timeout_is_408_and_the_connection_closes(
    edge: Edge, bot: ControlledBot
) -> None:
    """The review's case: one byte every 0.1 s used to be served after 9 s with a 2 s timeout."""
    body = turn_body()
    head = request_head(
        "POST",
        "/a2a/acme/message:send",
        f"Authorization: Bearer {edge.mint()}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    )
    async with trickling(edge.port, head, body) as slow:
        answer = await slow.answer()
        assert len(slow.sent) < len(body)  # answered before the body was in, not after it
        assert_bare(answer, 408)
        assert await closed(slow.reader)
    assert bot.calls == []


async def test_a_slow_body_behind_a_refused_token_is_cut_off_too(edge: Edge) -> None:
    """Answered 401 before its body was read: aiohttp would read the rest for 10 s and keep the
    connection; the deadline closes it."""
    body = turn_body()
    head = request_head(
        "POST", "/a2a/acme/message:send", "Authorization: Bearer not-a-jwt", f"Content-Length: {len(body)}"
    )
    async with trickling(edge.port, head, body) as slow:
        assert (await slow.answer()).status == 401
        assert await closed(slow.reader)
        assert len(slow.sent) < len(body)


async def test_an_unfinished_header_is_cut_off_with_408(edge: Edge, json_logs: CapturedLogs) -> None:
    """Slowloris: a header that never ends used to hold its connection for ever."""
    head = b"GET /a2a/acme/tasks HTTP/1.1\r\nHost: gw.test\r\n"
    async with trickling(edge.port, head, b"X-Slow: " + b"z" * 1000) as slow:
        assert_bare(await slow.answer(), 408)
        assert await closed(slow.reader)
    assert any("headers were not complete" in record["message"] for record in json_logs.records())


async def test_a_connection_that_sends_nothing_is_closed_without_an_answer(edge: Edge) -> None:
    async with edge.connect() as (reader, _):
        assert await closed(reader)


async def test_a_body_in_pieces_within_the_timeout_is_served(edge: Edge, bot: ControlledBot) -> None:
    body = turn_body()
    head = request_head(
        "POST",
        "/a2a/acme/message:send",
        f"Authorization: Bearer {edge.mint()}",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    )
    async with edge.connect() as (reader, writer):
        writer.write(head)
        for start in range(0, len(body), 40):
            writer.write(body[start : start + 40])
            await writer.drain()
            await asyncio.sleep(0.05)
        async with asyncio.timeout(BOUND):
            answer = await read_answer(reader)
    assert answer.status == 200, answer
    assert orjson.loads(answer.body)["message"]["role"] == "ROLE_AGENT"
    assert len(bot.calls) == 1


async def test_an_idle_kept_alive_connection_outlives_the_timeout_and_its_next_request_is_timed(
    edge: Edge,
) -> None:
    """Idle between requests is keep-alive's business; the clock restarts at the next request's first byte."""
    async with edge.connect() as (reader, writer):
        for pause in (REQUEST_TIMEOUT * 1.5, 0):  # idle longer than a request may take
            writer.write(request_head("GET", CARD))
            async with asyncio.timeout(BOUND):
                assert (await read_answer(reader)).status == 200
            await asyncio.sleep(pause)
        sent: list[int] = []
        writer.write(b"GET /a2a/acme/tasks HTTP/1.1\r\n")
        sender = asyncio.create_task(trickle(writer, b"X-Slow: " + b"z" * 1000, sent))
        try:
            async with asyncio.timeout(BOUND):
                assert_bare(await read_answer(reader), 408)
        finally:
            sender.cancel()
        assert await closed(reader)


# Row 12: the parser's refusals get their precise status, with no body and nothing of the request logged.


async def refusal_of(edge: Edge, head: bytes) -> Answer:
    async with edge.connect() as (reader, writer):
        writer.write(head)
        async with asyncio.timeout(BOUND):
            answer = await read_answer(reader)
        assert await closed(reader)
    return answer


async def test_rfc6585_a_100_kb_authorization_header_is_431(edge: Edge, json_logs: CapturedLogs) -> None:
    token = "eyJ" + "A" * 100_000
    answer = await refusal_of(edge, request_head("GET", "/a2a/acme/tasks", f"Authorization: Bearer {token}"))
    assert_bare(answer, 431)
    assert answer.headers["content-length"] == "0"
    assert token[:40] not in json_logs.text
    assert any("refused by the HTTP parser: 431" in record["message"] for record in json_logs.records())


@pytest.mark.parametrize(
    "headers",
    [
        [f"X-Many-{i}: v" for i in range(MAX_HEADERS + 1)],
        [f"X-Big: {'v' * (MAX_FIELD_BYTES + 1)}"],
    ],
    ids=["too-many", "one-too-large"],
)
async def test_rfc6585_header_fields_too_many_or_too_large_are_431(edge: Edge, headers: list[str]) -> None:
    assert_bare(await refusal_of(edge, request_head("GET", CARD, *headers)), 431)


async def test_header_fields_within_the_limits_are_served(edge: Edge) -> None:
    fields = [f"X-Many-{i}: v" for i in range(MAX_HEADERS - 10)]
    async with edge.connect() as (reader, writer):
        writer.write(request_head("GET", CARD, f"X-Big: {'v' * MAX_FIELD_BYTES}", *fields))
        async with asyncio.timeout(BOUND):
            assert (await read_answer(reader)).status == 200


async def test_rfc9112_a_request_target_too_long_is_414(edge: Edge) -> None:
    path = f"/a2a/acme/tasks?pageSize={'1' * MAX_TARGET_BYTES}"
    assert_bare(await refusal_of(edge, request_head("GET", path)), 414)


async def test_a_malformed_request_is_a_bare_400_that_quotes_nothing(
    edge: Edge, json_logs: CapturedLogs
) -> None:
    secret = "Bearer eyJsecret-part-of-a-token"
    answer = await refusal_of(edge, request_head("GET", CARD, f"Authorization: {secret}\x00"))
    assert_bare(answer, 400)
    assert "secret-part" not in json_logs.text


async def test_listen_backlog_holds_a_burst_of_connections_the_process_has_not_accepted_yet(
    jwks_server: FakeJwksServer, pa_issuer: str, bot: ControlledBot, tmp_path: Path
) -> None:
    """listen.backlog reaches listen(2): aiohttp's own 128 let the kernel drop the 130th connection
    of a burst that arrived while the event loop was busy (its client then waits a SYN retry)."""
    burst = 300
    raw = base_config(pa_issuer, jwks_server.jwks_uri, bot.url, "memory://")
    raw["listen"] = {"host": "127.0.0.1", "port": free_port(), "backlog": 1024}
    config = load_config(raw, {})
    server = GatewayServer(tmp_path / "gw.yaml", config, metrics=Metrics())
    await server.start()
    held: list[socket.socket] = []
    try:
        # No await in this loop: the gateway shares it, so it accepts nothing until the burst is in.
        for _ in range(burst):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.settimeout(0.5)
            assert sock.connect_ex(("127.0.0.1", config.listen.port)) == 0, f"connection {len(held)} dropped"
    finally:
        for sock in held:
            sock.close()
        await server.stop()


# The real process: the settings reach the listener `pact-gateway serve` opens.


async def test_serve_applies_request_timeout_and_answers_431(
    processes: Processes, jwks_server: FakeJwksServer, pa_issuer: str, bot: ControlledBot
) -> None:
    raw: dict[str, Any] = base_config(pa_issuer, jwks_server.jwks_uri, bot.url, "memory://")
    raw["limits"] = {"request_timeout": REQUEST_TIMEOUT, "shutdown_timeout": 5}
    served = await processes.new(raw).start()
    await served.ready()
    port = served.raw["listen"]["port"]
    async with trickling(port, b"GET /a2a/acme/tasks HTTP/1.1\r\n", b"X-Slow: " + b"z" * 1000) as slow:
        assert_bare(await slow.answer(), 408)
        assert await closed(slow.reader)
    big = request_head("GET", "/a2a/acme/tasks", f"Authorization: Bearer {'A' * 100_000}")
    assert_bare(await refusal_of(Edge(port, lambda: ""), big), 431)


# Issue 18 F5: every OAuth and browser endpoint keeps the rule. The consent hand-off and the
# decision used to turn the 408 into a 500 page and an ERROR traceback.

INTROSPECTION_SECRET = "i" * 40


@pytest.fixture
async def delegating_edge(
    jwks_server: FakeJwksServer,
    pa_issuer: str,
    es256_key: PAKey,
    bot: ControlledBot,
    brand_login: BrandLogin,
    provider_key_pem: str,
    json_logs: CapturedLogs,
    tmp_path: Path,
) -> AsyncIterator[Edge]:
    raw = base_config(pa_issuer, jwks_server.jwks_uri, bot.url, "memory://")
    raw["listen"] = {"host": "127.0.0.1", "port": free_port()}
    raw["limits"] = {"request_timeout": REQUEST_TIMEOUT}
    edit = enable_delegation(brand_login, provider_key_pem, introspection={"secret": "${INTROSPECTION}"})
    edit(raw)
    config = load_config(raw, {"INTROSPECTION": INTROSPECTION_SECRET})
    server = GatewayServer(tmp_path / "gw.yaml", config, metrics=Metrics())
    await server.start()
    try:
        yield Edge(config.listen.port, lambda: es256_key.mint(pa_issuer, "alice", AUDIENCE))
    finally:
        await server.stop()


# (path, method, who authenticates): each endpoint reached the way its caller reaches it, so the
# slow body is the only thing wrong with the request.
OAUTH_ENDPOINTS = {
    "device_authorization": ("POST", "pa"),
    "token": ("POST", "pa"),
    "revoke": ("POST", "pa"),
    "introspect": ("POST", "brand"),
    "consent": ("POST", None),
    "consent/decision": ("POST", None),
}


@pytest.mark.parametrize("endpoint", list(OAUTH_ENDPOINTS))
async def test_rfc9110_a_body_trickled_into_any_oauth_or_browser_endpoint_is_408_without_a_traceback(
    delegating_edge: Edge, json_logs: CapturedLogs, endpoint: str
) -> None:
    method, caller = OAUTH_ENDPOINTS[endpoint]
    body = b"client_id=https%3A%2F%2Fpa.example&assertion=" + b"a" * 200
    credential = {
        "pa": [f"Authorization: Bearer {delegating_edge.mint()}"],
        "brand": [f"Authorization: Bearer {INTROSPECTION_SECRET}"],
        None: [],
    }[caller]
    head = request_head(
        method,
        f"/a2a/acme/oauth/{endpoint}",
        *credential,
        "Content-Type: application/x-www-form-urlencoded",
        f"Content-Length: {len(body)}",
    )
    async with trickling(delegating_edge.port, head, body) as slow:
        answer = await slow.answer()
        assert len(slow.sent) < len(body)
        assert_bare(answer, 408)
        assert await closed(slow.reader)
    assert not [record for record in json_logs.records() if record["level"] == "ERROR"]
    assert "Traceback" not in json_logs.text


async def test_a_body_trickled_behind_the_done_page_is_cut_off(delegating_edge: Edge) -> None:
    """The landing page reads no body: it answers at once, and the deadline closes the connection."""
    body = b"x" * 200
    head = request_head("GET", "/a2a/acme/oauth/done?status=denied", f"Content-Length: {len(body)}")
    async with trickling(delegating_edge.port, head, body) as slow:
        assert (await slow.answer()).status == 200
        assert await closed(slow.reader)
        assert len(slow.sent) < len(body)
