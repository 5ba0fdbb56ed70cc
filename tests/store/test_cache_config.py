"""The cache's rules at load: an in-flight marker that outlives a turn (issue 12, row 7), and Redis URLs.

Each refusal names the YAML path and why, as every configuration error does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import CacheConfig, ConfigError, load_config
from gateway.redis_url import ClusterAddress, RedisAddress, SentinelAddress, parse_redis_url
from tests.support.delegation import new_provider_key_pem

ROOT = Path(__file__).resolve().parents[2]
ENV = {"ACME_BOT_TOKEN": "t", "PACT_SIGNING_KEY": new_provider_key_pem()}


def example(**cache: Any) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load((ROOT / "config" / "example.yaml").read_text())
    raw["cache"] = {**raw.get("cache", {}), **cache}
    return raw


def load(raw: dict[str, Any]) -> CacheConfig:
    return load_config(raw, ENV).cache


def refusal(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as refused:
        load(raw)
    return str(refused.value)


# --- §4.3: pending_ttl must outlive the longest turn (row 7) ------------------------------------


def test_s4_3_pending_ttl_shorter_than_a_brands_bot_timeout_plus_queue_is_refused() -> None:
    raw = example(pending_ttl=10)  # the example's bot: timeout 10, queue_timeout 1 (the default)
    assert refusal(raw) == (
        "cache.pending_ttl: must be longer than the longest turn of brands[0] (acme):"
        " upstream.timeout 10 + queue_timeout 1 = 11 s;"
        " a retry after the in-flight marker expired would run the bot a second time"
    )


def test_s4_3_on_redis_the_claim_and_the_write_count_too() -> None:
    raw = example(url="redis://cache:6379/0", pending_ttl=12, timeout=1.5)
    assert "upstream.timeout 10 + queue_timeout 1 + 2 × cache.timeout 1.5 = 14 s" in refusal(raw)
    assert load(example(url="redis://cache:6379/0", pending_ttl=15, timeout=1.5)).pending_ttl == 15


def test_s4_3_the_brand_with_the_longest_turn_decides() -> None:
    raw = example(pending_ttl=20)
    slow = {**raw["brands"][0], "id": "slowco", "domain": "support.slowco.example"}
    slow["upstream"] = {**slow["upstream"], "timeout": 25, "queue_timeout": 2}
    raw["brands"].append(slow)
    assert refusal(raw).startswith(
        "cache.pending_ttl: must be longer than the longest turn of brands[1] (slowco):"
        " upstream.timeout 25 + queue_timeout 2 = 27 s"
    )


def test_the_documented_defaults_pass() -> None:
    assert load(example()).pending_ttl == 60


# --- cache.url: redis://, rediss://, redis+sentinel://, redis+cluster:// ------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis://cache:6379/zero", "the database must be a number, not 'zero'"),
        ("redis://cache:99999/0", "the port must be a number from 0 to 65535"),
        ("redis+sentinel://s1:26379", "needs the service name after the sentinels"),
        ("redis+sentinel://s1:26379/", "needs the service name after the sentinels"),
        ("redis+sentinel://s1:26379/pact/0/extra", "needs the service name after the sentinels"),
        ("redis+sentinel://s1:26379,,s2/pact", "no empty entry between commas"),
        ("redis+sentinel://s1:huh/pact", "sentinel 's1:huh': the port must be a number"),
        ("redis+sentinel://s1/pact/x", "the database must be a number, not 'x'"),
        ("redis+sentinel://s1/pact?password=x", "unknown option 'password'"),
        ("redis+sentinel://s1/pact?sentinel_password=a&sentinel_password=b", "may be given once"),
        ("rediss+sentinel://s1/pact", "must start with memory://, redis://, rediss://, redis+sentinel://"),
        ("redis+cluster://", "needs at least one seed node host[:port]"),
        ("redis+cluster://n1:7000,,n2:7001", "no empty entry between commas"),
        ("redis+cluster://n1:huh", "seed node 'n1:huh': the port must be a number"),
        ("redis+cluster://n1:7000/0", "a cluster has database 0 only"),
        ("redis+cluster://n1:7000?timeout=1", "takes no options"),
        ("redis+clusters://n1:7000", "must start with memory://"),
    ],
)
def test_a_malformed_redis_url_is_refused_with_why(url: str, why: str) -> None:
    message = refusal(example(url=url))
    assert message.startswith("cache.url: ")
    assert why in message


def test_a_refused_url_never_quotes_its_password() -> None:
    message = refusal(example(url="redis+sentinel://app:hunter2-secret@s1/pact/zero"))
    assert "hunter2-secret" not in message


def test_a_sentinel_url_names_the_sentinels_the_service_and_the_primarys_login() -> None:
    address = parse_redis_url(
        "redis+sentinel://app:p%40ss@s1.internal:26380,[::1],10.0.0.7:5000/pact-cache/3"
        "?sentinel_username=watcher&sentinel_password=s%20pw"
    )
    assert address == SentinelAddress(
        sentinels=(("s1.internal", 26380), ("::1", 26379), ("10.0.0.7", 5000)),
        service="pact-cache",
        db=3,
        username="app",
        password="p@ss",
        sentinel_username="watcher",
        sentinel_password="s pw",
    )
    assert address.handshake() == [("AUTH", "app", "p@ss"), ("SELECT", 3)]
    assert address.sentinel_address("s1.internal", 26380) == RedisAddress(
        "s1.internal", 26380, 0, "watcher", "s pw", tls=False
    )
    assert "p@ss" not in repr(address)
    assert "s pw" not in repr(address)


def test_a_cluster_url_names_the_seed_nodes_and_every_nodes_login() -> None:
    address = parse_redis_url("rediss+cluster://app:p%40ss@n1.internal:7000,[::1],10.0.0.7:7002")
    assert address == ClusterAddress(
        seeds=(("n1.internal", 7000), ("::1", 6379), ("10.0.0.7", 7002)),
        username="app",
        password="p@ss",
        tls=True,
    )
    assert address.node("10.0.0.9", 7005) == RedisAddress("10.0.0.9", 7005, 0, "app", "p@ss", tls=True)
    assert "p@ss" not in repr(address)
    assert not parse_redis_url("redis+cluster://n1").tls
    assert load(example(url="redis+cluster://n1:7000,n2:7001")).backend == "redis"


def test_a_refused_cluster_url_never_quotes_its_password() -> None:
    message = refusal(example(url="redis+cluster://app:hunter2-secret@n1:7000/3"))
    assert "hunter2-secret" not in message


def test_wait_replicas_defaults_to_one_under_sentinel_and_cluster_and_none_otherwise() -> None:
    assert load(example(url="redis+sentinel://s1/pact")).replicas == 1
    assert load(example(url="redis+cluster://n1:7000")).replicas == 1
    assert load(example(url="rediss+cluster://n1:7000")).replicas == 1
    assert load(example(url="redis://cache/0")).replicas == 0
    assert load(example(url="redis+sentinel://s1/pact", wait_replicas=0)).replicas == 0
    assert load(example(url="redis://cache/0", wait_replicas=2)).replicas == 2
    assert refusal(example(wait_replicas=-1)).startswith("cache.wait_replicas: ")


# --- issue 17: the memory store's bound -------------------------------------------------------


def test_max_entries_bounds_the_memory_store_and_is_refused_beside_redis() -> None:
    assert load(example(url="memory://")).max_entries == 300_000
    assert load(example(url="memory://", max_entries=1000)).max_entries == 1000
    # Redis bounds itself (maxmemory): the setting would be a cap that does nothing.
    assert load(example(url="redis://127.0.0.1:6379/0")).max_entries is None
    why = refusal(example(url="redis://127.0.0.1:6379/0", max_entries=1000))
    assert "cache.max_entries" in why
    assert "maxmemory" in why
    assert "cache.max_entries" in refusal(example(url="memory://", max_entries=0))


# --- issue 20: the key layout -----------------------------------------------------------------


def test_key_layout_is_tagged_by_default_previous_on_request_and_redis_only() -> None:
    assert load(example(url="redis://127.0.0.1:6379/0")).key_layout == "tagged"
    assert load(example(url="redis://127.0.0.1:6379/0", key_layout="previous")).key_layout == "previous"
    why = refusal(example(url="redis://127.0.0.1:6379/0", key_layout="hashed"))
    assert why.startswith("cache.key_layout: ")
    assert "Redis only" in refusal(example(url="memory://", key_layout="tagged"))
    cluster = "redis+cluster://127.0.0.1:7000,127.0.0.1:7001"
    assert load(example(url=cluster)).key_layout == "tagged"
    why = refusal(example(url=cluster, key_layout="previous"))
    assert why.startswith("cache.key_layout: ")
    assert "Redis Cluster" in why
