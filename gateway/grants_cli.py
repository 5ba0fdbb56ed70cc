"""``pact-gateway grants list|revoke``: an operator's view of one Brand user's §5 grants.

It talks to the gateway's shared store directly (``cache.url``), so it works only against
Redis: with ``memory://`` the grants live inside the serving process and nothing else can
reach them. Revoking here ends the grant on every replica at that grant's next use (§5.5).
Revoking all of a user's grants (no ``--grant``) also denies the device authorizations they
approved that no poll has redeemed yet: each is a grant in waiting, which the personal agent's
next poll would otherwise mint after the revocation; that poll hears ``access_denied``.

``list`` shows each grant's RFC 9396 details as the JSON array the User approved: a detail names
a resource of the Brand (an order, a reservation), never a Brand user id.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime

import orjson

from gateway.config import GatewayConfig
from gateway.protocol.authorization_details import details_json
from gateway.store import open_store
from gateway.store.base import StoreError
from gateway.store.factory import open_oauth_store

__all__ = ["run_grants"]


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _refuse(message: str) -> int:
    print(f"pact-gateway grants: {message}", file=sys.stderr)
    return 2


async def run_grants(config: GatewayConfig, verb: str, brand_id: str, user: str, grant_id: str | None) -> int:
    """List or revoke ``user``'s live grants of ``brand_id``; exit 2 on an operator's mistake."""
    brand = config.brands.get(brand_id)
    if brand is None or brand.delegation is None:
        return _refuse(f"no Brand {brand_id!r} with delegation in this configuration")
    if config.cache.backend == "memory":
        return _refuse("cache.url is memory://: grants live inside the gateway process; use a redis:// cache")
    store = open_store(config.cache)
    try:
        oauth = open_oauth_store(store)
        now = time.time()
        denied = 0
        if verb == "revoke" and grant_id is None:
            # Before the grants are read: one redeemed meanwhile is among them, and is revoked below.
            denied = await oauth.deny_authorizations_of_user(brand_id, user, now)
        grants = await oauth.grants_of_user(brand_id, user, now)
        if grant_id is not None:
            grants = [grant for grant in grants if grant.grant_id == grant_id]
            if not grants:
                return _refuse(f"no live grant {grant_id!r} for that user")
        if verb == "list":
            for grant in grants:
                details = f"  details={orjson.dumps(details_json(grant.details)).decode()}"
                print(
                    f"{grant.grant_id}  pa={grant.client_id}  scopes={' '.join(grant.scopes)}  "
                    f"issued={_when(grant.issued_at)}  expires={_when(grant.expires_at)}"
                    + (details if grant.details else "")
                )
            print(f"{len(grants)} live grant(s)")
            return 0
        for grant in grants:
            await oauth.revoke_grant(brand_id, grant.grant_id)
            print(f"revoked {grant.grant_id}")
        print(f"{len(grants)} grant(s) revoked")
        if grant_id is None:
            print(f"{denied} approved authorization(s) not yet redeemed denied")
        return 0
    except StoreError as exc:
        return _refuse(f"the store at cache.url did not answer: {exc}")
    finally:
        await store.close()
