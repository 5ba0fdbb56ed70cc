"""The operations listener: ``/metrics``, ``/healthz`` and ``/readyz``, on its own port, no PA token.
The admin API is not here: it has a loopback listener of its own
(:class:`gateway.process.admin.AdminListener`), since this one binds every interface for the scrapers.

It is a separate aiohttp app on ``metrics.host:metrics.port`` so probes and scrapes never go
through the A2A middlewares, never need a token, and are never exposed by the Ingress.

Readiness waits for keys: a pod is ready only when its configuration is loaded, its store
answers as turns need it (on Redis: a primary that takes a write, with the replicas
``cache.wait_replicas`` asks for; see ``RedisStore.ping``), and every enabled registered personal
agent's key set is held (inline keys count at
once; a ``jwks_uri`` must have been fetched). Start-up prefetches those key sets in the
background (:func:`prefetch_keys`), and every ``/readyz`` that finds one missing tries again
(bounded, and within the JWKS cool-down), so a pod becomes ready as soon as a personal
agent's server answers, without waiting for traffic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from gateway.app import JWKS, STORE
from gateway.auth.jwks import JwksCache
from gateway.config import GatewayConfig, MetricsConfig
from gateway.handlers.state import RUNTIME
from gateway.ops.exposition import WithoutCreated
from gateway.store.base import StoreError

__all__ = [
    "GatewayReadiness",
    "Readiness",
    "create_ops_app",
    "missing_keys",
    "prefetch_keys",
    "start_ops_listener",
]

STORE_TIMEOUT = 2.0
"""Seconds ``/readyz`` waits for the store's ping (probes time out on the prober's side too)."""
KEY_WAIT = 2.0
"""Seconds ``/readyz`` waits for a key set it triggered a fetch of; the fetch itself goes on."""


class Readiness(Protocol):
    """What ``/readyz`` asks: the failing checks by name, each with a short reason; empty when ready."""

    async def failures(self) -> dict[str, str]: ...


def _key_sources(config: GatewayConfig) -> list[tuple[str, str | None]]:
    """``(issuer, jwks_uri)`` of every enabled registered issuer; ``None`` for inline keys."""
    return [
        (agent.issuer, None if agent.jwks is not None else agent.jwks_uri)
        for agent in config.personal_agents.registered
        if agent.enabled and (agent.jwks is not None or agent.jwks_uri is not None)
    ]


def missing_keys(jwks: JwksCache, config: GatewayConfig) -> list[str]:
    """The enabled registered issuers whose keys are not held right now."""
    return [issuer for issuer, _ in _key_sources(config) if not jwks.has_keys(issuer)]


async def prefetch_keys(jwks: JwksCache, config: GatewayConfig) -> list[str]:
    """Fetch every missing registered key set (concurrently); the issuers still without keys."""
    pending = [
        (issuer, uri) for issuer, uri in _key_sources(config) if uri is not None and not jwks.has_keys(issuer)
    ]
    await asyncio.gather(*(jwks.prefetch(issuer, uri) for issuer, uri in pending))
    return missing_keys(jwks, config)


class GatewayReadiness:
    """Readiness of one gateway app: configuration loaded, store reachable, keys held.

    ``extra`` adds process-level checks (draining on shutdown, the supervisor's workers).
    """

    def __init__(self, app: web.Application, *, extra: Callable[[], Mapping[str, str]] | None = None) -> None:
        self._app = app
        self._extra = extra

    async def failures(self) -> dict[str, str]:
        failing = dict(self._extra()) if self._extra is not None else {}
        ref = self._app.get(RUNTIME)
        if ref is None:
            failing["configuration"] = "not loaded"
            return failing
        config = ref.current.config
        store_failure, keys_failure = await asyncio.gather(self._store(), self._keys(config))
        if store_failure is not None:
            failing["store"] = store_failure
        if keys_failure is not None:
            failing["keys"] = keys_failure
        return failing

    async def _store(self) -> str | None:
        try:
            async with asyncio.timeout(STORE_TIMEOUT):
                await self._app[STORE].ping()
        except StoreError as exc:
            return str(exc)
        except TimeoutError:
            return f"no answer within {STORE_TIMEOUT:g} s"
        return None

    async def _keys(self, config: GatewayConfig) -> str | None:
        jwks = self._app[JWKS]
        if missing_keys(jwks, config):
            try:
                async with asyncio.timeout(KEY_WAIT):
                    await prefetch_keys(jwks, config)
            except TimeoutError:
                pass  # the fetch goes on (it is shielded); the next probe sees its result
        missing = missing_keys(jwks, config)
        return f"no keys for {', '.join(missing)}" if missing else None


def create_ops_app(registry: CollectorRegistry, readiness: Readiness) -> web.Application:
    """The ops app: Prometheus text from ``registry`` (without ``_created`` samples, see
    :mod:`gateway.ops.exposition`), liveness, and ``readiness`` as JSON."""
    exposed = WithoutCreated(registry)

    async def metrics(request: web.Request) -> web.Response:
        # Off the event loop: in multiprocess mode a scrape reads every worker's files.
        body = await asyncio.to_thread(generate_latest, exposed)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(request: web.Request) -> web.Response:
        failing = await readiness.failures()
        if failing:
            return web.json_response({"status": "not ready", "failing": failing}, status=503)
        return web.json_response({"status": "ready"})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def start_ops_listener(
    config: MetricsConfig,
    registry: CollectorRegistry,
    readiness: Readiness,
) -> web.AppRunner:
    """Serve :func:`create_ops_app` on ``config.host:config.port``; the caller cleans the runner up."""
    app = create_ops_app(registry, readiness)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, config.host, config.port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
