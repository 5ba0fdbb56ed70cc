"""Reading the Redis conversation layout (gateway/store/redis.py) from a test, as the store reads it."""

from __future__ import annotations

import redis.asyncio as aioredis

from gateway.store import keys, replies


async def stored_reply(
    client: aioredis.Redis, brand_id: str, context_id: str, message_id: str
) -> bytes | None:
    """The reply stored for ``message_id``, joined from its pieces and unpacked; ``None`` if there is none."""
    key = keys.conv_key(brand_id, context_id)
    field = keys.message_digest(message_id)
    first = await client.hget(key, field)
    if not isinstance(first, bytes) or first[:1] == b"P":
        return None
    stored = first
    if first[:1] == b"#":
        pieces = [await client.hget(key, field + bytes([i])) for i in range(1, first[1])]
        stored = first[2:] + b"".join(piece for piece in pieces if isinstance(piece, bytes))
    return replies.unpack(stored, context_id)
