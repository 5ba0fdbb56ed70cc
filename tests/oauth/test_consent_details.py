"""§5.3 with RFC 9396 ``authorization_details``, over HTTP: what the consent page shows of each detail,
and what a decision grants of them.

A detail is a condition of the scope it belongs to: shown inside that scope's checkbox, approved
with it and only with it, and taken from the stored authorization, never from the form. A step-up
carries the earlier grant's details like its scopes; a grant holds at most
``max_authorization_details``, and what does not fit is shown as left out. ``skip_consent`` skips
only for a live grant holding every requested detail byte for byte.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse

from gateway.protocol.authorization_details import canonical_detail
from gateway.store.base import Owner
from gateway.store.oauth import AuthorizationStatus, Grant
from tests.support.consent import (
    CONSENT_USER,
    DETAIL_TYPES,
    ConsentForm,
    authorization,
    device_authorization,
    local,
    oauth_store,
    oauth_urls,
    order,
    parse_consent_form,
    poll_token,
    post_decision,
    redirect_query,
    sign_in,
)
from tests.support.delegation import SCOPES, BrandLogin, enable_delegation
from tests.support.gateway import Harness, MakeGateway

CANCEL = SCOPES["orders:cancel"]
HTML_ID = "<img src=x onerror=alert(1)>&amp;"
"""An identifier its type's schema allows that is HTML: it must reach every page as text."""


def texts(*details: Mapping[str, Any]) -> tuple[str, ...]:
    """The details as the gateway keeps them: canonical JSON."""
    return tuple(canonical_detail(detail) for detail in details)


async def detail_gateway(
    make_gateway: MakeGateway, url: str, login: BrandLogin, key: str, **overrides: Any
) -> Harness:
    """A gateway whose ``acme`` Brand delegates and accepts the order detail type."""
    edit = enable_delegation(login, key, authorization_details=DETAIL_TYPES, **overrides)
    return await make_gateway(url, edit=edit)


@pytest.fixture
async def rgw(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> Harness:
    """Memory and Redis."""
    return await detail_gateway(make_gateway, cache_url, brand_login, provider_key_pem)


@pytest.fixture
async def every_store(
    make_gateway: MakeGateway, delegation_store_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> Harness:
    """Memory, Redis and a Redis Cluster: where a landing record and a step-up's details are kept."""
    return await detail_gateway(make_gateway, delegation_store_url, brand_login, provider_key_pem)


async def consent_form(
    gw: Harness, login: BrandLogin, scopes: Sequence[str], details: Sequence[Mapping[str, Any]] = ()
) -> tuple[dict[str, Any], ConsentForm, str]:
    """A request and its consent page after a good sign-in: the request, the form, the page."""
    started = await device_authorization(gw, scopes, details=details)
    response = await sign_in(gw, login, started["user_code"])
    assert response.status == 200, await response.text()
    html = await response.text()
    return started, parse_consent_form(html), html


async def landing_html(gw: Harness, decided: ClientResponse) -> str:
    assert decided.status == 303
    response = await gw.client.get(local(decided.headers["Location"]))
    assert response.status == 200
    return await response.text()


async def live_grant(gw: Harness) -> Grant:
    owner = Owner("acme", gw.issuer, "alice").digest
    grant = await oauth_store(gw).live_grant_of("acme", CONSENT_USER, owner, time.time())
    assert grant is not None
    return grant


async def grant_with(
    gw: Harness, login: BrandLogin, scopes: Sequence[str], details: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """A live grant of ``scopes`` and ``details``, approved on the page and redeemed: its token answer."""
    started, form, _ = await consent_form(gw, login, scopes, details)
    assert (await post_decision(gw, form.session, "allow", list(scopes))).status == 303
    status, answer = await poll_token(gw, started["device_code"])
    assert status == 200, answer
    return answer


def condition_item(scope: str, *conditions: str) -> str:
    """An end page's list item: the scope, its conditions nested under it."""
    nested = "".join(f"<li>{condition}</li>\n" for condition in conditions)
    return f"<li>{scope}<ul>\n{nested}</ul>\n</li>"


async def test_rfc9396_each_detail_is_shown_as_a_condition_inside_its_scopes_box(
    rgw: Harness, brand_login: BrandLogin
) -> None:
    started, form, html = await consent_form(
        rgw, brand_login, ("orders:read", "orders:cancel"), (order("A-10001"), order("A-10002"))
    )
    assert form.scopes == {"orders:read": True, "orders:cancel": True}  # no box of its own
    assert form.labels == {"orders:read": SCOPES["orders:read"], "orders:cancel": CANCEL}
    assert form.conditions == {"orders:cancel": ["Only order A-10001", "Only order A-10002"]}
    assert "Where a box lists conditions, it allows only what they say" in html
    assert html.count('type="checkbox"') == 2
    pending = await authorization(rgw, started["user_code"])
    assert pending is not None
    assert pending.details == texts(order("A-10001"), order("A-10002"))


async def test_rfc9396_allow_grants_the_details_of_the_ticked_scope(
    every_store: Harness, brand_login: BrandLogin
) -> None:
    gw = every_store
    asked = (order("A-10001"), order("A-10002", actions=["cancel"]))
    started, form, _ = await consent_form(gw, brand_login, ("orders:read", "orders:cancel"), asked)
    decided = await post_decision(gw, form.session, "allow", ["orders:read", "orders:cancel"])
    assert redirect_query(decided) == {"status": ["approved"], "scope": ["orders:read orders:cancel"]}
    approved = await authorization(gw, started["user_code"])
    assert approved is not None
    assert (approved.approved_details, approved.carried_details) == (texts(*asked), ())
    html = await landing_html(gw, decided)
    assert condition_item(CANCEL, "Only order A-10001", "Only order A-10002") in html
    status, answer = await poll_token(gw, started["device_code"])
    assert status == 200
    assert answer["authorization_details"] == list(asked)
    assert (await live_grant(gw)).details == texts(*asked)


async def test_rfc9396_unticking_the_scope_drops_its_details(rgw: Harness, brand_login: BrandLogin) -> None:
    started, form, _ = await consent_form(
        rgw, brand_login, ("orders:read", "orders:cancel"), (order("A-10001"),)
    )
    decided = await post_decision(rgw, form.session, "allow", ["orders:read"])
    assert redirect_query(decided) == {"status": ["approved"], "scope": ["orders:read"]}
    approved = await authorization(rgw, started["user_code"])
    assert approved is not None
    assert (approved.approved, approved.approved_details) == (("orders:read",), ())
    html = await landing_html(rgw, decided)
    assert "A-10001" not in html
    status, answer = await poll_token(rgw, started["device_code"])
    assert status == 200
    assert "authorization_details" not in answer


async def test_rfc9396_a_forged_consent_form_adds_no_detail(rgw: Harness, brand_login: BrandLogin) -> None:
    """THREAT_MODEL D23: the decision takes details only from the stored authorization. Fields naming
    other details, and a ``keep`` naming a requested scope left unticked, grant none of them."""
    await grant_with(rgw, brand_login, ("orders:cancel",), ())
    started, form, _ = await consent_form(
        rgw, brand_login, ("orders:read", "orders:cancel"), (order("A-10001"),)
    )
    forged = orjson.dumps([order("A-99999")]).decode()
    fields = [
        ("session", form.session),
        ("decision", "allow"),
        ("scope", "orders:read"),
        ("keep", "orders:cancel"),  # the earlier grant holds it: it may be carried, not its new details
        ("authorization_details", forged),
        ("authorization_detail", forged),
        ("detail", canonical_detail(order("A-99999"))),
        ("condition", "Only order A-99999"),
    ]
    decided = await rgw.client.post(
        local(oauth_urls(rgw).consent_decision) + f"?authorization_details={forged}",
        data=fields,
        allow_redirects=False,
    )
    assert redirect_query(decided) == {"status": ["approved"], "scope": ["orders:read orders:cancel"]}
    approved = await authorization(rgw, started["user_code"])
    assert approved is not None
    assert (approved.approved_details, approved.carried_details) == ((), ())
    status, answer = await poll_token(rgw, started["device_code"])
    assert status == 200
    assert "authorization_details" not in answer
    assert (await live_grant(rgw)).details == ()


async def test_rfc9396_a_detail_field_holding_html_is_escaped_on_every_page(
    rgw: Harness, brand_login: BrandLogin
) -> None:
    shown = "Only order &lt;img src=x onerror=alert(1)&gt;&amp;amp;"
    started, form, html = await consent_form(rgw, brand_login, ("orders:cancel",), (order(HTML_ID),))
    assert form.conditions == {"orders:cancel": [f"Only order {HTML_ID}"]}  # as the browser shows it
    assert shown in html
    assert "<img" not in html
    decided = await post_decision(rgw, form.session, "allow", ["orders:cancel"])
    landing = await landing_html(rgw, decided)
    assert condition_item(CANCEL, shown) in landing
    assert "<img" not in landing
    settled = await (await sign_in(rgw, brand_login, started["user_code"])).text()
    assert "<h1>Already approved</h1>" in settled
    assert condition_item(CANCEL, shown) in settled
    assert "<img" not in settled


async def test_rfc9396_step_up_shows_the_carried_details_under_keep_and_carries_them(
    every_store: Harness, brand_login: BrandLogin
) -> None:
    gw = every_store
    await grant_with(gw, brand_login, ("orders:cancel",), (order("A-10001"),))
    started, form, _ = await consent_form(gw, brand_login, ("profile:read",))
    assert form.keep == {"orders:cancel": True}
    assert form.conditions == {"orders:cancel": ["Only order A-10001"]}
    decided = await post_decision(gw, form.session, "allow", ["profile:read"], keep=["orders:cancel"])
    assert redirect_query(decided) == {"status": ["approved"], "scope": ["orders:cancel profile:read"]}
    html = await landing_html(gw, decided)
    kept = html.split("kept from your earlier approval:", 1)[1]
    assert kept.startswith(f"</p>\n<ul>\n{condition_item(CANCEL, 'Only order A-10001')}")
    status, answer = await poll_token(gw, started["device_code"])
    assert status == 200
    assert answer["authorization_details"] == [order("A-10001")]
    grant = await live_grant(gw)
    assert (grant.details, grant.carried_details) == (texts(order("A-10001")), texts(order("A-10001")))


async def test_rfc9396_step_up_unticking_a_kept_scope_drops_its_details_and_says_so(
    rgw: Harness, brand_login: BrandLogin
) -> None:
    await grant_with(rgw, brand_login, ("orders:cancel",), (order("A-10001"),))
    started, form, _ = await consent_form(rgw, brand_login, ("profile:read",))
    decided = await post_decision(rgw, form.session, "allow", ["profile:read"])
    html = await landing_html(rgw, decided)
    gone = html.split("can no longer:", 1)[1]
    assert gone.startswith(f"</p>\n<ul>\n{condition_item(CANCEL, 'Only order A-10001')}")
    status, answer = await poll_token(rgw, started["device_code"])
    assert status == 200
    assert "authorization_details" not in answer
    assert (await live_grant(rgw)).details == ()


async def test_rfc9396_an_earlier_detail_of_a_scope_asked_again_is_shown_and_kept_with_it(
    rgw: Harness, brand_login: BrandLogin
) -> None:
    """Asking to cancel another order keeps the one already allowed (the person sees it, marked),
    as a step-up keeps the earlier scopes."""
    await grant_with(rgw, brand_login, ("orders:cancel",), (order("A-10001"),))
    started, form, _ = await consent_form(rgw, brand_login, ("orders:cancel",), (order("A-10002"),))
    assert form.keep == {}
    assert form.conditions == {
        "orders:cancel": ["Only order A-10002", "Only order A-10001 (you already allow this)"]
    }
    decided = await post_decision(rgw, form.session, "allow", ["orders:cancel"])
    html = await landing_html(rgw, decided)
    assert condition_item(CANCEL, "Only order A-10002", "Only order A-10001") in html
    kept = html.split("kept from your earlier approval:", 1)[1]
    assert kept.startswith(f"</p>\n<ul>\n{condition_item(CANCEL, 'Only order A-10001')}")
    assert (await poll_token(rgw, started["device_code"]))[1]["authorization_details"] == [
        order("A-10002"),
        order("A-10001"),
    ]


async def test_rfc9396_a_grant_holds_at_most_the_cap_and_what_does_not_fit_is_shown(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    gw = await detail_gateway(
        make_gateway, cache_url, brand_login, provider_key_pem, max_authorization_details=2
    )
    await grant_with(gw, brand_login, ("orders:cancel",), (order("A-10001"), order("A-10002")))
    started, form, html = await consent_form(gw, brand_login, ("orders:cancel",), (order("A-10003"),))
    assert form.conditions["orders:cancel"] == [
        "Only order A-10003",
        "Only order A-10001 (you already allow this)",
        "Only order A-10002 (you already allow this)",
    ]
    left_out = (
        "One approval holds at most 2 conditions, so if everything stays ticked, these are left out of it:"
    )
    assert f"{left_out}</p>\n<ul>\n{condition_item(CANCEL, 'Only order A-10002')}" in html
    decided = await post_decision(gw, form.session, "allow", ["orders:cancel"])
    landing = await landing_html(gw, decided)
    assert (
        "One approval holds at most 2 conditions, so these were left out of it:</p>\n"
        f"<ul>\n{condition_item(CANCEL, 'Only order A-10002')}"
    ) in landing
    status, answer = await poll_token(gw, started["device_code"])
    assert status == 200
    assert answer["authorization_details"] == [order("A-10003"), order("A-10001")]


async def test_rfc9396_skip_consent_only_when_the_grant_holds_the_requested_details_exactly(
    rgw: Harness, brand_login: BrandLogin
) -> None:
    await grant_with(rgw, brand_login, ("orders:read", "orders:cancel"), (order("A-10001"),))
    same = await device_authorization(rgw, ("orders:cancel",), details=(order("A-10001"),))
    skipped = await sign_in(rgw, brand_login, same["user_code"])
    assert skipped.status == 303
    assert redirect_query(skipped) == {"status": ["approved"], "scope": ["orders:read orders:cancel"]}
    approved = await authorization(rgw, same["user_code"])
    assert approved is not None
    assert approved.status is AuthorizationStatus.APPROVED
    assert approved.approved_details == texts(order("A-10001"))
    html = await landing_html(rgw, skipped)
    assert condition_item(CANCEL, "Only order A-10001") in html
    assert (await poll_token(rgw, same["device_code"]))[1]["authorization_details"] == [order("A-10001")]
    # Another order, or the same one with actions spelled out, is not what the grant holds: asked.
    for details in ((order("A-10002"),), (order("A-10001", actions=["cancel"]),)):
        other = await device_authorization(rgw, ("orders:cancel",), details=details)
        asked = await sign_in(rgw, brand_login, other["user_code"])
        assert asked.status == 200
        assert parse_consent_form(await asked.text()).scopes == {"orders:cancel": True}


async def test_rfc9396_a_denial_lists_the_standing_grants_details(
    rgw: Harness, brand_login: BrandLogin
) -> None:
    await grant_with(rgw, brand_login, ("orders:cancel",), (order("A-10001"),))
    _, form, _ = await consent_form(rgw, brand_login, ("orders:cancel",), (order("A-10002"),))
    html = await landing_html(rgw, await post_decision(rgw, form.session, "deny", []))
    assert "Your earlier approval still stands" in html
    assert condition_item(CANCEL, "Only order A-10001") in html
    assert "A-10002" not in html
