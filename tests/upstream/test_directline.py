"""The ``directline`` adapter against a fake Direct Line 3.0 service, through the real gateway over HTTP.

The wire shapes are Direct Line's (tests/support/fake_directline.py); the Direct Line
conversation behind each PACT conversation is kept in the store, so those tests run on both
backends; the §4 behaviour is every adapter's (tests/support/adapters.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import orjson
import pytest

from gateway.app import ADAPTER_STATE
from gateway.config import ConfigError, DirectLineSettings, load_config
from gateway.http.state import METRICS
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import parse_traceparent
from gateway.store import keys, open_store
from gateway.store.factory import open_adapter_state
from gateway.upstream.base import UpstreamError
from gateway.upstream.client import BotClient
from gateway.upstream.directline import ENDED_TEXT, AnswerReader, Line, render_activity, token_key
from gateway.upstream.factory import make_adapter
from gateway.upstream.wire import MAX_REPLY_BYTES
from tests.support.adapters import (
    A2A_JSON,
    check_failure_stores_nothing_and_the_retry_runs_once,
    check_retries_are_served_from_the_store,
    error_reason,
    reply_of,
)
from tests.support.fake_directline import BOT, CARDS_ACTIVITY, SECRET, FakeDirectLine
from tests.support.gateway import Harness, MakeGateway, base_config

ENV = {"DIRECT_LINE_SECRET": SECRET}


def directline_upstream(
    fake: FakeDirectLine, timeout: float = 5.0, **settings: Any
) -> Callable[[dict[str, Any]], None]:
    def edit(raw: dict[str, Any]) -> None:
        raw["brands"][0]["upstream"] = {
            "adapter": "directline",
            "url": fake.url,
            "timeout": timeout,
            "directline": {
                "secret": "${DIRECT_LINE_SECRET}",
                "poll_interval": 0.02,
                "quiet_period": 0.3,
                **settings,
            },
        }

    return edit


@pytest.fixture
async def gw_dl(make_gateway: MakeGateway, cache_url: str, fake_directline: FakeDirectLine) -> Harness:
    return await make_gateway(cache_url, edit=directline_upstream(fake_directline), environ=ENV)


async def text_of(response: aiohttp.ClientResponse) -> tuple[str, str]:
    """The reply's text and its contextId."""
    _, message = await reply_of(response)
    assert len(message["parts"]) == 1
    return message["parts"][0]["text"], message["contextId"]


def late_messages(gw: Harness, outcome: str) -> float:
    """``pact_directline_late_messages_total`` of the Brand ``acme``, ``0`` before any was counted."""
    app = gw.client.app
    assert app is not None
    value = app[METRICS].registry.get_sample_value(
        "pact_directline_late_messages_total", {"brand": "acme", "outcome": outcome}
    )
    return value or 0.0


async def kept_line(gw: Harness, context_id: str) -> Line | None:
    app = gw.client.app
    assert app is not None
    key = keys.adapter_key("acme", context_id, "directline")
    raw = await app[ADAPTER_STATE].get(key)
    return None if raw is None else Line.load(raw, token_key(SECRET), key.encode())


async def test_directline_one_conversation_per_pact_conversation(
    gw_dl: Harness, fake_directline: FakeDirectLine
) -> None:
    """Started with the secret on the first turn, then continued with its token from the store."""
    text, context_id = await text_of(await gw_dl.send("Hi", message_id="m-1"))
    assert text == "You said: Hi (message 1 here)"
    text, _ = await text_of(await gw_dl.send("Order A-1", message_id="m-2", context_id=context_id))
    assert text == "You said: Order A-1 (message 2 here)"
    text, _ = await text_of(await gw_dl.send("Hello", message_id="m-3"))
    assert text == "You said: Hello (message 1 here)"
    await text_of(await gw_dl.send("Hello", message_id="m-4", sub="bob"))
    assert fake_directline.count("start") == 3
    assert fake_directline.count("refresh") + fake_directline.count("reconnect") == 0
    senders = [activity["from"]["id"] for activity in fake_directline.posted]
    assert senders[0] == senders[1] == senders[2] != senders[3]  # one pseudonym per User, stable
    assert all("alice" not in sender and "bob" not in sender for sender in senders)
    assert [activity["text"] for activity in fake_directline.posted] == ["Hi", "Order A-1", "Hello", "Hello"]
    line = await kept_line(gw_dl, context_id)
    assert line is not None
    assert line.conversation_id in fake_directline.conversations
    assert line.token in fake_directline.live
    assert line.watermark == "4"  # both messages and both replies read


async def test_directline_the_store_holds_the_token_sealed_and_a_token_that_does_not_open_is_replaced(
    gw_dl: Harness, fake_directline: FakeDirectLine
) -> None:
    """Issue 28 I8: no Direct Line token is readable in the store; the next turn opens the sealed one
    (no new token asked for). A line whose token does not open (here one of a release that kept it in
    clear) gets a fresh token for the same conversation from the secret."""
    app = gw_dl.client.app
    assert app is not None
    _, context_id = await text_of(await gw_dl.send("Hi", message_id="m-1"))
    key = keys.adapter_key("acme", context_id, "directline")
    raw = await app[ADAPTER_STATE].get(key)
    assert raw is not None
    assert not [token for token in fake_directline.live if token.encode() in raw]
    text, _ = await text_of(await gw_dl.send("Again", message_id="m-2", context_id=context_id))
    assert text == "You said: Again (message 2 here)"
    assert fake_directline.count("refresh") + fake_directline.count("reconnect") == 0
    line = await kept_line(gw_dl, context_id)
    assert line is not None
    in_clear = orjson.dumps([line.conversation_id, line.token, line.refresh_at, line.watermark])
    await app[ADAPTER_STATE].put(key, in_clear, 60)
    text, _ = await text_of(await gw_dl.send("Once more", message_id="m-3", context_id=context_id))
    assert text == "You said: Once more (message 3 here)"  # the same Direct Line conversation
    assert (fake_directline.count("reconnect"), fake_directline.count("start")) == (1, 1)
    raw = await app[ADAPTER_STATE].get(key)
    assert raw is not None
    assert not [token for token in fake_directline.live if token.encode() in raw]


async def test_directline_retries_are_served_from_the_store(
    gw_dl: Harness, fake_directline: FakeDirectLine
) -> None:
    await check_retries_are_served_from_the_store(gw_dl, lambda: fake_directline.count("send"))


@pytest.mark.parametrize("mode", ["bot_error", "silent"])
async def test_directline_failure_is_internal_nothing_stored_and_the_retry_runs_once(
    make_gateway: MakeGateway, cache_url: str, fake_directline: FakeDirectLine, mode: str
) -> None:
    gw = await make_gateway(cache_url, edit=directline_upstream(fake_directline, timeout=1.0), environ=ENV)

    def fail() -> None:
        fake_directline.mode = mode

    def heal() -> None:
        fake_directline.mode = "answer"

    await check_failure_stores_nothing_and_the_retry_runs_once(
        gw, lambda: fake_directline.count("send"), fail, heal
    )
    # The same Direct Line conversation throughout: the bot saw the failed turn's message too.
    assert fake_directline.count("start") == 1


async def test_directline_reads_page_on_the_watermark_and_take_only_this_turns_answer(
    make_gateway: MakeGateway, fake_directline: FakeDirectLine
) -> None:
    """One activity per read: the adapter pages on. After a turn that failed (the bot silent), a
    message the bot sent before the User's next one opens that turn's reply, a stale answer to the
    failed turn's message is dropped and counted; ``acceptingInput`` does not end the answer,
    ``expectingInput`` does, and what follows it opens the turn after."""
    gw = await make_gateway(edit=directline_upstream(fake_directline, timeout=1.0), environ=ENV)
    text, context_id = await text_of(await gw.send("Hi", message_id="m-1"))
    fake_directline.mode = "silent"
    failed = await gw.send("Tell me", message_id="m-2", context_id=context_id)
    assert await error_reason(failed) == (500, "INTERNAL")
    fake_directline.page_size = 1
    fake_directline.mode = "several"
    reads = fake_directline.count("read")
    text, _ = await text_of(await gw.send("Tell me", message_id="m-2", context_id=context_id))
    assert text == "Late answer to an older turn.\n\nOne.\n\nTwo.\n\nThree?"
    # the late one, the User's, stale, typing, three replies (the failed turn read its own message)
    assert fake_directline.count("read") - reads == 7
    assert late_messages(gw, "delivered") == 1
    assert late_messages(gw, "dropped") == 1
    fake_directline.mode = "answer"
    text, _ = await text_of(await gw.send("Again", message_id="m-3", context_id=context_id))
    assert text == "After the prompt: not this turn's.\n\nYou said: Again (message 4 here)"
    assert late_messages(gw, "delivered") == 2
    # An answer to the failed turn's message that comes later still is dropped too.
    conversation = next(iter(fake_directline.conversations.values()))
    failed_post = conversation.user_ids[1]
    conversation.add({"type": "message", "from": BOT, "text": "Very late.", "replyToId": failed_post})
    text, _ = await text_of(await gw.send("And again", message_id="m-4", context_id=context_id))
    assert text == "You said: And again (message 5 here)"
    assert (late_messages(gw, "delivered"), late_messages(gw, "dropped")) == (2, 2)


async def test_directline_a_numeric_watermark_is_followed_and_nothing_is_delivered_twice(
    make_gateway: MakeGateway, fake_directline: FakeDirectLine
) -> None:
    """Some Direct Line implementations send the watermark as a JSON number: it is followed as the
    string one is, so each read starts where the last stopped and no message reaches the agent twice."""
    gw = await make_gateway(edit=directline_upstream(fake_directline), environ=ENV)
    fake_directline.numeric_watermark = True
    fake_directline.mode = "quiet"
    text, context_id = await text_of(await gw.send("Tell me", message_id="m-1"))
    assert text == "First part.\n\nSecond part."
    reads = fake_directline.count("read")
    assert fake_directline.watermarks[1:reads] == ["3"] * (reads - 1)  # all three read at once
    fake_directline.mode = "answer"
    text, _ = await text_of(await gw.send("Again", message_id="m-2", context_id=context_id))
    assert text == "You said: Again (message 2 here)"
    assert fake_directline.watermarks[reads:] == ["3"]
    line = await kept_line(gw, context_id)
    assert line is not None
    assert line.watermark == "5"


async def test_directline_sends_the_trace_context_in_the_activitys_channel_data(
    gw_dl: Harness, fake_directline: FakeDirectLine
) -> None:
    """Direct Line forwards no HTTP header to the bot; the activity's ``channelData`` reaches it."""
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    headers = {"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01", "tracestate": "congo=t61rcWkgMzE"}
    await text_of(await gw_dl.send("Hi", headers=headers))
    channel_data = fake_directline.posted[-1]["channelData"]
    sent = parse_traceparent(channel_data["traceparent"])
    assert sent is not None
    assert (sent.trace_id, sent.span_id, sent.flags) != (trace_id, "00f067aa0ba902b7", "01")
    assert (sent.trace_id, sent.flags) == (trace_id, "01")  # the gateway's span, in the caller's trace
    assert channel_data["tracestate"] == "congo=t61rcWkgMzE"


async def test_directline_an_answer_without_input_hint_completes_after_the_quiet_period(
    make_gateway: MakeGateway, fake_directline: FakeDirectLine
) -> None:
    gw = await make_gateway(edit=directline_upstream(fake_directline), environ=ENV)
    fake_directline.mode = "quiet"
    assert (await text_of(await gw.send("Tell me")))[0] == "First part.\n\nSecond part."


async def test_directline_polls_until_the_answer_is_there(
    make_gateway: MakeGateway, fake_directline: FakeDirectLine
) -> None:
    gw = await make_gateway(edit=directline_upstream(fake_directline), environ=ENV)
    fake_directline.mode = "late"
    assert (await text_of(await gw.send("Hi")))[0] == "Late: Hi"
    assert fake_directline.count("read") == 3


async def test_directline_cards_and_suggested_actions_are_lines_to_act_on(
    make_gateway: MakeGateway, fake_directline: FakeDirectLine
) -> None:
    gw = await make_gateway(edit=directline_upstream(fake_directline), environ=ENV)
    fake_directline.mode = "cards"
    text, _ = await text_of(await gw.send("My orders"))
    assert text == (
        "Pick one:\n"
        "Order A-1\n"
        "Shipped Monday\n"
        "Arrives Thursday.\n"
        "- Track it (reply: track A-1)\n"
        "- Open the order (open: https://acme.example/o/A-1)\n"
        "- Cancel (reply: cancel A-1)\n"
        "Image: https://cdn.acme.example/label.png\n"
        "- Yes\n"
        "- Talk to a human (reply: handoff)"
    )


async def test_s4_2_end_of_conversation_closes_it_and_drops_the_kept_state(
    gw_dl: Harness, fake_directline: FakeDirectLine
) -> None:
    """A goodbye (``acceptingInput``, as the SDKs send every message) then ``endOfConversation``: the
    goodbye is the reply and the conversation is closed; the next turn is refused, never sent."""
    _, context_id = await text_of(await gw_dl.send("Hi", message_id="m-1"))
    assert await kept_line(gw_dl, context_id) is not None
    fake_directline.mode = "end"
    bye = await gw_dl.send("Bye", message_id="m-2", context_id=context_id)
    bye_body, message = await reply_of(bye)
    assert message["parts"] == [{"text": "Goodbye!"}]
    assert await kept_line(gw_dl, context_id) is None
    after = await gw_dl.send("One more thing", message_id="m-3", context_id=context_id)
    assert await error_reason(after) == (400, "UNSUPPORTED_OPERATION")
    retry = await gw_dl.send("Bye", message_id="m-2", context_id=context_id)
    assert await retry.read() == bye_body
    assert fake_directline.count("send") == 2
    fake_directline.mode = "hang_up"  # ended without a word
    text, context_id = await text_of(await gw_dl.send("Hi", message_id="m-4"))
    assert text == ENDED_TEXT
    assert await error_reason(await gw_dl.send("Hm?", context_id=context_id)) == (
        400,
        "UNSUPPORTED_OPERATION",
    )


async def test_directline_an_answer_with_nothing_to_read_is_the_no_answer_text(
    make_gateway: MakeGateway, fake_directline: FakeDirectLine
) -> None:
    gw = await make_gateway(edit=directline_upstream(fake_directline, no_answer="(no text)"), environ=ENV)
    fake_directline.mode = "widget"
    assert (await text_of(await gw.send("Hi")))[0] == "(no text)"
    assert DirectLineSettings(secret="s").no_answer == "Sorry, I have no answer to that."


async def test_directline_token_is_refreshed_before_it_expires(
    gw_dl: Harness, fake_directline: FakeDirectLine
) -> None:
    """Past half its ``expires_in`` the token is refreshed first; the fake then refuses the old one."""
    fake_directline.expires_in = 0
    _, context_id = await text_of(await gw_dl.send("Hi", message_id="m-1"))
    text, _ = await text_of(await gw_dl.send("Again", message_id="m-2", context_id=context_id))
    assert text == "You said: Again (message 2 here)"
    assert fake_directline.operations[:2] == ["start", "send"]
    assert fake_directline.operations.index("refresh") < fake_directline.operations.index("send", 2)
    assert fake_directline.count("reconnect") == 0


@pytest.mark.parametrize("refreshing", [False, True], ids=["on-send", "on-refresh"])
async def test_directline_expired_token_gets_a_new_one_from_the_secret_once(
    make_gateway: MakeGateway, cache_url: str, fake_directline: FakeDirectLine, refreshing: bool
) -> None:
    """``403 TokenExpired`` (an expired token cannot be refreshed): Direct Line's reconnect with the
    secret gives the same conversation a new token; the call is made again, and the token kept."""
    gw = await make_gateway(cache_url, edit=directline_upstream(fake_directline), environ=ENV)
    if refreshing:
        fake_directline.expires_in = 0
    _, context_id = await text_of(await gw.send("Hi", message_id="m-1"))
    fake_directline.expire_tokens()
    text, _ = await text_of(await gw.send("Again", message_id="m-2", context_id=context_id))
    assert text == "You said: Again (message 2 here)"  # the same Direct Line conversation
    assert (fake_directline.count("start"), fake_directline.count("reconnect")) == (1, 1)
    fake_directline.expires_in = 1800
    await text_of(await gw.send("Third", message_id="m-3", context_id=context_id))
    # The reconnect's token was kept (its answer has no expires_in: the documented 30 min then).
    assert fake_directline.count("reconnect") == 1


async def test_directline_a_new_token_is_kept_even_when_the_turn_then_fails(
    make_gateway: MakeGateway, cache_url: str, fake_directline: FakeDirectLine
) -> None:
    gw = await make_gateway(cache_url, edit=directline_upstream(fake_directline, timeout=1.0), environ=ENV)
    _, context_id = await text_of(await gw.send("Hi", message_id="m-1"))
    fake_directline.expire_tokens()
    fake_directline.mode = "silent"
    failed = await gw.send("Again", message_id="m-2", context_id=context_id)
    assert await error_reason(failed) == (500, "INTERNAL")
    fake_directline.mode = "answer"
    await text_of(await gw.send("Again", message_id="m-2", context_id=context_id))
    assert fake_directline.count("reconnect") == 1


async def test_directline_conversation_unknown_to_direct_line_is_started_anew(
    gw_dl: Harness, fake_directline: FakeDirectLine
) -> None:
    _, context_id = await text_of(await gw_dl.send("Hi", message_id="m-1"))
    line = await kept_line(gw_dl, context_id)
    assert line is not None
    fake_directline.forget(line.conversation_id)
    text, _ = await text_of(await gw_dl.send("Again", message_id="m-2", context_id=context_id))
    assert text == "You said: Again (message 1 here)"
    assert fake_directline.count("start") == 2


async def test_s6_direct_line_429_is_a_bare_429_with_its_retry_after(
    make_gateway: MakeGateway, fake_directline: FakeDirectLine
) -> None:
    gw = await make_gateway(edit=directline_upstream(fake_directline), environ=ENV)
    fake_directline.mode = "throttle"
    refused = await gw.send("Hi")
    assert (refused.status, refused.headers["Retry-After"]) == (429, "5")
    assert refused.headers.get("Content-Type", "") != A2A_JSON


async def test_directline_probe_generates_a_token_and_opens_no_conversation(
    fake_directline: FakeDirectLine,
) -> None:
    raw = base_config("https://pa.example", "https://pa.example/jwks", "http://bot.test/chat", "memory://")
    directline_upstream(fake_directline)(raw)
    config = load_config(raw, ENV)
    async with BotClient() as session:
        state = open_adapter_state(open_store(config.cache))
        adapter = make_adapter(config.brands["acme"], session, state, cache=config.cache, metrics=Metrics())
        assert (
            await adapter.probe() == "Direct Line: secret accepted (token for 1800 s; no conversation opened)"
        )
        assert (fake_directline.operations, fake_directline.conversations) == (["generate"], {})
        config = load_config(raw, {"DIRECT_LINE_SECRET": "not-the-secret"})
        adapter = make_adapter(config.brands["acme"], session, state, cache=config.cache, metrics=Metrics())
        with pytest.raises(UpstreamError) as failure:
            await adapter.probe()
    assert failure.value.reason == "auth"


# The rules without HTTP.

USER = "pact-" + "a" * 32
POSTED = "c|0000003"


def bot_message(text: str, **more: Any) -> dict[str, Any]:
    return {"type": "message", "from": BOT, "text": text, **more}


def reader_of(*pages: list[dict[str, Any]], line: Line | None = None) -> AnswerReader:
    reader = AnswerReader(USER, line if line is not None else Line())
    reader.posted(POSTED)
    for page in pages:
        reader.take(page)
    return reader


def answer_of(*pages: list[dict[str, Any]]) -> tuple[list[str], bool, bool]:
    reader = reader_of(*pages)
    return reader.messages, reader.complete, reader.ended


FAILED = "c|0000001"
"""A message the gateway posted for a turn that failed before it read anything."""


def test_the_answer_is_what_follows_the_posted_activity_up_to_a_prompt() -> None:
    """What came before the posted activity is late (it opens the reply); an answer to a failed turn's
    message is dropped; a ``replyToId`` the SDK made up (a proactive message) is the bot's; what
    follows the prompt waits for the next turn."""
    activities = [
        bot_message("late, to an earlier turn"),
        {"type": "message", "from": {"id": USER}, "text": "failed", "id": FAILED},
        {"type": "message", "from": {"id": USER}, "text": "mine", "id": POSTED},
        bot_message("stale", replyToId=FAILED),
        {"type": "typing", "from": BOT},
        bot_message("one", inputHint="acceptingInput"),
        bot_message("two", replyToId=POSTED, inputHint="acceptingInput"),
        bot_message("proactive", replyToId="46b3cb10-f032-11f1-a1bd-02fc00000001"),
        bot_message("three?", inputHint="expectingInput"),
        bot_message("after the prompt"),
        {"type": "typing", "from": BOT},
    ]
    reader = reader_of(activities)
    assert (reader.late, reader.messages, reader.after) == (
        ["late, to an earlier turn"],
        ["one", "two", "proactive", "three?"],
        ["after the prompt"],
    )
    assert (reader.complete, reader.ended, reader.dropped) == (True, False, 1)
    assert answer_of(activities[:3], activities[3:7]) == (["one", "two"], False, False)


def test_an_answer_to_the_failed_turns_message_is_dropped_and_what_was_owed_comes_first() -> None:
    line = Line(failed_post=FAILED, late=["kept from the last turn"])
    reader = reader_of(
        [
            bot_message("answer to the failed turn", replyToId=FAILED),
            {"type": "message", "from": {"id": USER}, "id": POSTED},
            bot_message("answer to the failed turn, later", replyToId=FAILED),
            bot_message("this turn's"),
        ],
        line=line,
    )
    assert (reader.late, reader.messages, reader.dropped) == (["kept from the last turn"], ["this turn's"], 2)


def test_typing_and_messages_are_heard_and_only_this_turns() -> None:
    reader = AnswerReader(USER, Line())
    reader.posted(POSTED)
    assert not reader.take([bot_message("late"), {"type": "typing", "from": BOT}])
    assert reader.take(
        [{"type": "message", "from": {"id": USER}, "id": POSTED}, {"type": "typing", "from": BOT}]
    )
    assert reader.take([{"type": "typing", "from": BOT, "replyToId": "made-up-by-the-sdk"}])
    assert not reader.take([{"type": "event", "from": BOT, "name": "x"}])
    assert (reader.messages, reader.late) == ([], ["late"])


def test_the_answer_ends_at_the_bots_end_of_conversation() -> None:
    mine = {"type": "message", "from": {"id": USER}, "text": "bye", "id": POSTED}
    ended = [
        mine,
        bot_message("bye", inputHint="acceptingInput"),
        {"type": "endOfConversation", "from": BOT},
        bot_message("after the end"),
    ]
    assert answer_of(ended) == (["bye"], True, True)
    assert reader_of(ended).dropped == 1  # nothing reads a closed conversation
    users_end = [mine, {"type": "endOfConversation", "from": {"id": USER}}]
    assert answer_of(users_end) == ([], False, False)
    earlier_end = [{"type": "endOfConversation", "from": BOT}, mine]
    assert answer_of(earlier_end) == ([], False, False)


def test_an_answer_naming_the_posted_activity_is_this_turns_even_if_the_set_leaves_it_out() -> None:
    reader = reader_of([bot_message("yes?", replyToId=POSTED, inputHint="expectingInput")])
    assert (reader.late, reader.messages, reader.complete) == ([], ["yes?"], True)


def test_owed_text_is_bounded() -> None:
    """What waits for a later reply is at most the reply's bound; past it, messages are dropped."""
    big = "x" * (MAX_REPLY_BYTES // 2)
    reader = reader_of([bot_message(big), bot_message(big), bot_message("one too many")])
    assert (reader.late, reader.dropped) == ([big, big], 1)


def test_render_activity() -> None:
    assert render_activity({"type": "message", "text": "  Hi  "}) == "Hi"
    assert render_activity({"type": "message", **CARDS_ACTIVITY}).startswith("Order A-1\nShipped Monday")
    assert render_activity(
        {"attachments": [{"contentType": "application/pdf", "contentUrl": "https://f/x"}]}
    ) == ("Attachment: https://f/x")
    odd = {
        "text": 3,
        "attachments": "x",
        "suggestedActions": {"actions": [{"title": "Only a title"}, "x", {}]},
    }
    assert render_activity(odd) == "- Only a title"
    assert render_activity({"type": "message"}) == ""


KEY = token_key(SECRET)
CONTEXT = b"pact:acme:adapter:ctx-1:directline"


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"{}",
        b'["c", "t", 1.0]',
        b'["c", 2, 1.0, null]',
        b'["c", "t", "x", null]',
        b'["c", "", 1.0, null, 3, []]',
        b'["c", "", 1.0, null, null, [1]]',
    ],
)
def test_a_kept_line_that_is_not_one_starts_a_new_conversation(raw: bytes) -> None:
    assert Line.load(raw, KEY, CONTEXT) == Line()


def test_a_kept_line_round_trips_with_its_token_sealed() -> None:
    """Issue 28 I8: the store holds the token sealed under a key derived from the Brand's secret."""
    line = Line("conv", "dlt-token-Qz8vN2pX7wYk4Rm", 12.5, "7", "conv|0000003", ["owed"])
    raw = line.dump(KEY, CONTEXT)
    assert b"dlt-token" not in raw
    assert Line.load(raw, KEY, CONTEXT) == line
    # Another conversation's record, another Brand's secret, or a release that kept the token in
    # clear: the conversation goes on, with a fresh token from the secret.
    without_token = Line("conv", "", 12.5, "7", "conv|0000003", ["owed"])
    assert Line.load(raw, KEY, b"pact:acme:adapter:ctx-2:directline") == without_token
    assert Line.load(raw, token_key("another-secret"), CONTEXT) == without_token
    assert Line.load(b'["conv", "dlt-token", 12.5, "7"]', KEY, CONTEXT) == Line("conv", "", 12.5, "7")


# The configuration.

DL_PATH = "brands[0].upstream.directline"


def config_with(directline: dict[str, Any], **upstream: Any) -> dict[str, Any]:
    raw = base_config("https://pa.example", "https://pa.example/jwks", "http://bot.test/chat", "memory://")
    raw["brands"][0]["upstream"] = {
        "adapter": "directline",
        "url": "https://directline.botframework.com",
        "directline": directline,
        **upstream,
    }
    return raw


@pytest.mark.parametrize(
    ("directline", "upstream", "path", "reason"),
    [
        ({"secret": SECRET}, {}, f"{DL_PATH}.secret", "never the secret"),
        ({"secret": "${DIRECT_LINE_SECRET}", "quiet_period": 10}, {}, f"{DL_PATH}.quiet_period", "shorter"),
        (
            {"secret": "${DIRECT_LINE_SECRET}", "quiet_period": 2},
            {"timeout": 2},
            f"{DL_PATH}.quiet_period",
            "",
        ),
        ({"secret": "${DIRECT_LINE_SECRET}", "poll_interval": 0.001}, {}, f"{DL_PATH}.poll_interval", ""),
        (
            {"secret": "${DIRECT_LINE_SECRET}", "watermark": "0"},
            {},
            f"{DL_PATH}.watermark",
            "unknown setting",
        ),
        ({}, {}, f"{DL_PATH}.secret", "is required"),
    ],
)
def test_directline_settings_are_checked_with_their_yaml_path(
    directline: dict[str, Any], upstream: dict[str, Any], path: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as failure:
        load_config(config_with(directline, **upstream), ENV)
    assert failure.value.path == path
    assert reason in failure.value.reason


def test_directline_secret_never_in_the_configuration_repr() -> None:
    config = load_config(config_with({"secret": "${DIRECT_LINE_SECRET}"}), ENV)
    settings = config.brands["acme"].upstream.directline
    assert settings is not None
    assert settings.secret == SECRET
    assert SECRET not in repr(config)
