"""RFC 8628 device authorization (§5.3): codes, verification URIs, and starting an authorization.

Starting one is shared by the device authorization endpoint and by §5.5 step-up (a turn that
needs scopes the token lacks gets a fresh authorization for them), so it lives here apart from
any handler.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any, Final

from gateway.config import DelegationConfig
from gateway.protocol.urls import OAuthUrls, with_query
from gateway.store.oauth import DeviceAuthorization, OAuthStore

__all__ = [
    "EXPIRES_IN",
    "INTERVAL",
    "USER_CODE_ALPHABET",
    "StartedAuthorization",
    "code_hash",
    "new_user_code",
    "normalize_user_code",
    "start_device_authorization",
]

EXPIRES_IN: Final = 600
"""Seconds a device code lives (the conformance notes' 600)."""
INTERVAL: Final = 5
"""RFC 8628 §3.2: the default polling interval."""
USER_CODE_ALPHABET: Final = "BCDFGHJKLMNPQRSTVWXZ"
"""RFC 8628 §6.1: 20 consonants, no vowels (no words), no look-alike digits."""
_USER_CODE_ATTEMPTS: Final = 8


def code_hash(secret: str) -> str:
    """How a device code, refresh token or consent session is stored and looked up: hex SHA-256."""
    return hashlib.sha256(secret.encode()).hexdigest()


def new_user_code() -> str:
    """``XXXX-XXXX`` from :data:`USER_CODE_ALPHABET`: 20^8 ≈ 2^34.6 codes, drawn from the OS CSPRNG."""
    letters = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(8))
    return f"{letters[:4]}-{letters[4:]}"


def normalize_user_code(typed: str) -> str | None:
    """A ``user_code`` as a person may type it (any case, with or without the dash or spaces)."""
    letters = "".join(ch for ch in typed.upper() if ch not in "- ")
    if len(letters) != 8 or any(ch not in USER_CODE_ALPHABET for ch in letters):
        return None
    return f"{letters[:4]}-{letters[4:]}"


@dataclass(frozen=True, slots=True)
class StartedAuthorization:
    """What RFC 8628 §3.2 answers: the secret ``device_code`` only ever leaves in this answer."""

    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str
    expires_in: int
    interval: int

    def as_json(self) -> dict[str, Any]:
        return {
            "device_code": self.device_code,
            "user_code": self.user_code,
            "verification_uri": self.verification_uri,
            "verification_uri_complete": self.verification_uri_complete,
            "expires_in": self.expires_in,
            "interval": self.interval,
        }


def verification_uris(delegation: DelegationConfig, urls: OAuthUrls, user_code: str) -> tuple[str, str]:
    """§5.3: the Brand's login with ``return_to`` = our consent URL; the complete one names the code there."""
    plain = with_query(delegation.login.url, return_to=urls.consent)
    complete = with_query(delegation.login.url, return_to=with_query(urls.consent, user_code=user_code))
    return plain, complete


async def start_device_authorization(
    store: OAuthStore,
    delegation: DelegationConfig,
    urls: OAuthUrls,
    *,
    brand_id: str,
    client_id: str,
    owner_digest: str,
    scopes: tuple[str, ...],
    now: float,
    details: tuple[str, ...] = (),
) -> StartedAuthorization:
    """A new pending authorization of ``scopes`` (already checked against the card) for one PA and ``sub``,
    with the RFC 9396 ``details`` asked (canonical JSON each, already checked against the Brand's types).

    The ``device_code`` has 256 random bits and is stored only as its hash. A ``user_code`` that
    happens to be in use for this Brand is drawn again; :class:`StoreError` propagates.
    """
    device_code = secrets.token_urlsafe(32)
    for _ in range(_USER_CODE_ATTEMPTS):
        user_code = new_user_code()
        authorization = DeviceAuthorization(
            device_hash=code_hash(device_code),
            user_code=user_code,
            brand_id=brand_id,
            client_id=client_id,
            owner_digest=owner_digest,
            scopes=scopes,
            expires_at=now + EXPIRES_IN,
            interval=INTERVAL,
            details=details,
        )
        if await store.create_authorization(authorization):
            plain, complete = verification_uris(delegation, urls, user_code)
            return StartedAuthorization(device_code, user_code, plain, complete, EXPIRES_IN, INTERVAL)
    # 8 collisions in a row means the Brand has billions of live codes: something else is wrong.
    raise RuntimeError("no free user_code after several attempts")
