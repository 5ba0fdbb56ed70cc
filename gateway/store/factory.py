"""Pick the backend named by ``cache.url``."""

from __future__ import annotations

from gateway.config import CacheConfig
from gateway.store.base import ConversationStore
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore


def open_store(config: CacheConfig) -> ConversationStore:
    if config.backend == "memory":
        return MemoryStore(config)
    return RedisStore(config)
