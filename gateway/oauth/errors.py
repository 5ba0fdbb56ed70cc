"""RFC 6749 §5.2 error answers, and the headers every OAuth answer carries.

Every answer of a token-bearing endpoint is ``Cache-Control: no-store`` with ``Pragma:
no-cache`` (RFC 6749 §5.1, RFC 8628 §3.2): codes and tokens must not sit in any cache. An
endpoint raises :class:`OAuthError` and
:func:`~gateway.handlers.oauth.endpoint.oauth_endpoint` turns it into the JSON error;
a store failure becomes ``server_error`` there too, so an OAuth client never sees the §6 A2A
envelope (an OAuth error is not an A2A error, §6) nor a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Any, Final

from aiohttp import web

from gateway.wire import json_bytes

__all__ = [
    "NO_STORE",
    "OAUTH_REALM",
    "ErrorCode",
    "OAuthError",
    "invalid_client",
    "json_answer",
]

NO_STORE: Final[Mapping[str, str]] = {"Cache-Control": "no-store", "Pragma": "no-cache"}
JSON: Final = "application/json"
OAUTH_REALM: Final = 'Bearer realm="oauth"'
"""RFC 6749 §5.2: a refused client that authenticated with ``Authorization`` learns the scheme it used."""


class ErrorCode(Enum):
    """The RFC 6749 §5.2 and RFC 8628 §3.5 codes these endpoints answer, each with its status."""

    INVALID_REQUEST = "invalid_request"
    INVALID_CLIENT = "invalid_client"
    INVALID_GRANT = "invalid_grant"
    UNSUPPORTED_GRANT_TYPE = "unsupported_grant_type"
    INVALID_SCOPE = "invalid_scope"
    AUTHORIZATION_PENDING = "authorization_pending"
    SLOW_DOWN = "slow_down"
    ACCESS_DENIED = "access_denied"
    EXPIRED_TOKEN = "expired_token"  # noqa: S105 - an RFC 8628 error code
    SERVER_ERROR = "server_error"
    INVALID_AUTHORIZATION_DETAILS = "invalid_authorization_details"
    """RFC 9396 §5."""

    @property
    def status(self) -> int:
        if self is ErrorCode.INVALID_CLIENT:
            return 401
        if self is ErrorCode.SERVER_ERROR:
            return 500
        return 400


class OAuthError(Exception):
    """An RFC 6749 §5.2 answer; ``description`` is for the client's developer, never a secret."""

    def __init__(
        self, code: ErrorCode, description: str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(code.value if description is None else f"{code.value}: {description}")
        self.code = code
        self.description = description
        self.headers = headers or {}

    def response(self) -> web.Response:
        body: dict[str, str] = {"error": self.code.value}
        if self.description is not None:
            body["error_description"] = self.description
        return json_answer(body, status=self.code.status, headers=self.headers)


def invalid_client(description: str) -> OAuthError:
    """``401 invalid_client`` with the ``WWW-Authenticate`` RFC 6749 §5.2 requires after header auth."""
    return OAuthError(ErrorCode.INVALID_CLIENT, description, {"WWW-Authenticate": OAUTH_REALM})


def json_answer(
    body: dict[str, Any] | bytes, status: int = 200, headers: Mapping[str, str] | None = None
) -> web.Response:
    """An OAuth JSON answer (an object, or one already serialized): ``application/json`` (never the
    A2A media type), uncacheable."""
    serialized = body if isinstance(body, bytes) else json_bytes(body)
    return web.Response(
        body=serialized, status=status, headers={**NO_STORE, **(headers or {}), "Content-Type": JSON}
    )
