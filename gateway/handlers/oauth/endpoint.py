"""The OAuth endpoints in aiohttp: every failure answered as RFC 6749 §5.2 JSON, and the form read.

The RFC rules (:mod:`gateway.oauth.errors`, :mod:`gateway.oauth.forms`) know no request; this is
where an aiohttp handler meets them, as authlib keeps its framework integrations apart from its
grants.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.handlers.caller import read_body
from gateway.handlers.state import METRICS
from gateway.http.middlewares import REQUEST_ID
from gateway.http.notes import refused
from gateway.oauth.errors import ErrorCode, OAuthError
from gateway.oauth.forms import FORM_TYPE, parse_form
from gateway.store.base import StoreError

__all__ = ["Handler", "oauth_endpoint", "read_form"]

log = logging.getLogger("pact_gateway.oauth")

Handler = Callable[[web.Request], Awaitable[web.Response]]


def oauth_endpoint(handler: Handler) -> Handler:
    """``handler`` with every failure answered as RFC 6749 §5.2 JSON.

    A :class:`StoreError` is the Provider's failure: ``500 server_error``, logged once with
    the request id (no traceback: the store's message says what failed). Anything else
    unexpected is logged with its traceback, as the A2A error middleware does, and answered
    the same way, so no OAuth client ever gets the A2A envelope.
    """

    async def wrapped(request: web.Request) -> web.Response:
        try:
            return await handler(request)
        except OAuthError as error:
            refused(request, error.code.value)
            return error.response()
        except web.HTTPException:
            raise
        except StoreError as exc:
            request.app[METRICS].store_error("oauth")
            log.error("store unavailable: %s", exc, extra={"request_id": request.get(REQUEST_ID)})
        except Exception:
            log.exception("unhandled error", extra={"request_id": request.get(REQUEST_ID)})
        refused(request, ErrorCode.SERVER_ERROR.value)
        return OAuthError(ErrorCode.SERVER_ERROR).response()

    wrapped.__name__ = handler.__name__
    wrapped.__doc__ = handler.__doc__
    return wrapped


async def read_form(request: web.Request, limit: int) -> dict[str, str]:
    """The request's form parameters, the body capped at ``limit`` bytes (``invalid_request`` past it)."""
    if request.content_type.lower() != FORM_TYPE:
        raise OAuthError(ErrorCode.INVALID_REQUEST, f"Content-Type must be {FORM_TYPE}")
    body = await read_body(request, limit)
    if body is None:
        raise OAuthError(ErrorCode.INVALID_REQUEST, "Request body too large")
    return parse_form(body)
