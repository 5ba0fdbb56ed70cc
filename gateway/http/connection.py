"""The A2A listener's HTTP/1.1 connections: ``limits.request_timeout``, and precise answers from the parser.

aiohttp's server puts no deadline on reading a request: ``keepalive_timeout`` (about an hour by
default, longer than any proxy's idle timeout on purpose) only closes a connection between
requests, ``read_timeout`` and ``timeout_ceil_threshold`` are not header or body timeouts, and a
header sent one byte every few seconds, or a body one byte at a time, held the connection for as
long as the client liked (slowloris). Its HTTP parser also refuses a request before any
middleware sees it, and answers every refusal with a ``400`` whose text echoes up to 100 bytes
of the offending line (the start of an ``Authorization`` header, say), logged with a traceback.

:class:`GatewayRunner` is ``web.AppRunner`` with its own connection class,
:class:`GatewayConnection`, which adds both rules:

* **A request must arrive whole within ``limits.request_timeout`` seconds** of its first byte (of
  the connection's opening, for the first request): request line, headers and body. Late, it is
  answered ``408 Request Timeout`` (RFC 9110 §15.5.9) with no body and ``Connection: close``,
  and the connection is closed, as HAProxy's ``timeout http-request`` does. A body is timed out
  through the request's own stream, so the handler reading it raises :class:`RequestTimedOut`
  and the ``408`` passes through the middlewares (access line, metrics) like any answer. A
  connection that has sent nothing at all is closed without an answer: it may be a browser's
  pre-connection, and an unasked-for response could be read as the answer to a request crossing
  it. Between requests, an idle kept-alive connection is aiohttp's ``keepalive_timeout``'s, not
  this rule's: the clock starts again with the first byte after the previous request was read.
  The time a handler then takes (the bot's, above all) is not counted: ``upstream.timeout``
  bounds it.
* **Refusals by the parser get the precise status, with no body and nothing of the request in
  the log**: header fields too large or too many (RFC 6585 §5) ``431``, a request target too long
  (RFC 9112 §3) ``414``, anything else malformed ``400``; the connection is then closed, since
  the parser cannot find where the next request would start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler

__all__ = [
    "MAX_FIELD_BYTES",
    "MAX_HEADERS",
    "MAX_TARGET_BYTES",
    "GatewayConnection",
    "GatewayRunner",
    "RequestTimedOut",
    "parser_refusal",
]

log = logging.getLogger("pact_gateway.http")

MAX_FIELD_BYTES: Final = 8190
"""Bytes in a header field's name, and in its value (aiohttp's default); a personal agent's JWT takes
a few hundred."""
MAX_HEADERS: Final = 128
"""Header fields in one request (aiohttp's default)."""
MAX_TARGET_BYTES: Final = 8192
"""Bytes in the request target (RFC 9112 §3 asks for at least 8000). It differs from
:data:`MAX_FIELD_BYTES` on purpose: the parser's ``LineTooLong`` names only the limit it
crossed, and that is how :func:`parser_refusal` tells a long target from a long header."""
TOO_MANY_HEADERS: Final = "Too many headers received"
"""The message of aiohttp's ``BadHttpMessage`` for more than :data:`MAX_HEADERS` fields (both parsers)."""

# Written straight to the socket: no request exists yet for aiohttp's response machinery.
_HEADER_TIMEOUT_ANSWER: Final = (
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
)

RequestFactory = Callable[
    [RawRequestMessage, StreamReader, RequestHandler, AbstractStreamWriter, "asyncio.Task[None]"],
    web.BaseRequest,
]
RequestTimeout = Callable[[], float]
"""The ``limits.request_timeout`` in force (read per request, so a reload changes it)."""


def parser_refusal(error: HttpProcessingError) -> int:
    """The status for a request aiohttp's parser refused with ``error``."""
    if isinstance(error, LineTooLong):
        limit = error.args[1]
        if limit == MAX_FIELD_BYTES:
            return 431
        if limit == MAX_TARGET_BYTES:
            return 414
    elif error.message == TOO_MANY_HEADERS:
        return 431
    return 400


class RequestTimedOut(web.HTTPRequestTimeout):
    """The body was not in within ``limits.request_timeout``: a bare ``408``, then the connection closes."""

    empty_body = True  # no "408: Request Timeout" text: the answer is the status alone

    def __init__(self) -> None:
        super().__init__()
        self.force_close()  # says Connection: close


class GatewayConnection(RequestHandler):
    """aiohttp's connection protocol with a per-request read deadline and precise parser refusals.

    The deadline (``_due``) is set when the connection opens and by the first byte after the
    previous request was read, and cleared once a request's body is all in. One timer per
    connection enforces it: when the timer fires before the deadline in force (a later request's),
    it is set again for that deadline, and when no request is being timed it is left unarmed. A
    request on a kept-alive connection thus costs no timer of its own to schedule and cancel. When
    a deadline passes, what is late decides the answer (see the module's docstring).
    """

    __slots__ = (
        "_answering",
        "_arrived",
        "_body",
        "_deadline",
        "_due",
        "_late",
        "_make",
        "_request_timeout",
    )

    def __init__(self, manager: web.Server, *, request_timeout: RequestTimeout, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._request_timeout = request_timeout
        # aiohttp makes each request through this factory: ours notes the request as it starts.
        assert manager.request_factory is not None
        self._make: RequestFactory = manager.request_factory
        self._request_factory = self._request_started
        self._deadline: asyncio.TimerHandle | None = None
        """The connection's timer, when armed."""
        self._due: float | None = None
        """The loop time by which the request being timed must be in; ``None`` when none is."""
        self._arrived = False
        """Some byte of the request being timed has arrived."""
        self._answering: web.BaseRequest | None = None
        """The request handed to the app and not answered yet."""
        self._body: StreamReader | None = None
        """Its body, while part of it is still to come."""
        self._late = False
        """The body missed the deadline: the connection closes once the request is answered."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._start(arrived=False)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._due = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if data:
            if self._due is None:
                self._start(arrived=True)
            else:
                self._arrived = True
        super().data_received(data)

    def _request_started(
        self,
        message: RawRequestMessage,
        payload: StreamReader,
        protocol: RequestHandler,
        writer: AbstractStreamWriter,
        task: asyncio.Task[None],
    ) -> web.BaseRequest:
        """The request's line and headers are in and the app takes it; its body may still be coming."""
        request = self._make(message, payload, protocol, writer, task)
        self._answering = request
        content = request.content
        if content.is_eof():
            self._due = None  # no body, or all of it came with the headers (most requests)
        else:
            self._body = content
            content.on_eof(self._body_complete)
        return request

    def log_access(self, request: web.BaseRequest, response: web.StreamResponse, time: float | None) -> None:
        # aiohttp calls this once the answer is written, whatever it was: the handler is done.
        super().log_access(request, response, time)
        self._answering = None
        if self._late:
            self.force_close()  # and no lingering read of the rest of a body that was too slow

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        refusal = parser_refusal(exc)
        # Never the exception's text: it quotes the request (an Authorization header, say).
        log.info("request refused by the HTTP parser: %d (%s)", refusal, type(exc).__name__)
        # aiohttp answers a refused request as HTTP/1.0 (the request line may be what was refused),
        # where closing goes without saying: say it anyway, for the HTTP/1.1 client that sent it.
        response = web.Response(status=refusal, headers={"Connection": "close"})
        response.force_close()
        return response

    def _start(self, *, arrived: bool) -> None:
        """Time a request from now; the timer, if armed, is for an earlier deadline and re-arms itself."""
        self._arrived = arrived
        due = self._due = self._loop.time() + self._request_timeout()
        if self._deadline is None:
            self._deadline = self._loop.call_at(due, self._tick)

    def _body_complete(self) -> None:
        self._body = None
        self._due = None

    def _tick(self) -> None:
        self._deadline = None
        due = self._due
        if due is None:
            return  # nothing being timed: the next request's first byte arms the timer again
        if due > self._loop.time():
            self._deadline = self._loop.call_at(due, self._tick)
            return
        self._due = None
        self._expired()

    def _expired(self) -> None:
        body = self._body
        if body is not None and self._answering is not None:
            # The handler's next read of the body raises, and it answers 408.
            self._late = True
            body.set_exception(RequestTimedOut())
        elif body is not None:
            # Answered without reading it all (a 401, say); aiohttp is draining the rest: stop.
            self.force_close()
            body.set_exception(TimeoutError())
        elif self._answering is not None:
            # A pipelined request is late while this one is being answered: answer this one, then close.
            self.close()
        else:
            if self._arrived and self.transport is not None:
                self.transport.write(_HEADER_TIMEOUT_ANSWER)
                log.info("request refused: its headers were not complete within limits.request_timeout")
            self.force_close()


class ConnectionServer(web.Server):
    """aiohttp's low-level server making :class:`GatewayConnection` s, told when each request starts."""

    def __init__(
        self,
        handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
        *,
        request_factory: RequestFactory,
        request_timeout: RequestTimeout,
        handler_cancellation: bool,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            handler,
            request_factory=request_factory,
            handler_cancellation=handler_cancellation,
            **kwargs,
        )
        self._connection_args = kwargs
        self._request_timeout = request_timeout

    def __call__(self) -> RequestHandler:
        return GatewayConnection(
            self,
            loop=asyncio.get_running_loop(),
            request_timeout=self._request_timeout,
            **self._connection_args,
        )


class GatewayRunner(web.AppRunner):
    """``web.AppRunner`` serving the app through :class:`ConnectionServer`, with the parser limits above.

    aiohttp has no setting for the connection class, so the runner lets aiohttp build its server
    for the app (start-up signals, frozen app, every handler setting) and serves the same
    handler, request factory and settings through :class:`ConnectionServer`.
    """

    def __init__(self, app: web.Application, *, request_timeout: RequestTimeout, **kwargs: Any) -> None:
        super().__init__(
            app,
            max_line_size=MAX_TARGET_BYTES,
            max_field_size=MAX_FIELD_BYTES,
            max_headers=MAX_HEADERS,
            **kwargs,
        )
        self._request_timeout = request_timeout

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()
        return ConnectionServer(
            made.request_handler,
            request_factory=made.request_factory,
            request_timeout=self._request_timeout,
            handler_cancellation=made.handler_cancellation,
            # What aiohttp gives each connection: this runner's settings and the app's debug flag.
            **made._kwargs,
        )
