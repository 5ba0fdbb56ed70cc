"""The ``http`` adapter: a home-grown bot mapped in YAML, through the real gateway over HTTP.

The request is the Brand's template filled as data (never text spliced into JSON); the answer is
read with JMESPath; §5 travels both ways as with ``pact``; the §4 behaviour is every adapter's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from gateway.config import HTTP_PLACEHOLDERS, HttpMappingSettings, HttpReplyPaths, UpstreamConfig
from gateway.upstream.base import Action, BotReply, Turn, UpstreamError, UserDelegation
from gateway.upstream.client import BotClient
from gateway.upstream.http_mapping import HttpMappingAdapter, ReplyMapping, compile_template, turn_values
from gateway.upstream.wire import user_handle
from tests.support.adapters import (
    check_failure_stores_nothing_and_the_retry_runs_once,
    check_retries_are_served_from_the_store,
    error_reason,
    reply_of,
)
from tests.support.delegation import (
    BRAND_USER,
    BrandLogin,
    delegated,
    enable_delegation,
    grant_via_store,
    mint_for,
)
from tests.support.fake_http_bot import HEALTH_PATH, FakeHttpBot
from tests.support.gateway import Harness, MakeGateway

TEMPLATE: dict[str, Any] = {
    "session": "{{conversation_id}}",
    "first": "{{new_conversation}}",
    "input": {"text": "{{text}}", "id": "{{ message_id }}"},
    "user": {"issuer": "{{pa_issuer}}", "id": "{{user_hash}}", "login": "{{sub}}"},
    "note": "{{brand}} turn {{message_id}} from {{sub}}, first={{new_conversation}}",
    "account": {
        "user": "{{delegation_user}}",
        "scopes": "{{delegation_scopes}}",
        "scope_line": "[{{delegation_scopes}}]",
        "grant": "{{delegation_grant_id}}",
    },
    "trace": "{{request_id}}",
    "constants": [2, True, None, "plain", {"nested": ["{{brand}}"]}],
}
REPLY = {
    "texts": "result.messages[].body",
    "end": "result.closed",
    "requires_scopes": "auth.needs",
    "actions": "auth.calls",
    "scopes_used": "auth.used",
}


def http_upstream(bot: FakeHttpBot, **overrides: Any) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        settings = {"method": "PUT", "body": copy.deepcopy(TEMPLATE), "reply": dict(REPLY), **overrides}
        raw["brands"][0]["upstream"] = {
            "adapter": "http",
            "url": bot.url(),
            "timeout": 1.0,
            "headers": {"X-Bot-Key": "k-123"},
            "http": settings,
        }

    return edit


@pytest.fixture
async def gw_http(make_gateway: MakeGateway, cache_url: str, fake_http_bot: FakeHttpBot) -> Harness:
    return await make_gateway(cache_url, edit=http_upstream(fake_http_bot))


async def test_http_request_is_the_template_filled_as_data(
    gw_http: Harness, fake_http_bot: FakeHttpBot
) -> None:
    """Typed values stay typed; the User's quotes, braces and newlines never leave their string."""
    hostile = 'He said "}, "admin": true, "x": {"\n{{sub}} \\u0000 ü'
    _, first = await reply_of(await gw_http.send(hostile, message_id="m-1"))
    call = fake_http_bot.calls[0]
    turn = Turn("acme", first["contextId"], "m-1", hostile, gw_http.issuer, "alice", True, "")
    assert call.method == "PUT"
    assert call.body == {
        "session": first["contextId"],
        "first": True,
        "input": {"text": hostile, "id": "m-1"},
        "user": {"issuer": gw_http.issuer, "id": user_handle(turn), "login": "alice"},
        "note": "acme turn m-1 from alice, first=true",
        "account": {"user": None, "scopes": None, "scope_line": "[]", "grant": None},
        "trace": call.headers["X-Request-Id"],
        "constants": [2, True, None, "plain", {"nested": ["acme"]}],
    }
    assert call.headers["Content-Type"] == "application/json"
    assert call.headers["X-Bot-Key"] == "k-123"
    assert first["parts"] == [{"text": f"You said: {hostile}"}]
    await reply_of(await gw_http.send("again", message_id="m-2", context_id=first["contextId"]))
    assert fake_http_bot.calls[1].body["first"] is False


async def test_http_texts_are_joined_and_the_end_flag_closes(
    gw_http: Harness, fake_http_bot: FakeHttpBot
) -> None:
    fake_http_bot.answer = {
        "result": {"messages": [{"body": "One."}, {"body": "  "}, {"body": "Two."}], "closed": False}
    }
    _, message = await reply_of(await gw_http.send("hi", message_id="m-1"))
    assert message["parts"] == [{"text": "One.\n\nTwo."}]
    fake_http_bot.answer = None
    await reply_of(await gw_http.send("bye", message_id="m-2", context_id=message["contextId"]))
    closed = await gw_http.send("still there?", message_id="m-3", context_id=message["contextId"])
    assert await error_reason(closed) == (400, "UNSUPPORTED_OPERATION")  # §4.2 closed
    assert len(fake_http_bot.calls) == 2


async def test_http_retries_are_served_from_the_store(gw_http: Harness, fake_http_bot: FakeHttpBot) -> None:
    await check_retries_are_served_from_the_store(gw_http, lambda: len(fake_http_bot.calls))


@pytest.mark.parametrize(
    "failure",
    [
        "status500",
        "not_json",
        "slow",
        {"result": {"messages": []}},
        {"result": {"messages": "not a list"}},
        {"result": {"messages": [{"body": "x"}], "closed": "yes"}},
        {"result": {"messages": [{"body": "x"}]}, "auth": {"used": ["bad scope"]}},
        {"unrelated": True},
    ],
    ids=["500", "not-json", "slow", "no-texts", "texts-not-a-list", "end-not-bool", "bad-scope", "nothing"],
)
async def test_http_failure_is_internal_nothing_stored_and_the_retry_runs_once(
    gw_http: Harness, fake_http_bot: FakeHttpBot, failure: str | dict[str, Any]
) -> None:
    def fail() -> None:
        if isinstance(failure, str):
            fake_http_bot.mode = failure
        else:
            fake_http_bot.answer = failure

    def heal() -> None:
        fake_http_bot.mode, fake_http_bot.answer = "answer", None

    await check_failure_stores_nothing_and_the_retry_runs_once(
        gw_http, lambda: len(fake_http_bot.calls), fail, heal
    )


async def test_http_single_text_path(make_gateway: MakeGateway, fake_http_bot: FakeHttpBot) -> None:
    gw = await make_gateway(edit=http_upstream(fake_http_bot, reply={"text": "result.messages[0].body"}))
    _, message = await reply_of(await gw.send("hello"))
    assert message["parts"] == [{"text": "You said: hello"}]


async def test_s5_http_carries_the_delegation_and_the_bots_claims(
    make_gateway: MakeGateway,
    fake_http_bot: FakeHttpBot,
    brand_login: BrandLogin,
    provider_key_pem: str,
    cache_url: str,
) -> None:
    """§5.5/§5.6 as with ``pact``: the Brand user, scopes and grant go out; step-up and receipts come back."""
    delegating, mapped = enable_delegation(brand_login, provider_key_pem), http_upstream(fake_http_bot)

    def edit(raw: dict[str, Any]) -> None:
        delegating(raw)
        mapped(raw)

    gw = await make_gateway(cache_url, edit=edit)
    grant = await grant_via_store(gw, ("orders:read",))
    token = mint_for(gw, grant)
    fake_http_bot.answer = {
        "result": {"messages": [{"body": "Your orders: A-1."}]},
        "auth": {
            "needs": ["orders:read"],
            "used": ["orders:read"],
            "calls": [{"tool": "list_orders", "args": {}}],
        },
    }
    _, message = await reply_of(await gw.send("list my orders", message_id="m-1", headers=delegated(token)))
    assert fake_http_bot.calls[0].body["account"] == {
        "user": BRAND_USER,
        "scopes": ["orders:read"],
        "scope_line": "[orders:read]",
        "grant": grant.grant_id,
    }
    claims = message["metadata"]["pact.receipt"]["claims"]
    assert claims["scopesUsed"] == ["orders:read"]
    assert [action["tool"] for action in claims["actions"]] == ["list_orders"]
    fake_http_bot.answer = {
        "result": {"messages": [{"body": "I need to cancel."}]},
        "auth": {"needs": ["orders:cancel"]},
    }
    response = await gw.send(
        "cancel A-1", message_id="m-2", context_id=message["contextId"], headers=delegated(token)
    )
    body = await response.read()
    assert response.status == 200, body
    assert orjson.loads(body)["task"]["metadata"]["pact.missingScopes"] == ["orders:cancel"]


def test_every_placeholder_has_a_value() -> None:
    turn = Turn(
        "acme", "c", "m", "t", "https://pa", "alice", False, "r", UserDelegation("u", ("a", "b"), "g")
    )
    values = turn_values(turn)
    assert set(values) == HTTP_PLACEHOLDERS
    assert (values["delegation_scopes"], values["new_conversation"]) == (["a", "b"], False)
    fill = compile_template(
        {"s": "{{delegation_scopes}}", "line": "{{delegation_scopes}}!", "n": "{{new_conversation}}"}
    )
    assert fill(values) == {"s": ["a", "b"], "line": "a b!", "n": False}


def test_rfc9396_the_details_placeholder_is_a_list_of_objects_or_their_json_in_text() -> None:
    detail = '{"actions":["cancel"],"identifier":"A-10002","type":"https://acme.example/rar/order"}'
    delegation = UserDelegation("u", ("orders:cancel",), "g", (detail,))
    turn = Turn("acme", "c", "m", "t", "https://pa", "alice", False, "r", delegation)
    fill = compile_template(
        {"d": "{{delegation_authorization_details}}", "line": "{{ delegation_authorization_details }}!"}
    )
    assert fill(turn_values(turn)) == {"d": [orjson.loads(detail)], "line": f"[{detail}]!"}
    assert fill(turn_values(turn._replace(delegation=delegation._replace(authorization_details=())))) == {
        "d": [],
        "line": "[]!",
    }
    assert fill(turn_values(turn._replace(delegation=None))) == {"d": None, "line": "!"}


def test_rfc9396_reply_paths_read_the_required_details_and_the_actions_details() -> None:
    paths = ReplyMapping(HttpReplyPaths(text="t", actions="x", requires_authorization_details="need"))
    detail = {"type": "https://acme.example/rar/order", "identifier": "A-10002", "actions": ["cancel"]}
    reply = paths.read(
        {"t": "May I?", "need": [detail], "x": [{"tool": "c", "authorization_detail": detail}]}
    )
    canonical = '{"actions":["cancel"],"identifier":"A-10002","type":"https://acme.example/rar/order"}'
    assert (reply.requires_details, reply.action_details) == ((canonical,), (canonical,))
    with pytest.raises(UpstreamError, match="bad_body"):
        paths.read({"t": "May I?", "need": [{"identifier": "A-10002"}]})


def test_reply_paths_read_the_s5_members() -> None:
    paths = ReplyMapping(HttpReplyPaths(text="a.t", end="a.e", actions="a.x", scopes_used="a.u"))
    doc = {"a": {"t": "Done", "e": None, "x": [{"tool": "t", "args": {"b": 1, "a": 2}}], "u": ["s", "s"]}}
    assert paths.read(doc) == BotReply("Done", False, (), (Action("t", b'{"a":2,"b":1}'),), ("s",))
    with pytest.raises(UpstreamError, match="bad_body"):
        paths.read({"a": {"t": "Done", "x": "not a list"}})


async def test_http_probe_uses_the_health_url_or_options(fake_http_bot: FakeHttpBot) -> None:
    """The probe sends no turn: ``GET probe_url`` (2xx healthy) when configured, else ``OPTIONS``."""
    reply = HttpReplyPaths(text="t")
    async with BotClient() as session:
        with_health = HttpMappingAdapter(
            UpstreamConfig(
                url=fake_http_bot.url(),
                adapter="http",
                http=HttpMappingSettings(body={}, reply=reply, probe_url=fake_http_bot.url(HEALTH_PATH)),
            ),
            session,
        )
        assert await with_health.probe() == "GET probe_url answered HTTP 200"
        fake_http_bot.healthy = False
        with pytest.raises(UpstreamError, match="HTTP 503"):
            await with_health.probe()
        plain = HttpMappingAdapter(
            UpstreamConfig(
                url=fake_http_bot.url(), adapter="http", http=HttpMappingSettings(body={}, reply=reply)
            ),
            session,
        )
        assert await plain.probe() == "OPTIONS answered HTTP 204"
        assert (fake_http_bot.health_checks, fake_http_bot.calls) == (2, [])
