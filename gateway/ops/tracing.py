"""W3C Trace Context: a caller's ``traceparent`` accepted, passed on to the bot, and its trace id logged.

A personal agent may send ``traceparent`` (and ``tracestate``). It is parsed strictly, as the W3C
Trace Context Recommendation says a receiver must: lowercase hex only, no all-zero ids, version
``ff`` refused, a version ``00`` header with anything after it refused, one header only. A header
that fails is ignored and a new trace is started, never half-used: the value is passed on to
the Brand's bot and its tracing backend, so nothing malformed may ride through the gateway.

Every request runs in a :class:`TraceContext` that names the gateway's own span: the caller's
trace id (or a new one), a new span id, the caller's flags. The bot is called with that span as
its parent (:func:`trace_headers`), so the bot's spans are children of the gateway's; the
access line and every other record logged while the request runs carry the trace id
(:func:`current_trace`, read by :mod:`gateway.ops.logs`).

Without OpenTelemetry (the default) that span is only an id: nothing is recorded or exported,
and this module imports nothing of OpenTelemetry. With ``tracing.otlp_endpoint`` set,
:mod:`gateway.ops.otel` records real spans instead (:class:`Spans`): its server-span middleware
starts the request's span (otherwise the access middleware does, :func:`start_trace`), and the
verification, store and bot steps get spans of their own through :func:`traced`, which costs
nothing when tracing is off.
"""

from __future__ import annotations

import random
import re
from collections.abc import Awaitable, Iterable, Mapping
from contextlib import AbstractContextManager
from contextvars import ContextVar
from typing import NamedTuple, Protocol, TypeAlias, TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from multidict import CIMultiDictProxy

__all__ = [
    "CURRENT_TRACE",
    "SPANS",
    "TRACE",
    "TRACEPARENT",
    "TRACESTATE",
    "AttributeValue",
    "Spans",
    "TraceContext",
    "current_trace",
    "incoming_trace",
    "new_trace",
    "parse_traceparent",
    "parse_tracestate",
    "start_trace",
    "trace_headers",
    "traced",
    "using_trace",
]

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"

_VERSION_00_LENGTH = 55
# Version, trace id, parent id, flags; each field lowercase hex of a fixed width.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE_ID = "0" * 32
_ZERO_SPAN_ID = "0" * 16
_KNOWN_FLAGS = 0x03
"""``sampled`` (Level 1) and ``random`` (Level 2); every other bit is reserved and sent as zero."""

# tracestate list members (W3C Trace Context §3.3.1.3): a simple or multi-tenant key, '=', a value.
_KEY_CHARS = r"[a-z0-9_\-*/]"
_TRACESTATE_MEMBER = re.compile(
    rf"(?:[a-z]{_KEY_CHARS}{{0,255}}|[a-z0-9]{_KEY_CHARS}{{0,240}}@[a-z]{_KEY_CHARS}{{0,13}})"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)
_MAX_TRACESTATE_MEMBERS = 32
_TRACESTATE_PROPAGATED = 512
"""Characters of ``tracestate`` passed on at most; the spec asks receivers to take at least this many."""
_LONG_MEMBER = 128
_OWS = " \t"


class TraceContext(NamedTuple):
    """The span a piece of the gateway's work runs in: what a call it makes names as its parent."""

    trace_id: str
    """32 lowercase hex digits, never all zero."""
    span_id: str
    """16 lowercase hex digits, never all zero."""
    flags: str = "00"
    """2 lowercase hex digits; ``01`` is ``sampled``."""
    state: str | None = None
    """The caller's ``tracestate``, passed on unchanged; ``None`` when it sent none (or a bad one)."""

    @property
    def traceparent(self) -> str:
        """The version ``00`` header naming this span as the parent."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"

    def child(self) -> TraceContext:
        """A new span of the same trace, under this one: a new span id, the same flags and state."""
        return self._replace(span_id=_new_span_id())


def _new_span_id() -> str:
    """16 hex digits from :mod:`random`, as OpenTelemetry's own id generator draws them: an id names
    a span and guards nothing, and the OS's random source would cost a system call a request.
    W3C forbids the all-zero id, which ``or 1`` replaces (one draw in 2^64)."""
    return f"{random.getrandbits(64) or 1:016x}"


def new_trace() -> TraceContext:
    """A new trace, not sampled: the gateway records nothing of it unless OpenTelemetry is on."""
    return TraceContext(f"{random.getrandbits(128) or 1:032x}", _new_span_id())


def parse_traceparent(value: str) -> TraceContext | None:
    """The parent a ``traceparent`` value names, or ``None`` when the value is not valid.

    Versions above ``00`` are read as the Recommendation says (the version ``00`` fields, then
    either the end or a ``-``), and the context passed on is version ``00``, with only the
    flags this version knows.
    """
    value = value.strip(_OWS)
    match = _TRACEPARENT.match(value)
    if match is None:
        return None
    version, trace_id, span_id, flags = match.groups()
    if version == "ff" or trace_id == _ZERO_TRACE_ID or span_id == _ZERO_SPAN_ID:
        return None
    if len(value) != _VERSION_00_LENGTH and (version == "00" or value[_VERSION_00_LENGTH] != "-"):
        return None
    known = int(flags, 16) & _KNOWN_FLAGS
    return TraceContext(trace_id, span_id, f"{known:02x}")


def parse_tracestate(values: Iterable[str]) -> str | None:
    """The ``tracestate`` to pass on, from every such header of a request; ``None`` if invalid or empty.

    A malformed member, a key given twice or more than 32 members make the whole header
    invalid; over 512 characters, members longer than 128 go first, then members from the end.
    """
    members: list[str] = []
    keys: set[str] = set()
    for value in values:
        for raw in value.split(","):
            member = raw.strip(_OWS)
            if not member:
                continue
            if _TRACESTATE_MEMBER.fullmatch(member) is None:
                return None
            key = member.partition("=")[0]
            if key in keys:
                return None
            keys.add(key)
            members.append(member)
    if not members or len(members) > _MAX_TRACESTATE_MEMBERS:
        return None
    if len(",".join(members)) > _TRACESTATE_PROPAGATED:
        members = [member for member in members if len(member) <= _LONG_MEMBER]
        while members and len(",".join(members)) > _TRACESTATE_PROPAGATED:
            members.pop()
    return ",".join(members) or None


def incoming_trace(headers: CIMultiDictProxy[str]) -> TraceContext | None:
    """The caller's valid trace context, with its ``tracestate``; ``None`` when absent or invalid.

    Two ``traceparent`` headers are invalid together: which one is the parent cannot be known.
    """
    if TRACEPARENT not in headers:
        return None
    values = headers.getall(TRACEPARENT)
    parent = parse_traceparent(values[0]) if len(values) == 1 else None
    if parent is None:
        return None
    if TRACESTATE in headers:
        return parent._replace(state=parse_tracestate(headers.getall(TRACESTATE)))
    return parent


def start_trace(headers: CIMultiDictProxy[str]) -> TraceContext:
    """The gateway's span for a request: a child of the caller's valid context, or a new trace.

    Called on every request: a request without ``traceparent`` (most) gets its new trace here,
    with no call through :func:`incoming_trace` and :func:`new_trace`.
    """
    if TRACEPARENT not in headers:
        # Both ids from one draw, in hex by bytes.hex(), and the tuple made by tuple.__new__ in C:
        # an int's format spec and NamedTuple's generated __new__ (Python code) cost about 3,000
        # instructions each under callgrind, most of this function's 10,000 before.
        ids = random.getrandbits(192).to_bytes(24).hex()
        trace_id, span_id = ids[:32], ids[32:]
        if trace_id == _ZERO_TRACE_ID or span_id == _ZERO_SPAN_ID:
            return new_trace()  # W3C forbids all-zero ids: one draw in 2^64
        return tuple.__new__(TraceContext, (trace_id, span_id, "00", None))
    parent = incoming_trace(headers)
    return new_trace() if parent is None else parent.child()


def trace_headers(trace: TraceContext | None) -> dict[str, str]:
    """The headers that make a call the child of ``trace``'s span: for every bot adapter's request.

    ``{}`` without a trace, so an adapter can always write ``{**headers, **trace_headers(turn.trace)}``.
    """
    if trace is None:
        return {}
    if trace.state is None:
        return {TRACEPARENT: trace.traceparent}
    return {TRACEPARENT: trace.traceparent, TRACESTATE: trace.state}


CURRENT_TRACE: ContextVar[TraceContext | None] = ContextVar("pact_gateway_trace", default=None)
"""The span of the request being handled in this context; set by whichever middleware starts the
request's span (:class:`gateway.handlers.access.AccessLog`, or OpenTelemetry's through
:func:`using_trace`)."""
TRACE = web.RequestKey("trace", TraceContext)
"""The gateway's span of the request, set by the middleware that starts it, before any handler runs."""


def current_trace() -> TraceContext | None:
    """The span of the request being handled in this context (a task of the request), if any."""
    return CURRENT_TRACE.get()


async def using_trace(request: web.Request, trace: TraceContext, handler: Handler) -> web.StreamResponse:
    """Run ``handler`` with ``trace`` as the request's span: on the request, and for its log records."""
    request[TRACE] = trace
    token = CURRENT_TRACE.set(trace)
    try:
        return await handler(request)
    finally:
        CURRENT_TRACE.reset(token)


AttributeValue: TypeAlias = str | bool | int | float
_T = TypeVar("_T")


class Spans(Protocol):
    """Where recorded spans go when tracing is on (:class:`gateway.ops.otel.OtelSpans`)."""

    @property
    def middleware(self) -> Middleware:
        """The server-span middleware, before the access middleware, which then starts no span itself."""
        ...

    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None, *, client: bool = False
    ) -> AbstractContextManager[TraceContext]:
        """A span under the current one, for the ``with`` block; ``client`` for a call to another service."""
        ...

    def run(self, name: str, work: Awaitable[_T]) -> Awaitable[_T]:
        """``work`` awaited inside a span called ``name``."""
        ...

    async def close(self) -> None:
        """Export what is still buffered and stop."""
        ...


SPANS: web.AppKey[Spans | None] = web.AppKey("spans")
"""The app's recorded spans, or ``None`` (the default): then nothing is recorded."""


def traced(spans: Spans | None, name: str, work: Awaitable[_T]) -> Awaitable[_T]:
    """``work`` inside a span called ``name`` when tracing is on; ``work`` itself, for nothing, when off."""
    return work if spans is None else spans.run(name, work)
