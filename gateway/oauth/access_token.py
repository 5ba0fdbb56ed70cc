"""§5.4 delegation tokens: RFC 9068 JWT access tokens that the Provider signs and later verifies.

Minting and verifying sit together so the two can never disagree on a claim. Verification
trusts only the Provider's own keys: the ``kid`` picks one, and that key's algorithm is the
only one accepted (no ``alg`` from the token is ever believed). Every rule is checked here on
the verified payload; liveness of the grant is the store's business (a revoked grant stops
the next turn on every replica, see :class:`gateway.store.base.GrantCheck`).
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import jwt
import orjson

from gateway.auth.signature import SIGNATURE_ONLY
from gateway.protocol.authorization_details import (
    InvalidAuthorizationDetails,
    canonical_detail,
    details_json,
)
from gateway.protocol.claims import MAX_CLOCK_SKEW, MAX_TOKEN_LENGTH, AuthFailure, split_unverified
from gateway.provider_keys import ProviderKeys
from gateway.store.oauth import Grant

__all__ = ["ACCESS_TOKEN_TYP", "DelegationClaims", "InvalidToken", "mint_access_token", "verify_access_token"]

ACCESS_TOKEN_TYP: Final = "at+jwt"  # noqa: S105 - a media type, not a secret
"""RFC 9068 §2.1: the header ``typ`` of a JWT access token."""


class InvalidToken(Exception):
    """§5.5 a delegation token that must be refused (``401``, ``error="invalid_token"``).

    ``reason`` is a bounded label for logs and metrics, never for the client.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DelegationClaims:
    """A verified delegation token: who it acts as, for which personal agent, with what."""

    user: str
    client_id: str
    scopes: tuple[str, ...]
    grant_id: str
    expires_at: float
    jti: str
    issued_at: float
    """``iat``: RFC 7662 introspection reports it."""
    authorization_details: tuple[str, ...] = ()
    """RFC 9396 §9.1: the approved details the token carries, each as its canonical JSON."""


def mint_access_token(
    keys: ProviderKeys,
    grant: Grant,
    *,
    issuer: str,
    audience: str,
    scopes: tuple[str, ...],
    now: float,
    ttl: int,
    authorization_details: Sequence[str] = (),
) -> tuple[str, int]:
    """A §5.4 token for ``grant`` limited to ``scopes`` (the grant's or fewer) and its lifetime.

    ``authorization_details`` (canonical JSON each, those of the grant's the token carries) become
    the RFC 9396 §9.1 claim, embedded as they are, and only when there are any. The token never
    outlives the grant. Returns the token and its ``expires_in``.
    """
    issued = int(now)
    expires = min(issued + ttl, int(grant.expires_at))
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": audience,
        "sub": grant.user,
        "client_id": grant.client_id,
        "scope": " ".join(scopes),
        "grant_id": grant.grant_id,
        "iat": issued,
        "exp": expires,
        "jti": secrets.token_urlsafe(16),
    }
    if authorization_details:
        claims["authorization_details"] = details_json(authorization_details)
    return keys.sign(orjson.dumps(claims), ACCESS_TOKEN_TYP), expires - issued


def _string(payload: Mapping[str, Any], name: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidToken(f"bad_{name}")
    return value


def _number(payload: Mapping[str, Any], name: str) -> float:
    value = payload.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidToken(f"bad_{name}")
    return float(value)


def _details(payload: Mapping[str, Any]) -> tuple[str, ...]:
    """The RFC 9396 §9.1 claim as canonical details; absent, none. Only a non-empty array of
    objects is one (the minting never writes another): anything else is ``bad_authorization_details``."""
    value = payload.get("authorization_details")
    if value is None:
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(item, dict) for item in value):
        raise InvalidToken("bad_authorization_details")
    try:
        return tuple(canonical_detail(item) for item in value)
    except InvalidAuthorizationDetails:
        raise InvalidToken("bad_authorization_details") from None


def verify_access_token(
    keys: ProviderKeys, token: str, *, issuer: str, audience: str, now: float
) -> DelegationClaims:
    """The claims of a token this Provider signed for ``audience`` (one Brand's interface URL, §5.4).

    Refused, as :class:`InvalidToken`: anything but a compact JWS of at most
    :data:`MAX_TOKEN_LENGTH`; a ``typ`` other than ``at+jwt``; a ``kid`` we do not publish; an
    ``alg`` other than that key's; a bad signature; ``iss`` or ``aud`` not exactly ours (``aud``
    one string); a missing ``sub``, ``client_id``, ``grant_id`` or ``jti``; ``exp`` reached;
    ``iat`` further in the future than the 30 s of clock skew §3.2 allows between machines; an
    ``authorization_details`` claim that is not a non-empty array of objects.
    """
    if len(token) > MAX_TOKEN_LENGTH:
        raise InvalidToken("malformed")
    try:
        header, _ = split_unverified(token)
    except AuthFailure:
        raise InvalidToken("malformed") from None
    if header.get("typ") != ACCESS_TOKEN_TYP:
        raise InvalidToken("bad_typ")
    kid = header.get("kid")
    key = keys.find(kid) if isinstance(kid, str) else None
    if key is None:
        raise InvalidToken("unknown_kid")
    if header.get("alg") != key.alg:
        raise InvalidToken("bad_alg")
    try:
        payload: dict[str, Any] = SIGNATURE_ONLY.decode(token, key.public_key, algorithms=[key.alg])
    except jwt.PyJWTError:
        raise InvalidToken("bad_signature") from None
    if payload.get("iss") != issuer:
        raise InvalidToken("bad_issuer")
    if payload.get("aud") != audience:
        raise InvalidToken("bad_audience")
    expires = _number(payload, "exp")
    if now >= expires:
        raise InvalidToken("expired")
    issued = _number(payload, "iat")
    if issued > now + MAX_CLOCK_SKEW:
        raise InvalidToken("iat_future")
    scope = payload.get("scope")
    if not isinstance(scope, str):
        raise InvalidToken("bad_scope")
    return DelegationClaims(
        user=_string(payload, "sub"),
        client_id=_string(payload, "client_id"),
        scopes=tuple(scope.split()),
        grant_id=_string(payload, "grant_id"),
        expires_at=expires,
        jti=_string(payload, "jti"),
        issued_at=issued,
        authorization_details=_details(payload),
    )
