"""§5 client authentication: the personal agent's §3 JWT is its OAuth client credential.

Device authorization, token and revocation (RFC 8628 §3.1, RFC 6749 §3.2.1, RFC 7009 §2.1)
take the PA JWT as ``Authorization: Bearer``, checked exactly as on an A2A operation
(:func:`gateway.handlers.caller.authenticate`), and in the same order (§2.2, §3.4): the route
shape, then the caller (a bare ``401``), then the Brand (a bare ``404`` unless it delegates,
even with a valid token), then the §6 rate limits (a bare ``429``), and only then the body.
The form's ``client_id`` must be the caller's issuer (§5: ``client_id`` is the personal
agent's issuer URL); RFC 8628 §3.1 makes it required for a public client, so a missing one
is refused like a wrong one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from aiohttp import web

from gateway.auth.pa_jwt import PAIdentity
from gateway.handlers.caller import authenticate
from gateway.handlers.oauth.endpoint import Handler, oauth_endpoint, read_form
from gateway.handlers.state import RUNTIME, Runtime
from gateway.http import responses
from gateway.http.notes import refused
from gateway.oauth.errors import invalid_client
from gateway.ops.limits import RateLimited

if TYPE_CHECKING:
    # Only for annotations: the server imports the metadata, which imports this module.
    from gateway.oauth.server import AuthorizationServer, DelegatingBrand

__all__ = ["Client", "ClientHandler", "check_client_id", "delegating_brand", "pa_client"]


class Client(NamedTuple):
    """An authenticated personal agent calling one delegating Brand, with its form parameters."""

    runtime: Runtime
    server: AuthorizationServer
    brand: DelegatingBrand
    identity: PAIdentity
    form: Mapping[str, str]

    @property
    def owner_digest(self) -> str:
        """The (Brand, PA issuer, PA ``sub``) a device code and a grant are bound to (§5.3)."""
        identity = self.identity
        return self.runtime.turns.owner(self.brand.brand.id, identity.issuer, identity.sub).digest


ClientHandler = Callable[[web.Request, Client], Awaitable[web.Response]]


def delegating_brand(
    request: web.Request, runtime: Runtime
) -> tuple[AuthorizationServer, DelegatingBrand] | None:
    """The Brand the route names if it delegates, with its authorization server; ``None`` → bare ``404``."""
    server = runtime.oauth
    if server is None:
        return None
    brand = server.brand(request.match_info["brand"])
    return None if brand is None else (server, brand)


def check_client_id(client_id: str | None, identity: PAIdentity) -> None:
    """``client_id`` must be the PA JWT's ``iss`` (exact string, §3.1); else ``401 invalid_client``."""
    if client_id is None:
        raise invalid_client("client_id is required")
    if client_id != identity.issuer:
        raise invalid_client("client_id must be the issuer of the personal-agent JWT")


def pa_client(handler: ClientHandler) -> Handler:
    """An OAuth endpoint whose client is the personal agent, authenticated before ``handler`` runs."""

    async def wrapped(request: web.Request) -> web.Response:
        runtime = request.app[RUNTIME].current
        identity = await authenticate(request, runtime)
        if identity is None:
            return responses.unauthorized()  # §3.4, §5.3: a bad PA JWT is a bare 401
        found = delegating_brand(request, runtime)
        if found is None:
            return responses.not_found()
        try:
            # §6 as on any A2A operation: a device authorization writes to the store, so a personal
            # agent (or one of its Users) polling or asking too fast is held back before the body.
            await runtime.limits.check_a2a(
                found[1].brand.id, found[1].brand.rate_limits, identity.issuer, identity.sub
            )
        except RateLimited as limited:
            refused(request, limited.limit)
            return responses.too_many_requests(limited.retry_after)
        form = await read_form(request, runtime.config.limits.max_body_bytes)
        check_client_id(form.get("client_id"), identity)
        server, brand = found
        return await handler(request, Client(runtime, server, brand, identity, form))

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return oauth_endpoint(wrapped)
