"""Key layout shared by the backends, prefixed per Brand so Brands never see each other's state."""

from __future__ import annotations

PREFIX = "pact"


def conversation_key(brand_id: str, context_id: str) -> str:
    return f"{PREFIX}:{brand_id}:conv:{context_id}"


def context_of(brand_id: str, key: str) -> str:
    """The ``contextId`` that :func:`conversation_key` made ``key`` from."""
    return key[len(conversation_key(brand_id, "")) :]


def first_message_key(brand_id: str, owner_digest: str, message_id: str) -> str:
    return f"{PREFIX}:{brand_id}:first:{owner_digest}:{message_id}"


def turn_field(message_id: str) -> str:
    return f"m:{message_id}"


def rate_limit_key(brand_id: str, limit: str, subject_digest: str) -> str:
    """§6 counters; ``subject_digest`` is a hash, so no issuer or ``sub`` sits in the store in clear."""
    return f"{PREFIX}:{brand_id}:rl:{limit}:{subject_digest}"
