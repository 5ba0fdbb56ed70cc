"""The native bot contract's answers: the plain reply, and the §5 members a bot acting for a User adds."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import rfc8785

from gateway.upstream.base import Action, BotReply, UpstreamError
from gateway.upstream.http_json import MAX_LIST_ITEMS, parse_bot_reply


def parse(doc: Any) -> BotReply:
    return parse_bot_reply(orjson.dumps(doc))


def test_plain_reply_has_no_authority() -> None:
    assert parse({"text": "Hi", "end": True}) == BotReply("Hi", True, (), (), ())
    assert parse({"text": "Hi", "requires_scopes": None, "actions": None, "scopes_used": None}) == BotReply(
        "Hi"
    )


def test_s5_reply_members_are_parsed_in_order_each_scope_once() -> None:
    reply = parse(
        {
            "text": "Cancelled.",
            "requires_scopes": ["orders:cancel"],
            "actions": [
                {"tool": "lookup_orders"},
                {"tool": "cancel_order", "args": {"order": "A-1", "why": 1.0}},
            ],
            "scopes_used": ["orders:cancel", "orders:read", "orders:cancel"],
        }
    )
    assert reply.requires_scopes == ("orders:cancel",)
    assert reply.scopes_used == ("orders:cancel", "orders:read")
    assert reply.actions == (
        Action("lookup_orders"),
        Action("cancel_order", rfc8785.dumps({"why": 1, "order": "A-1"})),
    )
    assert reply.actions[1].canonical_args == b'{"order":"A-1","why":1}'


def test_null_args_are_no_args() -> None:
    assert parse({"text": "x", "actions": [{"tool": "t", "args": None}]}).actions == (Action("t"),)


@pytest.mark.parametrize(
    "extra",
    [
        {"requires_scopes": "orders:read"},
        {"requires_scopes": [""]},
        {"scopes_used": ['orders"read']},
        {"scopes_used": ["x" * 129]},
        {"actions": [{"tool": ""}]},
        {"actions": [{"tool": 3}]},
        {"actions": ["lookup_orders"]},
        {"actions": [{"tool": "t", "argz": {}}]},
        {"actions": [{"tool": "t", "args": [2**53]}]},
        {"actions": [{"tool": "t"}] * (MAX_LIST_ITEMS + 1)},
    ],
)
def test_bad_s5_members_are_a_bad_body(extra: dict[str, Any]) -> None:
    with pytest.raises(UpstreamError) as failure:
        parse({"text": "x", **extra})
    assert failure.value.reason == "bad_body"
