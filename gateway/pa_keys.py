"""Key and token tools for personal-agent developers: what ``keys generate`` and ``token`` print.

A personal agent signs its own §3.2 JWTs; these helpers make one for curl sessions, the
demo and integration tests. They never touch the gateway's request path.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

MAX_TTL = 300  # §3.2: exp at most 300 s after iat


def generate_private_jwk(alg: str = "ES256") -> dict[str, Any]:
    """A new private JWK (ES256 on P-256, or RS256 with 2048-bit RSA) with a random ``kid``."""
    kid = secrets.token_urlsafe(12)
    if alg == "ES256":
        jwk = json.loads(ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1())))
    elif alg == "RS256":
        jwk = json.loads(RSAAlgorithm.to_jwk(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    else:
        raise ValueError(f"unsupported alg {alg!r}; use ES256 or RS256")
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


def public_jwks(private_jwk: Mapping[str, Any]) -> dict[str, Any]:
    """The JWKS a personal agent publishes at its ``jwks_uri`` for ``private_jwk``."""
    private_only = {"d", "p", "q", "dp", "dq", "qi", "oth"}
    return {"keys": [{k: v for k, v in private_jwk.items() if k not in private_only}]}


def mint_token(
    private_jwk: Mapping[str, Any], *, iss: str, sub: str, aud: str, ttl: int = 120, now: float | None = None
) -> str:
    """A §3.2 personal-agent JWT: ``iss``, ``sub``, one-string ``aud``, ``iat``, ``exp``, ``jti``."""
    if not 1 <= ttl <= MAX_TTL:
        raise ValueError(f"ttl must be between 1 and {MAX_TTL} seconds (§3.2)")
    alg = str(private_jwk.get("alg", "ES256"))
    key = jwt.PyJWK.from_dict(dict(private_jwk), algorithm=alg)
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": iss,
        "sub": sub,
        "aud": aud,
        "iat": issued,
        "exp": issued + ttl,
        "jti": secrets.token_hex(8),
    }
    return jwt.encode(claims, key.key, algorithm=alg, headers={"kid": str(private_jwk["kid"]), "typ": "JWT"})
