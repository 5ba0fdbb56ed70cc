"""``python -m bench capacity owner_scale`` at a tiny size, on both stores: it runs through the
capacity dispatch, prints each figure beside its target, and leaves nothing behind in Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from tests.support.bench import run_module


async def test_owner_scale_prints_both_stores_beside_the_target(redis_url: str) -> None:
    printed = run_module(
        "bench", "capacity", "owner_scale", "--points", "10,50", "--probe", "40", "--redis-url", redis_url
    )
    for store in ("memory", "redis"):
        rows = [line.split() for line in printed.splitlines() if line.startswith(store)]
        assert [row[1] for row in rows] == ["10", "50"], printed
        assert all(row[-2:] == ["≤", "1.2×"] for row in rows), printed
    assert "worst ratio" in printed
    client = aioredis.Redis.from_url(redis_url)
    assert await client.keys("pact:bench-owner-*") == []
    await client.aclose()
