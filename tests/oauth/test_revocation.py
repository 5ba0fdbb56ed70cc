"""RFC 7009 revocation (§5), through HTTP: either token of a grant ends it, only for its own (PA, sub)."""

from __future__ import annotations

import pytest
from aiohttp import ClientResponse

from gateway.ops.metrics import Metrics
from tests.oauth.test_device_authorization import oauth_error
from tests.support.delegation import (
    BrandLogin,
    enable_delegation,
    obtain_tokens,
    post_form,
    refresh,
)
from tests.support.gateway import OTHER_PA, Harness, MakeGateway


async def revoke(
    h: Harness, token: str, *, hint: str | None = None, issuer: str | None = None, sub: str = "alice"
) -> ClientResponse:
    form = {"token": token, "client_id": issuer or h.issuer}
    if hint is not None:
        form["token_type_hint"] = hint
    return await post_form(h, "revoke", form, issuer=issuer, sub=sub)


async def assert_revocation_answer(response: ClientResponse) -> None:
    """RFC 7009 §2.2: ``200`` and nothing else, whatever happened."""
    assert response.status == 200
    assert await response.read() == b""
    assert response.headers["Cache-Control"] == "no-store"
    assert "a2a+json" not in response.headers.get("Content-Type", "")


@pytest.mark.parametrize("hint", [None, "refresh_token", "access_token", "something_else"])
async def test_rfc7009_revoking_the_refresh_token_ends_the_grant(dgw: Harness, hint: str | None) -> None:
    tokens = await obtain_tokens(dgw)
    await assert_revocation_answer(await revoke(dgw, tokens["refresh_token"], hint=hint))
    response = await refresh(dgw, tokens["refresh_token"])
    assert response.status == 400
    assert await oauth_error(response) == "invalid_grant"


@pytest.mark.parametrize("hint", [None, "refresh_token", "access_token"])
async def test_rfc7009_revoking_the_access_token_ends_the_grant(dgw: Harness, hint: str | None) -> None:
    tokens = await obtain_tokens(dgw)
    await assert_revocation_answer(await revoke(dgw, tokens["access_token"], hint=hint))
    response = await refresh(dgw, tokens["refresh_token"])
    assert await oauth_error(response) == "invalid_grant"


async def test_rfc7009_a_spent_refresh_token_still_ends_its_grant(dgw: Harness) -> None:
    first = await obtain_tokens(dgw)
    second = await refresh(dgw, first["refresh_token"])
    newest = (await second.json())["refresh_token"]
    await assert_revocation_answer(await revoke(dgw, first["refresh_token"]))
    assert await oauth_error(await refresh(dgw, newest)) == "invalid_grant"


@pytest.mark.parametrize(
    ("issuer", "sub"), [(OTHER_PA, "alice"), (None, "bob")], ids=["other_pa", "other_sub"]
)
@pytest.mark.parametrize("kind", ["refresh_token", "access_token"])
async def test_rfc7009_foreign_revocation_answers_200_and_does_nothing(
    dgw: Harness, issuer: str | None, sub: str, kind: str
) -> None:
    tokens = await obtain_tokens(dgw)
    await assert_revocation_answer(await revoke(dgw, tokens[kind], issuer=issuer, sub=sub))
    response = await refresh(dgw, tokens["refresh_token"])
    assert response.status == 200


@pytest.mark.parametrize("token", ["rt_never-issued", "eyJhbGciOiJFUzI1NiJ9.e30.c2ln", "x"])
async def test_rfc7009_unknown_tokens_answer_200(dgw_memory: Harness, token: str) -> None:
    await assert_revocation_answer(await revoke(dgw_memory, token))


async def test_rfc7009_revocation_needs_the_pa_and_a_token(dgw_memory: Harness) -> None:
    tokens = await obtain_tokens(dgw_memory)
    form = {"token": tokens["refresh_token"], "client_id": dgw_memory.issuer}
    response = await dgw_memory.client.post("/a2a/acme/oauth/revoke", data=form)
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="a2a"'
    assert await response.read() == b""
    response = await post_form(dgw_memory, "revoke", {**form, "client_id": OTHER_PA})
    assert response.status == 401
    assert await oauth_error(response) == "invalid_client"
    response = await post_form(dgw_memory, "revoke", {"client_id": dgw_memory.issuer})
    assert response.status == 400
    assert await oauth_error(response) == "invalid_request"
    # None of these touched the grant.
    assert (await refresh(dgw_memory, tokens["refresh_token"])).status == 200


async def test_rfc7009_revocations_are_counted_once(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    metrics = Metrics()
    h = await make_gateway(edit=enable_delegation(brand_login, provider_key_pem), metrics=metrics)
    tokens = await obtain_tokens(h)
    await assert_revocation_answer(await revoke(h, tokens["refresh_token"]))
    await assert_revocation_answer(await revoke(h, tokens["access_token"]))
    labels = {"brand": "acme", "event": "grant_revoked"}
    assert metrics.registry.get_sample_value("pact_delegation_events_total", labels) == 1
