"""The admin API on its own loopback listener, through HTTP on both backends: list, close and erase a
person's conversations; off by default, a bearer token from ${ENV}, precise JSON errors, a metric and an
audit line; never on the A2A or ops listener (issue 18 row I10).

The person's conversations are made the way a personal agent makes them (``message:send`` on the
A2A listener), and what erasing them leaves is checked the same way: an erased ``contextId`` answers
exactly as one that never existed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import inspect
import pkgutil
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, NamedTuple

import aiohttp
import orjson
import pytest
from aiohttp import ClientResponse
from prometheus_client import generate_latest

from gateway import upstream
from gateway.app import ADAPTER_STATE, reload_runtime
from gateway.config import AdminConfig
from gateway.handlers.state import METRICS
from gateway.ops.logs import sub_digest
from gateway.ops.metrics import Metrics
from gateway.process.admin import AdminListener
from gateway.process.erasure import ADAPTER_STATE_NAMES, AUDIT_LOGGER
from gateway.store import keys
from gateway.store.base import Owner
from gateway.store.redis import RedisStore
from gateway.upstream import openai
from tests.ops.conftest import CapturedLogs, OpsFor, Processes, free_port, sample, until
from tests.support.bot import ControlledBot
from tests.support.delegation import (
    BRAND_USER,
    BrandLogin,
    approve_via_store,
    delegated,
    device_authorize,
    enable_delegation,
    grant_via_store,
    mint_for,
    oauth_server,
    poll_token,
)
from tests.support.fake_openai import API_KEY, MODEL, FakeOpenAI
from tests.support.gateway import AUDIENCE, Harness, MakeGateway, base_config
from tests.support.pa import FakeJwksServer, PAKey
from tests.support.rar import enable_details, obtain_tokens_with_details, order
from tests.support.secrets_scan import remember

TOKEN = "admin-token-" + "7f3a9c" * 8
SUB = "person-5b1e-alice"
"""Long enough for the secrets scan to look for it in every log record (it must never be there)."""
UNKNOWN_CONTEXT = (400, "INVALID_PARAMS", "Unknown contextId")


def with_admin(*more: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        raw["metrics"] = {"enabled": True}
        raw["admin"] = {"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "port": 0}
        # Never binding, and a counter charged once still counts for 1,000 s: erasing it finds it.
        raw["rate_limits"]["per_user"] = {"rate": 0.001, "burst": 1000}
        for change in more:
            change(raw)

    return edit


class Admin(NamedTuple):
    harness: Harness
    api: aiohttp.ClientSession
    """A client of the admin listener: paths are ``/admin/…``."""
    listener: AdminListener


MakeAdmin = Callable[..., Awaitable[Admin]]


@pytest.fixture
async def make_admin(make_gateway: MakeGateway) -> AsyncIterator[MakeAdmin]:
    """``await make_admin(cache_url, edit=…, store=…)``: a gateway with the admin API on, and a client of
    its admin listener (the real one, on a port the system chose)."""
    listeners: list[AdminListener] = []
    clients: list[aiohttp.ClientSession] = []

    async def start(
        cache_url: str = "memory://",
        edit: Callable[[dict[str, Any]], None] | None = None,
        environ: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> Admin:
        remember("the admin token", TOKEN)
        remember("a personal agent's sub", SUB)
        metrics = Metrics()
        harness = await make_gateway(
            cache_url,
            edit=edit or with_admin(),
            metrics=metrics,
            environ={"PACT_ADMIN_TOKEN": TOKEN, **(environ or {})},
            **kwargs,
        )
        listener = AdminListener(harness.client.app)
        listeners.append(listener)
        # Port 0 becomes a free port chosen now, so the client knows it before the listener opens.
        admin = dataclasses.replace(harness.config.admin, port=harness.config.admin.port or free_port())
        await listener.apply(admin)
        api = aiohttp.ClientSession(base_url=f"http://{admin.host}:{admin.port}")
        clients.append(api)
        return Admin(harness, api, listener)

    yield start
    for client in clients:
        await client.close()
    for listener in listeners:
        await listener.close()


async def scrape_gateway(h: Harness) -> str:
    """``/metrics`` as the ops listener would answer it, over the gateway's own registry."""
    text: bytes = generate_latest(h.client.app[METRICS].registry)
    return text.decode()


@pytest.fixture
async def admin(make_admin: MakeAdmin, cache_url: str) -> Admin:
    return await make_admin(cache_url)


BEARER = {"Authorization": f"Bearer {TOKEN}"}


def person(h: Harness, sub: str = SUB, brand: str = "acme") -> dict[str, str]:
    return {"brand": brand, "pa": h.issuer, "sub": sub}


async def json_of(response: ClientResponse, status: int = 200) -> dict[str, Any]:
    body = await response.read()
    assert response.status == status, body
    assert response.headers["Content-Type"].startswith("application/json")
    answer: dict[str, Any] = orjson.loads(body)
    return answer


async def context_of(response: ClientResponse) -> str:
    body = await response.read()
    assert response.status == 200, body
    context_id: str = orjson.loads(body)["message"]["contextId"]
    return context_id


async def a2a_error(response: ClientResponse) -> tuple[int, str, str]:
    error = orjson.loads(await response.read())["error"]
    return response.status, error["details"][0]["reason"], error["message"]


async def listed(h: Harness, api: aiohttp.ClientSession, sub: str = SUB) -> list[dict[str, Any]]:
    answer = await json_of(await api.get("/admin/conversations", params=person(h, sub), headers=BEARER))
    conversations: list[dict[str, Any]] = answer["conversations"]
    return conversations


async def test_list_shows_the_persons_conversations_and_never_a_text(admin: Admin) -> None:
    h, api, _ = admin
    first = await context_of(await h.send("my order A-10001 is late", message_id="m-1", sub=SUB))
    await h.send("and A-10002?", message_id="m-2", context_id=first, sub=SUB)
    second = await context_of(await h.send("hello again", sub=SUB))
    await context_of(await h.send("someone else", sub="bob-0000"))

    response = await api.get("/admin/conversations", params=person(h), headers=BEARER)
    answer = await json_of(response)
    assert answer["brand"] == "acme"
    assert answer["pa"] == h.issuer
    assert answer["sub_hash"] == sub_digest(h.issuer, SUB)
    assert [(c["context_id"], c["turns"], c["in_flight"], c["state"]) for c in answer["conversations"]] == [
        (first, 2, 0, "open"),
        (second, 1, 0, "open"),
    ]
    assert all(c["opened_at"].endswith("Z") and c["age_seconds"] >= 0 for c in answer["conversations"])
    text = (await response.read()).decode()
    for secret in (SUB, "A-10001", "hello again", "order assistant"):
        assert secret not in text


async def test_erase_forgets_the_person_and_their_context_ids_answer_as_unknown(
    admin: Admin, json_logs: CapturedLogs
) -> None:
    h, api, _ = admin
    context_id = await context_of(await h.send("where is A-10001?", message_id="m-1", sub=SUB))
    await h.send("thanks", message_id="m-2", context_id=context_id, sub=SUB)
    bobs = await context_of(await h.send("hi", message_id="m-1", sub="bob-0000"))

    answer = await json_of(await api.post("/admin/erase", json=person(h), headers=BEARER))

    assert answer == {
        "brand": "acme",
        "pa": h.issuer,
        "sub_hash": sub_digest(h.issuer, SUB),
        "erased": {
            "conversations": 1,
            "replies": 2,
            "in_flight": 0,
            "retry_records": 1,
            "adapter_states": 0,
            "rate_limit_counters": 1,
            "grants_revoked": 0,
            "authorizations_denied": 0,
        },
    }
    calls = len(h.bot.calls)
    never = "00000000-0000-4000-8000-000000000000"
    for message_id in ("m-2", "m-3"):  # a replay of a stored reply, and a new turn
        erased = await a2a_error(await h.send(message_id=message_id, context_id=context_id, sub=SUB))
        assert erased == await a2a_error(await h.send(message_id=message_id, context_id=never, sub=SUB))
        assert erased == UNKNOWN_CONTEXT
    # The first message retried without a contextId finds nothing either: it starts anew.
    again = await context_of(await h.send("where is A-10001?", message_id="m-1", sub=SUB))
    assert again != context_id
    assert len(h.bot.calls) == calls + 1
    assert [c["context_id"] for c in await listed(h, api)] == [again]
    # Bob is untouched.
    assert (await h.send(message_id="m-2", context_id=bobs, sub="bob-0000")).status == 200

    metrics = await scrape_gateway(h)
    assert sample(metrics, "pact_erasures_total", brand="acme") == 1
    assert sample(metrics, "pact_admin_actions_total", action="erase", outcome="ok") == 1
    (audit,) = [r for r in json_logs.records() if r["logger"] == AUDIT_LOGGER and r["action"] == "erase"]
    assert audit["via"] == "api"
    assert (audit["brand"], audit["pa_issuer"]) == ("acme", h.issuer)
    assert audit["sub_hash"] == sub_digest(h.issuer, SUB)
    assert (audit["conversations"], audit["replies"], audit["grants_revoked"]) == (1, 2, 0)
    assert SUB not in json_logs.text


async def test_a_turn_running_through_the_erasure_gets_its_reply_and_stores_nothing(admin: Admin) -> None:
    h, api, _ = admin
    h.bot.gate = asyncio.Event()
    running = asyncio.create_task(h.send("hello", message_id="m-1", sub=SUB))
    await until(lambda: _called(h), what="the bot to get the turn")
    answer = await json_of(await api.post("/admin/erase", json=person(h), headers=BEARER))
    assert (answer["erased"]["conversations"], answer["erased"]["in_flight"]) == (1, 1)
    h.bot.gate.set()
    context_id = await context_of(await running)  # the personal agent still gets its answer
    retry = await h.send("hello", message_id="m-1", context_id=context_id, sub=SUB)
    assert await a2a_error(retry) == UNKNOWN_CONTEXT
    assert await listed(h, api) == []


async def _called(h: Harness) -> bool:
    return len(h.bot.calls) == 1


async def test_close_ends_one_conversation(admin: Admin) -> None:
    h, api, _ = admin
    context_id = await context_of(await h.send("hi", message_id="m-1", sub=SUB))
    response = await api.post(f"/admin/conversations/{context_id}:close", params=person(h), headers=BEARER)
    answer = await json_of(response)
    assert (answer["context_id"], answer["state"]) == (context_id, "closed")
    closed = await h.send(message_id="m-2", context_id=context_id, sub=SUB)
    assert (await a2a_error(closed))[:2] == (400, "UNSUPPORTED_OPERATION")
    assert (await h.send("hi", message_id="m-1", context_id=context_id, sub=SUB)).status == 200  # a replay
    assert [c["state"] for c in await listed(h, api)] == ["closed"]
    # Another person's view of it: not there.
    someone = person(h, sub="bob-0000")
    missing = await api.post(f"/admin/conversations/{context_id}:close", params=someone, headers=BEARER)
    assert await json_of(missing, 404) == {
        "error": "not_found",
        "detail": f"this person has no conversation {context_id!r} at this Brand",
    }


async def test_erase_revokes_the_persons_grants(
    make_admin: MakeAdmin, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    h, api, _ = await make_admin(cache_url, edit=with_admin(enable_delegation(brand_login, provider_key_pem)))
    grant = await grant_via_store(h, ("orders:read",), sub=SUB)
    others = await grant_via_store(h, ("orders:read",), sub="bob-0000")
    token = mint_for(h, grant)
    assert (await h.send("list my orders", sub=SUB, headers=delegated(token))).status == 200

    answer = await json_of(await api.post("/admin/erase", json=person(h), headers=BEARER))

    assert answer["erased"]["grants_revoked"] == 1
    response = await h.send("list my orders", sub=SUB, headers=delegated(token))
    assert response.status == 401  # the delegation token stopped working at once
    now = oauth_server(h).clock()
    assert await oauth_server(h).store.get_grant("acme", grant.grant_id, now) is None
    assert await oauth_server(h).store.get_grant("acme", others.grant_id, now) == others
    events = h.client.app[METRICS].registry.get_sample_value(
        "pact_delegation_events_total", {"brand": "acme", "event": "grant_revoked"}
    )
    assert events == 1


async def test_grants_lists_the_persons_grants_with_their_authorization_details(
    make_admin: MakeAdmin,
    cache_url: str,
    brand_login: BrandLogin,
    provider_key_pem: str,
    json_logs: CapturedLogs,
) -> None:
    """RFC 9396: the operator sees what each grant allows, its details as the User approved them."""
    h, api, _ = await make_admin(cache_url, edit=with_admin(enable_details(brand_login, provider_key_pem)))
    tokens = await obtain_tokens_with_details(h, ("orders:read", "orders:cancel"), [order()], sub=SUB)
    await grant_via_store(h, ("orders:read",), sub="bob-0000")

    response = await api.get("/admin/grants", params=person(h), headers=BEARER)

    answer = await json_of(response)
    assert (answer["brand"], answer["pa"], answer["sub_hash"]) == (
        "acme",
        h.issuer,
        sub_digest(h.issuer, SUB),
    )
    (grant,) = answer["grants"]
    assert grant["grant_id"].startswith("a2agrant_")
    assert (grant["scopes"], grant["carried"]) == (["orders:read", "orders:cancel"], [])
    assert grant["authorization_details"] == tokens["authorization_details"] == [order()]
    assert grant["issued_at"].endswith("Z")
    assert grant["expires_at"] > grant["issued_at"]
    text = (await response.read()).decode()
    assert BRAND_USER not in text
    assert SUB not in text
    plain = await json_of(await api.get("/admin/grants", params=person(h, "bob-0000"), headers=BEARER))
    assert plain["grants"][0]["authorization_details"] == []
    assert await json_of(await api.get("/admin/grants", params=person(h, "nobody"), headers=BEARER)) == {
        **_who_of(h, "nobody"),
        "grants": [],
    }
    metrics = await scrape_gateway(h)
    assert sample(metrics, "pact_admin_actions_total", action="grants", outcome="ok") == 3
    audits = [r for r in json_logs.records() if r["logger"] == AUDIT_LOGGER and r["action"] == "grants"]
    assert [audit["grants"] for audit in audits] == [1, 1, 0]


def _who_of(h: Harness, sub: str) -> dict[str, str]:
    return {"brand": "acme", "pa": h.issuer, "sub_hash": sub_digest(h.issuer, sub)}


async def test_rfc8628_erase_denies_the_persons_authorizations_approved_or_pending(
    make_admin: MakeAdmin, cache_url: str, brand_login: BrandLogin, provider_key_pem: str
) -> None:
    """Issue 18 F4: an approved authorization is a grant in waiting; after the erasure its poll mints none."""
    h, api, _ = await make_admin(cache_url, edit=with_admin(enable_delegation(brand_login, provider_key_pem)))
    approved = await device_authorize(h, sub=SUB)
    await approve_via_store(h, approved)
    pending = await device_authorize(h, sub=SUB)
    bobs = await device_authorize(h, sub="bob-0000")
    await approve_via_store(h, bobs)

    answer = await json_of(await api.post("/admin/erase", json=person(h), headers=BEARER))

    assert answer["erased"]["authorizations_denied"] == 2
    for started in (approved, pending):
        response = await poll_token(h, started["device_code"], sub=SUB)
        assert response.status == 400
        assert (await response.json())["error"] == "access_denied"  # RFC 8628 §3.5
    server = oauth_server(h)
    assert (
        await server.store.grants_of_owner("acme", Owner("acme", h.issuer, SUB).digest, server.clock()) == []
    )
    assert (await poll_token(h, bobs["device_code"], sub="bob-0000")).status == 200


async def test_erase_takes_the_bot_adapters_state_of_each_conversation(
    make_admin: MakeAdmin, cache_url: str, fake_openai: FakeOpenAI
) -> None:
    def openai_bot(raw: dict[str, Any]) -> None:
        raw["brands"][0]["upstream"] = {
            "adapter": "openai",
            "url": fake_openai.base_url,
            "openai": {"model": MODEL, "api_key": "${OPENAI_API_KEY}"},
        }

    h, api, _ = await make_admin(cache_url, edit=with_admin(openai_bot), environ={"OPENAI_API_KEY": API_KEY})
    context_id = await context_of(await h.send("Where is my order A-10001?", sub=SUB))
    history = keys.adapter_key("acme", context_id, openai.STATE_NAME)
    assert await h.client.app[ADAPTER_STATE].get(history) is not None
    answer = await json_of(await api.post("/admin/erase", json=person(h), headers=BEARER))
    assert answer["erased"]["adapter_states"] == 1
    assert await h.client.app[ADAPTER_STATE].get(history) is None


def test_every_bot_adapters_state_is_erased() -> None:
    """An adapter keeping state under a name erasure does not know would leave it behind."""
    keeping = set()
    for found in pkgutil.iter_modules(upstream.__path__):
        module = importlib.import_module(f"{upstream.__name__}.{found.name}")
        if "adapter_key(" in inspect.getsource(module):
            assert module.STATE_NAME in ADAPTER_STATE_NAMES, found.name
            keeping.add(found.name)
    assert keeping >= {"openai", "directline"}


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        ({}, "send Authorization: Bearer with the admin token"),
        ({"Authorization": "Basic YWRtaW46YWRtaW4="}, "send Authorization: Bearer with the admin token"),
        ({"Authorization": "Bearer "}, "send Authorization: Bearer with the admin token"),
        ({"Authorization": f"Bearer {TOKEN[:-1]}x"}, "the bearer token is not the admin token"),
    ],
    ids=["none", "basic", "empty", "wrong"],
)
async def test_every_route_needs_the_admin_token(admin: Admin, headers: dict[str, str], detail: str) -> None:
    h, api, _ = admin
    await context_of(await h.send("hi", sub=SUB))
    for response in (
        await api.get("/admin/conversations", params=person(h), headers=headers),
        await api.post("/admin/conversations/any:close", params=person(h), headers=headers),
        await api.post("/admin/erase", json=person(h), headers=headers),
    ):
        assert await json_of(response, 401) == {"error": "unauthorized", "detail": detail}
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="pact-gateway admin"'
    assert len(await listed(h, api)) == 1  # nothing was erased
    scraped = await scrape_gateway(h)
    assert sample(scraped, "pact_admin_actions_total", outcome="unauthorized") == 3


async def test_precise_errors(admin: Admin) -> None:
    h, api, _ = admin
    cases: list[tuple[ClientResponse, int, str, str]] = [
        (
            await api.get("/admin/conversations", params={"brand": "acme", "pa": h.issuer}, headers=BEARER),
            400,
            "invalid_request",
            "query parameter sub is required, a non-empty string",
        ),
        (
            await api.get("/admin/conversations", params=person(h, brand="initech"), headers=BEARER),
            404,
            "not_found",
            "no Brand 'initech' in the configuration in force",
        ),
        (
            await api.post("/admin/erase", data=b"brand=acme", headers=BEARER),
            400,
            "invalid_request",
            "the body must be JSON",
        ),
        (
            await api.post("/admin/erase", json=[person(h)], headers=BEARER),
            400,
            "invalid_request",
            'the body must be a JSON object {"brand", "pa", "sub"}',
        ),
        (
            await api.post("/admin/erase", json={**person(h), "sub": 42}, headers=BEARER),
            400,
            "invalid_request",
            "body field sub is required, a non-empty string",
        ),
        (
            await api.post("/admin/conversations/no-such:close", params=person(h), headers=BEARER),
            404,
            "not_found",
            "this person has no conversation 'no-such' at this Brand",
        ),
    ]
    for response, status, error, detail in cases:
        assert await json_of(response, status) == {"error": error, "detail": detail}
    scraped = await scrape_gateway(h)
    assert sample(scraped, "pact_admin_actions_total", outcome="invalid_request") == 4
    assert sample(scraped, "pact_admin_actions_total", outcome="not_found") == 2


async def test_store_down_is_503(make_admin: MakeAdmin, unreachable_store: RedisStore) -> None:
    h, api, _ = await make_admin(store=unreachable_store)
    for response in (
        await api.get("/admin/conversations", params=person(h), headers=BEARER),
        await api.post("/admin/erase", json=person(h), headers=BEARER),
    ):
        answer = await json_of(response, 503)
        assert answer["error"] == "store_unavailable"
        assert answer["detail"].startswith("the store did not answer: redis: ")


async def test_off_by_default_it_is_not_there_and_a_reload_turns_it_on_or_rotates_the_token(
    make_admin: MakeAdmin,
) -> None:
    """Off, nothing listens; a reload that turns it on opens the listener; turned off again it answers
    ``404`` as an unknown path does; a reload rotates the token."""
    port = free_port()
    h, api, listener = await make_admin(
        edit=lambda raw: raw.update(metrics={"enabled": True}, admin={"port": port})
    )
    assert listener.addresses == []
    with pytest.raises(aiohttp.ClientConnectionError):
        await api.get("/admin/conversations", params=person(h), headers=BEARER)

    gateway = h.client.app
    admin = AdminConfig(enabled=True, token=TOKEN, port=port)
    reload_runtime(gateway, dataclasses.replace(h.config, admin=admin))
    await listener.apply(admin)  # what GatewayServer.reload does after the swap
    assert (await api.get("/admin/conversations", params=person(h), headers=BEARER)).status == 200
    rotated = "rotated-" + "0b5e" * 10
    remember("the admin token", rotated)
    reload_runtime(gateway, dataclasses.replace(h.config, admin=dataclasses.replace(admin, token=rotated)))
    assert (await api.get("/admin/conversations", params=person(h), headers=BEARER)).status == 401
    new = {"Authorization": f"Bearer {rotated}"}
    assert (await api.get("/admin/conversations", params=person(h), headers=new)).status == 200

    reload_runtime(gateway, dataclasses.replace(h.config, admin=dataclasses.replace(admin, enabled=False)))
    off = await api.get("/admin/conversations", params=person(h), headers=new)
    unknown = await api.get("/nothing-here", headers=new)
    assert (off.status, await off.read()) == (unknown.status, await unknown.read())
    assert off.status == 404


async def test_i10_the_admin_listener_binds_loopback_by_default(admin: Admin) -> None:
    """Issue 18 row I10: the ops listener binds every interface for the scrapers; the admin API does not."""
    h, _, listener = admin
    assert AdminConfig().host == "127.0.0.1"
    assert h.config.admin.host == "127.0.0.1"  # the test configuration names none: the default
    ((host, port),) = listener.addresses  # the listening socket's own address
    assert host == "127.0.0.1"
    assert port != 0


async def test_never_on_the_a2a_listener(admin: Admin) -> None:
    h, api, _ = admin
    unknown = await api.get("/admin/nothing-here")
    assert unknown.status == 401  # the admin listener's paths need the token before anything
    assert (await api.get("/admin/nothing-here", headers=BEARER)).status == 404
    for path in ("/admin/conversations", "/admin/erase"):
        response = await h.client.get(path, params=person(h), headers=BEARER)
        assert response.status == 404
        response = await h.client.post(path, json=person(h), headers=BEARER)
        assert response.status in (404, 405)


async def test_i10_never_on_the_ops_listener(admin: Admin, ops_for: OpsFor) -> None:
    """Issue 18 row I10: the ops listener (every interface by default) no longer mounts ``/admin``."""
    h, api, _ = admin
    ops = await ops_for(h, h.client.app[METRICS])
    assert (await api.get("/admin/conversations", params=person(h), headers=BEARER)).status == 200
    for path in ("/admin/conversations", "/admin/erase"):
        assert (await ops.get(path, params=person(h), headers=BEARER)).status == 404
        assert (await ops.post(path, json=person(h), headers=BEARER)).status in (404, 405)


@pytest.mark.parametrize("workers", [1, 2], ids=["single", "workers-2"])
async def test_served_by_pact_gateway_serve_on_its_own_loopback_port(
    processes: Processes,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    pa_issuer: str,
    jwks_server: FakeJwksServer,
    bot: ControlledBot,
    es256_key: PAKey,
    workers: int,
) -> None:
    """The real process wiring: one process, and a supervisor (whose store and metrics the workers share)."""
    remember("the admin token", TOKEN)
    monkeypatch.setenv("PACT_ADMIN_TOKEN", TOKEN)
    raw = base_config(pa_issuer, jwks_server.jwks_uri, bot.url, "memory://" if workers == 1 else redis_url)
    with_admin()(raw)
    served = await processes.new(raw).start("--workers", str(workers))
    await served.ready()
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{served.base_url}/a2a/acme/message:send",
            json={"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "Hi"}]}},
            headers={"Authorization": f"Bearer {es256_key.mint(pa_issuer, SUB, AUDIENCE)}"},
        ) as turn:
            assert turn.status == 200
        people = {"brand": "acme", "pa": pa_issuer, "sub": SUB}
        async with session.post(f"{served.admin_url}/admin/erase", json=people, headers=BEARER) as erased:
            assert erased.status == 200
            assert (await erased.json())["erased"]["conversations"] == 1
        for other in (served.base_url, served.ops_url):
            async with session.post(other + "/admin/erase", json=people, headers=BEARER) as elsewhere:
                assert elsewhere.status in (404, 405)
        async with session.get(f"{served.ops_url}/metrics") as metrics:
            assert sample(await metrics.text(), "pact_erasures_total", brand="acme") == 1
    served.send(signal.SIGTERM)
    assert await served.wait() == 0
    (audit,) = [record for record in served.logs() if record["logger"] == AUDIT_LOGGER]
    assert (audit["action"], audit["conversations"]) == ("erase", 1)
    assert SUB not in served.log_file.read_text()


async def test_i10_a_sighup_that_turns_it_on_opens_its_listener_and_a_moved_port_needs_a_restart(
    processes: Processes,
    monkeypatch: pytest.MonkeyPatch,
    pa_issuer: str,
    jwks_server: FakeJwksServer,
    bot: ControlledBot,
) -> None:
    """The real reload wiring (``GatewayServer.reload``): off at start, nothing listens on
    ``admin.port``; a reload turning it on opens it there; a reload moving it is logged as needing a
    restart and the listener stays where it is."""
    remember("the admin token", TOKEN)
    monkeypatch.setenv("PACT_ADMIN_TOKEN", TOKEN)
    served = await processes.new(base_config(pa_issuer, jwks_server.jwks_uri, bot.url, "memory://")).start()
    await served.ready()
    people = {"brand": "acme", "pa": pa_issuer, "sub": SUB}
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.post(f"{served.admin_url}/admin/erase", json=people, headers=BEARER)
        on = {**served.raw, "admin": {**served.raw["admin"], "enabled": True, "token": "${PACT_ADMIN_TOKEN}"}}
        served.write_config(on)
        served.send(signal.SIGHUP)

        async def answers() -> bool:
            try:
                async with session.post(f"{served.admin_url}/admin/erase", json=people, headers=BEARER) as r:
                    return r.status == 200
            except aiohttp.ClientConnectionError:
                return False

        await until(answers, 10, "the admin listener opened by the reload")
        admin_url = served.admin_url
        served.write_config({**on, "admin": {**on["admin"], "port": free_port()}})
        served.send(signal.SIGHUP)

        async def warned() -> bool:
            return any(record.get("restart_needed") for record in served.logs())

        await until(warned, 10, "the restart warning")
        (warning,) = [record for record in served.logs() if record.get("restart_needed")]
        assert warning["restart_needed"] == ["admin.port"]
        async with session.post(f"{admin_url}/admin/erase", json=people, headers=BEARER) as kept:
            assert kept.status == 200
    served.send(signal.SIGTERM)
    assert await served.wait() == 0
