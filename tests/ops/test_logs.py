"""Production operations (logs): one JSON access line per request, carrying the response's request
id and a hashed ``sub``; never a token, an Authorization header value or the clear ``sub``;
a provider failure logged once, with no traceback.
"""

from __future__ import annotations

import logging
import time

from gateway.ops.logs import sub_digest
from tests.ops.conftest import CapturedLogs
from tests.support.gateway import AUDIENCE, Harness

CLEAR_SUB = "customer-91f3-clear-sub"


async def test_access_line_is_json_with_the_response_request_id(
    gw_memory: Harness, json_logs: CapturedLogs
) -> None:
    token = gw_memory.token(CLEAR_SUB)
    response = await gw_memory.send(sub=CLEAR_SUB, headers={"Authorization": f"Bearer {token}"})
    assert response.status == 200
    request_id = response.headers["X-Request-Id"]
    (line,) = [r for r in json_logs.access() if r["request_id"] == request_id]
    assert line["level"] == "INFO"
    assert line["method"] == "POST"
    assert line["operation"] == "SendMessage"
    assert line["brand"] == "acme"
    assert line["status"] == 200
    assert line["outcome"] == "ok"
    assert isinstance(line["latency_ms"], float)
    assert line["pa_issuer"] == gw_memory.issuer
    assert line["sub_hash"] == sub_digest(gw_memory.issuer, CLEAR_SUB)
    assert line["auth_failure"] is None
    assert isinstance(line["pid"], int)
    # The bot got the same id (X-Request-Id), so one id follows the turn across both logs.
    assert gw_memory.bot.calls[0].headers["X-Request-Id"] == request_id
    for secret in (token, f"Bearer {token}", CLEAR_SUB):
        assert secret not in json_logs.text


async def test_s3_4_auth_failure_line_has_the_reason_never_the_token(
    gw_memory: Harness, json_logs: CapturedLogs
) -> None:
    expired = gw_memory.key.mint(
        gw_memory.issuer, CLEAR_SUB, AUDIENCE, iat=time.time() - 600, exp=time.time() - 300
    )
    response = await gw_memory.client.post(
        "/a2a/acme/message:send",
        json={},
        headers={"Authorization": f"Bearer {expired}", "X-Request-Id": "req-0123456789"},
    )
    assert response.status == 401
    assert response.headers["X-Request-Id"] == "req-0123456789"
    (line,) = json_logs.access()
    assert line["request_id"] == "req-0123456789"
    assert line["status"] == 401
    assert line["auth_failure"] == "expired"
    assert line["pa_issuer"] is None
    assert line["sub_hash"] is None
    assert expired not in json_logs.text
    assert expired.split(".")[1] not in json_logs.text  # not even the claims segment
    assert CLEAR_SUB not in json_logs.text


async def test_provider_failure_logged_once_without_traceback(
    gw_memory: Harness, json_logs: CapturedLogs
) -> None:
    gw_memory.bot.mode = "status500"
    response = await gw_memory.send()
    assert response.status == 500
    request_id = response.headers["X-Request-Id"]
    mine = [r for r in json_logs.records() if r.get("request_id") == request_id]
    errors = [r for r in mine if r["level"] == "ERROR"]
    assert len(errors) == 1
    assert errors[0]["logger"] == "pact_gateway.turns"
    assert "exc_info" not in errors[0]
    assert "Traceback" not in json_logs.text
    (access,) = [r for r in mine if r["logger"] == "pact_gateway.access"]
    assert access["status"] == 500
    assert access["outcome"] == "error"


async def test_unmatched_route_line(gw_memory: Harness, json_logs: CapturedLogs) -> None:
    response = await gw_memory.client.get("/a2a/acme/nothing-here?token=abc")
    assert response.status == 404
    (line,) = json_logs.access()
    assert (line["operation"], line["brand"], line["status"]) == ("unmatched", "-", 404)
    assert "nothing-here" not in json_logs.text
    assert "token=abc" not in json_logs.text


async def test_text_format_carries_the_same_fields(gw_memory: Harness, text_logs: CapturedLogs) -> None:
    token = gw_memory.token(CLEAR_SUB)
    response = await gw_memory.send(sub=CLEAR_SUB, headers={"Authorization": f"Bearer {token}"})
    (line,) = [line for line in text_logs.text.splitlines() if "pact_gateway.access" in line]
    assert f"request_id={response.headers['X-Request-Id']}" in line
    assert "operation=SendMessage" in line
    assert f"sub_hash={sub_digest(gw_memory.issuer, CLEAR_SUB)}" in line
    assert token not in text_logs.text
    assert CLEAR_SUB not in text_logs.text


def test_anything_shaped_like_a_jwt_is_redacted(json_logs: CapturedLogs) -> None:
    """Second line of defence: a token that reached a log call anyway is masked."""
    token = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLWJ5dGVz"
    logging.getLogger("pact_gateway.test").warning("saw %s", token, extra={"assertion": f"x {token} y"})
    (record,) = json_logs.records()
    assert record["message"] == "saw [redacted]"
    assert record["assertion"] == "x [redacted] y"
    assert token not in json_logs.text


def test_sub_digest_is_per_personal_agent() -> None:
    assert sub_digest("https://a.example", "alice") != sub_digest("https://b.example", "alice")
    assert len(sub_digest("https://a.example", "alice")) == 16
