"""§2.2 A2A operations relative to a Brand's interface URL.

Every handler answers in the order the conformance suites check: the route shape was matched
by the router, then the caller is authenticated (bare 401), then the Brand is looked up
(bare 404 even with a valid token), then the §6 rate limits are charged (bare 429 with
``Retry-After``), and only then does the body count. ``message:send`` reads its body before
charging, so the limits can ride in the turn's own store step (one Redis round trip fewer),
and keeps the order by charging them on their own first when the body is bad.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from aiohttp import web

from gateway.auth.pa_jwt import PAIdentity
from gateway.config import BrandConfig
from gateway.handlers.caller import authenticate, read_body
from gateway.handlers.state import METRICS, RUNTIME, Runtime
from gateway.http import responses
from gateway.http.middlewares import REQUEST_ID
from gateway.http.notes import RETRY_SERVED, refused
from gateway.oauth.delegation import DELEGATION_HEADER, Delegation, InvalidToken
from gateway.ops.limits import RateLimited
from gateway.ops.tracing import SPANS, TRACE, traced
from gateway.protocol import errors
from gateway.protocol.errors import A2AError, Reason
from gateway.protocol.messages import parse_send_message
from gateway.protocol.tasks import empty_task_list, parse_page_size

log = logging.getLogger("pact_gateway.a2a")


class Caller(NamedTuple):
    """An authenticated request for one Brand (a named tuple: built per request, cheaply)."""

    runtime: Runtime
    identity: PAIdentity
    brand: BrandConfig


Operation = Callable[[web.Request, Caller], Awaitable[web.Response]]
Handler = Callable[[web.Request], Awaitable[web.Response]]


def operation(handler: Operation) -> Handler:
    """An A2A operation: authenticated, for a known Brand, rate limited before ``handler`` runs."""
    return _authenticated(handler, charge_first=True)


def turn_operation(handler: Operation) -> Handler:
    """Like :func:`operation`, but ``handler`` charges the §6 limits itself (``message:send``)."""
    return _authenticated(handler, charge_first=False)


def _authenticated(handler: Operation, *, charge_first: bool) -> Handler:
    async def wrapped(request: web.Request) -> web.Response:
        runtime = request.app[RUNTIME].current
        identity = await authenticate(request, runtime)
        if identity is None:
            return responses.unauthorized()  # §3.4
        brand = runtime.config.brands.get(request.match_info["brand"])
        if brand is None:
            return responses.not_found()
        try:
            if charge_first:
                # §6: per personal agent and per (personal agent, sub), before the body is read.
                await traced(
                    request.app[SPANS],
                    "pact.store.rate_limits",
                    runtime.limits.check_a2a(brand.id, brand.rate_limits, identity.issuer, identity.sub),
                )
            return await handler(request, Caller(runtime, identity, brand))
        except RateLimited as limited:
            refused(request, limited.limit)
            return responses.too_many_requests(limited.retry_after)

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


async def _read_body(request: web.Request, limit: int) -> bytes:
    body = await read_body(request, limit)
    if body is None:
        raise A2AError(Reason.INVALID_PARAMS, "Request body too large")
    return body


def _verify_delegation(request: web.Request, caller: Caller, header: str) -> Delegation:
    verifier = caller.runtime.delegation
    if verifier is None:
        raise InvalidToken("not_delegating")
    spans = request.app[SPANS]
    if spans is None:
        return verifier.verify(header, caller.brand, caller.identity.issuer)
    with spans.span("pact.verify.delegation_token"):
        return verifier.verify(header, caller.brand, caller.identity.issuer)


def _invalid_token(request: web.Request, caller: Caller, refused_token: InvalidToken) -> web.Response:
    # §5.5: the reason is for the log and metrics, never the client; the token is never logged.
    log.info(
        "delegation token refused: reason=%s",
        refused_token.reason,
        extra={"request_id": request[REQUEST_ID], "brand": caller.brand.id},
    )
    request.app[METRICS].delegation_event(caller.brand.id, "invalid_delegation_token")
    refused(request, f"invalid_token:{refused_token.reason}")
    return responses.invalid_token()


@turn_operation
async def send_message(request: web.Request, caller: Caller) -> web.Response:
    """``POST message:send`` (§4, and §5.5 with ``X-A2A-User-Delegation``). Request headers are
    lenient: any Content-Type, any A2A-Version.

    A valid message's §6 limits are charged inside the store step that claims the turn, so the
    hot path is two Redis round trips (begin, complete), a delegated turn's too: its grant check
    rides in the first. A bad body must still lose to a 429, so it charges the limits on their
    own first (one round trip, as any other operation). A delegation token is authentication,
    checked after the personal-agent JWT and before the body.
    """
    runtime, brand, identity = caller.runtime, caller.brand, caller.identity
    header = request.headers.get(DELEGATION_HEADER)
    delegation: Delegation | None = None
    if header is not None:
        try:
            delegation = _verify_delegation(request, caller, header)
        except InvalidToken as refused_token:
            return _invalid_token(request, caller, refused_token)
    try:
        message = parse_send_message(await _read_body(request, runtime.config.limits.max_body_bytes))
    except A2AError:
        await runtime.limits.check_a2a(brand.id, brand.rate_limits, identity.issuer, identity.sub)
        raise
    charge = runtime.limits.a2a_charge(brand.id, brand.rate_limits, identity.issuer, identity.sub)
    owner = runtime.turns.owner(brand.id, identity.issuer, identity.sub)
    try:
        answer = await runtime.turns.send(
            owner, message, charge, request[REQUEST_ID], delegation, trace=request[TRACE]
        )
    except InvalidToken as revoked:  # §5.5: the grant was revoked
        return _invalid_token(request, caller, revoked)
    request[RETRY_SERVED] = answer.replayed
    return responses.a2a(answer.body)


@operation
async def list_tasks(request: web.Request, caller: Caller) -> web.Response:
    """``GET tasks``: always empty, since ordinary turns create no task (§4.2)."""
    return responses.a2a(empty_task_list(parse_page_size(request.query.get("pageSize"))))


@operation
async def get_task(request: web.Request, caller: Caller) -> web.Response:
    """``GET tasks/{id}`` and ``POST tasks/{id}:cancel``: no task exists (§2.2)."""
    raise errors.task_not_found(request.match_info["task_id"])


@operation
async def streaming_unsupported(request: web.Request, caller: Caller) -> web.Response:
    """``message:stream`` and ``tasks/{id}:subscribe``: the card says ``streaming: false``."""
    raise A2AError(Reason.UNSUPPORTED_OPERATION, errors.STREAMING_UNSUPPORTED)


@operation
async def extended_card_unsupported(request: web.Request, caller: Caller) -> web.Response:
    raise A2AError(Reason.UNSUPPORTED_OPERATION, errors.EXTENDED_CARD_UNSUPPORTED)


@operation
async def push_unsupported(request: web.Request, caller: Caller) -> web.Response:
    raise A2AError(Reason.PUSH_NOTIFICATION_NOT_SUPPORTED, errors.PUSH_UNSUPPORTED)
