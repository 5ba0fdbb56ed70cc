"""The ``rasa`` adapter against a fake of Rasa's REST channel, through the real gateway over HTTP.

The wire shapes are Rasa's (tests/support/fake_rasa.py); what the User reads is what
docs/adapters.md "Rasa" documents; the §4 behaviour is every adapter's (tests/support/adapters.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gateway.config import RasaSettings, UpstreamConfig
from gateway.upstream.base import UpstreamError
from gateway.upstream.client import BotClient
from gateway.upstream.rasa import RasaAdapter, render_messages
from tests.support.adapters import (
    check_failure_stores_nothing_and_the_retry_runs_once,
    check_retries_are_served_from_the_store,
    error_reason,
    reply_of,
)
from tests.support.fake_rasa import FALLBACK, FakeRasa
from tests.support.gateway import Harness, MakeGateway

BUTTONS: list[dict[str, Any]] = [
    {"text": "Hey! I'm the Acme assistant."},
    {
        "text": "What do you need?",
        "buttons": [
            {"title": "Track my order", "payload": "/track_order"},
            {"title": "Talk to a human", "payload": '/handoff{"team": "orders"}'},
            {"title": "Opening hours", "url": "https://acme.example/hours", "type": "web_url"},
        ],
    },
]


def rasa_upstream(rasa: FakeRasa, **settings: Any) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        upstream: dict[str, Any] = {"adapter": "rasa", "url": rasa.url, "timeout": 1.0}
        if settings:
            upstream["rasa"] = settings
        raw["brands"][0]["upstream"] = upstream

    return edit


@pytest.fixture
async def gw_rasa(make_gateway: MakeGateway, cache_url: str, fake_rasa: FakeRasa) -> Harness:
    return await make_gateway(cache_url, edit=rasa_upstream(fake_rasa))


async def test_rasa_request_is_the_rest_channel_shape(gw_rasa: Harness, fake_rasa: FakeRasa) -> None:
    """Rasa's sender is the PACT conversation, so each conversation is a tracker of its own."""
    _, first = await reply_of(await gw_rasa.send("hello there", message_id="m-1"))
    _, second = await reply_of(
        await gw_rasa.send("and again", message_id="m-2", context_id=first["contextId"])
    )
    _, other = await reply_of(await gw_rasa.send("hello there", message_id="m-3"))
    assert [call.body for call in fake_rasa.calls] == [
        {"sender": first["contextId"], "message": "hello there"},
        {"sender": first["contextId"], "message": "and again"},
        {"sender": other["contextId"], "message": "hello there"},
    ]
    assert second["parts"] == [{"text": FALLBACK}]
    call = fake_rasa.calls[0]
    assert call.headers["Content-Type"] == "application/json"
    assert len(call.headers["X-Request-Id"]) >= 8
    assert "Cookie" not in call.headers


async def test_rasa_metadata_carries_the_issuer_and_a_hashed_sub(
    make_gateway: MakeGateway, fake_rasa: FakeRasa
) -> None:
    gw = await make_gateway(edit=rasa_upstream(fake_rasa, metadata=True))
    await reply_of(await gw.send("hi", sub="alice"))
    await reply_of(await gw.send("hi", sub="alice"))
    await reply_of(await gw.send("hi", sub="bob"))
    metadata = [call.body["metadata"] for call in fake_rasa.calls]
    assert [set(m) for m in metadata] == [{"pa", "user"}] * 3
    assert {m["pa"] for m in metadata} == {gw.issuer}
    alice, again, bob = (m["user"] for m in metadata)
    assert alice == again != bob
    assert len(alice) == 32
    assert set(alice) <= set("0123456789abcdef")
    assert "alice" not in str(fake_rasa.calls[0].body)


async def test_rasa_messages_buttons_and_media_become_lines(gw_rasa: Harness, fake_rasa: FakeRasa) -> None:
    fake_rasa.answers["hi"] = BUTTONS
    fake_rasa.answers["photo"] = [
        {"text": "Here it is:", "image": "https://cdn.acme.example/parcel.jpg"},
        {"attachment": "https://cdn.acme.example/invoice.pdf"},
        {"custom": {"widget": "carousel"}},
    ]
    _, greeting = await reply_of(await gw_rasa.send("hi"))
    assert greeting["parts"] == [
        {
            "text": "Hey! I'm the Acme assistant.\n\n"
            "What do you need?\n"
            "- Track my order (reply: /track_order)\n"
            '- Talk to a human (reply: /handoff{"team": "orders"})\n'
            "- Opening hours (open: https://acme.example/hours)"
        }
    ]
    _, media = await reply_of(await gw_rasa.send("photo"))
    assert media["parts"] == [
        {
            "text": "Here it is:\nImage: https://cdn.acme.example/parcel.jpg\n\n"
            "Attachment: https://cdn.acme.example/invoice.pdf"
        }
    ]


async def test_rasa_empty_answer_is_the_configured_no_answer_text(
    make_gateway: MakeGateway, fake_rasa: FakeRasa
) -> None:
    """An empty list is Rasa's "nothing to say", not a failure: the turn answers and is stored."""
    gw = await make_gateway(edit=rasa_upstream(fake_rasa, no_answer="Nothing from the bot; try other words."))
    fake_rasa.answers["..."] = []
    fake_rasa.answers["widget"] = [{"custom": {"carousel": []}}]
    _, message = await reply_of(await gw.send("..."))
    assert message["parts"] == [{"text": "Nothing from the bot; try other words."}]
    _, message = await reply_of(await gw.send("widget"))
    assert message["parts"] == [{"text": "Nothing from the bot; try other words."}]


async def test_rasa_default_no_answer_text(gw_rasa: Harness, fake_rasa: FakeRasa) -> None:
    fake_rasa.answers["..."] = []
    _, message = await reply_of(await gw_rasa.send("..."))
    assert message["parts"] == [{"text": RasaSettings().no_answer}]


async def test_rasa_retries_are_served_from_the_store(gw_rasa: Harness, fake_rasa: FakeRasa) -> None:
    await check_retries_are_served_from_the_store(gw_rasa, lambda: len(fake_rasa.calls))


@pytest.mark.parametrize("mode", ["status500", "not_json", "not_list", "slow", "other_sender"])
async def test_rasa_failure_is_internal_nothing_stored_and_the_retry_runs_once(
    gw_rasa: Harness, fake_rasa: FakeRasa, mode: str
) -> None:
    def fail() -> None:
        fake_rasa.mode = mode

    def heal() -> None:
        fake_rasa.mode = "answer"

    await check_failure_stores_nothing_and_the_retry_runs_once(
        gw_rasa, lambda: len(fake_rasa.calls), fail, heal
    )


async def test_rasa_unreachable_is_internal(make_gateway: MakeGateway, fake_rasa: FakeRasa) -> None:
    url = fake_rasa.url
    await fake_rasa.close()

    def edit(raw: dict[str, Any]) -> None:
        raw["brands"][0]["upstream"] = {"adapter": "rasa", "url": url}

    gw = await make_gateway(edit=edit)
    assert await error_reason(await gw.send("hi")) == (500, "INTERNAL")


@pytest.mark.parametrize(
    ("messages", "text"),
    [
        ([], ""),
        ([{"recipient_id": "c", "text": "  one  "}, {"recipient_id": "c", "text": "two"}], "one\n\ntwo"),
        ([{"buttons": [{"title": "Yes", "payload": "Yes"}, {"payload": "/no"}, {}, "x"]}], "- Yes\n- /no"),
        (
            [{"buttons": [{"title": "Multi\nline   title", "payload": "/p"}]}],
            "- Multi line title (reply: /p)",
        ),
        (
            [{"attachment": {"type": "video", "payload": {"src": "https://v.example/1"}}}],
            "Attachment: https://v.example/1",
        ),
        (
            [{"attachment": {"type": "file", "payload": {"url": "https://f.example/r.pdf"}}}],
            "Attachment: https://f.example/r.pdf",
        ),
        ([{"attachment": {"type": "template", "payload": {"elements": []}}}, {"image": 3}], ""),
    ],
)
def test_rasa_rendering(messages: list[Any], text: str) -> None:
    assert render_messages(messages) == text


@pytest.mark.parametrize("messages", [{"text": "x"}, "x", None, ["text"], [None]])
def test_rasa_answer_that_is_no_list_of_objects_is_a_bad_body(messages: Any) -> None:
    with pytest.raises(UpstreamError) as failure:
        render_messages(messages)
    assert failure.value.reason == "bad_body"


async def test_rasa_probe_asks_the_rest_channel_health(fake_rasa: FakeRasa) -> None:
    """The probe reads the channel's health route and sends no message (no tracker is touched)."""
    async with BotClient() as session:
        adapter = RasaAdapter(UpstreamConfig(url=fake_rasa.url + "/", adapter="rasa", timeout=2.0), session)
        assert await adapter.probe() == "Rasa REST channel: status ok"
        assert (fake_rasa.health_checks, fake_rasa.calls) == (1, [])
        fake_rasa.mode = "no_health"
        with pytest.raises(UpstreamError, match="HTTP 404"):
            await adapter.probe()
