"""Pick the backend named by ``cache.url``, and open the §5 state beside it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from gateway.config import CacheConfig
from gateway.store.adapter_state import AdapterState, MemoryAdapterState, RedisAdapterState
from gateway.store.admin import ConversationAdmin
from gateway.store.admin_memory import MemoryConversationAdmin
from gateway.store.admin_redis import RedisConversationAdmin
from gateway.store.base import ConversationStore
from gateway.store.memory import KeyspaceObserver, MemoryStore
from gateway.store.oauth import OAuthStore
from gateway.store.oauth_memory import MemoryOAuthStore
from gateway.store.oauth_redis import RedisOAuthStore
from gateway.store.redis import RedisStore, ReleaseObserver
from gateway.store.redis_cluster import ClusterObserver


def open_store(
    config: CacheConfig,
    *,
    clock: Callable[[], float] | None = None,
    observer: KeyspaceObserver | None = None,
    cluster_observer: ClusterObserver | None = None,
    release_observer: ReleaseObserver | None = None,
) -> ConversationStore:
    """The backend for ``config``; ``clock`` a test's, for it and its rate limiter (without one, the
    wall clock, and on Redis each §6 counter's node's clock: :class:`RedisStore`).
    ``observer`` hears the memory store's size and evictions (Redis reports its own, ``INFO``);
    ``cluster_observer`` what the Redis Cluster client does (calls, redirects, map look-ups per node);
    ``release_observer`` how Redis releases tried again in the background ended."""
    if config.backend == "memory":
        return MemoryStore(config, clock=clock or time.time, observer=observer)
    return RedisStore(
        config, clock=clock, cluster_observer=cluster_observer, release_observer=release_observer
    )


def open_oauth_store(store: ConversationStore) -> OAuthStore:
    """The §5 state beside ``store``: in its Redis connection or its memory container, on its clock.

    Beside, not apart: the store's begin-turn step reads the grants this one keeps (§5.5), and
    both must agree on what "now" is.
    """
    if isinstance(store, RedisStore):
        return RedisOAuthStore(
            store.redis, clock=store.clock, tagged=store.tagged, reads_previous=store.reads_previous
        )
    if isinstance(store, MemoryStore):
        return MemoryOAuthStore(store.keyspace)
    raise TypeError(f"no OAuth store for {type(store).__name__}")


def open_adapter_state(store: ConversationStore) -> AdapterState:
    """Bot adapters' per-conversation state beside ``store``: in its Redis connection or its memory
    container (and so on its clock, which the conversations' TTLs are measured by)."""
    if isinstance(store, RedisStore):
        return RedisAdapterState(store.redis)
    if isinstance(store, MemoryStore):
        return MemoryAdapterState(store.keyspace)
    raise TypeError(f"no adapter state for {type(store).__name__}")


def open_conversation_admin(
    store: ConversationStore, cache: CacheConfig, adapter_names: Sequence[str]
) -> ConversationAdmin:
    """The operator's side of ``store`` (listing, closing, erasing an owner's conversations): on its
    Redis connection or its memory container, and its clock. ``cache`` is the configuration it was
    opened with; ``adapter_names`` the names bot adapters keep per-conversation state under."""
    if isinstance(store, RedisStore):
        return RedisConversationAdmin(store, cache, adapter_names)
    if isinstance(store, MemoryStore):
        return MemoryConversationAdmin(store.keyspace, cache, adapter_names)
    raise TypeError(f"no conversation admin for {type(store).__name__}")
