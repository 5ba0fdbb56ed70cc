"""Adapter state in a Redis gateway: on the conversation store's connection, shared by the replicas."""

from __future__ import annotations

import math

from gateway.store.adapter_state import AdapterState
from gateway.store.redis_pipe import RedisPipe

__all__ = ["RedisAdapterState"]


class RedisAdapterState(AdapterState):
    """Plain strings with a PX expiry on the conversation store's connection; Redis expires them itself."""

    def __init__(self, redis: RedisPipe) -> None:
        self._redis = redis

    async def get(self, key: str) -> bytes | None:
        value: bytes | None = await self._redis.execute("GET", key)
        return value

    async def put(self, key: str, value: bytes, ttl: float) -> None:
        # Whole milliseconds, at least one: PX 0 is an error, and a TTL must not round to "never".
        await self._redis.execute("SET", key, value, "PX", max(1, math.ceil(ttl * 1000)))

    async def delete(self, key: str) -> None:
        await self._redis.execute("DEL", key)
