"""The ``openai`` adapter against a fake OpenAI-compatible API, through the real gateway over HTTP.

The wire shapes are OpenAI's (tests/support/fake_openai.py); the history the gateway keeps lives
in the store, so those tests run on both backends; the §4 behaviour is every adapter's
(tests/support/adapters.py); the provider's ``429`` is held back in the guard (§6).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.app import ADAPTER_STATE
from gateway.config import ConfigError, load_config
from gateway.http.state import METRICS
from gateway.ops.metrics import Metrics
from gateway.store import keys, open_store
from gateway.store.factory import open_adapter_state
from gateway.upstream.base import MAX_THROTTLE_SECONDS, UpstreamError, retry_after_seconds
from gateway.upstream.client import BotClient
from gateway.upstream.factory import make_adapter
from gateway.upstream.json_call import JsonAnswer
from gateway.upstream.openai import completion_text, load_history, trim_history
from tests.support.adapters import (
    A2A_JSON,
    check_failure_stores_nothing_and_the_retry_runs_once,
    check_retries_are_served_from_the_store,
    error_reason,
    reply_of,
)
from tests.support.fake_openai import API_KEY, MODEL, FakeOpenAI
from tests.support.gateway import Harness, MakeGateway, base_config
from tests.support.pa import ManualClock

ENV = {"OPENAI_API_KEY": API_KEY}
PROMPT = "You are Acme's support assistant. Be brief."


def openai_upstream(fake: FakeOpenAI, **settings: Any) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        raw["brands"][0]["upstream"] = {
            "adapter": "openai",
            "url": fake.base_url,
            "timeout": 1.0,
            "headers": {"OpenAI-Organization": "org-acme"},
            "openai": {"model": MODEL, "api_key": "${OPENAI_API_KEY}", "system_prompt": PROMPT, **settings},
        }

    return edit


@pytest.fixture
async def gw_openai(make_gateway: MakeGateway, cache_url: str, fake_openai: FakeOpenAI) -> Harness:
    return await make_gateway(cache_url, edit=openai_upstream(fake_openai), environ=ENV)


async def stored_history(gw: Harness, context_id: str) -> list[dict[str, str]] | None:
    app = gw.client.app
    assert app is not None
    raw = await app[ADAPTER_STATE].get(keys.adapter_key("acme", context_id, "openai"))
    return None if raw is None else load_history(raw)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


SYSTEM = {"role": "system", "content": PROMPT}


async def test_openai_request_shape_and_the_history_the_gateway_keeps(
    gw_openai: Harness, fake_openai: FakeOpenAI
) -> None:
    """Each turn carries the system prompt, the conversation so far (from the store) and the new text."""
    response = await gw_openai.send("Where is my order?", message_id="m-1")
    _, first = await reply_of(response)
    context_id = first["contextId"]
    assert first["parts"] == [{"text": "#1: Where is my order?"}]
    _, second = await reply_of(await gw_openai.send("It is A-1", message_id="m-2", context_id=context_id))
    assert second["parts"] == [{"text": "#2: It is A-1"}]
    _, other = await reply_of(await gw_openai.send("Hello", message_id="m-3"))
    assert other["parts"] == [{"text": "#1: Hello"}]  # another conversation, another history
    assert [call.messages for call in fake_openai.calls] == [
        [SYSTEM, user("Where is my order?")],
        [SYSTEM, user("Where is my order?"), assistant("#1: Where is my order?"), user("It is A-1")],
        [SYSTEM, user("Hello")],
    ]
    call = fake_openai.calls[0]
    assert call.body["model"] == MODEL
    assert call.body.keys() == {"model", "messages"}
    assert call.headers["Authorization"] == f"Bearer {API_KEY}"
    assert call.headers["OpenAI-Organization"] == "org-acme"
    assert call.headers["X-Request-Id"] == response.headers["X-Request-Id"]
    assert "Cookie" not in call.headers
    assert await stored_history(gw_openai, context_id) == [
        user("Where is my order?"),
        assistant("#1: Where is my order?"),
        user("It is A-1"),
        assistant("#2: It is A-1"),
    ]


async def test_openai_options_and_azure_key_header(
    make_gateway: MakeGateway, fake_openai: FakeOpenAI
) -> None:
    fake_openai.key_header = "api-key"
    edit = openai_upstream(fake_openai, max_tokens=256, temperature=0.2, api_key_header="api-key")
    gw = await make_gateway(edit=edit, environ=ENV)
    await reply_of(await gw.send("Hi"))
    call = fake_openai.calls[0]
    assert (call.body["max_tokens"], call.body["temperature"]) == (256, 0.2)
    assert call.headers["api-key"] == API_KEY
    assert "Authorization" not in call.headers


async def test_openai_history_is_bounded_by_turns_and_characters(
    make_gateway: MakeGateway, cache_url: str, fake_openai: FakeOpenAI
) -> None:
    gw = await make_gateway(cache_url, edit=openai_upstream(fake_openai, max_history_turns=2), environ=ENV)
    context_id = (await reply_of(await gw.send("q1", message_id="m-1")))[1]["contextId"]
    for index in range(2, 5):
        await reply_of(await gw.send(f"q{index}", message_id=f"m-{index}", context_id=context_id))
    # The fourth turn sees only the two pairs before it; the oldest went first.
    assert fake_openai.calls[-1].messages == [
        SYSTEM,
        user("q2"),
        assistant("#2: q2"),
        user("q3"),
        assistant("#3: q3"),
        user("q4"),
    ]
    assert await stored_history(gw, context_id) == [
        user("q3"),
        assistant("#3: q3"),
        user("q4"),
        assistant("#3: q4"),  # the fake numbers its reply by the user messages it was sent
    ]


async def test_openai_no_history_is_kept_when_turned_off(
    make_gateway: MakeGateway, fake_openai: FakeOpenAI
) -> None:
    gw = await make_gateway(edit=openai_upstream(fake_openai, max_history_turns=0), environ=ENV)
    context_id = (await reply_of(await gw.send("q1", message_id="m-1")))[1]["contextId"]
    await reply_of(await gw.send("q2", message_id="m-2", context_id=context_id))
    assert fake_openai.calls[-1].messages == [SYSTEM, user("q2")]
    assert await stored_history(gw, context_id) is None


def test_trim_history_drops_whole_pairs_oldest_first() -> None:
    pairs = [user("a" * 10), assistant("b" * 10), user("c" * 5), assistant("d" * 5)]
    assert trim_history(pairs, max_turns=5, max_chars=30) == pairs
    assert trim_history(pairs, max_turns=5, max_chars=29) == pairs[2:]
    assert trim_history(pairs, max_turns=1, max_chars=1000) == pairs[2:]
    assert trim_history(pairs, max_turns=5, max_chars=9) == []


@pytest.mark.parametrize(
    "raw", [b"not json", b"{}", b'[{"role": "system", "content": "x"}]', b'[{"role": "user"}]']
)
def test_a_stored_history_that_is_not_one_is_no_history(raw: bytes) -> None:
    assert load_history(raw) == []


async def test_openai_retries_are_served_from_the_store(gw_openai: Harness, fake_openai: FakeOpenAI) -> None:
    await check_retries_are_served_from_the_store(gw_openai, lambda: len(fake_openai.calls))


FAILURES: dict[str, dict[str, Any]] = {
    "server_error": {"mode": "status", "status": 500},
    "bad_key": {"mode": "status", "status": 401, "error_code": "invalid_api_key"},
    "quota": {"mode": "status", "status": 429, "error_code": "insufficient_quota"},
    "error_object_with_200": {"mode": "error_200"},
    "content_filter": {"mode": "content_filter"},
    "empty": {"mode": "empty"},
    "not_json": {"mode": "not_json"},
    "slow": {"mode": "slow"},
}
REASONS = {
    "server_error": "status",
    "bad_key": "auth",
    "quota": "quota",
    "error_object_with_200": "provider_error",
    "content_filter": "content_filter",
    "empty": "empty",
    "not_json": "bad_body",
    "slow": "timeout",
}


@pytest.mark.parametrize("failure", list(FAILURES))
async def test_openai_provider_failure_is_internal_nothing_stored_and_the_retry_runs_once(
    gw_openai: Harness, fake_openai: FakeOpenAI, failure: str, caplog: pytest.LogCaptureFixture
) -> None:
    """§4.3 for each provider failure; the history is unchanged: the retry sends what the failed call did."""

    def fail() -> None:
        for name, value in FAILURES[failure].items():
            setattr(fake_openai, name, value)

    def heal() -> None:
        fake_openai.mode = "echo"

    await check_failure_stores_nothing_and_the_retry_runs_once(
        gw_openai, lambda: len(fake_openai.calls), fail, heal
    )
    failed, retried = fake_openai.calls[-2:]
    assert (
        failed.messages == retried.messages == [SYSTEM, user("Hello"), assistant("#1: Hello"), user("Next")]
    )
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("bot call failed")]
    assert [line.split(":")[1].strip() for line in logged] == [REASONS[failure]]


async def test_openai_an_error_code_that_repeats_the_status_is_said_once(
    gw_openai: Harness, fake_openai: FakeOpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 32: LiteLLM answers a 400 with ``"code": "400"``; the log said "HTTP 400, error code 400".
    The status is said once, and the error's ``type`` names the cause instead."""
    fake_openai.mode, fake_openai.status, fake_openai.error_code = "status", 400, "400"
    response = await gw_openai.send("Hello")
    assert await error_reason(response) == (500, "INTERNAL")
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("bot call failed")]
    assert logged == ["bot call failed: status: HTTP 400, error code server_error"]


async def test_openai_refusal_is_the_reply(gw_openai: Harness, fake_openai: FakeOpenAI) -> None:
    fake_openai.mode = "refusal"
    _, message = await reply_of(await gw_openai.send("Tell me a secret"))
    assert message["parts"] == [{"text": "I can't help with that."}]


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({"choices": []}, "bad_body"),
        ({"choices": [{"message": "x"}]}, "bad_body"),
        ({"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": []}}]}, "empty"),
        ({"error": {"message": "You said: secret stuff", "code": "with spaces!"}}, "provider_error"),
        ([], "bad_body"),
    ],
)
def test_openai_answers_that_hold_no_reply(doc: Any, reason: str) -> None:
    with pytest.raises(UpstreamError) as failure:
        completion_text(JsonAnswer(200, doc, None), now=0.0)
    assert failure.value.reason == reason
    assert "secret stuff" not in str(failure.value)  # a provider's message may echo the User: never logged


# The provider's 429 (§6): held back in the guard, answered like a busy bot.


@pytest.fixture
def clock() -> ManualClock:
    """The gateway's breaker time (and store time): the test moves it instead of sleeping."""
    return ManualClock(start=100.0)


async def test_s6_provider_429_holds_the_bot_back_for_its_retry_after(
    make_gateway: MakeGateway, cache_url: str, fake_openai: FakeOpenAI, clock: ManualClock
) -> None:
    """A bare 429 with the provider's Retry-After; no call until it passes; not a breaker failure;
    the turn's marker is released, so the retry after the wait runs it once with the same history."""
    edit = openai_upstream(fake_openai)

    def one_failure_opens(raw: dict[str, Any]) -> None:
        edit(raw)
        raw["brands"][0]["upstream"]["circuit_breaker"] = {"failures": 1, "window": 30, "cooldown": 600}

    gw = await make_gateway(cache_url, edit=one_failure_opens, clock=clock, environ=ENV)
    context_id = (await reply_of(await gw.send("Hello", message_id="m-1")))[1]["contextId"]
    fake_openai.mode, fake_openai.status, fake_openai.headers = "status", 429, {"Retry-After": "7"}
    refused = await gw.send("Next", message_id="m-2", context_id=context_id)
    assert (refused.status, refused.headers["Retry-After"]) == (429, "7")
    assert await refused.read() == b""
    assert refused.headers.get("Content-Type", "") != A2A_JSON
    assert len(fake_openai.calls) == 2
    fake_openai.mode = "echo"
    # Meanwhile no turn reaches the provider: not the retry, not another conversation's turn.
    clock.advance(3)
    for response in (
        await gw.send("Next", message_id="m-2", context_id=context_id),
        await gw.send("Hi", message_id="m-3", sub="bob"),
    ):
        assert (response.status, response.headers["Retry-After"]) == (429, "4")
    assert len(fake_openai.calls) == 2
    await reply_of(await gw.send(brand="globex"))  # another Brand's bot is not held back
    clock.advance(4)
    # The wait is over; the breaker (one failure opens it) is still closed.
    _, message = await reply_of(await gw.send("Next", message_id="m-2", context_id=context_id))
    assert message["parts"] == [{"text": "#2: Next"}]
    assert fake_openai.calls[1].messages == fake_openai.calls[2].messages
    app = gw.client.app
    assert app is not None
    registry = app[METRICS].registry
    assert registry.get_sample_value("pact_circuit_state", {"brand": "acme"}) == 0
    held = {"brand": "acme", "limit": "upstream_retry_after"}
    assert registry.get_sample_value("pact_rate_limited_total", held) == 3


async def test_s6_provider_retry_after_is_capped(
    make_gateway: MakeGateway, fake_openai: FakeOpenAI, clock: ManualClock
) -> None:
    gw = await make_gateway(edit=openai_upstream(fake_openai), clock=clock, environ=ENV)
    fake_openai.mode, fake_openai.status, fake_openai.headers = "status", 429, {"Retry-After": "86400"}
    refused = await gw.send("Hello")
    assert (refused.status, refused.headers["Retry-After"]) == (429, str(int(MAX_THROTTLE_SECONDS)))
    fake_openai.mode = "echo"
    clock.advance(MAX_THROTTLE_SECONDS)
    await reply_of(await gw.send("Hello"))


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        (" 0 ", 0.0),
        ("86400", MAX_THROTTLE_SECONDS),
        ("Sun, 06 Nov 1994 08:49:37 GMT", 12.0),  # RFC 9110 §10.2.3's HTTP-date, 12 s after "now"
        ("Sun, 06 Nov 1994 08:49:00 GMT", 0.0),  # already past
        (None, 1.0),
        ("soon", 1.0),
        ("-5", 1.0),
        ("1.5", 1.0),
    ],
)
def test_retry_after_is_seconds_or_an_http_date_bounded(value: str | None, seconds: float) -> None:
    now = 784111765.0  # 1994-11-06T08:49:25Z
    assert retry_after_seconds(value, now) == seconds


# The probe and the configuration.


async def test_openai_probe_lists_the_models_and_sends_no_turn(fake_openai: FakeOpenAI) -> None:
    """Issue 19: a server that does not serve the configured ``model`` fails the probe (every turn would)."""
    raw = base_config("https://pa.example", "https://pa.example/jwks", "http://bot.test/chat", "memory://")
    openai_upstream(fake_openai)(raw)
    config = load_config(raw, ENV)
    brand = config.brands["acme"]
    async with BotClient() as session:
        state = open_adapter_state(open_store(config.cache))
        adapter = make_adapter(brand, session, state, cache=config.cache, metrics=Metrics())
        assert await adapter.probe() == f"OpenAI-compatible API, 2 models; {MODEL!r} is listed"
        fake_openai.models = ("another-model",)
        with pytest.raises(UpstreamError) as unserved:
            await adapter.probe()
        fake_openai.api_key = "sk-other-key"
        with pytest.raises(UpstreamError) as failure:
            await adapter.probe()
    assert str(unserved.value) == f"model: {MODEL!r} is not among the server's 1 models"
    assert failure.value.reason == "auth"
    assert (fake_openai.model_listings, fake_openai.calls) == (2, [])


def config_with(openai: dict[str, Any]) -> dict[str, Any]:
    raw = base_config("https://pa.example", "https://pa.example/jwks", "http://bot.test/chat", "memory://")
    raw["brands"][0]["upstream"] = {
        "adapter": "openai",
        "url": "https://api.openai.test/v1",
        "openai": openai,
    }
    return raw


def test_openai_system_prompt_file_is_read_at_load(tmp_path: Path) -> None:
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("You are Acme's assistant.\n", encoding="utf-8")
    config = load_config(config_with({"model": "m", "system_prompt_file": str(prompt)}), {})
    settings = config.brands["acme"].upstream.openai
    assert settings is not None
    assert settings.system_prompt == "You are Acme's assistant.\n"
    assert settings.api_key is None


@pytest.mark.parametrize(
    ("openai", "path", "reason"),
    [
        (
            {"model": "m", "api_key": "sk-literal-key"},
            "brands[0].upstream.openai.api_key",
            "never the secret",
        ),
        ({"model": "m", "api_key": "${MISSING_KEY}"}, "brands[0].upstream.openai.api_key", "MISSING_KEY"),
        (
            {"model": "m", "system_prompt": "x", "system_prompt_file": "p.txt"},
            "brands[0].upstream.openai.system_prompt_file",
            "at most one",
        ),
        (
            {"model": "m", "system_prompt_file": "/nonexistent/prompt.txt"},
            "brands[0].upstream.openai.system_prompt_file",
            "cannot read",
        ),
        ({"model": "m", "temperatur": 1}, "brands[0].upstream.openai.temperatur", "unknown setting"),
        ({"model": "m", "temperature": 3}, "brands[0].upstream.openai.temperature", ""),
        ({"model": "m", "api_key_header": "api key"}, "brands[0].upstream.openai.api_key_header", ""),
        ({}, "brands[0].upstream.openai.model", "is required"),
    ],
)
def test_openai_settings_are_checked_with_their_yaml_path(
    openai: dict[str, Any], path: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as failure:
        load_config(config_with(openai), {})
    assert failure.value.path == path
    assert reason in failure.value.reason


def test_openai_block_is_required() -> None:
    raw = config_with({})
    del raw["brands"][0]["upstream"]["openai"]
    with pytest.raises(ConfigError) as failure:
        load_config(raw, {})
    assert failure.value.path == "brands[0].upstream.openai"


def test_openai_key_never_in_the_configuration_repr() -> None:
    config = load_config(config_with({"model": "m", "api_key": "${OPENAI_API_KEY}"}), ENV)
    assert API_KEY not in repr(config)
