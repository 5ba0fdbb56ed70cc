"""OpenTelemetry spans of the gateway, exported over OTLP/HTTP: imported only when ``tracing`` is configured.

One server span per request, named after its route, under the caller's ``traceparent`` when it
sent a valid one (parsed by :mod:`gateway.ops.tracing`, not by OpenTelemetry's propagator, so
both modes accept exactly the same headers); inside it, spans for the personal-agent JWT and
delegation-token checks, the store steps of a turn and the §6 limits, and the bot call, whose
span is the parent the bot is told about.

The tracer provider belongs to the app, never to the process-wide OpenTelemetry globals: two
gateways in one process (tests, the supervisor beside nothing else) each export their own, and
nothing else in the process is traced by accident. For the same reason the aiohttp
instrumentations are not used: they read the global provider and propagator.

Exceptions are not recorded on spans (a message or traceback could carry what logs never do);
a failed step gets status ``ERROR`` and ``error.type``: the failure's bounded ``reason`` when it
has one (an :class:`~gateway.upstream.base.UpstreamError`'s, an authentication failure's), else
the exception's class.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    set_span_in_context,
)

from gateway.config import TracingConfig
from gateway.ops.metrics import CLIENT_GONE, operation_name
from gateway.ops.tracing import AttributeValue, TraceContext, current_trace, incoming_trace, using_trace

__all__ = ["INSTRUMENTATION", "OtelSpans", "otlp_spans", "tracer_provider"]

INSTRUMENTATION = "pact_gateway"
"""The instrumentation scope name of every span the gateway records."""

_T = TypeVar("_T")


def tracer_provider(config: TracingConfig) -> TracerProvider:
    """A provider for ``service_name``: ``sample_ratio`` of new traces, a caller's sampled flag followed."""
    return TracerProvider(
        resource=Resource.create({SERVICE_NAME: config.service_name}),
        sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
    )


def otlp_spans(config: TracingConfig) -> OtelSpans:
    """Spans batched in the background and sent to ``otlp_endpoint`` (OTLP over HTTP, protobuf)."""
    provider = tracer_provider(config)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=config.otlp_endpoint)))
    return OtelSpans(provider)


def _trace_of(span: Span, state: str | None) -> TraceContext:
    context = span.get_span_context()
    return TraceContext(
        f"{context.trace_id:032x}", f"{context.span_id:016x}", f"{context.trace_flags:02x}", state
    )


def _parent(incoming: TraceContext | None) -> Context:
    """The caller's span as a remote parent; an empty context (a new trace) without one."""
    if incoming is None:
        return Context()
    remote = SpanContext(
        int(incoming.trace_id, 16),
        int(incoming.span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(int(incoming.flags, 16)),
    )
    return set_span_in_context(NonRecordingSpan(remote), Context())


def _failed(span: Span, error: BaseException) -> None:
    reason = getattr(error, "reason", None)
    span.set_attribute("error.type", reason if isinstance(reason, str) else type(error).__qualname__)
    span.set_status(Status(StatusCode.ERROR))


class _ServerSpans:
    """The middleware of :class:`OtelSpans`: the request's span, named ``METHOD route``, with the status
    the client got."""

    __middleware_version__ = 1  # aiohttp: a new-style ``(request, handler)`` middleware

    def __init__(self, tracer: Tracer) -> None:
        self._tracer = tracer

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        incoming = incoming_trace(request.headers)
        match_info = request.match_info
        resource = match_info.route.resource
        route = None if match_info.http_exception is not None or resource is None else resource.canonical
        attributes: dict[str, AttributeValue] = {
            "http.request.method": request.method,
            "pact.operation": operation_name(request),
        }
        if route is not None:
            attributes["http.route"] = route
        with self._tracer.start_as_current_span(
            request.method if route is None else f"{request.method} {route}",
            context=_parent(incoming),
            kind=SpanKind.SERVER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            status = 500
            try:
                response = await using_trace(
                    request, _trace_of(span, None if incoming is None else incoming.state), handler
                )
                status = response.status
                return response
            except web.HTTPException as exc:
                status = exc.status
                raise
            except asyncio.CancelledError:
                status = CLIENT_GONE
                raise
            finally:
                span.set_attribute("http.response.status_code", status)
                if status >= 500:  # a 4xx is the client's doing, not a failure of this span
                    span.set_status(Status(StatusCode.ERROR))
                    span.set_attribute("error.type", str(status))


class OtelSpans:
    """The gateway's :class:`~gateway.ops.tracing.Spans` on an OpenTelemetry ``provider``."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self._tracer = provider.get_tracer(INSTRUMENTATION)
        self._middleware = _ServerSpans(self._tracer)

    @property
    def middleware(self) -> Middleware:
        return self._middleware

    @contextmanager
    def span(
        self, name: str, attributes: Mapping[str, AttributeValue] | None = None, *, client: bool = False
    ) -> Iterator[TraceContext]:
        with self._tracer.start_as_current_span(
            name,
            kind=SpanKind.CLIENT if client else SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            request_trace = current_trace()
            try:
                yield _trace_of(span, None if request_trace is None else request_trace.state)
            except BaseException as error:
                _failed(span, error)
                raise

    async def run(self, name: str, work: Awaitable[_T]) -> _T:
        with self.span(name):
            return await work

    async def close(self) -> None:
        # Off the event loop: shutting down flushes the batch with a blocking HTTP request.
        await asyncio.to_thread(self.provider.shutdown)
