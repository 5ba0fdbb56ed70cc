"""Minting PA JWTs quickly for the benchmark: the private key is loaded once, not per token.

``gateway.pa_keys.mint_token`` parses the private JWK on every call, which for RSA means a
full private-key consistency check (tens of milliseconds); a load generator or a timing
loop that mints thousands of tokens cannot afford that. The claims are the same §3.2 set.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from typing import Any

import jwt

MAX_TTL = 300  # §3.2


def user_sub(user: int) -> str:
    """The ``sub`` the bench's personal agent uses for its ``user``-th User, in every bench process."""
    return f"bench-user-{user}"


class Minter:
    """Signs §3.2 personal-agent tokens (``iss``, ``sub``, ``aud``, ``iat``, ``exp``, ``jti``) with a key.

    The same claims, plus ``user_code``, are a §5.3 Brand-login assertion: ``bench.delegation``
    signs those with one of these too.
    """

    def __init__(self, private_jwk: Mapping[str, Any], issuer: str, audience: str) -> None:
        self.alg = str(private_jwk.get("alg", "ES256"))
        self._key = jwt.PyJWK.from_dict(dict(private_jwk), algorithm=self.alg).key
        self._headers = {"kid": str(private_jwk["kid"]), "typ": "JWT"}
        self.issuer = issuer
        self.audience = audience

    def mint(self, sub: str, ttl: int = MAX_TTL, extra: Mapping[str, Any] | None = None) -> str:
        """A token for ``sub``; ``extra`` claims are added (a Brand login's ``user_code``, §5.3)."""
        issued = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": sub,
            "aud": self.audience,
            "iat": issued,
            "exp": issued + ttl,
            "jti": secrets.token_hex(8),
            **(extra or {}),
        }
        return jwt.encode(claims, self._key, algorithm=self.alg, headers=self._headers)
