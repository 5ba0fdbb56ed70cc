"""``python -m bench slow_bot``: thousands of slow turns in flight in one gateway process (issue 17 row 1).

A fake bot of the gateway's contract answers every turn after ``--latency`` seconds (1.5); at each
of ``--where`` concurrencies (closed loop, five turns a conversation) one load generator drives
every front against that bot: **bot direct**, the **pass-through** (:mod:`bench.passthrough`),
**gateway memory** and **gateway redis** (``--redis-url``, nothing flushed, keys live
:data:`KEY_TTL` s), and with ``--cluster 1,3`` **gateway cluster N** on Redis Clusters of N
primaries with a replica each (:func:`bench.procs.start_cluster`; their nodes' CPU read beside).
``--repeats`` interleaved rounds, every server started afresh for its round: a warm-up, its idle
RSS, the measured load. A front's ratio is its turns/s over bot direct's in the same repeat; each
figure is the median (min–max) over repeats. Per round: failed turns, p50, each process's CPU, how
busy the machine was, the collector's CPU in the gateway (:func:`serve_metered`), and resident
memory per turn in flight (peak RSS over the window less idle RSS, over the concurrency). Targets:
≥ 0.95 of bot direct at 2,000 concurrent with no failed turn, ≤ 16 KiB per turn in flight.
docs/capacity.md, "Slow bots: turns in flight".

``python -m bench.slow_bot bot --port P --latency S`` is the fake bot; ``python -m bench.slow_bot
--serve STATS -- serve …`` a metered gateway (both started by the run).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import signal
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
from aiohttp import web

from bench import loadgen
from bench.figures import at_least, at_most, target, target_line
from bench.harness import DEFAULT_REDIS_URL, gateway_yaml, write_yaml
from bench.procs import (
    Child,
    Children,
    ClusterNodes,
    cpu_seconds,
    free_port,
    machine_busy,
    python_env,
    read_machine_ticks,
    rss_bytes,
    serve_request,
    served_through,
    start_cluster,
)
from gateway.pa_keys import generate_private_jwk, public_jwks

KEY_TTL = 600
"""``cache.conversation_ttl`` and ``closed_ttl`` of the run's gateways: a shared Redis soon forgets it."""
RATIO_TARGET = 0.95
TARGET_CONCURRENCY = 2000
MEMORY_TARGET_KIB = 16.0
WARM_CONCURRENCY = 50
"""The warm-up before the idle RSS: first-use allocations (caches, imports) are not per turn."""
RSS_SAMPLE_SECONDS = 0.25
BOT_DIRECT = "bot direct"
PASSTHROUGH = "pass-through"
FRONTS = (BOT_DIRECT, PASSTHROUGH, "gateway memory", "gateway redis")
REPLY = orjson.dumps({"text": "Your order A-10001 is on its way.", "end": False})


def serve_bot(argv: Sequence[str]) -> int:
    """The gateway's bot contract (gateway/upstream/http_json.py), answering after ``--latency`` s."""
    parser = argparse.ArgumentParser(prog="python -m bench.slow_bot bot")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--latency", type=float, required=True)
    args = parser.parse_args(argv)

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        await asyncio.sleep(args.latency)
        return web.Response(body=REPLY, content_type="application/json")

    app = web.Application()
    app.router.add_post("/chat", chat)
    # Its own backlog too: thousands of connections open at once when a round starts.
    web.run_app(app, host="127.0.0.1", port=args.port, backlog=8192, access_log=None, print=None)
    return 0


def serve_metered(stats_path: str, argv: Sequence[str]) -> int:
    """``pact-gateway`` ``argv`` in this process with its collector metered: a ``gc.callbacks`` hook adds
    up the collector's CPU and collections per generation; ``SIGUSR1`` writes them to ``stats_path``."""
    from gateway.cli import main as gateway_main

    totals: dict[str, Any] = {"gc_cpu_s": 0.0, "collections": [0, 0, 0]}
    started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
            return
        totals["gc_cpu_s"] += time.process_time() - started[0]
        totals["collections"][info["generation"]] += 1

    gc.callbacks.append(on_gc)
    signal.signal(signal.SIGUSR1, lambda signum, frame: Path(stats_path).write_bytes(orjson.dumps(totals)))
    return gateway_main(list(argv))


@dataclass
class Setup:
    workdir: Path
    key_file: Path
    jwks: dict[str, Any]
    bot_url: str


@dataclass(frozen=True)
class Front:
    """What the load generator drives: the bot itself, the pass-through, or a gateway."""

    name: str
    cache_url: str | None = None
    """The gateway's store; ``None`` for bot direct and the pass-through."""
    redis_pids: tuple[int, ...] = ()
    """The Redis processes of a store the run started (a cluster's nodes): their CPU is read too."""


@dataclass
class Server:
    """One front's server process for one round, and where the load generator reaches it."""

    child: Child | None
    url: str
    mode: str
    stats_path: Path | None


def start_server(children: Children, setup: Setup, front: Front) -> Server:
    """``front``'s process, started afresh and listening (bot direct: the bot, already up)."""
    if front.name == BOT_DIRECT:
        return Server(None, setup.bot_url, "bot", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}/a2a/acme/message:send"
    label = front.name.replace(" ", "-")
    if front.cache_url is None:
        child = children.python(
            label, "-m", "bench.passthrough", "--port", str(port), "--upstream", setup.bot_url
        )
        child.wait_port(port)
        return Server(child, url, "a2a", None)
    cache = {"url": front.cache_url, "conversation_ttl": KEY_TTL, "closed_ttl": KEY_TTL}
    raw = gateway_yaml(port, setup.jwks, {"url": setup.bot_url}, cache)
    config = write_yaml(setup.workdir / f"gateway-{port}.yaml", raw)
    stats_path = setup.workdir / f"{label}-{port}.gc.json"
    served = served_through(
        "bench.slow_bot", str(stats_path), ["-m", "gateway", "serve", "--config", str(config)]
    )
    child = children.python(label, *served)
    child.wait_port(port)
    return Server(child, url, "a2a", stats_path)


class RssSampler:
    """The RSS of one process every :data:`RSS_SAMPLE_SECONDS`, from a thread, stamped with time."""

    def __init__(self, pid: int | None) -> None:
        """``pid`` ``None`` samples nothing (bot direct has no front of its own to weigh)."""
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

    def peak_between(self, start: float, end: float) -> int | None:
        window = [rss for at, rss in self.samples if start <= at <= end]
        return max(window) if window else None


def load(
    setup: Setup, server: Server, concurrency: int, duration: float, warmup: float, latency: float
) -> list[str]:
    return loadgen.argv(
        server.url,
        setup.key_file,
        mode=server.mode,
        duration=duration,
        warmup=warmup,
        concurrency=concurrency,
        users=concurrency,
        request_timeout=latency * 4 + 10,
    )


def drive(argv: list[str], timeout: float) -> dict[str, Any]:
    done = subprocess.run(
        argv, env=python_env(), capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def read_stats(server: Server) -> dict[str, Any] | None:
    """Ask a metered gateway for its collector's figures (:func:`serve_metered`) and read them back."""
    if server.child is None or server.stats_path is None:
        return None
    path = server.stats_path
    path.unlink(missing_ok=True)
    server.child.popen.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size > 0:
            stats: dict[str, Any] = orjson.loads(path.read_bytes())
            return stats
        time.sleep(0.05)
    raise RuntimeError(f"{server.child.name} wrote no figures to {path}")


def measure(
    setup: Setup,
    server: Server,
    concurrency: int,
    args: argparse.Namespace,
    bot: Child,
    redis_pids: Sequence[int],
) -> dict[str, Any]:
    """One round: (for a front of its own) a warm-up and the idle RSS, then the measured load."""
    timeout = args.warmup + args.duration + args.latency * 4 + 120
    idle = None
    child = server.child
    if child is not None:
        drive(load(setup, server, WARM_CONCURRENCY, 2.0, 0.5, args.latency), timeout)
        time.sleep(0.5)
        idle = rss_bytes(child.pid)
    parties = {"bot": bot.pid} if child is None else {"bot": bot.pid, "front": child.pid}
    parties.update({f"redis-{pid}": pid for pid in redis_pids})
    cpu_before = {name: cpu_seconds(pid) for name, pid in parties.items()}
    ticks_before = read_machine_ticks()
    started = time.monotonic()
    window = (started + args.warmup, started + args.warmup + args.duration)
    sampler = RssSampler(None if child is None else child.pid)
    with sampler:
        running = subprocess.Popen(
            load(setup, server, concurrency, args.duration, args.warmup, args.latency),
            env=python_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The collector is read over the measured window only, as the turns are counted.
        time.sleep(args.warmup)
        gc_before = read_stats(server)
        time.sleep(max(window[1] - time.monotonic(), 0))
        gc_after = read_stats(server)
        out, err = running.communicate(timeout=timeout)
    if running.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{err[-2000:]}")
    result: dict[str, Any] = json.loads(out)
    ticks_after = read_machine_ticks()
    cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in parties.items()}
    redis_cpu = sum(seconds for name, seconds in cpu.items() if name.startswith("redis-"))
    cpu = {name: seconds for name, seconds in cpu.items() if not name.startswith("redis-")}
    if redis_pids:
        cpu["redis"] = redis_cpu
    cpu["loadgen"] = result["cpu_s"]
    turns = max(result["turns_total"], 1)
    peak = sampler.peak_between(*window)
    gc_figures = None
    if gc_before is not None and gc_after is not None:
        collections = zip(gc_after["collections"], gc_before["collections"], strict=True)
        gc_figures = {
            "cpu_s": gc_after["gc_cpu_s"] - gc_before["gc_cpu_s"],
            "collections": [after - before for after, before in collections],
        }
    rate = result["throughput_rps"]
    return {
        "turns_per_s": rate,
        "errors": result["errors"],
        "error_samples": result["error_samples"],
        "p50_ms": result["latency_ms"]["p50"],
        "p99_ms": result["latency_ms"]["p99"],
        "cpu_s": cpu,
        "machine_busy": machine_busy(ticks_before, ticks_after),
        # Every completed turn of the round (warm-up too) against the CPU of the whole round.
        "front_cpu_ms_per_turn": None if child is None else cpu["front"] * 1000 / turns,
        "redis_cpu_ms_per_turn": redis_cpu * 1000 / turns if redis_pids else None,
        # Cores busy at the measured rate: a front near 1.0 is bound by its own single process.
        "front_cores": None if child is None else cpu["front"] / turns * rate,
        "redis_cores": redis_cpu / turns * rate if redis_pids else None,
        "gc": gc_figures,
        "rss_idle_mib": None if idle is None else idle / 2**20,
        "rss_peak_mib": None if peak is None else peak / 2**20,
        "rss_kib_per_turn_in_flight": None
        if idle is None or peak is None
        else max(peak - idle, 0) / concurrency / 1024,
    }


def spread(values: Sequence[float | None]) -> dict[str, float] | None:
    """Median, min and max over the repeats; ``None`` when a figure does not apply to the front."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"median": statistics.median(present), "min": min(present), "max": max(present)}


FIGURES = (
    "turns_per_s",
    "ratio",
    "p50_ms",
    "front_cpu_ms_per_turn",
    "redis_cpu_ms_per_turn",
    "front_cores",
    "redis_cores",
    "machine_busy",
    "rss_kib_per_turn_in_flight",
)


def summarise(repeats: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per front: the median and spread of each figure, the ratio taken within each repeat first."""
    for repeat in repeats:
        direct = repeat[BOT_DIRECT]["turns_per_s"]
        for figures in repeat.values():
            figures["ratio"] = figures["turns_per_s"] / direct if direct > 0 else 0.0
    out: dict[str, dict[str, Any]] = {}
    for name in repeats[0]:
        rounds = [repeat[name] for repeat in repeats]
        out[name] = {figure: spread([r[figure] for r in rounds]) for figure in FIGURES}
        out[name]["errors"] = sum(r["errors"] for r in rounds)
        out[name]["gc_cpu_s"] = spread([None if r["gc"] is None else r["gc"]["cpu_s"] for r in rounds])
    return out


def fronts_of(args: argparse.Namespace, clusters: dict[int, ClusterNodes]) -> list[Front]:
    fronts = [Front(BOT_DIRECT)]
    if not args.no_passthrough:
        fronts.append(Front(PASSTHROUGH))
    if "memory" in args.stores:
        fronts.append(Front("gateway memory", "memory://"))
    if "redis" in args.stores:
        fronts.append(Front("gateway redis", args.redis_url))
    fronts.extend(
        Front(f"gateway cluster {size}", nodes.url, tuple(nodes.pids)) for size, nodes in clusters.items()
    )
    return fronts


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="slow-bot-") as tmp, Children(Path(tmp)) as children:
        workdir = Path(tmp)
        clusters = {size: start_cluster(children, size, replicas=True) for size in args.cluster}
        fronts = fronts_of(args, clusters)
        private = generate_private_jwk("ES256")
        key_file = workdir / "pa-key.json"
        key_file.write_text(json.dumps(private))
        bot_port = free_port()
        bot = children.python(
            "bot", "-m", "bench.slow_bot", "bot", "--port", str(bot_port), "--latency", str(args.latency)
        )
        bot.wait_port(bot_port)
        setup = Setup(workdir, key_file, public_jwks(private), f"http://127.0.0.1:{bot_port}/chat")
        rounds: list[dict[str, Any]] = []
        for concurrency in args.where:
            repeats: list[dict[str, dict[str, Any]]] = []
            for repeat in range(args.repeats):
                # Each repeat starts one front later: a drift of the machine falls on every front alike.
                shift = repeat % len(fronts)
                figures: dict[str, dict[str, Any]] = {}
                for front in fronts[shift:] + fronts[:shift]:
                    print(f"# {concurrency} concurrent, repeat {repeat + 1}: {front.name}", file=sys.stderr)
                    server = start_server(children, setup, front)
                    try:
                        figures[front.name] = measure(setup, server, concurrency, args, bot, front.redis_pids)
                    finally:
                        if server.child is not None:
                            children.stop(server.child)
                repeats.append({front.name: figures[front.name] for front in fronts})
            rounds.append({"concurrency": concurrency, "repeats": repeats, "fronts": summarise(repeats)})
    return {
        "settings": {
            "latency_s": args.latency,
            "where": args.where,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "repeats": args.repeats,
            "fronts": [front.name for front in fronts],
            "clusters": {str(size): nodes.url for size, nodes in clusters.items()},
        },
        "rounds": rounds,
        "targets": targets(rounds),
    }


def targets(rounds: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each gateway front's median ratio (at :data:`TARGET_CONCURRENCY`) and memory against the issue's."""
    out: list[dict[str, Any]] = []
    for row in rounds:
        for name, front in row["fronts"].items():
            if not name.startswith("gateway"):
                continue
            if row["concurrency"] == TARGET_CONCURRENCY:
                failed = front["errors"]
                passes = at_least(RATIO_TARGET) if failed == 0 else (lambda _: False)
                name_ratio = f"{name} / bot direct at {TARGET_CONCURRENCY} (median), no failed turn"
                note = f"{failed} failed turns" if failed else ""
                out.append(
                    target(name_ratio, f">= {RATIO_TARGET}", front["ratio"]["median"], passes, note=note)
                )
            kib = front["rss_kib_per_turn_in_flight"]
            name_kib = f"{name} KiB per turn in flight at {row['concurrency']} (median)"
            goal = f"<= {MEMORY_TARGET_KIB:g}"
            out.append(
                target(name_kib, goal, None if kib is None else kib["median"], at_most(MEMORY_TARGET_KIB))
            )
    return out


def _cell(figure: dict[str, float] | None, fmt: str) -> str:
    if figure is None:
        return "-"
    return f"{figure['median']:{fmt}} ({figure['min']:{fmt}}-{figure['max']:{fmt}})"


COLUMNS = (
    ("turns/s", "turns_per_s", ".0f", 20),
    ("ratio", "ratio", ".3f", 20),
    ("p50 ms", "p50_ms", ".0f", 20),
    ("front ms/turn", "front_cpu_ms_per_turn", ".2f", 17),
    ("GC CPU s", "gc_cpu_s", ".2f", 17),
    ("busy", "machine_busy", ".2f", 17),
    ("KiB/turn", "rss_kib_per_turn_in_flight", ".1f", 17),
    ("redis ms/turn", "redis_cpu_ms_per_turn", ".2f", 17),
    ("front cores", "front_cores", ".2f", 17),
    ("redis cores", "redis_cores", ".2f", 17),
)


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        f"slow bot: {s['latency_s']:g} s a turn; {s['duration_s']:g} s measured after {s['warmup_s']:g} s; "
        f"median (min-max) of {s['repeats']} interleaved repeats",
        f"{'concurrent':>10} {'front':<16} {'errors':>6} " + " ".join(f"{c[0]:>{c[3]}}" for c in COLUMNS),
    ]
    for row in result["rounds"]:
        for name, f in row["fronts"].items():
            cells = " ".join(f"{_cell(f[key], fmt):>{width}}" for _, key, fmt, width in COLUMNS)
            lines.append(f"{row['concurrency']:>10} {name:<16} {f['errors']:>6} {cells}")
    lines.append("targets:")
    lines += [target_line(t) for t in result["targets"]]
    return "\n".join(lines)


def _numbers(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n]


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["bot"]:
        return serve_bot(args_list[1:])
    served = serve_request(args_list, "python -m bench.slow_bot --serve STATS -- serve …")
    if served is not None:
        return serve_metered(*served)
    parser = argparse.ArgumentParser(prog="python -m bench slow_bot", description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=1.5, help="the bot's seconds per turn")
    parser.add_argument(
        "--where",
        type=_numbers,
        default=[TARGET_CONCURRENCY],
        help="concurrent conversations, comma-separated",
    )
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds per round")
    parser.add_argument("--warmup", type=float, default=4.0, help="seconds before measuring")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every front")
    parser.add_argument(
        "--stores",
        type=lambda text: text.split(","),
        default=["memory", "redis"],
        help="gateway stores to run: memory,redis ('' for neither, beside --cluster)",
    )
    parser.add_argument(
        "--cluster",
        type=_numbers,
        default=[],
        help="primaries of Redis Clusters (a replica each) the run starts, comma-separated: a front on each",
    )
    parser.add_argument("--no-passthrough", action="store_true", help="leave the pass-through out")
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
