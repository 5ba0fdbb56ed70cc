"""§5.3 RFC 8628 device authorization, through HTTP: authentication, ``client_id``, scopes, the answer."""

from __future__ import annotations

import logging
import re
import socket
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
import redis.asyncio as aioredis
from aiohttp import ClientResponse

from gateway.config import CacheConfig
from gateway.ops.metrics import Metrics
from gateway.store.memory import MemoryStore
from tests.support.delegation import (
    LOGIN_URL,
    BrandLogin,
    device_authorize,
    enable_delegation,
    oauth_path,
    oauth_server,
    obtain_tokens,
    post_form,
)
from tests.support.gateway import AUDIENCE, OTHER_PA, PUBLIC_URL, Harness, MakeGateway

URL = oauth_path("device_authorization")
USER_CODE = re.compile(r"^[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}$")
BASE64URL = re.compile(r"^[A-Za-z0-9_-]+$")


async def oauth_error(response: ClientResponse) -> str:
    """The RFC 6749 §5.2 ``error`` of an OAuth answer, after checking it is uncacheable JSON."""
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["Pragma"] == "no-cache"
    body: dict[str, Any] = orjson.loads(await response.read())
    return str(body["error"])


def assert_bare_401(response: ClientResponse, body: bytes) -> None:
    assert response.status == 401
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="a2a"'
    assert body == b""
    assert "a2a+json" not in response.headers.get("Content-Type", "")


async def test_s5_3_device_authorization_without_pa_jwt_is_bare_401(dgw_memory: Harness) -> None:
    form = {"client_id": dgw_memory.issuer, "scope": "orders:read"}
    response = await dgw_memory.client.post(URL, data=form)
    assert_bare_401(response, await response.read())
    # Authentication comes before the body: a malformed one still gets the bare 401.
    response = await dgw_memory.client.post(URL, data=b"\xff\xfe{", headers={"Content-Type": "text/plain"})
    assert_bare_401(response, await response.read())


@pytest.mark.parametrize("why", ["wrong_audience", "expired", "disabled_issuer", "not_a_jwt"])
async def test_s5_3_bad_pa_jwt_is_bare_401(dgw_memory: Harness, why: str) -> None:
    h = dgw_memory
    tokens = {
        "wrong_audience": h.key.mint(h.issuer, "alice", f"{PUBLIC_URL}/a2a/acme"),
        "expired": h.key.mint(h.issuer, "alice", AUDIENCE, iat=1_000_000, exp=1_000_060),
        "disabled_issuer": h.key.mint("https://disabled-pa.example", "alice", AUDIENCE),
        "not_a_jwt": "not-a-jwt",
    }
    response = await h.client.post(
        URL,
        data={"client_id": h.issuer, "scope": "orders:read"},
        headers={"Authorization": f"Bearer {tokens[why]}"},
    )
    assert_bare_401(response, await response.read())


@pytest.mark.parametrize("client_id", [OTHER_PA, "{issuer}/", None])
async def test_s5_3_client_id_must_be_the_pa_issuer(dgw_memory: Harness, client_id: str | None) -> None:
    form = {"scope": "orders:read"}
    if client_id is not None:
        form["client_id"] = client_id.format(issuer=dgw_memory.issuer)
    response = await post_form(dgw_memory, "device_authorization", form)
    assert response.status == 401
    assert await oauth_error(response) == "invalid_client"
    # RFC 6749 §5.2: the client authenticated with a header, so it hears the scheme back.
    assert response.headers["WWW-Authenticate"].startswith("Bearer ")


@pytest.mark.parametrize(
    "scope",
    [
        "orders:refund",
        "orders:read orders:refund",
        "",
        None,
        "orders:read orders:read",
        "orders:read  orders:cancel",
        " orders:read",
    ],
)
async def test_s5_3_unknown_empty_or_repeated_scope_is_invalid_scope(
    dgw_memory: Harness, scope: str | None
) -> None:
    form = {"client_id": dgw_memory.issuer}
    if scope is not None:
        form["scope"] = scope
    response = await post_form(dgw_memory, "device_authorization", form)
    assert response.status == 400
    assert await oauth_error(response) == "invalid_scope"


async def test_s5_3_answer_is_rfc8628_shaped_and_uncacheable(dgw: Harness) -> None:
    response = await post_form(
        dgw, "device_authorization", {"client_id": dgw.issuer, "scope": "orders:read orders:cancel"}
    )
    assert response.status == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.headers["Cache-Control"] == "no-store"
    assert response.headers["Pragma"] == "no-cache"
    answer = orjson.loads(await response.read())
    assert set(answer) == {
        "device_code",
        "user_code",
        "verification_uri",
        "verification_uri_complete",
        "expires_in",
        "interval",
    }
    assert USER_CODE.match(answer["user_code"])
    device_code = answer["device_code"]
    assert BASE64URL.match(device_code)
    assert len(device_code) * 6 >= 128
    assert (answer["expires_in"], answer["interval"]) == (600, 5)
    consent = f"{PUBLIC_URL}/a2a/acme/oauth/consent"
    plain = urlsplit(answer["verification_uri"])
    assert f"{plain.scheme}://{plain.netloc}{plain.path}" == LOGIN_URL
    assert parse_qs(plain.query) == {"return_to": [consent]}
    complete = urlsplit(answer["verification_uri_complete"])
    assert f"{complete.scheme}://{complete.netloc}{complete.path}" == LOGIN_URL
    (return_to,) = parse_qs(complete.query)["return_to"]
    back = urlsplit(return_to)
    assert f"{back.scheme}://{back.netloc}{back.path}" == consent
    assert parse_qs(back.query) == {"user_code": [answer["user_code"]]}


async def test_s5_3_every_authorization_gets_its_own_codes(dgw: Harness) -> None:
    first = await device_authorize(dgw)
    second = await device_authorize(dgw)
    assert first["device_code"] != second["device_code"]
    assert first["user_code"] != second["user_code"]


async def test_s5_2_scopes_are_kept_in_the_card_order(dgw: Harness) -> None:
    started = await device_authorize(dgw, ["profile:read", "orders:read"])
    server = oauth_server(dgw)
    pending = await server.store.authorization_by_user_code("acme", started["user_code"], server.clock())
    assert pending is not None
    assert pending.scopes == ("orders:read", "profile:read")
    assert pending.client_id == dgw.issuer


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b'{"client_id": "x", "scope": "orders:read"}', "application/json"),
        (b"client_id={issuer}&scope=orders:read&scope=orders:cancel", "application/x-www-form-urlencoded"),
        (b"client_id={issuer}&scope=orders%FFread", "application/x-www-form-urlencoded"),
        (b"client_id={issuer}&scope=orders:read&pad=" + b"x" * 70_000, "application/x-www-form-urlencoded"),
    ],
    ids=["json", "repeated_parameter", "not_utf8", "too_large"],
)
async def test_s5_3_a_body_that_is_not_an_rfc6749_form_is_invalid_request(
    dgw_memory: Harness, body: bytes, content_type: str
) -> None:
    response = await dgw_memory.client.post(
        URL,
        data=body.replace(b"{issuer}", dgw_memory.issuer.encode()),
        headers={**dgw_memory.auth(), "Content-Type": content_type},
    )
    assert response.status == 400
    assert await oauth_error(response) == "invalid_request"


async def test_s5_3_unknown_parameters_are_ignored(dgw_memory: Harness) -> None:
    form = {"client_id": dgw_memory.issuer, "scope": "orders:read", "audience": "x", "empty": ""}
    response = await post_form(dgw_memory, "device_authorization", form)
    assert response.status == 200


async def test_s5_3_started_authorizations_are_counted(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    metrics = Metrics()
    h = await make_gateway(edit=enable_delegation(brand_login, provider_key_pem), metrics=metrics)
    await device_authorize(h)
    await device_authorize(h)
    labels = {"brand": "acme", "event": "authorization_started"}
    assert metrics.registry.get_sample_value("pact_delegation_events_total", labels) == 2
    labels = {"brand": "acme", "operation": "OAuthDeviceAuthorization", "outcome": "ok"}
    assert metrics.registry.get_sample_value("pact_requests_total", labels) == 2


async def _everything_stored(client: aioredis.Redis) -> bytes:
    """Every key name and every value in the test database, whatever its type, as one blob to search."""
    seen: list[Any] = []
    for key in await client.keys("*"):
        seen.append(key)
        kind = await client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "none":
            continue  # expired between KEYS and TYPE
        if kind == "string":
            seen.append(await client.get(key))
        elif kind == "hash":
            for field, value in (await client.hgetall(key)).items():
                seen += [field, value]
        elif kind == "set":
            seen += list(await client.smembers(key))
        elif kind == "zset":
            seen += list(await client.zrange(key, 0, -1))
        elif kind == "list":
            seen += list(await client.lrange(key, 0, -1))
        else:
            pytest.fail(f"unexpected Redis type {kind}")
    return b"\n".join(item if isinstance(item, bytes) else str(item).encode() for item in seen)


async def test_s5_3_no_code_or_token_is_stored_in_clear(
    make_gateway: MakeGateway,
    redis_url: str,
    redis_client: aioredis.Redis,
    brand_login: BrandLogin,
    provider_key_pem: str,
) -> None:
    h = await make_gateway(redis_url, edit=enable_delegation(brand_login, provider_key_pem))
    started = await device_authorize(h, ["orders:read", "orders:cancel"])
    stored = await _everything_stored(redis_client)
    assert b"orders:cancel" in stored, "the authorization must be in Redis"
    assert started["device_code"].encode() not in stored
    tokens = await obtain_tokens(h)
    stored = await _everything_stored(redis_client)
    for secret in (started["device_code"], tokens["refresh_token"], tokens["access_token"]):
        assert secret.encode() not in stored


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_s5_3_store_down_is_server_error_logged_once(
    make_gateway: MakeGateway,
    brand_login: BrandLogin,
    provider_key_pem: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = await make_gateway(
        f"redis://127.0.0.1:{closed_port()}/15", edit=enable_delegation(brand_login, provider_key_pem)
    )
    with caplog.at_level(logging.ERROR, logger="pact_gateway.oauth"):
        response = await post_form(h, "device_authorization", {"client_id": h.issuer, "scope": "orders:read"})
    assert response.status == 500
    assert await oauth_error(response) == "server_error"
    (record,) = [record for record in caplog.records if record.name == "pact_gateway.oauth"]
    assert record.request_id == response.headers["X-Request-Id"]  # type: ignore[attr-defined]
    assert record.exc_info is None


async def test_s6_oauth_endpoints_are_rate_limited_like_a2a_operations(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """A device authorization writes to the store: a PA's User asking too fast gets a bare 429."""

    def tight(raw: dict[str, Any]) -> None:
        enable_delegation(brand_login, provider_key_pem)(raw)
        raw["rate_limits"]["per_user"] = {"rate": 0.01, "burst": 2}

    h = await make_gateway(edit=tight)
    form = {"client_id": h.issuer, "scope": "orders:read"}
    answers = [await post_form(h, "device_authorization", form) for _ in range(3)]
    assert [answer.status for answer in answers] == [200, 200, 429]
    assert int(answers[2].headers["Retry-After"]) > 0
    assert await answers[2].read() == b""
    # Another User of the same personal agent still gets through.
    assert (await post_form(h, "device_authorization", form, sub="bob")).status == 200


async def test_l4_device_authorizations_past_the_memory_bound_get_slow_down_and_are_not_stored(
    make_gateway: MakeGateway, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Issue 28 L4: §5 records count toward ``cache.max_entries`` (116 went in at the bound before);
    at it, with nothing that may go, a device authorization is refused with RFC 8628 §3.5's
    ``slow_down`` and ``Retry-After``, and nothing of it is stored."""
    store = MemoryStore(CacheConfig(max_entries=40))
    metrics = Metrics()
    gw = await make_gateway(
        edit=enable_delegation(brand_login, provider_key_pem), store=store, metrics=metrics
    )
    form = {"client_id": gw.issuer, "scope": "orders:read"}
    statuses = []
    for index in range(12):  # each from a fresh sub: no rate limit of theirs is near
        response = await post_form(gw, "device_authorization", form, sub=f"fresh-{index}")
        statuses.append(response.status)
        if response.status == 429:
            assert await oauth_error(response) == "slow_down"
            assert response.headers["Retry-After"] == "60"
    answered = statuses.count(200)
    assert 0 < answered < 12
    assert statuses.count(429) == 12 - answered
    devices = [key for key in store.keyspace.entries if isinstance(key, str) and ":oauth:device:" in key]
    assert len(devices) == answered
    sample = metrics.registry.get_sample_value
    assert sample("pact_rate_limited_total", {"brand": "acme", "limit": "store_full"}) == 12 - answered
