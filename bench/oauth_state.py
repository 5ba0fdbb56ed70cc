"""``python -m bench oauth_state``: is the §5 OAuth state bounded? (issue 17 row 4, docs/capacity.md)

On the memory store in process and on Redis (``--redis-url``), each figure beside its target:

* **consent hand-off's store reads** (the authorization its ``user_code`` names and the live grant
  of the slot), timed for a Brand user with one live grant and for one who also approved ``--prior``
  other ``sub``s of the agent (each a live grant), side by side and repeated: the ratio, ≤ 1.2;
* **records per grant** after ``--refreshes`` refresh-token rotations of each of ``--grants``
  grants: refreshing adds none (device authorizations, kept minutes, are not counted);
* **bytes per grant** on Redis: ``MEMORY USAGE`` of those records, per grant.

Only keys of the bench's own Brands (``pact:oauthbench…``) are written, deleted before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from gateway.config import CacheConfig
from gateway.store import ConversationStore, Owner
from gateway.store.factory import open_oauth_store
from gateway.store.memory import MemoryStore
from gateway.store.oauth import DeviceAuthorization, OAuthStore, PollOutcome, RefreshOutcome, RefreshToken
from gateway.store.redis import RedisStore

__all__ = ["main"]

PA: Final = "https://pa.oauthbench.invalid"
BRAND_PREFIX: Final = "oauthbench"
HANDOFF_BRAND: Final = f"{BRAND_PREFIX}-consent"
RECORDS_BRAND: Final = f"{BRAND_PREFIX}-records"
GRANT_TTL: Final = 30 * 86400
FLAT_RATIO: Final = 1.2
"""Issue 17's bound for "does not grow" (row 2 uses the same)."""
NOT_GRANT_RECORDS: Final = (":oauth:device:", ":oauth:user_code:", "}o.d:")
"""A device authorization's records: kept minutes, not a grant's days, so not the grant's cost."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _token(grant_id: str, name: str) -> RefreshToken:
    return RefreshToken(grant_id, _sha(f"family {grant_id}"), _sha(name))


async def _grant(oauth: OAuthStore, brand: str, user: str, owner: Owner, grant_id: str, now: float) -> str:
    """One approval the way the token endpoint makes a grant: authorization, approval, redemption.

    Returns the authorization's ``user_code``.
    """
    device_hash, user_code = _sha(f"device {grant_id}"), f"UC-{grant_id}"
    authorization = DeviceAuthorization(
        device_hash, user_code, brand, PA, owner.digest, ("orders:read",), now + 600, 5
    )
    if not await oauth.create_authorization(authorization):
        raise RuntimeError(f"user code {user_code} already in use")
    await oauth.approve(brand, authorization, user, ("orders:read",), now)
    result = await oauth.poll(
        brand, device_hash, owner.digest, now, refresh=_token(grant_id, f"{grant_id} 0"), grant_ttl=GRANT_TTL
    )
    if result.outcome is not PollOutcome.ISSUED:
        raise RuntimeError(f"grant {grant_id}: {result.outcome}")
    return user_code


async def _handoff_ratio(
    oauth: OAuthStore, prior: int, reads: int, repeats: int
) -> tuple[float, float, float]:
    """µs per hand-off read for the light and the heavy user, and the median of their per-repeat ratios."""
    now = time.time()
    light, heavy = "light-user", "heavy-user"
    agent = Owner(HANDOFF_BRAND, PA, "consenting-sub")
    for n in range(prior):
        await _grant(oauth, HANDOFF_BRAND, heavy, Owner(HANDOFF_BRAND, PA, f"sub-{n}"), f"prior-{n}", now)
    await _grant(oauth, HANDOFF_BRAND, light, agent, "light-live", now)
    await _grant(oauth, HANDOFF_BRAND, heavy, agent, "heavy-live", now)
    pending = {}
    for user in (light, heavy):
        device_hash = _sha(f"pending {user}")
        pending[user] = f"UC-pending-{user}"
        authorization = DeviceAuthorization(
            device_hash, pending[user], HANDOFF_BRAND, PA, agent.digest, ("orders:cancel",), now + 600, 5
        )
        await oauth.create_authorization(authorization)

    async def handoff(user: str) -> None:
        found = await oauth.authorization_by_user_code(HANDOFF_BRAND, pending[user], now)
        grant = await oauth.live_grant_of(HANDOFF_BRAND, user, agent.digest, now)
        if found is None or grant is None:
            raise RuntimeError("the hand-off found nothing")

    async def per_read(user: str) -> float:
        started = time.perf_counter()
        for _ in range(reads):
            await handoff(user)
        return (time.perf_counter() - started) / reads * 1e6

    await per_read(light)  # warm-up: scripts loaded, connections open
    ratios: list[float] = []
    light_us: list[float] = []
    heavy_us: list[float] = []
    for repeat in range(repeats):
        # Each goes first every other repeat, so a drift of the shared machine favours neither.
        for user in (light, heavy) if repeat % 2 == 0 else (heavy, light):
            (light_us if user == light else heavy_us).append(await per_read(user))
        ratios.append(heavy_us[-1] / light_us[-1])
    return statistics.median(light_us), statistics.median(heavy_us), statistics.median(ratios)


async def _rotate_all(oauth: OAuthStore, grants: int, refreshes: int) -> None:
    now = time.time()
    for g in range(grants):
        grant_id = f"rec-{g}"
        for n in range(refreshes):
            presented, new = _token(grant_id, f"{grant_id} {n}"), _token(grant_id, f"{grant_id} {n + 1}")
            result = await oauth.rotate_refresh(RECORDS_BRAND, presented, new, now)
            if result.outcome is not RefreshOutcome.ROTATED:
                raise RuntimeError(f"rotation {n} of {grant_id}: {result.outcome}")


def _grant_record(key: object) -> bool:
    return (
        isinstance(key, str)
        and key.startswith(f"pact:{RECORDS_BRAND}:")
        and not any(kind in key for kind in NOT_GRANT_RECORDS)
    )


async def _redis_keys(store: RedisStore, pattern: str) -> list[bytes]:
    found: list[bytes] = []
    cursor = b"0"
    while True:
        cursor, batch = await store.redis.execute("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
        found += batch
        if cursor == b"0":
            return found


async def _records(store: ConversationStore) -> tuple[int, int | None]:
    """The grant records of :data:`RECORDS_BRAND`, and their bytes on Redis (``None`` in memory)."""
    if isinstance(store, MemoryStore):
        return sum(1 for key in store.keyspace.entries if _grant_record(key)), None
    assert isinstance(store, RedisStore)
    names = [
        key for key in await _redis_keys(store, f"pact:{RECORDS_BRAND}:*") if _grant_record(key.decode())
    ]
    usage = await asyncio.gather(*(store.redis.execute("MEMORY", "USAGE", name) for name in names))
    return len(names), sum(int(used or 0) for used in usage)


async def _clean(store: ConversationStore) -> None:
    if isinstance(store, RedisStore):
        names = await _redis_keys(store, f"pact:{BRAND_PREFIX}*")
        for start in range(0, len(names), 500):
            await store.redis.execute("DEL", *names[start : start + 500])


async def _front(
    name: str, open_store: Callable[[], Awaitable[ConversationStore]], args: argparse.Namespace
) -> None:
    store = await open_store()
    try:
        await _clean(store)
        oauth = open_oauth_store(store)
        reads = args.memory_reads if isinstance(store, MemoryStore) else args.reads
        light, heavy, ratio = await _handoff_ratio(oauth, args.prior, reads, args.repeats)
        verdict = "met" if ratio <= FLAT_RATIO else "missed"
        print(
            f"{name}: consent hand-off store reads {light:.1f} µs (1 grant) vs {heavy:.1f} µs "
            f"(+{args.prior} prior approvals): ratio {ratio:.2f}, target <= {FLAT_RATIO} ({verdict})"
        )
        now = time.time()
        for g in range(args.grants):
            await _grant(
                oauth, RECORDS_BRAND, f"user-{g}", Owner(RECORDS_BRAND, PA, f"sub-{g}"), f"rec-{g}", now
            )
        before, _ = await _records(store)
        await _rotate_all(oauth, args.grants, args.refreshes)
        after, used = await _records(store)
        verdict = "met" if after == before else "missed"
        print(
            f"{name}: records per grant {before / args.grants:.2f} after 0 refreshes, "
            f"{after / args.grants:.2f} after {args.refreshes}: target constant ({verdict})"
        )
        if used is not None:
            print(
                f"{name}: bytes per grant {used / args.grants:,.0f} (MEMORY USAGE of its records; reported)"
            )
    finally:
        await _clean(store)
        await store.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench oauth_state", description=__doc__.split("\n")[0])
    parser.add_argument("--prior", type=int, default=3000, help="the heavy user's other approvals")
    parser.add_argument("--reads", type=int, default=500, help="hand-offs timed per user and repeat, Redis")
    parser.add_argument("--memory-reads", type=int, default=20000, help="the same in memory (µs each)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--grants", type=int, default=50, help="grants whose records are counted")
    parser.add_argument("--refreshes", type=int, default=100, help="refreshes of each of those grants")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("PACT_TEST_REDIS_URL", "redis://127.0.0.1:6379/14"),
        help="where the Redis front writes (only pact:oauthbench… keys, deleted after)",
    )
    parser.add_argument("--no-redis", action="store_true", help="the memory store only")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if min(args.prior, args.reads, args.memory_reads, args.repeats, args.grants, args.refreshes) < 1:
        print("every count must be at least 1", file=sys.stderr)
        return 2

    async def memory() -> ConversationStore:
        return MemoryStore(CacheConfig(url="memory://"))

    async def redis() -> ConversationStore:
        return RedisStore(CacheConfig(url=args.redis_url))

    async def run() -> None:
        print(f"machine: {os.cpu_count()} cores, shared (figures side by side in one run; read the ratios)")
        await _front("memory", memory, args)
        if not args.no_redis:
            await _front("redis", redis, args)

    asyncio.run(run())
    return 0
