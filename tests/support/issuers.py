"""Many ``open``-policy issuers on one loopback server, for floods of invented issuers (issue 12 row 4).

``{base}/{name}`` is an issuer for any ``name``: its OIDC discovery document at
``{base}/{name}/.well-known/openid-configuration`` names ``{base}/{name}/jwks.json``, which
publishes :attr:`IssuerFarm.keys`. Every request is counted, so a test can bound what a flood
of tokens made the gateway fetch.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from aiohttp import web

from tests.support.pa import PAKey

__all__ = ["IssuerFarm"]


class IssuerFarm:
    """A real aiohttp server on 127.0.0.1 playing every issuer ``{base}/{name}``.

    ``keys`` is the JWKS all of them publish; ``discovery_fails`` makes every discovery document
    a ``500``. ``discovery_count`` and ``fetch_count`` count requests, failed ones included.
    """

    def __init__(self) -> None:
        self.keys: list[dict[str, Any]] = []
        self.discovery_fails = False
        self.discovery_count = 0
        self.fetch_count = 0
        self._runner: web.AppRunner | None = None
        self._port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def requests(self) -> int:
        """Every request the farm has answered: discovery documents and key sets."""
        return self.discovery_count + self.fetch_count

    def issuer(self, name: str) -> str:
        return f"{self.base_url}/{name}"

    def publish(self, *keys: PAKey) -> None:
        self.keys = [key.public_jwk() for key in keys]

    async def start(self) -> IssuerFarm:
        app = web.Application()
        app.router.add_get("/{name}/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/{name}/jwks.json", self._jwks)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> IssuerFarm:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _discovery(self, request: web.Request) -> web.Response:
        self.discovery_count += 1
        if self.discovery_fails:
            return web.Response(status=500, text="boom")
        issuer = self.issuer(request.match_info["name"])
        return web.json_response({"issuer": issuer, "jwks_uri": f"{issuer}/jwks.json"})

    async def _jwks(self, request: web.Request) -> web.Response:
        self.fetch_count += 1
        return web.json_response({"keys": self.keys})
