"""The access line says why a request was refused and whether a retry was served from the store.

``reason`` is the §6 A2A reason of an enveloped error, the §3.4 authentication failure, the
§5.5 delegation-token refusal, the RFC 6749 error code of an OAuth endpoint, or the §6 limit
that answered ``429``; ``retry_served`` is ``true`` for a §4.3 replay. Both come from what the
handling noted on the request, so they are checked here through HTTP against the answer the
client got.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import orjson
import pytest

from tests.ops.conftest import CapturedLogs
from tests.support.delegation import oauth_path, post_form
from tests.support.fake_openai import FakeOpenAI
from tests.support.gateway import AUDIENCE, Harness, MakeGateway
from tests.upstream.test_openai import ENV as OPENAI_ENV
from tests.upstream.test_openai import openai_upstream


def line_for(logs: CapturedLogs, request_id: str) -> dict[str, Any]:
    (line,) = [record for record in logs.access() if record["request_id"] == request_id]
    return line


def envelope_reason(body: bytes) -> str:
    reason: str = orjson.loads(body)["error"]["details"][0]["reason"]
    return reason


async def test_s6_a2a_reason_is_the_envelope_reason(gw_memory: Harness, json_logs: CapturedLogs) -> None:
    unknown = await gw_memory.send(context_id="no-such-context")
    stream = await gw_memory.client.post("/a2a/acme/message:stream", json={}, headers=gw_memory.auth())
    task = await gw_memory.client.get("/a2a/acme/tasks/t-1", headers=gw_memory.auth())
    push = await gw_memory.client.get("/a2a/acme/tasks/t-1/pushNotificationConfigs", headers=gw_memory.auth())
    for response, status in ((unknown, 400), (stream, 400), (task, 404), (push, 400)):
        assert response.status == status
        line = line_for(json_logs, response.headers["X-Request-Id"])
        assert line["reason"] == envelope_reason(await response.read())
        assert line["outcome"] in {"client_error", "not_found"}
        assert line["retry_served"] is None
    assert [
        line_for(json_logs, r.headers["X-Request-Id"])["reason"] for r in (unknown, stream, task, push)
    ] == [
        "INVALID_PARAMS",
        "UNSUPPORTED_OPERATION",
        "TASK_NOT_FOUND",
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ]


async def test_s6_bad_body_and_provider_failure(gw_memory: Harness, json_logs: CapturedLogs) -> None:
    bad = await gw_memory.client.post("/a2a/acme/message:send", data=b"{not json", headers=gw_memory.auth())
    assert bad.status == 400
    assert line_for(json_logs, bad.headers["X-Request-Id"])["reason"] == "INVALID_PARAMS"
    gw_memory.bot.mode = "status500"
    failed = await gw_memory.send()
    assert failed.status == 500
    line = line_for(json_logs, failed.headers["X-Request-Id"])
    assert (line["reason"], line["outcome"]) == ("INTERNAL", "error")


async def test_s3_4_reason_is_the_authentication_failure(gw_memory: Harness, json_logs: CapturedLogs) -> None:
    expired = gw_memory.key.mint(
        gw_memory.issuer, "alice", AUDIENCE, iat=time.time() - 600, exp=time.time() - 300
    )
    response = await gw_memory.send(headers={"Authorization": f"Bearer {expired}"})
    assert response.status == 401
    assert await response.read() == b""
    line = line_for(json_logs, response.headers["X-Request-Id"])
    assert line["reason"] == line["auth_failure"] == "expired"
    missing = await gw_memory.client.get("/a2a/acme/tasks")
    assert line_for(json_logs, missing.headers["X-Request-Id"])["reason"] == "missing_token"


async def test_s6_429_reason_is_the_limit(make_gateway: MakeGateway, json_logs: CapturedLogs) -> None:
    def one_turn_per_user(raw: dict[str, Any]) -> None:
        raw["rate_limits"]["per_user"] = {"rate": 0.001, "burst": 1}

    h = await make_gateway(edit=one_turn_per_user)
    assert (await h.send()).status == 200
    limited = await h.send()
    assert limited.status == 429
    assert line_for(json_logs, limited.headers["X-Request-Id"])["reason"] == "per_user"
    listed = await h.client.get("/a2a/acme/tasks", headers=h.auth())
    assert listed.status == 429
    assert line_for(json_logs, listed.headers["X-Request-Id"])["reason"] == "per_user"


async def test_s6_a_bot_held_back_by_its_own_429_is_logged_as_that_limit(
    make_gateway: MakeGateway, fake_openai: FakeOpenAI, json_logs: CapturedLogs
) -> None:
    """Issue 19: the access line named every bare 429 from the bot guard ``concurrency``, while the metric
    counted the provider's own 429 as ``upstream_retry_after``; both now say the latter."""
    h = await make_gateway(edit=openai_upstream(fake_openai), environ=OPENAI_ENV)
    fake_openai.mode, fake_openai.status, fake_openai.headers = "status", 429, {"Retry-After": "7"}
    refused = await h.send("Hello")
    held_back = await h.send("Hello again", message_id="m-2")
    for response in (refused, held_back):
        assert response.status == 429
        assert line_for(json_logs, response.headers["X-Request-Id"])["reason"] == "upstream_retry_after"


async def test_no_reason_for_a_success_or_a_routing_miss(gw_memory: Harness, json_logs: CapturedLogs) -> None:
    card = await gw_memory.client.get("/a2a/acme/.well-known/agent-card.json")
    unknown_brand = await gw_memory.client.get("/a2a/nobody/tasks", headers=gw_memory.auth())
    unmatched = await gw_memory.client.get("/nothing")
    assert (card.status, unknown_brand.status, unmatched.status) == (200, 404, 404)
    for response in (card, unknown_brand, unmatched):
        line = line_for(json_logs, response.headers["X-Request-Id"])
        assert line["reason"] is None
        assert line["retry_served"] is None


async def test_s4_3_retry_served_from_the_store(gw: Harness, json_logs: CapturedLogs) -> None:
    """On both backends: the first answer ran the bot, the repeat of its messageId did not."""
    first = await gw.send(message_id="m-retry")
    again = await gw.send(message_id="m-retry")
    assert (first.status, again.status) == (200, 200)
    assert await again.read() == await first.read()
    assert len(gw.bot.calls) == 1
    lines = [line_for(json_logs, r.headers["X-Request-Id"]) for r in (first, again)]
    assert [line["retry_served"] for line in lines] == [False, True]
    assert [line["reason"] for line in lines] == [None, None]
    context_id = orjson.loads(await first.read())["message"]["contextId"]
    second_turn = await gw.send(message_id="m-next", context_id=context_id)
    assert line_for(json_logs, second_turn.headers["X-Request-Id"])["retry_served"] is False


async def test_s5_oauth_error_code_and_delegation_refusal(
    dgw_memory: Harness, json_logs: CapturedLogs
) -> None:
    bad_grant = await post_form(
        dgw_memory, "token", {"grant_type": "password", "client_id": dgw_memory.issuer}
    )
    assert bad_grant.status == 400
    code = (await bad_grant.json())["error"]
    assert (
        line_for(json_logs, bad_grant.headers["X-Request-Id"])["reason"] == code == "unsupported_grant_type"
    )
    wrong_client = await post_form(
        dgw_memory,
        "device_authorization",
        {"client_id": "https://someone-else.example", "scope": "orders:read"},
    )
    assert wrong_client.status == 401
    assert line_for(json_logs, wrong_client.headers["X-Request-Id"])["reason"] == "invalid_client"
    refused = await dgw_memory.send(headers={"X-A2A-User-Delegation": "Bearer not-a-token"})
    assert refused.status == 401
    assert refused.headers["WWW-Authenticate"] == 'Bearer realm="a2a", error="invalid_token"'
    assert line_for(json_logs, refused.headers["X-Request-Id"])["reason"] == "invalid_token:malformed"
    metadata = await dgw_memory.client.get(oauth_path(".well-known/oauth-authorization-server"))
    assert line_for(json_logs, metadata.headers["X-Request-Id"])["reason"] is None


async def test_text_format_shows_reason_and_retry(gw_memory: Harness, text_logs: CapturedLogs) -> None:
    await gw_memory.send(message_id="m-1")
    await gw_memory.send(message_id="m-1")
    await gw_memory.send(context_id="no-such-context")
    lines = [line for line in text_logs.text.splitlines() if "pact_gateway.access" in line]
    assert "retry_served=False" in lines[0]
    assert "retry_served=True" in lines[1]
    assert "reason=INVALID_PARAMS" in lines[2]
    assert "retry_served" not in lines[2]


async def test_client_address_is_the_peer_or_what_a_trusted_proxy_says(
    make_gateway: MakeGateway, json_logs: CapturedLogs
) -> None:
    forwarded = {"X-Forwarded-For": "198.51.100.1, 203.0.113.9"}
    plain = await make_gateway()
    untrusted = await plain.client.get("/a2a/acme/.well-known/agent-card.json", headers=forwarded)
    assert line_for(json_logs, untrusted.headers["X-Request-Id"])["client_address"] == "127.0.0.1"

    def behind_ingress(raw: dict[str, Any]) -> None:
        raw["listen"] = {"trusted_proxies": ["127.0.0.0/8"]}

    proxied = await make_gateway(edit=behind_ingress)
    trusted = await proxied.client.get("/a2a/acme/.well-known/agent-card.json", headers=forwarded)
    assert line_for(json_logs, trusted.headers["X-Request-Id"])["client_address"] == "203.0.113.9"


async def test_a_private_proxy_forwarding_to_a_gateway_that_trusts_none_is_warned_of_once(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 28 L3: behind a proxy nobody named in ``listen.trusted_proxies``, every User shares the
    proxy's address and its per-address limits. A private peer sending ``X-Forwarded-For`` is
    that case: said once, naming the setting."""
    card = "/a2a/acme/.well-known/agent-card.json"
    forwarded = {"X-Forwarded-For": "203.0.113.9"}

    def behind_ingress(raw: dict[str, Any]) -> None:
        raw["listen"] = {"trusted_proxies": ["127.0.0.0/8"]}

    plain = await make_gateway()
    proxied = await make_gateway(edit=behind_ingress)
    with caplog.at_level(logging.WARNING, logger="pact_gateway.client_address"):
        assert (await plain.client.get(card)).status == 200  # no header: nothing to say
        assert not [record for record in caplog.records if record.name == "pact_gateway.client_address"]
        for _ in range(3):
            assert (await plain.client.get(card, headers=forwarded)).status == 200
        assert (await proxied.client.get(card, headers=forwarded)).status == 200  # trusted: nothing
    (warning,) = [record for record in caplog.records if record.name == "pact_gateway.client_address"]
    assert warning.levelno == logging.WARNING
    assert "private peer 127.0.0.1" in warning.getMessage()
    assert "listen.trusted_proxies" in warning.getMessage()
    assert "203.0.113.9" not in warning.getMessage()
