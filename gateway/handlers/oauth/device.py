"""RFC 8628 §3.1–3.2 the device authorization endpoint (§5.3); starting an authorization is
:func:`gateway.oauth.device.start_device_authorization`, shared with §5.5 step-up."""

from __future__ import annotations

from typing import Final

from aiohttp import web

from gateway.handlers.oauth.client_auth import Client, pa_client
from gateway.handlers.state import METRICS
from gateway.http.notes import refused
from gateway.oauth.authorization_details import PARAMETER, requested_details
from gateway.oauth.device import start_device_authorization
from gateway.oauth.errors import ErrorCode, OAuthError, json_answer
from gateway.oauth.forms import parse_scope
from gateway.ops.limits import DEVICE_AUTHORIZATION, RateLimited, named_limit
from gateway.store.base import StoreFull

__all__ = ["STORE_FULL_RETRY_AFTER", "device_authorization"]

STORE_FULL_RETRY_AFTER: Final = 60
"""Seconds a device authorization refused for a full memory store is told to wait (a pass of its sweep)."""


@pa_client
async def device_authorization(request: web.Request, client: Client) -> web.Response:
    """``POST {interface}/oauth/device_authorization`` (RFC 8628 §3.1–3.2, §5.3).

    The scopes must all be on the card (§5.2) and are kept in its order; the authorization is
    bound to the personal agent *and* its ``sub``, so only the same (PA, User) can redeem it.
    ``authorization_details`` (RFC 9396 §2), optional, must fit the Brand's configured types and
    the scopes of this same request, else ``400 invalid_authorization_details`` (RFC 9396 §5),
    counted as ``pact_delegation_events{event="authorization_details_refused"}``.
    Past ``rate_limits.device_authorization`` the answer is ``429`` with ``Retry-After`` and the
    RFC 8628 §3.5 ``slow_down`` code in the RFC 6749 §5.2 JSON body: the personal agent should
    ask again later, not at once.
    """
    brand = client.brand
    scopes = parse_scope(client.form.get("scope"), brand.delegation.scopes)
    try:
        details = requested_details(client.form.get(PARAMETER), brand.delegation, scopes)
    except OAuthError:
        request.app[METRICS].delegation_event(brand.brand.id, "authorization_details_refused")
        raise
    settings = brand.brand.rate_limits
    identity = client.identity
    try:
        # Each authorization asks a person to sign in: a few a minute per (personal agent, sub).
        await client.runtime.limits.enforce(
            brand.brand.id,
            named_limit(DEVICE_AUTHORIZATION, settings.device_authorization, identity.issuer, identity.sub),
            fail_open=settings.fail_open,
        )
    except RateLimited as limited:
        refused(request, limited.limit)
        return json_answer(
            {"error": ErrorCode.SLOW_DOWN.value, "error_description": "too many device authorizations"},
            status=429,
            headers={"Retry-After": str(limited.retry_after)},
        )
    try:
        started = await start_device_authorization(
            client.server.store,
            brand.delegation,
            brand.urls,
            brand_id=brand.brand.id,
            client_id=client.identity.issuer,
            owner_digest=client.owner_digest,
            scopes=scopes,
            now=client.server.clock(),
            details=details,
        )
    except StoreFull:
        # The memory store at its bound with nothing that may go: ask again later (RFC 8628 §3.5's
        # code, as for the rate limit), counted as pact_rate_limited_total{limit="store_full"}.
        refused(request, "store_full")
        request.app[METRICS].rate_limited.labels(brand=brand.brand.id, limit="store_full").inc()
        return json_answer(
            {"error": ErrorCode.SLOW_DOWN.value, "error_description": "the gateway's store is full"},
            status=429,
            headers={"Retry-After": str(STORE_FULL_RETRY_AFTER)},
        )
    request.app[METRICS].delegation_event(brand.brand.id, "authorization_started")
    return json_answer(started.as_json())
