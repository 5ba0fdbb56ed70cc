"""§5.3 the consent page and the User's decision, over HTTP on both backends.

The Brand login hands off with a signed assertion, the page shows the personal agent's origin,
the Brand and each requested scope (ticked, described verbatim), and the decision settles the
pending authorization once, redirecting to the landing page with what was granted.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import ClientResponse

from gateway.handlers.state import METRICS
from gateway.oauth.device import code_hash
from gateway.oauth.login import DISPLAY_CLAIM
from gateway.oauth.pages import SCRIPT_SOURCE
from gateway.protocol.claims import MAX_CLOCK_SKEW
from gateway.store.base import Owner
from gateway.store.oauth import AuthorizationStatus
from tests.http.test_delegated_turns import assert_invalid_token
from tests.support.consent import (
    CONSENT_USER,
    authorization,
    device_authorization,
    landing_id,
    local,
    oauth_store,
    oauth_urls,
    parse_consent_form,
    poll_token,
    post_assertion,
    post_decision,
    redirect_query,
    sign_in,
    status_of,
)
from tests.support.delegation import LOGIN_URL, SCOPES, BrandLogin, delegated, enable_delegation, refresh
from tests.support.gateway import PUBLIC_URL, Harness, MakeGateway
from tests.support.pa import OMIT, FakeJwksServer, ManualClock, PAKey

ERROR_TEXT = "This sign-in link is invalid or has expired"


def assert_browser_headers(response: ClientResponse, *, form_action: str = PUBLIC_URL) -> None:
    """The headers every consent, decision, error and landing answer carries."""
    headers = response.headers
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Content-Security-Policy"] == (
        "frame-ancestors 'none'; default-src 'none'; style-src 'unsafe-inline'; "
        f"script-src {SCRIPT_SOURCE}; form-action {form_action}"
    )
    assert headers["Cache-Control"] == "no-store"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Type"] == "text/html; charset=utf-8"


async def assert_error_page(response: ClientResponse) -> None:
    assert response.status == 400
    assert_browser_headers(response)
    text = await response.text()
    assert ERROR_TEXT in text
    assert "Start again from your assistant" in text


async def consent_page(gw: Harness, login: BrandLogin, scopes: tuple[str, ...] = tuple(SCOPES)) -> Any:
    """A fresh authorization for ``scopes`` and its consent form after a good sign-in."""
    started = await device_authorization(gw, scopes)
    response = await sign_in(gw, login, started["user_code"])
    assert response.status == 200, await response.text()
    return started, parse_consent_form(await response.text())


async def test_s5_3_valid_assertion_shows_the_consent_page(dgw: Harness, brand_login: BrandLogin) -> None:
    started = await device_authorization(dgw)
    response = await sign_in(dgw, brand_login, started["user_code"])
    assert response.status == 200
    assert_browser_headers(response)
    html = await response.text()
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in html
    assert dgw.issuer in html  # the PA's issuer origin (the test PA's issuer is one)
    assert "Acme Support" in html
    form = parse_consent_form(html)
    assert form.action == oauth_urls(dgw).consent_decision
    assert form.method == "post"
    assert form.scopes == dict.fromkeys(SCOPES, True)
    assert form.labels == SCOPES  # verbatim, as the browser shows them
    assert "See your name &amp; &lt;email&gt; address" in html  # and escaped in the markup
    assert "<email>" not in html
    # Deny first: a browser's implicit submission (Enter in a checkbox) presses the first button.
    assert form.decisions == ["deny", "allow"]
    assert len(form.session) > 43
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.PENDING


async def test_s5_3_consent_shows_the_pa_issuer_origin_not_its_path(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str, pa_issuer: str
) -> None:
    delegate = enable_delegation(brand_login, provider_key_pem)
    pathful = f"{pa_issuer}/agents/one"

    def edit(raw: dict[str, Any]) -> None:
        delegate(raw)
        jwks_uri = raw["personal_agents"]["registered"][0]["jwks_uri"]
        raw["personal_agents"]["registered"].append({"issuer": pathful, "jwks_uri": jwks_uri})

    gw = await make_gateway(edit=edit)
    started = await device_authorization(gw, issuer=pathful)
    html = await (await sign_in(gw, brand_login, started["user_code"])).text()
    assert pa_issuer in html
    assert "/agents/one" not in html


async def test_s5_3_consent_shows_a_look_alike_issuer_host_in_ascii(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Issue 18 F8: ``gооgle.com`` with Cyrillic ``о`` (U+043E) used to be shown as written, reading as
    Google; the page shows the IDNA form, which no one takes for it."""
    delegate = enable_delegation(brand_login, provider_key_pem)
    look_alike = "https://g\u043e\u043egle.com/agent"

    def edit(raw: dict[str, Any]) -> None:
        delegate(raw)
        jwks_uri = raw["personal_agents"]["registered"][0]["jwks_uri"]
        raw["personal_agents"]["registered"].append({"issuer": look_alike, "jwks_uri": jwks_uri})

    gw = await make_gateway(edit=edit)
    started = await device_authorization(gw, issuer=look_alike)
    html = await (await sign_in(gw, brand_login, started["user_code"])).text()
    assert '<span class="who">https://xn--ggle-55da.com</span>' in html
    assert "g\u043e\u043egle" not in html


def _bad(case: str, login: BrandLogin, now: int) -> dict[str, Any]:
    """The claims (or key) of an assertion that must grant nothing."""
    cases: dict[str, dict[str, Any]] = {
        "bad_signature": {"key": PAKey.es256(kid=login.key.kid)},
        "unknown_key": {"key": PAKey.es256(kid="not-published")},
        "wrong_iss": {"iss": "https://login.other.test"},
        "expired": {"iat": now - 300, "ttl": 120},
        "exp_over_5_min": {"iat": now, "ttl": 301 + 30},
        "iat_in_future": {"iat": now + 90, "ttl": 120},
        "no_jti": {"jti": OMIT},
    }
    return cases[case]


@pytest.mark.parametrize(
    "case",
    ["bad_signature", "unknown_key", "wrong_iss", "expired", "exp_over_5_min", "iat_in_future", "no_jti"],
)
async def test_s5_3_bad_assertion_is_the_error_page_and_grants_nothing(
    dgw: Harness, brand_login: BrandLogin, case: str
) -> None:
    started = await device_authorization(dgw)
    response = await sign_in(
        dgw, brand_login, started["user_code"], **_bad(case, brand_login, int(time.time()))
    )
    await assert_error_page(response)
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.PENDING
    assert "session" not in await response.text()


async def test_s5_3_assertion_for_another_audience_is_refused(dgw: Harness, brand_login: BrandLogin) -> None:
    started = await device_authorization(dgw)
    urls = oauth_urls(dgw)
    for audience in (
        urls.interface,
        f"{urls.consent}?user_code={started['user_code']}",
        oauth_urls(dgw, "globex").consent,
    ):
        assertion = brand_login.assertion(
            user=CONSENT_USER, user_code=started["user_code"], audience=audience
        )
        response = await dgw.client.post(local(urls.consent), data={"assertion": assertion})
        await assert_error_page(response)


async def test_s5_3_missing_or_unknown_user_code_is_refused(dgw: Harness, brand_login: BrandLogin) -> None:
    started = await device_authorization(dgw)
    await assert_error_page(await sign_in(dgw, brand_login, OMIT))  # type: ignore[arg-type]
    unknown = "BCDF-GHJK" if started["user_code"] != "BCDF-GHJK" else "ZZZZ-ZZZZ"
    await assert_error_page(await sign_in(dgw, brand_login, unknown))
    await assert_error_page(await sign_in(dgw, brand_login, "not a code"))
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.PENDING


async def test_s5_3_user_code_is_read_as_a_person_types_it(
    dgw_memory: Harness, brand_login: BrandLogin
) -> None:
    started = await device_authorization(dgw_memory)
    typed = started["user_code"].replace("-", "").lower()
    response = await sign_in(dgw_memory, brand_login, typed)
    assert response.status == 200


async def test_s5_3_assertion_is_single_use_by_jti(dgw: Harness, brand_login: BrandLogin) -> None:
    started = await device_authorization(dgw)
    assertion = brand_login.assertion(
        user=CONSENT_USER, user_code=started["user_code"], audience=oauth_urls(dgw).consent
    )
    consent_url = local(oauth_urls(dgw).consent)
    first = await dgw.client.post(consent_url, data={"assertion": assertion})
    assert first.status == 200
    await assert_error_page(await dgw.client.post(consent_url, data={"assertion": assertion}))


async def test_s5_3_reopening_a_declined_link_says_it_was_declined(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    """Issue 18: re-opening a decided link says what is true, and decides nothing again."""
    started, form = await consent_page(dgw, brand_login)
    assert (await post_decision(dgw, form.session, "deny", [])).status == 303
    response = await sign_in(dgw, brand_login, started["user_code"])
    assert response.status == 200
    assert_browser_headers(response)
    html = await response.text()
    assert "<h1>Already declined</h1>" in html
    assert "This request was already declined: it shared nothing, and it cannot be approved now." in html
    assert "session" not in html  # no form
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.DENIED


async def test_s5_3_reopening_an_approved_link_says_what_it_allows(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    """Issue 18: re-opening an approved link no longer says "Nothing was shared"; what the approval
    allows is shown only to the Brand user who gave it."""
    started, form = await consent_page(dgw, brand_login)
    assert (await post_decision(dgw, form.session, "allow", ["orders:read"])).status == 303
    html = await (await sign_in(dgw, brand_login, started["user_code"])).text()
    assert "<h1>Already approved</h1>" in html
    assert "Nothing was shared" not in html
    assert "<li>Look up your orders and their status</li>" in html
    assert (await poll_token(dgw, started["device_code"]))[0] == 200
    redeemed = await (await sign_in(dgw, brand_login, started["user_code"])).text()
    assert "<h1>Already approved</h1>" in redeemed
    other = await (await sign_in(dgw, brand_login, started["user_code"], user="someone-else")).text()
    assert "<h1>Already approved</h1>" in other
    assert "Look up your orders" not in other
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.REDEEMED


async def test_s5_3_missing_or_malformed_assertion_field_is_refused(dgw_memory: Harness) -> None:
    consent_url = local(oauth_urls(dgw_memory).consent)
    await assert_error_page(await dgw_memory.client.post(consent_url, data={"other": "x"}))
    await assert_error_page(await dgw_memory.client.post(consent_url, data={"assertion": "not.a.jwt"}))
    await assert_error_page(
        await dgw_memory.client.post(
            consent_url, data=b"assertion=\xff", headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
    )
    await assert_error_page(await dgw_memory.client.post(consent_url, json={"assertion": "x"}))
    too_big = {"assertion": "a" * 70_000}
    await assert_error_page(await dgw_memory.client.post(consent_url, data=too_big))


async def test_s5_3_allow_grants_exactly_the_ticked_scopes(dgw: Harness, brand_login: BrandLogin) -> None:
    started, form = await consent_page(dgw, brand_login)
    response = await post_decision(dgw, form.session, "allow", ["orders:read", "profile:read"])
    assert response.status == 303
    assert_browser_headers(response)
    location = response.headers["Location"]
    assert location.startswith(oauth_urls(dgw).landing + "?")
    assert redirect_query(response) == {"status": ["approved"], "scope": ["orders:read profile:read"]}
    approved = await authorization(dgw, started["user_code"])
    assert approved is not None
    assert approved.status is AuthorizationStatus.APPROVED
    assert approved.user == CONSENT_USER
    assert approved.approved == ("orders:read", "profile:read")
    status, answer = await poll_token(dgw, started["device_code"])
    assert status == 200
    assert answer["scope"] == "orders:read profile:read"


async def test_s5_3_consent_session_is_single_use(dgw: Harness, brand_login: BrandLogin) -> None:
    started, form = await consent_page(dgw, brand_login)
    assert (await post_decision(dgw, form.session, "allow", ["orders:read"])).status == 303
    await assert_error_page(await post_decision(dgw, form.session, "deny", []))
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.APPROVED


async def test_s5_3_unknown_or_forged_session_is_refused(dgw: Harness, brand_login: BrandLogin) -> None:
    started, form = await consent_page(dgw, brand_login)
    code, _, secret = form.session.partition(".")
    for forged in ("", "nonsense", f"{code}.{secret[:-2]}xx", f"{code}x.{secret}", secret):
        await assert_error_page(await post_decision(dgw, forged, "allow", ["orders:read"]))
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.PENDING


async def test_s5_3_deny_redirects_denied(dgw: Harness, brand_login: BrandLogin) -> None:
    started, form = await consent_page(dgw, brand_login)
    response = await post_decision(dgw, form.session, "deny", list(SCOPES))
    assert response.status == 303
    assert_browser_headers(response)
    assert redirect_query(response) == {"status": ["denied"]}
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.DENIED
    assert await poll_token(dgw, started["device_code"]) == (400, {"error": "access_denied"})


async def test_s5_3_allow_with_nothing_ticked_counts_as_denied(dgw: Harness, brand_login: BrandLogin) -> None:
    started, form = await consent_page(dgw, brand_login)
    response = await post_decision(dgw, form.session, "allow", [])
    assert response.status == 303
    assert redirect_query(response) == {"status": ["denied"]}
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.DENIED


async def test_s5_3_ticked_scope_not_requested_is_refused(dgw: Harness, brand_login: BrandLogin) -> None:
    started, form = await consent_page(dgw, brand_login, ("orders:read",))
    assert form.scopes == {"orders:read": True}
    await assert_error_page(await post_decision(dgw, form.session, "allow", ["orders:read", "orders:cancel"]))
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.PENDING


async def test_s5_3_unknown_decision_is_refused(dgw_memory: Harness, brand_login: BrandLogin) -> None:
    started, form = await consent_page(dgw_memory, brand_login)
    await assert_error_page(await post_decision(dgw_memory, form.session, "maybe", ["orders:read"]))
    assert await status_of(dgw_memory, started["user_code"]) is AuthorizationStatus.PENDING


async def _grant(
    gw: Harness, login: BrandLogin, scopes: tuple[str, ...], *, sub: str = "alice"
) -> dict[str, Any]:
    """A live grant of :data:`CONSENT_USER` to the test PA's ``sub`` for ``scopes``: its token answer."""
    started = await device_authorization(gw, scopes, sub=sub)
    form = parse_consent_form(await (await sign_in(gw, login, started["user_code"])).text())
    assert (await post_decision(gw, form.session, "allow", list(scopes))).status == 303
    status, answer = await poll_token(gw, started["device_code"], sub=sub)
    assert status == 200
    return answer


async def test_s5_3_consent_is_skipped_when_a_live_grant_covers_the_request(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    await _grant(dgw, brand_login, ("orders:read", "orders:cancel"))
    started = await device_authorization(dgw, ("orders:read",))
    response = await sign_in(dgw, brand_login, started["user_code"])
    assert response.status == 303
    assert_browser_headers(response)
    # Incremental: the new token carries what the User granted before.
    assert redirect_query(response) == {"status": ["approved"], "scope": ["orders:read orders:cancel"]}
    approved = await authorization(dgw, started["user_code"])
    assert approved is not None
    assert approved.status is AuthorizationStatus.APPROVED
    assert approved.approved == ("orders:read", "orders:cancel")
    assert approved.carried == ("orders:cancel",)


async def test_rfc9700_by_default_a_spent_refresh_token_presented_at_once_revokes_and_consent_is_asked_again(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    """PACT's own suite ("rotates refresh tokens and rejects reuse", then "rejects a denied consent"):
    with the default configuration (no refresh grace) the spent token presented at once is
    ``invalid_grant`` and revokes the grant, so the next request for the same scope asks the User
    again instead of being covered by the revoked grant, and a denial there is ``access_denied``."""
    first = await _grant(dgw, brand_login, ("orders:read",))
    rotated = await refresh(dgw, first["refresh_token"])
    assert rotated.status == 200
    second = await rotated.json()
    for spent_then_newest in (first["refresh_token"], second["refresh_token"]):
        refused = await refresh(dgw, spent_then_newest)
        assert (refused.status, (await refused.json())["error"]) == (400, "invalid_grant")
    await assert_invalid_token(await dgw.send("list my orders", headers=delegated(second["access_token"])))
    started = await device_authorization(dgw, ("orders:read",))
    form = parse_consent_form(await (await sign_in(dgw, brand_login, started["user_code"])).text())
    assert form.scopes == {"orders:read": True}
    assert (await post_decision(dgw, form.session, "deny", [])).status == 303
    assert await poll_token(dgw, started["device_code"]) == (400, {"error": "access_denied"})


async def test_s5_3_consent_is_not_skipped_when_the_grant_does_not_cover_it(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    await _grant(dgw, brand_login, ("orders:read",))
    started, form = await consent_page(dgw, brand_login, ("orders:cancel",))
    assert form.scopes == {"orders:cancel": True}  # only what is asked now is shown
    assert form.keep == {"orders:read": True}  # the earlier grant's scope, shown and ticked
    response = await post_decision(dgw, form.session, "allow", ["orders:cancel"], keep=["orders:read"])
    # Step-up: the grant carries the earlier scope too, in the card's order.
    assert redirect_query(response) == {"status": ["approved"], "scope": ["orders:read orders:cancel"]}
    status, answer = await poll_token(dgw, started["device_code"])
    assert status == 200
    assert answer["scope"] == "orders:read orders:cancel"


async def test_s5_3_step_up_supersedes_the_earlier_grant_and_records_what_it_carried(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    """Issue 17 row 4: one live grant per (Brand user, agent, ``sub``). The step-up's grant replaces the
    earlier one at once: the earlier delegation and refresh tokens are refused, and the new grant says
    which scope it carried (issue 18 I3 will show it)."""
    first = await _grant(dgw, brand_login, ("orders:read",))
    assert (await dgw.send("list my orders", headers=delegated(first["access_token"]))).status == 200
    started, form = await consent_page(dgw, brand_login, ("orders:cancel",))
    decided = await post_decision(dgw, form.session, "allow", ["orders:cancel"], keep=["orders:read"])
    assert decided.status == 303
    status, second = await poll_token(dgw, started["device_code"])
    assert status == 200
    assert second["scope"] == "orders:read orders:cancel"
    await assert_invalid_token(await dgw.send("list my orders", headers=delegated(first["access_token"])))
    refused = await refresh(dgw, first["refresh_token"])
    assert refused.status == 400
    assert (await refused.json())["error"] == "invalid_grant"
    assert (await dgw.send("list my orders", headers=delegated(second["access_token"]))).status == 200
    superseded = dgw.client.app[METRICS].registry.get_sample_value(
        "pact_delegation_events_total", {"brand": "acme", "event": "grant_superseded"}
    )
    assert superseded == 1
    owner = Owner("acme", dgw.issuer, "alice").digest
    grant = await oauth_store(dgw).live_grant_of("acme", CONSENT_USER, owner, time.time())
    assert grant is not None
    assert (grant.scopes, grant.carried) == (("orders:read", "orders:cancel"), ("orders:read",))
    assert await oauth_store(dgw).grants_of_user("acme", CONSENT_USER, time.time()) == [grant]


async def test_s5_3_consent_is_not_skipped_for_another_pa_sub(dgw: Harness, brand_login: BrandLogin) -> None:
    await _grant(dgw, brand_login, tuple(SCOPES), sub="alice")
    started = await device_authorization(dgw, ("orders:read",), sub="bob")
    response = await sign_in(dgw, brand_login, started["user_code"])
    assert response.status == 200  # the page: another sub of the PA may be another person
    form = parse_consent_form(await response.text())
    decided = await post_decision(dgw, form.session, "allow", ["orders:read"])
    assert redirect_query(decided) == {"status": ["approved"], "scope": ["orders:read"]}  # nothing carried


async def test_s5_3_consent_is_not_skipped_when_the_brand_says_so(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    gw = await make_gateway(
        cache_url, edit=enable_delegation(brand_login, provider_key_pem, skip_consent=False)
    )
    await _grant(gw, brand_login, tuple(SCOPES))
    started = await device_authorization(gw, ("orders:read",))
    response = await sign_in(gw, brand_login, started["user_code"])
    assert response.status == 200
    assert parse_consent_form(await response.text()).scopes == {"orders:read": True}


async def test_s5_3_landing_url_gets_the_result_and_no_open_redirect(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    landing = "https://www.acme.test/connected?from=pact"
    gw = await make_gateway(
        cache_url, edit=enable_delegation(brand_login, provider_key_pem, landing_url=landing)
    )
    started = await device_authorization(gw, ("orders:read", "orders:cancel"))
    response = await sign_in(gw, brand_login, started["user_code"])
    assert_browser_headers(response, form_action=f"{PUBLIC_URL} https://www.acme.test")
    form = parse_consent_form(await response.text())
    urls = oauth_urls(gw)
    # Whatever the form or the URL carries, the redirect goes to the configured page only.
    fields = [
        ("session", form.session),
        ("decision", "allow"),
        ("scope", "orders:cancel"),
        ("redirect_uri", "https://evil.test/"),
        ("return_to", "https://evil.test/"),
    ]
    decided = await gw.client.post(
        local(urls.consent_decision) + "?redirect_uri=https://evil.test/&landing_url=https://evil.test/",
        data=fields,
        allow_redirects=False,
    )
    assert decided.status == 303
    assert_browser_headers(decided, form_action=f"{PUBLIC_URL} https://www.acme.test")
    location = urlsplit(decided.headers["Location"])
    assert (location.scheme, location.netloc, location.path) == ("https", "www.acme.test", "/connected")
    assert redirect_query(decided) == {"from": ["pact"], "status": ["approved"], "scope": ["orders:cancel"]}


async def landing_text(gw: Harness, decided: ClientResponse) -> str:
    """The gateway's own landing page the 303 leads to, as the browser gets it."""
    response = await gw.client.get(local(decided.headers["Location"]))
    assert response.status == 200
    assert_browser_headers(response)
    return await response.text()


async def test_s5_3_landing_page_says_connected_from_the_decision(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    _, form = await consent_page(dgw, brand_login)
    decided = await post_decision(dgw, form.session, "allow", ["orders:read", "profile:read"])
    assert len(landing_id(decided)) >= 43  # 256 random bits
    html = await landing_text(dgw, decided)
    assert "<h1>You&#x27;re connected</h1>" in html or "<h1>You're connected</h1>" in html
    assert "<title>You&#x27;re connected - Acme Support</title>" in html
    assert "<li>See your name &amp; &lt;email&gt; address</li>" in html
    assert "<li>Look up your orders and their status</li>" in html
    assert "Cancel" not in html
    # Single use: the same link again shows nothing of the decision.
    again = await (await dgw.client.get(local(decided.headers["Location"]))).text()
    assert "connected" not in again
    assert "<h1>This page has expired</h1>" in again


async def test_s5_3_landing_page_never_believes_its_query(dgw: Harness) -> None:
    """Issue 18: ``?status=approved&scope=…`` alone once showed "You're connected" with no grant;
    the page now shows only what a decision's server-side record says."""
    landing = local(oauth_urls(dgw).landing)
    for params in (
        {"status": "approved", "scope": "orders:cancel"},
        {"status": "approved", "scope": "orders:cancel", "r": "x" * 43},
        {"status": "denied"},
        {"status": "<script>alert(1)</script>", "scope": "<b>x</b> orders:read"},
    ):
        response = await dgw.client.get(landing, params=params)
        assert response.status == 200
        assert_browser_headers(response)
        html = await response.text()
        assert "<h1>This page has expired</h1>" in html
        assert "connected" not in html
        assert "Cancel" not in html
        assert "Nothing was shared" not in html
        assert "<script>" not in html
        assert "<b>" not in html


async def test_s5_3_denial_with_an_earlier_grant_says_it_still_stands(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    """Issue 18: denying a later request leaves the earlier grant live; the page says what it allows."""
    first = await _grant(dgw, brand_login, ("orders:read",))
    _, form = await consent_page(dgw, brand_login, ("orders:cancel",))
    decided = await post_decision(dgw, form.session, "deny", ["orders:cancel"], keep=["orders:read"])
    assert redirect_query(decided) == {"status": ["denied"]}
    html = await landing_text(dgw, decided)
    assert "<h1>Request declined</h1>" in html
    assert "You declined this request, so nothing new was shared." in html
    assert "Your earlier approval still stands" in html
    assert "<li>Look up your orders and their status</li>" in html
    assert "cannot act for you" not in html
    assert (await dgw.send("list my orders", headers=delegated(first["access_token"]))).status == 200


async def test_s5_3_denial_without_a_grant_says_nothing_was_shared(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    _, form = await consent_page(dgw, brand_login)
    html = await landing_text(dgw, await post_decision(dgw, form.session, "deny", list(SCOPES)))
    assert "<h1>Nothing was shared</h1>" in html
    assert "You declined this request, so nothing new was shared." in html
    assert "Your assistant cannot act for you with Acme Support." in html


async def test_s5_3_allow_with_nothing_ticked_says_precisely_what_happened(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    """Issue 18: not "You declined" but what the person did, and that it counted as declining."""
    _, form = await consent_page(dgw, brand_login)
    html = await landing_text(dgw, await post_decision(dgw, form.session, "allow", []))
    assert "You pressed Allow with nothing ticked, so this request was declined" in html
    assert "You declined" not in html


async def test_s5_3_step_up_shows_carried_scopes_and_drops_the_unticked(
    dgw: Harness, brand_login: BrandLogin
) -> None:
    """Issue 18 I3: the earlier grant's scopes are listed, ticked, and unticking one drops it from the
    new grant (which supersedes the earlier one); the landing page says what it can no longer do."""
    await _grant(dgw, brand_login, ("orders:read", "profile:read"))
    started, form = await consent_page(dgw, brand_login, ("orders:cancel",))
    assert form.scopes == {"orders:cancel": True}
    assert form.keep == {"orders:read": True, "profile:read": True}
    decided = await post_decision(dgw, form.session, "allow", ["orders:cancel"], keep=["profile:read"])
    assert redirect_query(decided) == {"status": ["approved"], "scope": ["orders:cancel profile:read"]}
    html = await landing_text(dgw, decided)
    assert "can no longer:</p>\n<ul>\n<li>Look up your orders and their status</li>" in html
    assert "kept from your earlier approval:</p>\n<ul>\n<li>See your name" in html
    status, answer = await poll_token(dgw, started["device_code"])
    assert status == 200
    assert answer["scope"] == "orders:cancel profile:read"
    owner = Owner("acme", dgw.issuer, "alice").digest
    grant = await oauth_store(dgw).live_grant_of("acme", CONSENT_USER, owner, time.time())
    assert grant is not None
    assert (grant.scopes, grant.carried) == (("orders:cancel", "profile:read"), ("profile:read",))


async def test_s5_3_a_keep_not_offered_is_not_granted(dgw_memory: Harness, brand_login: BrandLogin) -> None:
    """``keep`` only narrows what the earlier grant holds: it never adds a scope."""
    _, form = await consent_page(dgw_memory, brand_login, ("orders:read",))
    assert form.keep == {}
    decided = await post_decision(dgw_memory, form.session, "allow", ["orders:read"], keep=["orders:cancel"])
    assert redirect_query(decided) == {"status": ["approved"], "scope": ["orders:read"]}


async def test_s5_3_consent_page_names_agent_code_and_account(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Issue 18: the registered agent's name, its host, the RFC 8628 §3.3.1 ``user_code`` and the
    signed-in account (the login's display claim, escaped, else ``sub``)."""
    delegate = enable_delegation(brand_login, provider_key_pem)

    def edit(raw: dict[str, Any]) -> None:
        delegate(raw)
        raw["personal_agents"]["registered"][0]["name"] = "Jane's <Helper>"

    gw = await make_gateway(cache_url, edit=edit)
    started = await device_authorization(gw)
    claims = {DISPLAY_CLAIM: "jane@example.com <b>"}
    html = await (await sign_in(gw, brand_login, started["user_code"], claims=claims)).text()
    assert '<span class="who">Jane&#x27;s &lt;Helper&gt;</span>' in html
    assert f'at <span class="who">{gw.issuer}</span>' in html
    assert f'<span class="code">{started["user_code"]}</span>' in html
    assert 'Signed in to Acme Support as <span class="who">jane@example.com &lt;b&gt;</span>' in html
    plain = await device_authorization(gw)
    html = await (await sign_in(gw, brand_login, plain["user_code"])).text()
    assert f'as <span class="who">{CONSENT_USER}</span>' in html  # no display claim: the sub
    unusable = await device_authorization(gw)
    bad = {DISPLAY_CLAIM: "a\nb"}
    html = await (await sign_in(gw, brand_login, unusable["user_code"], claims=bad)).text()
    assert f'as <span class="who">{CONSENT_USER}</span>' in html


async def test_s5_3_help_text_is_tied_to_the_form(dgw_memory: Harness, brand_login: BrandLogin) -> None:
    """Issue 18 (accessibility): the help comes before the buttons and describes the form."""
    started = await device_authorization(dgw_memory)
    html = await (await sign_in(dgw_memory, brand_login, started["user_code"])).text()
    assert '<form method="post"' in html
    assert 'aria-describedby="consent-help"' in html
    assert html.index('id="consent-help"') < html.index("<button")
    assert "<title>Allow access to your Acme Support account? - Acme Support</title>" in html


async def test_s5_3_get_on_the_consent_url_is_a_page_not_a_bare_405(dgw: Harness) -> None:
    """Issue 18: opened by hand, the consent URL explains where to start (still 405, Allow: POST)."""
    response = await dgw.client.get(local(oauth_urls(dgw).consent), params={"user_code": "WDJB-MJHT"})
    assert response.status == 405
    assert response.headers["Allow"] == "POST"
    assert_browser_headers(response)
    html = await response.text()
    assert "<h1>Open this from your assistant</h1>" in html
    assert "This page only works when Acme Support's sign-in page sends you here." in html


async def test_s5_3_assertion_marker_outlives_exp_by_the_clock_skew(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Issue 18 I5: a used ``jti`` is remembered until ``exp`` + the §3.2 30 s skew, so a replica whose
    clock is behind still refuses the replay."""
    clock = ManualClock(float(int(time.time())))
    gw = await make_gateway(cache_url, edit=enable_delegation(brand_login, provider_key_pem), clock=clock)
    started = await device_authorization(gw)
    assertion = brand_login.assertion(
        user=CONSENT_USER, user_code=started["user_code"], audience=oauth_urls(gw).consent,
        jti="jti-skew", iat=clock(), ttl=120,
    )  # fmt: skip
    assert (await post_assertion(gw, assertion)).status == 200
    marker = code_hash(f"{brand_login.issuer}\0jti-skew")
    clock.advance(120 + MAX_CLOCK_SKEW - 1)
    assert not await oauth_store(gw).use_once("acme", marker, 1)  # still remembered
    clock.advance(2)
    assert await oauth_store(gw).use_once("acme", marker, 1)


async def test_s5_3_brand_without_delegation_is_404(dgw: Harness, brand_login: BrandLogin) -> None:
    urls = oauth_urls(dgw, "globex")
    assertion = brand_login.assertion(user=CONSENT_USER, user_code="BCDF-GHJK", audience=urls.consent)
    for response in (
        await dgw.client.post(local(urls.consent), data={"assertion": assertion}),
        await dgw.client.post(local(urls.consent_decision), data={"session": "x", "decision": "allow"}),
        await dgw.client.get(local(urls.landing)),
        await dgw.client.get(local(oauth_urls(dgw, "nobody").landing)),
    ):
        assert response.status == 404
        assert "Content-Security-Policy" not in response.headers


async def test_s5_3_rs256_login_key_is_accepted_and_hs256_is_refused(
    make_gateway: MakeGateway, provider_key_pem: str
) -> None:
    login = BrandLogin(PAKey.rs256(kid="login-rsa"))
    gw = await make_gateway(edit=enable_delegation(login, provider_key_pem))
    started = await device_authorization(gw)
    consent_url = oauth_urls(gw).consent
    # Algorithm confusion: HMAC keyed with the published public key.
    forged = login.key.mint(
        login.issuer,
        CONSENT_USER,
        consent_url,
        alg="HS256",
        extra_claims={"user_code": started["user_code"]},
    )
    await assert_error_page(await gw.client.post(local(consent_url), data={"assertion": forged}))
    assert (await sign_in(gw, login, started["user_code"])).status == 200


async def test_s5_3_login_keys_are_fetched_from_the_brand_jwks_uri(
    make_gateway: MakeGateway, cache_url: str, jwks_server: FakeJwksServer, provider_key_pem: str
) -> None:
    login = BrandLogin(PAKey.es256(kid="login-fetched"))
    jwks_server.add_key(login.key)
    delegate = enable_delegation(login, provider_key_pem)

    def edit(raw: dict[str, Any]) -> None:
        delegate(raw)
        raw["brands"][0]["delegation"]["login"] = {
            "url": LOGIN_URL,
            "issuer": login.issuer,
            "jwks_uri": jwks_server.jwks_uri,
        }

    gw = await make_gateway(cache_url, edit=edit)
    started = await device_authorization(gw)
    assert (await sign_in(gw, login, started["user_code"])).status == 200
    # A key the Brand does not publish stays unknown after the refetch an unknown kid allows.
    stranger = BrandLogin(PAKey.es256(kid="login-unpublished"))
    await assert_error_page(await sign_in(gw, stranger, started["user_code"]))


async def test_s5_3_assertion_needs_iat_exp_and_a_brand_user(dgw: Harness, brand_login: BrandLogin) -> None:
    started = await device_authorization(dgw)
    consent_url = oauth_urls(dgw).consent
    claims = {"user_code": started["user_code"]}
    for assertion in (
        brand_login.key.mint(brand_login.issuer, CONSENT_USER, consent_url, iat=OMIT, extra_claims=claims),
        brand_login.key.mint(brand_login.issuer, CONSENT_USER, consent_url, exp=OMIT, extra_claims=claims),
        brand_login.key.mint(brand_login.issuer, "", consent_url, extra_claims=claims),
        brand_login.key.mint(brand_login.issuer, OMIT, consent_url, extra_claims=claims),
        brand_login.key.mint(brand_login.issuer, CONSENT_USER, [consent_url], extra_claims=claims),
    ):
        await assert_error_page(await dgw.client.post(local(consent_url), data={"assertion": assertion}))
    assert await status_of(dgw, started["user_code"]) is AuthorizationStatus.PENDING


async def test_s5_3_store_failure_is_a_try_again_page(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str, unused_tcp_port: int
) -> None:
    """No store, no decision: a page saying so (with the same headers), never a JSON envelope."""
    gw = await make_gateway(
        f"redis://127.0.0.1:{unused_tcp_port}/0", edit=enable_delegation(brand_login, provider_key_pem)
    )
    response = await sign_in(gw, brand_login, "BCDF-GHJK")
    assert response.status == 503
    assert_browser_headers(response)
    assert "Something went wrong on our side" in await response.text()
    decided = await post_decision(gw, "BCDF-GHJK.x", "allow", ["orders:read"])
    assert decided.status == 503
    assert_browser_headers(decided)
