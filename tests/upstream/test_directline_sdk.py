"""The ``directline`` adapter in front of a real Bot Framework bot (botbuilder-python 4.17) behind the
Direct Line 3.0 fake, through the real gateway over HTTP: the activities the adapter reads are the
SDK's own (``acceptingInput`` on every message, ``typing`` while a turn runs, no ``replyToId`` from
``send_activity``, a made-up one on a proactive message), so the answer's completion rule is checked
against what a Bot Framework bot really sends (issue 19), and what it sends after its turn (issue 32).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from gateway.ops.tracing import parse_traceparent
from tests.support.adapters import error_reason, reply_of
from tests.support.botframework_bot import LATER_SECONDS, WORK_SECONDS, bot_app
from tests.support.fake_directline import FakeDirectLine
from tests.support.gateway import Harness, MakeGateway
from tests.support.waiting import until
from tests.upstream.test_directline import ENV, directline_upstream, kept_line, late_messages, text_of

QUIET_PERIOD = 0.6
"""Six of the bot's typing periods, half its slow scenario's work, six times its pause after a prompt."""


@pytest.fixture
async def sdk_bot(fake_directline: FakeDirectLine) -> AsyncIterator[FakeDirectLine]:
    """The Direct Line fake with the botbuilder bot behind it."""
    server = TestServer(bot_app(), host="127.0.0.1")
    await server.start_server()
    fake_directline.bot_url = str(server.make_url("/api/messages"))
    yield fake_directline
    await fake_directline.close()  # before the bot: no delivery is left half-way
    await server.close()


@pytest.fixture
async def gw_sdk(make_gateway: MakeGateway, cache_url: str, sdk_bot: FakeDirectLine) -> Harness:
    edit = directline_upstream(sdk_bot, timeout=5.0, quiet_period=QUIET_PERIOD)
    return await make_gateway(cache_url, edit=edit, environ=ENV)


def bot_activities(fake: FakeDirectLine, kind: str = "message") -> list[dict[str, Any]]:
    return [
        activity
        for conversation in fake.conversations.values()
        for activity in conversation.activities
        if activity["type"] == kind and activity["from"]["id"] != fake.posted[0]["from"]["id"]
    ]


async def test_sdk_one_message(gw_sdk: Harness, sdk_bot: FakeDirectLine) -> None:
    text, _ = await text_of(await gw_sdk.send("Hi there"))
    assert text == "You said: Hi there"
    (message,) = bot_activities(sdk_bot)
    # What the SDK's send_activity sends on Direct Line: acceptingInput on every message, no replyToId.
    assert message["inputHint"] == "acceptingInput"
    assert "replyToId" not in message


async def test_sdk_several_messages_all_reach_the_agent_in_order(
    gw_sdk: Harness, sdk_bot: FakeDirectLine
) -> None:
    """``acceptingInput`` is not the end of the answer: the second message is the one that matters."""
    text, _ = await text_of(await gw_sdk.send("order A-1"))
    assert text == "Let me look that up…\n\nYour order A-1 shipped on Monday."
    assert [message["inputHint"] for message in bot_activities(sdk_bot)] == ["acceptingInput"] * 2


async def test_sdk_a_bot_that_types_for_a_while_is_waited_for(
    gw_sdk: Harness, sdk_bot: FakeDirectLine
) -> None:
    """``ShowTypingMiddleware``'s ``typing`` keeps the answer open: the bot works for twice the quiet
    period before its first message and again before its second, and both arrive."""
    text, _ = await text_of(await gw_sdk.send("slow order A-1"))
    assert text == "Let me look that up…\n\nYour order A-1 shipped on Monday."
    assert len(bot_activities(sdk_bot, "typing")) >= 2 * WORK_SECONDS / QUIET_PERIOD


async def test_sdk_a_prompt_ends_the_answer_and_a_later_message_opens_the_next_reply(
    gw_sdk: Harness, sdk_bot: FakeDirectLine
) -> None:
    """``expectingInput`` ends the answer at once; a message the bot sends after it, before the User's
    next one, is delivered once, at the head of the next reply."""
    text, context_id = await text_of(await gw_sdk.send("which order?", message_id="m-1"))
    assert text == "Which order is it?"
    await until(lambda: len(bot_activities(sdk_bot)) == 2)
    text, _ = await text_of(await gw_sdk.send("A-1", message_id="m-2", context_id=context_id))
    assert text == "(a message after the prompt)\n\nYou said: A-1"
    assert late_messages(gw_sdk, "delivered") == 1
    assert [message["text"] for message in bot_activities(sdk_bot)] == [
        "Which order is it?",
        "(a message after the prompt)",
        "You said: A-1",
    ]


async def test_sdk_a_card_reads_as_lines_to_act_on(gw_sdk: Harness) -> None:
    text, _ = await text_of(await gw_sdk.send("card please"))
    assert text == (
        "Pick one:\n"
        "Order A-1\n"
        "Shipped Monday\n"
        "Arrives Thursday.\n"
        "- Track it (reply: track A-1)\n"
        "- Open the order (open: https://acme.example/o/A-1)\n"
        "- Talk to a human (reply: handoff)"
    )


async def test_s4_2_sdk_goodbye_and_end_of_conversation_close_the_conversation(
    gw_sdk: Harness, sdk_bot: FakeDirectLine
) -> None:
    _, context_id = await text_of(await gw_sdk.send("Hi", message_id="m-1"))
    bye = await gw_sdk.send("bye now", message_id="m-2", context_id=context_id)
    _, message = await reply_of(bye)
    assert message["parts"] == [{"text": "Goodbye!"}]
    assert await kept_line(gw_sdk, context_id) is None
    after = await gw_sdk.send("One more thing", message_id="m-3", context_id=context_id)
    assert await error_reason(after) == (400, "UNSUPPORTED_OPERATION")
    assert sdk_bot.count("send") == 2  # the refused turn never reached the bot


async def test_sdk_the_bot_reads_the_trace_context_from_channel_data(gw_sdk: Harness) -> None:
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    text, _ = await text_of(
        await gw_sdk.send("trace", headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"})
    )
    sent = parse_traceparent(text.removeprefix("traceparent: "))
    assert sent is not None
    assert (sent.trace_id, sent.flags) == (trace_id, "01")


def proactive(fake: FakeDirectLine) -> list[dict[str, Any]]:
    return [message for message in bot_activities(fake) if message["text"] == "Your report is ready."]


async def test_sdk_a_proactive_message_within_the_quiet_period_is_this_turns(
    make_gateway: MakeGateway, cache_url: str, sdk_bot: FakeDirectLine
) -> None:
    """Issue 32: the SDK's ``continue_conversation`` message carries a ``replyToId`` the SDK made up
    (the continuation activity's id): it is the bot's, and with ``quiet_period`` above its delay it is
    part of the turn's answer."""
    edit = directline_upstream(sdk_bot, timeout=10.0, quiet_period=LATER_SECONDS + 1.5)
    gw = await make_gateway(cache_url, edit=edit, environ=ENV)
    text, _ = await text_of(await gw.send("later please"))
    assert text == "Working on it…\n\nYour report is ready."
    (message,) = proactive(sdk_bot)
    posted = [a["id"] for c in sdk_bot.conversations.values() for a in c.activities if a["type"] == "message"]
    assert message["replyToId"] not in posted  # made up by the SDK, not an activity of the conversation


async def test_sdk_background_typing_keeps_the_answer_open_for_a_proactive_message(
    gw_sdk: Harness, sdk_bot: FakeDirectLine
) -> None:
    """``typing`` from the bot's background work (``continue_conversation``, the SDK's made-up
    ``replyToId``) restarts the quiet period as in-turn ``typing`` does: the message two seconds after
    the turn, more than three quiet periods, is still this turn's."""
    text, _ = await text_of(await gw_sdk.send("typing later please"))
    assert text == "Working on it…\n\nYour report is ready."
    assert LATER_SECONDS > 3 * QUIET_PERIOD


async def test_sdk_a_proactive_message_after_the_turn_opens_the_next_reply_and_is_counted(
    gw_sdk: Harness, sdk_bot: FakeDirectLine
) -> None:
    """Issue 32: a message two seconds after the turn, past its quiet period, is delivered once, at the
    head of the next turn's reply, and ``pact_directline_late_messages_total`` counts it."""
    text, context_id = await text_of(await gw_sdk.send("later please", message_id="m-1"))
    assert text == "Working on it…"
    await until(lambda: len(proactive(sdk_bot)) == 1, limit=LATER_SECONDS + 10)
    text, _ = await text_of(await gw_sdk.send("thanks", message_id="m-2", context_id=context_id))
    assert text == "Your report is ready.\n\nYou said: thanks"
    assert late_messages(gw_sdk, "delivered") == 1
    text, _ = await text_of(await gw_sdk.send("bye-bye", message_id="m-3", context_id=context_id))
    assert text == "You said: bye-bye"  # delivered once
    assert late_messages(gw_sdk, "delivered") == 1
