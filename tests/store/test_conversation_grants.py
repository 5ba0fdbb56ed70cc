"""§5.5 in the begin-turn step: a delegated turn's grant and Brand user, checked with no extra round trip.

Grants are made through the §5 store (:func:`open_oauth_store`) beside the conversation store,
as the gateway makes them, once per backend.
"""

from __future__ import annotations

import hashlib

import pytest

from gateway.store import ConversationStore, Owner, TurnStatus
from gateway.store import keys as store_keys
from gateway.store.base import GrantCheck
from gateway.store.factory import open_oauth_store
from gateway.store.gcra import Hit, Rule
from gateway.store.oauth import DeviceAuthorization, OAuthStore, PollOutcome, RefreshToken
from gateway.store.redis import RedisStore
from tests.support.commands import recorded_commands
from tests.support.delegation import grant_id
from tests.support.pa import ManualClock

BRAND = "acme"
ALICE = Owner(BRAND, "https://pa.example", "alice")
BOB = Owner(BRAND, "https://pa.example", "bob")
GRANT_TTL = 3600


@pytest.fixture
def oauth(store: ConversationStore) -> OAuthStore:
    return open_oauth_store(store)


async def grant(
    oauth: OAuthStore, clock: ManualClock, name: str, *, user: str = "user-42", owner: Owner = ALICE
) -> GrantCheck:
    """Grant ``name`` issued through the §5 flow, as the check a turn under its delegation token carries."""
    device_hash = hashlib.sha256(name.encode()).hexdigest()
    created = DeviceAuthorization(
        device_hash=device_hash,
        user_code=f"UC-{name}",
        brand_id=BRAND,
        client_id=owner.issuer,
        owner_digest=owner.digest,
        scopes=("orders:read",),
        expires_at=clock() + 600,
        interval=5,
    )
    await oauth.create_authorization(created)
    await oauth.approve(BRAND, created, user, ("orders:read",), clock())
    issued = grant_id(name, owner)
    refresh = RefreshToken(issued, "family", "rt")
    result = await oauth.poll(BRAND, device_hash, owner.digest, clock(), refresh=refresh, grant_ttl=GRANT_TTL)
    assert result.outcome is PollOutcome.ISSUED
    return GrantCheck(store_keys.grant_key(BRAND, issued), store_keys.user_digest(BRAND, user))


def never_issued() -> GrantCheck:
    """The check of a grant of Alice's that was never issued (or has expired and gone)."""
    return GrantCheck(
        store_keys.grant_key(BRAND, grant_id("never", ALICE)), store_keys.user_digest(BRAND, "user-42")
    )


async def status(
    store: ConversationStore,
    context_id: str | None,
    message_id: str,
    check: GrantCheck | None = None,
    *,
    text: str = "x",
    new_context_id: str = "ctx-new",
    owner: Owner = ALICE,
) -> TurnStatus:
    """What begin_turn decided, when that is all a line needs to look at."""
    claim = await store.begin_turn(owner, context_id, message_id, text, new_context_id, grant=check)
    return claim.status


async def test_s5_5_live_grant_runs_the_turn(
    store: ConversationStore, oauth: OAuthStore, clock: ManualClock
) -> None:
    check = await grant(oauth, clock, "g-1")
    first = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1", grant=check)
    assert (first.status, first.context_id, first.new_conversation) == (TurnStatus.NEW, "ctx-1", True)
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    second = await store.begin_turn(ALICE, "ctx-1", "m2", "more", "unused", grant=check)
    assert (second.status, second.new_conversation) == (TurnStatus.NEW, False)


async def test_s5_5_revoked_grant_is_refused_and_claims_nothing(
    store: ConversationStore, oauth: OAuthStore, clock: ManualClock
) -> None:
    check = await grant(oauth, clock, "g-1")
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1", grant=check)
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    await oauth.revoke_grant(BRAND, grant_id("g-1", ALICE))
    assert await status(store, "ctx-1", "m2", check) is TurnStatus.GRANT_REVOKED
    assert await status(store, None, "m3", check, new_context_id="ctx-2") is TurnStatus.GRANT_REVOKED
    # Not even the stored reply is served under a revoked grant.
    assert await status(store, "ctx-1", "m1", check) is TurnStatus.GRANT_REVOKED
    # Nothing was claimed: the same turns run under §3, and ctx-2 was never opened.
    assert await status(store, "ctx-1", "m2") is TurnStatus.NEW
    assert await status(store, "ctx-2", "m4") is TurnStatus.UNKNOWN_CONTEXT


async def test_s5_5_unknown_or_expired_grant_is_revoked(
    store: ConversationStore, oauth: OAuthStore, clock: ManualClock
) -> None:
    unknown = never_issued()
    assert await status(store, None, "m1", unknown) is TurnStatus.GRANT_REVOKED
    check = await grant(oauth, clock, "g-1")
    clock.advance(GRANT_TTL)
    assert await status(store, None, "m1", check) is TurnStatus.GRANT_REVOKED


async def test_s5_5_grant_of_another_owner_is_revoked(
    store: ConversationStore, oauth: OAuthStore, clock: ManualClock
) -> None:
    """A grant is bound to (Brand, PA, ``sub``): Bob's token on Alice's turn is no grant of hers."""
    bobs = await grant(oauth, clock, "g-bob", owner=BOB)
    assert await status(store, None, "m1", bobs) is TurnStatus.GRANT_REVOKED
    assert await status(store, None, "m1", bobs, owner=BOB) is TurnStatus.NEW


async def test_s5_5_context_of_one_user_refuses_another(
    store: ConversationStore, oauth: OAuthStore, clock: ManualClock
) -> None:
    as_42 = await grant(oauth, clock, "g-1", user="user-42")
    as_7 = await grant(oauth, clock, "g-2", user="user-7")
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1", grant=as_42)
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    assert await status(store, "ctx-1", "m2", as_7) is TurnStatus.USER_MISMATCH
    # A replay is the first user's reply: not served to the other one.
    assert await status(store, "ctx-1", "m1", as_7, text="hello") is TurnStatus.USER_MISMATCH
    # Nor does a retried first message (no contextId) land the other user in it.
    assert await status(store, None, "m1", as_7, text="hello") is TurnStatus.USER_MISMATCH
    assert await status(store, "ctx-1", "m2", as_42) is TurnStatus.NEW


async def test_s5_5_replay_is_served_to_the_same_user(
    store: ConversationStore, oauth: OAuthStore, clock: ManualClock
) -> None:
    check = await grant(oauth, clock, "g-1")
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1", grant=check)
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    replay = await store.begin_turn(ALICE, "ctx-1", "m1", "hello", "u", grant=check)
    assert (replay.status, replay.reply) == (TurnStatus.REPLAY, b"r1")
    retried = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-2", grant=check)
    assert (retried.status, retried.context_id, retried.reply) == (TurnStatus.REPLAY, "ctx-1", b"r1")


async def test_s5_5_section_3_turns_around_delegated_ones(
    store: ConversationStore, oauth: OAuthStore, clock: ManualClock
) -> None:
    """A §3 context may continue under delegation; a §3 turn neither checks nor changes the user."""
    as_42 = await grant(oauth, clock, "g-1", user="user-42")
    as_7 = await grant(oauth, clock, "g-2", user="user-7")
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    assert await status(store, "ctx-1", "m2", as_42) is TurnStatus.NEW
    await store.complete_turn(ALICE, "ctx-1", "m2", b"r2", close=False)
    assert await status(store, "ctx-1", "m3") is TurnStatus.NEW
    await store.complete_turn(ALICE, "ctx-1", "m3", b"r3", close=False)
    replay = await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")
    assert (replay.status, replay.reply) == (TurnStatus.REPLAY, b"r2")
    assert await status(store, "ctx-1", "m4", as_7) is TurnStatus.USER_MISMATCH
    assert await status(store, "ctx-1", "m4", as_42) is TurnStatus.NEW


async def test_s5_5_abort_and_complete_keep_the_recorded_user(
    store: ConversationStore, oauth: OAuthStore, clock: ManualClock
) -> None:
    as_42 = await grant(oauth, clock, "g-1", user="user-42")
    as_7 = await grant(oauth, clock, "g-2", user="user-7")
    await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1", grant=as_42)
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
    await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")
    await store.abort_turn(ALICE, "ctx-1", "m2", new_conversation=False)
    assert await status(store, "ctx-1", "m2", as_7) is TurnStatus.USER_MISMATCH
    await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=True)
    assert await status(store, "ctx-1", "m1", as_7) is TurnStatus.USER_MISMATCH
    # An aborted first turn forgets its conversation, user and all: the messageId may open another.
    await store.begin_turn(ALICE, None, "m9", "new", "ctx-9", grant=as_42)
    await store.abort_turn(ALICE, "ctx-9", "m9", new_conversation=True)
    claim = await store.begin_turn(ALICE, None, "m9", "new", "ctx-10", grant=as_7)
    assert (claim.status, claim.context_id) == (TurnStatus.NEW, "ctx-10")


async def test_s5_5_limits_are_charged_before_the_grant_check(
    store: ConversationStore, oauth: OAuthStore, clock: ManualClock
) -> None:
    unknown = never_issued()
    per_user = store_keys.limit_key(BRAND, "per_user", "abc", store_keys.owner_tag(ALICE.digest))
    limits = [Hit(per_user, Rule(rate=0.1, burst=1))]
    revoked = await store.begin_turn(ALICE, None, "m1", "hi", "c1", limits=limits, grant=unknown)
    assert revoked.status is TurnStatus.GRANT_REVOKED
    limited = await store.begin_turn(ALICE, None, "m2", "hi", "c2", limits=limits, grant=unknown)
    assert limited.status is TurnStatus.RATE_LIMITED


async def test_s5_5_redis_a_delegated_turn_is_still_one_script_call(
    redis_store: RedisStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hot path stays two round trips a turn: the grant check rides in the begin-turn script.

    Counted at the connection (every command this store sends), not with Redis's server-wide
    ``INFO commandstats``, which other clients of the same server would disturb.
    """
    store = redis_store
    check = await grant(open_oauth_store(store), clock, "g-1")
    # The per-person counter, under its owner's tag: it rides in the begin-turn script.
    per_user = store_keys.limit_key(BRAND, "per_user", "abc", store_keys.owner_tag(ALICE.digest))
    limits = [Hit(per_user, Rule(rate=100, burst=100))]
    # Warmed up first: a script's very first call anywhere on the server is EVALSHA then EVAL.
    await store.begin_turn(ALICE, None, "m0", "warm", "ctx-0", limits=limits, grant=check)
    await store.complete_turn(ALICE, "ctx-0", "m0", b"r0", close=False)
    await store.begin_turn(ALICE, "ctx-0", "m1", "up", "unused", limits=limits, grant=check)
    with recorded_commands(store.redis) as sent:
        first = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1", limits=limits, grant=check)
        await store.complete_turn(ALICE, "ctx-1", "m1", b"r1", close=False)
        second = await store.begin_turn(ALICE, "ctx-1", "m2", "more", "unused", limits=limits, grant=check)
    assert (first.status, second.status) == (TurnStatus.NEW, TurnStatus.NEW)
    assert sent == ["EVALSHA", "EVALSHA", "EVALSHA"]
