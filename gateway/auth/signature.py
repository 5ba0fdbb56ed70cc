"""The one way a JWT's signature is checked here: PyJWT on signature alone.

Every verifier (the §3.2 PA JWT, the §5.3 Brand-login assertion, the §5.4 delegation token)
checks each claim itself against exact values and names the exact reason, so PyJWT's own claim
checks are all off. Keys below PyJWT's minimum size are refused (``InvalidKeyError``).
"""

from __future__ import annotations

from typing import Final

import jwt

__all__ = ["SIGNATURE_ONLY"]

SIGNATURE_ONLY: Final = jwt.PyJWT(
    options={
        "verify_exp": False,
        "verify_nbf": False,
        "verify_iat": False,
        "verify_aud": False,
        "verify_iss": False,
        "verify_sub": False,
        "verify_jti": False,
        "enforce_minimum_key_length": True,
    }
)
