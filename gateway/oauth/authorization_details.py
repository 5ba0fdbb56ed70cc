"""RFC 9396 ``authorization_details`` at the OAuth endpoints: what a request may ask, a token carries.

The rules of one detail are :mod:`gateway.protocol.authorization_details`; this module applies
them to one delegating Brand's configuration and answers a refusal as RFC 9396 §5's
``invalid_authorization_details`` (an :class:`~gateway.oauth.errors.OAuthError`, ``400``).
A detail is a condition of a scope, never granted on its own: whatever a token carries is the
grant's details restricted to the token's scopes and to the types still configured, so a scope
narrowed away takes its details with it, and a type removed from the configuration stops being
handed out at the next token minted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from gateway.config import DelegationConfig
from gateway.oauth.errors import ErrorCode, OAuthError
from gateway.protocol.authorization_details import (
    InvalidAuthorizationDetails,
    details_of_scopes,
    parse_authorization_details,
)

__all__ = ["PARAMETER", "granted_details", "narrowed_details", "requested_details"]

PARAMETER: Final = "authorization_details"
"""RFC 9396 §2: the request parameter, the token response member and the JWT claim (§9.1)."""


def _refused(reason: str) -> OAuthError:
    return OAuthError(ErrorCode.INVALID_AUTHORIZATION_DETAILS, reason)


def requested_details(
    raw: str | None, delegation: DelegationConfig, scopes: Sequence[str]
) -> tuple[str, ...]:
    """The ``authorization_details`` of a request for ``scopes``, canonical, in request order.

    ``()`` when the parameter is absent. RFC 9396 §5 ``invalid_authorization_details`` for a
    Brand that configured no type, and for every refusal of
    :func:`~gateway.protocol.authorization_details.parse_authorization_details` (its bounds are
    the Brand's ``max_authorization_details*`` settings).
    """
    if raw is None:
        return ()
    types = delegation.authorization_details
    if not types:
        raise _refused("no authorization details types are supported")
    try:
        return parse_authorization_details(
            raw,
            types=types,
            scopes=scopes,
            max_count=delegation.max_authorization_details,
            max_bytes=delegation.max_authorization_details_bytes,
            max_depth=delegation.max_authorization_details_depth,
        )
    except InvalidAuthorizationDetails as refused:
        raise _refused(refused.reason) from None


def granted_details(
    granted: Sequence[str], delegation: DelegationConfig, scopes: Sequence[str]
) -> tuple[str, ...]:
    """What a token of ``scopes`` carries of a grant's details: those of its scopes, of types still
    configured, in the grant's order."""
    return details_of_scopes(granted, delegation.authorization_details, scopes)


def narrowed_details(
    raw: str | None, delegation: DelegationConfig, granted: Sequence[str], scopes: Sequence[str]
) -> tuple[str, ...]:
    """A refresh's details (RFC 6749 §6 with RFC 9396 §6): narrowed, never widened.

    Without the parameter, :func:`granted_details`. With it, each detail it names must be one
    the token could carry (byte-equal canonical JSON): another is ``invalid_authorization_details``,
    so a refresh can drop details but never add one the User did not approve. The answer keeps
    the grant's order.
    """
    carried = granted_details(granted, delegation, scopes)
    if raw is None:
        return carried
    asked = set(requested_details(raw, delegation, scopes))
    if not asked <= set(carried):
        raise _refused("an authorization detail was not granted to this refresh token")
    return tuple(text for text in carried if text in asked)
