"""Verified personal-agent tokens, so a token a personal agent reuses is not verified again.

§3.2 tokens live up to 300 s and personal agents reuse them across requests, so caching the
verdict removes the ECDSA/RSA verification from most requests. The cache must never accept a
token the full check would reject: an entry is used only strictly before the token's ``exp``
(the full check allows up to 30 s past it), and the verifier drops entries whose issuer is
disabled or removed. Entries are keyed by a SHA-256 of the token, so the cache holds no token.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["TokenCache"]

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class _Entry(Generic[V]):
    issuer: str
    expires_at: float
    value: V


class TokenCache(Generic[V]):
    """A bounded LRU map from a token's digest to what verifying it produced."""

    def __init__(self, max_size: int) -> None:
        self._max_size = max_size
        self._entries: OrderedDict[bytes, _Entry[V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    @staticmethod
    def _digest(token: str) -> bytes:
        return hashlib.sha256(token.encode()).digest()

    def get(self, token: str, now: float) -> V | None:
        """The cached value, or ``None`` if absent or if ``now`` is at or past the token's ``exp``."""
        digest = self._digest(token)
        entry = self._entries.get(digest)
        if entry is None:
            return None
        if now >= entry.expires_at:
            del self._entries[digest]
            return None
        self._entries.move_to_end(digest)
        return entry.value

    def put(self, token: str, value: V, *, issuer: str, expires_at: float) -> None:
        if self._max_size <= 0:
            return
        digest = self._digest(token)
        self._entries[digest] = _Entry(issuer=issuer, expires_at=expires_at, value=value)
        self._entries.move_to_end(digest)
        while len(self._entries) > self._max_size:
            self._entries.popitem(last=False)

    def retain_issuers(self, keep: Callable[[str], bool]) -> None:
        """Drop every entry whose issuer ``keep`` refuses (a configuration reload disabled it)."""
        for digest in [d for d, entry in self._entries.items() if not keep(entry.issuer)]:
            del self._entries[digest]

    def clear(self) -> None:
        self._entries.clear()
