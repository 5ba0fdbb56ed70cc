"""RFC 7009 token revocation: a personal agent ends a grant it holds (§5, the User changed their mind).

Either token of a grant ends the whole grant: a refresh token (current or spent) or a
delegation token this Brand issued. Only the grant's own (personal agent, ``sub``) can end it;
anything else, an unknown token, a foreign one, an expired one, is answered exactly as a
success (RFC 7009 §2.2: ``200``, empty body), so the endpoint tells nobody whether a token
exists, and never revokes someone else's grant.
"""

from __future__ import annotations

from aiohttp import web

from gateway.handlers.oauth.client_auth import Client, pa_client
from gateway.handlers.oauth.tokens import owns, refresh_token_of
from gateway.handlers.state import METRICS
from gateway.oauth.access_token import InvalidToken, verify_access_token
from gateway.oauth.errors import NO_STORE
from gateway.oauth.forms import required
from gateway.store.oauth import Grant

__all__ = ["revoke"]


async def _refresh_grant(client: Client, token: str, now: float) -> Grant | None:
    store, brand_id = client.server.store, client.brand.brand.id
    presented, _ = refresh_token_of(token)
    grant_id = await store.grant_of_refresh(brand_id, presented, now)
    return None if grant_id is None else await store.get_grant(brand_id, grant_id, now)


async def _access_grant(client: Client, token: str, now: float) -> Grant | None:
    urls = client.brand.urls
    try:
        claims = verify_access_token(
            client.server.keys, token, issuer=urls.issuer, audience=urls.interface, now=now
        )
    except InvalidToken:
        return None
    if claims.client_id != client.identity.issuer:
        return None
    return await client.server.store.get_grant(client.brand.brand.id, claims.grant_id, now)


@pa_client
async def revoke(request: web.Request, client: Client) -> web.Response:
    """``POST {interface}/oauth/revoke`` (RFC 7009 §2.1): ``token``; ``token_type_hint`` orders the search.

    RFC 7009 §2.1: a hint that does not find the token never stops the search in the other kind.
    """
    token = required(client.form, "token")
    now = client.server.clock()
    lookups = (_refresh_grant, _access_grant)
    if client.form.get("token_type_hint") == "access_token":
        lookups = (_access_grant, _refresh_grant)
    for lookup in lookups:
        grant = await lookup(client, token, now)
        if grant is not None:
            if owns(grant, client) and await client.server.store.revoke_grant(grant.brand_id, grant.grant_id):
                request.app[METRICS].delegation_event(grant.brand_id, "grant_revoked")
            break
    return web.Response(status=200, headers=NO_STORE)
