"""RFC 9396 at the turn, over HTTP on memory, Redis and a Redis Cluster: the bot is told the token's
authorization details (both adapters that carry delegation), an action bound to a resource is signed
only when an approved detail covers it and its receipt names that detail, and anything not covered is
a §5.5 step-up asking for exactly the details needed, with the gateway's sentence, never the bot's."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import jwt
import orjson
import pytest
from aiohttp import ClientResponse

from examples.sample_bot.bot import order_detail
from gateway.app import reload_runtime
from gateway.handlers.state import METRICS
from gateway.turns import STEP_UP_FOR_DETAILS
from tests.support.delegation import (
    BRAND_USER,
    BrandLogin,
    delegated,
    oauth_path,
    oauth_server,
    obtain_tokens,
    poll_token,
)
from tests.support.fake_http_bot import FakeHttpBot
from tests.support.gateway import Harness, MakeGateway
from tests.support.rar import (
    ADDRESS_TYPE,
    ORDER,
    approve_details_via_store,
    canonical,
    enable_details,
    obtain_tokens_with_details,
    order,
)

A2A_JSON = "application/a2a+json"
INTERNAL = (500, "INTERNAL")


@pytest.fixture
async def rgw(
    make_gateway: MakeGateway, delegation_store_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> Harness:
    """A gateway whose ``acme`` accepts the order and address detail types (tests/support/rar.py), in
    front of the sample bot binding each cancellation to one order."""
    gateway = await make_gateway(delegation_store_url, edit=enable_details(brand_login, provider_key_pem))
    gateway.bot.order_bound = frozenset({"acme"})
    return gateway


async def token_for(h: Harness, scopes: tuple[str, ...], *details: dict[str, Any]) -> str:
    answer = await (obtain_tokens_with_details(h, scopes, details) if details else obtain_tokens(h, scopes))
    token: str = answer["access_token"]
    return token


async def body_of(response: ClientResponse) -> dict[str, Any]:
    raw = await response.read()
    assert response.status == 200, raw
    assert response.headers["Content-Type"] == A2A_JSON
    body: dict[str, Any] = orjson.loads(raw)
    return body


async def error_of(response: ClientResponse) -> tuple[int, str]:
    body = orjson.loads(await response.read())
    return response.status, body["error"]["details"][0]["reason"]


def events(h: Harness, event: str) -> float:
    value = h.client.app[METRICS].registry.get_sample_value(
        "pact_delegation_events_total", {"brand": "acme", "event": event}
    )
    return value or 0.0


async def verified_claims(h: Harness, receipt: dict[str, Any]) -> dict[str, Any]:
    """§5.6 as a personal agent checks it: the JWS against the published keys, its payload the claims."""
    jwks = await (await h.client.get(oauth_path("jwks.json"))).json()
    keys = {key.key_id: key for key in jwt.PyJWKSet.from_dict(jwks).keys}
    key = keys[jwt.get_unverified_header(receipt["jws"])["kid"]]
    claims: dict[str, Any] = orjson.loads(jwt.api_jws.decode(receipt["jws"], key.key, algorithms=["ES256"]))
    assert claims == receipt["claims"]
    return claims


def bound_reply(used: dict[str, Any], text: str = "Order A-10003 is cancelled.") -> dict[str, Any]:
    """A bot's reply saying it acted on the resource ``used`` names."""
    return {
        "text": text,
        "actions": [
            {"tool": "cancel_order", "args": {"order": used["identifier"]}, "authorization_detail": used}
        ],
        "scopes_used": ["orders:cancel"],
    }


# --- what the bot is told -------------------------------------------------------------------------------


async def test_rfc9396_the_bot_is_told_the_tokens_details_as_approved(rgw: Harness) -> None:
    token = await token_for(rgw, ("orders:read", "orders:cancel"), order("A-10002", actions=["cancel"]))
    await body_of(await rgw.send("list my orders", headers=delegated(token)))
    assert rgw.bot.calls[-1].body["delegation"] == {
        "user": BRAND_USER,
        "scopes": ["orders:read", "orders:cancel"],
        "grant_id": rgw.bot.calls[-1].body["delegation"]["grant_id"],
        "authorization_details": [order_detail("A-10002")],
    }


async def test_rfc9396_the_mapped_http_bot_is_told_them_and_reports_bound_actions(
    make_gateway: MakeGateway,
    delegation_store_url: str,
    fake_http_bot: FakeHttpBot,
    brand_login: BrandLogin,
    provider_key_pem: str,
) -> None:
    """``adapter: http``: ``{{delegation_authorization_details}}`` out; ``requires_authorization_details``
    and an action's ``authorization_detail`` back, under the same rules as the ``pact`` contract."""
    details = enable_details(brand_login, provider_key_pem)

    def edit(raw: dict[str, Any]) -> None:
        details(raw)
        raw["brands"][0]["upstream"] = {
            "adapter": "http",
            "url": fake_http_bot.url(),
            "timeout": 1.0,
            "http": {
                "method": "PUT",
                "body": {"text": "{{text}}", "bound": "{{delegation_authorization_details}}"},
                "reply": {
                    "text": "say",
                    "actions": "did",
                    "scopes_used": "used",
                    "requires_authorization_details": "needs",
                },
            },
        }

    gw = await make_gateway(delegation_store_url, edit=edit)
    token = await token_for(gw, ("orders:cancel",), order("A-10002"))
    fake_http_bot.answer = {
        "say": "Cancelled A-10002.",
        "did": [{"tool": "cancel_order", "authorization_detail": order_detail("A-10002")}],
        "used": ["orders:cancel"],
    }
    message = (await body_of(await gw.send("cancel A-10002", headers=delegated(token))))["message"]
    assert fake_http_bot.calls[-1].body["bound"] == [order("A-10002")]
    (action,) = message["metadata"]["pact.receipt"]["claims"]["actions"]
    assert action["authorizationDetail"] == order("A-10002")
    fake_http_bot.answer = {"say": "May I?", "needs": [order_detail("A-10003")]}
    task = (await body_of(await gw.send("cancel A-10003", headers=delegated(token))))["task"]
    assert task["metadata"]["pact.authorizationDetails"] == [order_detail("A-10003")]
    # No token: the list is null, as every delegation placeholder.
    fake_http_bot.answer = {"say": "Hello."}
    await body_of(await gw.send("hello"))
    assert fake_http_bot.calls[-1].body["bound"] is None


async def test_rfc9396_a_type_removed_from_the_configuration_is_not_told_and_covers_nothing(
    rgw: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """A reload that drops the order type while a token carries an order: the bot is not told it
    may act on it, and an action naming it is one its Brand does not accept (``INTERNAL``)."""
    token = await token_for(rgw, ("orders:cancel", "profile:read"), order("A-10002"), {**ADDRESS_DETAIL})
    acme = rgw.config.brands["acme"]
    assert acme.delegation is not None
    kept = {ADDRESS_TYPE["type"]: acme.delegation.authorization_details[ADDRESS_TYPE["type"]]}
    brand = dataclasses.replace(
        acme, delegation=dataclasses.replace(acme.delegation, authorization_details=kept)
    )
    reload_runtime(
        rgw.client.app, dataclasses.replace(rgw.config, brands={**rgw.config.brands, "acme": brand})
    )
    rgw.bot.mode = "fixed"
    rgw.bot.fixed_reply = bound_reply(order_detail("A-10002"), "Order A-10002 is cancelled.")
    with caplog.at_level(logging.ERROR, logger="pact_gateway.turns"):
        assert await error_of(await rgw.send("cancel A-10002", headers=delegated(token))) == INTERNAL
    assert rgw.bot.calls[-1].body["delegation"]["authorization_details"] == [ADDRESS_DETAIL]
    assert any("an action's authorization_detail" in record.getMessage() for record in caplog.records)


ADDRESS_DETAIL = {"identifier": "home", "type": "https://acme.example/rar/address"}


# --- a bound action -------------------------------------------------------------------------------------


async def test_rfc9396_a_covered_action_is_signed_and_its_receipt_names_the_granted_detail(
    rgw: Harness,
) -> None:
    """The sample bot cancels the one order its detail allows; the receipt names the detail the person
    approved (without ``actions``: the type's), not the one the bot reported."""
    token = await token_for(rgw, ("orders:cancel",), order("A-10001", actions=["refund"]), order("A-10002"))
    signed = events(rgw, "receipt_signed")
    message = (await body_of(await rgw.send("cancel A-10002", headers=delegated(token))))["message"]
    assert message["parts"] == [{"text": "Order A-10002 is cancelled. The refund posts in 3-5 days."}]
    claims = await verified_claims(rgw, message["metadata"]["pact.receipt"])
    (action,) = claims["actions"]
    assert action["tool"] == "cancel_order"
    assert action["authorizationDetail"] == order("A-10002")
    assert events(rgw, "receipt_signed") == signed + 1
    # The bot reported the detail it used; the gateway named the granted one.
    assert rgw.bot.calls[-1].body["delegation"]["authorization_details"] == [
        order("A-10001", actions=["refund"]),
        order("A-10002"),
    ]


@pytest.mark.parametrize(
    ("granted", "used"),
    [
        ((order("A-10002", actions=["cancel"]),), order_detail("A-10003")),  # another order
        ((order("A-10003", actions=["refund"]),), order_detail("A-10003")),  # an action not allowed
        ((order("A-10003"),), {**order_detail("A-10003"), "reason": "late"}),  # a condition not approved
        ((), order_detail("A-10003")),  # the scope alone
    ],
    ids=["other-order", "other-action", "other-condition", "scope-only"],
)
async def test_rfc9396_an_uncovered_action_is_a_step_up_never_signed_nor_its_text_sent(
    rgw: Harness, granted: tuple[dict[str, Any], ...], used: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    token = await token_for(rgw, ("orders:cancel",), *granted)
    rgw.bot.mode = "fixed"
    rgw.bot.fixed_reply = bound_reply(used)
    signed, calls = events(rgw, "receipt_signed"), len(rgw.bot.calls)
    with caplog.at_level(logging.WARNING, logger="pact_gateway.turns"):
        response = await rgw.send("cancel A-10003", message_id="m-1", headers=delegated(token))
        raw = await response.read()
        task = (await body_of(response))["task"]
    assert b"is cancelled" not in raw
    assert task["status"]["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert task["status"]["message"]["parts"] == [{"text": STEP_UP_FOR_DETAILS}]
    metadata = task["metadata"]
    assert metadata["pact.missingScopes"] == ["orders:cancel"]
    assert metadata["pact.authorizationDetails"] == [used]
    # The step-up's device authorization asks exactly that detail, under its scope.
    server = oauth_server(rgw)
    pending = await server.store.authorization_by_user_code("acme", metadata["pact.userCode"], server.clock())
    assert pending is not None
    assert (pending.scopes, pending.details) == (("orders:cancel",), canonical(used))
    assert events(rgw, "receipt_signed") == signed
    assert events(rgw, "step_up") == 1
    (warning,) = [record for record in caplog.records if "do not cover" in record.getMessage()]
    assert "A-10003" not in warning.getMessage()
    # Nothing was stored: the same message runs the bot again.
    again = await rgw.send(
        "cancel A-10003", message_id="m-1", context_id=task["contextId"], headers=delegated(token)
    )
    assert (await body_of(again))["task"]["metadata"]["pact.authorizationDetails"] == [used]
    assert len(rgw.bot.calls) == calls + 2


@pytest.mark.parametrize(
    "used",
    [
        {"type": "https://acme.example/rar/unknown", "identifier": "A-10002", "actions": ["cancel"]},
        {"type": ORDER, "identifier": "not-an-order", "actions": ["cancel"]},  # the schema refuses it
        {"type": ORDER, "identifier": "A-10002", "actions": ["ship"]},  # not an action of the type
        {"type": ORDER, "identifier": "A-10002", "actions": ["cancel"], "note": "x"},  # not a field of it
    ],
    ids=["unknown-type", "schema", "action", "unknown-field"],
)
async def test_rfc9396_a_bound_detail_its_brand_does_not_accept_is_refused_and_nothing_stored(
    rgw: Harness, used: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    token = await token_for(rgw, ("orders:cancel",), order("A-10002"))
    rgw.bot.mode = "fixed"
    rgw.bot.fixed_reply = bound_reply(used)
    with caplog.at_level(logging.ERROR, logger="pact_gateway.turns"):
        refused = await rgw.send("cancel A-10002", message_id="m-1", headers=delegated(token))
        assert await error_of(refused) == INTERNAL
    (record,) = [r for r in caplog.records if "bot reply refused" in r.getMessage()]
    assert getattr(record, "request_id", None) == refused.headers["X-Request-Id"]
    assert events(rgw, "step_up") == 0
    rgw.bot.mode = "sample"
    retried = await rgw.send("cancel A-10002", message_id="m-1", headers=delegated(token))
    assert (await body_of(retried))["message"]["metadata"]["pact.receipt"]["claims"]["actions"][0][
        "authorizationDetail"
    ] == order("A-10002")


async def test_rfc9396_a_bound_action_without_a_token_is_refused(rgw: Harness) -> None:
    rgw.bot.mode = "fixed"
    rgw.bot.fixed_reply = bound_reply(order_detail("A-10002"))
    assert await error_of(await rgw.send("cancel A-10002")) == INTERNAL


# --- asking first ---------------------------------------------------------------------------------------


async def test_rfc9396_the_sample_bot_asks_and_the_approved_step_up_lets_it_act(rgw: Harness) -> None:
    """Under ``orders:read`` the bot asks for the one order; the person approves the step-up keeping
    ``orders:read``; the same message on the task's context is then served and signed with that detail.
    Another order under the new token is asked for again, the approved one not re-asked."""
    token = await token_for(rgw, ("orders:read",))
    task = (await body_of(await rgw.send("cancel A-10002", message_id="m-1", headers=delegated(token))))[
        "task"
    ]
    metadata = task["metadata"]
    assert task["status"]["message"]["parts"] == [{"text": STEP_UP_FOR_DETAILS}]
    assert (metadata["pact.missingScopes"], metadata["pact.authorizationDetails"]) == (
        ["orders:cancel"],
        [order_detail("A-10002")],
    )
    approved = await approve_details_via_store(
        rgw, {"user_code": metadata["pact.userCode"]}, carried=("orders:read",)
    )
    assert approved == canonical(order_detail("A-10002"))
    polled = await poll_token(rgw, metadata["pact.deviceCode"])
    answer = orjson.loads(await polled.read())
    assert answer["authorization_details"] == [order_detail("A-10002")]
    stepped = delegated(answer["access_token"])
    message = (
        await body_of(
            await rgw.send("cancel A-10002", message_id="m-1", context_id=task["contextId"], headers=stepped)
        )
    )["message"]
    claims = await verified_claims(rgw, message["metadata"]["pact.receipt"])
    assert claims["actions"][0]["authorizationDetail"] == order_detail("A-10002")
    assert claims["scopesUsed"] == ["orders:cancel"]
    other = await rgw.send("cancel A-10001", context_id=task["contextId"], headers=stepped)
    assert (await body_of(other))["task"]["metadata"]["pact.authorizationDetails"] == [
        order_detail("A-10001")
    ]


async def test_rfc9396_required_details_already_covered_are_an_ordinary_reply(rgw: Harness) -> None:
    token = await token_for(rgw, ("orders:cancel",), order("A-10002", actions=["cancel", "refund"]))
    rgw.bot.mode = "fixed"
    rgw.bot.fixed_reply = {"text": "Sure.", "requires_authorization_details": [order_detail("A-10002")]}
    message = (await body_of(await rgw.send("hello", headers=delegated(token))))["message"]
    assert message["parts"] == [{"text": "Sure."}]
    assert events(rgw, "step_up") == 0


async def test_rfc9396_without_a_token_required_details_are_a_step_up_with_their_scopes(rgw: Harness) -> None:
    """The scopes asked are the missing ones and each detail's, in card order."""
    rgw.bot.mode = "fixed"
    rgw.bot.fixed_reply = {
        "text": "I need it.",
        "requires_scopes": ["orders:read"],
        "requires_authorization_details": [{**ADDRESS_DETAIL}, order_detail("A-10002"), {**ADDRESS_DETAIL}],
    }
    task = (await body_of(await rgw.send("hello")))["task"]
    assert task["metadata"]["pact.missingScopes"] == ["orders:read", "orders:cancel", "profile:read"]
    assert task["metadata"]["pact.authorizationDetails"] == [ADDRESS_DETAIL, order_detail("A-10002")]


@pytest.mark.parametrize(
    "required",
    [
        [{"type": "https://acme.example/rar/unknown"}],
        [{"type": ORDER, "identifier": "not-an-order"}],
        [{"type": ORDER, "identifier": "A-10002", "actions": ["ship"]}],
        [order_detail(f"A-1000{number}") for number in range(3)],  # over max_authorization_details (2)
    ],
    ids=["unknown-type", "schema", "action", "too-many"],
)
async def test_rfc9396_required_details_the_person_could_not_approve_are_internal(
    make_gateway: MakeGateway,
    delegation_store_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    required: list[dict[str, Any]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    gw = await make_gateway(
        delegation_store_url, edit=enable_details(brand_login, provider_key_pem, max_authorization_details=2)
    )
    gw.bot.mode = "fixed"
    gw.bot.fixed_reply = {"text": "May I?", "requires_authorization_details": required}
    with caplog.at_level(logging.ERROR, logger="pact_gateway.turns"):
        assert await error_of(await gw.send("hello")) == INTERNAL
    assert any("cannot be granted" in record.getMessage() for record in caplog.records)
    assert events(gw, "step_up") == 0
