"""Bot adapters' per-conversation state on both backends: round trip, TTL, delete, Brand-prefixed keys.

Opened the way the gateway opens it (:func:`open_adapter_state` beside a conversation store), so
the memory backend shares the store's keyspace and clock and the Redis one its connection.
"""

from __future__ import annotations

import socket

import pytest
import redis.asyncio as aioredis

from gateway.config import CacheConfig
from gateway.store import ConversationStore
from gateway.store.adapter_state import AdapterState
from gateway.store.base import StoreError
from gateway.store.factory import open_adapter_state
from gateway.store.keys import adapter_key
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore
from tests.support.pa import ManualClock


@pytest.fixture
def state(store: ConversationStore) -> AdapterState:
    return open_adapter_state(store)


def test_adapter_keys_are_brand_prefixed_per_conversation() -> None:
    assert adapter_key("acme", "ctx-1", "directline") == "pact:acme:adapter:ctx-1:directline"
    assert adapter_key("acme", "ctx-1", "openai") != adapter_key("globex", "ctx-1", "openai")


async def test_put_get_replace_delete(state: AdapterState) -> None:
    key = adapter_key("acme", "ctx-1", "history")
    assert await state.get(key) is None
    await state.put(key, b"\x00first", ttl=60)
    assert await state.get(key) == b"\x00first"
    await state.put(key, b"second", ttl=60)
    assert await state.get(key) == b"second"
    await state.delete(key)
    assert await state.get(key) is None
    await state.delete(key)  # forgetting what is not there is no error
    await state.delete(adapter_key("acme", "never", "history"))


async def test_memory_state_expires_on_the_store_clock_and_the_sweep_removes_it(clock: ManualClock) -> None:
    store = MemoryStore(CacheConfig(), clock=clock)
    state = open_adapter_state(store)
    kept, dropped, refreshed = (adapter_key("acme", "ctx", name) for name in ("kept", "dropped", "refreshed"))
    await state.put(kept, b"k", ttl=100)
    await state.put(dropped, b"d", ttl=100)
    await state.put(refreshed, b"r", ttl=100)
    await state.delete(dropped)
    clock.advance(60)
    await state.put(refreshed, b"r", ttl=100)  # a turn refreshes its TTL
    clock.advance(60)
    assert await state.get(kept) is None
    assert await state.get(refreshed) == b"r"
    store.keyspace.sweep()
    assert set(store.keyspace.entries) == {refreshed}
    await store.close()


async def test_redis_state_carries_its_ttl(redis_store: RedisStore, redis_client: aioredis.Redis) -> None:
    """Redis expires the state itself: the key carries the TTL asked for (whole milliseconds, at least 1)."""
    state = open_adapter_state(redis_store)
    key = adapter_key("acme", "ctx-1", "directline")
    await state.put(key, b"v", ttl=100)
    assert 0 < await redis_client.pttl(key) <= 100_000
    await state.put(key, b"v", ttl=0.0001)
    assert await redis_client.pttl(key) <= 1


async def test_redis_down_is_a_store_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = RedisStore(CacheConfig(url=f"redis://127.0.0.1:{port}/15", timeout=1.0))
    state = open_adapter_state(store)
    try:
        for call in (state.get("k"), state.put("k", b"v", 1), state.delete("k")):
            with pytest.raises(StoreError):
                await call
    finally:
        await store.close()
