"""§4.1 request validation and §4.2 reply shape, as pure functions."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.protocol.errors import A2AError, Reason
from gateway.protocol.messages import parse_send_message, render_reply


def body(**message: Any) -> bytes:
    base: dict[str, Any] = {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    base.update(message)
    return orjson.dumps({"message": {k: v for k, v in base.items() if v is not ...}})


def reason_of(raw: bytes) -> tuple[Reason, str]:
    with pytest.raises(A2AError) as caught:
        parse_send_message(raw)
    return caught.value.reason, caught.value.message


def test_s4_1_valid_message() -> None:
    parsed = parse_send_message(body(contextId="c-1", parts=[{"text": "a"}, {"text": " "}, {"text": "b"}]))
    assert (parsed.message_id, parsed.context_id, parsed.text) == ("m-1", "c-1", "a\nb")


def test_s4_1_configuration_and_metadata_are_ignored() -> None:
    raw = orjson.dumps(
        {
            "message": {
                "messageId": "m",
                "role": "ROLE_USER",
                "parts": [{"text": "x"}],
                "metadata": {"a": 1},
            },
            "configuration": {"blocking": True},
            "metadata": {"b": 2},
        }
    )
    assert parse_send_message(raw).text == "x"


@pytest.mark.parametrize(
    ("raw", "reason", "message"),
    [
        (b"{not json", Reason.INVALID_PARAMS, "Invalid JSON request body"),
        (b"[]", Reason.INVALID_PARAMS, "Request must be an object with a message object"),
        (b'{"message": "hi"}', Reason.INVALID_PARAMS, "Request must be an object with a message object"),
        (body(messageId=...), Reason.INVALID_PARAMS, "message.messageId must be a non-empty string"),
        (body(messageId=""), Reason.INVALID_PARAMS, "message.messageId must be a non-empty string"),
        (body(messageId=7), Reason.INVALID_PARAMS, "message.messageId must be a non-empty string"),
        (body(role="ROLE_AGENT"), Reason.INVALID_PARAMS, "Message role must be ROLE_USER"),
        (body(role=...), Reason.INVALID_PARAMS, "Message role must be ROLE_USER"),
        (body(parts=[{"text": "  \n"}]), Reason.INVALID_PARAMS, "Message text must not be blank"),
        (body(parts=[]), Reason.INVALID_PARAMS, "message.parts must be a non-empty array"),
        (body(parts=...), Reason.INVALID_PARAMS, "message.parts must be a non-empty array"),
        (body(parts=[{"text": 3}]), Reason.INVALID_PARAMS, "message.parts[].text must be a string"),
        (
            body(parts=[{"data": {"a": 1}}]),
            Reason.CONTENT_TYPE_NOT_SUPPORTED,
            "Only text parts are supported",
        ),
        (
            body(parts=[{"text": "hi"}, {"url": "https://x/y.png", "mediaType": "image/png"}]),
            Reason.CONTENT_TYPE_NOT_SUPPORTED,
            "Only text parts are supported",
        ),
        (body(parts=[{"raw": "AAAA"}]), Reason.CONTENT_TYPE_NOT_SUPPORTED, "Only text parts are supported"),
        (body(taskId="t-1"), Reason.TASK_NOT_FOUND, "Task not found"),
        (body(contextId=""), Reason.INVALID_PARAMS, "message.contextId must be a non-empty string"),
        (body(contextId=12), Reason.INVALID_PARAMS, "message.contextId must be a non-empty string"),
    ],
)
def test_s4_1_invalid_requests(raw: bytes, reason: Reason, message: str) -> None:
    assert reason_of(raw) == (reason, message)


@given(st.binary(max_size=200))
def test_s6_arbitrary_bytes_never_escape_as_other_exceptions(raw: bytes) -> None:
    allowed = {Reason.INVALID_PARAMS, Reason.CONTENT_TYPE_NOT_SUPPORTED, Reason.TASK_NOT_FOUND}
    try:
        parse_send_message(raw)
    except A2AError as error:
        reason = error.reason
    else:
        return
    assert reason in allowed


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
    )
)
def test_s6_arbitrary_json_message_is_valid_or_a2a_error(message: Any) -> None:
    with contextlib.suppress(A2AError):
        parse_send_message(orjson.dumps({"message": message}))


def test_s4_2_reply_shape() -> None:
    reply = orjson.loads(render_reply("r-1", "c-1", "Hello"))
    assert reply == {
        "message": {
            "messageId": "r-1",
            "contextId": "c-1",
            "role": "ROLE_AGENT",
            "parts": [{"text": "Hello"}],
        }
    }
