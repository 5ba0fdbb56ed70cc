"""§5.3 the Brand login's hand-off: verifying the single-use assertion it posts back to the consent URL.

After its own login, the Brand auto-posts a JWT it signs (``assertion``) to our consent URL.
It proves which Brand user signed in and which pending ``user_code`` they came for; nothing
else about the User ever reaches the Provider. The header rules are the personal-agent JWT's
(§3.2: ES256/RS256 only, no header that names its own key), the keys the Brand's login key
set (inline, or fetched under the personal agents' fetch rules), and the claims are checked
here as pure functions of the verified payload and ``now``. Whether the ``user_code`` names a
pending authorization and whether the ``jti`` was seen before are the store's business
(:mod:`gateway.handlers.oauth.consent`), so this module does no state I/O beyond fetching keys.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import jwt

from gateway.auth.jwks import JwksCache
from gateway.auth.pa_jwt import REJECTED_TTL
from gateway.auth.signature import SIGNATURE_ONLY
from gateway.auth.token_cache import TokenCache
from gateway.config import LoginConfig
from gateway.oauth.device import normalize_user_code
from gateway.protocol.claims import MAX_CLOCK_SKEW, AuthFailure, check_header, split_unverified

__all__ = [
    "DISPLAY_CLAIM",
    "MAX_ASSERTION_LIFETIME",
    "MAX_DISPLAY_LENGTH",
    "AssertionReason",
    "InvalidAssertion",
    "LoginAssertion",
    "RefusedAssertion",
    "check_assertion_claims",
    "verify_assertion",
]

MAX_ASSERTION_LIFETIME: Final = 300.0
"""An assertion's ``exp`` may be at most this far ahead of now (the notes: "about 2 minutes, at most 5")."""

DISPLAY_CLAIM: Final = "preferred_username"
"""The optional claim the Brand login may add to name the signed-in account on the consent page
("Signed in as …"), e.g. an e-mail address; OpenID Connect Core §5.1's name for it. Without it
(or when it is unusable) the page shows ``sub``."""
MAX_DISPLAY_LENGTH: Final = 200
"""Longer display names are ignored (``sub`` is shown instead): the page stays one readable line."""

AssertionReason = Literal[
    "malformed",
    "bad_header",
    "unknown_key",
    "jwks_unavailable",
    "bad_signature",
    "bad_issuer",
    "bad_audience",
    "bad_sub",
    "bad_user_code",
    "bad_jti",
    "iat_missing",
    "iat_future",
    "nbf_future",
    "exp_missing",
    "expired",
    "exp_too_far",
]
"""Why an assertion was refused: a bounded set, for the log line only (the User sees one generic page)."""

_UNSETTLED: Final[frozenset[AssertionReason]] = frozenset(
    {"jwks_unavailable", "unknown_key", "iat_future", "nbf_future"}
)
"""Refusals the same assertion may later pass with no change of keys (the key set fetched, a
rotation published, the clock catching up): never remembered, as for personal-agent JWTs."""


class InvalidAssertion(Exception):
    """An assertion that grants nothing; ``reason`` is for the log, never for the page."""

    def __init__(self, reason: AssertionReason) -> None:
        super().__init__(reason)
        self.reason: AssertionReason = reason


@dataclass(frozen=True, slots=True)
class LoginAssertion:
    """A verified hand-off: Brand user ``user`` signed in for ``user_code`` (normalized)."""

    user: str
    user_code: str
    jti: str
    expires_at: float
    display: str | None = None
    """:data:`DISPLAY_CLAIM` when the login sent a usable one: shown (escaped), never logged."""


def _numeric_date(payload: Mapping[str, Any], name: str) -> float | None:
    value = payload.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _nonempty(payload: Mapping[str, Any], name: str) -> str | None:
    value = payload.get(name)
    return value if isinstance(value, str) and value else None


def _display(payload: Mapping[str, Any]) -> str | None:
    """:data:`DISPLAY_CLAIM` when it is a short printable string; anything else is ignored, not refused,
    since it only changes what the page calls the account (the account itself is ``sub``)."""
    value = _nonempty(payload, DISPLAY_CLAIM)
    if value is None or len(value) > MAX_DISPLAY_LENGTH or not value.isprintable() or not value.strip():
        return None
    return value


def check_assertion_claims(
    payload: Mapping[str, Any], *, issuer: str, audience: str, now: float
) -> LoginAssertion:
    """The §5.3 claim rules on a signature-verified payload, at wall-clock time ``now``.

    ``iss`` is the configured login issuer and ``aud`` the consent URL, each one exact string;
    ``sub`` is the Brand's user id; ``user_code`` is a well-formed code; ``jti`` is present
    (single use is the caller's step); ``iat`` is present and at most the §3.2 30 s ahead;
    ``exp`` is present, not reached, and at most :data:`MAX_ASSERTION_LIFETIME` ahead, so a
    used ``jti`` need only be remembered that long.
    """
    if payload.get("iss") != issuer:
        raise InvalidAssertion("bad_issuer")
    aud = payload.get("aud")
    if not isinstance(aud, str) or aud != audience:  # one string, never a list
        raise InvalidAssertion("bad_audience")
    user = _nonempty(payload, "sub")
    if user is None:
        raise InvalidAssertion("bad_sub")
    typed = payload.get("user_code")
    user_code = normalize_user_code(typed) if isinstance(typed, str) else None
    if user_code is None:
        raise InvalidAssertion("bad_user_code")
    jti = _nonempty(payload, "jti")
    if jti is None:
        raise InvalidAssertion("bad_jti")
    iat = _numeric_date(payload, "iat")
    if iat is None:
        raise InvalidAssertion("iat_missing")
    if iat > now + MAX_CLOCK_SKEW:
        raise InvalidAssertion("iat_future")
    if "nbf" in payload:
        nbf = _numeric_date(payload, "nbf")
        if nbf is None or nbf > now + MAX_CLOCK_SKEW:
            raise InvalidAssertion("nbf_future")
    exp = _numeric_date(payload, "exp")
    if exp is None:
        raise InvalidAssertion("exp_missing")
    if now >= exp:
        raise InvalidAssertion("expired")
    if exp > now + MAX_ASSERTION_LIFETIME:
        raise InvalidAssertion("exp_too_far")
    return LoginAssertion(user=user, user_code=user_code, jti=jti, expires_at=exp, display=_display(payload))


@dataclass(frozen=True, slots=True)
class RefusedAssertion:
    """A refused assertion's verdict, good while the Brand's login keys are those it was reached with."""

    reason: AssertionReason
    key_version: int | None


async def verify_assertion(
    assertion: str,
    *,
    brand_id: str,
    login: LoginConfig,
    keys: JwksCache,
    audience: str,
    now: float,
    refused: TokenCache[RefusedAssertion],
) -> LoginAssertion:
    """Verify the Brand login's ``assertion`` for the consent URL ``audience``.

    The key comes from ``keys`` under the Brand's id: its inline set (preloaded at start-up) or
    its ``jwks_uri``, refetched at most once per cool-down on an unknown ``kid`` (rotation).
    Only the header's one allowed ``alg`` is tried, and only with a key of that type.

    A refusal is remembered in ``refused`` (by the assertion's digest) for
    :data:`~gateway.auth.pa_jwt.REJECTED_TTL`, exactly as refused personal-agent JWTs are: a
    junk assertion naming a known ``kid``, posted again and again, costs a lookup, not an
    ES256 verification each time. A verdict holds only while the Brand's keys are unchanged.
    """
    version = keys.version(brand_id)
    known = refused.get(assertion, now)
    if known is not None and known.key_version == version:
        raise InvalidAssertion(known.reason)
    try:
        return await _verify(assertion, brand_id=brand_id, login=login, keys=keys, audience=audience, now=now)
    except InvalidAssertion as invalid:
        if invalid.reason not in _UNSETTLED:
            verdict = RefusedAssertion(invalid.reason, keys.version(brand_id))
            refused.put(assertion, verdict, issuer=brand_id, expires_at=now + REJECTED_TTL)
        raise


async def _verify(
    assertion: str, *, brand_id: str, login: LoginConfig, keys: JwksCache, audience: str, now: float
) -> LoginAssertion:
    try:
        header, _ = split_unverified(assertion)
        checked = check_header(header)
    except AuthFailure as failure:
        raise InvalidAssertion("malformed" if failure.reason == "malformed" else "bad_header") from None
    try:
        key = await keys.key_for(brand_id, login.jwks_uri, checked.kid, checked.alg)
    except AuthFailure as failure:
        raise InvalidAssertion(
            "jwks_unavailable" if failure.reason == "jwks_unavailable" else "unknown_key"
        ) from None
    try:
        payload: dict[str, Any] = SIGNATURE_ONLY.decode(assertion, key, algorithms=[checked.alg])
    except jwt.PyJWTError:
        raise InvalidAssertion("bad_signature") from None
    return check_assertion_claims(payload, issuer=login.issuer, audience=audience, now=now)
