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
from dataclasses import dataclass, field
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
TEXTS = (
    "Hi, where is my order?",
    "It is A-10001.",
    "When will it arrive?",
    "And what about A-10002?",
    "Where is it now?",
    "What is the status of A-10003?",
)
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


def load_tokens(path: Path) -> list[str]:
    """The delegation token file ``bench.delegation`` writes: user ``i``'s token at index ``i``."""
    tokens = json.loads(path.read_text())
    if not isinstance(tokens, list) or not all(isinstance(token, str) for token in tokens):
        raise ValueError(f"{path} is not a JSON list of delegation tokens")
    return tokens


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
        *("-m", "bench.loadgen", "--url", url, "--mode", mode),
        *("--duration", str(duration), "--warmup", str(warmup), "--concurrency", str(concurrency)),
        *("--rate", str(rate), "--turns", str(turns), "--max-turns", str(max_turns)),
        *("--request-timeout", str(request_timeout), "--key-file", str(key_file)),
        *("--issuer", ISSUER, "--audience", AUDIENCE),
        *([] if users is None else ["--subs", str(users)]),
        *([] if delegation is None else ["--delegation-file", str(delegation)]),
    ]


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values; 0.0 for none."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


class Tokens:
    """One PA JWT per user, minted on first use and re-minted before it expires."""

    def __init__(self, key: dict[str, Any], issuer: str, audience: str) -> None:
        self._minter = Minter(key, issuer, audience)
        self._tokens: dict[int, tuple[str, float]] = {}
        self.minted = 0

    def header(self, user: int) -> str:
        now = time.monotonic()
        held = self._tokens.get(user)
        if held is None or now - held[1] > TOKEN_REFRESH_AFTER:
            held = (f"Bearer {self._minter.mint(user_sub(user), TOKEN_TTL)}", now)
            self._tokens[user] = held
            self.minted += 1
        return held[0]


@dataclass
class Recorder:
    """Per-request outcomes; only completions inside [window_start, window_end] are measured."""

    window_start: float
    window_end: float
    latencies: list[float] = field(default_factory=list)
    turns_total: int = 0
    errors: int = 0
    errors_measured: int = 0
    late_starts: int = 0
    conversations: int = 0
    error_samples: list[str] = field(default_factory=list)

    def done(self, started: float, finished: float, ok: bool, detail: str = "") -> None:
        self.turns_total += 1
        measured = self.window_start <= finished <= self.window_end
        if ok:
            if measured:
                self.latencies.append(finished - started)
            return
        self.errors += 1
        if measured:
            self.errors_measured += 1
        if len(self.error_samples) < 5:
            self.error_samples.append(detail)


class Schedule:
    """Open loop: the n-th turn may start at ``start + n / rate``; closed loop when rate is 0."""

    def __init__(self, start: float, rate: float) -> None:
        self._start = start
        self._rate = rate
        self._next = 0

    async def wait_turn(self, recorder: Recorder) -> None:
        if self._rate <= 0:
            return
        slot = self._start + self._next / self._rate
        self._next += 1
        delay = slot - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -0.005:
            recorder.late_starts += 1  # every worker was busy: the load is more than the fronts keep up with


@dataclass
class Plan:
    url: str
    mode: str
    turns: int
    deadline: float
    max_turns: int
    tokens: Tokens
    subs: int
    delegation: Sequence[str] = ()
    """User ``i``'s delegation token at index ``i``; empty for §3 turns alone."""
    issued: int = 0
    next_conversation: int = 0

    def more(self) -> bool:
        if time.perf_counter() >= self.deadline:
            return False
        return self.max_turns <= 0 or self.issued < self.max_turns


async def _conversation(
    session: aiohttp.ClientSession, plan: Plan, schedule: Schedule, recorder: Recorder
) -> None:
    number = plan.next_conversation
    plan.next_conversation += 1
    recorder.conversations += 1
    user = number % plan.subs
    authorization = plan.tokens.header(user)
    headers = {"Authorization": authorization, "Content-Type": "application/json", "A2A-Version": "1.0"}
    if plan.delegation:
        headers[HEADER] = f"Bearer {plan.delegation[user]}"
    context_id: str | None = None
    bot_conversation = str(uuid.uuid4())
    for turn in range(plan.turns):
        await schedule.wait_turn(recorder)
        if not plan.more():
            return
        plan.issued += 1
        text = TEXTS[turn % len(TEXTS)]
        message_id = f"m-{uuid.uuid4().hex}"
        if plan.mode == "bot":
            payload: dict[str, Any] = {
                "brand": "acme",
                "conversation_id": bot_conversation,
                "message_id": message_id,
                "text": text,
                "user": {"pa": "direct", "sub": f"bench-user-{user}"},
                "new_conversation": turn == 0,
            }
        else:
            message: dict[str, Any] = {
                "messageId": message_id,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
            if context_id is not None:
                message["contextId"] = context_id
            payload = {"message": message}
        body = orjson.dumps(payload)
        started = time.perf_counter()
        try:
            async with session.post(plan.url, data=body, headers=headers) as response:
                raw = await response.read()
                status = response.status
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            recorder.done(started, time.perf_counter(), False, f"{type(exc).__name__}: {exc}")
            return
        finished = time.perf_counter()
        if status != 200:
            recorder.done(started, finished, False, f"HTTP {status}: {raw[:200]!r}")
            return  # a broken conversation is abandoned; the worker starts a new one
        if plan.delegation and RECEIPT_MARK not in raw:
            recorder.done(started, finished, False, f"no receipt in {raw[:200]!r}")
            return
        if plan.mode == "a2a" and context_id is None:
            try:
                context_id = str(orjson.loads(raw)["message"]["contextId"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                recorder.done(started, finished, False, f"no contextId in {raw[:200]!r}")
                return
        recorder.done(started, finished, True)


async def _worker(session: aiohttp.ClientSession, plan: Plan, schedule: Schedule, recorder: Recorder) -> None:
    while plan.more():
        await _conversation(session, plan, schedule, recorder)


async def run(args: argparse.Namespace, key: dict[str, Any], delegation: Sequence[str]) -> dict[str, Any]:
    tokens = Tokens(key, args.issuer, args.audience)
    for user in range(min(args.subs, 4096)):
        tokens.header(user)  # mint before the clock starts: minting is the personal agent's cost
    connector = aiohttp.TCPConnector(limit=args.concurrency, keepalive_timeout=30)
    timeout = aiohttp.ClientTimeout(total=args.request_timeout)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.perf_counter()
        window_start = start + args.warmup
        window_end = window_start + args.duration
        recorder = Recorder(window_start=window_start, window_end=window_end)
        plan = Plan(
            url=args.url,
            mode=args.mode,
            turns=args.turns,
            deadline=window_end,
            max_turns=args.max_turns,
            tokens=tokens,
            subs=args.subs,
            delegation=delegation,
        )
        schedule = Schedule(start, args.rate)
        cpu_before = os.times()
        workers = [
            asyncio.create_task(_worker(session, plan, schedule, recorder)) for _ in range(args.concurrency)
        ]
        hard_stop = args.warmup + args.duration + args.request_timeout + 5
        _, pending = await asyncio.wait(workers, timeout=hard_stop)
        for task in pending:
            task.cancel()
        elapsed = time.perf_counter() - start
        cpu_after = os.times()
    latencies = sorted(recorder.latencies)
    window = min(args.duration, max(elapsed - args.warmup, 1e-9))
    measured = len(latencies)
    return {
        "mode": args.mode,
        "url": args.url,
        "concurrency": args.concurrency,
        "rate_target": args.rate,
        "turns_per_conversation": args.turns,
        "window_s": window,
        "turns_total": recorder.turns_total,
        "turns_measured": measured,
        "throughput_rps": measured / window if args.max_turns <= 0 else recorder.turns_total / elapsed,
        "errors": recorder.errors,
        "errors_measured": recorder.errors_measured,
        "error_samples": recorder.error_samples,
        "late_starts": recorder.late_starts,
        "conversations": recorder.conversations,
        "tokens_minted": tokens.minted,
        "delegated": bool(delegation),
        "latency_ms": {
            "p50": percentile(latencies, 0.50) * 1000,
            "p90": percentile(latencies, 0.90) * 1000,
            "p99": percentile(latencies, 0.99) * 1000,
            "mean": (sum(latencies) / measured * 1000) if measured else 0.0,
            "max": (latencies[-1] * 1000) if measured else 0.0,
        },
        "cpu_s": (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system),
        "elapsed_s": elapsed,
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", choices=["a2a", "bot"], default="a2a")
    parser.add_argument("--duration", type=float, default=5.0, help="measured seconds, after the warm-up")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument(
        "--rate", type=float, default=0.0, help="turns per second (open loop); 0 = closed loop"
    )
    parser.add_argument("--turns", type=int, default=5, help="turns per conversation")
    parser.add_argument(
        "--subs",
        type=int,
        help="distinct users, one reused PA JWT each (default 256, or one per delegation token)",
    )
    parser.add_argument("--max-turns", type=int, default=0, help="stop after this many turns (0 = no cap)")
    parser.add_argument("--request-timeout", type=float, default=10.0)
    parser.add_argument("--key-file", required=True, help="the personal agent's private JWK (JSON)")
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--audience", required=True)
    parser.add_argument(
        "--delegation-file", type=Path, help="delegation tokens, one per user (bench.delegation writes it)"
    )
    args = parser.parse_args(argv)
    delegation = load_tokens(args.delegation_file) if args.delegation_file is not None else []
    if args.subs is None:
        args.subs = len(delegation) or 256
    if delegation and args.subs > len(delegation):
        # A grant belongs to one (PA, sub): a user without a token of its own cannot borrow another's.
        parser.error(f"--subs {args.subs} is more than the {len(delegation)} delegation tokens")
    key = json.loads(Path(args.key_file).read_text())
    print(json.dumps(asyncio.run(run(args, key, delegation))))


if __name__ == "__main__":
    main()
