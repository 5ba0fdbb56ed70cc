"""RFC 7662 token introspection, for the Brand's own back-end (the resource server behind §5.5).

The Brand authenticates with the one secret it configured (``delegation.introspection.secret``)
as ``Authorization: Bearer``, RFC 7662 §2.1's "separate OAuth 2.0 access token"; a Brand that
configured none has no such endpoint (``404``). A token is active only while it would work:
a delegation token this Brand's server signed, unexpired, whose grant is live. Everything
else is ``{"active": false}`` and nothing more (RFC 7662 §2.2), whether it is unknown,
expired, revoked or another Brand's.

Wrong credentials are counted per client address (``delegation.introspection.failures``, a
GCRA budget shared across replicas, a wrong one's token taken atomically): once an address has
spent it, it is answered a bare ``429`` with ``Retry-After`` (RFC 6585 §4, as every other limit
here) whether its credential is right or not, so a guess made while locked out tells nothing, and
counted in
``pact_rate_limited_total{limit="introspection_failures"}``. Not ``401``: the Brand's own back-end,
locked out by someone sharing its address, must learn to wait, not that its secret is wrong.

Refresh tokens are always inactive here: they only ever pass between the personal agent and
the Provider, so a Brand back-end holding one holds a leaked token, and RFC 7662 §2.2 lets the
server refuse to describe a token to a caller that has no business with it. (The store also
cannot say whether a refresh token is a grant's current one or a spent one, and a spent one
must never look usable: presenting it revokes the grant.)
"""

from __future__ import annotations

import hmac
from typing import Any, Final

from aiohttp import web

from gateway.auth.pa_jwt import AuthFailure, bearer_token
from gateway.config import RateRule
from gateway.handlers.oauth.client_auth import delegating_brand
from gateway.handlers.oauth.endpoint import oauth_endpoint, read_form
from gateway.handlers.state import RUNTIME
from gateway.http import responses
from gateway.http.client_address import limit_address
from gateway.http.notes import refused
from gateway.oauth.access_token import InvalidToken, verify_access_token
from gateway.oauth.authorization_details import PARAMETER, granted_details
from gateway.oauth.errors import invalid_client, json_answer
from gateway.oauth.forms import required
from gateway.oauth.server import AuthorizationServer, DelegatingBrand
from gateway.ops.limits import FailureBudgets, Limit, RateLimited, subject_digest
from gateway.protocol.authorization_details import details_json
from gateway.store.limits import Rule

__all__ = ["INTROSPECTION_FAILURES", "authorized", "failure_limit", "introspect"]

INTROSPECTION_FAILURES: Final = "introspection_failures"
"""The limit's name in ``pact_rate_limited_total{limit}`` and the access line's ``reason``."""


def authorized(authorization: str | None, secret: str) -> bool:
    """Whether ``Authorization`` carries exactly ``Bearer <secret>``, compared in constant time."""
    try:
        presented = bearer_token(authorization)
    except AuthFailure:
        return False
    return hmac.compare_digest(presented.encode(), secret.encode())


def failure_limit(rule: RateRule, address: str) -> Limit | None:
    """``delegation.introspection.failures`` for one client address; ``None`` when turned off."""
    if not rule.enabled:
        return None
    return Limit(INTROSPECTION_FAILURES, subject_digest(address), Rule(rule.rate, rule.burst))


async def _describe(server: AuthorizationServer, brand: DelegatingBrand, token: str) -> dict[str, Any] | None:
    """The RFC 7662 §2.2 description of an active delegation token of ``brand``; ``None`` if it is not one."""
    now = server.clock()
    urls = brand.urls
    try:
        claims = verify_access_token(server.keys, token, issuer=urls.issuer, audience=urls.interface, now=now)
    except InvalidToken:
        return None
    grant = await server.store.get_grant(brand.brand.id, claims.grant_id, now)
    if grant is None or grant.client_id != claims.client_id or grant.user != claims.user:
        return None
    description: dict[str, Any] = {
        "active": True,
        "scope": " ".join(claims.scopes),
        "client_id": claims.client_id,
        "sub": claims.user,
        "exp": int(claims.expires_at),
        "iat": int(claims.issued_at),
        "iss": urls.issuer,
        "aud": urls.interface,
        "token_type": "Bearer",
        "grant_id": claims.grant_id,
    }
    # RFC 9396 §9.2: the details the token carries, those of a type since removed from the
    # configuration left out (they allow nothing any more).
    details = granted_details(claims.authorization_details, brand.delegation, claims.scopes)
    if details:
        description[PARAMETER] = details_json(details)
    return description


@oauth_endpoint
async def introspect(request: web.Request) -> web.Response:
    """``POST {interface}/oauth/introspect`` (RFC 7662 §2): ``token``; ``token_type_hint`` changes nothing."""
    runtime = request.app[RUNTIME].current
    found = delegating_brand(request, runtime)
    secret = None if found is None else found[1].delegation.introspection_secret
    if found is None or secret is None:
        return responses.not_found()
    server, brand = found
    # The client's address as every per-address limit counts it (``listen.trusted_proxies``, IPv6 by
    # its ``listen.ipv6_prefix`` network).
    address = limit_address(request, runtime.config.listen)
    failures = failure_limit(brand.delegation.introspection_failures, address)
    right = authorized(request.headers.get("Authorization"), secret)
    if failures is not None:
        # A wrong credential takes its token atomically (issue 28 M1: looked at, then spent, a
        # burst of concurrent guesses all passed the look); a right one only looks, and is refused
        # exactly when a wrong one would be, so a locked-out guess learns nothing. The comparison
        # is local and constant-time: made first, it costs the honest caller no second round trip.
        limits, fail_open = runtime.limits, brand.brand.rate_limits.fail_open
        try:
            if right:
                await limits.check_budget(brand.brand.id, [failures], fail_open=fail_open)
            else:
                await limits.reserve(brand.brand.id, FailureBudgets((failures,)), fail_open=fail_open)
        except RateLimited as limited:
            refused(request, limited.limit)
            return responses.too_many_requests(limited.retry_after)
    if not right:
        raise invalid_client("introspection needs the Brand's bearer credential")
    token = required(await read_form(request, runtime.config.limits.max_body_bytes), "token")
    description = await _describe(server, brand, token)
    return json_answer({"active": False} if description is None else description)
