"""A fake OpenAI-compatible API on loopback, after OpenAI's API reference: ``POST /v1/chat/completions``
(a chat completion object, or the ``{"error": {message, type, param, code}}`` object),
``GET /v1/models`` (``{"object": "list", "data": [model objects]}``).

Every request is checked against the shape the reference documents and the adapter promises
(docs/adapters.md "OpenAI-compatible assistants"): the key in its header, JSON, ``model``, ``messages`` of
``{role, content}`` with the system prompt first and this turn's user message last, the optional
``max_tokens`` and ``temperature``, nothing else. A request that does not fit is answered ``400``
with an ``invalid_request_error`` and recorded in ``violations``, which the fixture asserts empty.

``mode`` picks the answer: ``echo`` (the default: ``"#<n>: <text>"``, n the number of user
messages the call carried, so a test sees the history), ``status`` (``status`` with an error
object of ``error_code``, and ``headers``), ``error_200`` (an error object with status 200, as
some compatible servers send), ``content_filter``, ``empty`` (empty content), ``refusal``,
``not_json`` (an HTML page with 200, as a proxy's login page comes), ``slow`` (answers after 30 s).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from tests.support.secrets_scan import remember

API_KEY = "sk-test-0123456789"
MODEL = "gpt-test-mini"
_ROLES = frozenset(("system", "user", "assistant"))
_REQUEST_KEYS = frozenset(("model", "messages", "max_tokens", "temperature"))


@dataclass
class ChatCall:
    body: dict[str, Any]
    headers: CIMultiDict[str]

    @property
    def messages(self) -> list[dict[str, str]]:
        messages: list[dict[str, str]] = self.body["messages"]
        return messages


@dataclass
class FakeOpenAI:
    mode: str = "echo"
    status: int = 500
    error_code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    api_key: str | None = API_KEY
    key_header: str = "Authorization"
    models: tuple[str, ...] = (MODEL, "text-embedding-test")
    calls: list[ChatCall] = field(default_factory=list)
    model_listings: int = 0
    violations: list[str] = field(default_factory=list)
    server: TestServer | None = None

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("/v1"))

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_get("/v1/models", self.list_models)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    def _authorized(self, request: web.Request) -> bool:
        if self.api_key is None:
            return True
        expected = f"Bearer {self.api_key}" if self.key_header == "Authorization" else self.api_key
        return request.headers.get(self.key_header) == expected

    async def completions(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        body = await request.read()
        problem = request_problem(request.content_type, body)
        if problem:
            self.violations.append(problem)
            return error(400, problem, "invalid_request_error", None)
        call = ChatCall(orjson.loads(body), CIMultiDict(request.headers))
        self.calls.append(call)
        return await self._answer(call)

    async def _answer(self, call: ChatCall) -> web.StreamResponse:
        if self.mode == "status":
            return error(self.status, "The fake says no.", "server_error", self.error_code, self.headers)
        if self.mode == "error_200":
            return error(200, "The model is overloaded.", "server_error", "overloaded")
        if self.mode == "not_json":
            return web.Response(text="<html>Sign in</html>", content_type="text/html")
        if self.mode == "slow":
            await asyncio.sleep(30)
        users = [message for message in call.messages if message["role"] == "user"]
        message: dict[str, Any] = {"role": "assistant", "content": f"#{len(users)}: {users[-1]['content']}"}
        finish = "stop"
        if self.mode == "content_filter":
            message["content"], finish = None, "content_filter"
        elif self.mode == "empty":
            message["content"] = ""
        elif self.mode == "refusal":
            message.update(content=None, refusal="I can't help with that.")
        return web.json_response(
            {
                "id": f"chatcmpl-{len(self.calls)}",
                "object": "chat.completion",
                "created": 1_700_000_000,
                "model": call.body["model"],
                "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            }
        )

    async def list_models(self, request: web.Request) -> web.StreamResponse:
        if not self._authorized(request):
            return error(401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
        self.model_listings += 1
        data = [{"id": model, "object": "model", "created": 0, "owned_by": "fake"} for model in self.models]
        return web.json_response({"object": "list", "data": data})


def error(
    status: int, message: str, kind: str, code: str | None, headers: dict[str, str] | None = None
) -> web.Response:
    """OpenAI's error object."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def request_problem(content_type: str, raw: bytes) -> str:
    """What is wrong with a chat completion request, against the reference and docs/adapters.md
    ("" if nothing)."""
    if content_type != "application/json":
        return f"Content-Type {content_type}"
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "body is not JSON"
    if not isinstance(body, dict) or not body.keys() <= _REQUEST_KEYS:
        return f"unexpected members {sorted(set(body) - _REQUEST_KEYS) if isinstance(body, dict) else body}"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model missing"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages missing"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or message.keys() != {"role", "content"}:
            return f"messages[{index}] is not {{role, content}}"
        if message["role"] not in _ROLES or not isinstance(message["content"], str):
            return f"messages[{index}] has a bad role or content"
        if message["role"] == "system" and index != 0:
            return "a system message after the first"
    if messages[-1]["role"] != "user":
        return "the last message is not the user's"
    if "max_tokens" in body and (type(body["max_tokens"]) is not int or body["max_tokens"] < 1):
        return "max_tokens is not a positive integer"
    temperature = body.get("temperature", 1)
    if type(temperature) not in (int, float) or not 0 <= temperature <= 2:
        return "temperature is not in [0, 2]"
    return ""


@pytest.fixture
async def fake_openai() -> AsyncIterator[FakeOpenAI]:
    """The fake on loopback; its API key is a secret no log record of the test may hold."""
    remember("an OpenAI API key", API_KEY)
    fake = FakeOpenAI()
    await fake.start()
    yield fake
    await fake.close()
    assert not fake.violations, fake.violations
