"""The §5 flow's state (device codes, consent sessions, jtis, grants, refresh families), on memory and Redis.

Each test runs once per backend through :func:`open_oauth_store`, beside the conversation store
of ``tests/store/conftest.py``, on the same :class:`ManualClock` the tests move.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.config import CacheConfig
from gateway.store import ConversationStore, Owner, TurnStatus
from gateway.store import keys as store_keys
from gateway.store.base import GrantCheck
from gateway.store.factory import open_oauth_store
from gateway.store.memory import MemoryStore
from gateway.store.oauth import (
    EXPIRED_KEPT,
    AuthorizationStatus,
    ConsentSession,
    DeviceAuthorization,
    Grant,
    LandingRecord,
    OAuthStore,
    PollOutcome,
    RefreshOutcome,
    RefreshResult,
    RefreshToken,
)
from gateway.store.oauth_redis import RedisOAuthStore
from gateway.store.redis import RedisStore
from gateway.store.redis_cluster import ClusterPipe
from tests.support.delegation import grant_id
from tests.support.pa import ManualClock

BRAND = "acme"
PA = "https://pa.example"
ALICE = Owner(BRAND, PA, "alice")
MALLORY = Owner(BRAND, PA, "mallory")
BOB = Owner(BRAND, PA, "bob")
GRANT_TTL = 3600


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


DEVICE = sha("dc_device-code")


def gid(name: str, owner: Owner = ALICE) -> str:
    """Grant ``name`` of ``owner`` (Alice's unless said), as the tests below name it."""
    return grant_id(name, owner)


def rt(name: str, grant_id: str = gid("g-1"), family: str = "") -> RefreshToken:
    """Refresh token ``name`` of ``grant_id``'s family (or of ``family``), as the store sees it."""
    return RefreshToken(grant_id, sha(family or f"family-{grant_id}"), sha(name))


@pytest.fixture
def oauth(store: ConversationStore) -> OAuthStore:
    return open_oauth_store(store)


def authorization(
    clock: ManualClock,
    *,
    device_hash: str = DEVICE,
    user_code: str = "WDJB-MJHT",
    owner: Owner = ALICE,
    expires_in: float = 600,
    brand_id: str = BRAND,
) -> DeviceAuthorization:
    return DeviceAuthorization(
        device_hash=device_hash,
        user_code=user_code,
        brand_id=brand_id,
        client_id=PA,
        owner_digest=owner.digest,
        scopes=("orders:read", "orders:cancel"),
        expires_at=clock() + expires_in,
        interval=5,
    )


def at(clock: ManualClock, device_hash: str = DEVICE, owner: Owner = ALICE) -> DeviceAuthorization:
    """The authorization ``device_hash`` of ``owner``, as the consent page read it, to approve or deny."""
    return authorization(clock, device_hash=device_hash, owner=owner)


async def poll(
    oauth: OAuthStore,
    clock: ManualClock,
    *,
    device_hash: str = DEVICE,
    owner: Owner = ALICE,
    grant_id: str = "g-1",
    refresh: str = "rt-1",
) -> PollOutcome:
    result = await oauth.poll(
        BRAND,
        device_hash,
        owner.digest,
        clock(),
        refresh=rt(refresh, gid(grant_id, owner)),
        grant_ttl=GRANT_TTL,
    )
    assert (result.grant is not None) is (result.outcome is PollOutcome.ISSUED)
    return result.outcome


async def issue(
    oauth: OAuthStore,
    clock: ManualClock,
    *,
    grant_id: str = "g-1",
    user: str = "user-42",
    refresh: str = "rt-1",
    owner: Owner = ALICE,
    max_user_grants: int | None = None,
) -> Grant:
    """A grant through the whole flow: a new authorization, approved by ``user``, redeemed by one poll."""
    device_hash = sha(f"dc-{grant_id}")
    created = authorization(clock, device_hash=device_hash, user_code=f"UC-{grant_id}", owner=owner)
    assert await oauth.create_authorization(created)
    assert await oauth.approve(BRAND, created, user, ("orders:read",), clock())
    result = await oauth.poll(
        BRAND,
        device_hash,
        owner.digest,
        clock(),
        refresh=rt(refresh, gid(grant_id, owner)),
        grant_ttl=GRANT_TTL,
        max_user_grants=max_user_grants,
    )
    assert result.outcome is PollOutcome.ISSUED
    assert result.grant is not None
    return result.grant


# --- device authorizations (§5.3, RFC 8628) -----------------------------------------------------


async def test_s5_3_authorization_is_found_by_its_user_code(oauth: OAuthStore, clock: ManualClock) -> None:
    created = authorization(clock)
    assert await oauth.create_authorization(created)
    assert await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock()) == created
    assert await oauth.authorization_by_user_code(BRAND, "XXXX-XXXX", clock()) is None
    assert await oauth.authorization_by_user_code("globex", "WDJB-MJHT", clock()) is None


async def test_s5_3_user_code_collision_returns_false(oauth: OAuthStore, clock: ManualClock) -> None:
    first = authorization(clock)
    assert await oauth.create_authorization(first)
    assert not await oauth.create_authorization(authorization(clock, device_hash=sha("another")))
    assert await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock()) == first
    # Codes are per Brand, and an expired code may be drawn again.
    assert await oauth.create_authorization(authorization(clock, device_hash=sha("x"), brand_id="globex"))
    clock.advance(600)
    again = authorization(clock, device_hash=sha("later"))
    assert await oauth.create_authorization(again)
    assert await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock()) == again


async def test_s5_3_approve_only_from_pending(oauth: OAuthStore, clock: ManualClock) -> None:
    await oauth.create_authorization(authorization(clock))
    assert await oauth.approve(BRAND, at(clock), "user-42", ("orders:read",), clock())
    found = await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock())
    assert found is not None
    assert (found.status, found.user, found.approved) == (
        AuthorizationStatus.APPROVED,
        "user-42",
        ("orders:read",),
    )
    assert not await oauth.approve(BRAND, at(clock), "user-7", ("orders:cancel",), clock())
    assert not await oauth.deny(BRAND, at(clock), clock())
    assert await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock()) == found
    assert not await oauth.approve(BRAND, at(clock, sha("unknown")), "user-42", ("orders:read",), clock())


async def test_s5_3_deny_only_from_pending(oauth: OAuthStore, clock: ManualClock) -> None:
    await oauth.create_authorization(authorization(clock))
    assert await oauth.deny(BRAND, at(clock), clock())
    found = await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock())
    assert found is not None
    assert (found.status, found.user) == (AuthorizationStatus.DENIED, None)
    assert not await oauth.deny(BRAND, at(clock), clock())
    assert not await oauth.approve(BRAND, at(clock), "user-42", ("orders:read",), clock())
    assert not await oauth.deny(BRAND, at(clock, sha("unknown")), clock())


async def test_s5_3_expired_authorization_can_no_longer_be_settled(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    await oauth.create_authorization(authorization(clock))
    clock.advance(600)
    assert await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock()) is None
    assert not await oauth.approve(BRAND, at(clock), "user-42", ("orders:read",), clock())
    assert not await oauth.deny(BRAND, at(clock), clock())


# --- erasure and `grants revoke` deny authorizations not yet redeemed (issue 18 F4) -------------


async def _authorize(
    oauth: OAuthStore, clock: ManualClock, name: str, *, owner: Owner = ALICE, approver: str | None = None
) -> str:
    """A live authorization ``name`` of ``owner``, approved by ``approver`` if given; its device hash."""
    device_hash = sha(f"dc-{name}")
    created = authorization(clock, device_hash=device_hash, user_code=f"UC-{name}", owner=owner)
    assert await oauth.create_authorization(created)
    if approver is not None:
        assert await oauth.approve(BRAND, created, approver, ("orders:read",), clock())
    return device_hash


async def test_s5_3_erasing_a_person_denies_their_pending_and_approved_authorizations(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    pending = await _authorize(oauth, clock, "pending")
    approved = await _authorize(oauth, clock, "approved", approver="user-42")
    redeemed = await _authorize(oauth, clock, "redeemed", approver="user-42")
    assert await poll(oauth, clock, device_hash=redeemed, grant_id="g-r") is PollOutcome.ISSUED
    bobs = await _authorize(oauth, clock, "bobs", owner=BOB, approver="user-42")

    assert await oauth.deny_authorizations_of_owner(BRAND, ALICE.digest, clock()) == 2

    # RFC 8628 §3.5: the poll that would have minted a grant after the erasure hears access_denied.
    assert await poll(oauth, clock, device_hash=approved, grant_id="g-a") is PollOutcome.ACCESS_DENIED
    assert await poll(oauth, clock, device_hash=pending, grant_id="g-p") is PollOutcome.ACCESS_DENIED
    assert not await oauth.approve(BRAND, at(clock, pending), "user-42", ("orders:read",), clock())
    found = await oauth.authorization_by_user_code(BRAND, "UC-approved", clock())
    assert found is not None
    # Who approved it and what: forgotten with the approval.
    assert (found.status, found.user, found.approved) == (AuthorizationStatus.DENIED, None, ())
    assert await oauth.get_grant(BRAND, gid("g-a"), clock()) is None
    clock.advance(5)
    assert await poll(oauth, clock, device_hash=redeemed, grant_id="g-x") is PollOutcome.INVALID_GRANT
    assert await poll(oauth, clock, device_hash=bobs, owner=BOB, grant_id="g-b") is PollOutcome.ISSUED
    assert await oauth.deny_authorizations_of_owner(BRAND, ALICE.digest, clock()) == 0


async def test_s5_3_revoking_a_users_grants_denies_what_they_approved_and_no_poll_redeemed(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    alices = await _authorize(oauth, clock, "alices", approver="user-42")
    mallorys = await _authorize(oauth, clock, "mallorys", owner=MALLORY, approver="user-42")
    bobs = await _authorize(oauth, clock, "bobs", owner=BOB, approver="user-7")
    pending = await _authorize(oauth, clock, "pending")

    assert await oauth.deny_authorizations_of_user(BRAND, "user-42", clock()) == 2

    assert await poll(oauth, clock, device_hash=alices, grant_id="g-1") is PollOutcome.ACCESS_DENIED
    assert await poll(oauth, clock, device_hash=mallorys, owner=MALLORY) is PollOutcome.ACCESS_DENIED
    assert await poll(oauth, clock, device_hash=bobs, owner=BOB, grant_id="g-7") is PollOutcome.ISSUED
    assert await poll(oauth, clock, device_hash=pending) is PollOutcome.AUTHORIZATION_PENDING
    # Pending, it is no one's yet: approved later, it is that approval's to redeem.
    assert await oauth.approve(BRAND, at(clock, pending), "user-42", ("orders:read",), clock())
    assert await oauth.deny_authorizations_of_user(BRAND, "user-42", clock()) == 1


async def _indexed(store: ConversationStore, key: str) -> int:
    """How many authorizations an index holds, on either backend."""
    if isinstance(store, MemoryStore):
        entry = store.keyspace.entries.get(key)
        return 0 if entry is None else len(entry[1])
    assert isinstance(store, RedisStore)
    return int(await store.redis.execute("ZCARD", key))


async def test_s5_3_authorization_indexes_hold_only_the_last_expires_in_seconds(
    oauth: OAuthStore, store: ConversationStore, clock: ManualClock
) -> None:
    """Bounded whatever the traffic: each addition drops the lapsed entries (600 s lives, one a minute)."""
    for n in range(40):
        await _authorize(oauth, clock, f"n{n}", approver="user-42")
        clock.advance(60)
    digest = store_keys.user_digest(BRAND, "user-42")
    if isinstance(store, MemoryStore):
        owner_index = store_keys.oauth_key(BRAND, "owner_authz", ALICE.digest)
        user_index = store_keys.oauth_key(BRAND, "user_authz", digest)
    else:  # Redis writes the tagged layout (cache.key_layout's default)
        tag = store_keys.owner_tag(ALICE.digest)
        owner_index = store_keys.oauth_tagged_key(BRAND, tag, "a", ALICE.digest)
        user_index = store_keys.oauth_tagged_key(BRAND, store_keys.owner_tag(digest), "A", digest)
    assert await _indexed(store, owner_index) == 10
    assert await _indexed(store, user_index) == 10
    # Only the live ones are denied (the last nine: one minute has passed since the last was made).
    assert await oauth.deny_authorizations_of_owner(BRAND, ALICE.digest, clock()) == 9


# --- token polls, in the documented order (RFC 8628 §3.5) ---------------------------------------


async def test_s5_3_poll_unknown_code_is_invalid_grant(oauth: OAuthStore, clock: ManualClock) -> None:
    assert await poll(oauth, clock) is PollOutcome.INVALID_GRANT


async def test_s5_3_poll_by_another_owner_is_invalid_grant(oauth: OAuthStore, clock: ManualClock) -> None:
    """A code is bound to the PA *and* its ``sub``: another ``sub`` cannot redeem it, even approved."""
    await oauth.create_authorization(authorization(clock))
    await oauth.approve(BRAND, at(clock), "user-42", ("orders:read",), clock())
    assert await poll(oauth, clock, owner=MALLORY) is PollOutcome.INVALID_GRANT
    # Nor did that poll count as one of the owner's: the owner's first poll is not too early.
    assert await poll(oauth, clock) is PollOutcome.ISSUED


async def test_s5_3_poll_expired_is_expired_token(oauth: OAuthStore, clock: ManualClock) -> None:
    await oauth.create_authorization(authorization(clock))
    await oauth.approve(BRAND, at(clock), "user-42", ("orders:read",), clock())
    clock.advance(600)
    assert await poll(oauth, clock) is PollOutcome.EXPIRED_TOKEN
    # Still told apart from an unknown code for a while, and another owner still learns nothing.
    clock.advance(EXPIRED_KEPT - 1)
    assert await poll(oauth, clock) is PollOutcome.EXPIRED_TOKEN
    assert await poll(oauth, clock, owner=MALLORY) is PollOutcome.INVALID_GRANT


async def test_s5_3_poll_denied_is_access_denied_even_too_early(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    await oauth.create_authorization(authorization(clock))
    assert await poll(oauth, clock) is PollOutcome.AUTHORIZATION_PENDING
    await oauth.deny(BRAND, at(clock), clock())
    assert await poll(oauth, clock) is PollOutcome.ACCESS_DENIED  # denied comes before slow_down
    clock.advance(600)
    assert await poll(oauth, clock) is PollOutcome.EXPIRED_TOKEN  # expired comes before denied


async def test_s5_3_first_poll_is_never_slow_down_then_interval_grows_by_5_for_good(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    await oauth.create_authorization(authorization(clock))
    assert await poll(oauth, clock) is PollOutcome.AUTHORIZATION_PENDING
    clock.advance(1)
    assert await poll(oauth, clock) is PollOutcome.SLOW_DOWN  # interval now 10, measured from here
    clock.advance(9)
    assert await poll(oauth, clock) is PollOutcome.SLOW_DOWN  # interval now 15
    clock.advance(15)
    assert await poll(oauth, clock) is PollOutcome.AUTHORIZATION_PENDING
    clock.advance(14)
    assert await poll(oauth, clock) is PollOutcome.SLOW_DOWN  # still 15, not back to 5: now 20
    found = await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock())
    assert found is not None
    assert found.interval == 20


async def test_s5_3_approved_poll_issues_once(oauth: OAuthStore, clock: ManualClock) -> None:
    await oauth.create_authorization(authorization(clock))
    assert await poll(oauth, clock) is PollOutcome.AUTHORIZATION_PENDING
    await oauth.approve(BRAND, at(clock), "user-42", ("orders:read",), clock())
    clock.advance(1)
    assert await poll(oauth, clock) is PollOutcome.SLOW_DOWN  # approved, but polled too early
    clock.advance(10)
    issued_at = clock()
    result = await oauth.poll(BRAND, DEVICE, ALICE.digest, issued_at, refresh=rt("rt-1"), grant_ttl=GRANT_TTL)
    expected = Grant(
        grant_id=gid("g-1"),
        brand_id=BRAND,
        client_id=PA,
        owner_digest=ALICE.digest,
        user="user-42",
        scopes=("orders:read",),
        issued_at=issued_at,
        expires_at=issued_at + GRANT_TTL,
    )
    assert result.outcome is PollOutcome.ISSUED
    assert result.grant == expected
    assert await oauth.get_grant(BRAND, gid("g-1"), clock()) == expected
    clock.advance(100)
    assert await poll(oauth, clock, grant_id="g-2", refresh="rt-2") is PollOutcome.INVALID_GRANT
    assert await oauth.get_grant(BRAND, gid("g-2"), clock()) is None
    found = await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock())
    assert found is not None
    assert found.status is AuthorizationStatus.REDEEMED


async def test_s5_3_concurrent_polls_issue_once(oauth: OAuthStore, clock: ManualClock) -> None:
    await oauth.create_authorization(authorization(clock))
    await oauth.approve(BRAND, at(clock), "user-42", ("orders:read",), clock())
    outcomes = await asyncio.gather(
        *(poll(oauth, clock, grant_id=f"g-{n}", refresh=f"rt-{n}") for n in range(20))
    )
    assert outcomes.count(PollOutcome.ISSUED) == 1
    assert outcomes.count(PollOutcome.INVALID_GRANT) == 19


async def rotation(
    oauth: OAuthStore, clock: ManualClock, old: str, new: str, *, brand_id: str = BRAND
) -> RefreshOutcome:
    """Just the outcome of rotating refresh token ``old`` of grant ``g-1`` to ``new``."""
    return (await oauth.rotate_refresh(brand_id, rt(old), rt(new), clock())).outcome


# --- consent sessions and single-use markers ----------------------------------------------------


async def test_s5_3_consent_session_is_taken_once(oauth: OAuthStore, clock: ManualClock) -> None:
    session = ConsentSession(device_hash=DEVICE, user="user-42", expires_at=clock() + 300)
    await oauth.put_consent_session(BRAND, sha("session-1"), session)
    assert await oauth.take_consent_session("globex", sha("session-1"), clock()) is None
    assert await oauth.take_consent_session(BRAND, sha("session-1"), clock()) == session
    assert await oauth.take_consent_session(BRAND, sha("session-1"), clock()) is None
    assert await oauth.take_consent_session(BRAND, sha("unknown"), clock()) is None


async def test_s5_3_consent_session_expires(oauth: OAuthStore, clock: ManualClock) -> None:
    session = ConsentSession(device_hash=DEVICE, user="user-42", expires_at=clock() + 300)
    await oauth.put_consent_session(BRAND, sha("session-1"), session)
    clock.advance(300)
    assert await oauth.take_consent_session(BRAND, sha("session-1"), clock()) is None


async def test_s5_3_landing_record_is_taken_once_and_expires(oauth: OAuthStore, clock: ManualClock) -> None:
    """The landing page's record: single use, per Brand, gone at its ``expires_at``."""
    record = LandingRecord(
        outcome="approved",
        scopes=("orders:read", "profile:read"),
        carried=("profile:read",),
        dropped=("orders:cancel",),
        expires_at=clock() + 300,
    )
    await oauth.put_landing(BRAND, sha("landing-1"), record)
    assert await oauth.take_landing("globex", sha("landing-1"), clock()) is None
    assert await oauth.take_landing(BRAND, sha("landing-1"), clock()) == record
    assert await oauth.take_landing(BRAND, sha("landing-1"), clock()) is None
    empty = LandingRecord(outcome="denied", scopes=(), carried=(), dropped=(), expires_at=clock() + 300)
    await oauth.put_landing(BRAND, sha("landing-2"), empty)
    clock.advance(299)
    assert await oauth.take_landing(BRAND, sha("landing-2"), clock()) == empty
    await oauth.put_landing(BRAND, sha("landing-3"), dataclasses.replace(empty, expires_at=clock() + 10))
    clock.advance(10)
    assert await oauth.take_landing(BRAND, sha("landing-3"), clock()) is None


async def test_s5_3_assertion_jti_is_used_once_within_its_ttl(oauth: OAuthStore, clock: ManualClock) -> None:
    assert await oauth.use_once(BRAND, sha("jti-1"), 300)
    assert not await oauth.use_once(BRAND, sha("jti-1"), 300)
    assert await oauth.use_once(BRAND, sha("jti-2"), 300)
    assert await oauth.use_once("globex", sha("jti-1"), 300)
    clock.advance(299)
    assert not await oauth.use_once(BRAND, sha("jti-1"), 300)
    clock.advance(1)
    assert await oauth.use_once(BRAND, sha("jti-1"), 300)


async def test_s5_3_concurrent_uses_of_one_marker_one_wins(oauth: OAuthStore) -> None:
    used = await asyncio.gather(*(oauth.use_once(BRAND, sha("jti-1"), 300) for _ in range(20)))
    assert used.count(True) == 1


# --- grants and refresh-token rotation (§5.4, RFC 9700 §4.14.2) ---------------------------------


async def test_s5_4_refresh_rotates_and_the_old_token_is_spent(oauth: OAuthStore, clock: ManualClock) -> None:
    grant = await issue(oauth, clock)
    rotated = await oauth.rotate_refresh(BRAND, rt("rt-1"), rt("rt-2"), clock())
    assert rotated.outcome is RefreshOutcome.ROTATED
    assert rotated.grant == grant
    again = await oauth.rotate_refresh(BRAND, rt("rt-2"), rt("rt-3"), clock())
    assert (again.outcome, again.grant) == (RefreshOutcome.ROTATED, grant)


async def test_s5_4_reused_refresh_token_revokes_the_grant(oauth: OAuthStore, clock: ManualClock) -> None:
    await issue(oauth, clock)
    await oauth.rotate_refresh(BRAND, rt("rt-1"), rt("rt-2"), clock())
    reused = await oauth.rotate_refresh(BRAND, rt("rt-1"), rt("rt-x"), clock())
    assert (reused.outcome, reused.grant) == (RefreshOutcome.REUSED, None)
    assert await oauth.get_grant(BRAND, gid("g-1"), clock()) is None
    # The current token stopped working too, and the spent one no longer says anything.
    assert await rotation(oauth, clock, "rt-2", "rt-3") is RefreshOutcome.INVALID
    assert await rotation(oauth, clock, "rt-1", "rt-4") is RefreshOutcome.INVALID
    assert await oauth.grant_of_refresh(BRAND, rt("rt-2"), clock()) is None


async def test_s5_4_unknown_or_foreign_refresh_token_is_invalid(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    """A grant id is public (receipts carry it): naming it without its family revokes nothing."""
    await issue(oauth, clock)
    unknown = RefreshToken("", "", sha("nope"))
    assert (await oauth.rotate_refresh(BRAND, unknown, rt("rt-2"), clock())).outcome is RefreshOutcome.INVALID
    forged = rt("rt-1", family="guessed")
    assert (await oauth.rotate_refresh(BRAND, forged, rt("rt-2"), clock())).outcome is RefreshOutcome.INVALID
    assert await oauth.grant_of_refresh(BRAND, forged, clock()) is None
    assert await oauth.grant_of_refresh(BRAND, rt("rt-1", gid("g-unknown")), clock()) is None
    assert await rotation(oauth, clock, "rt-1", "rt-2", brand_id="globex") is RefreshOutcome.INVALID
    assert await oauth.get_grant(BRAND, gid("g-1"), clock()) is not None
    assert await rotation(oauth, clock, "rt-1", "rt-2") is RefreshOutcome.ROTATED


async def test_s5_4_concurrent_rotations_rotate_once(oauth: OAuthStore, clock: ManualClock) -> None:
    await issue(oauth, clock)
    results = await asyncio.gather(
        *(oauth.rotate_refresh(BRAND, rt("rt-1"), rt(f"rt-new-{n}"), clock()) for n in range(20))
    )
    outcomes = [result.outcome for result in results]
    assert outcomes.count(RefreshOutcome.ROTATED) == 1
    assert outcomes.count(RefreshOutcome.REUSED) + outcomes.count(RefreshOutcome.INVALID) == 19


async def test_s5_4_grant_of_refresh_knows_current_and_spent_tokens(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    await issue(oauth, clock)
    await oauth.rotate_refresh(BRAND, rt("rt-1"), rt("rt-2"), clock())
    assert await oauth.grant_of_refresh(BRAND, rt("rt-1"), clock()) == gid("g-1")
    assert await oauth.grant_of_refresh(BRAND, rt("rt-2"), clock()) == gid("g-1")
    # Any token of the family names it (an older one is spent, not unknown); another family does not.
    assert await oauth.grant_of_refresh(BRAND, rt("older"), clock()) == gid("g-1")
    assert await oauth.grant_of_refresh(BRAND, rt("rt-2", family="another"), clock()) is None
    assert await oauth.grant_of_refresh(BRAND, RefreshToken("", "", sha("unknown")), clock()) is None
    assert await oauth.grant_of_refresh("globex", rt("rt-2"), clock()) is None


async def test_s5_5_revoke_grant_ends_it_and_its_tokens(oauth: OAuthStore, clock: ManualClock) -> None:
    await issue(oauth, clock)
    assert await oauth.revoke_grant(BRAND, gid("g-1"))
    assert not await oauth.revoke_grant(BRAND, gid("g-1"))
    assert not await oauth.revoke_grant(BRAND, "unknown")
    assert await oauth.get_grant(BRAND, gid("g-1"), clock()) is None
    assert await oauth.grant_of_refresh(BRAND, rt("rt-1"), clock()) is None
    assert await rotation(oauth, clock, "rt-1", "rt-2") is RefreshOutcome.INVALID


async def test_s5_3_grants_of_user_oldest_first_without_dead_ones(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    first = await issue(oauth, clock, grant_id="g-b", refresh="rt-b")
    clock.advance(10)
    second = await issue(oauth, clock, grant_id="g-a", refresh="rt-a", owner=MALLORY)
    clock.advance(10)
    third = await issue(oauth, clock, grant_id="g-c", refresh="rt-c", owner=BOB)
    await issue(oauth, clock, grant_id="g-other", user="user-7", refresh="rt-o")
    assert await oauth.grants_of_user(BRAND, "user-42", clock()) == [first, second, third]
    await oauth.revoke_grant(BRAND, gid("g-a", MALLORY))
    assert await oauth.grants_of_user(BRAND, "user-42", clock()) == [first, third]
    clock.advance(GRANT_TTL - 20)  # the first has run out, the third has 20 s left
    assert await oauth.grants_of_user(BRAND, "user-42", clock()) == [third]
    assert await oauth.grants_of_user(BRAND, "nobody", clock()) == []
    assert await oauth.grants_of_user("globex", "user-42", clock()) == []


async def test_grants_of_owner_are_one_pa_and_subs_whatever_the_user(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    """What erasing a (personal agent, ``sub``) revokes: its grants, by whichever Brand user approved them."""
    first = await issue(oauth, clock, grant_id="g-b", refresh="rt-b")
    clock.advance(10)
    await issue(oauth, clock, grant_id="g-a", refresh="rt-a", owner=MALLORY)
    second = await issue(oauth, clock, grant_id="g-c", user="user-7", refresh="rt-c")
    assert await oauth.grants_of_owner(BRAND, ALICE.digest, clock()) == [first, second]
    await oauth.revoke_grant(BRAND, gid("g-b"))
    assert await oauth.grants_of_owner(BRAND, ALICE.digest, clock()) == [second]
    clock.advance(GRANT_TTL)
    assert await oauth.grants_of_owner(BRAND, ALICE.digest, clock()) == []
    assert await oauth.grants_of_owner("globex", MALLORY.digest, clock()) == []


async def records(store: ConversationStore) -> int:
    """How many records the backend holds: keys of the keyspace, or of the (flushed) Redis database."""
    if isinstance(store, MemoryStore):
        return len(store.keyspace.entries)
    assert isinstance(store, RedisStore)
    if isinstance(store.redis, ClusterPipe):
        return sum(int(size) for size in (await store.redis.on_each_primary("DBSIZE")).values())
    return int(await store.redis.execute("DBSIZE"))


async def test_rfc9700_a_refresh_family_stays_one_record_however_often_it_rotates(
    oauth: OAuthStore, store: ConversationStore, clock: ManualClock
) -> None:
    """Issue 17 row 4: a spent token leaves nothing behind; the family still knows it as spent."""
    await issue(oauth, clock)
    held = await records(store)
    for n in range(1, 101):
        assert await rotation(oauth, clock, f"rt-{n}", f"rt-{n + 1}") is RefreshOutcome.ROTATED
    assert await records(store) == held
    assert await oauth.grant_of_refresh(BRAND, rt("rt-50"), clock()) == gid("g-1")


GRANT_RECORDS, GRANT_BYTES = 4, 1264
"""What a grant costs (docs/sizing.md): the grant with its refresh family, its slot, and its entries in
the Brand user's and the (agent, ``sub``)'s grant indexes; on one Redis, their ``MEMORY USAGE``
(1,200 B on Redis 7.0)."""


async def test_s5_4_a_grant_is_four_records_and_on_redis_at_most_1264_bytes(
    oauth: OAuthStore, store: ConversationStore, clock: ManualClock
) -> None:
    """Issue 17 row 4, the figure sizing rests on: what the redemption adds to its authorization's
    records (which go minutes later), refreshes adding none (the test above)."""
    created = authorization(clock, device_hash=sha("dc-g-1"), user_code="UC-g-1")
    assert await oauth.create_authorization(created)
    assert await oauth.approve(BRAND, created, "user-42", ("orders:read",), clock())
    one_redis = isinstance(store, RedisStore) and not isinstance(store.redis, ClusterPipe)
    pipe = store.redis if isinstance(store, RedisStore) and one_redis else None
    before = set(await pipe.execute("KEYS", "*")) if pipe is not None else set()
    authorized = await records(store)
    assert await poll(oauth, clock, device_hash=sha("dc-g-1")) is PollOutcome.ISSUED
    assert await records(store) - authorized == GRANT_RECORDS
    if pipe is not None:
        added = set(await pipe.execute("KEYS", "*")) - before
        used = [int(await pipe.execute("MEMORY", "USAGE", key)) for key in added]
        assert len(added) == GRANT_RECORDS
        assert sum(used) <= GRANT_BYTES, used


@pytest.mark.parametrize("back", [1, 2, 40])
async def test_rfc9700_the_previous_or_an_older_token_of_the_family_revokes_it(
    oauth: OAuthStore, clock: ManualClock, back: int
) -> None:
    """RFC 9700 §4.14.2: any token of the family but the current one is reuse; the family ends."""
    await issue(oauth, clock)
    for n in range(1, 51):
        await rotation(oauth, clock, f"rt-{n}", f"rt-{n + 1}")
    assert await rotation(oauth, clock, f"rt-{51 - back}", "rt-x") is RefreshOutcome.REUSED
    assert await oauth.get_grant(BRAND, gid("g-1"), clock()) is None
    assert await rotation(oauth, clock, "rt-51", "rt-y") is RefreshOutcome.INVALID
    assert await oauth.grant_of_refresh(BRAND, rt("rt-51"), clock()) is None


# --- the refresh grace (issue 18 I2) -----------------------------------------------------------


async def test_rfc9700_the_previous_token_within_the_grace_gets_the_kept_answer_and_changes_nothing(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    await issue(oauth, clock)
    rotated = await oauth.rotate_refresh(BRAND, rt("rt-1"), rt("rt-2"), clock(), grace=30, answer=b"sealed-2")
    assert rotated.outcome is RefreshOutcome.ROTATED
    clock.advance(29.999)  # just inside
    for attempt in ("rt-x", "rt-y"):
        retried = await oauth.rotate_refresh(
            BRAND, rt("rt-1"), rt(attempt), clock(), grace=30, answer=b"other"
        )
        assert retried == RefreshResult(RefreshOutcome.RETRIED, answer=b"sealed-2")
    # The family did not move: the token that answer carries is still the current one.
    assert await rotation(oauth, clock, "rt-2", "rt-3") is RefreshOutcome.ROTATED


async def test_rfc9700_the_previous_token_just_after_the_grace_is_reuse(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    await issue(oauth, clock)
    await oauth.rotate_refresh(BRAND, rt("rt-1"), rt("rt-2"), clock(), grace=30, answer=b"sealed-2")
    clock.advance(30)  # the deadline itself is past the grace
    assert await rotation(oauth, clock, "rt-1", "rt-x") is RefreshOutcome.REUSED
    assert await oauth.get_grant(BRAND, gid("g-1"), clock()) is None
    assert await rotation(oauth, clock, "rt-2", "rt-3") is RefreshOutcome.INVALID


async def test_rfc9700_each_rotation_replaces_the_kept_answer_and_no_grace_keeps_none(
    oauth: OAuthStore, store: ConversationStore, clock: ManualClock
) -> None:
    await issue(oauth, clock)
    held = await records(store)
    await oauth.rotate_refresh(BRAND, rt("rt-1"), rt("rt-2"), clock(), grace=30, answer=b"sealed-2")
    await oauth.rotate_refresh(BRAND, rt("rt-2"), rt("rt-3"), clock(), grace=30, answer=b"sealed-3")
    assert await records(store) == held + 1  # one kept answer per grant, whatever the rotations
    retried = await oauth.rotate_refresh(BRAND, rt("rt-2"), rt("rt-x"), clock(), grace=30, answer=b"")
    assert retried.answer == b"sealed-3"
    # The first token is two back: no answer is kept for it.
    assert await rotation(oauth, clock, "rt-1", "rt-x") is RefreshOutcome.REUSED
    await issue(oauth, clock, grant_id="g-2", refresh="rt-a", owner=BOB)
    await oauth.rotate_refresh(
        BRAND, rt("rt-a", gid("g-2", BOB)), rt("rt-b", gid("g-2", BOB)), clock(), grace=0, answer=b"sealed"
    )
    assert await oauth.rotate_refresh(
        BRAND, rt("rt-a", gid("g-2", BOB)), rt("rt-c", gid("g-2", BOB)), clock()
    ) == RefreshResult(RefreshOutcome.REUSED)


async def test_s5_3_a_new_grant_supersedes_the_live_one_of_its_user_agent_and_sub(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    """Issue 17 row 4: one live grant per (Brand user, agent, ``sub``); the new one says what it carried."""
    await issue(oauth, clock, grant_id="g-1")
    other_user = await issue(oauth, clock, grant_id="g-7", user="user-7")
    other_sub = await issue(oauth, clock, grant_id="g-b", owner=BOB)
    clock.advance(10)
    device_hash = sha("dc-step-up")
    assert await oauth.create_authorization(authorization(clock, device_hash=device_hash, user_code="UC-UP"))
    scopes = ("orders:read", "orders:cancel")
    step_up = at(clock, device_hash)
    assert await oauth.approve(BRAND, step_up, "user-42", scopes, clock(), carried=("orders:read",))
    approved = await oauth.authorization_by_user_code(BRAND, "UC-UP", clock())
    assert approved is not None
    assert approved.carried == ("orders:read",)
    result = await oauth.poll(
        BRAND, device_hash, ALICE.digest, clock(), refresh=rt("rt-up", gid("g-2")), grant_ttl=GRANT_TTL
    )
    assert result.grant is not None
    assert result.superseded
    assert (result.grant.scopes, result.grant.carried) == (scopes, ("orders:read",))
    assert await oauth.get_grant(BRAND, gid("g-2"), clock()) == result.grant
    # The superseded grant is revoked: its refresh family with it.
    assert await oauth.get_grant(BRAND, gid("g-1"), clock()) is None
    assert await rotation(oauth, clock, "rt-1", "rt-again") is RefreshOutcome.INVALID
    assert await oauth.live_grant_of(BRAND, "user-42", ALICE.digest, clock()) == result.grant
    # Another user of that agent and sub, and another sub of that user, keep theirs.
    assert await oauth.live_grant_of(BRAND, "user-7", ALICE.digest, clock()) == other_user
    assert await oauth.live_grant_of(BRAND, "user-42", BOB.digest, clock()) == other_sub
    assert await oauth.grants_of_user(BRAND, "user-42", clock()) == [other_sub, result.grant]
    assert await oauth.grants_of_owner(BRAND, ALICE.digest, clock()) == [other_user, result.grant]
    assert await oauth.live_grant_of(BRAND, "nobody", ALICE.digest, clock()) is None
    await oauth.revoke_grant(BRAND, gid("g-2"))
    assert await oauth.live_grant_of(BRAND, "user-42", ALICE.digest, clock()) is None


async def test_s5_3_a_grant_revoked_before_the_redemption_hands_no_scope_on(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    """Carried scopes are what the superseded grant holds when the new one is issued, not at approval."""
    await issue(oauth, clock, grant_id="g-1")
    device_hash = sha("dc-step-up")
    assert await oauth.create_authorization(authorization(clock, device_hash=device_hash, user_code="UC-UP"))
    scopes = ("orders:read", "orders:cancel")
    step_up = at(clock, device_hash)
    assert await oauth.approve(BRAND, step_up, "user-42", scopes, clock(), carried=("orders:read",))
    assert await oauth.revoke_grant(BRAND, gid("g-1"))
    result = await oauth.poll(
        BRAND, device_hash, ALICE.digest, clock(), refresh=rt("rt-up", gid("g-2")), grant_ttl=GRANT_TTL
    )
    assert result.grant is not None
    assert not result.superseded  # it was revoked already
    assert (result.grant.scopes, result.grant.carried) == (("orders:cancel",), ())
    assert await oauth.get_grant(BRAND, gid("g-2"), clock()) == result.grant


class _CountingEntries(dict[Any, Any]):
    """The memory keyspace's dictionary, counting every lookup."""

    reads = 0

    def get(self, key: Any, default: Any = None) -> Any:
        _CountingEntries.reads += 1
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        _CountingEntries.reads += 1
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        _CountingEntries.reads += 1
        return super().__contains__(key)


async def test_s5_3_consent_reads_of_the_live_grant_do_not_grow_with_the_users_grants(
    oauth: OAuthStore, store: ConversationStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 17 row 4: what consent reads (:meth:`live_grant_of`) costs the same with 1 or 200 of the
    user's live grants: reads counted (keyspace lookups, or Redis commands), not timed."""
    reads = [0]
    if isinstance(store, MemoryStore):
        store.keyspace.cache._cache = _CountingEntries(store.keyspace.entries)

        def counted() -> int:
            return _CountingEntries.reads
    else:
        assert isinstance(store, RedisStore)
        pipe = store.redis
        execute, run = pipe.execute, pipe.run

        async def counting_execute(*args: Any, **kwargs: Any) -> Any:
            reads[0] += 1
            return await execute(*args, **kwargs)

        async def counting_run(*args: Any, **kwargs: Any) -> Any:
            reads[0] += 1
            return await run(*args, **kwargs)

        monkeypatch.setattr(pipe, "execute", counting_execute)
        monkeypatch.setattr(pipe, "run", counting_run)

        def counted() -> int:
            return reads[0]

    async def reads_of_live_grant() -> int:
        before = counted()
        assert await oauth.live_grant_of(BRAND, "user-42", ALICE.digest, clock()) is not None
        return counted() - before

    await issue(oauth, clock)
    alone = await reads_of_live_grant()
    for n in range(200):
        await issue(oauth, clock, grant_id=f"g-sub-{n}", owner=Owner(BRAND, PA, f"sub-{n}"))
    assert len(await oauth.grants_of_user(BRAND, "user-42", clock())) == 201
    assert await reads_of_live_grant() == alone


async def test_s5_4_everything_expires_with_the_clock(oauth: OAuthStore, clock: ManualClock) -> None:
    grant = await issue(oauth, clock)
    await oauth.rotate_refresh(BRAND, rt("rt-1"), rt("rt-2"), clock())
    clock.advance(GRANT_TTL - 1)
    assert await oauth.get_grant(BRAND, gid("g-1"), clock()) == grant
    clock.advance(1)
    assert await oauth.get_grant(BRAND, gid("g-1"), clock()) is None
    assert await oauth.grant_of_refresh(BRAND, rt("rt-2"), clock()) is None
    assert await oauth.grants_of_user(BRAND, "user-42", clock()) == []
    # An expired grant is not "reused": the spent token is just invalid, like the current one.
    assert await rotation(oauth, clock, "rt-1", "rt-3") is RefreshOutcome.INVALID
    assert await rotation(oauth, clock, "rt-2", "rt-3") is RefreshOutcome.INVALID
    assert not await oauth.revoke_grant(BRAND, gid("g-1"))


async def test_s5_3_a_new_authorization_round_trips_every_field(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    """Times exactly as given (not rounded to a unit), scopes in order, and a first poll is not early."""
    created = dataclasses.replace(
        authorization(clock), expires_at=clock() + 600.123456789, scopes=("a:b", "c")
    )
    assert await oauth.create_authorization(created)
    assert await oauth.authorization_by_user_code(BRAND, "WDJB-MJHT", clock()) == created
    now = clock() + 0.000123
    result = await oauth.poll(BRAND, DEVICE, ALICE.digest, now, refresh=rt("rt-1"), grant_ttl=GRANT_TTL)
    assert result.outcome is PollOutcome.AUTHORIZATION_PENDING
    await oauth.approve(BRAND, at(clock), "user-42", ("c", "a:b"), now)
    later = now + 6
    issued = await oauth.poll(BRAND, DEVICE, ALICE.digest, later, refresh=rt("rt-1"), grant_ttl=GRANT_TTL)
    assert issued.grant is not None
    assert (issued.grant.scopes, issued.grant.issued_at) == (("c", "a:b"), later)
    assert await oauth.get_grant(BRAND, gid("g-1"), later) == issued.grant


# --- Redis: two replicas on one Redis, and what lands in it -------------------------------------


@pytest.fixture
async def replicas(redis_url: str, clock: ManualClock) -> AsyncIterator[tuple[OAuthStore, OAuthStore]]:
    """Two gateways' stores on one Redis: separate connections, so their commands truly interleave."""
    stores = [RedisStore(CacheConfig(url=redis_url), clock=clock) for _ in range(2)]
    yield open_oauth_store(stores[0]), open_oauth_store(stores[1])
    for store in stores:
        await store.close()


async def test_s5_3_redis_two_replicas_one_redemption(
    replicas: tuple[OAuthStore, OAuthStore], clock: ManualClock
) -> None:
    one, two = replicas
    await one.create_authorization(authorization(clock))
    await two.approve(BRAND, at(clock), "user-42", ("orders:read",), clock())
    outcomes = await asyncio.gather(
        *(poll((one, two)[n % 2], clock, grant_id=f"g-{n}", refresh=f"rt-{n}") for n in range(20))
    )
    assert outcomes.count(PollOutcome.ISSUED) == 1
    assert outcomes.count(PollOutcome.INVALID_GRANT) == 19


async def test_s5_4_redis_two_replicas_one_rotation(
    replicas: tuple[OAuthStore, OAuthStore], clock: ManualClock
) -> None:
    one, two = replicas
    await issue(one, clock)
    results = await asyncio.gather(
        *((one, two)[n % 2].rotate_refresh(BRAND, rt("rt-1"), rt(f"rt-new-{n}"), clock()) for n in range(20))
    )
    outcomes = [result.outcome for result in results]
    assert outcomes.count(RefreshOutcome.ROTATED) == 1
    # Every loser saw a spent token of a live grant or, once one of them revoked it, a dead grant.
    assert outcomes.count(RefreshOutcome.REUSED) >= 1
    assert await two.get_grant(BRAND, "g-1", clock()) is None


async def test_redis_oauth_keys_expire_and_hold_no_secret_in_clear_previous_layout(
    redis_store: RedisStore, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    """``cache.key_layout: previous`` writes exactly the keys the previous release writes (issue 20)."""
    oauth = RedisOAuthStore(redis_store.redis, clock=redis_store.clock, tagged=False)
    assert not keys_tagged(oauth.new_grant_id(ALICE.digest))
    await issue(oauth, clock, grant_id=LEGACY_GRANT)
    await oauth.rotate_refresh(BRAND, rt("rt-1", LEGACY_GRANT), rt("rt-2", LEGACY_GRANT), clock())
    await oauth.put_consent_session(
        BRAND, sha("session"), ConsentSession(DEVICE, "user-42", expires_at=clock() + 300)
    )
    assert await oauth.use_once(BRAND, sha("jti"), 300)
    names = sorted(k.decode() if isinstance(k, bytes) else k for k in await redis_client.keys("*"))
    kinds = {name.split(":")[3] for name in names if ":oauth:" in name}
    # No key per refresh token: the family lives in the grant's hash.
    assert kinds == {"device", "user_code", "consent", "once", "user", "owner", "owner_authz", "user_authz"}
    assert store_keys.grant_key(BRAND, LEGACY_GRANT) in names
    assert not [name for name in names if "{" in name]
    slot = store_keys.grant_slot_key(BRAND, store_keys.user_digest(BRAND, "user-42"), ALICE.digest)
    assert await redis_client.get(slot) == LEGACY_GRANT.encode()
    assert all(name.startswith(f"pact:{BRAND}:") for name in names)
    assert "user-42" not in " ".join(names)
    for name in names:
        assert await redis_client.pttl(name) > 0, name
    grant = await redis_client.hgetall(store_keys.grant_key(BRAND, LEGACY_GRANT))
    assert grant[b"o"] == ALICE.digest.encode()
    assert (grant[b"f"], grant[b"r"], grant[b"p"]) == (
        sha(f"family-{LEGACY_GRANT}").encode(),
        sha("rt-2").encode(),
        sha("rt-1").encode(),
    )


LEGACY_GRANT = store_keys.GRANT_ID_PREFIX + "previous-release-id"
"""A grant id without an owner's tag, as ``key_layout: previous`` (and the previous release) mints."""


def keys_tagged(grant_id: str) -> bool:
    """Whether ``grant_id`` carries an owner's tag (issue 20), which puts its grant under that tag."""
    return "{" in store_keys.grant_key(BRAND, grant_id)


async def test_redis_oauth_keys_expire_and_hold_no_secret_in_clear_tagged_layout(
    redis_store: RedisStore, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    """Issue 20: a grant's id carries its owner's tag, and the grant, its grace, slot, device code and the
    owner's indices sit under that tag; the user's indices under the user's; single keys stay as they were."""
    oauth = open_oauth_store(redis_store)
    grant_id = oauth.new_grant_id(ALICE.digest)
    tag = store_keys.owner_tag(ALICE.digest)
    assert grant_id.startswith(f"a2agrant_{tag}")
    assert len(grant_id) == 39
    await issue(oauth, clock, grant_id=grant_id)
    old, new = rt("rt-1", grant_id), rt("rt-2", grant_id)
    rotated = await oauth.rotate_refresh(BRAND, old, new, clock(), grace=9, answer=b"a")
    assert rotated.outcome is RefreshOutcome.ROTATED
    await oauth.put_consent_session(
        BRAND, sha("session"), ConsentSession(DEVICE, "user-42", expires_at=clock() + 300)
    )
    assert await oauth.use_once(BRAND, sha("jti"), 300)
    names = sorted(k.decode() if isinstance(k, bytes) else k for k in await redis_client.keys("*"))
    assert {name.split(":")[3] for name in names if ":oauth:" in name} == {"user_code", "consent", "once"}
    digest = store_keys.user_digest(BRAND, "user-42")
    tagged = {(name.split("}")[1].split(":")[0], name.split("{")[1][:8]) for name in names if "{" in name}
    user_tag = store_keys.owner_tag(digest)
    by_owner = {(kind, tag) for kind in ("o.d", "o.a", "o.o", "o.s", "o.g", "o.r")}
    assert tagged == by_owner | {("o.A", user_tag), ("o.u", user_tag)}
    assert store_keys.grant_key(BRAND, grant_id) in names
    slot = store_keys.oauth_tagged_key(BRAND, tag, "s", digest + ALICE.digest)
    assert await redis_client.get(slot) == grant_id.encode()
    assert "user-42" not in " ".join(names)
    for name in names:
        assert await redis_client.pttl(name) > 0, name


async def test_redis_grants_of_user_drops_dead_ids(
    redis_store: RedisStore, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    oauth = open_oauth_store(redis_store)
    alices, mallorys = gid("g-1"), gid("g-2", MALLORY)
    await issue(oauth, clock, grant_id=alices, refresh="rt-1")
    await issue(oauth, clock, grant_id=mallorys, refresh="rt-2", owner=MALLORY)
    await oauth.revoke_grant(BRAND, alices)
    digest = store_keys.user_digest(BRAND, "user-42")
    user_set = store_keys.oauth_tagged_key(BRAND, store_keys.owner_tag(digest), "u", digest)
    assert await redis_client.smembers(user_set) == {alices.encode(), mallorys.encode()}
    assert [grant.grant_id for grant in await oauth.grants_of_user(BRAND, "user-42", clock())] == [mallorys]
    assert await redis_client.smembers(user_set) == {mallorys.encode()}


async def test_redis_records_of_the_previous_release_keep_working_until_they_expire(
    redis_store: RedisStore, redis_client: aioredis.Redis, clock: ManualClock
) -> None:
    """Issue 17 row 4: a grant and refresh keys as the previous release wrote them (a ``refresh`` key per
    token, the grant's hash without a family) still serve turns and refreshes; the current old token
    moves the grant into a family, after which an old spent token is reuse, as it was."""
    oauth = open_oauth_store(redis_store)
    now, grant_key = clock(), store_keys.grant_key(BRAND, "g-old")
    ttl_ms = GRANT_TTL * 1000
    await redis_client.hset(
        grant_key,
        mapping={
            "o": ALICE.digest, "c": PA, "u": "user-42", "s": "orders:read",
            "i": repr(now), "e": repr(now + GRANT_TTL), "r": sha("old-2"),
        },
    )  # fmt: skip
    for name in ("old-1", "old-2"):
        await redis_client.set(store_keys.oauth_key(BRAND, "refresh", sha(name)), "g-old", px=ttl_ms)
    for kind, digest in (("user", store_keys.user_digest(BRAND, "user-42")), ("owner", ALICE.digest)):
        await redis_client.sadd(store_keys.oauth_key(BRAND, kind, digest), "g-old")
    await redis_client.pexpire(grant_key, ttl_ms)
    old = await oauth.get_grant(BRAND, "g-old", now)
    assert old is not None
    assert (old.scopes, old.carried) == (("orders:read",), ())
    assert (old.details, old.carried_details) == ((), ())  # RFC 9396 details came later: none
    assert await oauth.grants_of_user(BRAND, "user-42", now) == [old]
    check = GrantCheck(grant_key, store_keys.user_digest(BRAND, "user-42"))
    claim = await redis_store.begin_turn(ALICE, None, "m-1", "hello", "ctx-old", grant=check)
    assert claim.status is TurnStatus.NEW
    legacy = RefreshToken("", "", sha("old-2"))
    assert await oauth.grant_of_refresh(BRAND, legacy, now) == "g-old"
    rotated = await oauth.rotate_refresh(BRAND, legacy, rt("new-1", "g-old"), now)
    assert (rotated.outcome, rotated.grant) == (RefreshOutcome.ROTATED, old)
    assert await rotation_of(oauth, "new-1", "new-2", now) is RefreshOutcome.ROTATED
    spent = RefreshToken("", "", sha("old-1"))
    assert (await oauth.rotate_refresh(BRAND, spent, rt("x", "g-old"), now)).outcome is RefreshOutcome.REUSED
    assert await oauth.get_grant(BRAND, "g-old", now) is None


async def rotation_of(oauth: OAuthStore, old: str, new: str, now: float) -> RefreshOutcome:
    return (await oauth.rotate_refresh(BRAND, rt(old, "g-old"), rt(new, "g-old"), now)).outcome


async def test_issue20_one_live_grant_per_slot_whichever_layout_wrote_it(
    redis_store: RedisStore, clock: ManualClock
) -> None:
    """§5.3 during a switch of ``cache.key_layout``: replicas writing either layout supersede each other's
    grant of the same (user, agent, ``sub``), and both read the live one."""
    tagged = RedisOAuthStore(redis_store.redis, clock=redis_store.clock)
    previous = RedisOAuthStore(redis_store.redis, clock=redis_store.clock, tagged=False)
    first = await issue(tagged, clock, grant_id=tagged.new_grant_id(ALICE.digest))
    second = await issue(previous, clock, grant_id=previous.new_grant_id(ALICE.digest), refresh="rt-2")
    assert await tagged.get_grant(BRAND, first.grant_id, clock()) is None
    third = await issue(tagged, clock, grant_id=tagged.new_grant_id(ALICE.digest), refresh="rt-3")
    assert await previous.get_grant(BRAND, second.grant_id, clock()) is None
    for oauth in (tagged, previous):
        live = await oauth.live_grant_of(BRAND, "user-42", ALICE.digest, clock())
        assert live == third
        assert await oauth.grants_of_user(BRAND, "user-42", clock()) == [third]
        assert await oauth.grants_of_owner(BRAND, ALICE.digest, clock()) == [third]


async def test_l4_a_brand_user_holds_at_most_max_user_grants_the_oldest_superseded(
    oauth: OAuthStore, clock: ManualClock
) -> None:
    """Issue 28 L4: one Brand account delegating to fresh ``sub`` after fresh ``sub`` (2,000 grants
    in 43 s before) keeps its newest grants only; the oldest are revoked, tokens and all."""
    grants = []
    for index in range(5):
        owner = Owner(BRAND, ALICE.issuer, f"fresh-sub-{index}")
        grants.append(
            await issue(
                oauth, clock, grant_id=f"g-{index}", refresh=f"rt-{index}", owner=owner, max_user_grants=3
            )
        )
        clock.advance(1)
    listed = await oauth.grants_of_user(BRAND, "user-42", clock())
    assert [grant.grant_id for grant in listed] == [grant.grant_id for grant in grants[2:]]
    for old in grants[:2]:
        assert await oauth.get_grant(BRAND, old.grant_id, clock()) is None
        rotated = await oauth.rotate_refresh(
            BRAND, rt(f"rt-{grants.index(old)}", old.grant_id), rt("rt-new", old.grant_id), clock()
        )
        assert rotated.outcome is RefreshOutcome.INVALID
    # Another user's grants are theirs: the cap is per Brand user.
    other = await issue(oauth, clock, grant_id="g-other", user="user-7", refresh="rt-o", max_user_grants=3)
    assert await oauth.get_grant(BRAND, other.grant_id, clock()) is not None
    assert len(await oauth.grants_of_user(BRAND, "user-42", clock())) == 3
