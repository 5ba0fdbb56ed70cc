"""The admin API: a person's conversations listed, closed or erased over HTTP
(:mod:`gateway.process.erasure`).

Served under ``/admin/`` on a listener of its own (:class:`AdminListener`, ``admin.host:admin.port``,
loopback by default), never by the A2A listener, which the Ingress exposes, nor by the ops
listener, which binds every interface for the scrapers. The listener is opened when the process
starts with ``admin.enabled``, or by the first reload that turns it on; ``admin.host`` and
``admin.port`` need a restart (:data:`gateway.process.reload.RESTART_ONLY`). While ``admin.enabled``
is false every path answers ``404`` as an unknown one does; otherwise each request needs
``Authorization: Bearer {admin.token}``. Both are read from the configuration in force at each
request, so a reload turns the API on or off and rotates the token.

* ``GET /admin/conversations?brand=B&pa=ISS&sub=SUB``: the person's conversations, never a text;
* ``POST /admin/conversations/{contextId}:close?brand=B&pa=ISS&sub=SUB``: close one of them (§4.2);
* ``GET /admin/grants?brand=B&pa=ISS&sub=SUB``: the person's live §5 grants, each with its scopes
  and RFC 9396 details (never the Brand user id);
* ``POST /admin/erase`` with ``{"brand": B, "pa": ISS, "sub": SUB}``: erase what is stored for them.

An error is ``{"error": code, "detail": what to do}``: ``400 invalid_request`` (a parameter missing
or not a string, a body that is not a JSON object), ``401 unauthorized`` (with
``WWW-Authenticate``), ``404 not_found`` (a Brand not configured, a conversation the person does not
have), ``503 store_unavailable``. ``pact_admin_actions_total{action,outcome}`` counts every
request to a route, ``pact_erasures_total{brand}`` every erasure.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter

from gateway.app import OAUTH_STORE, STORE, WALL_CLOCK
from gateway.config import AdminConfig, GatewayConfig
from gateway.handlers.state import METRICS, RUNTIME
from gateway.ops.logs import sub_digest
from gateway.process.erasure import ADAPTER_STATE_NAMES, PersonRecords
from gateway.protocol.authorization_details import details_json
from gateway.store.admin import ConversationInfo
from gateway.store.base import Owner, StoreError
from gateway.store.factory import open_conversation_admin
from gateway.store.oauth import Grant

__all__ = ["ADMIN_METRICS", "GATEWAY", "AdminError", "AdminListener", "AdminMetrics", "create_admin_app"]

log = logging.getLogger("pact_gateway.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

GATEWAY = web.AppKey("gateway", web.Application)
"""The gateway app whose store, configuration and metrics the admin API works with."""
ACTIONS: Final = frozenset(("list", "close", "erase", "grants"))
"""The routes' names: the ``action`` label."""
_OUTCOMES: Final = {400: "invalid_request", 401: "unauthorized", 404: "not_found"}
_ISO_SECONDS: Final = "%Y-%m-%dT%H:%M:%SZ"


class AdminMetrics:
    """The admin API's metrics, on the gateway's registry (``--workers``: the supervisor's, summed)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.erasures = Counter(
            "pact_erasures",
            "People whose stored conversations, counters and grants were erased, by Brand.",
            ["brand"],
            registry=registry,
        )
        self.actions = Counter(
            "pact_admin_actions",
            "Admin API requests by action (list, close, erase, grants) and outcome.",
            ["action", "outcome"],
            registry=registry,
        )


ADMIN_METRICS = web.AppKey("admin_metrics", AdminMetrics)


class AdminError(Exception):
    """An answer other than success: its status, a fixed ``error`` code, and a ``detail`` for the operator."""

    def __init__(
        self, status: int, error: str, detail: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = headers


def _config(request: web.Request) -> GatewayConfig:
    return request.app[GATEWAY][RUNTIME].current.config


@web.middleware
async def enabled_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Off (``admin.enabled: false``), the API is not there: ``404`` as for any unknown path."""
    if not _config(request).admin.enabled:
        raise web.HTTPNotFound()
    return await handler(request)


@web.middleware
async def count_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count each request to a route by its action and how it ended."""
    action = request.match_info.route.name
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        if action in ACTIONS:
            outcome = "ok" if status < 400 else _OUTCOMES.get(status, "error")
            request.app[ADMIN_METRICS].actions.labels(action, outcome).inc()


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """:class:`AdminError` and a failing store as JSON answers."""
    try:
        return await handler(request)
    except AdminError as error:
        body = {"error": error.error, "detail": error.detail}
        return web.json_response(body, status=error.status, headers=error.headers)
    except StoreError as error:
        body = {"error": "store_unavailable", "detail": f"the store did not answer: {error}"}
        return web.json_response(body, status=503)


@web.middleware
async def bearer_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Only ``Authorization: Bearer {admin.token}`` passes, compared in constant time."""
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    challenge = {"WWW-Authenticate": 'Bearer realm="pact-gateway admin"'}
    if scheme.lower() != "bearer" or not presented.strip():
        raise AdminError(401, "unauthorized", "send Authorization: Bearer with the admin token", challenge)
    expected = _config(request).admin.token.encode()
    if not hmac.compare_digest(presented.strip().encode(), expected):
        raise AdminError(401, "unauthorized", "the bearer token is not the admin token", challenge)
    return await handler(request)


def _string(source: Mapping[str, Any], name: str, where: str) -> str:
    value = source.get(name)
    if not isinstance(value, str) or not value:
        raise AdminError(400, "invalid_request", f"{where} {name} is required, a non-empty string")
    return value


def _person(request: web.Request, source: Mapping[str, Any], where: str) -> Owner:
    """The (Brand, personal agent, ``sub``) a request names; the Brand must be configured."""
    brand, pa, sub = (_string(source, name, where) for name in ("brand", "pa", "sub"))
    if brand not in _config(request).brands:
        raise AdminError(404, "not_found", f"no Brand {brand!r} in the configuration in force")
    return Owner(brand, pa, sub)


def _records(request: web.Request) -> PersonRecords:
    gateway = request.app[GATEWAY]
    cache = gateway[RUNTIME].current.config.cache  # restart-only: what the store was opened with
    admin = open_conversation_admin(gateway[STORE], cache, ADAPTER_STATE_NAMES)
    return PersonRecords(admin, gateway[OAUTH_STORE], gateway[WALL_CLOCK], via="api")


def _who(person: Owner) -> dict[str, str]:
    """How an answer names the person: never the ``sub`` itself."""
    return {"brand": person.brand_id, "pa": person.issuer, "sub_hash": sub_digest(person.issuer, person.sub)}


def _described(info: ConversationInfo, now: float) -> dict[str, Any]:
    opened = info.opened_at
    return {
        "context_id": info.context_id,
        "opened_at": None if opened is None else datetime.fromtimestamp(opened, UTC).strftime(_ISO_SECONDS),
        "age_seconds": None if opened is None else max(0, round(now - opened)),
        "turns": info.turns,
        "in_flight": info.in_flight,
        "state": "closed" if info.closed else "open",
    }


async def list_conversations(request: web.Request) -> web.Response:
    person = _person(request, request.query, "query parameter")
    found = await _records(request).conversations(person)
    now = request.app[GATEWAY][WALL_CLOCK]()
    return web.json_response({**_who(person), "conversations": [_described(info, now) for info in found]})


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime(_ISO_SECONDS)


def _grant(grant: Grant) -> dict[str, Any]:
    """A grant as the operator sees it: what it allows and until when. A detail names a resource of
    the Brand (an order), not a person, so it is shown as the User approved it."""
    return {
        "grant_id": grant.grant_id,
        "scopes": list(grant.scopes),
        "carried": list(grant.carried),
        "authorization_details": details_json(grant.details),
        "issued_at": _when(grant.issued_at),
        "expires_at": _when(grant.expires_at),
    }


async def list_grants(request: web.Request) -> web.Response:
    person = _person(request, request.query, "query parameter")
    found = await _records(request).grants(person)
    body = {**_who(person), "grants": [_grant(grant) for grant in found]}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def close_conversation(request: web.Request) -> web.Response:
    person = _person(request, request.query, "query parameter")
    context_id = request.match_info["context_id"]
    if not await _records(request).close(person, context_id):
        raise AdminError(404, "not_found", f"this person has no conversation {context_id!r} at this Brand")
    return web.json_response({**_who(person), "context_id": context_id, "state": "closed"})


async def erase(request: web.Request) -> web.Response:
    try:
        body = await request.json()
    except ValueError:
        raise AdminError(400, "invalid_request", "the body must be JSON") from None
    if not isinstance(body, dict):
        raise AdminError(400, "invalid_request", 'the body must be a JSON object {"brand", "pa", "sub"}')
    person = _person(request, body, "body field")
    erasure = await _records(request).erase(person)
    request.app[ADMIN_METRICS].erasures.labels(person.brand_id).inc()
    if erasure.grants_revoked:
        request.app[GATEWAY][METRICS].delegation_events.labels(person.brand_id, "grant_revoked").inc(
            erasure.grants_revoked
        )
    return web.json_response({**_who(person), "erased": erasure.counts()})


def create_admin_app(gateway: web.Application) -> web.Application:
    """The admin API over ``gateway`` (started: its store is open), to mount under ``/admin``."""
    # Outermost first: absent while off; counted; errors as JSON; then the credential.
    app = web.Application(
        middlewares=[enabled_middleware, count_middleware, error_middleware, bearer_middleware]
    )
    app[GATEWAY] = gateway
    app[ADMIN_METRICS] = AdminMetrics(gateway[METRICS].registry)
    app.router.add_get("/conversations", list_conversations, name="list")
    app.router.add_post("/conversations/{context_id:[^/:]+}:close", close_conversation, name="close")
    app.router.add_post("/erase", erase, name="erase")
    app.router.add_get("/grants", list_grants, name="grants")
    return app


class AdminListener:
    """The admin API's own listener: opened only while ``admin.enabled``, on ``admin.host:admin.port``.

    Off at start-up, nothing listens (no port to find, none to keep free); :meth:`apply` after a
    reload that turns the API on opens it. Turned off again, the listener stays and answers ``404``
    (:func:`enabled_middleware`) until the process restarts: closing it under a request in flight
    would gain nothing the ``404`` does not give.
    """

    def __init__(self, gateway: web.Application) -> None:
        self._gateway = gateway
        self._runner: web.AppRunner | None = None

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """Where it listens, ``(host, port)`` each (``0`` resolved); empty while closed."""
        if self._runner is None:
            return []
        return [(address[0], address[1]) for address in self._runner.addresses]

    async def apply(self, config: AdminConfig) -> None:
        """Open the listener if ``config`` enables the API and it is not open yet; raises ``OSError``
        when the address cannot be bound (the caller says so: at start-up it is fatal)."""
        if not config.enabled or self._runner is not None:
            return
        root = web.Application()
        root.add_subapp("/admin", create_admin_app(self._gateway))
        runner = web.AppRunner(root, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, config.host, config.port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("admin API on %s", ", ".join(f"{host}:{port}" for host, port in self.addresses))

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
