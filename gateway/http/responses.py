"""The few response shapes the gateway ever sends (§2.2, §3.4, §6)."""

from __future__ import annotations

from collections.abc import Iterable

from aiohttp import web

from gateway.protocol.errors import A2A_CONTENT_TYPE, A2AError

# §3.4: every authentication failure is exactly this, with no body.
WWW_AUTHENTICATE = 'Bearer realm="a2a"'
# §5.5: a bad delegation token.
INVALID_TOKEN_AUTHENTICATE = 'Bearer realm="a2a", error="invalid_token"'  # noqa: S105 - a header, not a secret


def a2a(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, headers={"Content-Type": A2A_CONTENT_TYPE})


def a2a_error(error: A2AError) -> web.Response:
    return a2a(error.body(), status=error.reason.http_status)


def unauthorized() -> web.Response:
    return web.Response(status=401, headers={"WWW-Authenticate": WWW_AUTHENTICATE})


def invalid_token() -> web.Response:
    """§5.5: a bad delegation token (the personal-agent JWT was good): a bare 401 naming the error."""
    return web.Response(status=401, headers={"WWW-Authenticate": INVALID_TOKEN_AUTHENTICATE})


def not_found() -> web.Response:
    return web.Response(status=404)


def method_not_allowed(allowed: Iterable[str]) -> web.Response:
    return web.Response(status=405, headers={"Allow": ", ".join(sorted(allowed))})


def too_many_requests(retry_after: int) -> web.Response:
    """§6: a rate limit is not an A2A error, so no envelope: a bare 429 saying when to come back."""
    return web.Response(status=429, headers={"Retry-After": str(retry_after)})
