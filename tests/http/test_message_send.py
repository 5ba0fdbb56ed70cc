"""§4 message:send over HTTP, on both backends: conversations, ownership, retries, closing, the bot."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import ClientResponse

from gateway.config import CacheConfig
from gateway.ops.limits import RateLimits
from gateway.store.base import Owner
from gateway.store.limits import MemoryRateLimiter
from gateway.store.memory import MemoryStore
from gateway.turns import TurnService
from tests.support.gateway import OTHER_PA, Harness, MakeGateway

A2A_JSON = "application/a2a+json"


async def ok(response: ClientResponse) -> dict[str, Any]:
    body = await response.read()
    assert response.status == 200, body
    assert response.headers["Content-Type"] == A2A_JSON
    message: dict[str, Any] = orjson.loads(body)["message"]
    return message


async def error_of(response: ClientResponse) -> tuple[int, str, str]:
    body = await response.read()
    assert response.headers["Content-Type"] == A2A_JSON
    error = orjson.loads(body)["error"]
    assert error["code"] == response.status
    return response.status, error["details"][0]["reason"], error["message"]


async def test_s4_2_two_turns_on_one_context(gw: Harness) -> None:
    first = await ok(await gw.send("Hi, where is my order?", message_id="m-1"))
    assert first["role"] == "ROLE_AGENT"
    assert first["parts"][0]["text"].startswith("Hi, I'm Acme's order assistant")
    assert first["messageId"] != "m-1"
    context_id = first["contextId"]
    assert len(context_id) >= 32
    second = await ok(await gw.send("It is A-10001", message_id="m-2", context_id=context_id))
    assert second["contextId"] == context_id
    assert "Order A-10001 is shipped" in second["parts"][0]["text"]
    assert set(first) == {"messageId", "contextId", "role", "parts"}


async def test_bot_receives_the_documented_contract(gw: Harness) -> None:
    first = await ok(await gw.send("line one", message_id="m-1"))
    call = gw.bot.calls[0]
    assert call.body == {
        "brand": "acme",
        "conversation_id": first["contextId"],
        "message_id": "m-1",
        "text": "line one",
        "user": {"pa": gw.issuer, "sub": "alice"},
        "new_conversation": True,
        "delegation": None,
    }
    assert len(call.headers["X-Request-Id"]) >= 8
    await ok(await gw.send("next", message_id="m-2", context_id=first["contextId"]))
    assert gw.bot.calls[1].body["new_conversation"] is False


async def test_s4_1_text_parts_joined_by_newlines(gw_memory: Harness) -> None:
    body = {
        "message": {
            "messageId": "m-1",
            "role": "ROLE_USER",
            "parts": [{"text": "first"}, {"text": "  "}, {"text": "second"}],
        }
    }
    await ok(await gw_memory.client.post("/a2a/acme/message:send", json=body, headers=gw_memory.auth()))
    assert gw_memory.bot.calls[0].body["text"] == "first\nsecond"


@pytest.mark.parametrize(
    ("sub", "issuer", "brand"),
    [("bob", None, "acme"), ("alice", OTHER_PA, "acme"), ("alice", None, "globex")],
    ids=["other-sub", "other-pa", "other-brand"],
)
async def test_s4_2_ownership_matrix(gw: Harness, sub: str, issuer: str | None, brand: str) -> None:
    context_id = (await ok(await gw.send(message_id="m-1")))["contextId"]
    calls = len(gw.bot.calls)
    for message_id in ("m-2", "m-1"):  # a new turn, and a replay of the owner's stored reply
        response = await gw.send(
            message_id=message_id, context_id=context_id, sub=sub, issuer=issuer, brand=brand
        )
        assert await error_of(response) == (400, "INVALID_PARAMS", "Unknown contextId")
    assert len(gw.bot.calls) == calls


async def test_s4_2_unknown_context(gw: Harness) -> None:
    response = await gw.send(context_id="00000000-0000-4000-8000-000000000000")
    assert await error_of(response) == (400, "INVALID_PARAMS", "Unknown contextId")
    assert gw.bot.calls == []


async def test_s4_3_retry_returns_stored_reply_byte_for_byte(gw: Harness) -> None:
    first = await gw.send("Hi", message_id="m-1")
    body = await first.read()
    context_id = orjson.loads(body)["message"]["contextId"]
    second = await gw.send("It is A-10002", message_id="m-2", context_id=context_id)
    second_body = await second.read()
    retry = await gw.send("It is A-10002", message_id="m-2", context_id=context_id)
    assert retry.status == 200
    assert retry.headers["Content-Type"] == A2A_JSON
    assert await retry.read() == second_body
    assert len(gw.bot.calls) == 2


async def test_s4_3_first_message_retried_without_context(gw: Harness) -> None:
    first = await (await gw.send("Hi there", message_id="m-1")).read()
    again = await gw.send("Hi there", message_id="m-1")
    assert await again.read() == first
    assert len(gw.bot.calls) == 1
    # Same messageId but different text is a different first message: a new conversation.
    other = await ok(await gw.send("Something else", message_id="m-1"))
    assert other["contextId"] != orjson.loads(first)["message"]["contextId"]
    # Another sub never gets alice's reply.
    bobs = await ok(await gw.send("Hi there", message_id="m-1", sub="bob"))
    assert bobs["contextId"] != orjson.loads(first)["message"]["contextId"]


async def _until(condition: Any, limit: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_s4_3_concurrent_duplicates_make_one_bot_call(gw: Harness) -> None:
    context_id = (await ok(await gw.send(message_id="m-1")))["contextId"]
    gw.bot.gate = asyncio.Event()
    tasks = [
        asyncio.create_task(gw.send("It is A-10001", message_id="m-2", context_id=context_id))
        for _ in range(20)
    ]
    # While the one winner is held inside the bot, all 19 duplicates are refused (§4.3: no stored reply yet).
    await _until(lambda: sum(t.done() for t in tasks) == 19)
    assert len(gw.bot.calls) == 2
    for task in (t for t in tasks if t.done()):
        assert await error_of(task.result()) == (
            400,
            "INVALID_PARAMS",
            "A message with this messageId is still being processed",
        )
    gw.bot.gate.set()
    (winner,) = [t for t in tasks if not t.done()]
    reply = await (await winner).read()
    retry = await gw.send("It is A-10001", message_id="m-2", context_id=context_id)
    assert await retry.read() == reply
    assert len(gw.bot.calls) == 2


async def test_s4_3_concurrent_first_messages_open_one_conversation(gw: Harness) -> None:
    gw.bot.gate = asyncio.Event()
    tasks = [asyncio.create_task(gw.send("Hello", message_id="first-1")) for _ in range(10)]
    await _until(lambda: sum(t.done() for t in tasks) == 9)
    gw.bot.gate.set()
    responses = await asyncio.gather(*tasks)
    statuses = sorted(r.status for r in responses)
    assert statuses == [200] + [400] * 9
    assert len(gw.bot.calls) == 1


@pytest.mark.parametrize("mode", ["status500", "bad_body", "empty_text", "slow"])
async def test_s4_3_failed_bot_call_stores_nothing_and_retry_runs(
    make_gateway: MakeGateway, cache_url: str, mode: str
) -> None:
    def fast_timeout(raw: dict[str, Any]) -> None:
        # Short enough for the "slow" bot (30 s) to time out, long enough for a loaded CI machine.
        raw["brands"][0]["upstream"]["timeout"] = 1.0

    gw = await make_gateway(cache_url, edit=fast_timeout)
    context_id = (await ok(await gw.send(message_id="m-1")))["contextId"]
    gw.bot.mode = mode
    failed = await gw.send("It is A-10001", message_id="m-2", context_id=context_id)
    assert await error_of(failed) == (500, "INTERNAL", "Internal error")
    assert len(failed.headers["X-Request-Id"]) >= 8
    gw.bot.mode = "sample"
    retry = await ok(await gw.send("It is A-10001", message_id="m-2", context_id=context_id))
    assert "A-10001" in retry["parts"][0]["text"]
    assert len(gw.bot.calls) == 3


async def test_failed_first_turn_opens_no_conversation(gw: Harness) -> None:
    gw.bot.mode = "status500"
    failed = await gw.send("Hello", message_id="m-1")
    assert (await error_of(failed))[1] == "INTERNAL"
    gw.bot.mode = "sample"
    retry = await ok(await gw.send("Hello", message_id="m-1"))
    assert gw.bot.calls[-1].body["new_conversation"] is True
    assert gw.bot.calls[-1].body["conversation_id"] == retry["contextId"]


async def test_unreachable_bot_is_internal(make_gateway: MakeGateway) -> None:
    def dead_bot(raw: dict[str, Any]) -> None:
        raw["brands"][0]["upstream"]["url"] = "http://127.0.0.1:9/chat"

    gw = await make_gateway(edit=dead_bot)
    assert await error_of(await gw.send()) == (500, "INTERNAL", "Internal error")


async def test_s4_2_closed_conversation(gw: Harness) -> None:
    context_id = (await ok(await gw.send(message_id="m-1")))["contextId"]
    bye = await gw.send("bye", message_id="m-2", context_id=context_id)
    bye_body = await bye.read()
    assert b"Goodbye" in bye_body
    after = await gw.send("one more thing", message_id="m-3", context_id=context_id)
    status, why, _ = await error_of(after)
    assert (status, why) == (400, "UNSUPPORTED_OPERATION")
    assert await (await gw.send("bye", message_id="m-2", context_id=context_id)).read() == bye_body
    assert len(gw.bot.calls) == 2
    fresh = await ok(await gw.send(message_id="m-4"))
    assert fresh["contextId"] != context_id


@pytest.mark.parametrize(
    "headers",
    [
        {"Content-Type": "application/json", "A2A-Version": "1.0"},
        {"Content-Type": "application/a2a+json"},
        {"Content-Type": "text/plain", "A2A-Version": "0.3"},
        {},
    ],
    ids=["json", "a2a-json-no-version", "text-plain-other-version", "none"],
)
async def test_s2_lenient_request_headers(gw_memory: Harness, headers: dict[str, str]) -> None:
    body = orjson.dumps({"message": {"messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}})
    response = await gw_memory.client.post(
        "/a2a/acme/message:send", data=body, headers={**gw_memory.auth(), **headers}
    )
    await ok(response)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]},
            (400, "INVALID_PARAMS", "Message role must be ROLE_USER"),
        ),
        (
            {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": " "}]},
            (400, "INVALID_PARAMS", "Message text must not be blank"),
        ),
        (
            {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {}}]},
            (400, "CONTENT_TYPE_NOT_SUPPORTED", "Only text parts are supported"),
        ),
        (
            {"messageId": "m", "role": "ROLE_USER", "taskId": "t", "parts": [{"text": "x"}]},
            (404, "TASK_NOT_FOUND", "Task not found"),
        ),
    ],
)
async def test_s4_1_invalid_messages(
    gw_memory: Harness, message: dict[str, Any], expected: tuple[int, str, str]
) -> None:
    response = await gw_memory.client.post(
        "/a2a/acme/message:send", json={"message": message}, headers=gw_memory.auth()
    )
    assert await error_of(response) == expected
    assert gw_memory.bot.calls == []


async def test_body_over_the_limit_is_invalid_params(make_gateway: MakeGateway) -> None:
    def small(raw: dict[str, Any]) -> None:
        raw["limits"] = {"max_body_bytes": 200}

    gw = await make_gateway(edit=small)
    response = await gw.send("x" * 500)
    assert await error_of(response) == (400, "INVALID_PARAMS", "Request body too large")

    async def unannounced() -> AsyncIterator[bytes]:  # chunked: no Content-Length to refuse early
        for _ in range(5):
            yield b"x" * 100
            await asyncio.sleep(0)

    response = await gw.client.post("/a2a/acme/message:send", data=unannounced(), headers=gw.auth())
    assert await error_of(response) == (400, "INVALID_PARAMS", "Request body too large")


async def test_s4_2_reply_ids_are_fresh_and_opaque(gw_memory: Harness) -> None:
    first = await ok(await gw_memory.send("Hi", message_id="m-1"))
    second = await ok(await gw_memory.send("It is A-10001", message_id="m-2", context_id=first["contextId"]))
    for reply in (first, second):
        assert reply["messageId"].startswith("r-")
        assert len(reply["messageId"]) == 34
        int(reply["messageId"][2:], 16)
    assert first["messageId"] != second["messageId"]
    assert uuid.UUID(first["contextId"]).version == 4


def test_owners_are_kept_per_user_and_bounded() -> None:
    store = MemoryStore(CacheConfig())
    turns = TurnService(store, {}, RateLimits(MemoryRateLimiter(store.keyspace)), owners=2)
    alice = turns.owner("acme", "https://pa.example", "alice")
    assert alice == Owner("acme", "https://pa.example", "alice")
    assert alice.digest == Owner("acme", "https://pa.example", "alice").digest
    assert turns.owner("acme", "https://pa.example", "alice") is alice
    turns.owner("acme", "https://pa.example", "bob")
    turns.owner("other", "https://pa.example", "alice")  # the oldest (acme, alice) makes room
    again = turns.owner("acme", "https://pa.example", "alice")
    assert again == alice
    assert again is not alice


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
async def test_body_arriving_in_pieces_is_read_whole(gw_memory: Harness, chunked: bool) -> None:
    """A slow client's body reaches the gateway in several TCP reads; all of it is parsed."""
    body = orjson.dumps(
        {"message": {"messageId": "m-pieces", "role": "ROLE_USER", "parts": [{"text": "Hi, order A-10001"}]}}
    )
    pieces = [body[:20], body[20:45], body[45:]]

    async def slowly() -> AsyncIterator[bytes]:
        for piece in pieces:
            yield piece
            await asyncio.sleep(0.02)  # lets the gateway read what came so far

    headers = {**gw_memory.auth(), "Content-Type": "application/json"}
    if not chunked:
        headers["Content-Length"] = str(len(body))
    response = await gw_memory.client.post("/a2a/acme/message:send", data=slowly(), headers=headers)
    reply = await ok(response)
    assert "A-10001" in reply["parts"][0]["text"]


async def test_bot_cookies_never_reach_another_users_turn(make_gateway: MakeGateway) -> None:
    """A bot that keeps a customer's session in a cookie must not see it on anyone else's turn.

    The bot is addressed as ``localhost``: aiohttp's default jar refuses cookies for bare IP
    addresses, so only a host name shows whether the gateway's client keeps them.
    """

    def by_name(raw: dict[str, Any]) -> None:
        for brand in raw["brands"]:
            brand["upstream"]["url"] = brand["upstream"]["url"].replace("127.0.0.1", "localhost")

    gw = await make_gateway(edit=by_name)
    gw.bot.mode = "cookie"
    await ok(await gw.send("Hi", sub="alice"))
    await ok(await gw.send("Hi", sub="bob"))
    await ok(await gw.send("Hi", sub="alice"))
    assert [call.headers.get("Cookie") for call in gw.bot.calls] == [None, None, None]
