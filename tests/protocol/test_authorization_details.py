"""RFC 9396 authorization details: the request's refusals (§5), canonical form, coverage, consent text."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.config import AuthorizationDetailType
from gateway.protocol.authorization_details import (
    InvalidAuthorizationDetails,
    canonical_detail,
    check_bound_detail,
    consent_sentence,
    covering,
    covers,
    details_json,
    details_of_scopes,
    join_details,
    parse_authorization_details,
    scope_of,
    split_details,
)

ORDER = "https://acme.example/rar/order"
FLIGHT = "https://air.example/rar/rebooking"
TYPES = {
    ORDER: AuthorizationDetailType(
        type=ORDER,
        scopes=("orders:cancel",),
        actions=("cancel",),
        fields={
            "type": "object",
            "properties": {"identifier": {"type": "string", "pattern": "^A-[0-9]{5}$"}},
            "required": ["identifier"],
        },
        consent="Only order {identifier}",
    ),
    FLIGHT: AuthorizationDetailType(
        type=FLIGHT,
        scopes=("flights:rebook", "orders:cancel"),
        actions=("rebook", "cancel"),
        fields={
            "type": "object",
            "properties": {
                "identifier": {"type": "string"},
                "target_flight": {"type": "string"},
                "notes": {"type": "array", "items": {}},
            },
            "required": ["identifier"],
        },
        consent="Only reservation {identifier}, to flight {target_flight} ({actions})",
    ),
}
SCOPES = ("orders:read", "orders:cancel", "flights:rebook")


def parse(
    value: Any, *, scopes: tuple[str, ...] = SCOPES, limits: dict[str, int] | None = None
) -> tuple[str, ...]:
    raw = value if isinstance(value, str) else orjson.dumps(value).decode()
    bounds = {"max_count": 8, "max_bytes": 4096, "max_depth": 8, **(limits or {})}
    return parse_authorization_details(raw, types=TYPES, scopes=scopes, **bounds)


def order(identifier: str = "A-10001", **more: Any) -> dict[str, Any]:
    return {"type": ORDER, "identifier": identifier, **more}


def test_rfc9396_s2_details_come_back_canonical_in_request_order_each_once() -> None:
    second = {"identifier": "K7PQ2M", "type": FLIGHT, "actions": ["rebook"], "target_flight": "SK 318"}
    details = parse([order(), second, order()])
    assert details == (
        '{"identifier":"A-10001","type":"https://acme.example/rar/order"}',
        '{"actions":["rebook"],"identifier":"K7PQ2M","target_flight":"SK 318",'
        '"type":"https://air.example/rar/rebooking"}',
    )
    assert orjson.loads(orjson.dumps(details_json(details))) == [order(), second]
    assert split_details(join_details(details)) == details
    assert split_details("") == ()


@pytest.mark.parametrize(
    ("value", "limits", "why"),
    [
        ("not json", {}, "not JSON"),
        ({"type": ORDER}, {}, "not a JSON array"),
        ([], {}, "empty"),
        (["text"], {}, "JSON object"),
        ([{"type": "https://other.example/x", "identifier": "A-10001"}], {}, "does not support"),
        ([{"identifier": "A-10001"}], {}, "does not support"),
        ([order(extra=1)], {}, "field"),
        ([{"type": ORDER}], {}, "required"),
        ([order("B-1")], {}, "field"),
        ([order(actions=["refund"])], {}, "action"),
        ([order(actions=[])], {}, "action"),
        ([order(actions=["cancel", "cancel"])], {}, "action"),
        ([order(actions="cancel")], {}, "action"),
        ([order(), order("A-10002")], {"max_count": 1}, "more details"),
        ([order()], {"max_bytes": 20}, "larger"),
        ([{"type": FLIGHT, "identifier": "K", "notes": [[[["deep"]]]]}], {"max_depth": 3}, "deeper"),
        ([{"type": ORDER, "identifier": "A-10001", "n": 2**60}], {}, "field"),
    ],
)
def test_rfc9396_s5_invalid_authorization_details(value: Any, limits: dict[str, int], why: str) -> None:
    with pytest.raises(InvalidAuthorizationDetails) as refused:
        parse(value, limits=limits)
    assert why in refused.value.reason
    assert "A-10001" not in refused.value.reason  # never echoes the client's input


def test_rfc9396_a_detail_whose_scope_is_not_in_the_same_request_is_refused() -> None:
    with pytest.raises(InvalidAuthorizationDetails, match="no scope of this request"):
        parse([order()], scopes=("orders:read",))
    assert parse([{"type": FLIGHT, "identifier": "K"}], scopes=("orders:cancel",))


def test_a_huge_integer_in_an_open_field_cannot_be_canonicalized() -> None:
    with pytest.raises(InvalidAuthorizationDetails, match="number"):
        parse([{"type": FLIGHT, "identifier": "K", "notes": [2**60]}])


def test_scope_of_is_the_first_of_the_types_scopes_the_request_holds_and_unticking_drops_details() -> None:
    flight = canonical_detail({"type": FLIGHT, "identifier": "K"})
    mine = canonical_detail(order())
    assert scope_of(flight, TYPES, SCOPES) == "flights:rebook"
    assert scope_of(flight, TYPES, ("orders:cancel",)) == "orders:cancel"
    assert details_of_scopes((mine, flight), TYPES, ("flights:rebook",)) == (flight,)
    assert details_of_scopes((mine, flight), TYPES, ()) == ()
    # A type removed from the configuration is granted with no scope any more.
    assert details_of_scopes((mine,), {FLIGHT: TYPES[FLIGHT]}, SCOPES) == ()


def test_coverage_same_resource_same_conditions_actions_within() -> None:
    granted = canonical_detail(
        {"type": FLIGHT, "identifier": "K7PQ2M", "actions": ["rebook"], "target_flight": "SK 318"}
    )
    used = {"type": FLIGHT, "identifier": "K7PQ2M", "actions": ["rebook"], "target_flight": "SK 318"}
    assert covers(granted, used, TYPES)
    assert not covers(granted, {**used, "identifier": "OTHER1"}, TYPES)
    assert not covers(granted, {**used, "target_flight": "SK 319"}, TYPES)
    assert not covers(granted, {**used, "actions": ["cancel"]}, TYPES)
    assert not covers(granted, {**used, "type": ORDER}, TYPES)
    assert not covers(granted, {**used, "notes": ["x"]}, TYPES)
    assert not covers(granted, used, {ORDER: TYPES[ORDER]})
    # Without actions, a granted detail allows its type's configured ones.
    loose = canonical_detail(order())
    assert covers(loose, order(actions=["cancel"]), TYPES)
    assert covering((granted, loose), order(actions=["cancel"]), TYPES) == loose
    assert covering((granted,), order(actions=["cancel"]), TYPES) is None


def test_a_bots_resource_bound_detail_names_identifier_and_actions_and_fits_its_type() -> None:
    assert check_bound_detail(order(actions=["cancel"]), TYPES) == canonical_detail(order(actions=["cancel"]))
    for bad in (order(), {"type": ORDER, "actions": ["cancel"]}, order(actions=["refund"]), "x"):
        with pytest.raises(InvalidAuthorizationDetails):
            check_bound_detail(bad, TYPES)


def test_consent_sentence_fills_fields_plain_text_and_shows_json_of_a_removed_type() -> None:
    flight = canonical_detail({"type": FLIGHT, "identifier": "<K7>", "actions": ["rebook", "cancel"]})
    assert consent_sentence(flight, TYPES) == "Only reservation <K7>, to flight  (rebook, cancel)"
    assert consent_sentence(canonical_detail(order()), TYPES) == "Only order A-10001"
    assert consent_sentence(flight, {}) == flight
