"""RFC 9396 details, the upgrade path: a grant and an approved device authorization written by the code
before details existed (no ``ad``/``aa``/``ak`` fields) keep working through HTTP, with no details, on
Redis and a Redis Cluster, for a Brand that has since configured detail types.

The earlier code is the real one (tests/support/releases.py), run in a subprocess on the test's store.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from gateway.store.base import Owner
from tests.oauth.test_authorization_details import ENVIRON, introspect, refresh_with, refusal
from tests.support.delegation import BRAND_USER, BrandLogin, oauth_server, poll_token, refresh
from tests.support.gateway import Harness, MakeGateway
from tests.support.pa import ManualClock
from tests.support.rar import details_param, enable_details, order
from tests.support.releases import extract_release, run_release

BEFORE_DETAILS = "aa61575"
"""The gateway just before RFC 9396 details: what a deployment ran when it upgraded to them."""

_WRITER = """
import asyncio, json, sys
from gateway.config import CacheConfig
from gateway.handlers.oauth.tokens import new_family, new_refresh_token
from gateway.oauth.device import code_hash
from gateway.store.base import Owner
from gateway.store.factory import open_oauth_store, open_store
from gateway.store.oauth import DeviceAuthorization, PollOutcome

async def main(url, now, issuer, user):
    store = open_store(CacheConfig(url=url), clock=lambda: now)
    oauth = open_oauth_store(store)
    scopes = ("orders:read", "orders:cancel")
    for sub in ("alice", "bob"):
        owner = Owner("acme", issuer, sub)
        authorization = DeviceAuthorization(
            code_hash("dc-" + sub), "UC-" + sub, "acme", issuer, owner.digest, scopes, now + 600, 5
        )
        assert await oauth.create_authorization(authorization)
        assert await oauth.approve("acme", authorization, user, scopes, now)
    alice = Owner("acme", issuer, "alice").digest
    token, refresh = new_refresh_token(oauth.new_grant_id(alice), new_family())
    result = await oauth.poll("acme", code_hash("dc-alice"), alice, now, refresh=refresh, grant_ttl=3600)
    assert result.outcome is PollOutcome.ISSUED, result
    await store.close()
    print(json.dumps({"grant_id": refresh.grant_id, "refresh_token": token}))

asyncio.run(main(sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]))
"""
"""Run by the earlier code: Alice's grant (issued, with its refresh token) and Bob's approved
authorization (device code ``dc-bob``, not redeemed yet), both of orders:read and orders:cancel."""


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return extract_release(BEFORE_DETAILS, tmp_path_factory.mktemp("before-details") / "release")


@pytest.fixture(params=["redis", "cluster"])
def shared_url(request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


async def test_rfc9396_records_written_before_details_existed_work_with_none(
    before: Path,
    shared_url: str,
    make_gateway: MakeGateway,
    brand_login: BrandLogin,
    provider_key_pem: str,
) -> None:
    clock = ManualClock()
    edit = enable_details(
        brand_login, provider_key_pem, introspection={"secret": "${ACME_INTROSPECTION_SECRET}"}
    )
    h: Harness = await make_gateway(shared_url, edit=edit, clock=clock, environ=ENVIRON)
    written = json.loads(await run_release(before, _WRITER, shared_url, repr(clock()), h.issuer, BRAND_USER))

    # The earlier grant refreshes here, with its scopes and no details; it cannot be widened to some.
    response = await refresh(h, written["refresh_token"])
    assert response.status == 200, await response.text()
    refreshed = orjson.loads(await response.read())
    assert (refreshed["scope"], "authorization_details" in refreshed) == ("orders:read orders:cancel", False)
    widened = await refresh_with(h, refreshed["refresh_token"], details_param([order()]))
    assert "was not granted" in await refusal(widened)
    described = await introspect(h, refreshed["access_token"])
    assert described["active"] is True
    assert "authorization_details" not in described
    server = oauth_server(h)
    grant = await server.store.get_grant("acme", written["grant_id"], server.clock())
    assert grant is not None
    assert (grant.details, grant.carried_details) == ((), ())

    # The earlier approval is redeemed here: a grant of its scopes, with no details.
    polled = await poll_token(h, _device_code("bob"), sub="bob")
    assert polled.status == 200, await polled.text()
    answer = orjson.loads(await polled.read())
    assert (answer["scope"], "authorization_details" in answer) == ("orders:read orders:cancel", False)
    live = await server.store.live_grant_of(
        "acme", BRAND_USER, Owner("acme", h.issuer, "bob").digest, server.clock()
    )
    assert live is not None
    assert live.details == ()


def _device_code(sub: str) -> str:
    """The device code the writer hashed for ``sub``'s authorization (it stores only the hash)."""
    return f"dc-{sub}"
