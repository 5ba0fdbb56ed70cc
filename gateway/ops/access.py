"""The access middleware: per-request metrics and the one structured access-log line.

It sits between the request-id middleware (so the id is known) and the error middleware
(so it sees the status the client gets, never an exception the error middleware turns into
an answer). It logs no traceback: a provider failure is logged once, where it happens.
"""

from __future__ import annotations

import asyncio
import logging
import time

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.http.a2a import AUTH_FAILURE, PA_IDENTITY
from gateway.http.middlewares import REQUEST_ID
from gateway.http.state import METRICS, RUNTIME
from gateway.ops.logs import ACCESS_LOGGER, sub_digest
from gateway.ops.metrics import OTHER_OPERATION, UNMATCHED, brand_label, outcome_for_status

__all__ = ["CLIENT_GONE", "access_middleware", "operation_name"]

log = logging.getLogger(ACCESS_LOGGER)

CLIENT_GONE = 499
"""The status recorded when the client went away before the answer (nginx's convention)."""


def operation_name(request: web.Request) -> str:
    """The route's name (an A2A method, see :mod:`gateway.http.routes`), or a fixed stand-in."""
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


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Time the request, then count it and write its access line whatever way it ended."""
    started = time.perf_counter()
    status = 500
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
        _record(request, status, time.perf_counter() - started)


def _record(request: web.Request, status: int, seconds: float) -> None:
    config = request.app[RUNTIME].current.config
    metrics = request.app[METRICS]
    operation = operation_name(request)
    brand = brand_label(config, _brand_id(request))
    outcome = "cancelled" if status == CLIENT_GONE else outcome_for_status(status)
    metrics.observe_request(brand, operation, outcome, seconds)
    auth_failure = request.get(AUTH_FAILURE)
    if auth_failure is not None:
        metrics.auth_failed(auth_failure)
    if not config.logging.access_log:
        return
    identity = request.get(PA_IDENTITY)
    log.info(
        "%s %s %d",
        request.method,
        operation,
        status,
        extra={
            "request_id": request.get(REQUEST_ID),
            "method": request.method,
            "operation": operation,
            "brand": brand,
            "status": status,
            "outcome": outcome,
            "latency_ms": round(seconds * 1000, 2),
            "pa_issuer": None if identity is None else identity.issuer,
            "sub_hash": None if identity is None else sub_digest(identity.issuer, identity.sub),
            "auth_failure": auth_failure,
        },
    )
