"""The real Redis the Redis-backed tests use: database 15 on 127.0.0.1:6379, flushed per test.

An unreachable Redis fails the test; it never skips, so CI cannot go green without it.
``PACT_TEST_REDIS_URL`` names another database, so two test runs on one machine do not flush
each other's state.

The suite flushes only a database it may call its own: an empty one, or one it marked. Between
tests the database holds :data:`MARKER_KEY` alone; a database holding anything else (a developer's
own data on their Redis) fails the test at once, untouched, and says how to point the suite
elsewhere. The marker is written after each test's flush, so no test ever sees it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest
import redis
import redis.asyncio as aioredis
from redis.exceptions import RedisError

TEST_REDIS_URL = os.environ.get("PACT_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
MARKER_KEY = "pact-gateway:test-suite-database"
"""Left in the test database between tests: this suite wrote what is there, and may flush it."""


def refusal(url: str, keys: int) -> str:
    """Why the suite will not flush ``url``, and what to do about it."""
    return (
        f"the Redis-backed tests flush the database they are given, and {url} holds {keys} key(s) this "
        f"suite did not write (no {MARKER_KEY!r} marker): it was left as it is. Point the suite at an "
        "empty database with PACT_TEST_REDIS_URL=redis://HOST:PORT/DB, or, if that data is a test run's "
        "that was interrupted, flush it yourself (redis-cli -n DB FLUSHDB)."
    )


@contextmanager
def suite_database(url: str = TEST_REDIS_URL) -> Iterator[str]:
    """The test database, flushed for the test if it is this suite's (empty, or marked), and flushed
    and marked again after it; any other database fails the test, untouched.

    A bench tool under test (which flushes the database it is given) runs inside it too."""
    client = redis.Redis.from_url(url)
    try:
        if not client.exists(MARKER_KEY) and (keys := int(client.dbsize())):
            pytest.fail(refusal(url, keys), pytrace=False)
        client.flushdb()
    except (RedisError, OSError) as exc:
        client.close()
        pytest.fail(f"Redis-backed tests need Redis at {url}: {exc}")
    except BaseException:
        client.close()
        raise
    try:
        yield url
    finally:
        client.flushdb()
        client.set(MARKER_KEY, "pact-gateway's test suite flushes this database before and after each test")
        client.close()


@pytest.fixture
def redis_url() -> Iterator[str]:
    with suite_database() as url:
        yield url


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
