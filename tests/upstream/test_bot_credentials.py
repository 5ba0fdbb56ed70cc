"""The Brand's bot credential (THREAT_MODEL.md, asset "bot credentials"): named in the file as
``${NAME}``, sent to the bot on every call, and never handed to a personal agent or written to a log.

The log side is the suite's scan (tests/support/secrets_scan.py): the credential is registered
with it, so any record carrying it fails the test.
"""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import ClientResponse

from tests.support.bot import ControlledBot
from tests.support.gateway import Harness, MakeGateway
from tests.support.secrets_scan import remember

BOT_CREDENTIAL = "bot-credential-7f3a9c2e5b1d4f60a8e2"


def _with_credential(raw: dict[str, Any]) -> None:
    raw["brands"][0]["upstream"]["headers"] = {"Authorization": "Bearer ${ACME_BOT_TOKEN}"}


async def _answer_text(response: ClientResponse) -> str:
    return "\n".join(
        [*(f"{name}: {value}" for name, value in response.headers.items()), await response.text()]
    )


@pytest.fixture
async def gw_with_credential(make_gateway: MakeGateway, cache_url: str) -> Harness:
    remember("a bot credential", BOT_CREDENTIAL)
    return await make_gateway(cache_url, edit=_with_credential, environ={"ACME_BOT_TOKEN": BOT_CREDENTIAL})


@pytest.mark.parametrize("mode", ["sample", "status500", "bad_body", "empty_text"])
async def test_the_bot_credential_goes_to_the_bot_and_nowhere_else(
    gw_with_credential: Harness, bot: ControlledBot, mode: str
) -> None:
    """Whatever the bot answers (a reply, a 5xx, garbage), the personal agent never sees the credential."""
    bot.mode = mode
    response = await gw_with_credential.send(message_id=f"m-{mode}")
    assert response.status == (200 if mode == "sample" else 500)
    assert BOT_CREDENTIAL not in await _answer_text(response)
    assert [call.headers["Authorization"] for call in bot.calls] == [f"Bearer {BOT_CREDENTIAL}"]


async def test_the_bot_credential_is_not_on_the_card(gw_with_credential: Harness) -> None:
    response = await gw_with_credential.client.get("/a2a/acme/.well-known/agent-card.json")
    assert response.status == 200
    assert BOT_CREDENTIAL not in await _answer_text(response)
