"""A real Bot Framework bot (botbuilder-python's ``CloudAdapter`` on aiohttp) on loopback, for the
``directline`` adapter's tests: the activities the gateway reads are then the SDK's own, defaults
included (``MessageFactory.text`` puts ``inputHint: acceptingInput`` on every message;
``ShowTypingMiddleware`` sends ``typing`` while a turn runs; no ``replyToId`` from ``send_activity`` on
Direct Line, but one from ``activity.create_reply``; a proactive message through
``continue_conversation``).

It runs as a Direct Line bot does, behind tests/support/fake_directline.py (``bot_url``): the
channel posts each message to ``/api/messages`` and the bot answers through the Bot Connector API
at the activity's ``serviceUrl``. No app id or password, as under the Bot Framework Emulator: the
SDK then neither checks the channel's token nor asks Azure for one of its own.

What it does depends on the User's words, one scenario per test:

* ``order …``: "Let me look that up…", then "Your order A-1 shipped on Monday." (two messages);
* ``slow order …``: types for a while, says "Let me look that up…", types again for a while (the
  ``typing`` every ``TYPING_PERIOD`` s), then "Your order A-1 shipped on Monday.";
* ``which …``: a prompt ("Which order is it?", ``expectingInput``), and a moment later one more
  message, after the end of the turn's answer;
* ``ask …``: "You said: <text>. Anything else?" as a prompt (``expectingInput``): a turn that ends
  with a prompt, as a bot avoids the quiet period;
* ``card …``: a hero card with buttons and suggested actions;
* ``bye …``: "Goodbye!", then ``endOfConversation``;
* ``trace …``: the ``traceparent`` it found in the activity's ``channelData``;
* ``later …``: "Working on it…", and ``LATER_SECONDS`` after it, proactively (the SDK's
  ``continue_conversation``, the usual pattern for long work), "Your report is ready." made with
  ``create_reply``: its ``replyToId`` is the id of the continuation activity the SDK made up;
* ``typing later …``: the same, with ``typing`` every ``TYPING_PERIOD`` s from the background work
  until the message;
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
    ConversationReference,
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
LATER_SECONDS: Final = 2.0
"""How long after its turn the bot's background work sends its proactive message."""


@dataclass(frozen=True)
class _NoAppId:
    """The bot's configuration as the SDK reads it: no app id or password, so no Bot Framework tokens."""

    APP_ID: str = ""
    APP_PASSWORD: str = ""


class AcmeBot:
    """The bot's turn logic (``CloudAdapter.process`` calls ``on_turn`` for every activity)."""

    def __init__(self, adapter: CloudAdapter) -> None:
        self._adapter = adapter
        self.background: set[asyncio.Task[None]] = set()
        """The work still running after its turn (cancelled when the bot stops)."""

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
        elif first == "ask":
            await context.send_activity(
                MessageFactory.text(
                    f"You said: {words}. Anything else?", input_hint=InputHints.expecting_input
                )
            )
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
        elif first in ("later", "typing"):
            await context.send_activity("Working on it…")
            reference = TurnContext.get_conversation_reference(activity)
            work = asyncio.create_task(self._later(reference, typing=first == "typing"))
            self.background.add(work)
            work.add_done_callback(self.background.discard)
        elif first == "trace":
            channel_data: Any = activity.channel_data
            parent = channel_data.get("traceparent") if isinstance(channel_data, dict) else None
            await context.send_activity(f"traceparent: {parent}")
        else:
            await context.send_activity(f"You said: {words}")

    async def _later(self, reference: ConversationReference, *, typing: bool) -> None:
        """The background work: a proactive turn that (maybe) types, then says it is done."""

        async def proactive(context: TurnContext) -> None:
            deadline = asyncio.get_running_loop().time() + LATER_SECONDS
            while typing and asyncio.get_running_loop().time() < deadline:
                busy = context.activity.create_reply()
                busy.type = ActivityTypes.typing
                await context.send_activity(busy)
                await asyncio.sleep(TYPING_PERIOD)
            await asyncio.sleep(max(0.0, deadline - asyncio.get_running_loop().time()))
            await context.send_activity(context.activity.create_reply("Your report is ready."))

        await self._adapter.continue_conversation(reference, proactive, "")


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
    bot = AcmeBot(adapter)

    async def messages(request: web.Request) -> web.StreamResponse:
        response = await adapter.process(request, bot)
        return response if response is not None else web.Response(status=201)

    async def stop_work(_: web.Application) -> None:
        for work in bot.background:
            work.cancel()
        await asyncio.gather(*bot.background, return_exceptions=True)

    app = web.Application()
    app.router.add_post("/api/messages", messages)
    app.on_cleanup.append(stop_work)
    return app
