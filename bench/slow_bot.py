"""``python -m bench slow_bot``: thousands of slow turns in flight in one gateway process (issue 17 row 1).

A fake bot of the gateway's contract answers every turn after ``--latency`` seconds (1.5); at each
of ``--where`` concurrencies (closed loop, five turns a conversation) one load generator drives
every front against it: **bot direct**, the **pass-through** (:mod:`bench.passthrough`), **gateway
memory** and **gateway redis** (``--redis-url``, nothing flushed, keys live :data:`KEY_TTL` s), and
with ``--cluster 1,3`` **gateway cluster N** on Redis Clusters of N primaries with a replica each
that the run starts (their nodes' CPU read beside). ``--repeats`` interleaved rounds, every server
started afresh: a warm-up, its idle RSS, the measured load. A ratio is a front's turns/s over bot
direct's in the same repeat; each figure is the median (min-max) over repeats, beside resident
memory per turn in flight (peak RSS over the window less idle RSS, over the concurrency). Targets:
≥ 0.95 of bot direct at 2,000 with no failed turn, ≤ 16 KiB a turn in flight (docs/capacity.md).

``python -m bench slow_bot bot PORT SECONDS`` is the fake bot (started by the run).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import orjson
from aiohttp import web

from bench import loadgen
from bench.figures import spread, target, target_line
from bench.harness import (
    DEFAULT_REDIS_URL,
    MEMORY_BOUND_NOTE,
    front_parser,
    gateway_yaml,
    load_json,
    report,
    run_load,
    write_key,
    write_yaml,
)
from bench.procs import Child, Children, free_port, rss_bytes, start_cluster

KEY_TTL = 600
"""``cache.conversation_ttl`` and ``closed_ttl`` of the run's gateways: a shared Redis soon forgets it."""
RATIO_TARGET, TARGET_CONCURRENCY, MEMORY_TARGET_KIB = 0.95, 2000, 16.0
WARM_CONCURRENCY = 50
"""The warm-up before the idle RSS: first-use allocations (caches, imports) are not per turn."""
RSS_SAMPLE_SECONDS = 0.25
BOT_DIRECT, PASSTHROUGH = "bot direct", "pass-through"
FRONTS = (BOT_DIRECT, PASSTHROUGH, "gateway memory", "gateway redis")
FIGURES: tuple[str, ...] = ("turns_per_s", "ratio", "p50_ms", "front_cpu_ms_per_turn", "machine_busy")
FIGURES += ("rss_kib_per_turn_in_flight", "redis_cpu_ms_per_turn", "front_cores", "redis_cores")
REPLY = orjson.dumps({"text": "Your order A-10001 is on its way.", "end": False})


def serve_bot(port: int, latency: float) -> int:
    """The gateway's bot contract (gateway/upstream/http_json.py), answering after ``latency`` s."""

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(latency)
        return web.Response(body=REPLY, content_type="application/json")

    app = web.Application()
    app.router.add_post("/chat", chat)
    # Its own backlog too: thousands of connections open at once when a round starts.
    web.run_app(app, host="127.0.0.1", port=port, backlog=8192, access_log=None, print=None)
    return 0


class Front(NamedTuple):
    """What the load generator drives: the bot itself, the pass-through, or a gateway on ``cache_url``."""

    name: str
    cache_url: str | None = None
    redis_pids: tuple[int, ...] = ()
    """The Redis processes of a store the run started (a cluster's nodes): their CPU is read too."""


class Rounds:
    """The run's fake bot and personal agent's key; each front started afresh for each of its rounds."""

    def __init__(self, children: Children, workdir: Path, args: argparse.Namespace) -> None:
        self.children, self.workdir, self.args = children, workdir, args
        port = free_port()
        self.bot = children.python("bot", "-m", "bench", "slow_bot", "bot", str(port), str(args.latency))
        self.bot.wait_port(port)
        self.bot_url, self.key_file = f"http://127.0.0.1:{port}/chat", workdir / "pa-key.json"
        self.jwks = write_key(self.key_file)

    def start(self, front: Front) -> tuple[Child | None, str]:
        """``front``'s process, started afresh and listening, and its turn URL (bot direct: the bot's)."""
        if front.name == BOT_DIRECT:
            return None, self.bot_url
        port, label = free_port(), front.name.replace(" ", "-")
        argv = ["-m", "bench.passthrough", "--port", str(port), "--upstream", self.bot_url]
        if front.cache_url is not None:
            cache = {"url": front.cache_url, "conversation_ttl": KEY_TTL, "closed_ttl": KEY_TTL}
            config = write_yaml(
                self.workdir / f"{label}.yaml", gateway_yaml(port, self.jwks, {"url": self.bot_url}, cache)
            )
            argv = ["-m", "gateway", "serve", "--config", str(config)]
        child = self.children.python(label, *argv)
        child.wait_port(port)
        return child, f"http://127.0.0.1:{port}/a2a/acme/message:send"

    def measure(self, front: Front, concurrency: int) -> dict[str, Any]:
        """One round: (for a front of its own) a warm-up and the idle RSS, then the measured load."""
        args = self.args
        child, url = self.start(front)
        try:

            def load(concurrency: int, duration: float, warmup: float) -> list[str]:
                return loadgen.argv(
                    url,
                    self.key_file,
                    mode="bot" if child is None else "a2a",
                    duration=duration,
                    warmup=warmup,
                    concurrency=concurrency,
                    users=concurrency,
                    request_timeout=args.latency * 4 + 10,
                )

            idle, samples = None, []
            if child is not None:
                load_json(load(WARM_CONCURRENCY, 2.0, 0.5), args.warmup + args.latency * 4 + 120)
                time.sleep(0.5)
                idle = rss_bytes(child.pid)
            parties = {"bot": self.bot.pid} | ({} if child is None else {"front": child.pid})
            parties |= {f"redis-{pid}": pid for pid in front.redis_pids}
            # The RSS is sampled over the measured window only, as turns are counted.
            window = time.monotonic() + args.warmup, time.monotonic() + args.warmup + args.duration

            def sample() -> None:
                time.sleep(RSS_SAMPLE_SECONDS)
                if child is not None and window[0] <= time.monotonic() <= window[1]:
                    samples.append(rss_bytes(child.pid))

            limit = args.warmup + args.duration + args.latency * 4 + 120
            result = run_load(
                load(concurrency, args.duration, args.warmup), parties, self.workdir, limit, sample
            )
        finally:
            if child is not None:
                self.children.stop(child)
        cpu = result["cpu_s"]
        redis = sum(cpu.pop(name) for name in list(cpu) if name.startswith("redis-"))
        turns, rate = max(result["turns_total"], 1), result["throughput_rps"]
        per_turn = {"front": cpu.get("front"), "redis": redis if front.redis_pids else None}
        return {
            "turns_per_s": rate,
            "errors": result["errors"],
            "error_samples": result["error_samples"],
            "p50_ms": result["latency_ms"]["p50"],
            "cpu_s": {**cpu, "redis": redis},
            "machine_busy": result["machine_busy"],
            # Every completed turn (warm-up too) against the round's CPU; the cores busy at the measured
            # rate (a front near 1.0 is bound by its own single process).
            **{f"{p}_cpu_ms_per_turn": None if s is None else s * 1000 / turns for p, s in per_turn.items()},
            **{f"{p}_cores": None if s is None else s / turns * rate for p, s in per_turn.items()},
            "rss_kib_per_turn_in_flight": None
            if idle is None or not samples
            else max(max(samples) - idle, 0) / concurrency / 1024,
        }


def summarise(repeats: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per front: the median and spread of each figure, the ratio taken within each repeat first."""
    for repeat in repeats:
        direct = repeat[BOT_DIRECT]["turns_per_s"]
        for figures in repeat.values():
            figures["ratio"] = figures["turns_per_s"] / direct if direct > 0 else 0.0
    return {
        name: {figure: spread([r[name][figure] for r in repeats]) for figure in FIGURES}
        | {"errors": sum(r[name]["errors"] for r in repeats)}
        for name in repeats[0]
    }


def targets(rounds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each gateway front's median ratio (at :data:`TARGET_CONCURRENCY`) and memory against the issue's."""
    out: list[dict[str, Any]] = []
    for row in rounds:
        for name, front in ((n, f) for n, f in row["fronts"].items() if n.startswith("gateway")):
            if row["concurrency"] == TARGET_CONCURRENCY:
                failed = front["errors"]
                what = f"{name} / bot direct at {TARGET_CONCURRENCY} (median), no failed turn"
                note, ratio = f"{failed} failed turns" if failed else "", front["ratio"]["median"]
                passes = None if failed == 0 else (lambda _: False)
                out.append(target(what, f">= {RATIO_TARGET}", ratio, note=note, passes=passes))
            kib = front["rss_kib_per_turn_in_flight"]
            what = f"{name} KiB per turn in flight at {row['concurrency']} (median)"
            out.append(target(what, f"<= {MEMORY_TARGET_KIB:g}", None if kib is None else kib["median"]))
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="slow-bot-") as tmp, Children(Path(tmp)) as children:
        workdir = Path(tmp)
        clusters = {size: start_cluster(children, size, replicas=True) for size in args.cluster}
        fronts = [Front(BOT_DIRECT)] + ([] if args.no_passthrough else [Front(PASSTHROUGH)])
        if "memory" in args.stores:
            fronts.append(Front("gateway memory", "memory://"))
            print(f"# {MEMORY_BOUND_NOTE}", file=sys.stderr)
        fronts += [Front("gateway redis", args.redis_url)] if "redis" in args.stores else []
        fronts += [Front(f"gateway cluster {n}", c.url, tuple(c.pids)) for n, c in clusters.items()]
        setup = Rounds(children, workdir, args)
        rounds: list[dict[str, Any]] = []
        for concurrency in args.where:
            repeats: list[dict[str, dict[str, Any]]] = []
            for repeat in range(args.repeats):
                # Each repeat starts one front later: a drift of the machine falls on every front alike.
                shift = repeat % len(fronts)
                figures: dict[str, dict[str, Any]] = {}
                for front in fronts[shift:] + fronts[:shift]:
                    print(f"# {concurrency} concurrent, repeat {repeat + 1}: {front.name}", file=sys.stderr)
                    figures[front.name] = setup.measure(front, concurrency)
                repeats.append({front.name: figures[front.name] for front in fronts})
            rounds.append({"concurrency": concurrency, "repeats": repeats, "fronts": summarise(repeats)})
    settings = {key: getattr(args, key) for key in ("latency", "where", "duration", "warmup", "repeats")}
    settings |= {"fronts": [f.name for f in fronts], "clusters": {str(n): c.url for n, c in clusters.items()}}
    return {"settings": settings, "rounds": rounds, "targets": targets(rounds)}


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        f"slow bot: {s['latency']:g} s a turn; {s['duration']:g} s measured after {s['warmup']:g} s; "
        f"median (min-max) of {s['repeats']} interleaved repeats",
        f"{'concurrent':>10} {'front':<17} {'errors':>6} " + " ".join(f"{f:>22}" for f in FIGURES),
    ]
    for row in result["rounds"]:
        for name, f in row["fronts"].items():
            cells = [
                "-" if (c := f[key]) is None else f"{c['median']:.2f} ({c['min']:.2f}-{c['max']:.2f})"
                for key in FIGURES
            ]
            lines.append(
                f"{row['concurrency']:>10} {name:<17} {f['errors']:>6} " + " ".join(f"{c:>22}" for c in cells)
            )
    return "\n".join([*lines, "targets:", *(target_line(t) for t in result["targets"])])


def _numbers(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n]


def main(argv: Sequence[str]) -> int:
    if argv[:1] == ["bot"]:  # the fake bot's process, started by run
        return serve_bot(int(argv[1]), float(argv[2]))
    parser = front_parser("slow_bot", __doc__)
    parser.add_argument("--latency", type=float, default=1.5, help="the bot's seconds per turn")
    parser.add_argument("--where", type=_numbers, default=[TARGET_CONCURRENCY], help="concurrencies, a,b,…")
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per round")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds before measuring")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every front")
    parser.add_argument(
        "--stores", type=lambda text: text.split(","), default=["memory", "redis"], help="memory,redis or ''"
    )
    parser.add_argument("--cluster", type=_numbers, default=[], help="primaries of clusters to start, a,b,…")
    parser.add_argument("--no-passthrough", action="store_true", help="leave the pass-through out")
    parser.add_argument(
        "--redis-url", default=DEFAULT_REDIS_URL, help="your own database; nothing is flushed"
    )
    args = parser.parse_args(argv)
    result = run(args)
    report(result, args.out, render(result))
    return 0
