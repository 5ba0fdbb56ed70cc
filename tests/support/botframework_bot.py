"""A real Bot Framework bot (botbuilder-python's ``CloudAdapter`` on aiohttp) on loopback, for the
``directline`` adapter's tests: the activities the gateway reads are then the SDK's own, defaults
included (``MessageFactory.text`` puts ``inputHint: acceptingInput`` on every message;
``ShowTypingMiddleware`` sends ``typing`` while a turn runs; no ``replyToId`` on Direct Line).

It runs as a Direct Line bot does, behind tests/support/fake_directline.py (``bot_url``): the
channel posts each message to ``/api/messages`` and the bot answers through the Bot Connector API
at the activity's ``serviceUrl``. No app id or password, as under the Bot Framework Emulator: the
SDK then neither checks the channel's token nor asks Azure for one of its own.

What it does depends on the User's words, one scenario per test:

* ``order …``: "Let me look that up…", then "Your order A-1 shipped on Monday." (two messages);
* ``slow order …``: types for a while, says "Let me look that up…", types again for a while (the
  ``typing`` every ``TYPING_PERIOD`` s), then "Your order A-1 shipped on Monday.";
* ``which …``: a prompt ("Which order is it?", ``expectingInput``), and a moment later one more
  message, which belongs to no turn;
* ``card …``: a hero card with buttons and suggested actions;
* ``bye …``: "Goodbye!", then ``endOfConversation``;
* ``trace …``: the ``traceparent`` it found in the activity's ``channelData``;
* anything else: "You said: <text>".
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from botbuilder.core import CardFactory, MessageFactory, ShowTypingMiddleware, TurnContext
from botbuilder.integration.aiohttp import CloudAdapter, ConfigurationBotFrameworkAuthentication
from botbuilder.schema import (
    ActionTypes,
    Activity,
    ActivityTypes,
    CardAction,
    EndOfConversationCodes,
    HeroCard,
    InputHints,
)

TYPING_DELAY: Final = 0.05
TYPING_PERIOD: Final = 0.1
"""How often the bot says it is typing while a turn runs (the SDK's default is every 2 s)."""
WORK_SECONDS: Final = 1.2
"""How long the slow scenario's bot works, twice: several times a test's ``quiet_period``."""
AFTER_PROMPT_SECONDS: Final = 0.1


@dataclass(frozen=True)
class _NoAppId:
    """The bot's configuration as the SDK reads it: no app id or password, so no Bot Framework tokens."""

    APP_ID: str = ""
    APP_PASSWORD: str = ""


class AcmeBot:
    """The bot's turn logic (``CloudAdapter.process`` calls ``on_turn`` for every activity)."""

    async def on_turn(self, context: TurnContext) -> None:
        activity = context.activity
        if activity.type != ActivityTypes.message:
            return
        words = (activity.text or "").strip()
        first = words.split(" ", 1)[0].lower()
        if first == "order":
            await context.send_activity("Let me look that up…")
            await context.send_activity("Your order A-1 shipped on Monday.")
        elif first == "slow":
            await asyncio.sleep(WORK_SECONDS)
            await context.send_activity("Let me look that up…")
            await asyncio.sleep(WORK_SECONDS)
            await context.send_activity("Your order A-1 shipped on Monday.")
        elif first == "which":
            await context.send_activity(
                MessageFactory.text("Which order is it?", input_hint=InputHints.expecting_input)
            )
            await asyncio.sleep(AFTER_PROMPT_SECONDS)
            await context.send_activity("(a message after the prompt)")
        elif first == "card":
            await context.send_activity(_card())
        elif first == "bye":
            await context.send_activity("Goodbye!")
            await context.send_activity(
                Activity(
                    type=ActivityTypes.end_of_conversation,
                    code=EndOfConversationCodes.completed_successfully,
                )
            )
        elif first == "trace":
            channel_data: Any = activity.channel_data
            parent = channel_data.get("traceparent") if isinstance(channel_data, dict) else None
            await context.send_activity(f"traceparent: {parent}")
        else:
            await context.send_activity(f"You said: {words}")


def _card() -> Activity:
    hero = HeroCard(
        title="Order A-1",
        subtitle="Shipped Monday",
        text="Arrives Thursday.",
        buttons=[
            CardAction(type=ActionTypes.im_back, title="Track it", value="track A-1"),
            CardAction(type=ActionTypes.open_url, title="Open the order", value="https://acme.example/o/A-1"),
        ],
    )
    message = MessageFactory.attachment(CardFactory.hero_card(hero), text="Pick one:")
    suggested = MessageFactory.suggested_actions(
        [CardAction(type=ActionTypes.im_back, title="Talk to a human", value="handoff")]
    )
    message.suggested_actions = suggested.suggested_actions
    return message


def bot_app() -> web.Application:
    adapter = CloudAdapter(ConfigurationBotFrameworkAuthentication(_NoAppId()))
    adapter.use(ShowTypingMiddleware(delay=TYPING_DELAY, period=TYPING_PERIOD))
    bot = AcmeBot()

    async def messages(request: web.Request) -> web.StreamResponse:
        response = await adapter.process(request, bot)
        return response if response is not None else web.Response(status=201)

    app = web.Application()
    app.router.add_post("/api/messages", messages)
    return app
