"""A home-grown bot on loopback, of the kind the ``http`` adapter maps in YAML: its own JSON, no standard.

``PUT /api/v2/sessions/turn`` takes whatever the Brand's template builds (recorded as parsed
JSON, for tests to compare with the template) and answers, by default, in a nested shape none
of the other adapters would read::

    {"result": {"messages": [{"body": "You said: <text>"}], "closed": <text == "bye">},
     "auth": {"needs": [], "used": [], "calls": []}}

``answer`` replaces that document verbatim. ``mode``: ``answer`` (the default), ``status500``,
``not_json`` (an HTML error page), ``slow`` (answers after 30 s). ``GET /healthz`` is its health
check (``{"ok": true}``; ``503`` while ``healthy`` is false).
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

TURN_PATH = "/api/v2/sessions/turn"
HEALTH_PATH = "/healthz"


@dataclass
class HttpBotCall:
    method: str
    body: Any
    headers: CIMultiDict[str]


@dataclass
class FakeHttpBot:
    mode: str = "answer"
    answer: Any = None
    healthy: bool = True
    calls: list[HttpBotCall] = field(default_factory=list)
    health_checks: int = 0
    server: TestServer | None = None

    def url(self, path: str = TURN_PATH) -> str:
        assert self.server is not None
        return str(self.server.make_url(path))

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", TURN_PATH, self.turn)
        app.router.add_get(HEALTH_PATH, self.health)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    async def health(self, request: web.Request) -> web.Response:
        self.health_checks += 1
        return web.json_response({"ok": self.healthy}, status=200 if self.healthy else 503)

    async def turn(self, request: web.Request) -> web.StreamResponse:
        if request.method == "OPTIONS":
            return web.Response(status=204, headers={"Allow": "PUT, OPTIONS"})
        if request.method != "PUT":
            raise web.HTTPMethodNotAllowed(request.method, ["PUT", "OPTIONS"])
        body = await request.json()
        self.calls.append(HttpBotCall(request.method, body, CIMultiDict(request.headers)))
        if self.mode == "status500":
            return web.json_response({"error": "boom"}, status=500)
        if self.mode == "not_json":
            return web.Response(text="<html>oops</html>", content_type="text/html")
        if self.mode == "slow":
            await asyncio.sleep(30)
        if self.answer is not None:
            return web.json_response(self.answer)
        text = body.get("input", {}).get("text", "") if isinstance(body, dict) else ""
        return web.json_response(
            {
                "result": {"messages": [{"body": f"You said: {text}"}], "closed": text == "bye"},
                "auth": {"needs": [], "used": [], "calls": []},
            }
        )


@pytest.fixture
async def fake_http_bot() -> AsyncIterator[FakeHttpBot]:
    bot = FakeHttpBot()
    await bot.start()
    yield bot
    await bot.close()
