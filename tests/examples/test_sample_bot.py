"""The sample bot's account actions: what it does with a delegation's scopes and, for a Brand that binds
a cancellation to one order, with its RFC 9396 authorization details (cancels only an order a detail
allows, asks with ``requires_authorization_details`` for any other), over its own HTTP contract."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from examples.sample_bot import ORDER_DETAIL, create_bot_app
from examples.sample_bot.bot import Account, account_answer, detail_allows, order_detail

CANCEL = {"orders:cancel"}


def detail(number: str, *actions: str) -> dict[str, Any]:
    found: dict[str, Any] = {"type": ORDER_DETAIL, "identifier": number}
    if actions:
        found["actions"] = list(actions)
    return found


def test_rfc9396_a_detail_allows_its_order_and_no_other() -> None:
    assert detail_allows([detail("A-10002", "cancel")], "A-10002")
    assert detail_allows([detail("A-10002")], "A-10002")  # without actions: what its type allows
    assert not detail_allows([detail("A-10002", "cancel")], "A-10001")
    assert not detail_allows([detail("A-10002", "hold")], "A-10002")
    assert not detail_allows(
        [{**detail("A-10002", "cancel"), "type": "https://other.example/order"}], "A-10002"
    )
    assert not detail_allows([], "A-10002")


def test_rfc9396_bound_cancellation_names_the_detail_it_used() -> None:
    account = Account()
    answer = account_answer("cancel A-10002", account, frozenset(CANCEL), [detail("A-10002", "cancel")])
    assert answer == {
        "text": "Order A-10002 is cancelled. The refund posts in 3-5 days.",
        "actions": [
            {
                "tool": "cancel_order",
                "args": {"order": "A-10002"},
                "authorization_detail": order_detail("A-10002"),
            }
        ],
        "scopes_used": ["orders:cancel"],
    }
    assert account.cancelled == {"A-10002"}


@pytest.mark.parametrize(
    ("granted", "details"),
    [
        (CANCEL, [detail("A-10001", "cancel")]),  # the scope and another order
        (CANCEL, []),  # the scope alone
        (set(), [detail("A-10002", "cancel")]),  # a detail is a condition of the scope: asked again
    ],
)
def test_rfc9396_an_order_no_detail_allows_is_asked_for_not_cancelled(
    granted: set[str], details: list[dict[str, Any]]
) -> None:
    account = Account()
    answer = account_answer("please cancel a-10002", account, frozenset(granted), details)
    if granted:
        assert answer == {
            "text": "I need your permission to cancel order A-10002.",
            "requires_authorization_details": [order_detail("A-10002")],
        }
    else:
        # The detail allows it but the token lacks the scope: the scope is what is missing.
        assert answer is not None
        assert answer["requires_scopes"] == ["orders:cancel"]
    assert account.cancelled == set()


def test_rfc9396_without_a_delegation_the_order_is_asked_for() -> None:
    answer = account_answer("cancel A-10002", None, frozenset(), [])
    assert answer is not None
    assert answer["requires_authorization_details"] == [order_detail("A-10002")]


def test_a_brand_without_details_cancels_with_the_scope_alone() -> None:
    answer = account_answer("cancel A-10002", Account(), frozenset(CANCEL))
    assert answer is not None
    assert answer["actions"] == [{"tool": "cancel_order", "args": {"order": "A-10002"}}]


@pytest.fixture
async def bot() -> AsyncIterator[TestClient[Any, Any]]:
    client = TestClient(TestServer(create_bot_app(delegating=["acme", "globex"], order_bound=["acme"])))
    await client.start_server()
    yield client
    await client.close()


def turn(brand: str, text: str, delegation: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "brand": brand,
        "conversation_id": "c-1",
        "message_id": "m-1",
        "text": text,
        "user": {"pa": "https://pa.example", "sub": "alice"},
        "new_conversation": False,
        "delegation": delegation,
    }


async def test_rfc9396_over_http_the_bound_brand_asks_then_cancels(bot: TestClient[Any, Any]) -> None:
    delegation: dict[str, Any] = {
        "user": "jane",
        "scopes": ["orders:cancel"],
        "grant_id": "g",
        "authorization_details": [],
    }
    asked = await (await bot.post("/chat", json=turn("acme", "cancel A-10002", delegation))).json()
    assert asked["requires_authorization_details"] == [order_detail("A-10002")]
    assert "actions" not in asked
    delegation["authorization_details"] = [order_detail("A-10002")]
    done = await (await bot.post("/chat", json=turn("acme", "cancel A-10002", delegation))).json()
    assert done["actions"][0]["authorization_detail"] == order_detail("A-10002")
    assert done["message_id"] == "m-1"
    # A Brand without details cancels with the scope alone, as before.
    elsewhere = {**delegation, "user": "john", "authorization_details": []}
    other = await (await bot.post("/chat", json=turn("globex", "cancel A-10002", elsewhere))).json()
    assert other["actions"] == [{"tool": "cancel_order", "args": {"order": "A-10002"}}]
