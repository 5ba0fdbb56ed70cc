"""§2.2 A2A operations relative to a Brand's interface URL.

Every handler answers in the order the conformance suites check: the route shape was matched
by the router, then the caller is authenticated (bare 401), then the Brand is looked up
(bare 404 even with a valid token), then the §6 rate limits are charged (bare 429 with
``Retry-After``), and only then does the body count. ``message:send`` reads its body before
charging, so the limits can ride in the turn's own store step (one Redis round trip fewer),
and keeps the order by charging them on their own first when the body is bad.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import NamedTuple

from aiohttp import web

from gateway.auth.pa_jwt import AuthFailure, PAIdentity, bearer_token
from gateway.config import BrandConfig
from gateway.http import responses
from gateway.http.middlewares import REQUEST_ID
from gateway.http.state import RUNTIME, Runtime
from gateway.ops.limits import RateLimited
from gateway.protocol import errors
from gateway.protocol.errors import A2AError, Reason
from gateway.protocol.messages import parse_send_message
from gateway.protocol.tasks import empty_task_list, parse_page_size

AUTH_FAILURE = web.RequestKey("auth_failure", str)
PA_IDENTITY = web.RequestKey("pa_identity", PAIdentity)
"""The verified caller, for the access log (issuer, hashed ``sub``); set once authentication passed."""


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
        try:
            token = bearer_token(request.headers.get("Authorization"))
            identity = await runtime.verifier.verify(token)
        except AuthFailure as failure:
            # §3.4: the reason is for the access line and metrics, never the client; the verifier
            # has already logged a registered issuer's rejection.
            request[AUTH_FAILURE] = failure.reason
            return responses.unauthorized()
        request[PA_IDENTITY] = identity
        brand = runtime.config.brands.get(request.match_info["brand"])
        if brand is None:
            return responses.not_found()
        try:
            if charge_first:
                # §6: per personal agent and per (personal agent, sub), before the body is read.
                await runtime.limits.check_a2a(brand.id, brand.rate_limits, identity.issuer, identity.sub)
            return await handler(request, Caller(runtime, identity, brand))
        except RateLimited as limited:
            return responses.too_many_requests(limited.retry_after)

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


async def _read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise A2AError(Reason.INVALID_PARAMS, "Request body too large")
    # StreamReader.read(n) returns what has arrived so far, up to n: a body sent in several
    # pieces (a slow client, chunked encoding) takes several reads. At most limit + 1 bytes are
    # ever held, so a body without Content-Length cannot grow past the limit either.
    content = request.content
    body = await content.read(limit + 1)
    while len(body) <= limit and not content.at_eof():
        more = await content.read(limit + 1 - len(body))
        if not more:
            break
        body += more
    if len(body) > limit:
        raise A2AError(Reason.INVALID_PARAMS, "Request body too large")
    return body


@turn_operation
async def send_message(request: web.Request, caller: Caller) -> web.Response:
    """``POST message:send`` (§4). Request headers are lenient: any Content-Type, any A2A-Version.

    A valid message's §6 limits are charged inside the store step that claims the turn, so the
    hot path is two Redis round trips (begin, complete). A bad body must still lose to a 429,
    so it charges the limits on their own first (one round trip, as any other operation).
    """
    runtime, brand, identity = caller.runtime, caller.brand, caller.identity
    try:
        message = parse_send_message(await _read_body(request, runtime.config.limits.max_body_bytes))
    except A2AError:
        await runtime.limits.check_a2a(brand.id, brand.rate_limits, identity.issuer, identity.sub)
        raise
    charge = runtime.limits.a2a_charge(brand.id, brand.rate_limits, identity.issuer, identity.sub)
    owner = runtime.turns.owner(brand.id, identity.issuer, identity.sub)
    return responses.a2a(await runtime.turns.send(owner, message, charge, request[REQUEST_ID]))


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
