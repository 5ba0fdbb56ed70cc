"""§3.2 personal-agent JWT rules as pure functions: header checks and claim checks.

No I/O and no key handling happens here: the verifier in ``gateway.auth.pa_jwt`` reads the
header with :func:`split_unverified` and :func:`check_header`, fetches the key, has PyJWT
check the signature and then hands the verified payload to :func:`check_claims`. Keeping
the rules here means each one is tested on plain dictionaries, with ``now`` passed in.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

__all__ = [
    "ALLOWED_ALGORITHMS",
    "FORBIDDEN_HEADERS",
    "MAX_CLOCK_SKEW",
    "MAX_LIFETIME",
    "MAX_TOKEN_LENGTH",
    "AuthFailure",
    "AuthReason",
    "TokenHeader",
    "ValidClaims",
    "check_claims",
    "check_header",
    "split_unverified",
    "unverified_issuer",
]

AuthReason = Literal[
    "missing_token",
    "malformed",
    "bad_alg",
    "forbidden_header",
    "unknown_issuer",
    "disabled_issuer",
    "unknown_kid",
    "bad_signature",
    "bad_audience",
    "bad_sub",
    "iat_missing",
    "iat_future",
    "nbf_future",
    "exp_missing",
    "expired",
    "lifetime_too_long",
    "weak_key",
    "jwks_unavailable",
]
"""Every reason a personal-agent token is refused; a bounded set, safe as a metrics label."""

# §3.2 `alg`: ES256 or RS256, nothing else. The key's type must match too (checked by the JWKS cache).
ALLOWED_ALGORITHMS: Final = frozenset({"ES256", "RS256"})
# Header parameters that would let the token name its own key or demand extensions (RFC 8725 §3.10).
FORBIDDEN_HEADERS: Final = frozenset({"jku", "jwk", "x5u", "x5c", "crit"})
# §3.2: "allow at most 30 s clock skew".
MAX_CLOCK_SKEW: Final = 30.0
# §3.2 `exp`: "at most 300 s after iat".
MAX_LIFETIME: Final = 300.0
# A §3.2 token is a few hundred bytes; anything far larger is refused before it is decoded.
MAX_TOKEN_LENGTH: Final = 8192

_COMPACT_JWS = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


class AuthFailure(Exception):
    """A §3.4 authentication failure. ``reason`` goes to logs and metrics, never to the client."""

    def __init__(self, reason: AuthReason) -> None:
        super().__init__(reason)
        self.reason: AuthReason = reason


@dataclass(frozen=True, slots=True)
class TokenHeader:
    """The two header fields the verifier acts on, after §3.2 checks."""

    alg: str
    kid: str | None


@dataclass(frozen=True, slots=True)
class ValidClaims:
    """The claims of a token that passed every §3.2 claim rule."""

    issuer: str
    sub: str
    issued_at: float
    expires_at: float


def _b64url_json(segment: str) -> Any:
    try:
        raw = base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))
        return orjson.loads(raw)
    except (binascii.Error, ValueError):
        raise AuthFailure("malformed") from None


def split_unverified(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Header and payload of a compact JWS, *unverified*: only used to pick the issuer and key."""
    if len(token) > MAX_TOKEN_LENGTH or _COMPACT_JWS.fullmatch(token) is None:
        raise AuthFailure("malformed")
    header_segment, payload_segment, _ = token.split(".")
    header = _b64url_json(header_segment)
    payload = _b64url_json(payload_segment)
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise AuthFailure("malformed")
    return header, payload


def check_header(header: Mapping[str, Any]) -> TokenHeader:
    """§3.2 `alg` from the allow-list; no header that names its own key or adds critical extensions."""
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in ALLOWED_ALGORITHMS:
        raise AuthFailure("bad_alg")
    if not FORBIDDEN_HEADERS.isdisjoint(header):
        raise AuthFailure("forbidden_header")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise AuthFailure("malformed")
    return TokenHeader(alg=alg, kid=kid)


def unverified_issuer(payload: Mapping[str, Any]) -> str:
    """The `iss` the token claims, used only to find the issuer's keys (§3.1 exact string)."""
    issuer = payload.get("iss")
    if not isinstance(issuer, str) or not issuer:
        raise AuthFailure("malformed")
    return issuer


def _numeric_date(payload: Mapping[str, Any], name: str) -> float | None:
    """An RFC 7519 NumericDate: a finite JSON number (``true`` is not a number here)."""
    value = payload.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def check_claims(payload: Mapping[str, Any], *, issuer: str, audience: str, now: float) -> ValidClaims:
    """§3.2 claim rules on a signature-verified payload, at wall-clock time ``now``."""
    if payload.get("iss") != issuer:  # §3.1: exact string match
        raise AuthFailure("unknown_issuer")
    aud = payload.get("aud")
    if not isinstance(aud, str) or aud != audience:  # §3.2: one string, never a list
        raise AuthFailure("bad_audience")
    sub = payload.get("sub")
    if not isinstance(sub, str) or not sub:
        raise AuthFailure("bad_sub")
    iat = _numeric_date(payload, "iat")
    if iat is None:
        raise AuthFailure("iat_missing")
    if iat > now + MAX_CLOCK_SKEW:  # §3.2: "more than 30 s in the future"
        raise AuthFailure("iat_future")
    if "nbf" in payload:  # RFC 7519 §4.1.5, with the same §3.2 skew
        nbf = _numeric_date(payload, "nbf")
        if nbf is None or nbf > now + MAX_CLOCK_SKEW:
            raise AuthFailure("nbf_future")
    exp = _numeric_date(payload, "exp")
    if exp is None:
        raise AuthFailure("exp_missing")
    if now >= exp + MAX_CLOCK_SKEW:
        raise AuthFailure("expired")
    if exp - iat > MAX_LIFETIME:
        raise AuthFailure("lifetime_too_long")
    return ValidClaims(issuer=issuer, sub=sub, issued_at=iat, expires_at=exp)
