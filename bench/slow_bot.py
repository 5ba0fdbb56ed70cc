"""``python -m bench capacity slow_bot``: thousands of slow turns in flight in one gateway process.

Issue 17, row 1: a support bot backed by a language model takes seconds a turn, so one process
must hold thousands of turns at once. A fake bot of the gateway's own contract answers every
turn after ``--latency`` seconds (1.5 by default); ``--where`` lists the numbers of concurrent
conversations (closed loop, one turn at a time each, five turns a conversation). At each, side
by side in one run and against the same bot process:

* **bot direct**: the load generator speaks the bot's contract to the bot itself;
* **gateway, memory store** and **gateway, Redis store** (``--redis-url``: use your own database;
  nothing is flushed, the keys live ``KEY_TTL`` seconds), each a ``pact-gateway serve`` process
  with the defaults an operator gets but for addresses, keys, the store and §6 limits that never
  bind (one personal agent carries the whole load here).

Each prints turns/s, the ratio to bot direct, failed turns, p50, the CPU of each process, how
busy the whole machine was, and the gateway's resident memory per turn in flight: the median of
its RSS over the measured window, less its RSS just before the load (after a short warm-up),
divided by the concurrency (closed loop: every conversation has one turn in flight, nearly all
of it at the bot). On the memory store that includes the conversations the run opens, as the
issue measured it. The targets: at least 0.95 of bot direct at 2,000 concurrent with no failed
turn, at most 16 KiB per turn in flight.

The load generator is :mod:`bench.loadgen` (aiohttp, one process): on a 2-core machine it, the bot
and the gateway share the cores, so "machine busy" near 100 % means the figures measure the
machine, not the gateway (docs/capacity.md, "Slow bots: turns in flight").

``python -m bench.slow_bot bot --port P --latency S`` is the fake bot (started by the run).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

from bench.procs import (
    Child,
    Children,
    cpu_seconds,
    free_port,
    machine_busy,
    python_env,
    read_machine_ticks,
)
from gateway.pa_keys import generate_private_jwk, public_jwks

__all__ = ["main"]

ISSUER = "https://pa.bench.invalid"
AUDIENCE = "pact-gateway-bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
KEY_TTL = 600
"""``cache.conversation_ttl`` and ``closed_ttl`` of the run's gateways: a shared Redis soon forgets it."""
RATIO_TARGET = 0.95
TARGET_CONCURRENCY = 2000
MEMORY_TARGET_KIB = 16.0
WARM_CONCURRENCY = 50
"""The warm-up before the RSS baseline: first-use allocations (caches, imports) are not per turn."""
RSS_SAMPLE_SECONDS = 0.25
FRONTS = ("bot direct", "gateway memory", "gateway redis")
REPLY = orjson.dumps({"text": "Your order A-10001 is on its way.", "end": False})


# ---- the fake bot ----------------------------------------------------------------------------


def bot_app(latency: float) -> web.Application:
    """The gateway's bot contract (gateway/upstream/http_json.py), answering after ``latency`` s."""

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(latency)
        return web.Response(body=REPLY, content_type="application/json")

    app = web.Application()
    app.router.add_post("/chat", chat)
    return app


def serve_bot(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.slow_bot bot")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, required=True)
    args = parser.parse_args(argv)
    # Its own backlog too: thousands of connections open at once when a round starts.
    web.run_app(
        bot_app(args.latency),
        host="127.0.0.1",
        port=args.port,
        backlog=8192,
        access_log=None,
        print=None,
    )
    return 0


# ---- the run ---------------------------------------------------------------------------------


@dataclass
class Setup:
    workdir: Path
    key_file: Path
    jwks: dict[str, Any]
    bot_url: str


@dataclass
class Front:
    """What the load generator drives: the bot itself, or a gateway process in front of it."""

    name: str
    url: str
    mode: str
    gateway: Child | None
    port: int


def gateway_config(setup: Setup, port: int, cache_url: str) -> Path:
    """An operator's file: defaults but for addresses, keys, the store, and §6 limits that never bind."""
    raw = {
        "listen": {"host": "127.0.0.1", "port": port},
        "public_url": f"http://127.0.0.1:{port}",
        "provider": {"organization": "Bench", "url": "https://bench.invalid", "audience": AUDIENCE},
        "personal_agents": {"policy": "allowlist", "registered": [{"issuer": ISSUER, "jwks": setup.jwks}]},
        "cache": {"url": cache_url, "conversation_ttl": KEY_TTL, "closed_ttl": KEY_TTL},
        "rate_limits": {
            "per_agent": {"rate": 1_000_000, "burst": 1_000_000},
            "per_user": {"rate": 1_000_000, "burst": 1_000_000},
        },
        "metrics": {"enabled": False},
        "brands": [
            {
                "id": "acme",
                "name": "Acme Support",
                "description": "Order status.",
                "version": "1.0.0",
                "upstream": {"url": setup.bot_url},
            }
        ],
    }
    path = setup.workdir / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


class RssSampler:
    """The RSS of one process every :data:`RSS_SAMPLE_SECONDS`, from a thread, stamped with time."""

    def __init__(self, pid: int | None) -> None:
        """``pid`` ``None`` samples nothing (bot direct has no gateway to weigh)."""
        self._pid = pid
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        if self._pid is None:
            return
        while not self._stop.wait(RSS_SAMPLE_SECONDS):
            try:
                self.samples.append((time.monotonic(), rss_bytes(self._pid)))
            except (OSError, RuntimeError):
                return

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def median_between(self, start: float, end: float) -> int | None:
        window = [rss for at, rss in self.samples if start <= at <= end]
        return int(statistics.median(window)) if window else None


def loadgen(
    setup: Setup, url: str, mode: str, concurrency: int, duration: float, warmup: float, latency: float
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "bench.loadgen",
        *("--url", url, "--mode", mode),
        *("--concurrency", str(concurrency), "--subs", str(concurrency)),
        *("--duration", str(duration), "--warmup", str(warmup), "--turns", "5"),
        *("--request-timeout", str(latency * 4 + 10)),
        *("--key-file", str(setup.key_file), "--issuer", ISSUER, "--audience", AUDIENCE),
    ]


def drive(argv: list[str], timeout: float) -> dict[str, Any]:
    done = subprocess.run(
        argv, env=python_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def measure(
    setup: Setup,
    url: str,
    mode: str,
    concurrency: int,
    args: argparse.Namespace,
    parties: dict[str, Child],
    gateway: Child | None,
) -> dict[str, Any]:
    """One round: (for a gateway) a warm-up and the RSS baseline, then the measured load."""
    timeout = args.warmup + args.duration + args.latency * 4 + 120
    baseline = None
    if gateway is not None:
        drive(loadgen(setup, url, mode, WARM_CONCURRENCY, 2.0, 0.5, args.latency), timeout)
        time.sleep(0.5)
        baseline = rss_bytes(gateway.pid)
    cpu_before = {name: cpu_seconds(child.pid) for name, child in parties.items()}
    ticks_before = read_machine_ticks()
    started = time.monotonic()
    sampler = RssSampler(gateway.pid if gateway is not None else None)
    with sampler:
        load = loadgen(setup, url, mode, concurrency, args.duration, args.warmup, args.latency)
        result = drive(load, timeout)
    ticks_after = read_machine_ticks()
    cpu = {name: cpu_seconds(child.pid) - cpu_before[name] for name, child in parties.items()}
    cpu["loadgen"] = result["cpu_s"]
    window = (started + args.warmup, started + args.warmup + args.duration)
    loaded = sampler.median_between(*window)
    per_turn = None
    if baseline is not None and loaded is not None:
        per_turn = max(loaded - baseline, 0) / concurrency / 1024
    return {
        "turns_per_s": result["throughput_rps"],
        "errors": result["errors"],
        "error_samples": result["error_samples"],
        "p50_ms": result["latency_ms"]["p50"],
        "p99_ms": result["latency_ms"]["p99"],
        "cpu_s": cpu,
        "machine_busy": machine_busy(ticks_before, ticks_after),
        # Every completed turn of the round (warm-up too) against the CPU of the whole round.
        "gateway_cpu_ms_per_turn": None
        if gateway is None
        else cpu["gateway"] * 1000 / max(result["turns_total"], 1),
        "rss_idle_mib": None if baseline is None else baseline / 2**20,
        "rss_loaded_mib": None if loaded is None else loaded / 2**20,
        "rss_kib_per_turn_in_flight": per_turn,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="slow-bot-") as tmp, Children(Path(tmp)) as children:
        workdir = Path(tmp)
        private = generate_private_jwk("ES256")
        key_file = workdir / "pa-key.json"
        key_file.write_text(json.dumps(private))
        bot_port = free_port()
        bot = children.python(
            "bot", "-m", "bench.slow_bot", "bot", "--port", str(bot_port), "--latency", str(args.latency)
        )
        setup = Setup(workdir, key_file, public_jwks(private), f"http://127.0.0.1:{bot_port}/chat")
        fronts = [Front("bot direct", setup.bot_url, "bot", None, bot_port)]
        for name, cache_url in (("gateway memory", "memory://"), ("gateway redis", args.redis_url)):
            if name.split()[1] not in args.stores:
                continue
            port = free_port()
            config = str(gateway_config(setup, port, cache_url))
            gateway = children.python(name.replace(" ", "-"), "-m", "gateway", "serve", "--config", config)
            fronts.append(Front(name, f"http://127.0.0.1:{port}/a2a/acme/message:send", "a2a", gateway, port))
        for front in fronts:
            (front.gateway or bot).wait_port(front.port)
        rounds: list[dict[str, Any]] = []
        for concurrency in args.where:
            row: dict[str, Any] = {"concurrency": concurrency, "fronts": {}}
            for front in fronts:
                parties = {"bot": bot} if front.gateway is None else {"bot": bot, "gateway": front.gateway}
                print(f"# {concurrency} concurrent: {front.name}", file=sys.stderr, flush=True)
                row["fronts"][front.name] = measure(
                    setup, front.url, front.mode, concurrency, args, parties, front.gateway
                )
            direct = row["fronts"]["bot direct"]["turns_per_s"]
            for figures in row["fronts"].values():
                figures["ratio"] = figures["turns_per_s"] / direct if direct > 0 else 0.0
            rounds.append(row)
    return {
        "settings": {
            "latency_s": args.latency,
            "where": args.where,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "stores": args.stores,
        },
        "rounds": rounds,
        "targets": targets(rounds),
    }


def targets(rounds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each gateway front's ratio (at :data:`TARGET_CONCURRENCY`) and memory, judged against the issue's."""
    out: list[dict[str, Any]] = []
    for row in rounds:
        for name, front in row["fronts"].items():
            if name == "bot direct":
                continue
            if row["concurrency"] == TARGET_CONCURRENCY:
                out.append(
                    {
                        "name": f"{name} / bot direct at {TARGET_CONCURRENCY}, no failed turn",
                        "measured": front["ratio"],
                        "target": f">= {RATIO_TARGET}",
                        "passed": front["ratio"] >= RATIO_TARGET and front["errors"] == 0,
                    }
                )
            per_turn = front["rss_kib_per_turn_in_flight"]
            out.append(
                {
                    "name": f"{name} KiB per turn in flight at {row['concurrency']}",
                    "measured": per_turn,
                    "target": f"<= {MEMORY_TARGET_KIB:g}",
                    "passed": per_turn is not None and per_turn <= MEMORY_TARGET_KIB,
                }
            )
    return out


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        f"slow bot: {s['latency_s']:g} s a turn; {s['duration_s']:g} s measured after {s['warmup_s']:g} s",
        f"{'concurrent':>10} {'front':<15} {'turns/s':>8} {'ratio':>6} {'errors':>6} {'p50 ms':>7} "
        f"{'CPU gw/bot/load s':>18} {'gw ms/turn':>10} {'busy':>5} {'KiB/turn':>8}",
    ]
    for row in result["rounds"]:
        for name, f in row["fronts"].items():
            cpu = f["cpu_s"]
            cpus = f"{cpu.get('gateway', 0):.1f}/{cpu['bot']:.1f}/{cpu['loadgen']:.1f}"
            kib = f["rss_kib_per_turn_in_flight"]
            ms = f["gateway_cpu_ms_per_turn"]
            lines.append(
                f"{row['concurrency']:>10} {name:<15} {f['turns_per_s']:>8.1f} {f['ratio']:>6.3f} "
                f"{f['errors']:>6} {f['p50_ms']:>7.0f} {cpus:>18} {'-' if ms is None else f'{ms:.2f}':>10} "
                f"{f['machine_busy']:>5.0%} "
                f"{'-' if kib is None else f'{kib:.1f}':>8}"
            )
    lines.append("targets:")
    for t in result["targets"]:
        measured = "n/a" if t["measured"] is None else f"{t['measured']:.3f}"
        lines.append(f"  {t['name']}: {measured} (target {t['target']}) {'PASS' if t['passed'] else 'MISS'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["bot"]:
        return serve_bot(args_list[1:])
    parser = argparse.ArgumentParser(prog="python -m bench capacity slow_bot", description=__doc__)
    parser.add_argument("--latency", type=float, default=1.5, help="the bot's seconds per turn")
    parser.add_argument(
        "--where",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[TARGET_CONCURRENCY],
        help="concurrent conversations, comma-separated (default 2000)",
    )
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per round")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds before measuring")
    parser.add_argument(
        "--stores",
        type=lambda text: text.split(","),
        default=["memory", "redis"],
        help="gateway stores to run: memory,redis",
    )
    parser.add_argument(
        "--redis-url", default=DEFAULT_REDIS_URL, help="your own database; nothing is flushed"
    )
    parser.add_argument("--out", type=Path, help="also write the result as JSON here")
    args = parser.parse_args(args_list)
    result = run(args)
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2))
    print(render(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
