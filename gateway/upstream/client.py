"""The gateway's HTTP/1.1 client for calls to bots: pooled keep-alive connections on asyncio's own
transports, each answer parsed by httptools (llhttp, the parser Node.js and uvicorn use).

Why not aiohttp's ``ClientSession``, which the gateway used before: a slow bot keeps thousands of
turns in flight in one process (issue 17), each holding one call to its bot. Side by side at 2,000
in flight on a 1.5 s bot (``python -m bench slow_bot``'s "pass-through gateway client" front,
since folded out; docs/capacity.md, "Memory per turn in flight"), the same forwarder held 8 KiB less per turn
in flight (27.7 against 35.7 KiB) and spent 0.28 ms less CPU a turn (0.30 against 0.58 ms) on
this client, and an Identity turn takes 23 % fewer instructions (``python -m bench turn_count``):
``ClientSession``'s per-request machinery (URL objects, cookie and tracing hooks, a
``StreamReader`` per answer, its timeout context) serves nothing a bot call needs.
What a bot call does need is all here and tested (tests/upstream/test_client.py):

* keep-alive connections pooled per origin (scheme, host, port), the most recently used first,
  closed after :data:`KEEPALIVE_SECONDS` idle or when the bot says ``Connection: close``; no cap
  on their number, because each Brand's ``upstream.max_concurrency`` and the process's
  ``limits.max_bot_calls`` already cap the calls in flight (a pool limit would be a third, hidden);
* a bot host name looked up once for every connection that waits for it, its addresses reused for
  :data:`DNS_TTL_SECONDS` and tried in turn;
* TLS with the system's trust store and hostname checking for ``https`` bots;
* one deadline over connecting, sending and reading the whole answer; an answer's body read whole
  and capped (``Content-Length``, chunked, or up to the connection's end); its status line, header
  fields and trailer fields bounded as they arrive (:class:`AnswerBounds`, the ``limits.bot_answer_*``
  settings), before llhttp sees them;
* nothing kept between calls but the connection: no cookies, no proxy from the environment, no
  redirect followed, no compression asked for (a compressed answer is refused, not guessed at);
* failures as :class:`~gateway.upstream.base.UpstreamError` with the target as ``host:port`` and
  the cause in words, never the URL's path, query or credentials.

A connection that did not end its exchange cleanly (a timeout, a cancelled turn, a bad answer, a
byte after the answer's end) is closed, never reused: the bot's late answer must not become the
next User's reply. Closing one drops its parser at once, so what it read is freed without waiting
for the cyclic garbage collector (the parser holds the connection's callbacks).
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import os
import socket
import ssl
from collections import deque
from collections.abc import Mapping
from typing import Final, NamedTuple
from urllib.parse import urlsplit

import httptools

from gateway.config import LimitsConfig
from gateway.upstream.base import UpstreamError

__all__ = [
    "DNS_TTL_SECONDS",
    "KEEPALIVE_SECONDS",
    "MAX_FIELDS",
    "MAX_HEAD_BYTES",
    "MAX_LINE_BYTES",
    "AnswerBounds",
    "BotClient",
    "Target",
    "WireReply",
]

KEEPALIVE_SECONDS: Final = 30.0
"""How long an idle connection to a bot stays pooled (as the gateway's aiohttp pool kept them)."""
DNS_TTL_SECONDS: Final = 10.0
"""How long a bot host name's addresses are reused for new connections (aiohttp's default too)."""
_DEFAULTS: Final = LimitsConfig()
MAX_LINE_BYTES: Final = _DEFAULTS.bot_answer_line_bytes
"""By default (``limits.bot_answer_line_bytes``), the longest status line, header field line or trailer
field line of a bot's answer, its CRLF included: 8,190 bytes before it, aiohttp's ``max_line_size``
and ``max_field_size``, the bounds the gateway had before this client. Past it the call fails as
``bad_head``.

The three bounds are the library's the client replaced (aiohttp: 8,190-byte lines, 128 fields; h11:
a 16 KiB head; Node.js: a 16 KiB head), far above an answer's status, content type and length. They
are the process's settings, not a Brand's: one client reads every Brand's answers, and a Brand could
only loosen them for every Brand's memory. When one bites, the call is counted under
``pact_bot_call_duration_seconds{outcome="bad_head"}`` and logged with its cause (docs/adapters.md)."""
MAX_HEAD_BYTES: Final = _DEFAULTS.bot_answer_head_bytes
"""By default, the most bytes of head an answer may take, interim (1xx) heads included; its trailer
section has a budget as large of its own."""
MAX_FIELDS: Final = _DEFAULTS.bot_answer_fields
"""By default, the most header fields an answer may carry, interim (1xx) heads included; its trailer
section may carry as many of its own."""


class AnswerBounds(NamedTuple):
    """What a bot's answer may carry in its head and its trailers (``limits.bot_answer_*``)."""

    line_bytes: int = MAX_LINE_BYTES
    head_bytes: int = MAX_HEAD_BYTES
    fields: int = MAX_FIELDS

    @classmethod
    def of(cls, limits: LimitsConfig) -> AnswerBounds:
        return cls(limits.bot_answer_line_bytes, limits.bot_answer_head_bytes, limits.bot_answer_fields)


DEFAULT_BOUNDS: Final = AnswerBounds()


USER_AGENT: Final = "pact-gateway"
_DISCONNECTED: Final = "the server closed the connection without answering"
_LINE_ENDS: Final = (b"\r", b"\n")
_NO_LINE: Final = b""
"""A head is being read and no unfinished line of it is kept (shared: nothing is ever added to it)."""


class WireReply(NamedTuple):
    """A bot's answer: its status, its headers by lower-case name (the last of repeated ones), its body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class Target(NamedTuple):
    """A bot URL split once: where to connect, and the request line's target and ``Host``."""

    tls: bool
    host: str
    port: int
    path: str
    """The request target: the URL's path and query (``/`` for none)."""
    host_header: str

    @classmethod
    def parse(cls, url: str) -> Target:
        """``url`` (``http`` or ``https``, as the configuration validated it) split for the wire."""
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        host = parts.hostname or ""
        port = parts.port or (443 if tls else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        shown = f"[{host}]" if ":" in host else host
        host_header = shown if port == (443 if tls else 80) else f"{shown}:{port}"
        return cls(tls, host, port, path, host_header)

    @property
    def label(self) -> str:
        """How a log line and the probe name the target: ``host:port``, an IPv6 host in brackets."""
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"{shown}:{self.port}"


def _os_cause(error: OSError) -> str:
    """The operating system's words for ``error``: asyncio words a refused connect as "Connect call failed
    (address)", so the errno's own text ("Connection refused") is preferred; a name-resolution failure
    keeps its resolver's text ("Name or service not known"), whose code is no errno."""
    if error.errno and error.errno > 0 and not isinstance(error, socket.gaierror):
        return os.strerror(error.errno)
    return error.strerror or type(error).__name__


def _failure(target: Target, label: str, cause: str) -> UpstreamError:
    return UpstreamError(label, f"{target.label}: {cause[:1].lower()}{cause[1:]}")


class _Stop(Exception):
    """Raised where the answer is read, to stop at once: the call's failure is already set.

    A fresh one each time, and never the call's :class:`UpstreamError`: an exception raised in a
    parser callback keeps the callback's frame (and so the connection) in its traceback, and the
    parser keeps the exception until ``feed_data`` returns; only this throwaway carries them.
    """


class _Connection(asyncio.Protocol):
    """One connection to a bot and the exchange on it, if any; its parser calls the ``on_*`` methods."""

    # Slots, not a __dict__: thousands are open at once behind slow bots (176 bytes each, sys.getsizeof).
    __slots__ = (
        "answer",
        "bounds",
        "chunks",
        "closed",
        "fields",
        "head",
        "headers",
        "idle_since",
        "limit",
        "lines",
        "parser",
        "reusable",
        "size",
        "spent",
        "status",
        "tail_line",
        "target",
        "transport",
        "until_close",
    )

    def __init__(self, target: Target, bounds: AnswerBounds) -> None:
        self.target = target
        self.bounds = bounds
        self.transport: asyncio.Transport | None = None
        self.parser: httptools.HttpResponseParser | None = httptools.HttpResponseParser(self)
        self.answer: asyncio.Future[WireReply] | None = None
        self.limit = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.size = 0
        self.head: bytes | bytearray | None = None
        """While a head is read: its unfinished line (empty until a read ends inside one); ``None`` after."""
        self.lines = 0
        """Lines of the head being read that the parser has had."""
        self.fields = 0
        """Header fields read (every head of the answer), then trailer fields."""
        self.spent = 0
        """Bytes of heads fed to the parser (every head of the answer), then of trailer fields."""
        self.tail_line = 0
        """At least the length of the chunk or trailer line the parser holds unfinished."""
        self.until_close = False
        """The answer's body ends with the connection (no ``Content-Length``, not chunked)."""
        self.reusable = False
        self.closed = False
        self.idle_since = 0.0

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        parser, answer = self.parser, self.answer
        if parser is None or answer is None or answer.done():
            # Bytes nobody asked for (a pooled connection's bot talking out of turn): the stream
            # can no longer be trusted to line up answers with calls.
            self.close()
            return
        try:
            if self.head is None:
                self._read_body(parser, data)
            else:
                self._read_heads(parser, data)
        except _Stop:
            return
        except httptools.HttpParserUpgrade:
            self._fail(_failure(self.target, "protocol", "not a valid HTTP answer (an upgrade)"))
        except httptools.HttpParserCallbackError:
            self._fail(_failure(self.target, "protocol", "not a valid HTTP answer"))
        except httptools.HttpParserError as exc:
            self._fail(_failure(self.target, "protocol", f"not a valid HTTP answer ({exc})"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.parser = None  # the parser holds this connection's callbacks: no cycle left for the collector
        answer = self.answer
        if answer is None or answer.done():
            return
        if self.status and self.until_close:
            self._complete()
        elif self.status:
            self._fail(_failure(self.target, "protocol", "the answer's body broke off"))
        elif isinstance(exc, OSError):
            self._fail(_failure(self.target, "connect", _os_cause(exc)))
        else:
            self._fail(_failure(self.target, "connect", _DISCONNECTED))

    # The bounds: HTTP sets none (RFC 9110 §5.4), each recipient its own; these are aiohttp's.

    def _read_heads(self, parser: httptools.HttpResponseParser, data: bytes) -> None:
        """``data`` read while a head is: the head's whole lines fed to the parser as they come (one
        bounded unfinished line kept), and what follows a whole head fed after it."""
        if not self.head and not self.lines and data[:1] not in _LINE_ENDS and data[9:10] != b"1":
            # The usual answer, a final one (its status, just past "HTTP/1.1 ", is not 1xx) whose whole
            # head is in the read's first 8 KiB, so that no line of it can be longer: its fields are
            # counted in C, and the head and the body after it go to the parser in one call (a second
            # answer in the read stops at on_message_begin).
            end = data.find(b"\r\n\r\n", 0, self.bounds.line_bytes) + 4
            if end >= 4:
                if (
                    self.fields + data.count(b"\n", 0, end) - 2 > self.bounds.fields
                ):  # not the status, blank lines
                    self._refuse_head(f"more than {self.bounds.fields} header fields")
                if self.spent + end > self.bounds.head_bytes:
                    self._refuse_head(f"a head longer than {self.bounds.head_bytes} bytes")
                self.head = None
                before = self.size
                parser.feed_data(data)
                if (body := self.size - before) != len(data) - end:
                    self._bound_tail(memoryview(data)[end:], body)
                return
        while True:
            buffer, cut, whole = self._read_head(data)
            self.spent += cut
            if not whole:
                if cut:  # whole lines for the parser, the unfinished one kept
                    view = memoryview(buffer)
                    self.head = bytearray(view[cut:])
                    parser.feed_data(view[:cut])
                elif buffer is not self.head:
                    self.head = bytearray(buffer)
                return
            self.head = None  # before the parser runs: an interim answer's end starts the next head
            self.lines = 0
            if cut == len(buffer):
                parser.feed_data(buffer)
                return
            view = memoryview(buffer)
            parser.feed_data(view[:cut])
            if self.head is not None:
                data = bytes(view[cut:])  # the next head, after an interim answer
                continue
            answer = self.answer
            if answer is None or answer.done():
                self.close()  # bytes after a whole answer without a body
            else:
                self._read_body(parser, view[cut:])
            return

    def _read_body(self, parser: httptools.HttpResponseParser, data: bytes | memoryview) -> None:
        """``data`` read after the head: the body's bytes and the chunked framing around them."""
        before = self.size
        parser.feed_data(data)
        if (body := self.size - before) != len(data):
            self._bound_tail(data, body)

    def _read_head(self, data: bytes) -> tuple[bytes | bytearray, int, bool]:
        """``data`` read into the head: the bytes to feed the parser (those before ``cut``: whole lines
        only, so llhttp hands each field to httptools in one piece, which would otherwise join its
        pieces read by read, quadratic in its length) and whether the head ends there (its blank line).

        Only an unfinished line is kept between reads. A line past ``bounds.line_bytes``, heads past
        ``bounds.head_bytes`` or more than ``bounds.fields`` fields stop the call.
        """
        head = self.head
        assert head is not None
        scanned = len(head)  # an unfinished line from earlier reads: no line end in it
        buffer: bytes | bytearray = data
        if scanned:
            head += data
            buffer = head
        start = 0
        while (end := buffer.find(b"\n", max(start, scanned))) >= 0:
            if end + 1 - start > self.bounds.line_bytes:
                self._refuse_head(f"a head line longer than {self.bounds.line_bytes} bytes")
            whole = self.lines > 0 and end - start <= 1  # the blank line ends the head
            if self.lines and not whole:
                self.fields += 1
                if self.fields > self.bounds.fields:
                    self._refuse_head(f"more than {self.bounds.fields} header fields")
            self.lines += 1
            start = end + 1
            if self.spent + start > self.bounds.head_bytes:
                self._refuse_head(f"a head longer than {self.bounds.head_bytes} bytes")
            if whole:
                return buffer, start, True
        if len(buffer) - start >= self.bounds.line_bytes:
            self._refuse_head(f"a head line longer than {self.bounds.line_bytes} bytes")
        return buffer, start, False

    def _bound_tail(self, fed: bytes | memoryview, body: int) -> None:
        """After the parser read ``fed`` past the head, ``body`` bytes of it the body's: what it holds of
        an unfinished chunk or trailer line must stay under ``bounds.line_bytes`` (httptools joins a
        trailer field's pieces read by read, and keeps them until the line ends)."""
        loose = len(fed) - body
        if not loose:
            self.tail_line = 0
            return
        window = bytes(fed[-self.bounds.line_bytes :])
        line_end = window.rfind(b"\n")
        after = len(window) - 1 - line_end if line_end >= 0 else len(fed)
        if body:
            # The unfinished line is not body: neither the bytes after the last line end nor the read's
            # bytes outside the body can be shorter than it.
            self.tail_line = min(after, loose)
        else:
            self.tail_line = after if line_end >= 0 else self.tail_line + len(fed)
            if self.tail_line >= self.bounds.line_bytes:
                self._refuse_head(f"a chunk or trailer line longer than {self.bounds.line_bytes} bytes")

    def _refuse_head(self, cause: str) -> None:
        """A bound of the head or trailers is past: the call fails as ``bad_head``, the connection closes."""
        self._stop(_failure(self.target, "bad_head", cause))

    def _stop(self, error: UpstreamError) -> None:
        """Fail the call with ``error`` and stop reading (from a parser callback: stop the parser too)."""
        self._fail(error)
        raise _Stop

    # the parser's side (httptools calls these while feed_data runs)

    def on_message_begin(self) -> None:
        answer = self.answer
        if answer is None or answer.done():
            # A second answer in the read that ended the first (RFC 9112 §9.3.2: answers come in the order
            # of the requests, one each): the stream is out of step with the calls. Stopped here, before
            # a byte of it is parsed into the answer already given.
            self._stop(_failure(self.target, "protocol", "bytes after the answer's end"))

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.status:
            self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")
            return
        # A trailer field (RFC 9112 §7.1.2), bounded like the head's; not kept: nothing of the gateway's
        # reads one, and RFC 9110 §6.5.1 forbids merging it into the header fields unasked.
        size = len(name) + len(value) + 4
        self.fields += 1
        self.spent += size
        if size > self.bounds.line_bytes:
            self._refuse_head(f"a trailer field line longer than {self.bounds.line_bytes} bytes")
        if self.fields > self.bounds.fields:
            self._refuse_head(f"more than {self.bounds.fields} trailer fields")
        if self.spent > self.bounds.head_bytes:
            self._refuse_head(f"trailers longer than {self.bounds.head_bytes} bytes")

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        status = self.parser.get_status_code()
        if status < 200:
            # An interim answer (103 Early Hints): the real one follows on the same stream.
            self.headers = {}
            return
        self.status = status
        self.fields = self.spent = 0  # from here on, the trailers' own budget
        headers = self.headers
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding != "identity":
            self._stop(UpstreamError("bad_body", f"a compressed answer ({encoding[:32]!r}), unasked"))
        length = headers.get("content-length")
        if length is not None and length.strip().isdigit() and int(length) > self.limit:
            self._refuse_size()
        self.until_close = length is None and "transfer-encoding" not in headers and status not in (204, 304)

    def on_body(self, body: bytes) -> None:
        self.size += len(body)
        if self.size > self.limit:
            self._refuse_size()
        self.chunks.append(body)

    def _refuse_size(self) -> None:
        """The answer is longer than the limit: the call's failure, and the parser stopped."""
        self._stop(UpstreamError("bad_body", f"reply larger than {self.limit} bytes"))

    def on_message_complete(self) -> None:
        if not self.status:
            self.head = _NO_LINE  # an interim answer's end: the next head follows
            return
        parser = self.parser
        self.reusable = parser is not None and not self.until_close and parser.should_keep_alive()
        self._complete()

    # the call's side

    def start(self, head: bytes, body: bytes | None, limit: int) -> asyncio.Future[WireReply]:
        assert self.transport is not None
        self.answer = asyncio.get_running_loop().create_future()
        self.limit = limit
        self.status = self.size = self.fields = self.spent = self.lines = self.tail_line = 0
        self.headers = {}
        self.chunks = []
        self.head = _NO_LINE
        self.until_close = self.reusable = False
        if self.closed:
            # The bot closed a new connection before the call could use it.
            self._fail(_failure(self.target, "connect", _DISCONNECTED))
        else:
            # One write, its bytes dropped once sent: only the caller's body lives through the call.
            self.transport.write(head if body is None else head + body)
        return self.answer

    def _complete(self) -> None:
        chunks = self.chunks
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if self.answer is not None and not self.answer.done():
            self.answer.set_result(WireReply(self.status, self.headers, body))

    def _fail(self, error: UpstreamError) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(error)
        self.close()

    def close(self) -> None:
        """Close the connection and drop what it read: the parser (which holds this connection's
        callbacks, a cycle only the collector would find), a head half read, the body's pieces."""
        self.closed = True
        self.reusable = False
        self.parser = None
        self.head = None
        self.chunks = []
        if self.transport is not None:
            self.transport.close()


class BotClient:
    """Every bot call of one process: a pool of keep-alive connections per origin.

    One client serves every Brand. It holds no state between calls but idle connections, so one
    User's call can never carry anything of another's.
    """

    def __init__(
        self,
        *,
        keepalive: float = KEEPALIVE_SECONDS,
        dns_ttl: float = DNS_TTL_SECONDS,
        tls: ssl.SSLContext | None = None,
        bounds: AnswerBounds = DEFAULT_BOUNDS,
    ) -> None:
        self._keepalive = keepalive
        self._bounds = bounds
        self._tls = tls
        self._idle: dict[tuple[bool, str, int], deque[_Connection]] = {}
        self._dns_ttl = dns_ttl
        self._resolved: dict[str, tuple[tuple[str, ...], float]] = {}
        self._lookups: dict[str, asyncio.Task[tuple[str, ...]]] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._closed = False

    async def request(
        self,
        method: str,
        target: Target,
        *,
        headers: Mapping[str, str],
        body: bytes | None,
        within: float,
        limit: int,
    ) -> WireReply:
        """One call and its whole answer (at most ``limit`` bytes of body) ``within`` seconds.

        Any status comes back; the caller decides what it means for its bot's API. Failures are
        :class:`UpstreamError`: ``timeout``, ``connect`` (no answer: refused, reset, closed before
        answering), ``protocol`` (not HTTP, a body that broke off) or ``bad_body`` (over ``limit``,
        or compressed).
        """
        connection: _Connection | None = None
        try:
            async with asyncio.timeout(within):
                connection = await self._acquire(target)
                reply = await connection.start(_request_head(method, target, headers, body), body, limit)
        except TimeoutError:
            raise UpstreamError("timeout", f"no answer within {within} s") from None
        finally:
            if connection is not None:
                self._release(connection)
        return reply

    async def __aenter__(self) -> BotClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close every idle connection; calls in flight end with their connections."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for pool in self._idle.values():
            for connection in pool:
                connection.close()
        self._idle.clear()
        for lookup in self._lookups.values():
            lookup.cancel()

    def forget(self, target: Target) -> None:
        """Close every idle connection to ``target``'s origin: its caller found an answer that is not
        its call's (the pact contract's ``message_id``, Rasa's ``recipient_id``), so the stream that
        carried it, just pooled, is out of step with the calls; the others to the same bot are closed
        with it, as that is rare and they are only reconnected."""
        pool = self._idle.pop((target.tls, target.host, target.port), None)
        for connection in pool or ():
            connection.close()

    @property
    def idle_connections(self) -> int:
        """Pooled connections waiting for a call (closed ones are dropped as they are met)."""
        return sum(not connection.closed for pool in self._idle.values() for connection in pool)

    async def _acquire(self, target: Target) -> _Connection:
        pool = self._idle.get((target.tls, target.host, target.port))
        if pool:
            stale = asyncio.get_running_loop().time() - self._keepalive
            while pool:
                connection = pool.pop()
                if not connection.closed and connection.idle_since > stale:
                    return connection
                connection.close()
        return await self._connect(target)

    async def _connect(self, target: Target) -> _Connection:
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if target.tls:
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        try:
            addresses = await self._resolve(target)
            refused: OSError | None = None
            for address in addresses:
                try:
                    _, connection = await loop.create_connection(
                        lambda: _Connection(target, self._bounds),
                        address,
                        target.port,
                        ssl=tls,
                        server_hostname=target.host if tls else None,
                    )
                except ssl.SSLError:
                    raise
                except OSError as exc:
                    refused = exc  # the host's next address may answer
                else:
                    return connection
            raise refused or OSError(f"no address for {target.host}")
        except ssl.SSLCertVerificationError as exc:
            raise _failure(target, "connect", exc.verify_message or "certificate verify failed") from None
        except OSError as exc:
            raise _failure(target, "connect", _os_cause(exc)) from None

    async def _resolve(self, target: Target) -> tuple[str, ...]:
        """The bot host's addresses: an IP literal as it is; a name from the cache while its
        :data:`DNS_TTL_SECONDS` last, else looked up once however many connections wait for it.

        A burst of new connections to a named bot (``bot.acme.svc``) would otherwise queue one
        ``getaddrinfo`` each on the loop's few resolver threads. Entries are the configured bots'
        host names, so the cache is as large as the configuration.
        """
        host = target.host
        try:
            ipaddress.ip_address(host)
        except ValueError:
            pass
        else:
            return (host,)
        loop = asyncio.get_running_loop()
        cached = self._resolved.get(host)
        if cached is not None and cached[1] > loop.time():
            return cached[0]
        lookup = self._lookups.get(host)
        if lookup is None:
            lookup = loop.create_task(self._lookup(host, target.port))
            self._lookups[host] = lookup
            lookup.add_done_callback(functools.partial(self._looked_up, host))
        # shield: one call given up (its deadline, its turn cancelled) must not fail the others' lookup
        return await asyncio.shield(lookup)

    async def _lookup(self, host: str, port: int) -> tuple[str, ...]:
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = tuple(dict.fromkeys(str(info[4][0]) for info in infos))
        self._resolved[host] = (addresses, loop.time() + self._dns_ttl)
        return addresses

    def _looked_up(self, host: str, lookup: asyncio.Task[tuple[str, ...]]) -> None:
        self._lookups.pop(host, None)
        if not lookup.cancelled():
            lookup.exception()  # retrieved here: every caller may have given up waiting

    def _release(self, connection: _Connection) -> None:
        # Only a whole answer marks a connection reusable: after a timeout, a cancelled call or a
        # bad answer it is closed, whatever the bot sends next.
        connection.answer = None
        connection.chunks = []
        if not connection.reusable or connection.closed or self._closed:
            connection.close()
            return
        loop = asyncio.get_running_loop()
        connection.idle_since = loop.time()
        target = connection.target
        self._idle.setdefault((target.tls, target.host, target.port), deque()).append(connection)
        if self._sweeper is None:
            self._sweeper = loop.call_later(self._keepalive, self._sweep)

    def _sweep(self) -> None:
        """Close the connections idle past the keep-alive: the oldest sit at each pool's left end."""
        self._sweeper = None
        loop = asyncio.get_running_loop()
        stale = loop.time() - self._keepalive
        for key, pool in list(self._idle.items()):
            while pool and (pool[0].closed or pool[0].idle_since <= stale):
                pool.popleft().close()
            if not pool:
                del self._idle[key]
        if self._idle:
            self._sweeper = loop.call_later(self._keepalive, self._sweep)


def _request_head(method: str, target: Target, headers: Mapping[str, str], body: bytes | None) -> bytes:
    """The request's head: its line, ``Host``, the caller's headers and the body's length.

    A header name or value with a line break would let it write headers of its own (request
    splitting); the caller's headers come from the configuration and the gateway, so one is a bug,
    refused here rather than sent.
    """
    lines = [f"{method} {target.path} HTTP/1.1", f"Host: {target.host_header}"]
    named = {name.lower() for name in headers}
    if "user-agent" not in named:
        lines.append(f"User-Agent: {USER_AGENT}")
    lines.extend(f"{name}: {value}" for name, value in headers.items())
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {0 if body is None else len(body)}")
    head = "\r\n".join(lines)
    if head.count("\n") != len(lines) - 1 or "\r" in head.replace("\r\n", ""):
        raise UpstreamError("protocol", "a header with a line break, not sent")
    return f"{head}\r\n\r\n".encode()
