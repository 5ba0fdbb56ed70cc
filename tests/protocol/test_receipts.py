"""§5.6 receipts: the pure claims, and over HTTP (both backends) a reply's receipt checked the way a
personal agent checks it: against the published JWKS with PyJWT, ``argsHash`` recomputed on its own."""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
from typing import Any

import jwt
import orjson
import pytest
import rfc8785

from gateway.handlers.state import RUNTIME
from gateway.protocol.messages import parse_send_message
from gateway.protocol.receipts import (
    RECEIPT_TYP,
    Action,
    args_hash,
    receipt_claims,
    receipt_metadata,
    receipt_payload,
    timestamp,
)
from tests.support.delegation import (
    BRAND_USER,
    BrandLogin,
    delegated,
    enable_delegation,
    grant_via_store,
    mint_for,
)
from tests.support.gateway import PUBLIC_URL, Harness, MakeGateway
from tests.support.pa import ManualClock

SEPT_30_NOON = datetime.datetime(2026, 9, 30, 12, 0, tzinfo=datetime.UTC).timestamp()


def b64url_sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def test_s5_6_args_hash_is_sha256_of_the_canonical_json_base64url() -> None:
    canonical = b'{"a":true,"b":[1,"\xc3\xa9"]}'
    assert rfc8785.dumps({"b": [1.0, "é"], "a": True}) == canonical
    assert args_hash(canonical) == b64url_sha256(canonical)
    assert "=" not in args_hash(canonical)


def test_s5_6_timestamp_is_rfc3339_utc_to_the_second() -> None:
    assert timestamp(SEPT_30_NOON + 0.9) == "2026-09-30T12:00:00Z"
    assert timestamp(0) == "1970-01-01T00:00:00Z"


def test_s5_6_claims_in_spec_order_with_args_hash_only_for_given_args() -> None:
    claims = receipt_claims(
        grant_id="g-1",
        user="jane-4471",
        pa="https://pa.example",
        brand="https://provider.example/a2a/acme",
        scopes_used=("orders:read", "orders:cancel"),
        actions=(Action("lookup_orders"), Action("cancel_order", b'{"order":"A-1"}')),
        ts="2026-09-30T12:00:00Z",
        context_id="c-1",
        message_id="m-1",
    )
    assert list(claims) == [
        "grantId",
        "user",
        "pa",
        "brand",
        "scopesUsed",
        "actions",
        "ts",
        "contextId",
        "messageId",
    ]
    assert claims["actions"] == [
        {"tool": "lookup_orders"},
        {"tool": "cancel_order", "argsHash": b64url_sha256(b'{"order":"A-1"}')},
    ]
    assert orjson.loads(receipt_payload(claims)) == claims
    assert receipt_metadata("j.w.s", claims) == {"pact.receipt": {"jws": "j.w.s", "claims": claims}}


def test_rfc9396_an_action_bound_to_a_detail_names_it_with_the_approved_bytes() -> None:
    """The granted detail's canonical JSON goes into the receipt as it is, after ``argsHash``."""
    granted = '{"actions":["cancel"],"identifier":"A-10002","type":"https://acme.example/rar/order"}'
    claims = receipt_claims(
        grant_id="g-1",
        user="jane-4471",
        pa="https://pa.example",
        brand="https://provider.example/a2a/acme",
        scopes_used=("orders:cancel",),
        actions=(Action("lookup_orders"), Action("cancel_order", b'{"order":"A-10002"}', granted)),
        ts="2026-09-30T12:00:00Z",
        context_id="c-1",
        message_id="m-1",
    )
    payload = receipt_payload(claims)
    assert (
        b'"argsHash":"'
        + b64url_sha256(b'{"order":"A-10002"}').encode()
        + b'","authorizationDetail":'
        + (granted.encode() + b"}]")
        in payload
    )
    assert orjson.loads(payload)["actions"] == [
        {"tool": "lookup_orders"},
        {
            "tool": "cancel_order",
            "argsHash": b64url_sha256(b'{"order":"A-10002"}'),
            "authorizationDetail": orjson.loads(granted),
        },
    ]


async def _published_key(h: Harness, kid: str) -> Any:
    """The receipt key as a personal agent finds it: the card → RFC 8414 metadata → ``jwks_uri``."""
    card = await (await h.client.get("/a2a/acme/.well-known/agent-card.json")).json()
    scheme = card["securitySchemes"]["userDelegation"]["oauth2SecurityScheme"]
    metadata_path = scheme["oauth2MetadataUrl"].removeprefix(PUBLIC_URL)
    metadata = await (await h.client.get(metadata_path)).json()
    jwks = await (await h.client.get(metadata["jwks_uri"].removeprefix(PUBLIC_URL))).json()
    (jwk,) = [key for key in jwks["keys"] if key["kid"] == kid]
    return jwt.PyJWK.from_dict(jwk).key


async def test_s5_6_receipt_verifies_against_the_published_keys(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    clock = ManualClock(SEPT_30_NOON)
    gw = await make_gateway(cache_url, edit=enable_delegation(brand_login, provider_key_pem), clock=clock)
    grant = await grant_via_store(gw, ("orders:read", "orders:cancel"))
    response = await gw.send(
        "please cancel A-10002", message_id="m-cancel", headers=delegated(mint_for(gw, grant))
    )
    body = await response.read()
    assert response.status == 200, body
    message = orjson.loads(body)["message"]
    receipt = message["metadata"]["pact.receipt"]
    assert set(receipt) == {"jws", "claims"}

    header = jwt.get_unverified_header(receipt["jws"])
    assert header["typ"] == RECEIPT_TYP == "pact-receipt+jws"
    assert header["alg"] == "ES256"
    key = await _published_key(gw, header["kid"])
    payload = jwt.api_jws.decode(receipt["jws"], key, algorithms=["ES256"])
    # The payload is exactly the claims JSON the reply carries, byte for byte.
    assert b'"claims":' + payload + b"}" in body
    assert orjson.loads(payload) == receipt["claims"]

    assert receipt["claims"] == {
        "grantId": grant.grant_id,
        "user": BRAND_USER,
        "pa": gw.issuer,
        "brand": f"{PUBLIC_URL}/a2a/acme",
        "scopesUsed": ["orders:cancel"],
        "actions": [
            {"tool": "cancel_order", "argsHash": b64url_sha256(rfc8785.dumps({"order": "A-10002"}))},
        ],
        "ts": "2026-09-30T12:00:00Z",
        "contextId": message["contextId"],
        "messageId": "m-cancel",
    }


async def test_s5_6_retry_returns_the_same_reply_and_receipt(
    make_gateway: MakeGateway, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    clock = ManualClock()
    gw = await make_gateway(cache_url, edit=enable_delegation(brand_login, provider_key_pem), clock=clock)
    token = mint_for(gw, await grant_via_store(gw, ("orders:read",)))
    first = await gw.send("list my orders", message_id="m-1", headers=delegated(token))
    body = await first.read()
    context_id = orjson.loads(body)["message"]["contextId"]
    clock.advance(5)  # a re-signed receipt would carry another ts
    again = await gw.send("list my orders", message_id="m-1", context_id=context_id, headers=delegated(token))
    assert again.status == 200
    assert await again.read() == body
    assert len(gw.bot.calls) == 1


async def test_s5_6_receipt_lists_a_lookup_without_args_hash(dgw: Harness) -> None:
    token = mint_for(dgw, await grant_via_store(dgw, ("orders:read",)))
    response = await dgw.send("list my orders", headers=delegated(token))
    claims = orjson.loads(await response.read())["message"]["metadata"]["pact.receipt"]["claims"]
    assert claims["actions"] == [{"tool": "lookup_orders"}]
    assert claims["scopesUsed"] == ["orders:read"]


async def test_s4_3_a_turn_cancelled_while_its_receipt_waits_to_be_signed_is_released(dgw: Harness) -> None:
    """§4.3 with §5.6: cancelled between the bot's reply and its receipt's signature, the turn is not
    stored and its in-flight marker goes, so the retry runs it (not "still being processed")."""
    token = mint_for(dgw, await grant_via_store(dgw, ("orders:read",)))
    runtime = dgw.client.app[RUNTIME].current
    assert runtime.delegation is not None
    assert runtime.oauth is not None
    brand = runtime.config.brands["acme"]
    delegation = runtime.delegation.verify(f"Bearer {token}", brand, dgw.issuer)
    opened = await dgw.send("hello", message_id="m-open", headers=delegated(token))
    context_id = orjson.loads(await opened.read())["message"]["contextId"]
    sent = {"messageId": "m-cut", "contextId": context_id, "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    message = parse_send_message(orjson.dumps({"message": sent}))
    turn = asyncio.create_task(
        runtime.turns.send(
            runtime.turns.owner("acme", dgw.issuer, "alice"),
            message,
            runtime.limits.a2a_charge("acme", brand.rate_limits, dgw.issuer, "alice"),
            "req-cut",
            delegation,
        )
    )
    batch = runtime.oauth.keys.batch
    for _ in range(100_000):  # loop passes: the bot's reply comes over loopback
        if batch or turn.done():
            break
        await asyncio.sleep(0)
    assert len(batch) == 1, "the turn never waited for its receipt's signature"
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    retry = await dgw.send("hi", message_id="m-cut", context_id=context_id, headers=delegated(token))
    assert retry.status == 200, await retry.read()
    reply = orjson.loads(await retry.read())["message"]
    assert reply["metadata"]["pact.receipt"]["claims"]["messageId"] == "m-cut"
    assert len(dgw.bot.calls) == 3
