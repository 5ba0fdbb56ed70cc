"""RFC 9396 details in the §5 flow's state: kept through an authorization, its approval, the grant a
poll issues, a rotation and a landing record, on every backend; carried like scopes (§5.3 step-up).

Each test runs once per backend (``tests/store/conftest.py``); the details are canonical JSON texts,
kept and compared as they are.
"""

from __future__ import annotations

import dataclasses

from gateway.store.oauth import AuthorizationStatus, LandingRecord, OAuthStore, PollOutcome
from tests.store.test_oauth_store import (
    ALICE,
    BRAND,
    DEVICE,
    GRANT_TTL,
    _authorize,
    at,
    authorization,
    gid,
    issue,
    oauth,
    poll,
    rt,
    sha,
)
from tests.support.pa import ManualClock

__all__ = ["oauth"]  # the fixture, imported for its use here

ORDER = '{"identifier":"A-10001","type":"https://acme.example/rar/order"}'
OTHER = '{"actions":["cancel"],"identifier":"A-10002","type":"https://acme.example/rar/order"}'
ODD = '{"identifier":"% [^\\\\n] \u2028 é","type":"https://acme.example/rar/order"}'
"""Lua pattern characters, an escaped newline and non-ASCII: kept byte for byte all the same."""


async def test_rfc9396_requested_details_round_trip_with_the_authorization(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    created = dataclasses.replace(authorization(clock), details=(ORDER, ODD))
    assert await oauth.create_authorization(created)
    assert await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock()) == created


async def test_rfc9396_approved_details_become_the_grants_and_survive_a_rotation(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    created = dataclasses.replace(authorization(clock), details=(ORDER, ODD, OTHER))
    assert await oauth.create_authorization(created)
    approved = (ORDER, ODD)
    assert await oauth.approve(BRAND, at(clock), "user-42", ("orders:cancel",), clock(), details=approved)
    found = await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock())
    assert found is not None
    assert (found.status, found.details, found.approved_details, found.carried_details) == (
        AuthorizationStatus.APPROVED,
        (ORDER, ODD, OTHER),
        approved,
        (),
    )
    result = await oauth.poll(BRAND, DEVICE, ALICE.digest, clock(), refresh=rt("rt-1"), grant_ttl=GRANT_TTL)
    assert result.grant is not None
    assert (result.grant.details, result.grant.carried_details) == (approved, ())
    assert await oauth.get_grant(BRAND, gid("g-1"), clock()) == result.grant
    rotated = await oauth.rotate_refresh(BRAND, rt("rt-1"), rt("rt-2"), clock())
    assert rotated.grant == result.grant
    assert await oauth.grants_of_user(BRAND, "user-42", clock()) == [result.grant]


async def _step_up(oauth: OAuthStore, clock: ManualClock, carried_details: tuple[str, ...]) -> str:
    """An authorization approved as a step-up of Alice's live grant, carrying ``carried_details``."""
    device_hash = sha("dc-step-up")
    step_up = dataclasses.replace(
        authorization(clock, device_hash=device_hash, user_code="UC-UP"), details=(OTHER,)
    )
    assert await oauth.create_authorization(step_up)
    assert await oauth.approve(
        BRAND,
        step_up,
        "user-42",
        ("orders:read", "orders:cancel"),
        clock(),
        carried=("orders:read",),
        details=(OTHER, *carried_details),
        carried_details=carried_details,
    )
    return device_hash


async def _grant_with_order(oauth: OAuthStore, clock: ManualClock) -> None:
    """Alice's live grant ``g-1``, holding :data:`ORDER`."""
    device_hash = sha("dc-first")
    created = dataclasses.replace(
        authorization(clock, device_hash=device_hash, user_code="UC-1"), details=(ORDER,)
    )
    assert await oauth.create_authorization(created)
    assert await oauth.approve(BRAND, created, "user-42", ("orders:read",), clock(), details=(ORDER,))
    assert await poll(oauth, clock, device_hash=device_hash) is PollOutcome.ISSUED


async def test_rfc9396_s5_3_a_step_up_carries_the_details_the_superseded_grant_still_holds(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    """Carried details are granted only if the grant being superseded holds them at redemption,
    byte-equal: one it never held (a forged carry) is dropped with the rest of the approval kept."""
    await _grant_with_order(oauth, clock)
    device_hash = await _step_up(oauth, clock, (ORDER, ODD))
    result = await oauth.poll(
        BRAND, device_hash, ALICE.digest, clock(), refresh=rt("rt-up", gid("g-2")), grant_ttl=GRANT_TTL
    )
    assert result.grant is not None
    assert result.superseded
    assert (result.grant.details, result.grant.carried_details) == ((OTHER, ORDER), (ORDER,))
    assert await oauth.live_grant_of(BRAND, "user-42", ALICE.digest, clock()) == result.grant


async def test_rfc9396_s5_3_a_grant_revoked_before_the_redemption_hands_no_detail_on(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    await _grant_with_order(oauth, clock)
    device_hash = await _step_up(oauth, clock, (ORDER,))
    assert await oauth.revoke_grant(BRAND, gid("g-1"))
    result = await oauth.poll(
        BRAND, device_hash, ALICE.digest, clock(), refresh=rt("rt-up", gid("g-2")), grant_ttl=GRANT_TTL
    )
    assert result.grant is not None
    assert not result.superseded
    assert (result.grant.scopes, result.grant.details, result.grant.carried_details) == (
        ("orders:cancel",),
        (OTHER,),
        (),
    )


async def test_rfc9396_a_grant_without_details_has_none(oauth: OAuthStore, clock: ManualClock) -> None:
    grant = await issue(oauth, clock)
    assert (grant.details, grant.carried_details) == ((), ())
    assert await oauth.get_grant(BRAND, grant.grant_id, clock()) == grant


async def test_rfc9396_erasure_forgets_the_approved_details_with_the_approval(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    device_hash = sha("dc-erased")
    created = dataclasses.replace(
        authorization(clock, device_hash=device_hash, user_code="UC-E"), details=(ORDER,)
    )
    assert await oauth.create_authorization(created)
    assert await oauth.approve(BRAND, created, "user-42", ("orders:cancel",), clock(), details=(ORDER,))
    assert await _authorize(oauth, clock, "pending")
    assert await oauth.deny_authorizations_of_owner(BRAND, ALICE.digest, clock()) == 2
    found = await oauth.authorization_by_user_code(BRAND, "UC-E", clock())
    assert found is not None
    assert (found.status, found.approved_details, found.carried_details) == (
        AuthorizationStatus.DENIED,
        (),
        (),
    )


async def test_rfc9396_a_landing_record_keeps_its_details(oauth: OAuthStore, clock: ManualClock) -> None:
    record = LandingRecord(
        outcome="approved",
        scopes=("orders:read", "orders:cancel"),
        carried=("orders:read",),
        dropped=(),
        expires_at=clock() + 300,
        details=(OTHER, ORDER),
        carried_details=(ORDER,),
        dropped_details=(ODD,),
    )
    await oauth.put_landing(BRAND, sha("landing-1"), record)
    assert await oauth.take_landing(BRAND, sha("landing-1"), clock()) == record
    plain = LandingRecord(outcome="denied", scopes=(), carried=(), dropped=(), expires_at=clock() + 300)
    await oauth.put_landing(BRAND, sha("landing-2"), plain)
    assert await oauth.take_landing(BRAND, sha("landing-2"), clock()) == plain
