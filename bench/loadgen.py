"""The load generator: one process, one pooled aiohttp client, conversations as a personal agent holds them.

Each conversation sends ``--turns`` turns, the first without ``contextId``; its ``--subs`` users
each reuse one PA JWT until it is near expiry, as a real personal agent does. Closed loop (default):
``--concurrency`` workers, each sending its next turn when the last one answered (peak throughput);
open loop (``--rate``): turns start on a schedule, so latency can be read at a chosen load. ``--mode
bot`` speaks the bot's contract to ``/chat``. With ``--delegation-file`` (``bench.delegation``)
every turn also carries its user's delegation token (§5.5) and a reply without a §5.6 receipt fails.
Only turns completed after ``--warmup`` count for throughput and latency; ``turns_total`` counts
every one, for CPU per turn. Prints one JSON document; :func:`argv` builds its command line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import secrets
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import aiohttp
import jwt
import orjson

from gateway.protocol.receipts import RECEIPT_KEY

ISSUER: Final = "https://pa.bench.invalid"
AUDIENCE: Final = "pact-gateway-bench"
HEADER: Final = "X-A2A-User-Delegation"
"""§5.5: where the delegation token rides, next to the PA JWT."""
RECEIPT_MARK: Final = f'"{RECEIPT_KEY}"'.encode()
"""§5.6: a delegated reply without this member was not served as delegated."""
# No text says goodbye, so no conversation is closed by the bot in the middle of a run.
TEXTS: tuple[str, ...] = ("Hi, where is my order?", "It is A-10001.", "When will it arrive?")
TEXTS += ("And what about A-10002?", "Where is it now?", "What is the status of A-10003?")
TOKEN_TTL = 300  # §3.2's maximum
TOKEN_REFRESH_AFTER = 200.0  # re-mint well before expiry, as a personal agent would


def user_sub(user: int) -> str:
    """The ``sub`` the bench's personal agent uses for its ``user``-th User, in every bench process."""
    return f"bench-user-{user}"


class Minter:
    """Signs §3.2 tokens (a §5.3 Brand-login assertion with ``extra``) with a key parsed once:
    ``gateway.pa_keys.mint_token`` parses the JWK per call, tens of milliseconds for RSA."""

    def __init__(self, private_jwk: Mapping[str, Any], issuer: str, audience: str) -> None:
        self.alg = str(private_jwk.get("alg", "ES256"))
        self._key = jwt.PyJWK.from_dict(dict(private_jwk), algorithm=self.alg).key
        self._headers = {"kid": str(private_jwk["kid"]), "typ": "JWT"}
        self.issuer = issuer
        self.audience = audience

    def mint(self, sub: str, ttl: int = TOKEN_TTL, extra: Mapping[str, Any] | None = None) -> str:
        issued = int(time.time())
        claims = {"iss": self.issuer, "sub": sub, "aud": self.audience, "iat": issued, "exp": issued + ttl}
        claims |= {"jti": secrets.token_hex(8), **(extra or {})}
        return jwt.encode(claims, self._key, algorithm=self.alg, headers=self._headers)


def argv(
    url: str,
    key_file: Path,
    *,
    mode: str = "a2a",
    duration: float,
    warmup: float,
    concurrency: int,
    turns: int = 5,
    rate: float = 0.0,
    max_turns: int = 0,
    users: int | None = None,
    delegation: Path | None = None,
    request_timeout: float = 10.0,
) -> list[str]:
    """The command line of one load-generator run (the bench's personal agent: :data:`ISSUER`)."""
    return [
        sys.executable,
        *("-m", "bench.loadgen", "--url", url, "--mode", mode, "--key-file", str(key_file)),
        *("--duration", str(duration), "--warmup", str(warmup), "--concurrency", str(concurrency)),
        *("--rate", str(rate), "--turns", str(turns), "--max-turns", str(max_turns)),
        *("--request-timeout", str(request_timeout)),
        *([] if users is None else ["--subs", str(users)]),
        *([] if delegation is None else ["--delegation-file", str(delegation)]),
    ]


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values; 0.0 for none."""
    if not sorted_values:
        return 0.0
    return sorted_values[min(max(1, math.ceil(fraction * len(sorted_values))), len(sorted_values)) - 1]


class Load:
    """One run: the users' tokens, the schedule, and every outcome (measured inside the window only)."""

    def __init__(self, args: argparse.Namespace, key: Mapping[str, Any], delegation: Sequence[str]) -> None:
        self.args, self.delegation = args, delegation
        self.minter = Minter(key, ISSUER, AUDIENCE)
        self.tokens: dict[int, tuple[str, float]] = {}
        self.latencies: list[float] = []
        self.turns_total = self.issued = self.scheduled = self.conversations = self.errors = 0
        self.late_starts, self.error_samples = 0, list[str]()
        for user in range(min(args.subs, 4096)):
            self.header(user)  # minted before the clock starts: minting is the personal agent's cost
        self.start = time.perf_counter()
        self.window = (self.start + args.warmup, self.start + args.warmup + args.duration)

    def header(self, user: int) -> str:
        """User ``user``'s PA JWT, minted on first use and again before it expires."""
        held = self.tokens.get(user)
        if held is None or time.monotonic() - held[1] > TOKEN_REFRESH_AFTER:
            held = self.tokens[user] = (f"Bearer {self.minter.mint(user_sub(user))}", time.monotonic())
        return held[0]

    def more(self) -> bool:
        if time.perf_counter() >= self.window[1]:
            return False
        cap: int = self.args.max_turns
        return cap <= 0 or self.issued < cap

    async def wait_turn(self) -> None:
        """Open loop: the n-th turn may start at ``start + n / rate`` (closed loop when rate is 0)."""
        if self.args.rate <= 0:
            return
        delay = self.start + self.scheduled / self.args.rate - time.perf_counter()
        self.scheduled += 1
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.005:
            self.late_starts += 1  # every worker was busy: more load than the fronts keep up with

    def done(self, started: float, detail: str = "") -> None:
        finished = time.perf_counter()
        self.turns_total += 1
        if not detail:
            if self.window[0] <= finished <= self.window[1]:
                self.latencies.append(finished - started)
            return
        self.errors += 1
        self.error_samples += [detail] if len(self.error_samples) < 5 else []

    async def conversation(self, session: aiohttp.ClientSession) -> None:
        user = self.conversations % self.args.subs
        self.conversations += 1
        headers = {
            "Authorization": self.header(user),
            "Content-Type": "application/json",
            "A2A-Version": "1.0",
        }
        if self.delegation:
            headers[HEADER] = f"Bearer {self.delegation[user]}"
        context_id: str | None = None
        bot_conversation = str(uuid.uuid4())
        for turn in range(self.args.turns):
            await self.wait_turn()
            if not self.more():
                return None
            self.issued += 1
            text, message_id = TEXTS[turn % len(TEXTS)], f"m-{uuid.uuid4().hex}"
            message: dict[str, Any] = {
                "messageId": message_id,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
            payload: dict[str, Any] = {"message": message | ({"contextId": context_id} if context_id else {})}
            if self.args.mode == "bot":
                payload = {"brand": "acme", "conversation_id": bot_conversation, "message_id": message_id}
                payload |= {"text": text, "user": {"pa": "direct", "sub": user_sub(user)}}
                payload |= {"new_conversation": turn == 0}
            started = time.perf_counter()
            try:
                async with session.post(
                    self.args.url, data=orjson.dumps(payload), headers=headers
                ) as response:
                    raw, status = await response.read(), response.status
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                return self.done(started, f"{type(exc).__name__}: {exc}")
            # A broken conversation is abandoned; the worker starts a new one.
            if status != 200:
                return self.done(started, f"HTTP {status}: {raw[:200]!r}")
            if self.delegation and RECEIPT_MARK not in raw:
                return self.done(started, f"no receipt in {raw[:200]!r}")
            if self.args.mode == "a2a" and context_id is None:
                try:
                    context_id = str(orjson.loads(raw)["message"]["contextId"])
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    return self.done(started, f"no contextId in {raw[:200]!r}")
            self.done(started)
        return None

    async def worker(self, session: aiohttp.ClientSession) -> None:
        while self.more():
            await self.conversation(session)


async def run(args: argparse.Namespace, key: Mapping[str, Any], delegation: Sequence[str]) -> dict[str, Any]:
    load = Load(args, key, delegation)
    connector = aiohttp.TCPConnector(limit=args.concurrency, keepalive_timeout=30)
    timeout = aiohttp.ClientTimeout(total=args.request_timeout)
    cpu_before = os.times()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        workers = [asyncio.create_task(load.worker(session)) for _ in range(args.concurrency)]
        _, pending = await asyncio.wait(
            workers, timeout=args.warmup + args.duration + args.request_timeout + 5
        )
        for task in pending:
            task.cancel()
        elapsed = time.perf_counter() - load.start
    cpu_after = os.times()
    latencies = sorted(load.latencies)
    window = min(args.duration, max(elapsed - args.warmup, 1e-9))
    return {
        "mode": args.mode,
        "concurrency": args.concurrency,
        "window_s": window,
        "turns_total": load.turns_total,
        "turns_measured": len(latencies),
        "throughput_rps": len(latencies) / window if args.max_turns <= 0 else load.turns_total / elapsed,
        "errors": load.errors,
        "error_samples": load.error_samples,
        "late_starts": load.late_starts,
        "conversations": load.conversations,
        "delegated": bool(delegation),
        "latency_ms": {
            q: percentile(latencies, f) * 1000 for q, f in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
        },
        "cpu_s": (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", choices=["a2a", "bot"], default="a2a")
    parser.add_argument("--key-file", type=Path, required=True, help="the personal agent's private JWK")
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds, after the warm-up")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rate", type=float, default=0.0, help="turns per second (open loop); 0: closed")
    parser.add_argument("--turns", type=int, default=5, help="turns per conversation")
    parser.add_argument("--subs", type=int, help="users, one PA JWT each (256, or one per delegation token)")
    parser.add_argument("--max-turns", type=int, default=0, help="stop after this many turns (0: no cap)")
    parser.add_argument("--request-timeout", type=float, default=10.0)
    parser.add_argument("--delegation-file", type=Path, help="delegation tokens, one per user")
    args = parser.parse_args(argv)
    # The token file bench.delegation.grant_users writes: user i's token at index i.
    delegation: list[str] = json.loads(args.delegation_file.read_text()) if args.delegation_file else []
    args.subs = args.subs or len(delegation) or 256
    if delegation and args.subs > len(delegation):
        # A grant belongs to one (PA, sub): a user without a token of its own cannot borrow another's.
        parser.error(f"--subs {args.subs} is more than the {len(delegation)} delegation tokens")
    print(json.dumps(asyncio.run(run(args, json.loads(args.key_file.read_text()), delegation))))


if __name__ == "__main__":
    main()
