"""What the tokens of a turn cost the gateway, per operation, in a process of its own.

Three cases through the real :class:`PAVerifier` with inline keys (no fetching, so only
verification is timed): a fresh ES256 token (every check, ECDSA P-256 signature included),
a fresh RS256 token (2048-bit RSA), and one token presented again and again, which is what a
personal agent that reuses its token for a conversation costs. The same two cases for a §5.4
delegation token through the real :class:`DelegationVerifier` (a fresh token, ES256, verdict
cache off; one token again and again, default cache), and what a delegated turn adds on top:
signing its §5.6 receipt, ES256 through :meth:`ProviderKeys.sign` over the claims of a
realistic receipt (two scopes used, two actions, one with ``argsHash``). Tokens are minted
before the clock starts; minting is the personal agent's (or the token endpoint's) cost.

Then where the microseconds a delegated turn adds to an Identity turn go (issue 17 row 7), each
step as the gateway takes it: the cached token check, the receipt's claims and payload, its
signature, the reply's bigger body, the two delegation events in the metrics. ``bench.run``
prints them beside the delegated fronts' CPU per turn and the 0.85 target. What the signature
costs with the CPU's caches flushed first, alone and eight back to back (as
:class:`gateway.provider_keys.SigningBatch` signs one loop pass's receipts). And whether the
signature could leave the event loop: ``cryptography`` releases the GIL while OpenSSL signs, so
two threads sign faster than one (their speed-up), but a signature handed to a worker thread
still costs the loop the hand-off (its CPU per receipt, with 32 turns signing at once).

``python -m bench.jwt_cost --fresh 2000 --repeated 50000`` prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import aiohttp
import rfc8785

from bench.delegation import BRAND, SCOPES, brand_user, delegation_config
from bench.tokens import Minter, user_sub
from gateway.auth.jwks import JwksCache, make_fetch_session
from gateway.auth.pa_jwt import PAVerifier
from gateway.config import JwksPolicy, PersonalAgentConfig, PersonalAgentsConfig, load_config
from gateway.oauth.access_token import mint_access_token
from gateway.oauth.delegation import DelegationVerifier
from gateway.oauth.server import AuthorizationServer
from gateway.ops.metrics import Metrics
from gateway.pa_keys import generate_private_jwk, public_jwks
from gateway.protocol.messages import render_reply
from gateway.protocol.receipts import (
    RECEIPT_TYP,
    receipt_claims,
    receipt_metadata,
    receipt_payload,
    timestamp,
)
from gateway.provider_keys import ProviderKeys
from gateway.store.base import Owner
from gateway.store.factory import open_oauth_store, open_store
from gateway.store.oauth import Grant
from gateway.upstream.base import Action

ES256_ISSUER = "https://es256.pa.bench.invalid"
RS256_ISSUER = "https://rs256.pa.bench.invalid"
AUDIENCE = "pact-gateway-bench"
SIGNING_AT_ONCE = 32
"""Turns whose receipts are handed to the worker thread together (the bench's peak concurrency)."""
MIN_THREADED_SIGNATURES = 1000
EVICTING_BYTES = 8 << 20
"""Written between signatures to push OpenSSL's tables out of the caches, as a turn's other work does."""
SIGNED_TOGETHER = 8
"""Receipts signed back to back after an eviction: what :class:`SigningBatch` does with one loop pass's."""


async def _time_per_op(verifier: PAVerifier, tokens: Sequence[str], rounds: int = 1) -> float:
    """Microseconds per ``verify`` over ``tokens`` (repeated ``rounds`` times), best of three batches."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(rounds):
            for token in tokens:
                await verifier.verify(token)
        best = min(best, (time.perf_counter() - started) / (len(tokens) * rounds))
    return best * 1e6


async def measure(fresh: int, repeated: int) -> dict[str, Any]:
    es256 = generate_private_jwk("ES256")
    rs256 = generate_private_jwk("RS256")
    agents = PersonalAgentsConfig(
        registered=(
            PersonalAgentConfig(issuer=ES256_ISSUER, jwks_uri=None, jwks=public_jwks(es256)),
            PersonalAgentConfig(issuer=RS256_ISSUER, jwks_uri=None, jwks=public_jwks(rs256)),
        )
    )
    policy = JwksPolicy()
    session = make_fetch_session(policy, development=False)
    try:
        jwks = JwksCache(session, policy, development=False)
        # Three batches per case, each of fresh tokens: no batch may hit the verdict cache.
        verifier = PAVerifier(agents, AUDIENCE, jwks, token_cache_size=0)

        def mint(key: dict[str, Any], issuer: str, count: int) -> list[str]:
            minter = Minter(key, issuer, AUDIENCE)
            return [minter.mint(f"user-{i}") for i in range(count)]

        es_tokens = mint(es256, ES256_ISSUER, fresh)
        rs_tokens = mint(rs256, RS256_ISSUER, fresh)
        es_us = await _time_per_op(verifier, es_tokens)
        rs_us = await _time_per_op(verifier, rs_tokens)

        cached = PAVerifier(agents, AUDIENCE, jwks)  # the default verdict cache, as the gateway runs it
        token = es_tokens[0]
        await cached.verify(token)
        repeated_us = await _time_per_op(cached, [token], rounds=repeated)
        delegation = await measure_delegation(session, fresh, repeated)
    finally:
        await session.close()
    return {
        "es256_fresh_us": es_us,
        "rs256_fresh_us": rs_us,
        "repeated_token_us": repeated_us,
        "es256_vs_repeated_ratio": es_us / repeated_us if repeated_us > 0 else 0.0,
        "fresh_tokens": fresh,
        "repeated_verifications": repeated,
        **delegation,
    }


def _best_us(calls: Callable[[], None], count: int) -> float:
    """Microseconds per call of ``calls`` (which makes ``count`` of them), best of three batches."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        calls()
        best = min(best, (time.perf_counter() - started) / count)
    return best * 1e6


async def measure_delegation(session: aiohttp.ClientSession, fresh: int, repeated: int) -> dict[str, Any]:
    """§5.5 delegation-token verification, cached and not, and §5.6 receipt signing, per operation.

    The Provider, its Brand and its keys are built from configuration as the gateway builds
    them (a Brand with the bench's ``delegation`` block, a generated ES256 signing key).
    """
    pa_key = generate_private_jwk("ES256")
    raw = {
        "public_url": "https://gateway.bench.invalid",
        "provider": {"organization": "Bench", "url": "https://bench.invalid", "audience": AUDIENCE},
        "personal_agents": {"registered": [{"issuer": ES256_ISSUER, "jwks": public_jwks(pa_key)}]},
        "oauth": {"signing_keys": [{"value": json.dumps(generate_private_jwk("ES256"))}]},
        "brands": [
            {
                "id": BRAND,
                "name": "Acme Support",
                "description": "Order status.",
                "version": "1.0.0",
                "upstream": {"url": "https://bot.bench.invalid/chat"},
                "delegation": delegation_config(public_jwks(generate_private_jwk("ES256"))),
            }
        ],
    }
    config = load_config(raw, environ={})
    brand = config.brands[BRAND]
    keys = ProviderKeys(config.oauth.signing_keys)
    store = open_store(config.cache)
    try:
        server = AuthorizationServer(
            config=config,
            keys=keys,
            store=open_oauth_store(store),
            login_keys=JwksCache(session, config.personal_agents.jwks, development=False),
            clock=time.time,
        )
        urls = server.urls(brand)
        now = time.time()

        def token(user: int) -> str:
            grant = Grant(
                grant_id=f"a2agrant_bench{user}",
                brand_id=BRAND,
                client_id=ES256_ISSUER,
                owner_digest=Owner(BRAND, ES256_ISSUER, user_sub(user)).digest,
                user=brand_user(user),
                scopes=tuple(SCOPES),
                issued_at=now,
                expires_at=now + 86400,
            )
            issued, _ = mint_access_token(
                keys,
                grant,
                issuer=urls.issuer,
                audience=urls.interface,
                scopes=grant.scopes,
                now=now,
                ttl=3600,
            )
            return f"Bearer {issued}"

        headers = [token(user) for user in range(fresh)]
        # Verdict cache off: every header of every batch is a full check, signature included.
        uncached = DelegationVerifier(server, cache_size=0)

        def verify_all() -> None:
            for header in headers:
                uncached.verify(header, brand, ES256_ISSUER)

        fresh_us = _best_us(verify_all, len(headers))
        cached = DelegationVerifier(server)  # the default verdict cache, as the gateway runs it
        header = headers[0]
        cached.verify(header, brand, ES256_ISSUER)

        def verify_again() -> None:
            for _ in range(repeated):
                cached.verify(header, brand, ES256_ISSUER)

        repeated_us = _best_us(verify_again, repeated)
        # What a delegated turn's reply carries (§5.6): what a Brand's order bot would have done.
        context_id, message_id = str(uuid.uuid4()), f"m-{uuid.uuid4().hex}"
        actions = (
            Action("lookup_orders"),
            Action("cancel_order", rfc8785.dumps({"order": "A-10001", "reason": "changed my mind"})),
        )

        def claims_of(ts: str) -> dict[str, Any]:
            return receipt_claims(
                grant_id="a2agrant_bench0",
                user=brand_user(0),
                pa=ES256_ISSUER,
                brand=urls.interface,
                scopes_used=tuple(SCOPES),
                actions=actions,
                ts=ts,
                context_id=context_id,
                message_id=message_id,
            )

        claims = claims_of(timestamp(now))
        payload = receipt_payload(claims)

        def build_all() -> None:
            for _ in range(repeated):
                receipt_payload(claims_of(timestamp(time.time())))

        claims_us = _best_us(build_all, repeated)

        def sign_all() -> None:
            for _ in range(fresh):
                keys.sign(payload, RECEIPT_TYP)

        sign_us = _best_us(sign_all, fresh)
        jws = keys.sign(payload, RECEIPT_TYP)
        text = "Your order A-10001 is cancelled."

        def replies_with_receipt() -> None:
            for _ in range(repeated):
                render_reply("r-1", context_id, text, receipt_metadata(jws, claims))

        def replies_without() -> None:
            for _ in range(repeated):
                render_reply("r-1", context_id, text)

        reply_us = _best_us(replies_with_receipt, repeated) - _best_us(replies_without, repeated)
        metrics = Metrics()

        def count_events() -> None:
            for _ in range(repeated):
                metrics.delegation_event(BRAND, "delegated_turn")
                metrics.delegation_event(BRAND, "receipt_signed")

        metrics_us = _best_us(count_events, repeated)
        speedup = _two_threads_speedup(keys, payload, fresh)
        cold_us = _cold_sign_us(keys, payload, fresh, 1)
        together_us = _cold_sign_us(keys, payload, fresh, SIGNED_TOGETHER)
        offloaded_us = await _offloaded_loop_us(keys, payload, fresh)
    finally:
        await store.close()
    return {
        "delegation_fresh_us": fresh_us,
        "delegation_repeated_us": repeated_us,
        "delegation_fresh_vs_repeated_ratio": fresh_us / repeated_us if repeated_us > 0 else 0.0,
        "receipt_sign_us": sign_us,
        "receipt_payload_bytes": len(payload),
        "receipt_claims_us": claims_us,
        "receipt_reply_us": reply_us,
        "delegation_metrics_us": metrics_us,
        # Each step a delegated turn takes that an Identity turn does not, summed.
        "delegated_added_us": repeated_us + claims_us + sign_us + reply_us + metrics_us,
        "receipt_sign_cold_us": cold_us,
        "receipt_sign_cold_together_us": together_us,
        "receipt_sign_two_threads_speedup": speedup,
        "receipt_sign_offloaded_loop_us": offloaded_us,
    }


def _cold_sign_us(keys: ProviderKeys, payload: bytes, count: int, together: int) -> float:
    """CPU per signature when ``together`` are made back to back after the caches were flushed.

    In a gateway a receipt is signed between the other work of many turns, which pushes
    OpenSSL's P-256 tables out of the CPU's caches; a tight loop keeps them in and flatters the
    signature. Only the signing is timed (this thread's CPU), not the eviction.
    """
    evicting = bytearray(EVICTING_BYTES)
    line = b"\x01" * len(evicting[::64])
    spent = 0.0
    rounds = max(1, count // together)
    for _ in range(rounds):
        evicting[::64] = line  # a write to every cache line of a buffer larger than the caches
        started = time.thread_time()
        for _ in range(together):
            keys.sign(payload, RECEIPT_TYP)
        spent += time.thread_time() - started
    return spent / (rounds * together) * 1e6


def _two_threads_speedup(keys: ProviderKeys, payload: bytes, count: int) -> float:
    """Signatures per wall second with two threads ÷ with one: 2 if signing never held the GIL.

    Best of three each, of at least :data:`MIN_THREADED_SIGNATURES` (thread start-up must not
    weigh); on a busy machine the second core may not be free, which lowers it.
    """
    count = max(count, MIN_THREADED_SIGNATURES)

    def sign(times: int) -> None:
        for _ in range(times):
            keys.sign(payload, RECEIPT_TYP)

    def wall(threads: int) -> float:
        best = float("inf")
        for _ in range(3):
            workers = [threading.Thread(target=sign, args=(count // threads,)) for _ in range(threads)]
            started = time.perf_counter()
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
            best = min(best, time.perf_counter() - started)
        return best

    return wall(1) / wall(2)


async def _offloaded_loop_us(keys: ProviderKeys, payload: bytes, count: int) -> float:
    """The event loop thread's CPU per receipt signed on one worker thread, 32 turns at a time.

    What taking the signature off the loop would cost the loop itself: the future, the
    hand-off to the thread, the wake-up back on the loop. Best of three batches.
    """
    loop = asyncio.get_running_loop()
    rounds = max(1, count // SIGNING_AT_ONCE)
    best = float("inf")
    with ThreadPoolExecutor(max_workers=1) as pool:
        for _ in range(3):
            started = time.thread_time()
            for _ in range(rounds):
                await asyncio.gather(
                    *(
                        loop.run_in_executor(pool, keys.sign, payload, RECEIPT_TYP)
                        for _ in range(SIGNING_AT_ONCE)
                    )
                )
            best = min(best, (time.thread_time() - started) / (rounds * SIGNING_AT_ONCE))
    return best * 1e6


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fresh", type=int, default=2000, help="distinct tokens per algorithm")
    parser.add_argument("--repeated", type=int, default=50_000, help="verifications of one token")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(measure(args.fresh, args.repeated))))


if __name__ == "__main__":
    main()
