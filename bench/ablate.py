"""``python -m bench.ablate``: what each part of a turn costs, in instructions, found by cutting it out.

An ablation is the real gateway CLI with one part of a turn replaced by the least that still
answers the turn (a pass-through, a no-op). Each is counted under callgrind exactly as the full
run counts the gateway (:mod:`bench.instructions`), beside the unchanged gateway and the
pass-through, all on the memory store; what a part costs is the difference. The whole gateway's
count moved by 0.6 % between runs, but a difference of two counts moved by up to about 20,000
instructions (how a turn falls into event-loop passes varies; docs/performance.md), so only parts
larger than that are resolved, where CPU time on a shared machine cannot resolve 10 % of the
gateway's cost. This is a tool for deciding what to optimize next, not part of the full run: each
front costs about half a minute under callgrind.

``python -m bench.ablate`` (every ablation) or ``python -m bench.ablate guard access-line``;
``--serve NAME -- serve --config FILE`` is how each front is started.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from bench.procs import serve_request, served_through
from gateway.auth.pa_jwt import PAIdentity, PAVerifier
from gateway.config import RateLimitsConfig
from gateway.handlers import access
from gateway.handlers.access import AccessLog
from gateway.ops.limits import Charge, RateLimits
from gateway.ops.metrics import Metrics
from gateway.ops.tracing import start_trace, using_trace
from gateway.upstream.base import BotReply, Turn
from gateway.upstream.guard import GuardedBot

__all__ = ["ABLATIONS", "Ablation", "main"]


@dataclass(frozen=True)
class Ablation:
    """``setattr(target, attribute, replacement)``, and what that leaves out of a turn."""

    target: Any
    attribute: str
    replacement: Any
    leaves_out: str


async def _no_access_middleware(
    self: AccessLog, request: web.Request, handler: Handler
) -> web.StreamResponse:
    # The request's span stays: the access middleware starts it, but the turn needs it (the bot's
    # traceparent), so it is not part of what this ablation leaves out.
    return await using_trace(request, start_trace(request.headers), handler)


def _no_access_line(*args: object) -> None:
    return None


def _no_request_metrics(self: Metrics, brand: str, operation: str, outcome: str, seconds: float) -> None:
    return None


def _no_limits(self: RateLimits, brand_id: str, settings: RateLimitsConfig, issuer: str, sub: str) -> Charge:
    return Charge(brand_id, (), ())


async def _unguarded(self: GuardedBot, turn: Turn) -> BotReply:
    return await self._inner.send(turn)


def _known_tokens() -> Callable[[PAVerifier, str], Awaitable[PAIdentity]]:
    verify = PAVerifier.verify
    known: dict[str, PAIdentity] = {}

    async def verify_once(self: PAVerifier, token: str) -> PAIdentity:
        identity = known.get(token)
        if identity is None:
            identity = known[token] = await verify(self, token)
        return identity

    return verify_once


ABLATIONS: dict[str, Callable[[], Ablation]] = {
    "access": lambda: Ablation(
        AccessLog, "__call__", _no_access_middleware, "the access middleware: request metrics and access line"
    ),
    "access-line": lambda: Ablation(access, "log_fields", _no_access_line, "the JSON access line"),
    "request-metrics": lambda: Ablation(
        Metrics, "observe_request", _no_request_metrics, "the request counter and latency histogram"
    ),
    "limits": lambda: Ablation(RateLimits, "a2a_charge", _no_limits, "the §6 limits charged with the turn"),
    "guard": lambda: Ablation(
        GuardedBot, "send", _unguarded, "the bot's concurrency slot and circuit breaker"
    ),
    "token-check": lambda: Ablation(
        PAVerifier, "verify", _known_tokens(), "PA JWT verification of a known token (verdict-cache hit)"
    ),
}
"""Each built on demand: ``token-check`` captures the real ``PAVerifier.verify`` when built."""


def apply(name: str) -> Ablation:
    ablation = ABLATIONS[name]()
    setattr(ablation.target, ablation.attribute, ablation.replacement)
    return ablation


def _serve(name: str, argv: Sequence[str]) -> int:
    from gateway.cli import main as gateway_main

    apply(name)
    return gateway_main(list(argv))


def _count(names: Sequence[str], turns: int) -> dict[str, Any]:
    from bench import instructions
    from bench.fronts import DEFAULT_REDIS_URL, MODES, PASSTHROUGH, Bench
    from bench.procs import Children
    from bench.redis_probe import RedisProbe

    if not instructions.available():
        raise SystemExit("bench.ablate needs valgrind (callgrind)")
    workdir = Path(tempfile.mkdtemp(prefix="pact-ablate-"))
    try:
        with Children(workdir) as children:
            bench = Bench(MODES["full"], children, workdir, RedisProbe(DEFAULT_REDIS_URL))
            bot, port = bench.start_bot()
            bot.wait_port(port)

            def gateway(ablation: str | None) -> instructions.FrontArgv:
                def argv(port: int) -> list[str]:
                    unchanged = bench.gateway_argv(bench.gateway_config(port, "memory://"))
                    if ablation is None:
                        return unchanged
                    return served_through("bench.ablate", ablation, unchanged)

                return argv

            fronts: list[tuple[str, instructions.FrontArgv, bool]] = [
                (PASSTHROUGH, bench.passthrough_argv, False),
                ("gateway", gateway(None), False),
                *((f"without {name}", gateway(name), False) for name in names),
            ]
            counted = instructions.measure(bench, fronts, turns)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    per_turn = instructions.per_turn(counted)
    whole = per_turn["gateway"]
    return {
        "turns": turns,
        "instructions_per_turn": per_turn,
        "gateway_own": whole - per_turn[PASSTHROUGH],
        "saved_per_turn": {name: whole - per_turn[f"without {name}"] for name in names},
        "leaves_out": {name: ABLATIONS[name]().leaves_out for name in names},
    }


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    usage = f"python -m bench.ablate --serve {{{','.join(ABLATIONS)}}} -- serve …"
    served = serve_request(args_list, usage)
    if served is not None:
        name, rest = served
        if name not in ABLATIONS:
            raise SystemExit(f"usage: {usage}")
        return _serve(name, rest)
    parser = argparse.ArgumentParser(prog="python -m bench.ablate", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"ablations (default: all): {', '.join(ABLATIONS)}")
    parser.add_argument("--turns", type=int, default=400, help="turns in the shorter callgrind window")
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(args_list)
    unknown = [name for name in args.names if name not in ABLATIONS]
    if unknown:
        parser.error(f"unknown ablation {', '.join(unknown)}; choose from {', '.join(ABLATIONS)}")
    names = args.names or list(ABLATIONS)
    result = _count(names, args.turns)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    per_turn = result["instructions_per_turn"]
    print(
        f"instructions per turn (callgrind, {args.turns} turns): "
        f"pass-through {per_turn['passthrough']:,.0f}, gateway {per_turn['gateway']:,.0f} "
        f"(its own work {result['gateway_own']:,.0f}); saved without:"
    )
    for name in names:
        print(f"  {result['saved_per_turn'][name]:>9,.0f}  {result['leaves_out'][name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
