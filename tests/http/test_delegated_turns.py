"""§5.5 message:send under a delegation token, over HTTP on both backends: the token's checks, the
grant's liveness, the context's user, step-up, and what the bot is told and may claim."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import jwt
import orjson
import pytest
from aiohttp import ClientResponse

from gateway.app import reload_runtime
from gateway.config import OAuthConfig
from gateway.handlers.state import METRICS
from gateway.http.responses import INVALID_TOKEN_AUTHENTICATE, WWW_AUTHENTICATE
from gateway.oauth.access_token import ACCESS_TOKEN_TYP
from gateway.provider_keys import parse_signing_key
from gateway.store.base import Owner
from gateway.turns import CONTEXT_OF_ANOTHER_USER
from tests.support.delegation import (
    BRAND_USER,
    BrandLogin,
    approve_via_store,
    delegated,
    enable_delegation,
    grant_via_store,
    mint_for,
    new_provider_key_pem,
    oauth_server,
    redeem_via_store,
)
from tests.support.gateway import OTHER_PA, Harness, MakeGateway
from tests.support.pa import PAKey

A2A_JSON = "application/a2a+json"


async def message_of(response: ClientResponse) -> dict[str, Any]:
    body = await response.read()
    assert response.status == 200, body
    assert response.headers["Content-Type"] == A2A_JSON
    message: dict[str, Any] = orjson.loads(body)["message"]
    return message


async def task_of(response: ClientResponse) -> dict[str, Any]:
    body = await response.read()
    assert response.status == 200, body
    assert response.headers["Content-Type"] == A2A_JSON
    task: dict[str, Any] = orjson.loads(body)["task"]
    return task


async def error_of(response: ClientResponse) -> tuple[int, str, str]:
    body = await response.read()
    assert response.headers["Content-Type"] == A2A_JSON, body
    error = orjson.loads(body)["error"]
    return response.status, error["details"][0]["reason"], error["message"]


async def assert_invalid_token(response: ClientResponse) -> None:
    """§5.5: exactly ``401``, ``WWW-Authenticate: Bearer realm="a2a", error="invalid_token"``, no body."""
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="a2a", error="invalid_token"'
    assert response.headers.get("Content-Type") != A2A_JSON
    assert await response.read() == b""


def events(h: Harness, event: str, brand: str = "acme") -> float:
    value = h.client.app[METRICS].registry.get_sample_value(
        "pact_delegation_events_total", {"brand": brand, "event": event}
    )
    return value or 0.0


def both_delegate(login: BrandLogin, pem: str) -> Callable[[dict[str, Any]], None]:
    acme, globex = enable_delegation(login, pem), enable_delegation(login, pem, brand_index=1)

    def edit(raw: dict[str, Any]) -> None:
        acme(raw)
        globex(raw)

    return edit


def unverified_claims(token: str) -> dict[str, Any]:
    claims: dict[str, Any] = jwt.decode(token, options={"verify_signature": False})
    return claims


# --- the token ------------------------------------------------------------------------------------------


async def test_s5_5_delegated_turn_tells_the_bot_who_and_what(dgw: Harness) -> None:
    grant = await grant_via_store(dgw, ("orders:read",))
    message = await message_of(await dgw.send("list my orders", headers=delegated(mint_for(dgw, grant))))
    assert message["parts"][0]["text"].startswith("Your orders: A-10001 (shipped)")
    assert "pact.receipt" in message["metadata"]
    assert dgw.bot.calls[0].body["delegation"] == {
        "user": BRAND_USER,
        "scopes": ["orders:read"],
        "grant_id": grant.grant_id,
        "authorization_details": [],
    }


async def test_s5_5_without_a_token_the_bot_gets_null_and_the_reply_is_plain(dgw: Harness) -> None:
    message = await message_of(await dgw.send("Hi, where is my order?"))
    assert dgw.bot.calls[0].body["delegation"] is None
    assert set(message) == {"messageId", "contextId", "role", "parts"}


Forge = Callable[[Harness], Awaitable[str]]


async def _garbage(h: Harness) -> str:
    return "Bearer not-a-jwt"


async def _empty_bearer(h: Harness) -> str:
    return "Bearer "


async def _other_scheme(h: Harness) -> str:
    return f"Basic {mint_for(h, await grant_via_store(h))}"


async def _expired(h: Harness) -> str:
    now = oauth_server(h).clock()
    return f"Bearer {mint_for(h, await grant_via_store(h), now=now - 7200, ttl=3600)}"


async def _wrong_typ(h: Harness) -> str:
    claims = unverified_claims(mint_for(h, await grant_via_store(h)))
    return f"Bearer {oauth_server(h).keys.sign(orjson.dumps(claims), 'JWT')}"


def _forged(h: Harness, claims: dict[str, Any], key: PAKey, alg: str | None = None) -> str:
    forged = key.mint(
        claims["iss"],
        claims["sub"],
        claims["aud"],
        extra_claims={name: claims[name] for name in ("client_id", "scope", "grant_id")},
        extra_headers={"typ": ACCESS_TOKEN_TYP},
        alg=alg,
    )
    return f"Bearer {forged}"


async def _unpublished_key_same_kid(h: Harness) -> str:
    claims = unverified_claims(mint_for(h, await grant_via_store(h)))
    return _forged(h, claims, PAKey.es256(kid=oauth_server(h).keys.current.kid))


async def _unknown_kid(h: Harness) -> str:
    claims = unverified_claims(mint_for(h, await grant_via_store(h)))
    return _forged(h, claims, PAKey.es256(kid="not-ours"))


async def _alg_mismatch(h: Harness) -> str:
    claims = unverified_claims(mint_for(h, await grant_via_store(h)))
    return _forged(h, claims, PAKey.rs256(kid=oauth_server(h).keys.current.kid))


async def _hmac_confusion(h: Harness) -> str:
    claims = unverified_claims(mint_for(h, await grant_via_store(h)))
    return _forged(h, claims, PAKey.es256(kid=oauth_server(h).keys.current.kid), alg="HS256")


async def _another_brands_token(h: Harness) -> str:
    return f"Bearer {mint_for(h, await grant_via_store(h, brand='globex'))}"


async def _issued_to_another_pa(h: Harness) -> str:
    return f"Bearer {mint_for(h, await grant_via_store(h, issuer=OTHER_PA))}"


async def _grant_of_another_sub(h: Harness) -> str:
    return f"Bearer {mint_for(h, await grant_via_store(h, sub='bob'))}"


async def _revoked(h: Harness) -> str:
    grant = await grant_via_store(h)
    assert await oauth_server(h).store.revoke_grant("acme", grant.grant_id)
    return f"Bearer {mint_for(h, grant)}"


@pytest.mark.parametrize(
    "forge",
    [
        _garbage,
        _empty_bearer,
        _other_scheme,
        _expired,
        _wrong_typ,
        _unpublished_key_same_kid,
        _unknown_kid,
        _alg_mismatch,
        _hmac_confusion,
        _another_brands_token,
        _issued_to_another_pa,
        _grant_of_another_sub,
        _revoked,
    ],
    ids=lambda forge: forge.__name__.strip("_"),
)
async def test_s5_5_bad_delegation_token_is_invalid_token(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str, forge: Forge
) -> None:
    # globex delegates too, so a token for it is a well-formed token of the same keys for another Brand.
    gw = await make_gateway(cache_url, edit=both_delegate(brand_login, provider_key_pem))
    header = await forge(gw)
    response = await gw.send("list my orders", headers={"X-A2A-User-Delegation": header})
    await assert_invalid_token(response)
    assert gw.bot.calls == []
    assert events(gw, "invalid_delegation_token") == 1


async def test_s5_5_revoked_grant_stops_the_next_turn(dgw: Harness, caplog: pytest.LogCaptureFixture) -> None:
    grant = await grant_via_store(dgw, ("orders:read",))
    token = mint_for(dgw, grant)
    context_id = (await message_of(await dgw.send("list my orders", headers=delegated(token))))["contextId"]
    assert await oauth_server(dgw).store.revoke_grant("acme", grant.grant_id)
    with caplog.at_level(logging.INFO, logger="pact_gateway.a2a"):
        # The same token, verified from the cache: the store's step still refuses it.
        response = await dgw.send("list my orders", context_id=context_id, headers=delegated(token))
        await assert_invalid_token(response)
        # A replay of an answered turn is refused too: a revoked grant sees nothing more.
        first = dgw.bot.calls[0].body["message_id"]
        replay = await dgw.send(
            "list my orders", message_id=first, context_id=context_id, headers=delegated(token)
        )
        await assert_invalid_token(replay)
    assert len(dgw.bot.calls) == 1
    assert "reason=grant_revoked" in caplog.text
    assert token not in caplog.text
    assert events(dgw, "invalid_delegation_token") == 2


async def test_s4_3_s5_5_delegated_reply_is_replayed_only_under_its_live_grant(
    dgw: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 18 I1: the stored reply and its receipt are the grant's; a retry without the header (or
    under another grant) reads neither, before or after the revocation."""
    grant = await grant_via_store(dgw, ("orders:read",))
    token = mint_for(dgw, grant)
    first = await dgw.send("list my orders", message_id="m-1", headers=delegated(token))
    stored = await first.read()
    context_id = orjson.loads(stored)["message"]["contextId"]
    # Under its own live grant, the retry gets the very bytes stored, receipt and all.
    again = await dgw.send(
        "list my orders", message_id="m-1", context_id=context_id, headers=delegated(token)
    )
    assert await again.read() == stored
    with caplog.at_level(logging.INFO, logger="pact_gateway.a2a"):
        await assert_invalid_token(await dgw.send("list my orders", message_id="m-1", context_id=context_id))
        # The grant that supersedes it (same user, agent and sub) is another grant: not its reply either.
        successor = mint_for(dgw, await grant_via_store(dgw, ("orders:read",)))
        response = await dgw.send(
            "list my orders", message_id="m-1", context_id=context_id, headers=delegated(successor)
        )
        await assert_invalid_token(response)
        assert (
            await oauth_server(dgw).store.get_grant("acme", grant.grant_id, oauth_server(dgw).clock()) is None
        )
        await assert_invalid_token(await dgw.send("list my orders", message_id="m-1", context_id=context_id))
    assert "reason=replay_needs_its_grant" in caplog.text
    assert len(dgw.bot.calls) == 1
    # An undelegated reply is still replayed as before, with or without a header.
    plain = await dgw.send("Hi, where is my order?", message_id="m-2", context_id=context_id)
    plain_body = await plain.read()
    assert "metadata" not in orjson.loads(plain_body)["message"]
    retried = await dgw.send("Hi, where is my order?", message_id="m-2", context_id=context_id)
    assert await retried.read() == plain_body


async def test_s5_5_bad_pa_jwt_wins_over_a_bad_delegation_token(dgw_memory: Harness) -> None:
    response = await dgw_memory.client.post(
        "/a2a/acme/message:send",
        data=b"{not json",
        headers={"Authorization": "Bearer garbage", "X-A2A-User-Delegation": "Bearer garbage"},
    )
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == WWW_AUTHENTICATE
    assert await response.read() == b""
    assert events(dgw_memory, "invalid_delegation_token") == 0


async def test_s5_5_delegation_header_on_a_brand_without_delegation(dgw_memory: Harness) -> None:
    token = mint_for(dgw_memory, await grant_via_store(dgw_memory))
    response = await dgw_memory.send("list my orders", brand="globex", headers=delegated(token))
    await assert_invalid_token(response)
    assert response.headers["WWW-Authenticate"] == INVALID_TOKEN_AUTHENTICATE
    assert dgw_memory.bot.calls == []
    assert events(dgw_memory, "invalid_delegation_token", brand="globex") == 1


async def test_s5_5_delegation_is_checked_before_the_body(dgw_memory: Harness) -> None:
    response = await dgw_memory.client.post(
        "/a2a/acme/message:send",
        data=b"{not json",
        headers={**dgw_memory.auth(), "X-A2A-User-Delegation": "Bearer garbage"},
    )
    await assert_invalid_token(response)


async def test_s5_4_token_stops_working_when_the_signing_key_rotates_out(dgw_memory: Harness) -> None:
    token = mint_for(dgw_memory, await grant_via_store(dgw_memory))
    await message_of(await dgw_memory.send("list my orders", headers=delegated(token)))
    rotated = OAuthConfig(signing_keys=(parse_signing_key(new_provider_key_pem()),))
    reload_runtime(dgw_memory.client.app, dataclasses.replace(dgw_memory.config, oauth=rotated))
    # The verdict cached under the old keys is gone with them.
    await assert_invalid_token(await dgw_memory.send("list my orders", headers=delegated(token)))


# --- the context ----------------------------------------------------------------------------------------


async def test_s5_5_context_started_under_s3_continues_under_delegation(dgw: Harness) -> None:
    context_id = (await message_of(await dgw.send("Hi, where is my order?")))["contextId"]
    token = mint_for(dgw, await grant_via_store(dgw, ("orders:read",)))
    message = await message_of(
        await dgw.send("list my orders", context_id=context_id, headers=delegated(token))
    )
    assert message["contextId"] == context_id
    assert message["metadata"]["pact.receipt"]["claims"]["contextId"] == context_id
    assert dgw.bot.calls[1].body["new_conversation"] is False


async def test_s5_5_another_brand_user_on_the_context_is_invalid_params(dgw: Harness) -> None:
    jane = mint_for(dgw, await grant_via_store(dgw, ("orders:read",)))
    first = await message_of(await dgw.send("list my orders", message_id="m-1", headers=delegated(jane)))
    context_id = first["contextId"]
    other = mint_for(dgw, await grant_via_store(dgw, ("orders:read",), user="bob-7"))
    for message_id in ("m-2", "m-1"):  # a new turn, and a replay of jane's stored reply
        response = await dgw.send(
            "list my orders", message_id=message_id, context_id=context_id, headers=delegated(other)
        )
        assert await error_of(response) == (400, "INVALID_PARAMS", CONTEXT_OF_ANOTHER_USER)
    assert len(dgw.bot.calls) == 1
    # jane herself carries on.
    again = await dgw.send("list my orders", message_id="m-3", context_id=context_id, headers=delegated(jane))
    assert (await message_of(again))["contextId"] == context_id


# --- step-up --------------------------------------------------------------------------------------------


async def test_s5_5_step_up_under_s3_then_the_token_continues_the_same_context(dgw: Harness) -> None:
    task = await task_of(await dgw.send("list my orders", message_id="m-1"))
    assert task["id"].startswith("t-")
    status = task["status"]
    assert status["state"] == "TASK_STATE_AUTH_REQUIRED"
    assert status["message"]["role"] == "ROLE_AGENT"
    assert status["message"]["messageId"].startswith("r-")
    assert status["message"]["parts"] == [
        {"text": "I need permission to look up your orders on your Acme account."}
    ]
    metadata = task["metadata"]
    assert metadata["pact.missingScopes"] == ["orders:read"]
    assert metadata["pact.interval"] == 5
    assert metadata["pact.expiresIn"] == 600
    user_code, device_code = metadata["pact.userCode"], metadata["pact.deviceCode"]
    assert metadata["pact.verificationUriComplete"].endswith(f"user_code%3D{user_code}")
    # §5.3: a fresh authorization for the missing scopes, bound to this personal agent and sub.
    server = oauth_server(dgw)
    pending = await server.store.authorization_by_user_code("acme", user_code, server.clock())
    assert pending is not None
    assert (pending.client_id, pending.owner_digest, pending.scopes) == (
        dgw.issuer,
        Owner("acme", dgw.issuer, "alice").digest,
        ("orders:read",),
    )
    # Ephemeral (§5.5): no such task to look up.
    lookup = await dgw.client.get(f"/a2a/acme/tasks/{task['id']}", headers=dgw.auth())
    assert await error_of(lookup) == (404, "TASK_NOT_FOUND", f"Task not found: {task['id']}")

    await approve_via_store(dgw, {"device_code": device_code, "user_code": user_code})
    token = mint_for(dgw, await redeem_via_store(dgw, device_code))
    context_id = task["contextId"]
    # The same messageId, on the contextId the task named: the step-up stored nothing to replay.
    message = await message_of(
        await dgw.send("list my orders", message_id="m-1", context_id=context_id, headers=delegated(token))
    )
    assert message["contextId"] == context_id
    assert message["parts"][0]["text"].startswith("Your orders:")
    call = dgw.bot.calls[-1].body
    assert (call["conversation_id"], call["new_conversation"]) == (context_id, True)
    assert len(dgw.bot.calls) == 2
    assert events(dgw, "step_up") == 1


async def test_s5_5_context_named_by_a_step_up_survives_a_failed_turn(dgw: Harness) -> None:
    task = await task_of(await dgw.send("list my orders", message_id="m-1"))
    metadata = task["metadata"]
    await approve_via_store(
        dgw, {"device_code": metadata["pact.deviceCode"], "user_code": metadata["pact.userCode"]}
    )
    token = mint_for(dgw, await redeem_via_store(dgw, metadata["pact.deviceCode"]))
    context_id = task["contextId"]
    dgw.bot.mode = "status500"
    failed = await dgw.send(
        "list my orders", message_id="m-1", context_id=context_id, headers=delegated(token)
    )
    assert await error_of(failed) == (500, "INTERNAL", "Internal error")
    dgw.bot.mode = "sample"
    # No turn of it was ever answered, but the personal agent knows its contextId: it is kept.
    retried = await dgw.send(
        "list my orders", message_id="m-1", context_id=context_id, headers=delegated(token)
    )
    assert (await message_of(retried))["contextId"] == context_id


async def test_s5_5_step_up_for_a_scope_the_token_lacks(dgw: Harness) -> None:
    reader = mint_for(dgw, await grant_via_store(dgw, ("orders:read",)))
    context_id = (await message_of(await dgw.send("list my orders", headers=delegated(reader))))["contextId"]
    task = await task_of(
        await dgw.send(
            "please cancel A-10002", message_id="m-c", context_id=context_id, headers=delegated(reader)
        )
    )
    assert task["contextId"] == context_id
    assert task["metadata"]["pact.missingScopes"] == ["orders:cancel"]
    canceller = mint_for(dgw, await grant_via_store(dgw, ("orders:cancel",)))
    message = await message_of(
        await dgw.send(
            "please cancel A-10002", message_id="m-c", context_id=context_id, headers=delegated(canceller)
        )
    )
    assert message["parts"][0]["text"].startswith("Order A-10002 is cancelled")
    claims = message["metadata"]["pact.receipt"]["claims"]
    assert claims["scopesUsed"] == ["orders:cancel"]
    assert [action["tool"] for action in claims["actions"]] == ["cancel_order"]


async def test_s5_5_a_step_up_the_full_memory_store_has_no_room_for_is_a_bare_429(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """The step-up's device authorization needs room the memory store at ``cache.max_entries`` does
    not have (its one conversation's turn is running): the agent gets the §6 bare ``429`` with
    ``Retry-After``, as for a new conversation the store has no room for, never ``INTERNAL``."""

    def bounded(raw: dict[str, Any]) -> None:
        enable_delegation(brand_login, provider_key_pem)(raw)
        raw["cache"]["max_entries"] = 4

    gw = await make_gateway(edit=bounded)
    gw.bot.mode = "fixed"
    gw.bot.fixed_reply = {"text": "I need permission.", "requires_scopes": ["orders:cancel"]}
    refused = await gw.send("cancel A-10002", message_id="m-1")
    assert (refused.status, await refused.read()) == (429, b"")
    assert refused.headers["Retry-After"] == "60"
    sample = gw.client.app[METRICS].registry.get_sample_value
    assert sample("pact_rate_limited_total", {"brand": "acme", "limit": "store_full"}) == 1.0
    assert events(gw, "step_up") == 0
    assert len(gw.bot.calls) == 1


async def test_s5_5_missing_scopes_are_named_in_card_order(dgw_memory: Harness) -> None:
    dgw_memory.bot.mode = "fixed"
    dgw_memory.bot.fixed_reply = {"text": "I need more.", "requires_scopes": ["profile:read", "orders:read"]}
    task = await task_of(await dgw_memory.send("hello"))
    assert task["metadata"]["pact.missingScopes"] == ["orders:read", "profile:read"]


async def test_s5_5_required_scopes_already_granted_are_an_ordinary_reply(dgw_memory: Harness) -> None:
    token = mint_for(dgw_memory, await grant_via_store(dgw_memory, ("orders:read",)))
    dgw_memory.bot.mode = "fixed"
    dgw_memory.bot.fixed_reply = {
        "text": "Here.",
        "requires_scopes": ["orders:read"],
        "scopes_used": ["orders:read"],
    }
    message = await message_of(await dgw_memory.send("hello", headers=delegated(token)))
    assert message["parts"] == [{"text": "Here."}]
    assert events(dgw_memory, "step_up") == 0


@pytest.mark.parametrize(
    ("brand", "requires"),
    [("acme", ["refunds:issue"]), ("globex", ["orders:read"])],
    ids=["scope-not-on-the-card", "brand-without-delegation"],
)
async def test_s5_5_step_up_that_cannot_be_granted_is_internal(
    dgw: Harness, brand: str, requires: list[str]
) -> None:
    dgw.bot.mode = "fixed"
    dgw.bot.fixed_reply = {"text": "I need permission.", "requires_scopes": requires}
    assert await error_of(await dgw.send("hello", brand=brand)) == (500, "INTERNAL", "Internal error")
    assert events(dgw, "step_up", brand=brand) == 0


async def test_s5_5_account_actions_stay_off_for_a_brand_without_delegation(dgw_memory: Harness) -> None:
    message = await message_of(await dgw_memory.send("list my orders", brand="globex"))
    assert "metadata" not in message
    assert "order number" in message["parts"][0]["text"]


# --- what the bot may claim -----------------------------------------------------------------------------


async def test_s5_5_bot_claiming_an_ungranted_scope_is_refused_and_nothing_stored(
    dgw: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    token = mint_for(dgw, await grant_via_store(dgw, ("orders:read",)))
    context_id = (await message_of(await dgw.send("Hi, where is my order?")))["contextId"]
    dgw.bot.mode = "overreach"
    with caplog.at_level(logging.ERROR, logger="pact_gateway.turns"):
        refused = await dgw.send(
            "list my orders", message_id="m-2", context_id=context_id, headers=delegated(token)
        )
        assert await error_of(refused) == (500, "INTERNAL", "Internal error")
    (record,) = [r for r in caplog.records if "orders:cancel" in r.getMessage()]
    assert getattr(record, "request_id", None) == refused.headers["X-Request-Id"]
    dgw.bot.mode = "sample"
    retried = await message_of(
        await dgw.send("list my orders", message_id="m-2", context_id=context_id, headers=delegated(token))
    )
    assert retried["metadata"]["pact.receipt"]["claims"]["scopesUsed"] == ["orders:read"]
    assert len(dgw.bot.calls) == 3  # the refused reply was not stored: the retry ran the bot
    assert events(dgw, "receipt_signed") == 1


@pytest.mark.parametrize(
    "reply",
    [
        {"text": "Done.", "actions": [{"tool": "cancel_order"}]},
        {"text": "Done.", "scopes_used": ["orders:read"]},
    ],
    ids=["actions", "scopes_used"],
)
async def test_s5_5_account_claims_without_a_token_are_refused(dgw: Harness, reply: dict[str, Any]) -> None:
    dgw.bot.mode = "fixed"
    dgw.bot.fixed_reply = reply
    assert await error_of(await dgw.send("hello", message_id="m-1")) == (500, "INTERNAL", "Internal error")
    dgw.bot.mode = "sample"
    # A failed first turn opened no conversation: the retry opens one and runs the bot again.
    await message_of(await dgw.send("hello", message_id="m-1"))
    assert len(dgw.bot.calls) == 2


@pytest.mark.parametrize(
    "reply",
    [
        {"text": "x", "requires_scopes": "orders:read"},
        {"text": "x", "requires_scopes": ["orders read"]},
        {"text": "x", "scopes_used": [1]},
        {"text": "x", "actions": {"tool": "t"}},
        {"text": "x", "actions": [{"args": {}}]},
        {"text": "x", "actions": [{"tool": "t", "extra": 1}]},
        {"text": "x", "actions": [{"tool": "t", "args": {"n": 2**60}}]},
    ],
    ids=[
        "requires-not-list",
        "scope-with-space",
        "scope-not-string",
        "actions-not-list",
        "no-tool",
        "extra-key",
        "big-int",
    ],
)
async def test_bad_authority_shapes_are_a_bad_bot_reply(dgw_memory: Harness, reply: dict[str, Any]) -> None:
    token = mint_for(dgw_memory, await grant_via_store(dgw_memory, ("orders:read",)))
    dgw_memory.bot.mode = "fixed"
    dgw_memory.bot.fixed_reply = reply
    response = await dgw_memory.send("hello", headers=delegated(token))
    assert await error_of(response) == (500, "INTERNAL", "Internal error")


async def test_delegation_metrics_count_each_event_once(dgw: Harness) -> None:
    token = mint_for(dgw, await grant_via_store(dgw, ("orders:read",)))
    first = await dgw.send("list my orders", message_id="m-1", headers=delegated(token))
    context_id = (await message_of(first))["contextId"]
    await dgw.send(
        "list my orders", message_id="m-1", context_id=context_id, headers=delegated(token)
    )  # replay
    await task_of(await dgw.send("cancel A-10002", context_id=context_id, headers=delegated(token)))
    await assert_invalid_token(await dgw.send("hi", headers={"X-A2A-User-Delegation": "Bearer x"}))
    assert [
        events(dgw, e) for e in ("delegated_turn", "receipt_signed", "step_up", "invalid_delegation_token")
    ] == [
        1,
        1,
        1,
        1,
    ]
