"""Production operations (health): ``/healthz`` while the process runs; ``/readyz`` only with the
configuration loaded, the store reachable and keys held for every enabled registered issuer.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import orjson
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from gateway.config import CacheConfig
from gateway.ops.metrics import Metrics
from gateway.process.health import GatewayReadiness, create_ops_app
from gateway.store.redis import RedisStore
from tests.ops.conftest import Metered, free_port
from tests.support.pa import FakeJwksServer, PAKey
from tests.support.redis import TEST_REDIS_URL


async def readyz(ops: TestClient[Any, Any]) -> tuple[int, dict[str, Any]]:
    response = await ops.get("/readyz")
    body: dict[str, Any] = orjson.loads(await response.read())
    return response.status, body


async def test_healthz_and_readyz_on_both_backends(cache_url: str, metered: Metered) -> None:
    _, ops = await metered(cache_url)
    health = await ops.get("/healthz")
    assert health.status == 200
    # Readiness waits for the registered issuers' keys: the first probe fetches them.
    assert await readyz(ops) == (200, {"status": "ready"})


async def test_readyz_503_when_the_store_is_unreachable(
    metered: Metered, unreachable_store: RedisStore
) -> None:
    _, ops = await metered(store=unreachable_store)
    status, body = await readyz(ops)
    assert status == 503
    assert body["status"] == "not ready"
    assert set(body["failing"]) == {"store"}
    assert body["failing"]["store"].startswith("redis: ")
    assert (await ops.get("/healthz")).status == 200  # alive, just not ready


async def test_readyz_on_a_cluster_url_names_each_seed_tried_and_what_it_answered(metered: Metered) -> None:
    """Issue 27, item 4: a ``redis+cluster://`` URL whose seeds give no slot map (one refuses the
    connection, one is a plain Redis) is not ready, and says which seed answered what, rather than
    only that no node answered (the plain Redis is asked ``CLUSTER SHARDS``, nothing is written)."""
    plain = urlsplit(TEST_REDIS_URL)
    refused = free_port()
    store = RedisStore(CacheConfig(url=f"redis+cluster://127.0.0.1:{refused},{plain.hostname}:{plain.port}"))
    try:
        _, ops = await metered(store=store)
        status, body = await readyz(ops)
    finally:
        await store.close()
    assert status == 503
    reason = body["failing"]["store"]
    assert reason.startswith("redis: no cluster node answered CLUSTER SHARDS or CLUSTER SLOTS ("), reason
    assert f"127.0.0.1:{refused}: connection refused" in reason, reason
    assert f"{plain.hostname}:{plain.port}: cluster support disabled" in reason, reason


async def test_readyz_503_when_an_enabled_issuer_has_no_keys(metered: Metered) -> None:
    unreachable = f"http://127.0.0.1:{free_port()}/jwks.json"

    def add_agents(raw: dict[str, Any]) -> None:
        registered = raw["personal_agents"]["registered"]
        registered.append({"issuer": "https://keyless-pa.example", "jwks_uri": unreachable})
        # A disabled issuer without keys does not hold readiness back.
        registered.append({"issuer": "https://off-pa.example", "jwks_uri": unreachable, "enabled": False})

    _, ops = await metered(edit=add_agents)
    status, body = await readyz(ops)
    assert status == 503
    assert body["failing"] == {"keys": "no keys for https://keyless-pa.example"}


async def test_readyz_recovers_once_the_jwks_answers(jwks_server: FakeJwksServer, metered: Metered) -> None:
    def no_cooldown(raw: dict[str, Any]) -> None:
        raw["personal_agents"]["jwks"] = {"refetch_cooldown": 0}

    jwks_server.fail("error")
    _, ops = await metered(edit=no_cooldown)
    status, body = await readyz(ops)
    assert status == 503
    assert set(body["failing"]) == {"keys"}
    jwks_server.fail(None)
    assert (await readyz(ops))[0] == 200


async def test_readyz_counts_inline_keys_at_once(jwks_server: FakeJwksServer, metered: Metered) -> None:
    inline = PAKey.es256()

    def inline_only(raw: dict[str, Any]) -> None:
        raw["personal_agents"]["registered"] = [
            {"issuer": "https://airgapped.example", "jwks": {"keys": [inline.public_jwk()]}}
        ]

    _, ops = await metered(edit=inline_only)
    assert (await readyz(ops))[0] == 200
    assert jwks_server.fetch_count == 0


async def test_readyz_before_start_up_and_extra_checks() -> None:
    """A gateway app not started yet has no configuration loaded; process checks are added as given."""
    app = web.Application()
    readiness = GatewayReadiness(app, extra=lambda: {"shutdown": "draining"})
    client: TestClient[Any, Any] = TestClient(TestServer(create_ops_app(Metrics().registry, readiness)))
    await client.start_server()
    try:
        status, body = await readyz(client)
        assert status == 503
        assert body["failing"] == {"shutdown": "draining", "configuration": "not loaded"}
    finally:
        await client.close()
