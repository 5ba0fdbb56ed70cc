"""The store under test once per backend (memory, Redis, a Sentinel-watched primary, a Redis Cluster),
on the tests' clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gateway.config import CacheConfig
from gateway.store import ConversationStore
from gateway.store.memory import MemoryStore
from gateway.store.redis import RedisStore
from tests.support.pa import ManualClock

MakeStore = Callable[..., Awaitable[ConversationStore]]
"""``await make_store(**cache_settings)``: a store of the test's backend with those settings changed."""

SETTINGS: dict[str, Any] = {
    "conversation_ttl": 100,
    "closed_ttl": 1000,
    "retry_window": 30,
    "pending_ttl": 10,
}


@pytest.fixture(params=["memory", "redis", "sentinel", "cluster"])
def cache_url(request: pytest.FixtureRequest) -> str:
    """Every store test once per backend (issue 20): memory, the shared Redis, a primary found
    through a sentinel, written with ``WAIT`` for its replica as Sentinel deployments are, and a
    Redis Cluster of three primaries (each with a replica), in the tagged layout it requires."""
    if request.param == "memory":
        return "memory://"
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_800_000_000.0)


@pytest.fixture
async def make_store(cache_url: str, clock: ManualClock) -> AsyncIterator[MakeStore]:
    opened: list[ConversationStore] = []

    async def make(**settings: Any) -> ConversationStore:
        config = CacheConfig(url=cache_url, **{**SETTINGS, **settings})
        backend: ConversationStore = (
            MemoryStore(config, clock=clock)
            if cache_url.startswith("memory")
            else RedisStore(config, clock=clock)
        )
        opened.append(backend)
        return backend

    yield make
    for backend in opened:
        await backend.close()


@pytest.fixture
async def store(make_store: MakeStore) -> ConversationStore:
    return await make_store()


@pytest.fixture
async def redis_store(redis_url: str, clock: ManualClock) -> AsyncIterator[RedisStore]:
    """A Redis store on the (flushed) test database, with default settings, on the test's clock."""
    backend = RedisStore(CacheConfig(url=redis_url), clock=clock)
    yield backend
    await backend.close()


@pytest.fixture
async def slot_bound_store(redis_url: str, clock: ManualClock) -> AsyncIterator[RedisStore]:
    """The same, run as on a Redis Cluster: each script keeps to one hash slot, so the per-agent
    §6 counter is charged by a script of its own beside the turn's."""
    backend = RedisStore(CacheConfig(url=redis_url), clock=clock, reads_previous=False, slot_bound=True)
    yield backend
    await backend.close()
