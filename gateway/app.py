"""``create_app(config)``: the one place where the gateway's parts are wired together."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from gateway.auth.jwks import JwksCache, make_fetch_session
from gateway.auth.pa_jwt import PAVerifier
from gateway.config import GatewayConfig
from gateway.http.middlewares import error_middleware, request_id_middleware
from gateway.http.routes import add_routes
from gateway.http.state import RUNTIME, Runtime, RuntimeRef
from gateway.protocol.card import render_card
from gateway.store import ConversationStore, open_store
from gateway.turns import TurnService
from gateway.upstream.base import BotAdapter
from gateway.upstream.http_json import HttpJsonAdapter

STORE = web.AppKey("store", ConversationStore)
JWKS = web.AppKey("jwks", JwksCache)
UPSTREAM_SESSION = web.AppKey("upstream_session", aiohttp.ClientSession)


def build_runtime(
    config: GatewayConfig,
    *,
    store: ConversationStore,
    jwks: JwksCache,
    upstream_session: aiohttp.ClientSession,
) -> Runtime:
    """Everything one configuration serves, built in one go so a reload can swap it atomically."""
    adapters: dict[str, BotAdapter] = {
        brand.id: HttpJsonAdapter(brand.upstream, upstream_session) for brand in config.brands.values()
    }
    return Runtime(
        config=config,
        cards={brand.id: render_card(config, brand) for brand in config.brands.values()},
        verifier=PAVerifier(config.personal_agents, config.provider.audience, jwks),
        turns=TurnService(store, adapters),
    )


def create_app(config: GatewayConfig, *, store: ConversationStore | None = None) -> web.Application:
    """Build the gateway for ``config``; connections are opened on start-up and closed on clean-up.

    ``store`` lets a test (or a second gateway instance in one process) share a backend.
    """
    app = web.Application(
        middlewares=[request_id_middleware, error_middleware],
        client_max_size=config.limits.max_body_bytes,
    )
    add_routes(app.router)

    async def resources(app: web.Application) -> AsyncIterator[None]:
        owned_store = store is None
        app[STORE] = open_store(config.cache) if store is None else store
        fetch_session = make_fetch_session(config.personal_agents.jwks, config.development)
        app[UPSTREAM_SESSION] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=256, keepalive_timeout=30),
            auto_decompress=True,
        )
        app[JWKS] = JwksCache(fetch_session, config.personal_agents.jwks, development=config.development)
        app[RUNTIME] = RuntimeRef(
            build_runtime(config, store=app[STORE], jwks=app[JWKS], upstream_session=app[UPSTREAM_SESSION])
        )
        yield
        await app[UPSTREAM_SESSION].close()
        await fetch_session.close()
        if owned_store:
            await app[STORE].close()

    app.cleanup_ctx.append(resources)
    return app
