"""What every endpoint a personal agent calls shares: its §3 authentication and a capped body read.

The A2A operations (:mod:`gateway.handlers.a2a`) and the §5 OAuth endpoints that take the PA JWT
as their client credential (:mod:`gateway.handlers.oauth.client_auth`) both authenticate here, so the
two can never disagree on what a valid caller is, and both leave the same traces for the
access log. This module imports nothing of either, so each can import it.
"""

from __future__ import annotations

from aiohttp import web

from gateway.auth.pa_jwt import AuthFailure, PAIdentity, bearer_token
from gateway.handlers.state import Runtime
from gateway.ops.tracing import SPANS, traced

__all__ = ["AUTH_FAILURE", "PA_IDENTITY", "authenticate", "read_body"]

AUTH_FAILURE = web.RequestKey("auth_failure", str)
"""Why authentication failed (a bounded reason), for the access log and metrics; never for the client."""
PA_IDENTITY = web.RequestKey("pa_identity", PAIdentity)
"""The verified caller, for the access log (issuer, hashed ``sub``); set once authentication passed."""


async def authenticate(request: web.Request, runtime: Runtime) -> PAIdentity | None:
    """The caller's §3.2 identity, or ``None`` when the answer must be the bare §3.4 ``401``.

    Either way the outcome is recorded on the request for the access line; the verifier has
    already logged a registered issuer's rejection.
    """
    try:
        token = bearer_token(request.headers.get("Authorization"))
        identity = await traced(request.app[SPANS], "pact.verify.pa_jwt", runtime.verifier.verify(token))
    except AuthFailure as failure:
        request[AUTH_FAILURE] = failure.reason
        return None
    request[PA_IDENTITY] = identity
    return identity


async def read_body(request: web.Request, limit: int) -> bytes | None:
    """The whole body, or ``None`` past ``limit`` bytes (each caller refuses in its own protocol's words)."""
    if request.content_length is not None and request.content_length > limit:
        return None
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
    return None if len(body) > limit else body
