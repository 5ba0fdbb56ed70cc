"""Production operations (metrics): values read by scraping the real ops listener over HTTP.

Requests by Brand/operation/outcome with latency, §3.4 authentication failures by reason,
§4.3 retries served from the store, bot call latency, JWKS fetches by issuer, store
errors, and bounded labels (no sub, contextId, raw path or token).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.ops.metrics import MAX_CLUSTER_NODES, OTHER_NODE, Metrics
from gateway.store.redis import RedisStore
from tests.ops.conftest import ROOT, Metered, sample, scrape
from tests.support.gateway import AUDIENCE, DISABLED_PA
from tests.support.pa import FakeJwksServer, PAKey


async def test_requests_counted_by_brand_operation_and_outcome(metered: Metered) -> None:
    gw, ops = await metered()
    assert (await gw.send(message_id="m-1")).status == 200
    assert (await gw.send(message_id="m-2")).status == 200
    assert (await gw.client.post("/a2a/acme/message:send", json={})).status == 401
    assert (await gw.send(brand="no-such-brand")).status == 404
    assert (await gw.client.get("/some/raw/path")).status == 404
    assert (await gw.client.put("/a2a/acme/message:send")).status == 405
    assert (await gw.client.get("/a2a/globex/tasks", headers=gw.auth())).status == 200
    assert (await gw.client.get("/a2a/acme/.well-known/agent-card.json")).status == 200

    text = await scrape(ops)
    requests = "pact_requests_total"
    assert sample(text, requests, brand="acme", operation="SendMessage", outcome="ok") == 2
    assert sample(text, requests, brand="acme", operation="SendMessage", outcome="unauthorized") == 1
    # An unknown Brand id or path is never a label value (§2.2 answers both with a bare 404).
    assert sample(text, requests, brand="-", operation="SendMessage", outcome="not_found") == 1
    assert sample(text, requests, brand="-", operation="unmatched", outcome="not_found") == 1
    assert sample(text, requests, brand="-", operation="unmatched", outcome="method_not_allowed") == 1
    assert sample(text, requests, brand="globex", operation="ListTasks", outcome="ok") == 1
    assert sample(text, requests, brand="acme", operation="GetAgentCard", outcome="ok") == 1
    latency = "pact_request_duration_seconds_count"
    assert sample(text, latency, brand="acme", operation="SendMessage") == 3
    assert sample(text, "pact_request_duration_seconds_bucket", brand="acme", le="+Inf") == 4


async def test_s3_4_auth_failures_counted_by_reason(metered: Metered) -> None:
    gw, ops = await metered()
    expired = gw.key.mint(gw.issuer, "alice", AUDIENCE, iat=time.time() - 600, exp=time.time() - 300)
    for headers in (
        {},
        {"Authorization": "Basic abc"},
        {"Authorization": f"Bearer {expired}"},
        gw.auth(issuer=DISABLED_PA),
        {"Authorization": f"Bearer {gw.key.mint('https://stranger.example', 'alice', AUDIENCE)}"},
    ):
        response = await gw.client.post("/a2a/acme/message:send", json={}, headers=headers)
        assert response.status == 401
    text = await scrape(ops)
    assert sample(text, "pact_auth_failures_total", reason="missing_token") == 2
    assert sample(text, "pact_auth_failures_total", reason="expired") == 1
    assert sample(text, "pact_auth_failures_total", reason="disabled_issuer") == 1
    assert sample(text, "pact_auth_failures_total", reason="unknown_issuer") == 1
    assert sample(text, "pact_auth_failures_total") == 5


async def test_s4_3_retries_served_from_the_store_and_bot_latency(metered: Metered) -> None:
    gw, ops = await metered()
    first = await gw.send("Hi", message_id="m-1")
    assert first.status == 200
    for _ in range(2):
        assert await (await gw.send("Hi", message_id="m-1")).read() == await first.read()
    assert len(gw.bot.calls) == 1
    text = await scrape(ops)
    assert sample(text, "pact_retries_served_total", brand="acme") == 2
    assert sample(text, "pact_bot_call_duration_seconds_count", brand="acme", outcome="ok") == 1
    assert sample(text, "pact_requests_total", brand="acme", operation="SendMessage", outcome="ok") == 3


async def test_failed_bot_call_counted_by_reason(metered: Metered) -> None:
    gw, ops = await metered()
    gw.bot.mode = "status500"
    assert (await gw.send()).status == 500
    gw.bot.mode = "bad_body"
    assert (await gw.send()).status == 500
    text = await scrape(ops)
    assert sample(text, "pact_bot_call_duration_seconds_count", brand="acme", outcome="status") == 1
    assert sample(text, "pact_bot_call_duration_seconds_count", brand="acme", outcome="bad_body") == 1
    assert sample(text, "pact_requests_total", brand="acme", operation="SendMessage", outcome="error") == 2


async def test_jwks_fetches_counted_by_issuer(jwks_server: FakeJwksServer, metered: Metered) -> None:
    gw, ops = await metered()
    for _ in range(3):
        assert (await gw.send()).status == 200
    text = await scrape(ops)
    assert jwks_server.fetch_count == 1
    assert sample(text, "pact_jwks_fetches_total", issuer=gw.issuer, result="ok") == 1
    assert sample(text, "pact_jwks_fetches_total", result="error") == 0


def open_policy(raw: dict[str, Any]) -> None:
    raw["personal_agents"]["policy"] = "open"


async def test_jwks_failure_counted_and_open_issuers_share_one_label(
    jwks_server: FakeJwksServer, metered: Metered
) -> None:
    """An issuer admitted by the ``open`` policy is counted as ``open``: anyone can mint issuers."""

    gw, ops = await metered(edit=open_policy)
    stranger_key = PAKey.es256()
    async with FakeJwksServer() as stranger:
        stranger.set_keys(stranger_key)
        token = stranger_key.mint(stranger.issuer, "alice", AUDIENCE)
        assert (await gw.send(headers={"Authorization": f"Bearer {token}"})).status == 200
    jwks_server.fail("error")
    assert (await gw.send()).status == 401
    text = await scrape(ops)
    assert sample(text, "pact_jwks_fetches_total", issuer="open", result="ok") == 1
    assert sample(text, "pact_jwks_fetches_total", issuer=gw.issuer, result="error") == 1
    assert stranger.issuer not in text


async def test_s3_1_open_policy_discovery_fetches_counted_apart_from_jwks_fetches(metered: Metered) -> None:
    """OIDC discovery is ``pact_oidc_discovery_fetches_total{result}``: no issuer label, not a JWKS fetch."""

    gw, ops = await metered(edit=open_policy)
    stranger_key = PAKey.es256()
    async with FakeJwksServer() as stranger, FakeJwksServer() as broken:
        stranger.set_keys(stranger_key)
        token = stranger_key.mint(stranger.issuer, "alice", AUDIENCE)
        for _ in range(2):
            assert (await gw.send(headers={"Authorization": f"Bearer {token}"})).status == 200
        broken.discovery_failure = "error"
        token = stranger_key.mint(broken.issuer, "alice", AUDIENCE)
        assert (await gw.send(headers={"Authorization": f"Bearer {token}"})).status == 401
    text = await scrape(ops)
    assert sample(text, "pact_oidc_discovery_fetches_total", result="ok") == stranger.discovery_count == 1
    assert sample(text, "pact_oidc_discovery_fetches_total", result="error") == broken.discovery_count == 1
    assert sample(text, "pact_jwks_fetches_total", issuer="open", result="ok") == 1
    assert sample(text, "pact_jwks_fetches_total", result="error") == 0
    assert stranger.issuer not in text
    assert broken.issuer not in text


async def test_store_errors_counted_by_operation(metered: Metered, unreachable_store: RedisStore) -> None:
    gw, ops = await metered(store=unreachable_store)
    assert (await gw.send()).status == 500
    text = await scrape(ops)
    assert sample(text, "pact_store_errors_total", operation="begin_turn") == 1
    assert sample(text, "pact_requests_total", brand="acme", outcome="error") == 1


async def test_labels_never_carry_sub_context_path_or_token(metered: Metered) -> None:
    gw, ops = await metered()
    sub = "customer-7c1e-secret"
    token = gw.token(sub)
    response = await gw.send(sub=sub, headers={"Authorization": f"Bearer {token}"})
    context_id = orjson.loads(await response.read())["message"]["contextId"]
    await gw.send(brand="brand-probe-x", sub=sub)
    await gw.client.get("/a2a/acme/tasks/task-probe-y", headers=gw.auth(sub))
    await gw.client.get("/raw/path-probe-z")
    text = await scrape(ops)
    for secret in (sub, token, context_id, "brand-probe-x", "task-probe-y", "path-probe-z", "message:send"):
        assert secret not in text


def test_cached_label_children_keep_every_label_set_apart() -> None:
    """The per-turn metrics reuse their labelled children; each label set must still count alone."""
    metrics = Metrics()
    for brand, operation, outcome, took in [
        ("acme", "SendMessage", "ok", 0.01),
        ("acme", "SendMessage", "error", 0.02),
        ("globex", "SendMessage", "ok", 0.04),
        ("acme", "SendMessage", "ok", 0.08),
        ("acme", "ListTasks", "ok", 0.16),
    ]:
        metrics.observe_request(brand, operation, outcome, took)
    for brand, outcome in [("acme", "ok"), ("acme", "timeout"), ("acme", "ok")]:
        metrics.observe_bot_call(brand, outcome, 0.5)
    for reason in ("expired", "missing_token", "expired"):
        metrics.auth_failed(reason)

    def value(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    requests = "pact_requests_total"
    assert value(requests, brand="acme", operation="SendMessage", outcome="ok") == 2
    assert value(requests, brand="acme", operation="SendMessage", outcome="error") == 1
    assert value(requests, brand="globex", operation="SendMessage", outcome="ok") == 1
    assert value(requests, brand="acme", operation="ListTasks", outcome="ok") == 1
    # The latency histogram has no outcome label: ok and error turns of one operation share it.
    seconds = "pact_request_duration_seconds"
    assert value(f"{seconds}_count", brand="acme", operation="SendMessage") == 3
    assert value(f"{seconds}_sum", brand="acme", operation="SendMessage") == pytest.approx(0.11)
    assert value(f"{seconds}_count", brand="globex", operation="SendMessage") == 1
    assert value("pact_bot_call_duration_seconds_count", brand="acme", outcome="ok") == 2
    assert value("pact_bot_call_duration_seconds_count", brand="acme", outcome="timeout") == 1
    assert value("pact_auth_failures_total", reason="expired") == 2
    assert value("pact_auth_failures_total", reason="missing_token") == 1
    # Two Metrics objects never share a cached child.
    assert (
        Metrics().registry.get_sample_value(
            requests, {"brand": "acme", "operation": "SendMessage", "outcome": "ok"}
        )
        is None
    )


_MULTIPROCESS_SCRIPT = """
import os
from gateway.ops.metrics import Metrics, multiprocess_registry
metrics = Metrics()
metrics.observe_request("acme", "SendMessage", "ok", 0.01)  # caches the children in this process
pid = os.fork()
if pid == 0:  # a forked child reuses the cached children: its counts must go to its own file
    for _ in range(3):
        metrics.observe_request("acme", "SendMessage", "ok", 0.01)
    os._exit(0)
os.waitpid(pid, 0)
metrics.observe_request("acme", "SendMessage", "ok", 0.01)
directory = os.environ["PROMETHEUS_MULTIPROC_DIR"]
labels = {"brand": "acme", "operation": "SendMessage", "outcome": "ok"}
total = multiprocess_registry(directory).get_sample_value("pact_requests_total", labels)
print(total, len([name for name in os.listdir(directory) if name.startswith("counter_")]))
"""


def test_cached_children_count_per_process_in_multiprocess_mode(tmp_path: Path) -> None:
    """``--workers N`` mode: values live in per-process files, and a cached child must follow a fork."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", _MULTIPROCESS_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    total, files = done.stdout.split()
    assert float(total) == 5.0
    assert int(files) == 2  # the parent's file and the child's


def test_redis_cluster_node_labels_are_bounded_and_the_rest_count_as_other() -> None:
    metrics = Metrics()
    nodes = [f"10.0.0.{number}:6379" for number in range(MAX_CLUSTER_NODES + 4)]
    for node in nodes:
        metrics.cluster_command(node, ok=True)
    metrics.cluster_command(nodes[0], ok=False)
    metrics.cluster_redirect(nodes[-1], "moved")
    metrics.cluster_refresh("ok")
    value = metrics.registry.get_sample_value
    assert value("pact_redis_cluster_commands_total", {"node": nodes[0], "outcome": "ok"}) == 1
    assert value("pact_redis_cluster_commands_total", {"node": nodes[0], "outcome": "error"}) == 1
    assert value("pact_redis_cluster_commands_total", {"node": OTHER_NODE, "outcome": "ok"}) == 4
    assert value("pact_redis_cluster_commands_total", {"node": nodes[-1], "outcome": "ok"}) is None
    assert value("pact_redis_cluster_redirects_total", {"node": OTHER_NODE, "kind": "moved"}) == 1
    assert value("pact_redis_cluster_map_refreshes_total", {"outcome": "ok"}) == 1
    node_labels = {
        sample.labels["node"]
        for family in metrics.registry.collect()
        if family.name == "pact_redis_cluster_commands"
        for sample in family.samples
    }
    assert len(node_labels) == MAX_CLUSTER_NODES + 1
