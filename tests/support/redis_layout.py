"""Reading the Redis conversation layout (gateway/store/redis.py) from a test, as the store reads it."""

from __future__ import annotations

import redis.asyncio as aioredis

from gateway.store import keys, replies
from gateway.store.base import Owner


def tag_of(owner: Owner) -> str:
    """``owner``'s hash tag, as the tagged layout (the default ``cache.key_layout``) writes it."""
    return keys.owner_tag(owner.digest)


async def conversation_key(
    client: aioredis.Redis, brand_id: str, context_id: str, tag: str | None = None
) -> bytes | None:
    """The key holding conversation ``context_id`` in either current layout (its owner's tag is found
    by a scan, as a test may not know the owner), or ``None``. Given the owner's ``tag``, only the
    tagged key is looked at: a Redis Cluster node would answer ``MOVED`` for the untagged one, and a
    scan there covers that node's keys alone."""
    if tag is not None:
        tagged = keys.conv_key(brand_id, context_id, tag).encode()
        return tagged if await client.exists(tagged) else None
    untagged = keys.conv_key(brand_id, context_id).encode()
    if await client.exists(untagged):
        return untagged
    found = [key async for key in client.scan_iter(keys.conv_key(brand_id, context_id, "*"))]
    return found[0] if found else None


async def stored_reply(
    client: aioredis.Redis, brand_id: str, context_id: str, message_id: str, tag: str | None = None
) -> bytes | None:
    """The reply stored for ``message_id``, joined from its pieces and unpacked; ``None`` if there is none.
    ``tag`` as in :func:`conversation_key`."""
    key = await conversation_key(client, brand_id, context_id, tag)
    if key is None:
        return None
    field = keys.message_digest(message_id)
    first = await client.hget(key, field)
    if not isinstance(first, bytes) or first[:1] == b"P":
        return None
    stored = first
    if first[:1] == b"#":
        pieces = [await client.hget(key, field + bytes([i])) for i in range(1, first[1])]
        stored = first[2:] + b"".join(piece for piece in pieces if isinstance(piece, bytes))
    return replies.unpack(stored, context_id)
