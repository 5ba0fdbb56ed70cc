"""§5.3 consent rules as pure functions: origins, the browser headers, skipping and carrying scopes."""

from __future__ import annotations

import pytest

from gateway.config import DelegationConfig, LoginConfig
from gateway.handlers.oauth.consent import (
    carried_scopes,
    origin_of,
    security_headers,
    skip_consent_scopes,
)
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
