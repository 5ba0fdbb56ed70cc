"""W3C Trace Context without OpenTelemetry: a caller's ``traceparent`` is checked strictly, passed on to
the bot as the parent of its span (same trace id, the gateway's own span id, the flags kept), and
its trace id is on the access line and on every record logged while the request runs. An invalid
header is ignored and a new trace started.
"""

from __future__ import annotations

import logging
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from gateway.ops.tracing import (
    TraceContext,
    current_trace,
    incoming_trace,
    parse_traceparent,
    parse_tracestate,
    trace_headers,
)
from tests.ops.conftest import CapturedLogs
from tests.support.gateway import Harness

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{PARENT_ID}-01"
TRACEPARENT = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")


# The header itself: the cases of the W3C Trace Context test suite, and some of our own.


def test_a_valid_traceparent_names_its_parent() -> None:
    assert parse_traceparent(VALID) == TraceContext(TRACE_ID, PARENT_ID, "01")
    assert parse_traceparent(f" \t{VALID} ") == TraceContext(TRACE_ID, PARENT_ID, "01")  # OWS around
    assert parse_traceparent(f"00-{TRACE_ID}-{PARENT_ID}-00") == TraceContext(TRACE_ID, PARENT_ID, "00")


@pytest.mark.parametrize(
    "value",
    [
        "",
        "00",
        VALID.upper(),
        f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",
        f"00-{TRACE_ID}-{PARENT_ID.upper()}-01",
        f"00-{TRACE_ID}-{PARENT_ID}-0A",
        f"00-{'0' * 32}-{PARENT_ID}-01",
        f"00-{TRACE_ID}-{'0' * 16}-01",
        f"ff-{TRACE_ID}-{PARENT_ID}-01",
        f"0-{TRACE_ID}-{PARENT_ID}-01",
        f"00-{TRACE_ID}-{PARENT_ID}-01-",
        f"00-{TRACE_ID}-{PARENT_ID}-01-what-the-future-will-be-like",
        f"00-{TRACE_ID}-{PARENT_ID}-011",
        f"00-{TRACE_ID[:-1]}-{PARENT_ID}-01",
        f"00-{TRACE_ID}0-{PARENT_ID}-01",
        f"00-{TRACE_ID}-{PARENT_ID}-0x",
        f"00-{TRACE_ID}-{PARENT_ID}\t-01",
        f"00_{TRACE_ID}_{PARENT_ID}_01",
        f"cc-{TRACE_ID}-{PARENT_ID}-01x",
        f"cc-{TRACE_ID}-{PARENT_ID}",
        f"00-{TRACE_ID}-{PARENT_ID}-.1",
        f"00-{TRACE_ID[:-1]}g-{PARENT_ID}-01",
    ],
)
def test_an_invalid_traceparent_names_no_parent(value: str) -> None:
    assert parse_traceparent(value) is None


def test_a_future_version_is_read_as_version_00() -> None:
    """Its version-00 fields count, then either the end or a dash; what is passed on is version 00."""
    assert parse_traceparent(f"cc-{TRACE_ID}-{PARENT_ID}-01") == TraceContext(TRACE_ID, PARENT_ID, "01")
    future = parse_traceparent(f"cc-{TRACE_ID}-{PARENT_ID}-01-what-the-future-will-be-like")
    assert future == TraceContext(TRACE_ID, PARENT_ID, "01")
    assert future.traceparent == VALID


def test_only_the_known_flags_are_passed_on() -> None:
    """``sampled`` and (Level 2) ``random`` are kept; reserved bits are sent as zero."""
    assert parse_traceparent(f"00-{TRACE_ID}-{PARENT_ID}-ff") == TraceContext(TRACE_ID, PARENT_ID, "03")
    assert parse_traceparent(f"00-{TRACE_ID}-{PARENT_ID}-02") == TraceContext(TRACE_ID, PARENT_ID, "02")
    assert parse_traceparent(f"00-{TRACE_ID}-{PARENT_ID}-08") == TraceContext(TRACE_ID, PARENT_ID, "00")


@given(st.text(max_size=80))
def test_any_text_is_a_valid_parent_or_none(value: str) -> None:
    parsed = parse_traceparent(value)
    if parsed is not None:
        assert TRACEPARENT.fullmatch(parsed.traceparent)
        assert parse_traceparent(parsed.traceparent) == parsed


def headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


def test_two_traceparent_headers_are_invalid_together() -> None:
    assert incoming_trace(headers(("traceparent", VALID), ("traceparent", VALID))) is None
    assert incoming_trace(headers(("Traceparent", VALID))) == TraceContext(TRACE_ID, PARENT_ID, "01")


def test_tracestate_is_carried_only_with_a_valid_traceparent() -> None:
    state = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    assert incoming_trace(headers(("traceparent", VALID), ("tracestate", state))) == TraceContext(
        TRACE_ID, PARENT_ID, "01", state
    )
    assert incoming_trace(headers(("traceparent", "00-bad"), ("tracestate", state))) is None


def test_tracestate_members_are_joined_and_checked() -> None:
    assert parse_tracestate(["rojo=00f067aa0ba902b7", " congo=t61rcWkgMzE ,, "]) == (
        "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
    )
    assert parse_tracestate(["tenant1@vendor=v", "a*b/c_d-e=x y"]) == "tenant1@vendor=v,a*b/c_d-e=x y"
    assert parse_tracestate([""]) is None
    for invalid in ("Rojo=1", "rojo=1,rojo=2", "rojo", "rojo=", "rojo=a,b", "rojo=\u00e9", "=v", "rojo=a=b"):
        assert parse_tracestate([invalid]) is None, invalid
    thirty_two = ",".join(f"k{index}=v" for index in range(32))
    assert parse_tracestate([thirty_two]) == thirty_two
    assert parse_tracestate([f"{thirty_two},k32=v"]) is None


def test_a_long_tracestate_loses_long_members_first_then_from_the_end() -> None:
    long = "long=" + "x" * 200
    members = [f"k{index:02}=" + "v" * 40 for index in range(12)]  # 12 x 44 characters
    kept = parse_tracestate([",".join([members[0], long, *members[1:]])])
    assert kept is not None
    assert len(kept) <= 512
    assert "long=" not in kept
    assert kept.split(",") == members[: len(kept.split(","))]
    assert len(kept.split(",")) == 11


def test_trace_headers_for_an_adapter() -> None:
    assert trace_headers(None) == {}
    assert trace_headers(TraceContext(TRACE_ID, PARENT_ID, "01")) == {"traceparent": VALID}
    assert trace_headers(TraceContext(TRACE_ID, PARENT_ID, "01", "a=b")) == {
        "traceparent": VALID,
        "tracestate": "a=b",
    }


# Through the gateway.


async def test_the_bot_is_called_as_a_child_of_the_callers_trace(
    gw_memory: Harness, json_logs: CapturedLogs
) -> None:
    response = await gw_memory.send(headers={"traceparent": VALID, "tracestate": "congo=t61rcWkgMzE"})
    assert response.status == 200
    (call,) = gw_memory.bot.calls
    sent = parse_traceparent(call.headers["traceparent"])
    assert sent is not None
    assert (sent.trace_id, sent.flags) == (TRACE_ID, "01")
    assert sent.span_id != PARENT_ID  # the gateway's own span, under the caller's
    assert call.headers["tracestate"] == "congo=t61rcWkgMzE"
    (line,) = json_logs.access()
    assert line["trace_id"] == TRACE_ID
    assert line["request_id"] == call.headers["X-Request-Id"] == response.headers["X-Request-Id"]


@pytest.mark.parametrize(
    "sent",
    [
        [("traceparent", f"00-{TRACE_ID}-{'0' * 16}-01")],
        [("traceparent", VALID.upper())],
        [("traceparent", VALID), ("traceparent", f"00-{TRACE_ID}-{'1' * 16}-01")],
        [("traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01-extra"), ("tracestate", "congo=1")],
    ],
)
async def test_an_invalid_traceparent_starts_a_new_trace(
    gw_memory: Harness, json_logs: CapturedLogs, sent: list[tuple[str, str]]
) -> None:
    message = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "Hi"}]}
    response = await gw_memory.client.post(
        "/a2a/acme/message:send",
        json={"message": message},
        headers=CIMultiDict([*gw_memory.auth().items(), *sent]),
    )
    assert response.status == 200
    (call,) = gw_memory.bot.calls
    started = parse_traceparent(call.headers["traceparent"])
    assert started is not None
    assert started.trace_id != TRACE_ID
    assert started.flags == "00"  # a new trace the gateway records nowhere
    assert "tracestate" not in call.headers
    assert json_logs.access()[0]["trace_id"] == started.trace_id


async def test_every_request_has_a_trace_id_and_no_two_share_one(
    gw_memory: Harness, json_logs: CapturedLogs
) -> None:
    await gw_memory.send()
    await gw_memory.client.get("/a2a/acme/.well-known/agent-card.json")
    await gw_memory.client.get("/nothing-here")
    trace_ids = [line["trace_id"] for line in json_logs.access()]
    assert len(trace_ids) == 3
    assert len(set(trace_ids)) == 3
    assert all(re.fullmatch("[0-9a-f]{32}", trace_id) for trace_id in trace_ids)
    assert gw_memory.bot.calls[0].headers["traceparent"].split("-")[1] == trace_ids[0]


async def test_records_logged_during_the_request_carry_its_trace_id(
    gw_memory: Harness, json_logs: CapturedLogs
) -> None:
    gw_memory.bot.mode = "status500"
    response = await gw_memory.send(headers={"traceparent": VALID})
    assert response.status == 500
    records = [r for r in json_logs.records() if r.get("request_id") == response.headers["X-Request-Id"]]
    assert {record["logger"] for record in records} == {"pact_gateway.turns", "pact_gateway.access"}
    assert all(record["trace_id"] == TRACE_ID for record in records)
    assert current_trace() is None  # nothing leaks out of the request
    logging.getLogger("pact_gateway.test").warning("outside any request")
    assert "trace_id" not in json_logs.records()[-1]


async def test_text_logs_carry_the_trace_id(gw_memory: Harness, text_logs: CapturedLogs) -> None:
    gw_memory.bot.mode = "status500"
    await gw_memory.send(headers={"traceparent": VALID})
    lines = [line for line in text_logs.text.splitlines() if "pact_gateway." in line]
    assert len(lines) == 2
    assert all(f"trace_id={TRACE_ID}" in line for line in lines)
