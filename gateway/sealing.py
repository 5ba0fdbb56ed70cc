"""Sealing a secret value that the store must keep: AES-256-GCM under a key derived (HKDF-SHA256)
from a secret that the store never holds, so that whoever reads the store (a Redis dump, a replica,
an operator's ``GET``) learns nothing of what is sealed.

Two callers, each with its own ``purpose`` (the HKDF ``info``, so one secret never yields the same
key for two uses): the refresh grace's answer, sealed under the presented refresh token
(:mod:`gateway.oauth.tokens`), and a Direct Line conversation's token, sealed under the Brand's
Direct Line secret (:mod:`gateway.upstream.directline`). The ``context`` is the GCM associated
data: a sealed value opens only for the record it was sealed for (a grant, a conversation), so a
value copied under another key does not.

A module of its own, below every package, as :mod:`gateway.wire` is: the OAuth server and the bot
adapters both use it. A sealed value is ``nonce (12 bytes) || ciphertext || tag``.
"""

from __future__ import annotations

import secrets
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

__all__ = ["SealingKey", "open_sealed", "seal", "sealing_key"]

SealingKey = AESGCM
_NONCE_BYTES: Final = 12


def sealing_key(secret: str, purpose: bytes) -> SealingKey:
    """The key for ``purpose`` that only ``secret`` yields (HKDF-SHA256, no salt, no slow KDF:
    ``secret`` is a random token or a vendor-issued credential, not a password a person chose)."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(secret.encode())
    return AESGCM(key)


def seal(key: SealingKey, context: bytes, value: bytes) -> bytes:
    """``value`` sealed under ``key`` for ``context``; a fresh random nonce each time."""
    nonce = secrets.token_bytes(_NONCE_BYTES)
    return nonce + key.encrypt(nonce, value, context)


def open_sealed(key: SealingKey, context: bytes, sealed: bytes) -> bytes | None:
    """What :func:`seal` sealed, or ``None`` if ``sealed`` is not for this key and context."""
    if len(sealed) <= _NONCE_BYTES:
        return None
    try:
        return key.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], context)
    except InvalidTag:
        return None
