"""Key layout shared by the backends, prefixed per Brand so Brands never see each other's state."""

from __future__ import annotations

import hashlib
import re
from typing import Final

PREFIX = "pact"


def conversation_key(brand_id: str, context_id: str) -> str:
    return f"{PREFIX}:{brand_id}:conv:{context_id}"


def context_of(brand_id: str, key: str) -> str:
    """The ``contextId`` that :func:`conversation_key` made ``key`` from."""
    return key[len(conversation_key(brand_id, "")) :]


def owner_index_key(brand_id: str, owner_digest: str) -> str:
    """The Redis index of one owner's conversations (:attr:`gateway.store.base.Owner.digest`), for
    listing and erasing them (gateway/store/admin.py): conversations are keyed by ``contextId`` alone.
    The memory store keys its index by the raw digest instead (gateway/store/memory.py)."""
    return f"{PREFIX}:{brand_id}:owner:{owner_digest}"


def first_message_key(brand_id: str, owner_digest: str, message_id: str) -> str:
    return f"{PREFIX}:{brand_id}:first:{owner_digest}:{message_id}"


def turn_field(message_id: str) -> str:
    return f"m:{message_id}"


def released_claim_key(brand_id: str, token: str) -> str:
    """A begin-turn attempt whose outcome was unknown and that was released: it may no longer claim."""
    return f"{PREFIX}:{brand_id}:released:{token}"


def rate_limit_key(brand_id: str, limit: str, subject_digest: str) -> str:
    """§6 counters; ``subject_digest`` is a hash, so no issuer or ``sub`` sits in the store in clear."""
    return f"{PREFIX}:{brand_id}:rl:{limit}:{subject_digest}"


GRANT_ID_PREFIX: Final = "a2agrant_"
"""§5.4 ``grant_id``'s prefix; then the owner's tag (:func:`owner_tag`, issue 20) and 22 random url-safe
characters (128 bits), or the 22 characters alone in an id the previous release minted."""

_TAGGED_GRANT_ID: Final = re.compile(rf"{GRANT_ID_PREFIX}(?P<tag>[0-9a-f]{{8}})(?P<rest>[A-Za-z0-9_-]{{22}})")


def grant_key(brand_id: str, grant_id: str) -> str:
    """§5.4 a grant; the begin-turn step reads it, so a revoked grant stops the very next turn.

    The id decides, not ``cache.key_layout``: an id carrying its owner's tag is kept under that tag,
    in the slot of its owner's conversations (so the begin-turn script reads it in its own slot) and
    of everything else of its grant (:func:`oauth_tagged_key`); any other id (the previous release's,
    or minted under ``key_layout: previous``) under the key the previous release reads.
    """
    tagged = _TAGGED_GRANT_ID.fullmatch(grant_id)
    if tagged is None:
        return f"{PREFIX}:{brand_id}:grant:{grant_id}"
    return oauth_tagged_key(brand_id, tagged["tag"], "g", tagged["rest"])


def grace_key(brand_id: str, grant_id: str) -> str:
    """A grant's last rotation's sealed answer (gateway/store/oauth_redis.py), beside the grant."""
    tagged = _TAGGED_GRANT_ID.fullmatch(grant_id)
    if tagged is None:
        return oauth_key(brand_id, "grace", grant_id)
    return oauth_tagged_key(brand_id, tagged["tag"], "r", tagged["rest"])


def oauth_tagged_key(brand_id: str, tag: str, kind: str, name: str) -> str:
    """The tagged layout's §5 key of ``kind`` (issue 20): ``pact:<brand>:{<tag>}o.<kind>:<name>``.

    ``tag`` is an :func:`owner_tag` (of an owner digest or of a :func:`user_digest`), so every key one
    OAuth script touches shares one Redis Cluster slot (gateway/store/slots.py). Kinds, under the
    owner's tag: ``d`` device authorization, ``a`` the owner's authorizations, ``o`` the owner's
    grants, ``s`` the (user, owner) grant slot, ``g`` a grant, ``r`` its rotation's grace; under the
    user's: ``A`` the authorizations they approved, ``u`` their grants. Single-key records (user codes,
    consent sessions, landing records, used ``jti``s) keep :func:`oauth_key`: one key is one slot.
    """
    return f"{PREFIX}:{brand_id}:{{{tag}}}o.{kind}:{name}"


def oauth_key(brand_id: str, kind: str, digest: str) -> str:
    """The rest of the §5 flow's state (device codes, user codes, consent sessions, jtis, refresh tokens,
    a user's grants), by ``kind``; ``digest`` is a hash wherever the value is a secret or a user id."""
    return f"{PREFIX}:{brand_id}:oauth:{kind}:{digest}"


def adapter_key(brand_id: str, context_id: str, name: str) -> str:
    """What a bot adapter keeps for one conversation (a Direct Line conversation, a model's history),
    under ``name``; dropped with the conversation (gateway/store/adapter_state.py)."""
    return f"{PREFIX}:{brand_id}:adapter:{context_id}:{name}"


def user_digest(brand_id: str, user: str) -> str:
    """A Brand user id as 128 bits of SHA-256, hex: for keys, so no user id is a key name in clear."""
    return hashlib.sha256(f"{brand_id}\x00{user}".encode()).hexdigest()[:32]


def grant_slot_key(brand_id: str, user_digest: str, owner_digest: str) -> str:
    """§5.3 the one live grant of a (Brand user, personal agent, ``sub``): its grant id. By
    :func:`user_digest` and :attr:`gateway.store.base.Owner.digest`, simply joined, as the Redis
    poll script builds it from ``grant_slot_key(brand_id, "", "")`` and the two digests."""
    return f"{PREFIX}:{brand_id}:slot:{user_digest}{owner_digest}"


# The conversation layout since issue 17 (Redis bytes per conversation): short kinds, raw digests.
# The functions above name the layout before it (``conv:``, ``owner:``, ``first:``), which
# gateway/store/redis.py still reads (and moves into these) so that conversations it wrote survive.
#
# Issue 20 adds hash tags: each of the functions below takes ``tag``, the owner's tag
# (:func:`owner_tag`) for the tagged layout (``cache.key_layout: tagged``), or ``""`` for the
# previous release's keys, exactly as it wrote them (``previous``). With the tag every key a
# conversation's script touches sits in one Redis Cluster slot (gateway/store/slots.py), e.g.
# ``pact:acme:{1a2b3c4d}c:<contextId>``: ten bytes more per key than the previous spelling.


def owner_tag(owner_digest: str) -> str:
    """An owner's hash tag: the first 8 hex characters of :attr:`~gateway.store.base.Owner.digest`.

    32 bits spread owners evenly over the 16,384 slots; they name nothing (the digest is one-way)
    and decide nothing (a conversation's owner is still checked against its ``o`` field).
    """
    return owner_digest[:8]


def _scope(brand_id: str, tag: str) -> str:
    """A Brand's key prefix, with ``{tag}`` after it in the tagged layout (``tag`` not empty)."""
    return f"{PREFIX}:{brand_id}:{{{tag}}}" if tag else f"{PREFIX}:{brand_id}:"


def conv_key(brand_id: str, context_id: str, tag: str = "") -> str:
    """A conversation's hash (gateway/store/redis.py); :func:`conversation_key` was the older one's."""
    return f"{_scope(brand_id, tag)}c:{context_id}"


def conv_index_key(brand_id: str, owner: bytes, tag: str = "") -> bytes:
    """One owner's conversations (a sorted set), by :attr:`~gateway.store.base.Owner.digest_bytes`."""
    return f"{_scope(brand_id, tag)}i:".encode() + owner


def first_key(brand_id: str, owner: bytes, message: bytes, tag: str = "") -> bytes:
    """§4.3 a first message's record for its retry window, by raw owner and :func:`message_digest`."""
    return f"{_scope(brand_id, tag)}f:".encode() + owner + message


def claim_released_key(brand_id: str, token: str, tag: str = "") -> str:
    """:func:`released_claim_key` in either layout: under the owner's tag, the begin-turn script's slot."""
    return f"{_scope(brand_id, tag)}released:{token}" if tag else released_claim_key(brand_id, token)


def limit_key(brand_id: str, limit: str, subject_digest: str, tag: str = "") -> str:
    """:func:`rate_limit_key` in either layout. Tagged, a counter's tag is the owner's for the
    per-person counter (it rides in the owner's turn script) and its own subject's otherwise."""
    return (
        f"{_scope(brand_id, tag)}rl:{limit}:{subject_digest}"
        if tag
        else rate_limit_key(brand_id, limit, subject_digest)
    )


def message_digest(message_id: str) -> bytes:
    """A ``messageId`` as a turn's field name: 64 bits, whatever its length (up to 256 characters).

    SHA-1 because a Redis script can compute it too (``redis.sha1hex``), which is how it converts the
    ``m:{messageId}`` fields of a conversation the previous release wrote. The ids are the caller's
    own and the field lives in the caller's own conversation: a collision (one in 2**64 for two ids)
    would only mix its own turns.
    """
    return hashlib.sha1(message_id.encode(), usedforsecurity=False).digest()[:8]
