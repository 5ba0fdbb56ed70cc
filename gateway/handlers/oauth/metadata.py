"""RFC 8414 metadata and the ``jwks_uri`` key set, served: public like the card (§2.1), and only
for a Brand that delegates (any other gets a bare ``404``). The document itself is
:func:`gateway.oauth.metadata.build_metadata`, rendered once per runtime."""

from __future__ import annotations

from typing import Final

from aiohttp import web

from gateway.handlers.cards import CARD_HEADERS
from gateway.handlers.oauth.client_auth import delegating_brand
from gateway.handlers.state import RUNTIME
from gateway.http import responses

__all__ = ["PUBLIC_HEADERS", "jwks", "metadata"]

PUBLIC_HEADERS: Final = {**CARD_HEADERS, "Content-Type": "application/json"}


async def metadata(request: web.Request) -> web.Response:
    """``GET {issuer}/.well-known/oauth-authorization-server`` and its RFC 8414 §3.1 twin."""
    found = delegating_brand(request, request.app[RUNTIME].current)
    if found is None:
        return responses.not_found()
    return web.Response(body=found[1].metadata, headers=PUBLIC_HEADERS)


async def jwks(request: web.Request) -> web.Response:
    """``GET {issuer}/jwks.json``: the keys that sign delegation tokens and receipts (§5.1, §5.4, §5.6)."""
    found = delegating_brand(request, request.app[RUNTIME].current)
    if found is None:
        return responses.not_found()
    return web.Response(body=found[0].keys.jwks_bytes(), headers=PUBLIC_HEADERS)
