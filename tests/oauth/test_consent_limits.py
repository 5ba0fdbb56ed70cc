"""RFC 8628 §5.1 and docs/operations.md's rules for the §5.3 endpoints, over HTTP on both stores.

Wrong ``user_code``s at the consent hand-off are counted per Brand login user, per client
address and per Brand; past a budget the hand-off is paused with one page whatever the code
(not an oracle), and the pause holds across gateways sharing a Redis. Login assertions and
consent decisions are limited per client address (the address a trusted proxy names, and
only then), device authorizations per (personal agent, ``sub``), and a refused assertion is
remembered so that posting it again costs no signature check.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import ClientResponse

from gateway.auth import signature
from gateway.http.state import METRICS
from gateway.store.oauth import AuthorizationStatus
from tests.oauth.test_consent import assert_browser_headers, assert_error_page
from tests.support.consent import (
    CONSENT_USER,
    device_authorization,
    local,
    oauth_urls,
    parse_consent_form,
    post_decision,
    status_of,
)
from tests.support.delegation import BrandLogin, enable_delegation, post_form
from tests.support.gateway import Harness, MakeGateway
from tests.support.pa import ManualClock, PAKey

PAUSED_TEXT = "Too many attempts"
PROXIES = ["127.0.0.1", "10.0.0.0/8"]
"""The test client, and the Ingress behind it that :func:`hand_off` names as the last hop."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def limited(
    login: BrandLogin, pem: str, *, trusted: list[str] | None = None, **rules: dict[str, Any]
) -> Callable[[dict[str, Any]], None]:
    """``acme`` delegates, with ``rules`` under ``rate_limits`` and ``trusted`` proxies."""
    delegate = enable_delegation(login, pem)

    def edit(raw: dict[str, Any]) -> None:
        delegate(raw)
        raw.setdefault("rate_limits", {}).update(rules)
        if trusted is not None:
            raw.setdefault("listen", {})["trusted_proxies"] = trusted

    return edit


def wrong_code(started: dict[str, Any], n: int = 0) -> str:
    """A well-formed ``user_code`` that is not the one ``started`` names."""
    code = f"BCDF-GH{'JKLMNPQRST'[n]}{'VWXZ'[n % 4]}"
    return code if code != started["user_code"] else "ZZZZ-ZZZZ"


async def hand_off(
    gw: Harness,
    login: BrandLogin,
    user_code: str,
    *,
    user: str = CONSENT_USER,
    address: str | None = None,
    clock: ManualClock | None = None,
    assertion: str | None = None,
) -> ClientResponse:
    """The Brand login's hand-off, through a proxy naming ``address`` when one is given."""
    if assertion is None:
        iat = None if clock is None else clock.now
        assertion = login.assertion(user=user, user_code=user_code, audience=oauth_urls(gw).consent, iat=iat)
    headers = {} if address is None else {"X-Forwarded-For": f"{address}, 10.1.2.3"}
    return await gw.client.post(
        local(oauth_urls(gw).consent), data={"assertion": assertion}, headers=headers, allow_redirects=False
    )


async def assert_paused(response: ClientResponse) -> str:
    """The pause: ``429``, ``Retry-After``, the browser headers and the one page; its text."""
    assert response.status == 429, await response.text()
    assert int(response.headers["Retry-After"]) >= 1
    assert_browser_headers(response)
    text = await response.text()
    assert PAUSED_TEXT in text
    assert "Nothing was shared" in text
    return text


def rate_limited(gw: Harness, limit: str) -> float:
    value = gw.client.app[METRICS].registry.get_sample_value(
        "pact_rate_limited_total", {"brand": "acme", "limit": limit}
    )
    return value or 0.0


async def test_rfc8628_5_1_wrong_codes_pause_the_brand_user_whatever_the_next_code(
    make_gateway: MakeGateway,
    cache_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    edit = limited(brand_login, provider_key_pem, wrong_user_code_per_user={"rate": 0.01, "burst": 3})
    gw = await make_gateway(cache_url, edit=edit, clock=clock)
    started = await device_authorization(gw)
    with caplog.at_level(logging.INFO, logger="gateway.oauth.consent"):
        for n in range(3):
            await assert_error_page(await hand_off(gw, brand_login, wrong_code(started, n)))
        right = await assert_paused(await hand_off(gw, brand_login, started["user_code"]))
        wrong = await assert_paused(await hand_off(gw, brand_login, wrong_code(started, 3)))
    assert right == wrong  # the same page whether the code exists or not: nothing to learn
    assert await status_of(gw, started["user_code"]) is AuthorizationStatus.PENDING
    assert rate_limited(gw, "wrong_user_code_per_user") == 2
    events = gw.client.app[METRICS].registry.get_sample_value(
        "pact_delegation_events_total", {"brand": "acme", "event": "wrong_user_code"}
    )
    assert events == 3
    (spent,) = [record for record in caplog.records if "budget spent" in record.getMessage()]
    assert spent.levelno == logging.WARNING
    assert "wrong_user_code_per_user" in spent.getMessage()
    assert CONSENT_USER not in caplog.text  # the Brand user only as a digest, never a code
    assert started["user_code"] not in caplog.text
    assert wrong_code(started) not in caplog.text
    # Another Brand user at the same address is not paused by this one's mistakes.
    assert (await hand_off(gw, brand_login, started["user_code"], user="bob-2231")).status == 200
    # After the pause (one wrong code refilled, 100 s) the user may try again.
    again = await device_authorization(gw)
    clock.advance(101)
    assert (await hand_off(gw, brand_login, again["user_code"], clock=clock)).status == 200


async def test_rfc8628_5_1_wrong_codes_pause_the_client_address(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    edit = limited(
        brand_login,
        provider_key_pem,
        trusted=PROXIES,
        wrong_user_code_per_address={"rate": 0.001, "burst": 3},
    )
    gw = await make_gateway(cache_url, edit=edit)
    started = await device_authorization(gw)
    guesser = "203.0.113.7"
    for n in range(3):  # one Brand account each: only the address ties them together
        response = await hand_off(gw, brand_login, wrong_code(started, n), user=f"u-{n}", address=guesser)
        await assert_error_page(response)
    await assert_paused(await hand_off(gw, brand_login, started["user_code"], user="u-9", address=guesser))
    assert rate_limited(gw, "wrong_user_code_per_address") == 1
    # The person the code belongs to, at their own address, is not paused.
    own = await hand_off(gw, brand_login, started["user_code"], address="198.51.100.20")
    assert own.status == 200


def wrong_code_lookups(gw: Harness) -> float:
    """Wrong codes looked up so far (each a miss counted once, after its look-up)."""
    value = gw.client.app[METRICS].registry.get_sample_value(
        "pact_delegation_events_total", {"brand": "acme", "event": "wrong_user_code"}
    )
    return value or 0.0


async def test_rfc8628_5_1_concurrent_wrong_codes_look_up_no_more_than_the_user_budget(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Issue 28 M1: the token is reserved before the look-up, atomically. Looked at in one round
    trip and spent in a third, 20 concurrent wrong codes of one account at one address were all
    looked up on Redis (budgets 5 per user, 10 per address)."""
    edit = limited(
        brand_login,
        provider_key_pem,
        trusted=PROXIES,
        wrong_user_code_per_user={"rate": 0.001, "burst": 5},
        wrong_user_code_per_address={"rate": 0.001, "burst": 10},
    )
    gw = await make_gateway(cache_url, edit=edit)
    started = await device_authorization(gw)
    guesses = [
        hand_off(gw, brand_login, wrong_code(started, n % 10), address="203.0.113.7") for n in range(20)
    ]
    statuses = sorted(response.status for response in await asyncio.gather(*guesses))
    assert statuses == [400] * 5 + [429] * 15
    assert wrong_code_lookups(gw) == 5
    assert rate_limited(gw, "wrong_user_code_per_user") == 15


async def test_rfc8628_5_1_concurrent_wrong_codes_from_many_accounts_look_up_no_more_than_the_brand_budget(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Issue 28 M1, spread out: 40 concurrent wrong codes from 8 accounts × 8 addresses against a
    Brand budget of 10 (no grace: every subject tries at once) are looked up 10 times, not 40."""
    edit = limited(
        brand_login,
        provider_key_pem,
        trusted=PROXIES,
        wrong_user_code_per_brand={"rate": 0.001, "burst": 10},
        wrong_user_code_grace={"enabled": False},
    )
    gw = await make_gateway(cache_url, edit=edit)
    started = await device_authorization(gw)
    guesses = [
        hand_off(gw, brand_login, wrong_code(started, n % 10), user=f"u-{n % 8}", address=f"192.0.2.{n // 5}")
        for n in range(40)
    ]
    statuses = sorted(response.status for response in await asyncio.gather(*guesses))
    assert statuses == [400] * 10 + [429] * 30
    assert wrong_code_lookups(gw) == 10
    assert rate_limited(gw, "wrong_user_code_per_brand") == 30


async def test_rfc8628_5_1_an_attacker_keeping_the_brand_budget_spent_does_not_refuse_an_honest_user(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Issue 28 M2: the Brand's budget, spent by misses only, pauses the accounts and addresses that
    missed recently, never a User who has not: before, it refused every hand-off at the Brand."""
    edit = limited(
        brand_login,
        provider_key_pem,
        trusted=PROXIES,
        wrong_user_code_per_brand={"rate": 0.001, "burst": 3},
    )
    gw = await make_gateway(cache_url, edit=edit)
    started = await device_authorization(gw)
    for n in range(3):  # a search spread over accounts and addresses spends the Brand's budget
        response = await hand_off(
            gw, brand_login, wrong_code(started, n), user=f"u-{n}", address=f"192.0.2.{n}"
        )
        await assert_error_page(response)
    # The attacker goes on: an account or an address that missed is paused, whichever it pairs with.
    for user, address in [("u-0", "192.0.2.0"), ("u-0", "192.0.2.9"), ("u-9", "192.0.2.1")]:
        await assert_paused(
            await hand_off(gw, brand_login, wrong_code(started, 4), user=user, address=address)
        )
    # The User whose code it is, at their own address, is served, and again for a second device.
    assert (await hand_off(gw, brand_login, started["user_code"], address="198.51.100.20")).status == 200
    again = await device_authorization(gw, sub="bob")
    assert (await hand_off(gw, brand_login, again["user_code"], address="198.51.100.20")).status == 200
    # A fresh account at a fresh address gets one try (its grace), then both are paused.
    await assert_error_page(
        await hand_off(gw, brand_login, wrong_code(started, 5), user="u-7", address="192.0.2.7")
    )
    await assert_paused(
        await hand_off(gw, brand_login, started["user_code"], user="u-7", address="192.0.2.7")
    )
    await assert_paused(
        await hand_off(gw, brand_login, started["user_code"], user="u-8", address="192.0.2.7")
    )
    assert wrong_code_lookups(gw) == 4
    assert rate_limited(gw, "wrong_user_code_per_brand") == 5


async def test_rfc8628_5_1_the_brand_guessing_bound_holds_with_the_grace(
    make_gateway: MakeGateway,
    cache_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> None:
    """THREAT_MODEL.md F1's bound: over T seconds a Brand looks up at most
    burst_B + rate_B·T + min(accounts, addresses)·(1 + T/W) wrong codes, W the grace interval,
    however an attacker spreads its guesses (here every pair of 4 accounts × 3 addresses, each
    50 s for 2,000 s: 492 guesses)."""
    brand_rate, brand_burst, grace_interval, accounts, addresses, period = 0.01, 3, 1000.0, 4, 3, 2000.0
    edit = limited(
        brand_login,
        provider_key_pem,
        trusted=PROXIES,
        wrong_user_code_per_user={"rate": 10, "burst": 100},
        wrong_user_code_per_address={"rate": 10, "burst": 100},
        wrong_user_code_per_brand={"rate": brand_rate, "burst": brand_burst},
        wrong_user_code_grace={"rate": 1 / grace_interval, "burst": 1},
        login_assertion={"rate": 10, "burst": 100},
    )
    gw = await make_gateway(cache_url, edit=edit, clock=clock)
    started = await device_authorization(gw)
    guesses = 0
    for tick in range(int(period / 50) + 1):
        for user in range(accounts):
            for address in range(addresses):
                response = await hand_off(
                    gw,
                    brand_login,
                    wrong_code(started, tick % 10),
                    user=f"u-{user}",
                    address=f"192.0.2.{address}",
                    clock=clock,
                )
                assert response.status in {400, 429}
                guesses += 1
        clock.advance(50)
    bound = brand_burst + brand_rate * period + min(accounts, addresses) * (1 + period / grace_interval)
    assert guesses == 492
    assert brand_burst + brand_rate * period <= wrong_code_lookups(gw) <= bound


async def test_rfc8628_5_1_a_pause_holds_across_two_gateways_on_one_redis(
    make_gateway: MakeGateway, redis_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    edit = limited(brand_login, provider_key_pem, wrong_user_code_per_user={"rate": 0.001, "burst": 2})
    one = await make_gateway(redis_url, edit=edit)
    two = await make_gateway(redis_url, edit=edit)
    started = await device_authorization(one)
    await assert_error_page(await hand_off(one, brand_login, wrong_code(started, 0)))
    await assert_error_page(await hand_off(two, brand_login, wrong_code(started, 1)))
    await assert_paused(await hand_off(one, brand_login, started["user_code"]))
    await assert_paused(await hand_off(two, brand_login, started["user_code"]))
    assert await status_of(two, started["user_code"]) is AuthorizationStatus.PENDING


async def test_readme_login_assertions_are_limited_per_client_address(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    edit = limited(
        brand_login, provider_key_pem, trusted=PROXIES, login_assertion={"rate": 0.001, "burst": 2}
    )
    gw = await make_gateway(cache_url, edit=edit)
    started = await device_authorization(gw)
    for _ in range(2):
        await assert_error_page(await hand_off(gw, brand_login, "", assertion="junk", address="192.0.2.1"))
    await assert_paused(await hand_off(gw, brand_login, started["user_code"], address="192.0.2.1"))
    assert rate_limited(gw, "login_assertion") == 1
    # Another client address, as the trusted proxy names it, has its own budget.
    assert (await hand_off(gw, brand_login, started["user_code"], address="192.0.2.2")).status == 200


async def test_readme_an_ipv6_client_is_limited_by_its_64_whatever_its_address_or_zone(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Issue 28 L2: per-address limits count an IPv6 client by its /64 (``listen.ipv6_prefix``) and
    ignore zone ids; keyed by the full address, every address of one /64 had a budget of its own."""
    edit = limited(
        brand_login, provider_key_pem, trusted=PROXIES, login_assertion={"rate": 0.001, "burst": 1}
    )
    gw = await make_gateway(cache_url, edit=edit)
    started = await device_authorization(gw)
    await assert_error_page(await hand_off(gw, brand_login, "", assertion="junk", address="2001:db8:1:2::1"))
    for address in ("2001:db8:1:2:ffff::9", "[2001:db8:1:2::2]:4711"):
        await assert_paused(await hand_off(gw, brand_login, started["user_code"], address=address))
    await assert_error_page(await hand_off(gw, brand_login, "", assertion="junk", address="fe80::1%eth0"))
    await assert_paused(await hand_off(gw, brand_login, started["user_code"], address="fe80::1%eth1"))
    # The next /64 is another client.
    assert (await hand_off(gw, brand_login, started["user_code"], address="2001:db8:1:3::1")).status == 200


async def test_readme_a_forwarded_address_is_believed_only_from_a_trusted_proxy(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    edit = limited(brand_login, provider_key_pem, login_assertion={"rate": 0.001, "burst": 1})
    gw = await make_gateway(edit=edit)  # no trusted_proxies: X-Forwarded-For is the client's word
    await assert_error_page(await hand_off(gw, brand_login, "", assertion="junk", address="192.0.2.1"))
    await assert_paused(await hand_off(gw, brand_login, "", assertion="junk", address="192.0.2.2"))


async def test_readme_consent_decisions_are_limited_per_client_address(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    edit = limited(brand_login, provider_key_pem, consent_decision={"rate": 0.001, "burst": 1})
    gw = await make_gateway(cache_url, edit=edit)
    started = await device_authorization(gw)
    form = parse_consent_form(await (await hand_off(gw, brand_login, started["user_code"])).text())
    await assert_error_page(await post_decision(gw, "BCDF-GHJK.forged", "allow", ["orders:read"]))
    await assert_paused(await post_decision(gw, form.session, "allow", ["orders:read"]))
    assert rate_limited(gw, "consent_decision") == 1
    assert await status_of(gw, started["user_code"]) is AuthorizationStatus.PENDING


async def test_readme_device_authorizations_are_limited_per_agent_and_sub(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    edit = limited(brand_login, provider_key_pem, device_authorization={"rate": 0.001, "burst": 2})
    gw = await make_gateway(cache_url, edit=edit)
    for _ in range(2):
        await device_authorization(gw)
    form = {"client_id": gw.issuer, "scope": "orders:read"}
    refused = await post_form(gw, "device_authorization", form)
    assert refused.status == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.headers["Content-Type"] == "application/json"
    assert refused.headers["Cache-Control"] == "no-store"
    assert (await refused.json())["error"] == "slow_down"
    assert rate_limited(gw, "device_authorization") == 1
    await device_authorization(gw, sub="bob")  # another User of the same personal agent


class CountingSignatures:
    """The real signature check, counted: how often an assertion's signature was verified."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls = 0

    def decode(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.real.decode(*args, **kwargs)


async def test_readme_a_refused_assertion_is_remembered_like_a_refused_agent_jwt(
    dgw: Harness, brand_login: BrandLogin, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = CountingSignatures(signature.SIGNATURE_ONLY)
    monkeypatch.setattr("gateway.oauth.login.SIGNATURE_ONLY", counting)
    started = await device_authorization(dgw)
    # Signed by another key under the login's own kid: it costs a signature check to refuse.
    forged = brand_login.assertion(
        user=CONSENT_USER,
        user_code=started["user_code"],
        audience=oauth_urls(dgw).consent,
        key=PAKey.es256(kid=brand_login.key.kid),
    )
    for _ in range(3):
        await assert_error_page(await hand_off(dgw, brand_login, "", assertion=forged))
    assert counting.calls == 1
    # A good assertion is still checked (and only refusals are remembered).
    assert (await hand_off(dgw, brand_login, started["user_code"])).status == 200
    assert counting.calls == 2
