"""``create_app(config)``: the one place where the gateway's parts are wired together."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from gateway.auth.delegation import DelegationVerifier
from gateway.auth.jwks import JwksCache, make_fetch_session
from gateway.auth.pa_jwt import PAVerifier
from gateway.config import GatewayConfig
from gateway.http.middlewares import error_middleware, request_id_middleware
from gateway.http.state import METRICS, RUNTIME, Runtime, RuntimeRef
from gateway.oauth.keys import ProviderKeys
from gateway.oauth.server import AuthorizationServer
from gateway.ops.access import AccessLog
from gateway.ops.limits import BotCalls, RateLimits
from gateway.ops.metrics import Metrics, issuer_label
from gateway.ops.tracing import SPANS, Spans, open_spans
from gateway.protocol.card import render_card
from gateway.routes import add_routes
from gateway.store import ConversationStore, open_store
from gateway.store.adapter_state import AdapterState
from gateway.store.factory import open_adapter_state, open_oauth_store
from gateway.store.limits import RateLimiter, open_rate_limiter
from gateway.store.oauth import OAuthStore
from gateway.turns import TurnService
from gateway.upstream.base import BotAdapter
from gateway.upstream.client import AnswerBounds, BotClient
from gateway.upstream.factory import make_adapter
from gateway.upstream.guard import GuardedBot
from gateway.upstream.traced import TracedBot

STORE = web.AppKey("store", ConversationStore)
JWKS = web.AppKey("jwks", JwksCache)
BOT_CLIENT = web.AppKey("bot_client", BotClient)
RATE_LIMITER = web.AppKey("rate_limiter", RateLimiter)
OAUTH_STORE = web.AppKey("oauth_store", OAuthStore)
ADAPTER_STATE = web.AppKey("adapter_state", AdapterState)
"""Bot adapters' per-conversation state (a Direct Line conversation, a model's history), beside the store."""
CALL_CEILING = web.AppKey("call_ceiling", BotCalls)
"""``limits.max_bot_calls``: one count of bot calls in flight for the app's life, shared by every
Brand's guard and kept across reloads (which only set its limit), so calls in flight stay counted."""
LOGIN_JWKS = web.AppKey("login_jwks", JwksCache)
"""The Brands' login key sets (§5.3 assertions), apart from the personal agents': neither evicts the other."""
Clock = Callable[[], float]
BREAKER_CLOCK: web.AppKey[Clock] = web.AppKey("breaker_clock")
WALL_CLOCK: web.AppKey[Clock] = web.AppKey("wall_clock")
"""Wall-clock seconds for §5 decisions: the store's clock, so a test moves both at once."""


def build_runtime(app: web.Application, config: GatewayConfig, *, previous: Runtime | None = None) -> Runtime:
    """Everything one configuration serves, built on the app's running resources in one go, so
    a reload can swap it atomically.

    A reload passes the ``previous`` runtime. Its verifier is updated in place, last, so its
    cache of verified tokens survives while tokens of issuers the new file disables are
    dropped; a Brand whose ``upstream`` settings did not change keeps its guarded bot, so its
    circuit breaker state and concurrency slots (held by turns still running) carry over.
    """
    metrics = app[METRICS]
    bots: dict[str, GuardedBot] = {}
    for brand in config.brands.values():
        before = previous.config.brands.get(brand.id) if previous is not None else None
        if previous is not None and before is not None and before.upstream == brand.upstream:
            bots[brand.id] = previous.bots[brand.id]
        else:
            bots[brand.id] = GuardedBot(
                make_adapter(brand, app[BOT_CLIENT], app[ADAPTER_STATE], cache=config.cache, metrics=metrics),
                brand.id,
                brand.upstream,
                metrics=metrics,
                clock=app[BREAKER_CLOCK],
                ceiling=app[CALL_CEILING],
            )
    cards = {brand.id: render_card(config, brand) for brand in config.brands.values()}
    spans = app[SPANS]
    adapters: dict[str, BotAdapter] = (
        dict(bots) if spans is None else {brand: TracedBot(bot, spans) for brand, bot in bots.items()}
    )
    limits = RateLimits(app[RATE_LIMITER], metrics=metrics)
    oauth = _authorization_server(app, config)
    turns = TurnService(app[STORE], adapters, limits, metrics, oauth=oauth, spans=spans)
    if previous is None:
        verifier = PAVerifier(
            config.personal_agents,
            config.provider.audience,
            app[JWKS],
            on_discovery_fetch=metrics.discovery_fetched,
        )
    else:
        verifier = previous.verifier
        verifier.update(config.personal_agents, config.provider.audience)
    app[CALL_CEILING].limit = config.limits.max_bot_calls
    return Runtime(
        config=config,
        cards=cards,
        verifier=verifier,
        turns=turns,
        limits=limits,
        bots=bots,
        oauth=oauth,
        delegation=None if oauth is None else DelegationVerifier(oauth),
    )


def _authorization_server(app: web.Application, config: GatewayConfig) -> AuthorizationServer | None:
    """§5 for a configuration in which at least one Brand delegates (it then has signing keys)."""
    if not any(brand.delegation is not None for brand in config.brands.values()):
        return None
    login_keys = app[LOGIN_JWKS]
    for brand in config.brands.values():
        if brand.delegation is not None and brand.delegation.login.jwks is not None:
            login_keys.preload(brand.id, brand.delegation.login.jwks)
    return AuthorizationServer(
        config=config,
        keys=ProviderKeys(config.oauth.signing_keys),
        store=app[OAUTH_STORE],
        login_keys=login_keys,
        clock=app[WALL_CLOCK],
    )


def reload_runtime(app: web.Application, config: GatewayConfig) -> Runtime:
    """Swap in the runtime for a reloaded ``config``; requests already running keep the runtime
    they started with (the swap is one assignment)."""
    ref = app[RUNTIME]
    ref.current = build_runtime(app, config, previous=ref.current)
    return ref.current


def create_app(
    config: GatewayConfig,
    *,
    store: ConversationStore | None = None,
    clock: Callable[[], float] | None = None,
    metrics: Metrics | None = None,
    spans: Spans | None = None,
) -> web.Application:
    """Build the gateway for ``config``; connections are opened on start-up and closed on clean-up.

    ``store`` lets a test (or a second gateway instance in one process) share a backend;
    ``clock`` lets a test move the time of the store it opens (conversations and rate limits,
    which share it) and of circuit breakers; ``metrics`` lets the caller serve the registry
    (a fresh one is made otherwise); ``spans`` lets a test record spans where it reads them
    (otherwise ``tracing`` decides, and the app closes what it opened). A given ``store`` keeps
    its own clock, as do its limits.
    """
    owned_spans = spans is None
    if spans is None:
        spans = open_spans(config.tracing)
    # The request's span comes before the access line, which logs its trace id. Without
    # OpenTelemetry the access middleware starts it itself: one middleware layer fewer a request.
    tracing = [] if spans is None else [spans.middleware]
    app = web.Application(
        middlewares=[
            request_id_middleware,
            *tracing,
            AccessLog(starts_traces=spans is None),
            error_middleware,
        ],
        client_max_size=config.limits.max_body_bytes,
    )
    app[METRICS] = Metrics() if metrics is None else metrics
    app[CALL_CEILING] = BotCalls(config.limits.max_bot_calls, metrics=app[METRICS])
    app[SPANS] = spans
    # The per-process circuit breakers' clock; a test moves it instead of sleeping.
    app[BREAKER_CLOCK] = clock or time.monotonic
    app[WALL_CLOCK] = clock or time.time
    add_routes(app.router)

    def on_jwks_fetch(issuer: str, ok: bool) -> None:
        ref = app.get(RUNTIME)
        app[METRICS].jwks_fetched(issuer_label(config if ref is None else ref.current.config, issuer), ok=ok)

    async def resources(app: web.Application) -> AsyncIterator[None]:
        owned_store = store is None
        app[STORE] = (
            open_store(
                config.cache,
                clock=clock,
                observer=app[METRICS],
                cluster_observer=app[METRICS],
                release_observer=app[METRICS],
            )
            if store is None
            else store
        )
        if owned_store:
            await app[STORE].start()
        fetch_session = make_fetch_session(config.personal_agents.jwks, config.development)
        # One client carries every User's turns and keeps nothing between calls but connections;
        # it has no connection limit: each Brand's upstream.max_concurrency and the process's
        # limits.max_bot_calls are the caps (gateway/upstream/client.py).
        app[BOT_CLIENT] = BotClient(bounds=AnswerBounds.of(config.limits))
        app[JWKS] = JwksCache(
            fetch_session,
            config.personal_agents.jwks,
            development=config.development,
            on_fetch=on_jwks_fetch,
            on_refused=app[METRICS].open_fetch_refused,
        )
        # §6 counters beside the conversations: the store's connection or container, and its clock.
        app[RATE_LIMITER] = open_rate_limiter(app[STORE])
        app[OAUTH_STORE] = open_oauth_store(app[STORE])
        app[ADAPTER_STATE] = open_adapter_state(app[STORE])
        app[LOGIN_JWKS] = JwksCache(
            fetch_session, config.personal_agents.jwks, development=config.development
        )
        app[RUNTIME] = RuntimeRef(build_runtime(app, config))
        yield
        await app[RATE_LIMITER].close()
        await app[BOT_CLIENT].close()
        await fetch_session.close()
        if owned_store:
            await app[STORE].close()
        if owned_spans and spans is not None:
            await spans.close()

    app.cleanup_ctx.append(resources)
    return app
