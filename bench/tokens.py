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


class Minter:
    """Signs §3.2 personal-agent tokens (``iss``, ``sub``, ``aud``, ``iat``, ``exp``, ``jti``) with a key."""

    def __init__(self, private_jwk: Mapping[str, Any], issuer: str, audience: str) -> None:
        self.alg = str(private_jwk.get("alg", "ES256"))
        self._key = jwt.PyJWK.from_dict(dict(private_jwk), algorithm=self.alg).key
        self._headers = {"kid": str(private_jwk["kid"]), "typ": "JWT"}
        self.issuer = issuer
        self.audience = audience

    def mint(self, sub: str, ttl: int = MAX_TTL) -> str:
        issued = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": sub,
            "aud": self.audience,
            "iat": issued,
            "exp": issued + ttl,
            "jti": secrets.token_hex(8),
        }
        return jwt.encode(claims, self._key, algorithm=self.alg, headers=self._headers)
