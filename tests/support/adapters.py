"""The §4 behaviour every bot adapter keeps, as checks a test of one adapter runs through the gateway.

``turns`` counts the turns that reached the bot (its fake's record of them), so the same check
serves an adapter whatever its bot's API looks like.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import ClientResponse

from tests.support.gateway import Harness

A2A_JSON = "application/a2a+json"


async def reply_of(response: ClientResponse) -> tuple[bytes, dict[str, Any]]:
    """A successful ``message:send``'s exact bytes and its message."""
    body = await response.read()
    assert response.status == 200, body
    assert response.headers["Content-Type"] == A2A_JSON
    message: dict[str, Any] = orjson.loads(body)["message"]
    return body, message


async def error_reason(response: ClientResponse) -> tuple[int, str]:
    body = await response.read()
    assert response.headers["Content-Type"] == A2A_JSON, body
    error = orjson.loads(body)["error"]
    return response.status, error["details"][0]["reason"]


async def check_retries_are_served_from_the_store(gw: Harness, turns: Callable[[], int]) -> None:
    """§4.3: a retried messageId gets the stored reply byte for byte and never reaches the bot,
    with its ``contextId`` or (a first message) without."""
    first, message = await reply_of(await gw.send("Hello", message_id="s4-1"))
    context_id = message["contextId"]
    second, _ = await reply_of(await gw.send("And then?", message_id="s4-2", context_id=context_id))
    reached = turns()
    assert (await reply_of(await gw.send("And then?", message_id="s4-2", context_id=context_id)))[0] == second
    assert (await reply_of(await gw.send("Hello", message_id="s4-1")))[0] == first
    assert turns() == reached


async def check_failure_stores_nothing_and_the_retry_runs_once(
    gw: Harness, turns: Callable[[], int], fail: Callable[[], None], heal: Callable[[], None]
) -> None:
    """§4.3: a turn the bot failed is ``INTERNAL`` with nothing stored; its retry runs the bot once
    more, and the retry's reply is then the one stored."""
    _, message = await reply_of(await gw.send("Hello", message_id="s4-1"))
    context_id = message["contextId"]
    fail()
    before = turns()
    failed = await gw.send("Next", message_id="s4-2", context_id=context_id)
    assert await error_reason(failed) == (500, "INTERNAL")
    assert turns() == before + 1
    heal()
    retried, _ = await reply_of(await gw.send("Next", message_id="s4-2", context_id=context_id))
    assert turns() == before + 2
    assert (await reply_of(await gw.send("Next", message_id="s4-2", context_id=context_id)))[0] == retried
    assert turns() == before + 2
