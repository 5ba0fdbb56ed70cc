"""A whole gateway on loopback for HTTP-level tests: real JWKS server, real bot, memory or Redis.

``make_gateway`` builds the gateway from a configuration object in one call, the way an
operator's YAML would be loaded, and returns a :class:`Harness` that mints tokens and sends
``message:send`` turns the way a personal agent does.
"""

from __future__ import annotations

import copy
import socket
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from aiohttp.web import BaseRunner

from gateway.app import create_app
from gateway.config import GatewayConfig, load_config
from gateway.handlers.state import RUNTIME
from gateway.http.connection import GatewayRunner
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import Spans
from gateway.store import ConversationStore
from tests.support.bot import ControlledBot
from tests.support.pa import FakeJwksServer, PAKey
from tests.support.secrets_scan import remember

AUDIENCE = "pact-gateway-test"
OTHER_PA = "https://other-pa.example"
DISABLED_PA = "https://disabled-pa.example"
PUBLIC_URL = "https://gw.test"


def base_config(pa_issuer: str, jwks_uri: str, bot_url: str, cache_url: str) -> dict[str, Any]:
    """Two Brands in front of one bot; the test PA, a second PA on the same keys, and a disabled one."""
    brand = {
        "name": "Acme Support",
        "description": "Orders.",
        "version": "1.0.0",
        "upstream": {"url": bot_url},
    }
    return {
        "public_url": PUBLIC_URL,
        "development": True,
        "provider": {"organization": "Test Provider", "url": "https://provider.test", "audience": AUDIENCE},
        "personal_agents": {
            "policy": "allowlist",
            "registered": [
                {"issuer": pa_issuer, "jwks_uri": jwks_uri},
                {"issuer": OTHER_PA, "jwks_uri": jwks_uri},
                {"issuer": DISABLED_PA, "jwks_uri": jwks_uri, "enabled": False},
            ],
        },
        "cache": {"url": cache_url},
        # §6 limits stay on (every request pays its round trip) but never bind in ordinary tests;
        # tests/ops/test_rate_limits.py sets its own.
        "rate_limits": {
            "per_agent": {"rate": 1000, "burst": 1000},
            "per_user": {"rate": 1000, "burst": 1000},
        },
        "metrics": {"enabled": False},
        "brands": [
            {"id": "acme", "domain": "support.acme.test", "skills": [], **copy.deepcopy(brand)},
            {"id": "globex", **{**copy.deepcopy(brand), "name": "Globex Support"}},
        ],
    }


@dataclass
class Harness:
    client: TestClient[Any, Any]
    bot: ControlledBot
    config: GatewayConfig
    key: PAKey
    issuer: str

    def token(self, sub: str = "alice", *, issuer: str | None = None, **kwargs: Any) -> str:
        token = self.key.mint(issuer or self.issuer, sub, AUDIENCE, **kwargs)
        remember("a personal-agent JWT", token)
        return token

    def auth(self, sub: str = "alice", *, issuer: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(sub, issuer=issuer)}"}

    async def send(
        self,
        text: str = "Hi, where is my order?",
        *,
        message_id: str | None = None,
        context_id: str | None = None,
        sub: str = "alice",
        issuer: str | None = None,
        brand: str = "acme",
        headers: dict[str, str] | None = None,
    ) -> ClientResponse:
        message: dict[str, Any] = {
            "messageId": message_id or f"m-{uuid.uuid4().hex[:8]}",
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        if context_id is not None:
            message["contextId"] = context_id
        return await self.client.post(
            f"/a2a/{brand}/message:send",
            json={"message": message},
            headers={**self.auth(sub, issuer=issuer), "A2A-Version": "1.0", **(headers or {})},
        )


class EdgeTestServer(TestServer):
    """aiohttp's test server behind the connection class ``serve`` uses (gateway/http/connection.py),
    so tests see what a client would: ``limits.request_timeout``, ``431`` for oversized headers."""

    async def _make_runner(self, **kwargs: Any) -> BaseRunner:
        app = self.app
        return GatewayRunner(
            app, request_timeout=lambda: app[RUNTIME].current.config.limits.request_timeout, **kwargs
        )


MakeGateway = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def make_gateway(
    jwks_server: FakeJwksServer, es256_key: PAKey, pa_issuer: str, bot: ControlledBot
) -> AsyncIterator[MakeGateway]:
    """``await make_gateway(cache_url="memory://", edit=lambda raw: ..., store=None, clock=None)``.

    ``metrics=Metrics()`` keeps the registry in the test's hands, to serve it on an ops listener;
    ``spans`` records the gateway's spans where the test reads them (tests/ops/test_otel.py).
    ``self_addressed=True`` binds the socket before the configuration is built, so ``public_url``
    (and every card's interface URL) is the test server's real address, for clients that follow it.
    ``environ`` is what ``${NAME}`` references in the configuration read (none by default).
    """
    clients: list[TestClient[Any, Any]] = []

    async def make(
        cache_url: str = "memory://",
        edit: Callable[[dict[str, Any]], None] | None = None,
        store: ConversationStore | None = None,
        clock: Callable[[], float] | None = None,
        metrics: Metrics | None = None,
        self_addressed: bool = False,
        spans: Spans | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> Harness:
        raw = base_config(pa_issuer, jwks_server.jwks_uri, bot.url, cache_url)
        server_options: dict[str, Any] = {}
        if self_addressed:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            raw["public_url"] = f"http://127.0.0.1:{sock.getsockname()[1]}"
            server_options = {"port": sock.getsockname()[1], "socket_factory": lambda *_: sock}
        if edit is not None:
            edit(raw)
        config = load_config(raw, environ or {})
        app = create_app(config, store=store, clock=clock, metrics=metrics, spans=spans)
        client: TestClient[Any, Any] = TestClient(EdgeTestServer(app, host="127.0.0.1", **server_options))
        await client.start_server()
        clients.append(client)
        return Harness(client, bot, config, es256_key, pa_issuer)

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
async def gw(make_gateway: MakeGateway, cache_url: str) -> Harness:
    """A gateway on each backend in turn: memory, then the real Redis."""
    return await make_gateway(cache_url)


@pytest.fixture
async def gw_memory(make_gateway: MakeGateway) -> Harness:
    """A gateway on the memory store, for behaviour that does not depend on the backend."""
    return await make_gateway()
