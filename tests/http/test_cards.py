"""§2.1 Agent Cards over HTTP: public, cacheable, conditional, per Brand and per domain."""

from __future__ import annotations

import orjson

from tests.support.delegation import SCOPES
from tests.support.gateway import PUBLIC_URL, Harness, MakeGateway


async def test_s2_1_card_is_public_and_cacheable(gw_memory: Harness) -> None:
    response = await gw_memory.client.get("/a2a/acme/.well-known/agent-card.json")
    assert response.status == 200
    assert response.headers["Cache-Control"] == "public, max-age=300"
    assert response.headers["Access-Control-Allow-Origin"] == "*"
    assert response.headers["Content-Type"].startswith("application/json")
    card = orjson.loads(await response.read())
    assert card["supportedInterfaces"] == [
        {"url": f"{PUBLIC_URL}/a2a/acme", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
    ]
    assert card["capabilities"] == {
        "streaming": False,
        "pushNotifications": False,
        "extendedAgentCard": False,
    }
    assert card["securityRequirements"] == [{"schemes": {"paJwt": {"list": []}}}]
    other = orjson.loads(await (await gw_memory.client.get("/a2a/globex/.well-known/agent-card.json")).read())
    assert other["name"] == "Globex Support"
    assert other["supportedInterfaces"][0]["url"] == f"{PUBLIC_URL}/a2a/globex"


async def test_s2_1_etag_and_if_none_match(gw_memory: Harness) -> None:
    first = await gw_memory.client.get("/a2a/acme/.well-known/agent-card.json")
    etag = first.headers["ETag"]
    again = await gw_memory.client.get(
        "/a2a/acme/.well-known/agent-card.json", headers={"If-None-Match": etag}
    )
    assert again.status == 304
    assert await again.read() == b""
    assert again.headers["ETag"] == etag
    stale = await gw_memory.client.get(
        "/a2a/acme/.well-known/agent-card.json", headers={"If-None-Match": '"x"'}
    )
    assert stale.status == 200


async def test_s2_1_unknown_brand_is_bare_404(gw_memory: Harness) -> None:
    response = await gw_memory.client.get("/a2a/nobody/.well-known/agent-card.json")
    assert (response.status, await response.read()) == (404, b"")


async def test_s2_1_card_at_brand_domain(gw_memory: Harness) -> None:
    response = await gw_memory.client.get(
        "/.well-known/agent-card.json", headers={"Host": "support.acme.test"}
    )
    assert response.status == 200
    assert orjson.loads(await response.read())["name"] == "Acme Support"
    with_port = await gw_memory.client.get(
        "/.well-known/agent-card.json", headers={"Host": "SUPPORT.acme.test:443"}
    )
    assert with_port.status == 200
    elsewhere = await gw_memory.client.get("/.well-known/agent-card.json", headers={"Host": "gw.test"})
    assert (elsewhere.status, await elsewhere.read()) == (404, b"")


async def test_s2_1_scheme_name_configurable(make_gateway: MakeGateway) -> None:
    def edit(raw: dict[str, object]) -> None:
        raw["security_scheme_name"] = "platformJwt"

    gw = await make_gateway(edit=edit)
    card = orjson.loads(await (await gw.client.get("/a2a/acme/.well-known/agent-card.json")).read())
    assert list(card["securitySchemes"]) == ["platformJwt"]


async def test_s5_1_delegating_card_adds_the_device_code_scheme(dgw_memory: Harness) -> None:
    card = orjson.loads(await (await dgw_memory.client.get("/a2a/acme/.well-known/agent-card.json")).read())
    oauth = f"{PUBLIC_URL}/a2a/acme/oauth"
    assert card["securitySchemes"]["userDelegation"] == {
        "oauth2SecurityScheme": {
            "flows": {
                "deviceCode": {
                    "deviceAuthorizationUrl": f"{oauth}/device_authorization",
                    "tokenUrl": f"{oauth}/token",
                    "scopes": SCOPES,
                }
            },
            "oauth2MetadataUrl": f"{oauth}/.well-known/oauth-authorization-server",
        }
    }
    flow = card["securitySchemes"]["userDelegation"]["oauth2SecurityScheme"]["flows"]["deviceCode"]
    assert list(flow["scopes"]) == list(SCOPES)  # the configured order
    # The PA-only entry stays, first (§5.1).
    assert card["securityRequirements"] == [
        {"schemes": {"paJwt": {"list": []}}},
        {"schemes": {"paJwt": {"list": []}, "userDelegation": {"list": []}}},
    ]


async def test_s5_1_brand_without_delegation_keeps_its_card_byte_for_byte(
    make_gateway: MakeGateway, dgw_memory: Harness
) -> None:
    plain = await make_gateway()
    path = "/a2a/globex/.well-known/agent-card.json"
    assert await (await dgw_memory.client.get(path)).read() == await (await plain.client.get(path)).read()
