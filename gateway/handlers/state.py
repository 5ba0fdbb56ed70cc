"""Typed application state: everything a handler needs, passed explicitly through ``web.AppKey``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.config import GatewayConfig
from gateway.ops.metrics import Metrics
from gateway.protocol.card import RenderedCard

if TYPE_CHECKING:
    from gateway.auth.pa_jwt import PAVerifier
    from gateway.oauth.delegation import DelegationVerifier
    from gateway.oauth.server import AuthorizationServer
    from gateway.ops.limits import RateLimits
    from gateway.turns import TurnService
    from gateway.upstream.guard import GuardedBot


@dataclass(frozen=True, slots=True)
class Runtime:
    """What one configuration serves; replaced as a whole on reload so a request sees one version."""

    config: GatewayConfig
    cards: dict[str, RenderedCard]
    verifier: PAVerifier
    turns: TurnService
    limits: RateLimits
    bots: dict[str, GuardedBot]
    oauth: AuthorizationServer | None = None
    """§5, when at least one Brand delegates."""
    delegation: DelegationVerifier | None = None
    """§5.5 ``X-A2A-User-Delegation``, with ``oauth``; per runtime, so its cache dies with its keys."""


class RuntimeRef:
    """The current :class:`Runtime`. A reload assigns ``current`` once; in-flight requests keep theirs."""

    __slots__ = ("current",)

    def __init__(self, runtime: Runtime) -> None:
        self.current = runtime


RUNTIME = web.AppKey("runtime", RuntimeRef)
METRICS = web.AppKey("metrics", Metrics)
"""The gateway's metrics; one per app, so tests and second instances never share counters."""
