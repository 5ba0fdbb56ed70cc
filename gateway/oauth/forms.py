"""RFC 6749 §3.1 request parameters and §3.3 scopes, as every OAuth endpoint here reads them.

Parameters come as an ``application/x-www-form-urlencoded`` body in UTF-8 (RFC 6749 §3.2,
RFC 8628 §3.1, RFC 7009 §2.1, RFC 7662 §2.1), read whole and capped like an A2A body
(:func:`gateway.handlers.oauth.endpoint.read_form`). A
parameter sent without a value counts as omitted and none may be sent twice (§3.1); names
an endpoint does not know are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final
from urllib.parse import parse_qsl

from gateway.oauth.errors import ErrorCode, OAuthError

__all__ = ["FORM_TYPE", "parse_form", "parse_scope", "required"]

FORM_TYPE: Final = "application/x-www-form-urlencoded"
_MAX_FIELDS: Final = 32
"""More than any endpoint here takes: a body of thousands of empty fields is refused cheaply."""


def parse_form(body: bytes) -> dict[str, str]:
    """The parameters of a form body; ``invalid_request`` when it is not UTF-8 or repeats a name."""
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, errors="strict", max_num_fields=_MAX_FIELDS)
    except (UnicodeDecodeError, ValueError):
        raise OAuthError(ErrorCode.INVALID_REQUEST, "The body is not a UTF-8 form") from None
    seen: set[str] = set()
    form: dict[str, str] = {}
    for name, value in pairs:
        if name in seen:
            # The name is the client's own text: the description must stay within RFC 6749 §5.2's
            # character set, so it is not echoed.
            raise OAuthError(ErrorCode.INVALID_REQUEST, "A parameter is repeated")
        seen.add(name)
        if value:
            form[name] = value
    return form


def required(form: Mapping[str, str], name: str) -> str:
    value = form.get(name)
    if value is None:
        raise OAuthError(ErrorCode.INVALID_REQUEST, f"Missing parameter {name}")
    return value


def parse_scope(scope: str | None, allowed: Iterable[str]) -> tuple[str, ...]:
    """A requested ``scope`` (RFC 6749 §3.3: ids separated by single spaces) as ids in ``allowed``'s order.

    ``invalid_scope`` for a missing or empty one, an id not in ``allowed`` (§5.2: only ids on
    the card), an id twice, or stray spaces: what was asked must be exactly what is granted.
    """
    if scope is None:
        raise OAuthError(ErrorCode.INVALID_SCOPE, "No scope requested")
    requested = scope.split(" ")
    if "" in requested:
        raise OAuthError(ErrorCode.INVALID_SCOPE, "Scope ids must be separated by single spaces")
    wanted = set(requested)
    if len(wanted) != len(requested):
        raise OAuthError(ErrorCode.INVALID_SCOPE, "A scope is repeated")
    ordered = tuple(scope_id for scope_id in allowed if scope_id in wanted)
    if len(ordered) != len(wanted):
        raise OAuthError(ErrorCode.INVALID_SCOPE, "Unknown scope")
    return ordered
