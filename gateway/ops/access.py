"""The access middleware: per-request metrics and the one structured access-log line.

It sits between the request-id middleware (so the id is known) and the error middleware
(so it sees the status the client gets, never an exception the error middleware turns into
an answer). It logs no traceback: a provider failure is logged once, where it happens.

It runs on every request, so it takes the cheap road wherever one exists: the line goes out
through :func:`~gateway.ops.logs.log_fields` (its fields dict is built only when the access
logger is enabled), and the hashed ``sub`` comes from a small per-app cache, since a
personal agent's turns come from the same few Users. Why a request was refused (``reason``)
and whether a turn was a replayed retry (``retry_served``) are read from what the handling
noted on the request (:mod:`gateway.http.notes`), never from the body it answered; the trace
id is the request's span (:mod:`gateway.ops.tracing`); the client's address is the one every
per-address limit uses (:func:`~gateway.http.client_address.client_address`: the peer's, or
what a trusted proxy says). Without OpenTelemetry this middleware
starts that span itself (``starts_traces``), rather than a tracing middleware of its own before
it: a middleware layer costs every request a coroutine and a call through aiohttp's chain.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.http.caller import AUTH_FAILURE, PA_IDENTITY
from gateway.http.client_address import UntrustedForwarding, client_address
from gateway.http.middlewares import REQUEST_ID
from gateway.http.notes import REFUSAL, RETRY_SERVED
from gateway.http.state import METRICS, RUNTIME
from gateway.ops.logs import ACCESS_LOGGER, SubDigests, log_fields
from gateway.ops.metrics import OTHER_OPERATION, UNMATCHED, brand_label, outcome_for_status
from gateway.ops.tracing import CURRENT_TRACE, TRACE, TraceContext, start_trace

__all__ = ["CLIENT_GONE", "AccessLog", "operation_name"]

CLIENT_GONE = 499
"""The status recorded when the client went away before the answer (nginx's convention)."""
_TURN = "SendMessage"
"""The one operation that notes whether a retry was served (:data:`~gateway.http.notes.RETRY_SERVED`)."""


def operation_name(request: web.Request) -> str:
    """The route's name (an A2A method, see :mod:`gateway.routes`), or a fixed stand-in."""
    match_info = request.match_info
    if match_info.http_exception is not None:
        return UNMATCHED
    return match_info.route.name or OTHER_OPERATION


def _brand_id(request: web.Request) -> str | None:
    brand = request.match_info.get("brand")
    if brand is None and request.match_info.http_exception is None:
        found = request.app[RUNTIME].current.config.brand_for_domain(request.host)
        return None if found is None else found.id
    return brand


def _reason(request: web.Request, status: int, auth_failure: str | None) -> str | None:
    """Why a refused request was refused, as its handling noted it; nothing is read for a success."""
    if status < 400:
        return None
    return auth_failure if auth_failure is not None else request.get(REFUSAL)


class AccessLog:
    """The access middleware of one app (``middlewares=[…, AccessLog(), …]``).

    An object rather than a bare function so that what it keeps between requests, the
    digests of recent Users and whether it warned of an untrusted proxy
    (:class:`~gateway.http.client_address.UntrustedForwarding`), belongs to the app and not to
    the module.
    """

    __middleware_version__ = 1  # aiohttp: a new-style ``(request, handler)`` middleware

    def __init__(self, digests: SubDigests | None = None, *, starts_traces: bool = True) -> None:
        self._log = logging.getLogger(ACCESS_LOGGER)
        self._digests = SubDigests() if digests is None else digests
        self._starts_traces = starts_traces
        """Whether this middleware gives each request its span; ``False`` where OpenTelemetry's
        server-span middleware, before it, does (:mod:`gateway.ops.otel`)."""
        self._forwarding = UntrustedForwarding()

    async def __call__(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Time the request, then count it and write its access line whatever way it ended."""
        started = time.perf_counter()
        status = 500
        if self._starts_traces:
            # The request's span: on the request, and for every record logged while it runs.
            started_trace = start_trace(request.headers)
            request[TRACE] = started_trace
            token = CURRENT_TRACE.set(started_trace)
            trace: TraceContext | None = started_trace
        else:
            trace = CURRENT_TRACE.get()
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        except asyncio.CancelledError:
            status = CLIENT_GONE
            raise
        finally:
            self._record(request, status, time.perf_counter() - started, trace)
            if self._starts_traces:
                CURRENT_TRACE.reset(token)

    def _record(self, request: web.Request, status: int, seconds: float, trace: TraceContext | None) -> None:
        app = request.app
        config = app[RUNTIME].current.config
        operation = operation_name(request)
        brand = brand_label(config, _brand_id(request))
        outcome = "cancelled" if status == CLIENT_GONE else outcome_for_status(status)
        metrics = app[METRICS]
        metrics.observe_request(brand, operation, outcome, seconds)
        # Authentication sets one or the other, so a served request never pays the missing
        # key's KeyError that looking up AUTH_FAILURE would raise and catch.
        identity = request.get(PA_IDENTITY)
        auth_failure = request.get(AUTH_FAILURE) if identity is None else None
        if auth_failure is not None:
            metrics.auth_failed(auth_failure)
        self._forwarding.check(request, config.listen)
        if not config.logging.access_log or not self._log.isEnabledFor(logging.INFO):
            return
        method = request.method
        log_fields(
            self._log,
            logging.INFO,
            f"{method} {operation} {status}",
            {
                "request_id": request.get(REQUEST_ID),
                "method": method,
                "client_address": client_address(request, config.listen),
                "operation": operation,
                "brand": brand,
                "status": status,
                "outcome": outcome,
                "latency_ms": round(seconds * 1000, 2),
                "pa_issuer": None if identity is None else identity.issuer,
                "sub_hash": None if identity is None else self._digests.get(identity.issuer, identity.sub),
                "auth_failure": auth_failure,
                "reason": _reason(request, status, auth_failure),
                "retry_served": request.get(RETRY_SERVED) if status == 200 and operation == _TURN else None,
                "trace_id": None if trace is None else trace.trace_id,
            },
        )
