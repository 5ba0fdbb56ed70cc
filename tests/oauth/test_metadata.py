"""§5.1 RFC 8414 metadata and the ``jwks_uri`` key set, and §2.2 routing of every OAuth endpoint."""

from __future__ import annotations

import orjson
import pytest

from tests.support.delegation import SCOPES, BrandLogin, enable_delegation, new_provider_key_pem
from tests.support.gateway import PUBLIC_URL, Harness, MakeGateway

INTERFACE = f"{PUBLIC_URL}/a2a/acme"
ISSUER = f"{INTERFACE}/oauth"
METADATA_PATHS = (
    "/a2a/{brand}/oauth/.well-known/oauth-authorization-server",
    "/.well-known/oauth-authorization-server/a2a/{brand}/oauth",
)
PUBLIC = {"Cache-Control": "public, max-age=300", "Access-Control-Allow-Origin": "*"}
POSTS = ("device_authorization", "token", "revoke", "introspect")
GETS = (*METADATA_PATHS, "/a2a/{brand}/oauth/jwks.json")


def expected_metadata(introspection: bool) -> dict[str, object]:
    document: dict[str, object] = {
        "issuer": ISSUER,
        "device_authorization_endpoint": f"{ISSUER}/device_authorization",
        "token_endpoint": f"{ISSUER}/token",
        "revocation_endpoint": f"{ISSUER}/revoke",
        "jwks_uri": f"{ISSUER}/jwks.json",
        "scopes_supported": list(SCOPES),
        "response_types_supported": [],
        "grant_types_supported": ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["pact_pa_jwt"],
        "revocation_endpoint_auth_methods_supported": ["pact_pa_jwt"],
    }
    if introspection:
        document["introspection_endpoint"] = f"{ISSUER}/introspect"
    return document


@pytest.mark.parametrize("path", METADATA_PATHS)
async def test_s5_1_metadata_is_public_rfc8414(dgw_memory: Harness, path: str) -> None:
    response = await dgw_memory.client.get(path.format(brand="acme"))
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json"
    for name, value in PUBLIC.items():
        assert response.headers[name] == value
    document = orjson.loads(await response.read())
    assert document == expected_metadata(introspection=False)
    # §5.4: the token's `iss` is the metadata's issuer, and the card links this document.
    card = await (await dgw_memory.client.get("/a2a/acme/.well-known/agent-card.json")).json()
    scheme = card["securitySchemes"]["userDelegation"]["oauth2SecurityScheme"]
    assert scheme["oauth2MetadataUrl"] == f"{ISSUER}/.well-known/oauth-authorization-server"
    assert scheme["flows"]["deviceCode"]["tokenUrl"] == document["token_endpoint"]
    assert (
        scheme["flows"]["deviceCode"]["deviceAuthorizationUrl"] == document["device_authorization_endpoint"]
    )


async def test_s5_1_metadata_names_introspection_only_when_configured(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    edit = enable_delegation(brand_login, provider_key_pem, introspection={"secret": "${INTROSPECTION}"})
    h = await make_gateway(edit=edit, environ={"INTROSPECTION": "s3cret-" * 6})
    response = await h.client.get(METADATA_PATHS[0].format(brand="acme"))
    assert orjson.loads(await response.read()) == expected_metadata(introspection=True)


async def test_s5_1_jwks_publishes_the_signing_keys(dgw_memory: Harness) -> None:
    response = await dgw_memory.client.get("/a2a/acme/oauth/jwks.json")
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json"
    for name, value in PUBLIC.items():
        assert response.headers[name] == value
    keys = orjson.loads(await response.read())["keys"]
    (key,) = keys
    assert key["kty"] == "EC"
    assert key["crv"] == "P-256"
    assert key["alg"] == "ES256"
    assert key["use"] == "sig"
    assert isinstance(key["kid"], str)
    assert "d" not in key


async def test_s5_1_rotation_publishes_every_key(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    enable = enable_delegation(brand_login, provider_key_pem)

    def edit(raw: dict[str, object]) -> None:
        enable(raw)
        raw["oauth"] = {"signing_keys": [{"value": new_provider_key_pem()}, {"value": provider_key_pem}]}

    h = await make_gateway(edit=edit)
    keys = orjson.loads(await (await h.client.get("/a2a/acme/oauth/jwks.json")).read())["keys"]
    assert len({key["kid"] for key in keys}) == 2


@pytest.mark.parametrize("brand", ["globex", "nobody"])
async def test_s5_a_brand_without_delegation_has_no_oauth_endpoints(dgw_memory: Harness, brand: str) -> None:
    h = dgw_memory
    for endpoint in POSTS:
        form = {"client_id": h.issuer, "scope": "orders:read", "grant_type": "refresh_token", "token": "x"}
        response = await h.client.post(f"/a2a/{brand}/oauth/{endpoint}", data=form, headers=h.auth())
        assert (endpoint, response.status) == (endpoint, 404)
        assert await response.read() == b""
    for path in GETS:
        response = await h.client.get(path.format(brand=brand))
        assert (path, response.status) == (path, 404)
        assert await response.read() == b""


async def test_s5_1_a_brand_without_delegation_keeps_the_identity_card(dgw_memory: Harness) -> None:
    card = await (await dgw_memory.client.get("/a2a/globex/.well-known/agent-card.json")).json()
    assert set(card["securitySchemes"]) == {"paJwt"}
    assert card["securityRequirements"] == [{"schemes": {"paJwt": {"list": []}}}]


async def test_s5_no_delegating_brand_means_no_oauth_anywhere(gw_memory: Harness) -> None:
    for endpoint in POSTS:
        response = await gw_memory.client.post(f"/a2a/acme/oauth/{endpoint}", headers=gw_memory.auth())
        assert response.status == 404
    for path in GETS:
        assert (await gw_memory.client.get(path.format(brand="acme"))).status == 404


@pytest.mark.parametrize("endpoint", ["device_authorization", "token", "revoke"])
async def test_s2_2_oauth_routing_then_authentication_then_brand(dgw_memory: Harness, endpoint: str) -> None:
    h = dgw_memory
    # Authentication comes before the Brand lookup, as on every A2A operation.
    response = await h.client.post(f"/a2a/globex/oauth/{endpoint}", data={"client_id": h.issuer})
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="a2a"'
    # And routing before both: a wrong method is a bare 405, token or not.
    response = await h.client.get(f"/a2a/acme/oauth/{endpoint}", headers=h.auth())
    assert response.status == 405
    assert await response.read() == b""


async def test_s6_oauth_answers_are_never_a2a_json(dgw_memory: Harness) -> None:
    h = dgw_memory
    answers = [
        await h.client.post("/a2a/acme/oauth/token", data={"client_id": h.issuer}, headers=h.auth()),
        await h.client.post("/a2a/acme/oauth/token", data={"client_id": "x"}, headers=h.auth()),
        await h.client.post(
            "/a2a/acme/oauth/device_authorization", data={"client_id": h.issuer}, headers=h.auth()
        ),
        await h.client.post("/a2a/acme/oauth/token", json={"grant_type": "refresh_token"}, headers=h.auth()),
        await h.client.post("/a2a/acme/oauth/revoke", data={"client_id": h.issuer}, headers=h.auth()),
    ]
    for response in answers:
        assert 400 <= response.status < 500
        assert response.headers["Content-Type"] == "application/json"
        assert "error" in orjson.loads(await response.read())
