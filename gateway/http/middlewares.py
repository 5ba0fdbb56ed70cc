"""Middlewares, each doing one thing: request ids, and turning every failure into a spec-shaped answer."""

from __future__ import annotations

import logging
import random
import re

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.http import responses
from gateway.http.notes import refused
from gateway.protocol import errors
from gateway.protocol.errors import A2AError, Reason

log = logging.getLogger("pact_gateway.http")

REQUEST_ID = web.RequestKey("request_id", str)
_CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{8,128}$")


def new_request_id() -> str:
    """32 hex digits: unique in practice across processes and restarts, and cheap to make.

    A request id only tells requests apart in logs; it guards nothing (a caller may even
    choose its own), so it comes from :mod:`random`, which the OS seeds at start-up and again
    in a forked child. The OS's random source costs a system call per id, which on the hot
    path is a measurable share of a turn (docs/performance.md).
    """
    return random.getrandbits(128).to_bytes(16).hex()  # an int's format spec costs twice as much


@web.middleware
async def request_id_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Take a well-formed ``X-Request-Id`` from the caller or mint one; echo it on the response."""
    offered = request.headers.get("X-Request-Id")
    request_id = offered if offered and _CLIENT_REQUEST_ID.match(offered) else new_request_id()
    request[REQUEST_ID] = request_id
    response = await handler(request)
    response.headers["X-Request-Id"] = request_id
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """No client ever sees a traceback: A2A errors get the §6 envelope, routing misses a bare 404/405.

    Anything unexpected is a provider failure: ``INTERNAL`` with the request id, logged once.
    The §6 reason is noted for the access line (:mod:`gateway.http.notes`).
    """
    try:
        return await handler(request)
    except A2AError as error:
        refused(request, error.reason.name)
        return responses.a2a_error(error)
    except web.HTTPMethodNotAllowed as exc:
        return responses.method_not_allowed(exc.allowed_methods)
    except web.HTTPNotFound:
        return responses.not_found()
    except web.HTTPException:
        raise
    except Exception:
        log.exception("unhandled error", extra={"request_id": request.get(REQUEST_ID)})
        refused(request, Reason.INTERNAL.name)
        return responses.a2a_error(A2AError(Reason.INTERNAL, errors.INTERNAL_ERROR))
