"""§2.1 card endpoints: public, cacheable, conditional."""

from __future__ import annotations

from aiohttp import web

from gateway.handlers.state import RUNTIME
from gateway.http import responses
from gateway.protocol.card import RenderedCard, etag_matches

CARD_HEADERS = {
    "Cache-Control": "public, max-age=300",
    "Access-Control-Allow-Origin": "*",
}


def _serve(request: web.Request, card: RenderedCard) -> web.Response:
    headers = {**CARD_HEADERS, "ETag": card.etag}
    if etag_matches(request.headers.get("If-None-Match"), card.etag):
        return web.Response(status=304, headers=headers)
    return web.Response(body=card.body, headers={**headers, "Content-Type": "application/json"})


async def brand_card(request: web.Request) -> web.Response:
    """``GET /a2a/{brandId}/.well-known/agent-card.json``; an unknown Brand is a bare 404."""
    card = request.app[RUNTIME].current.cards.get(request.match_info["brand"])
    return responses.not_found() if card is None else _serve(request, card)


async def domain_card(request: web.Request) -> web.Response:
    """``GET /.well-known/agent-card.json`` for a Brand whose ``domain`` is the request's Host."""
    runtime = request.app[RUNTIME].current
    brand = runtime.config.brand_for_domain(request.host)
    return responses.not_found() if brand is None else _serve(request, runtime.cards[brand.id])
