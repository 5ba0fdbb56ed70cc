"""What verifying a personal agent's JWT costs the gateway, per operation, in a process of its own.

Three cases through the real :class:`PAVerifier` with inline keys (no fetching, so only
verification is timed): a fresh ES256 token (every check, ECDSA P-256 signature included),
a fresh RS256 token (2048-bit RSA), and one token presented again and again, which is what a
personal agent that reuses its token for a conversation costs. Tokens are minted before
the clock starts; minting is the personal agent's cost, not the gateway's.

``python -m bench.jwt_cost --fresh 2000 --repeated 50000`` prints one JSON document.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

from bench.tokens import Minter
from gateway.auth.jwks import JwksCache, make_fetch_session
from gateway.auth.pa_jwt import PAVerifier
from gateway.config import JwksPolicy, PersonalAgentConfig, PersonalAgentsConfig
from gateway.pa_keys import generate_private_jwk, public_jwks

ES256_ISSUER = "https://es256.pa.bench.invalid"
RS256_ISSUER = "https://rs256.pa.bench.invalid"
AUDIENCE = "pact-gateway-bench"


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
    finally:
        await session.close()
    return {
        "es256_fresh_us": es_us,
        "rs256_fresh_us": rs_us,
        "repeated_token_us": repeated_us,
        "es256_vs_repeated_ratio": es_us / repeated_us if repeated_us > 0 else 0.0,
        "fresh_tokens": fresh,
        "repeated_verifications": repeated,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fresh", type=int, default=2000, help="distinct tokens per algorithm")
    parser.add_argument("--repeated", type=int, default=50_000, help="verifications of one token")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(measure(args.fresh, args.repeated))))


if __name__ == "__main__":
    main()
