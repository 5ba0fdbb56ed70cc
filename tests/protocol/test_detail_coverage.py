"""RFC 9396 at the turn: which granted detail covers a bot's bound action, what is left to ask for,
and the step-up request that asks for it (scopes in card order, details checked as a request)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config import AuthorizationDetailType, DelegationConfig, LoginConfig
from gateway.protocol.authorization_details import InvalidAuthorizationDetails, canonical_detail
from gateway.protocol.detail_coverage import Coverage, coverage, step_up_request

ORDER = "https://acme.example/rar/order"
RETURN = "https://acme.example/rar/return"
ORDER_TYPE = AuthorizationDetailType(
    type=ORDER,
    scopes=("orders:cancel",),
    actions=("cancel", "hold"),
    fields={
        "type": "object",
        "properties": {"identifier": {"type": "string", "pattern": "^A-[0-9]{5}$"}},
        "required": ["identifier"],
    },
    consent="Only order {identifier}",
)
RETURN_TYPE = AuthorizationDetailType(
    type=RETURN,
    scopes=("returns:create", "orders:cancel"),
    actions=("return",),
    fields={"type": "object", "properties": {"identifier": {"type": "string"}}},
    consent="Return {identifier}",
)
TYPES = {ORDER: ORDER_TYPE, RETURN: RETURN_TYPE}


def order(number: str, *actions: str) -> str:
    detail: dict[str, Any] = {"type": ORDER, "identifier": number}
    if actions:
        detail["actions"] = list(actions)
    return canonical_detail(detail)


def delegation(**overrides: Any) -> DelegationConfig:
    fields: dict[str, Any] = {
        "scopes": {"orders:read": "Read", "returns:create": "Return", "orders:cancel": "Cancel"},
        "login": LoginConfig(url="https://login.example/pact", issuer="https://login.example"),
        "authorization_details": TYPES,
        **overrides,
    }
    return DelegationConfig(**fields)


def test_rfc9396_an_action_covered_by_a_granted_detail_names_it() -> None:
    granted = (order("A-10001", "cancel"), order("A-10002", "cancel", "hold"))
    found = coverage(granted, (None, order("A-10002", "hold")), (), TYPES)
    assert found == Coverage((None, granted[1]), ())


def test_rfc9396_a_granted_detail_without_actions_allows_its_types_actions() -> None:
    granted = (order("A-10002"),)
    assert coverage(granted, (order("A-10002", "hold"),), (), TYPES).covering == (granted[0],)


@pytest.mark.parametrize(
    "used",
    [
        order("A-10003", "cancel"),  # another resource
        order("A-10002", "cancel", "hold"),  # an action the granted detail does not allow
    ],
)
def test_rfc9396_an_action_no_granted_detail_covers_is_needed(used: str) -> None:
    granted = (order("A-10002", "cancel"),)
    assert coverage(granted, (used,), (), TYPES) == Coverage((None,), (used,))


def test_rfc9396_no_details_granted_covers_nothing() -> None:
    used = order("A-10002", "cancel")
    assert coverage((), (used, used), (), TYPES) == Coverage((None, None), (used,))


def test_rfc9396_a_granted_detail_of_a_type_no_longer_configured_covers_nothing() -> None:
    granted = (order("A-10002", "cancel"),)
    # The bot's detail is then of an unknown type too: not one its Brand accepts.
    with pytest.raises(InvalidAuthorizationDetails):
        coverage(granted, (order("A-10002", "cancel"),), (), {RETURN: RETURN_TYPE})
    assert coverage(granted, (), (order("A-10002"),), {RETURN: RETURN_TYPE}).needed == (order("A-10002"),)


@pytest.mark.parametrize(
    "used",
    [
        {"type": "https://acme.example/rar/unknown", "identifier": "A-10002", "actions": ["cancel"]},
        {"type": ORDER, "identifier": "A-1", "actions": ["cancel"]},  # the schema's pattern
        {"type": ORDER, "identifier": "A-10002", "actions": ["refund"]},  # not an action of the type
        {"type": ORDER, "identifier": "A-10002", "actions": ["cancel"], "note": "x"},  # unknown field
        {"type": ORDER, "identifier": "A-10002"},  # a bound action says what it did
    ],
)
def test_rfc9396_a_bound_detail_its_brand_does_not_accept_is_the_bots_fault(used: dict[str, Any]) -> None:
    with pytest.raises(InvalidAuthorizationDetails):
        coverage((order("A-10002", "cancel"),), (canonical_detail(used),), (), TYPES)


def test_rfc9396_required_details_are_needed_unless_covered_each_once() -> None:
    granted = (order("A-10001", "cancel"),)
    used = order("A-10002", "cancel")
    required = (order("A-10001", "cancel"), order("A-10002", "cancel"), order("A-10004"))
    assert coverage(granted, (used,), required, TYPES) == Coverage((None,), (used, order("A-10004")))
    assert coverage(granted, (), required[:1], TYPES) == Coverage((), ())


def test_rfc9396_step_up_asks_the_missing_scopes_and_each_details_scope_in_card_order() -> None:
    needed = (canonical_detail({"type": RETURN, "identifier": "R-1"}), order("A-10002", "cancel"))
    scopes, details = step_up_request(("orders:read",), needed, delegation())
    # RETURN's first scope on the card is returns:create (its own list says returns:create first too).
    assert scopes == ("orders:read", "returns:create", "orders:cancel")
    assert details == needed
    assert step_up_request(("orders:cancel",), (), delegation()) == (("orders:cancel",), ())


def test_rfc9396_a_detail_the_person_could_not_approve_is_refused() -> None:
    unknown = canonical_detail({"type": "https://acme.example/rar/unknown", "identifier": "A-10002"})
    with pytest.raises(InvalidAuthorizationDetails):
        step_up_request((), (unknown,), delegation())
    invalid = canonical_detail({"type": ORDER, "identifier": "not an order"})
    with pytest.raises(InvalidAuthorizationDetails):
        step_up_request((), (invalid,), delegation())
    many = tuple(order(f"A-1000{n}", "cancel") for n in range(3))
    with pytest.raises(InvalidAuthorizationDetails):
        step_up_request((), many, delegation(max_authorization_details=2))
