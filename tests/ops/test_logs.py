"""Production operations (logs): one JSON access line per request, carrying the response's request
id and a hashed ``sub``; never a token, an Authorization header value or the clear ``sub``;
a provider failure logged once, with no traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import io
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import LoggingConfig
from gateway.handlers.state import METRICS
from gateway.ops.logs import (
    ACCESS_LOGGER,
    FIELDS_ATTR,
    GatewayLogHandler,
    SubDigests,
    TextFormatter,
    _sole_json_handler,
    log_fields,
    sub_digest,
)
from tests.ops.conftest import CapturedLogs, _captured
from tests.support.gateway import AUDIENCE, Harness, MakeGateway
from tests.support.pa import FakeJwksServer

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


# The structured fast path (``log_fields``) and the formatter behind every line.

JWS = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLWJ5dGVz"


def test_log_fields_line_has_the_fixed_keys_the_fields_and_a_utc_timestamp(json_logs: CapturedLogs) -> None:
    fields = {"request_id": "req-0123456789", "status": 200, "latency_ms": 1.5, "pa_issuer": None}
    log_fields(logging.getLogger(ACCESS_LOGGER), logging.INFO, "POST SendMessage 200", fields)
    (line,) = json_logs.text.splitlines()
    record = json.loads(line)
    assert list(record) == [
        "level",
        "logger",
        "message",
        "pid",
        "request_id",
        "status",
        "latency_ms",
        "pa_issuer",
        "timestamp",
    ]
    assert (record["level"], record["logger"], record["message"]) == (
        "INFO",
        ACCESS_LOGGER,
        "POST SendMessage 200",
    )
    assert record["pid"] == os.getpid()
    assert (record["status"], record["latency_ms"], record["pa_issuer"]) == (200, 1.5, None)
    stamp = dt.datetime.fromisoformat(record["timestamp"])
    assert stamp.utcoffset() == dt.timedelta(0)
    assert abs(stamp.timestamp() - time.time()) < 60


def test_log_fields_respects_the_level(json_logs: CapturedLogs) -> None:
    log_fields(logging.getLogger(ACCESS_LOGGER), logging.DEBUG, "not at INFO", {"request_id": "r"})
    assert json_logs.text == ""


def test_redaction_covers_structured_fields_and_tracebacks(json_logs: CapturedLogs) -> None:
    log_fields(logging.getLogger(ACCESS_LOGGER), logging.INFO, f"saw {JWS}", {"request_id": f"id-{JWS}"})
    try:
        raise ValueError(f"bad token {JWS}")
    except ValueError:
        logging.getLogger("pact_gateway.test").exception("failed")
    structured, failure = json_logs.records()
    assert structured["message"] == "saw [redacted]"
    assert structured["request_id"] == "id-[redacted]"
    assert "bad token [redacted]" in failure["exc_info"]
    assert JWS not in json_logs.text


def test_values_json_cannot_hold_are_written_as_text(json_logs: CapturedLogs) -> None:
    log = logging.getLogger("pact_gateway.test")
    log.warning("odd values", extra={"path": Path("/etc/gateway.yaml"), "huge": 2**70})
    (record,) = json_logs.records()
    assert record["path"] == "/etc/gateway.yaml"
    assert record["huge"] in (2**70, str(2**70))


async def test_a_token_shaped_request_id_is_echoed_but_never_logged(
    gw_memory: Harness, json_logs: CapturedLogs
) -> None:
    response = await gw_memory.send(headers={**gw_memory.auth(), "X-Request-Id": JWS})
    assert response.status == 200
    assert response.headers["X-Request-Id"] == JWS
    (line,) = json_logs.access()
    assert line["request_id"] == "[redacted]"
    assert JWS not in json_logs.text


async def test_no_access_line_below_info_but_requests_are_still_counted(gw_memory: Harness) -> None:
    with _captured(LoggingConfig(level="WARNING", format="json")) as logs:
        assert (await gw_memory.send()).status == 200
    assert logs.text == ""
    app = gw_memory.client.app
    assert app is not None
    labels = {"brand": "acme", "operation": "SendMessage", "outcome": "ok"}
    assert app[METRICS].registry.get_sample_value("pact_requests_total", labels) == 1


async def test_access_log_off_writes_no_line(make_gateway: MakeGateway, json_logs: CapturedLogs) -> None:
    def access_log_off(raw: dict[str, Any]) -> None:
        raw["logging"] = {"access_log": False}

    gw = await make_gateway(edit=access_log_off)
    assert (await gw.send()).status == 200
    assert json_logs.access() == []


def test_sub_digests_are_cached_and_bounded() -> None:
    digests = SubDigests(size=2)
    assert digests.get("https://a.example", "alice") == sub_digest("https://a.example", "alice")
    assert digests.get("https://a.example", "alice") == sub_digest("https://a.example", "alice")
    assert len(digests) == 1
    digests.get("https://a.example", "bob")
    digests.get("https://b.example", "alice")
    assert len(digests) == 2  # the oldest pair made room
    for issuer, sub in (("https://a.example", "alice"), ("https://b.example", "alice")):
        assert digests.get(issuer, sub) == sub_digest(issuer, sub)
    with pytest.raises(ValueError, match="at least 1"):
        SubDigests(size=0)


# Without a record: the gateway's JSON handler alone writes the access line straight from its fields.


@contextlib.contextmanager
def _only_the_gateway_handler() -> Iterator[None]:
    """Detach every other root handler (pytest's captures) so the record-less path is taken."""
    root = logging.getLogger()
    others = [h for h in root.handlers if not isinstance(h, GatewayLogHandler)]
    for handler in others:
        root.removeHandler(handler)
    try:
        yield
    finally:
        for handler in others:
            root.addHandler(handler)


def _access_line(logs: CapturedLogs, fields: dict[str, Any], *, sole: bool) -> dict[str, Any]:
    logger = logging.getLogger(ACCESS_LOGGER)
    before = len(logs.text)
    with _only_the_gateway_handler() if sole else contextlib.nullcontext():
        assert (_sole_json_handler(logger, logging.INFO) is not None) is sole
        log_fields(logger, logging.INFO, "POST SendMessage 200", fields)
    line = logs.text[before:]
    assert line.endswith("\n")
    assert line.count("\n") == 1
    record: dict[str, Any] = json.loads(line)
    return record


def test_the_record_less_line_is_the_record_line(json_logs: CapturedLogs) -> None:
    fields = {
        "request_id": f"id-{JWS}",
        "status": 200,
        "latency_ms": 1.5,
        "pa_issuer": None,
        "path": Path("/etc/gateway.yaml"),
        "pid": "a field wins over the fixed key, in the fixed key's place",
    }
    direct = _access_line(json_logs, fields, sole=True)
    through_logging = _access_line(json_logs, fields, sole=False)
    assert list(direct) == list(through_logging)
    assert {k: v for k, v in direct.items() if k != "timestamp"} == {
        k: v for k, v in through_logging.items() if k != "timestamp"
    }
    assert direct["request_id"] == "id-[redacted]"
    assert direct["path"] == "/etc/gateway.yaml"
    assert list(direct)[:4] == ["level", "logger", "message", "pid"]
    stamp = dt.datetime.fromisoformat(direct["timestamp"])
    assert stamp.utcoffset() == dt.timedelta(0)
    assert abs(stamp.timestamp() - time.time()) < 60
    assert JWS not in json_logs.text


def test_the_record_less_path_writes_the_process_id(json_logs: CapturedLogs) -> None:
    assert _access_line(json_logs, {"request_id": "r"}, sole=True)["pid"] == os.getpid()


def test_anything_else_listening_gets_an_ordinary_record(json_logs: CapturedLogs) -> None:
    logger = logging.getLogger(ACCESS_LOGGER)
    (gateway_handler,) = [h for h in logging.getLogger().handlers if isinstance(h, GatewayLogHandler)]
    with _only_the_gateway_handler():
        assert _sole_json_handler(logger, logging.INFO) is gateway_handler
        gateway_handler.setLevel(logging.WARNING)
        try:
            assert _sole_json_handler(logger, logging.INFO) is None  # the handler would drop it
        finally:
            gateway_handler.setLevel(logging.NOTSET)
        second = logging.NullHandler()
        logger.addHandler(second)
        try:
            assert _sole_json_handler(logger, logging.INFO) is None
        finally:
            logger.removeHandler(second)
        for owner in (logger, gateway_handler):
            owner.addFilter(lambda record: True)
            try:
                assert _sole_json_handler(logger, logging.INFO) is None
            finally:
                owner.filters.clear()
        formatter = gateway_handler.formatter
        gateway_handler.setFormatter(TextFormatter())
        try:
            assert _sole_json_handler(logger, logging.INFO) is None
        finally:
            gateway_handler.setFormatter(formatter)


class _Unwritable(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("disk full")


def test_a_failed_record_less_write_is_reported_like_any_logging_error(
    json_logs: CapturedLogs, monkeypatch: pytest.MonkeyPatch
) -> None:
    (gateway_handler,) = [h for h in logging.getLogger().handlers if isinstance(h, GatewayLogHandler)]
    failed: list[logging.LogRecord] = []
    monkeypatch.setattr(gateway_handler, "stream", _Unwritable())
    monkeypatch.setattr(gateway_handler, "handleError", failed.append)
    with _only_the_gateway_handler():
        log_fields(logging.getLogger(ACCESS_LOGGER), logging.INFO, "POST SendMessage 200", {"status": 200})
    (record,) = failed
    assert (record.name, record.getMessage()) == (ACCESS_LOGGER, "POST SendMessage 200")
    assert record.__dict__[FIELDS_ATTR] == {"status": 200}


class _CountingWrites(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


async def test_access_lines_of_one_loop_pass_go_out_together_in_order(
    json_logs: CapturedLogs, monkeypatch: pytest.MonkeyPatch
) -> None:
    (gateway_handler,) = [h for h in logging.getLogger().handlers if isinstance(h, GatewayLogHandler)]
    stream = _CountingWrites()
    monkeypatch.setattr(gateway_handler, "stream", stream)
    access = logging.getLogger(ACCESS_LOGGER)
    with _only_the_gateway_handler():
        for status in (200, 404, 429):
            log_fields(access, logging.INFO, f"POST SendMessage {status}", {"status": status})
        assert stream.getvalue() == ""  # still this pass
        await asyncio.sleep(0)
    assert [json.loads(line)["status"] for line in stream.getvalue().splitlines()] == [200, 404, 429]
    assert stream.writes == 1


async def test_an_ordinary_record_goes_out_after_the_access_lines_logged_before_it(
    json_logs: CapturedLogs,
) -> None:
    with _only_the_gateway_handler():
        log_fields(logging.getLogger(ACCESS_LOGGER), logging.INFO, "POST SendMessage 200", {"status": 200})
        logging.getLogger("pact_gateway.turns").error("bot call failed")
    assert [record["message"] for record in json_logs.records()] == [
        "POST SendMessage 200",
        "bot call failed",
    ]


async def test_a_queued_access_line_is_written_when_the_handler_is_flushed(json_logs: CapturedLogs) -> None:
    (gateway_handler,) = [h for h in logging.getLogger().handlers if isinstance(h, GatewayLogHandler)]
    with _only_the_gateway_handler():
        log_fields(logging.getLogger(ACCESS_LOGGER), logging.INFO, "POST SendMessage 200", {"status": 200})
        assert json_logs.text == ""
        gateway_handler.flush()  # what logging.shutdown() does at exit, when the loop never gets back
    assert json_logs.access()[0]["status"] == 200


# One record, one line, whatever a caller put in it (issue 12 row 11). Under the open policy an
# issuer is anyone's string; here one is registered, so the token verifies and the issuer reaches
# the access line's ``pa_issuer``.

FORGING_ISSUER = (
    'https://pa.example/\r\n2030-01-01 00:00:00,000 INFO pact_gateway.access forged=1 "quoted" '
    "\x1b[31mred\x1b[0m\u2028end"
)
_RECORD_START = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \S+ ")


async def _turn_of_the_forging_issuer(make_gateway: MakeGateway, jwks_uri: str) -> None:
    def register(raw: dict[str, Any]) -> None:
        raw["personal_agents"]["registered"].append({"issuer": FORGING_ISSUER, "jwks_uri": jwks_uri})

    gw = await make_gateway(edit=register)
    assert (await gw.send(issuer=FORGING_ISSUER)).status == 200


async def test_text_format_escapes_every_field_so_an_issuer_cannot_forge_lines(
    make_gateway: MakeGateway, jwks_server: FakeJwksServer, text_logs: CapturedLogs
) -> None:
    await _turn_of_the_forging_issuer(make_gateway, jwks_server.jwks_uri)
    lines = text_logs.text.split("\n")
    assert lines[-1] == ""
    for line in lines[:-1]:
        assert _RECORD_START.match(line), line
    for raw in ("\r", "\x1b", "\u2028"):
        assert raw not in text_logs.text
    (access,) = [line for line in lines if " pact_gateway.access " in line]
    escaped = (
        r'"https://pa.example/\r\n2030-01-01 00:00:00,000 INFO pact_gateway.access forged=1 \"quoted\" '
        r'\x1b[31mred\x1b[0m\u2028end"'
    )
    assert f"pa_issuer={escaped}" in access


async def test_json_format_keeps_such_an_issuer_inside_one_line(
    make_gateway: MakeGateway, jwks_server: FakeJwksServer, json_logs: CapturedLogs
) -> None:
    await _turn_of_the_forging_issuer(make_gateway, jwks_server.jwks_uri)
    assert "\u2028" not in json_logs.text  # written \u2028: some line readers split on the raw one
    records = [json.loads(line) for line in json_logs.text.split("\n") if line]
    (access,) = [record for record in records if record["logger"] == ACCESS_LOGGER]
    assert access["pa_issuer"] == FORGING_ISSUER
    assert json_logs.records() == records


def test_text_format_escapes_the_message_and_indents_the_traceback(text_logs: CapturedLogs) -> None:
    forged = "\n2030-01-01 00:00:00,000 INFO pact_gateway.access forged=1"
    try:
        raise ValueError(f"bad input{forged}")
    except ValueError:
        logging.getLogger("pact_gateway.test").exception("failed on %s", f"x{forged}", extra={"k": "a b"})
    head, *trace = text_logs.text.rstrip("\n").split("\n")
    assert _RECORD_START.match(head)
    assert head.endswith(r'failed on x\n2030-01-01 00:00:00,000 INFO pact_gateway.access forged=1 k="a b"')
    assert trace[0] == "    Traceback (most recent call last):"
    assert all(line.startswith("    ") for line in trace)
    assert trace[-1] == "    2030-01-01 00:00:00,000 INFO pact_gateway.access forged=1"
