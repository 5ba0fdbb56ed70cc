"""Pick the backend named by ``cache.url``."""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.config import CacheConfig
from gateway.store.base import ConversationStore
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore


def open_store(config: CacheConfig, *, clock: Callable[[], float] = time.time) -> ConversationStore:
    """The backend for ``config``; ``clock`` is its wall clock, and its rate limiter's (tests move it)."""
    if config.backend == "memory":
        return MemoryStore(config, clock=clock)
    return RedisStore(config, clock=clock)
