"""The real Redis the Redis-backed tests use: database 15 on 127.0.0.1:6379, flushed per test.

An unreachable Redis fails the test; it never skips, so CI cannot go green without it.
``PACT_TEST_REDIS_URL`` names another database, so two test runs on one machine do not flush
each other's state.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError

TEST_REDIS_URL = os.environ.get("PACT_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
async def redis_url() -> AsyncIterator[str]:
    client = aioredis.Redis.from_url(TEST_REDIS_URL)
    try:
        await client.flushdb()
    except (RedisError, OSError) as exc:
        await client.aclose()
        pytest.fail(f"Redis-backed tests need Redis at {TEST_REDIS_URL}: {exc}")
    yield TEST_REDIS_URL
    await client.flushdb()
    await client.aclose()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """Its own client on the test database, to look at what the gateway wrote (not through the gateway)."""
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture(params=["memory", "redis"])
def cache_url(request: pytest.FixtureRequest) -> str:
    """Runs a test once per backend: the in-memory cache and the real Redis."""
    if request.param == "memory":
        return "memory://"
    url: str = request.getfixturevalue("redis_url")
    return url
