"""§5.3 consent rules as pure functions: origins, the browser headers, skipping and carrying scopes, and
the RFC 9396 details that go with them."""

from __future__ import annotations

import dataclasses

import pytest

from gateway.config import AuthorizationDetailType, DelegationConfig, LoginConfig
from gateway.handlers.oauth.consent import (
    carried_scopes,
    origin_of,
    security_headers,
    skip_consent_scopes,
)
from gateway.oauth.consent_details import (
    GrantedDetails,
    granted_details,
    held_details,
    skip_covers_details,
    under_scopes,
)
from gateway.protocol.authorization_details import canonical_detail
from gateway.store.oauth import DeviceAuthorization, Grant
from tests.support.delegation import LOGIN_ISSUER, LOGIN_URL, SCOPES

DELEGATION = DelegationConfig(
    scopes=SCOPES, login=LoginConfig(url=LOGIN_URL, issuer=LOGIN_ISSUER, jwks={"keys": []})
)
PA = "https://pa.example/agents/one"


def _authorization(*scopes: str, owner: str = "owner-a") -> DeviceAuthorization:
    return DeviceAuthorization(
        device_hash="d" * 64,
        user_code="BCDF-GHJK",
        brand_id="acme",
        client_id=PA,
        owner_digest=owner,
        scopes=scopes,
        expires_at=1_000.0,
        interval=5,
    )


def _grant(*scopes: str, owner: str = "owner-a", client_id: str = PA) -> Grant:
    return Grant(
        grant_id=f"g-{owner}-{len(scopes)}",
        brand_id="acme",
        client_id=client_id,
        owner_digest=owner,
        user="jane-4471",
        scopes=scopes,
        issued_at=0.0,
        expires_at=2_000.0,
    )


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        ("https://pa.example/agents/one?x=1#f", "https://pa.example"),
        ("https://PA.Example:443/", "https://pa.example"),
        ("https://pa.example:8443/a", "https://pa.example:8443"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://user:secret@pa.example/", "http://pa.example"),
        ("https://[2001:db8::1]:444/x", "https://[2001:db8::1]:444"),
        ("https://B\u00fccher.example/", "https://xn--bcher-kva.example"),  # issue 18 F8: IDNA, lower case
    ],
)
def test_s5_3_consent_shows_the_pa_issuer_origin(url: str, origin: str) -> None:
    assert origin_of(url) == origin


def test_s5_3_form_action_allows_the_gateway_and_the_landing_origin_once() -> None:
    def form_action(public_url: str, landing: str | None) -> str:
        policy = security_headers(public_url, landing)["Content-Security-Policy"]
        return policy.split("form-action ", 1)[1]

    assert form_action("https://gw.test", None) == "https://gw.test"
    assert form_action("https://gw.test", "https://acme.test/done?x=1") == "https://gw.test https://acme.test"
    assert form_action("https://gw.test", "https://gw.test/elsewhere") == "https://gw.test"


def test_s5_3_skip_needs_the_live_grant_of_the_same_pa_and_sub_covering_the_request() -> None:
    wanted = _authorization("orders:read", "orders:cancel")
    covering = _grant("orders:read", "orders:cancel", "profile:read")
    assert skip_consent_scopes(DELEGATION, wanted, covering) == tuple(SCOPES)
    assert skip_consent_scopes(DELEGATION, wanted, _grant("orders:read")) is None
    assert skip_consent_scopes(DELEGATION, wanted, None) is None
    assert skip_consent_scopes(DELEGATION, wanted, _grant(*SCOPES, owner="owner-b")) is None
    assert skip_consent_scopes(DELEGATION, wanted, _grant(*SCOPES, client_id="https://other.example")) is None
    off = DelegationConfig(scopes=SCOPES, login=DELEGATION.login, skip_consent=False)
    assert skip_consent_scopes(off, wanted, covering) is None


def test_s5_3_carried_scopes_are_the_superseded_grants_not_chosen_now_in_card_order() -> None:
    """§5.3 step-up: what the new grant keeps of the one it supersedes is explicit (issue 18 I3)."""
    wanted = _authorization("profile:read")
    earlier = _grant("profile:read", "orders:cancel", "gone:scope", "orders:read")
    # Chosen now is not carried; a scope that left the card is not granted again.
    assert carried_scopes(DELEGATION, wanted, earlier, ["profile:read"]) == ("orders:read", "orders:cancel")
    assert carried_scopes(DELEGATION, wanted, None, ["profile:read"]) == ()
    assert carried_scopes(DELEGATION, wanted, _grant("orders:read", owner="owner-b"), []) == ()


# RFC 9396 details on the consent page (gateway/oauth/consent_details.py): conditions of their scope.

ORDER_TYPE = "https://acme.example/rar/order"
TRACK_TYPE = "https://acme.example/rar/tracking"
DETAIL_TYPES = {
    ORDER_TYPE: AuthorizationDetailType(
        type=ORDER_TYPE,
        scopes=("orders:cancel",),
        actions=("cancel",),
        fields={
            "type": "object",
            "properties": {"identifier": {"type": "string"}},
            "required": ["identifier"],
        },
        consent="Only order {identifier}",
    ),
    TRACK_TYPE: AuthorizationDetailType(
        type=TRACK_TYPE,
        scopes=("orders:read", "orders:cancel"),
        actions=("track",),
        fields={
            "type": "object",
            "properties": {"identifier": {"type": "string"}},
            "required": ["identifier"],
        },
        consent="Only parcel {identifier}",
    ),
}
RAR = DelegationConfig(scopes=SCOPES, login=DELEGATION.login, authorization_details=DETAIL_TYPES)


def _order(identifier: str) -> str:
    return canonical_detail({"type": ORDER_TYPE, "identifier": identifier})


def _track(identifier: str) -> str:
    return canonical_detail({"type": TRACK_TYPE, "identifier": identifier})


def _asking(scopes: tuple[str, ...], details: tuple[str, ...]) -> DeviceAuthorization:
    return dataclasses.replace(_authorization(*scopes), details=details)


def _holding(scopes: tuple[str, ...], details: tuple[str, ...]) -> Grant:
    return dataclasses.replace(_grant(*scopes), details=details)


def test_rfc9396_a_requested_detail_is_granted_only_with_the_scope_it_is_shown_under() -> None:
    """The design: a detail is a condition of the scope the page shows it under (its scope among the
    requested ones), never a choice of its own; its type's other scopes do not keep it."""
    asked = _asking(("orders:read", "orders:cancel"), (_order("A-1"), _track("P-1")))
    assert under_scopes(asked.details, DETAIL_TYPES, asked.scopes) == {
        "orders:cancel": (_order("A-1"),),
        "orders:read": (_track("P-1"),),
    }
    both = granted_details(RAR, asked, None, ticked={"orders:read", "orders:cancel"}, scopes=asked.scopes)
    assert both == GrantedDetails(details=(_order("A-1"), _track("P-1")), carried=(), dropped=())
    # Shown under orders:read only, the parcel goes with it, though its type also belongs to orders:cancel.
    cancel = granted_details(RAR, asked, None, ticked={"orders:cancel"}, scopes={"orders:cancel"})
    assert cancel == GrantedDetails(details=(_order("A-1"),), carried=(), dropped=())
    read = granted_details(RAR, asked, None, ticked={"orders:read"}, scopes={"orders:read"})
    assert read == GrantedDetails(details=(_track("P-1"),), carried=(), dropped=())


def test_rfc9396_a_keep_field_naming_an_unticked_requested_scope_grants_none_of_its_details() -> None:
    """A forged ``keep`` may carry a scope the earlier grant holds, never the details asked with it."""
    asked = _asking(("orders:read", "orders:cancel"), (_order("A-2"),))
    earlier = _holding(("orders:cancel",), ())
    forged = granted_details(
        RAR, asked, earlier, ticked={"orders:read"}, scopes={"orders:read", "orders:cancel"}
    )
    assert forged == GrantedDetails(details=(), carried=(), dropped=())


def test_rfc9396_a_step_up_carries_the_details_of_the_scopes_it_keeps() -> None:
    earlier = _holding(("orders:read", "orders:cancel"), (_order("A-1"), _track("P-1")))
    asked = _asking(("profile:read",), ())
    assert held_details(RAR, asked, earlier) == (_order("A-1"), _track("P-1"))
    kept = granted_details(RAR, asked, earlier, ticked={"profile:read"}, scopes=set(SCOPES))
    assert kept == GrantedDetails(
        details=(_order("A-1"), _track("P-1")), carried=(_order("A-1"), _track("P-1")), dropped=()
    )
    # The parcel was shown under orders:read (its scope in the earlier grant): unticked, it goes.
    some = granted_details(
        RAR, asked, earlier, ticked={"profile:read"}, scopes={"profile:read", "orders:cancel"}
    )
    assert some == GrantedDetails(
        details=(_order("A-1"),), carried=(_order("A-1"),), dropped=(_track("P-1"),)
    )
    assert held_details(RAR, asked, None) == ()


def test_rfc9396_an_earlier_detail_of_a_scope_asked_again_goes_with_that_scope() -> None:
    """Incremental: asking another order to cancel keeps the one already allowed, unless the scope
    is unticked; a detail asked again is the request's, not carried."""
    earlier = _holding(("orders:cancel",), (_order("A-1"), _order("A-2")))
    asked = _asking(("orders:read", "orders:cancel"), (_order("A-3"), _order("A-2")))
    assert held_details(RAR, asked, earlier) == (_order("A-1"),)
    ticked = granted_details(RAR, asked, earlier, ticked=set(asked.scopes), scopes=asked.scopes)
    assert ticked == GrantedDetails(
        details=(_order("A-3"), _order("A-2"), _order("A-1")), carried=(_order("A-1"),), dropped=()
    )
    unticked = granted_details(RAR, asked, earlier, ticked={"orders:read"}, scopes={"orders:read"})
    assert unticked == GrantedDetails(details=(), carried=(), dropped=(_order("A-1"),))


def test_rfc9396_a_grant_holds_at_most_the_cap_requested_first_the_rest_dropped() -> None:
    earlier = _holding(("orders:cancel",), (_order("A-1"), _order("A-2")))
    asked = _asking(("orders:cancel",), (_order("A-3"), _order("A-4")))
    three = dataclasses.replace(RAR, max_authorization_details=3)
    assert granted_details(three, asked, earlier, ticked=asked.scopes, scopes=asked.scopes) == GrantedDetails(
        details=(_order("A-3"), _order("A-4"), _order("A-1")),
        carried=(_order("A-1"),),
        dropped=(_order("A-2"),),
    )
    # The bytes too: the JSON array the token carries, "[d1,d2]".
    size = len(f"[{_order('A-3')},{_order('A-4')}]")
    tight = dataclasses.replace(RAR, max_authorization_details_bytes=size)
    assert granted_details(tight, asked, earlier, ticked=asked.scopes, scopes=asked.scopes) == GrantedDetails(
        details=(_order("A-3"), _order("A-4")), carried=(), dropped=(_order("A-1"), _order("A-2"))
    )


def test_rfc9396_a_detail_of_a_type_no_longer_configured_is_neither_granted_nor_carried() -> None:
    gone = canonical_detail({"type": "https://acme.example/rar/gone", "identifier": "X"})
    earlier = _holding(("orders:cancel",), (gone,))
    asked = _asking(("orders:cancel",), (gone, _order("A-1")))
    assert granted_details(RAR, asked, earlier, ticked=asked.scopes, scopes=asked.scopes) == GrantedDetails(
        details=(_order("A-1"),), carried=(), dropped=()
    )


def test_rfc9396_skip_needs_every_requested_detail_held_byte_for_byte() -> None:
    """§5.3 skip_consent with details: the live grant covers the request only if it holds every
    requested scope and every requested detail exactly; one that merely looks alike asks the User."""
    earlier = _holding(("orders:read", "orders:cancel"), (_order("A-1"),))
    assert skip_consent_scopes(RAR, _asking(("orders:cancel",), (_order("A-1"),)), earlier) == (
        "orders:read",
        "orders:cancel",
    )
    assert skip_consent_scopes(RAR, _asking(("orders:cancel",), ()), earlier) is not None
    assert skip_consent_scopes(RAR, _asking(("orders:cancel",), (_order("A-2"),)), earlier) is None
    with_actions = canonical_detail({"type": ORDER_TYPE, "identifier": "A-1", "actions": ["cancel"]})
    assert skip_consent_scopes(RAR, _asking(("orders:cancel",), (with_actions,)), earlier) is None
    assert skip_covers_details(_asking(("orders:cancel",), (_order("A-1"),)), earlier)
    assert not skip_covers_details(_asking(("orders:cancel",), (_order("A-1"), _order("A-2"))), earlier)
