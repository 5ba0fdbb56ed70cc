"""``python -m bench oauth_state``: is the §5 OAuth state bounded? (issue 17 row 4, docs/capacity.md)

On the memory store in process and on Redis (``--redis-url``): **records per grant** after
``--refreshes`` refresh-token rotations of each of ``--grants`` grants (refreshing adds none; device
authorizations, kept minutes, are not counted) and, on Redis, **bytes per grant** (``MEMORY USAGE``
of those records). Only keys of the bench's own Brands (``pact:oauthbench…``) are written, deleted
before and after. That consent reads do not grow with a user's grants is a test that counts reads
(``tests/store/test_oauth_store.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import time
from collections.abc import Sequence
from typing import Final

import redis

from bench.harness import DEFAULT_REDIS_URL
from gateway.config import CacheConfig
from gateway.store import ConversationStore, Owner
from gateway.store.factory import open_oauth_store
from gateway.store.memory import MemoryStore
from gateway.store.oauth import DeviceAuthorization, OAuthStore, PollOutcome, RefreshOutcome, RefreshToken
from gateway.store.redis import RedisStore

PA: Final = "https://pa.oauthbench.invalid"
BRAND: Final = "oauthbench-records"
GRANT_TTL: Final = 30 * 86400
NOT_GRANT_RECORDS: Final = (":oauth:device:", ":oauth:user_code:", "}o.d:")
"""A device authorization's records: kept minutes, not a grant's days, so not the grant's cost."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _token(grant_id: str, name: str) -> RefreshToken:
    return RefreshToken(grant_id, _sha(f"family {grant_id}"), _sha(name))


async def _grant(oauth: OAuthStore, user: str, owner: Owner, grant_id: str, now: float) -> None:
    """One approval the way the token endpoint makes a grant: authorization, approval, redemption."""
    device_hash, user_code = _sha(f"device {grant_id}"), f"UC-{grant_id}"
    authorization = DeviceAuthorization(
        device_hash, user_code, BRAND, PA, owner.digest, ("orders:read",), now + 600, 5
    )
    if not await oauth.create_authorization(authorization):
        raise RuntimeError(f"user code {user_code} already in use")
    await oauth.approve(BRAND, authorization, user, ("orders:read",), now)
    refresh = _token(grant_id, f"{grant_id} 0")
    result = await oauth.poll(BRAND, device_hash, owner.digest, now, refresh=refresh, grant_ttl=GRANT_TTL)
    if result.outcome is not PollOutcome.ISSUED:
        raise RuntimeError(f"grant {grant_id}: {result.outcome}")


def _records(store: ConversationStore, probe: redis.Redis | None) -> tuple[int, int | None]:
    """The grant records of :data:`BRAND`, and their bytes on Redis (``None`` in memory)."""
    if isinstance(store, MemoryStore):
        keys = [key for key in store.keyspace.entries if isinstance(key, str)]
    else:
        assert probe is not None
        keys = [key.decode() for key in probe.scan_iter(match=f"pact:{BRAND}:*", count=1000)]
    names = [
        key
        for key in keys
        if key.startswith(f"pact:{BRAND}:") and not any(k in key for k in NOT_GRANT_RECORDS)
    ]
    if probe is None:
        return len(names), None
    return len(names), sum(int(probe.memory_usage(name) or 0) for name in names)


def _clean(probe: redis.Redis | None) -> None:
    found = list(probe.scan_iter(match=f"pact:{BRAND}*", count=1000)) if probe is not None else []
    for start in range(0, len(found), 500):
        assert probe is not None
        probe.delete(*found[start : start + 500])


async def _front(
    name: str, store: ConversationStore, probe: redis.Redis | None, args: argparse.Namespace
) -> None:
    """``--grants`` grants of a user each, their records counted, each refreshed ``--refreshes`` times,
    the records counted again."""
    try:
        _clean(probe)
        oauth = open_oauth_store(store)
        now = time.time()
        for g in range(args.grants):
            await _grant(oauth, f"user-{g}", Owner(BRAND, PA, f"sub-{g}"), f"rec-{g}", now)
        before, _ = _records(store, probe)
        for g in range(args.grants):
            for n in range(args.refreshes):
                presented, new = _token(f"rec-{g}", f"rec-{g} {n}"), _token(f"rec-{g}", f"rec-{g} {n + 1}")
                rotated = await oauth.rotate_refresh(BRAND, presented, new, now)
                if rotated.outcome is not RefreshOutcome.ROTATED:
                    raise RuntimeError(f"rotation {n} of grant {g}: {rotated.outcome}")
        after, used = _records(store, probe)
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
        _clean(probe)
        await store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench oauth_state", description=__doc__.split("\n")[0])
    parser.add_argument("--grants", type=int, default=50, help="grants whose records are counted")
    parser.add_argument("--refreshes", type=int, default=100, help="refreshes of each of those grants")
    parser.add_argument(
        "--redis-url", default=DEFAULT_REDIS_URL, help="only pact:oauthbench… keys, deleted after"
    )
    parser.add_argument("--no-redis", action="store_true", help="the memory store only")
    args = parser.parse_args(argv)
    if min(args.grants, args.refreshes) < 1:
        print("every count must be at least 1", file=sys.stderr)
        return 2

    async def run() -> None:
        await _front("memory", MemoryStore(CacheConfig(url="memory://")), None, args)
        if not args.no_redis:
            await _front(
                "redis",
                RedisStore(CacheConfig(url=args.redis_url)),
                redis.Redis.from_url(args.redis_url),
                args,
            )

    asyncio.run(run())
    return 0
