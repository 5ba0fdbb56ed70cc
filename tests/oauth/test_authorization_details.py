"""RFC 9396 ``authorization_details`` at the OAuth server, through HTTP, on memory, Redis and a Redis
Cluster: the metadata, every refusal of the device authorization request (§5), and the details a token
answer, a delegation token, a refresh and introspection carry.

The consent page's own part (which details a User approves) has its tests beside the page; here the
approval is given through the store as the page gives it (tests/support/rar.py).
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse

from gateway.app import reload_runtime
from gateway.handlers.state import METRICS
from gateway.oauth.access_token import InvalidToken, verify_access_token
from gateway.protocol.claims import MAX_TOKEN_LENGTH
from tests.support.delegation import (
    BrandLogin,
    delegated,
    device_authorize,
    enable_delegation,
    oauth_server,
    poll_token,
    post_form,
    refresh,
)
from tests.support.gateway import PUBLIC_URL, Harness, MakeGateway
from tests.support.pa import ManualClock
from tests.support.rar import (
    ADDRESS,
    ORDER,
    address,
    approve_details_via_store,
    authorize_with_details,
    canonical,
    details_param,
    enable_details,
    obtain_tokens_with_details,
    order,
)

SECRET = "brand-backend-secret-rar-0123456789abcdef"
ENVIRON = {"ACME_INTROSPECTION_SECRET": SECRET}
INTERFACE = f"{PUBLIC_URL}/a2a/acme"
ALL_SCOPES = ("orders:read", "orders:cancel", "profile:read")
INVALID = "invalid_authorization_details"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def rgw(
    make_gateway: MakeGateway,
    delegation_store_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    clock: ManualClock,
) -> Harness:
    """A gateway whose ``acme`` Brand accepts the order and address detail types, with introspection."""
    edit = enable_details(
        brand_login, provider_key_pem, introspection={"secret": "${ACME_INTROSPECTION_SECRET}"}
    )
    return await make_gateway(delegation_store_url, edit=edit, clock=clock, environ=ENVIRON)


async def refusal(response: ClientResponse, error: str = INVALID) -> str:
    """The ``error_description`` of a ``400`` RFC 6749 §5.2 answer with ``error``."""
    assert response.status == 400, await response.text()
    assert response.headers["Cache-Control"] == "no-store"
    body: dict[str, str] = orjson.loads(await response.read())
    assert body["error"] == error
    return body.get("error_description", "")


def refused_count(h: Harness) -> float:
    labels = {"brand": "acme", "event": "authorization_details_refused"}
    return h.client.app[METRICS].registry.get_sample_value("pact_delegation_events_total", labels) or 0.0


def payload_bytes(token: str) -> bytes:
    """The signed JWT's payload as it was serialized (the bytes the signature covers)."""
    segment = token.split(".")[1]
    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


def claims_of(h: Harness, token: str) -> tuple[str, ...]:
    """The token's details as the gateway verifies them (canonical JSON each)."""
    server = oauth_server(h)
    claims = verify_access_token(
        server.keys, token, issuer=f"{INTERFACE}/oauth", audience=INTERFACE, now=server.clock()
    )
    return claims.authorization_details


async def introspect(h: Harness, token: str) -> dict[str, Any]:
    response = await h.client.post(
        "/a2a/acme/oauth/introspect", data={"token": token}, headers={"Authorization": f"Bearer {SECRET}"}
    )
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = orjson.loads(await response.read())
    return answer


async def refresh_with(
    h: Harness, refresh_token: str, details: str, *, scope: str | None = None
) -> ClientResponse:
    """A refresh asking ``authorization_details`` (and ``scope`` if given)."""
    form = {
        "grant_type": "refresh_token",
        "refresh_token": refresh_token,
        "client_id": h.issuer,
        "authorization_details": details,
    }
    if scope is not None:
        form["scope"] = scope
    return await post_form(h, "token", form)


# --- metadata (RFC 9396 §10) -----------------------------------------------------------------------


async def test_rfc9396_s10_metadata_lists_the_brands_types_in_configuration_order(rgw: Harness) -> None:
    document = orjson.loads(
        await (await rgw.client.get("/a2a/acme/oauth/.well-known/oauth-authorization-server")).read()
    )
    assert document["authorization_details_types_supported"] == [ORDER, ADDRESS]


async def test_rfc9396_s10_metadata_names_no_types_when_the_brand_has_none(dgw_memory: Harness) -> None:
    path = "/a2a/acme/oauth/.well-known/oauth-authorization-server"
    document = orjson.loads(await (await dgw_memory.client.get(path)).read())
    assert "authorization_details_types_supported" not in document


# --- the device authorization request: every refusal (RFC 9396 §5) ---------------------------------

DEEP: Any = "deep"
for _ in range(9):
    DEEP = [DEEP]

REFUSALS = [
    pytest.param("[{", "is not JSON", id="not-json"),
    pytest.param(orjson.dumps(order()).decode(), "is not a JSON array", id="not-an-array"),
    pytest.param("[]", "is empty", id="empty-array"),
    pytest.param('["A-10001"]', "must be a JSON object", id="not-an-object"),
    pytest.param(
        details_param([{"type": "https://acme.example/rar/other", "identifier": "A-10001"}]),
        "does not support",
        id="unknown-type",
    ),
    pytest.param('[{"identifier":"A-10001"}]', "does not support", id="no-type"),
    pytest.param(details_param([order(colour="red")]), "a field its type does not allow", id="unknown-field"),
    pytest.param(details_param([{"type": ORDER}]), "lacks a required one", id="missing-field"),
    pytest.param(details_param([order("B-1")]), "a field its type does not allow", id="field-against-schema"),
    pytest.param(
        details_param([order(actions=["ship"])]), "an action its type does not allow", id="action-not-allowed"
    ),
    pytest.param(details_param([order(actions=[])]), "an action its type does not allow", id="actions-empty"),
    pytest.param(
        details_param([order(actions="cancel")]), "an action its type does not allow", id="actions-not-a-list"
    ),
    pytest.param(details_param([address()]), "belongs to no scope of this request", id="scope-not-requested"),
    pytest.param(details_param([order(f"A-{n:05}") for n in range(9)]), "more details than", id="too-many"),
    pytest.param(details_param([order(reason="x" * 5000)]), "larger than", id="too-large"),
    pytest.param(details_param([order(reason=DEEP)]), "nested deeper", id="too-deep"),
]


@pytest.mark.parametrize(("details", "why"), REFUSALS)
async def test_rfc9396_s5_device_authorization_refuses_invalid_authorization_details(
    rgw: Harness, details: str, why: str
) -> None:
    response = await authorize_with_details(rgw, ("orders:read", "orders:cancel"), details)
    description = await refusal(response)
    assert why in description
    assert "A-10001" not in description  # never the client's own text
    assert refused_count(rgw) == 1


async def test_rfc9396_a_brand_with_no_detail_types_refuses_the_parameter(
    make_gateway: MakeGateway, delegation_store_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    h = await make_gateway(delegation_store_url, edit=enable_delegation(brand_login, provider_key_pem))
    response = await authorize_with_details(h, ("orders:cancel",), details_param([order()]))
    assert await refusal(response) == "no authorization details types are supported"
    assert refused_count(h) == 1
    # Without the parameter, nothing changes for such a Brand.
    assert (await device_authorize(h))["user_code"]


async def test_rfc9396_the_parameter_fits_the_forms_size_cap_and_a_bigger_body_stays_refused(
    rgw: Harness,
) -> None:
    """The largest parameter a Brand admits by default (``max_authorization_details_bytes``), every byte
    of it percent-encoded, still fits ``limits.max_body_bytes`` with the rest of the form; a body past
    that cap is refused before it is parsed, as every form is."""
    delegation = rgw.config.brands["acme"].delegation
    assert delegation is not None
    wide = "é" * 190  # two bytes each, six once percent-encoded
    details = details_param([order(f"A-{n:05}", reason=wide) for n in range(8)])
    assert delegation.max_authorization_details_bytes - 512 < len(details.encode()) <= 4096
    response = await authorize_with_details(rgw, ("orders:cancel",), details)
    assert response.status == 200, await response.text()
    too_big = rgw.config.limits.max_body_bytes
    response = await authorize_with_details(rgw, ("orders:cancel",), None, form={"padding": "x" * too_big})
    assert await refusal(response, "invalid_request") == "Request body too large"


async def test_rfc9396_a_token_carrying_the_most_details_a_brand_admits_still_works(rgw: Harness) -> None:
    """The details travel in every delegation token, which a turn takes in one header of at most
    ``MAX_TOKEN_LENGTH`` characters: the largest parameter admitted must still make a usable token."""
    wide = "é" * 190
    most = [order(f"A-{n:05}", reason=wide) for n in range(8)]
    assert len(details_param(most).encode()) > 3584
    answer = await obtain_tokens_with_details(rgw, ("orders:cancel",), most)
    assert answer["authorization_details"] == most
    assert len(answer["access_token"]) <= MAX_TOKEN_LENGTH
    assert claims_of(rgw, answer["access_token"]) == canonical(*most)
    response = await rgw.send("cancel my orders", headers=delegated(answer["access_token"]))
    assert response.status == 200, await response.text()


# --- tokens: exactly the approved details (RFC 9396 §7, §9.1) -----------------------------------------


async def test_rfc9396_s7_the_token_answer_and_token_carry_the_approved_details_as_requested(
    rgw: Harness,
) -> None:
    asked = [order(actions=["cancel"]), address("work")]
    param = details_param(asked)
    response = await authorize_with_details(rgw, ALL_SCOPES, param)
    started = await response.json()
    await approve_details_via_store(rgw, started)
    polled = await poll_token(rgw, started["device_code"])
    assert polled.status == 200
    raw = await polled.read()
    # The same bytes as requested, in the answer and in the signed token.
    assert b'"authorization_details":' + param.encode() in raw
    answer = orjson.loads(raw)
    assert answer["authorization_details"] == asked
    assert f'"authorization_details":{param}'.encode() in payload_bytes(answer["access_token"])
    assert claims_of(rgw, answer["access_token"]) == canonical(*asked)


async def test_rfc9396_details_are_kept_canonical_whatever_the_requests_spelling(rgw: Harness) -> None:
    spelled = (
        '[ {"identifier" : "A-10001",\n "type": "https://acme.example/rar/order"}, '
        + orjson.dumps(order()).decode()
        + "]"
    )
    response = await authorize_with_details(rgw, ("orders:cancel",), spelled)
    started = await response.json()
    await approve_details_via_store(rgw, started)
    answer = await (await poll_token(rgw, started["device_code"])).json()
    assert claims_of(rgw, answer["access_token"]) == canonical(order())  # the repeated detail once
    assert answer["authorization_details"] == [order()]


async def test_rfc9396_a_declined_scope_takes_its_details_and_none_approved_means_no_member(
    rgw: Harness,
) -> None:
    answer = await obtain_tokens_with_details(
        rgw, ALL_SCOPES, [order(), address()], approve=("orders:read", "profile:read")
    )
    assert answer["scope"] == "orders:read profile:read"
    assert answer["authorization_details"] == [address()]
    bare = await obtain_tokens_with_details(
        rgw, ALL_SCOPES, [order(), address()], approve=("orders:read",), sub="bob"
    )
    assert "authorization_details" not in bare
    assert b"authorization_details" not in payload_bytes(bare["access_token"])
    assert claims_of(rgw, bare["access_token"]) == ()


# --- refresh: kept, narrowed, never widened -------------------------------------------------------------


async def test_rfc9396_a_refresh_keeps_the_details(rgw: Harness) -> None:
    first = await obtain_tokens_with_details(rgw, ALL_SCOPES, [order(), address()])
    response = await refresh(rgw, first["refresh_token"])
    assert response.status == 200
    again = await response.json()
    assert again["authorization_details"] == [order(), address()]
    assert claims_of(rgw, again["access_token"]) == canonical(order(), address())


async def test_rfc9396_a_refresh_narrowing_scope_drops_the_details_of_the_scopes_left_out(
    rgw: Harness,
) -> None:
    first = await obtain_tokens_with_details(rgw, ALL_SCOPES, [order(), address()])
    response = await refresh(rgw, first["refresh_token"], scope="orders:read profile:read")
    narrowed = await response.json()
    assert narrowed["authorization_details"] == [address()]
    assert claims_of(rgw, narrowed["access_token"]) == canonical(address())
    # The grant keeps what the User approved: a later refresh without `scope` has it all again.
    whole = await (await refresh(rgw, narrowed["refresh_token"])).json()
    assert whole["authorization_details"] == [order(), address()]


async def test_rfc9396_a_refresh_asking_authorization_details_narrows_them(rgw: Harness) -> None:
    first = await obtain_tokens_with_details(rgw, ALL_SCOPES, [order(), order("A-10002"), address()])
    # Non-canonical spelling, another order: the same details by their canonical JSON.
    asked = (
        '[{"type":"https://acme.example/rar/address","identifier":"home"},'
        + details_param([order("A-10002")])[1:]
    )
    response = await refresh_with(rgw, first["refresh_token"], asked)
    assert response.status == 200, await response.text()
    narrowed = await response.json()
    assert narrowed["authorization_details"] == [order("A-10002"), address()]  # the grant's order
    assert claims_of(rgw, narrowed["access_token"]) == canonical(order("A-10002"), address())


@pytest.mark.parametrize(
    ("asked", "scope", "why"),
    [
        pytest.param(details_param([order("A-10009")]), None, "was not granted", id="another-resource"),
        pytest.param(details_param([order(actions=["refund"])]), None, "was not granted", id="more-actions"),
        pytest.param(details_param([order(), order("A-10009")]), None, "was not granted", id="one-more"),
        pytest.param(
            details_param([order()]), "orders:read", "no scope of this request", id="scope-narrowed-away"
        ),
        pytest.param("[]", None, "is empty", id="empty"),
        pytest.param("{", None, "is not JSON", id="not-json"),
    ],
)
async def test_rfc9396_a_refresh_never_widens_the_details_and_rotates_nothing_when_refused(
    rgw: Harness, asked: str, scope: str | None, why: str
) -> None:
    first = await obtain_tokens_with_details(rgw, ALL_SCOPES, [order()])
    response = await refresh_with(rgw, first["refresh_token"], asked, scope=scope)
    assert why in await refusal(response)
    assert refused_count(rgw) == 1
    # Checked before anything rotated: the presented token is still the current one.
    kept = await refresh(rgw, first["refresh_token"])
    assert kept.status == 200
    assert (await kept.json())["authorization_details"] == [order()]


async def test_rfc9396_a_refresh_of_a_grant_without_details_asking_some_is_refused(rgw: Harness) -> None:
    plain = await device_authorize(rgw, ("orders:cancel",), sub="bob")
    await approve_details_via_store(rgw, plain, scopes=("orders:cancel",))
    second = await (await poll_token(rgw, plain["device_code"], sub="bob")).json()
    assert "authorization_details" not in second
    form = {
        "grant_type": "refresh_token",
        "refresh_token": second["refresh_token"],
        "client_id": rgw.issuer,
        "authorization_details": details_param([order()]),
    }
    assert "was not granted" in await refusal(await post_form(rgw, "token", form, sub="bob"))


# --- introspection (RFC 9396 §9.2) ------------------------------------------------------------------------


async def test_rfc9396_s9_2_introspection_returns_the_tokens_details(rgw: Harness) -> None:
    answer = await obtain_tokens_with_details(rgw, ALL_SCOPES, [order(), address()])
    described = await introspect(rgw, answer["access_token"])
    assert described["active"] is True
    assert described["authorization_details"] == [order(), address()]
    narrowed = await (await refresh(rgw, answer["refresh_token"], scope="orders:read")).json()
    assert "authorization_details" not in await introspect(rgw, narrowed["access_token"])


# --- step-up carries details like scopes (§5.3) ----------------------------------------------------------


async def test_rfc9396_s5_3_a_step_up_carries_the_live_grants_details(rgw: Harness) -> None:
    first = await obtain_tokens_with_details(rgw, ("orders:cancel",), [order()])
    response = await authorize_with_details(rgw, ("profile:read",), details_param([address()]))
    started = await response.json()
    approved = await approve_details_via_store(
        rgw, started, carried=("orders:cancel",), carried_details=canonical(order())
    )
    assert approved == canonical(address(), order())
    answer = await (await poll_token(rgw, started["device_code"])).json()
    assert answer["scope"] == "orders:cancel profile:read"
    assert answer["authorization_details"] == [address(), order()]
    server = oauth_server(rgw)
    claims = verify_access_token(
        server.keys,
        answer["access_token"],
        issuer=f"{INTERFACE}/oauth",
        audience=INTERFACE,
        now=server.clock(),
    )
    grant = await server.store.get_grant("acme", claims.grant_id, server.clock())
    assert grant is not None
    assert (grant.details, grant.carried_details) == (canonical(address(), order()), canonical(order()))
    # The superseded grant's tokens end with it.
    assert (await refresh(rgw, first["refresh_token"])).status == 400


# --- a type removed from the configuration (threat model) --------------------------------------------------


async def test_rfc9396_a_type_removed_from_the_configuration_is_no_longer_handed_out(rgw: Harness) -> None:
    answer = await obtain_tokens_with_details(rgw, ALL_SCOPES, [order(), address()])
    config = rgw.config
    delegation = config.brands["acme"].delegation
    assert delegation is not None
    kept = {ADDRESS: delegation.authorization_details[ADDRESS]}
    brand = dataclasses.replace(
        config.brands["acme"], delegation=dataclasses.replace(delegation, authorization_details=kept)
    )
    reload_runtime(rgw.client.app, dataclasses.replace(config, brands={**config.brands, "acme": brand}))
    # A token minted before the reload describes no order any more; every token after carries none.
    assert (await introspect(rgw, answer["access_token"]))["authorization_details"] == [address()]
    again = await (await refresh(rgw, answer["refresh_token"])).json()
    assert again["authorization_details"] == [address()]
    assert claims_of(rgw, again["access_token"]) == canonical(address())
    refused = await refresh_with(rgw, again["refresh_token"], details_param([order()]))
    assert "does not support" in await refusal(refused)


# --- the delegation token's claim, as verified -----------------------------------------------------------


@pytest.mark.parametrize(
    "claim",
    [
        pytest.param("[]", id="a-string"),
        pytest.param([], id="empty"),
        pytest.param([order(), "A-10001"], id="an-item-not-an-object"),
        pytest.param([order(n=2**60)], id="a-number-json-cannot-carry"),
    ],
)
async def test_rfc9396_s9_1_a_token_whose_claim_is_not_an_array_of_objects_is_refused(
    rgw: Harness, claim: Any
) -> None:
    """Only the gateway mints its tokens, and never so; one signed with another claim is refused all
    the same (``bad_authorization_details``) and introspects as inactive."""
    answer = await obtain_tokens_with_details(rgw, ("orders:cancel",), [order()])
    payload = orjson.loads(payload_bytes(answer["access_token"]))
    forged = oauth_server(rgw).keys.sign(orjson.dumps({**payload, "authorization_details": claim}), "at+jwt")
    with pytest.raises(InvalidToken) as refused:
        claims_of(rgw, forged)
    assert refused.value.reason == "bad_authorization_details"
    assert await introspect(rgw, forged) == {"active": False}
