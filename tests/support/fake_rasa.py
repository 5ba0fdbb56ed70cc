"""A fake Rasa REST channel on loopback, after Rasa's ``RestInput`` and ``CollectingOutputChannel``.

Routes as Rasa mounts them under ``/webhooks/rest``: ``GET /webhooks/rest/`` (the channel's
health, ``{"status": "ok"}``) and ``POST /webhooks/rest/webhook``, which takes ``{"sender",
"message"}`` (and an optional ``metadata`` object) and answers a JSON list of bot messages, each
``{"recipient_id", "text"?, "buttons"?, "image"?, "attachment"?, "custom"?}``.

Every request is checked against the shape the adapter promises (docs/adapters.md "Rasa"): JSON, the two
strings, ``metadata`` only as an object, nothing else. One that does not fit is answered ``400``
and recorded in ``violations``, which the fixture asserts empty.

``answers`` maps a message text to the list the bot answers it with; any other text gets Rasa's
fallback (``utter_default``). ``mode``: ``answer`` (the default), ``status500`` (Sanic's error
object with 500, as Rasa answers when its agent fails), ``not_json`` (an HTML error page from a
proxy), ``not_list`` (a JSON object), ``slow`` (answers after 30 s), ``other_sender`` (the answer
names another conversation's sender in ``recipient_id``), ``no_health`` (the health route answers
404, as when the REST channel is not in credentials.yml).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

FALLBACK = "Sorry, I didn't get that. Can you rephrase?"
_REQUEST_KEYS = frozenset(("sender", "message", "metadata"))


@dataclass
class RasaCall:
    body: dict[str, Any]
    headers: CIMultiDict[str]


@dataclass
class FakeRasa:
    mode: str = "answer"
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    calls: list[RasaCall] = field(default_factory=list)
    health_checks: int = 0
    violations: list[str] = field(default_factory=list)
    gate: asyncio.Event | None = None
    server: TestServer | None = None

    @property
    def url(self) -> str:
        """The server's base URL, as ``upstream.url`` names it (the adapter adds ``/webhooks/rest/...``)."""
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/webhooks/rest/", self.health)
        app.router.add_post("/webhooks/rest/webhook", self.webhook)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()

    async def close(self) -> None:
        if self.gate is not None:
            self.gate.set()
        if self.server is not None:
            await self.server.close()

    async def health(self, request: web.Request) -> web.Response:
        self.health_checks += 1
        if self.mode == "no_health":
            raise web.HTTPNotFound()
        return web.json_response({"status": "ok"})

    async def webhook(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:
            return self._refuse("the body is not JSON")
        problem = _shape_problem(body, request)
        if problem:
            return self._refuse(problem)
        self.calls.append(RasaCall(body, CIMultiDict(request.headers)))
        if self.gate is not None:
            await self.gate.wait()
        if self.mode == "status500":
            return web.json_response(
                {"description": "Internal Server Error", "status": 500, "message": "agent failed"}, status=500
            )
        if self.mode == "not_json":
            return web.Response(text="<html>502 Bad Gateway</html>", content_type="text/html")
        if self.mode == "not_list":
            return web.json_response({"status": "failure", "message": "no agent loaded"})
        if self.mode == "slow":
            await asyncio.sleep(30)
        sender = "another-conversation" if self.mode == "other_sender" else body["sender"]
        messages = self.answers.get(body["message"], [{"text": FALLBACK}])
        return web.json_response([{"recipient_id": sender, **message} for message in messages])

    def _refuse(self, problem: str) -> web.Response:
        self.violations.append(problem)
        return web.json_response({"status": "failure", "message": problem}, status=400)


def _shape_problem(body: Any, request: web.Request) -> str:
    if request.content_type != "application/json":
        return f"Content-Type is {request.content_type}"
    if not isinstance(body, dict) or not set(body) <= _REQUEST_KEYS:
        return f"unexpected request members {sorted(body) if isinstance(body, dict) else body!r}"
    if not isinstance(body.get("sender"), str) or not isinstance(body.get("message"), str):
        return "sender and message must be strings"
    if "metadata" in body and not isinstance(body["metadata"], dict):
        return "metadata must be an object"
    return ""


@pytest.fixture
async def fake_rasa() -> AsyncIterator[FakeRasa]:
    rasa = FakeRasa()
    await rasa.start()
    yield rasa
    await rasa.close()
    assert rasa.violations == []
