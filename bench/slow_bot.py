"""``python -m bench capacity slow_bot``: thousands of slow turns in flight in one gateway process.

Issue 17, row 1: a support bot backed by a language model takes seconds a turn, so one process
must hold thousands of turns at once. A fake bot of the gateway's own contract answers every
turn after ``--latency`` seconds (1.5 by default); ``--where`` lists the numbers of concurrent
conversations (closed loop, one turn at a time each, five turns a conversation). At each, the
same load generator and the same bot process drive every front:

* **bot direct**: the load generator speaks the bot's contract to the bot itself;
* **pass-through**: :mod:`bench.passthrough`, a bare aiohttp forwarder with no gateway logic,
  what aiohttp alone costs a turn in flight;
* **pass-through gateway client**: the same forwarder calling the bot through the gateway's own
  client (:mod:`gateway.upstream.client`) instead of aiohttp's ``ClientSession``, the server side
  unchanged: what that client saves a turn in flight, the reason it is kept;
* **pass-through asyncio server**: the same again with aiohttp's server replaced by a bare asyncio
  protocol (``--server asyncio``): no HTTP framework on either side, the floor of a turn in
  flight in Python, to tell how much of the rest is aiohttp's server;
* **gateway memory** and **gateway redis** (``--redis-url``: use your own database; nothing is
  flushed, the keys live ``KEY_TTL`` seconds), each a ``pact-gateway serve`` process with the
  defaults an operator gets but for addresses, keys, the store and §6 limits that never bind
  (one personal agent carries the whole load here);
* with ``--gc-threshold N,M``, **gateway memory gc=N** …: the memory gateway again with its
  young-generation collector threshold set to N instead of ``YOUNG_GC_THRESHOLD``, side by side;
  with ``--uvloop``, **gateway memory uvloop**: the same on uvloop's event loop;
* with ``--cluster 1,3``, **gateway cluster N** for each N: the gateway on a Redis Cluster of N
  primaries, each with one replica, that the run starts (:func:`bench.procs.start_cluster`) and
  the gateway reaches by its ``redis+cluster://`` URL with the defaults (``cache.wait_replicas``
  1). ``--latency 0 --where 64`` makes it a turns/s comparison of one primary with three (issue 20
  item 6), where the CPU of the cluster's nodes is read beside the gateway's.

``--repeats`` rounds of every front, interleaved (each repeat starts one front later, so a drift
of the shared machine falls on every front alike), every server process started afresh for its
round: a warm-up, its idle RSS, then the measured load. A front's ratio is its turns/s over bot
direct's *of the same repeat*; each figure is printed as the median with the spread (min–max)
over the repeats. Per front and round: failed turns, p50, the CPU of each process, how busy the
machine was, the collector's CPU and collections in the gateway over the measured window, and
resident memory per turn in flight: the process's peak RSS over the measured window (sampled
every :data:`RSS_SAMPLE_SECONDS`) less its idle RSS after the warm-up, divided by the concurrency
(closed loop: every conversation has one turn in flight, nearly all of it at the bot). On the
memory store that includes the conversations the run opens, as the issue measured it. The
targets: at least 0.95 of bot direct at 2,000 concurrent with no failed turn, at most 16 KiB per
turn in flight.

``--tracemalloc`` runs the gateways with ``tracemalloc`` on (far slower: read its memory, not its
ratios) and prints, per gateway front, the lines whose allocations grew most between idle and
loaded, divided by the turns in flight.

The load generator is :mod:`bench.loadgen` (aiohttp, one process): on a 2-core machine it, the bot
and the front share the cores, so "machine busy" near 100 % means the figures measure the
machine, not the gateway (docs/capacity.md, "Slow bots: turns in flight").

``python -m bench.slow_bot bot --port P --latency S`` is the fake bot (started by the run);
``python -m bench.slow_bot --serve THRESHOLD,LOOP,STATS -- serve …`` a metered gateway (the same).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
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
import yaml
from aiohttp import web

from bench.passthrough import Client, ServerStack
from bench.procs import (
    Child,
    Children,
    ClusterNodes,
    cpu_seconds,
    free_port,
    machine_busy,
    python_env,
    read_machine_ticks,
    serve_request,
    served_through,
    start_cluster,
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
"""The warm-up before the idle RSS: first-use allocations (caches, imports) are not per turn."""
RSS_SAMPLE_SECONDS = 0.25
TRACEMALLOC_TOP = 15
BOT_DIRECT = "bot direct"
PASSTHROUGH = "pass-through"
PASSTHROUGH_GATEWAY_CLIENT = "pass-through gateway client"
PASSTHROUGH_ASYNCIO_SERVER = "pass-through asyncio server"
PASSTHROUGHS = (PASSTHROUGH, PASSTHROUGH_GATEWAY_CLIENT, PASSTHROUGH_ASYNCIO_SERVER)
FRONTS = (BOT_DIRECT, *PASSTHROUGHS, "gateway memory", "gateway redis")
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


# ---- the gateway process, metered -----------------------------------------------------------


def serve_metered(threshold: str, loop: str, stats_path: str, argv: Sequence[str]) -> int:
    """``pact-gateway`` ``argv`` in this process, its young GC threshold set and its collector metered.

    ``threshold`` is ``default`` (the gateway's own :data:`YOUNG_GC_THRESHOLD`) or a number that
    replaces it before :func:`settle_heap` applies it, so gateways that differ in that one number
    run side by side; ``loop`` ``uvloop`` sets uvloop's event loop policy first (uvloop is no
    dependency of the gateway: install it where the run can import it). Every gateway front runs
    through here, so each carries the same meter: a ``gc.callbacks`` hook adding up the
    collector's CPU time and its collections per generation; ``SIGUSR1`` writes the totals to
    ``stats_path`` as JSON (the run reads them before and after the measured window). With
    ``tracemalloc`` on (``--tracemalloc``), ``SIGUSR2`` takes a snapshot: the first is the idle
    one, each later one writes the largest differences from it to ``stats_path`` + ``.top``.
    """
    import tracemalloc

    from gateway.cli import main as gateway_main
    from gateway.process import server

    if threshold != "default":
        server.YOUNG_GC_THRESHOLD = int(threshold)
    if loop == "uvloop":
        asyncio.set_event_loop_policy(importlib.import_module("uvloop").EventLoopPolicy())
    totals: dict[str, Any] = {"gc_cpu_s": 0.0, "collections": [0, 0, 0]}
    started = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
            return
        totals["gc_cpu_s"] += time.process_time() - started[0]
        totals["collections"][info["generation"]] += 1

    def report(signum: int, frame: object) -> None:
        Path(stats_path).write_bytes(orjson.dumps(totals))

    idle: list[tracemalloc.Snapshot] = []

    def top(signum: int, frame: object) -> None:
        snapshot = tracemalloc.take_snapshot()
        if not idle:
            idle.append(snapshot)
            Path(stats_path + ".top").write_bytes(orjson.dumps({"idle": True}))
            return
        stats = snapshot.compare_to(idle[0], "lineno")[:TRACEMALLOC_TOP]
        rows = [
            {"where": str(stat.traceback[0]), "bytes": stat.size_diff, "count": stat.count_diff}
            for stat in stats
        ]
        total = sum(stat.size_diff for stat in snapshot.compare_to(idle[0], "filename"))
        Path(stats_path + ".top").write_bytes(orjson.dumps({"total": total, "top": rows}))

    gc.callbacks.append(on_gc)
    signal.signal(signal.SIGUSR1, report)
    signal.signal(signal.SIGUSR2, top)
    return gateway_main(list(argv))


# ---- the run ---------------------------------------------------------------------------------


@dataclass
class Setup:
    workdir: Path
    key_file: Path
    jwks: dict[str, Any]
    bot_url: str
    tracemalloc: bool


@dataclass(frozen=True)
class Front:
    """What the load generator drives: the bot itself, a pass-through, or a gateway."""

    name: str
    cache_url: str | None = None
    """The gateway's store; ``None`` for bot direct and the pass-throughs."""
    gc_threshold: str = "default"
    loop: str = "asyncio"
    redis_pids: tuple[int, ...] = ()
    """The Redis processes of a store the run started (a cluster's nodes): their CPU is read too."""
    client: Client = "aiohttp"
    """A pass-through's bot client (its ``--client``)."""
    server: ServerStack = "aiohttp"
    """A pass-through's server side (its ``--server``)."""


@dataclass
class Server:
    """One front's server process for one round, and where the load generator reaches it."""

    child: Child | None
    url: str
    mode: str
    stats_path: Path | None


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


def start_server(children: Children, setup: Setup, front: Front, bot: Child, bot_port: int) -> Server:
    """``front``'s process, started afresh and listening (bot direct: the bot, already up)."""
    if front.name == BOT_DIRECT:
        return Server(None, setup.bot_url, "bot", None)
    port = free_port()
    url = f"http://127.0.0.1:{port}/a2a/acme/message:send"
    label = front.name.replace(" ", "-").replace("=", "")
    if front.cache_url is None:
        argv = ["-m", "bench.passthrough", "--client", front.client, "--server", front.server]
        argv += ["--port", str(port), "--upstream", setup.bot_url]
        child = children.python(label, *argv)
        child.wait_port(port)
        return Server(child, url, "a2a", None)
    config = gateway_config(setup, port, front.cache_url)
    stats_path = setup.workdir / f"{label}-{port}.gc.json"
    served = served_through(
        "bench.slow_bot",
        f"{front.gc_threshold},{front.loop},{stats_path}",
        ["-m", "gateway", "serve", "--config", str(config)],
    )
    env = ["-X", "tracemalloc=1"] if setup.tracemalloc else []
    child = children.python(label, *env, *served)
    child.wait_port(port)
    return Server(child, url, "a2a", stats_path)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


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


def read_stats(server: Server, signum: signal.Signals, suffix: str = "") -> dict[str, Any] | None:
    """Ask a metered gateway for its figures (:func:`serve_metered`) and read them back."""
    if server.child is None or server.stats_path is None:
        return None
    path = Path(f"{server.stats_path}{suffix}")
    path.unlink(missing_ok=True)
    server.child.popen.send_signal(signum)
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
    redis_pids: Sequence[int] = (),
) -> dict[str, Any]:
    """One round: (for a front of its own) a warm-up and the idle RSS, then the measured load."""
    timeout = args.warmup + args.duration + args.latency * 4 + 120
    idle = None
    child = server.child
    if child is not None:
        drive(loadgen(setup, server.url, server.mode, WARM_CONCURRENCY, 2.0, 0.5, args.latency), timeout)
        time.sleep(0.5)
        idle = rss_bytes(child.pid)
        if setup.tracemalloc:
            read_stats(server, signal.SIGUSR2, ".top")
    parties = {"bot": bot.pid} if child is None else {"bot": bot.pid, "front": child.pid}
    parties.update({f"redis-{pid}": pid for pid in redis_pids})
    cpu_before = {name: cpu_seconds(pid) for name, pid in parties.items()}
    ticks_before = read_machine_ticks()
    started = time.monotonic()
    window = (started + args.warmup, started + args.warmup + args.duration)
    sampler = RssSampler(None if child is None else child.pid)
    gc_before: dict[str, Any] | None = None
    top = None
    with sampler:
        load = subprocess.Popen(
            loadgen(setup, server.url, server.mode, concurrency, args.duration, args.warmup, args.latency),
            env=python_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # The collector is read over the measured window only, as the turns are counted.
        time.sleep(args.warmup)
        gc_before = read_stats(server, signal.SIGUSR1)
        if setup.tracemalloc:
            time.sleep(args.duration / 2)
            top = read_stats(server, signal.SIGUSR2, ".top")
        time.sleep(max(window[1] - time.monotonic(), 0))
        gc_after = read_stats(server, signal.SIGUSR1)
        out, err = load.communicate(timeout=timeout)
    if load.returncode != 0:
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
    per_turn = None
    if idle is not None and peak is not None:
        per_turn = max(peak - idle, 0) / concurrency / 1024
    gc_figures = None
    if gc_before is not None and gc_after is not None:
        gc_figures = {
            "cpu_s": gc_after["gc_cpu_s"] - gc_before["gc_cpu_s"],
            "collections": [
                a - b for a, b in zip(gc_after["collections"], gc_before["collections"], strict=True)
            ],
        }
    return {
        "turns_per_s": result["throughput_rps"],
        "errors": result["errors"],
        "error_samples": result["error_samples"],
        "p50_ms": result["latency_ms"]["p50"],
        "p99_ms": result["latency_ms"]["p99"],
        "cpu_s": cpu,
        "machine_busy": machine_busy(ticks_before, ticks_after),
        # Every completed turn of the round (warm-up too) against the CPU of the whole round.
        "front_cpu_ms_per_turn": None if child is None else cpu["front"] * 1000 / turns,
        "redis_cpu_ms_per_turn": redis_cpu * 1000 / turns if redis_pids else None,
        # Cores busy at the measured rate (CPU per turn times turns/s; the round's CPU includes the
        # load generator's start-up, when nothing is served): a front near 1.0 is bound by its own
        # single-threaded process, one well under it by the machine (``busy`` near 100 %).
        "front_cores": None if child is None else cpu["front"] / turns * result["throughput_rps"],
        "redis_cores": redis_cpu / turns * result["throughput_rps"] if redis_pids else None,
        "gc": gc_figures,
        "rss_idle_mib": None if idle is None else idle / 2**20,
        "rss_peak_mib": None if peak is None else peak / 2**20,
        "rss_kib_per_turn_in_flight": per_turn,
        "tracemalloc": None if top is None else per_turn_top(top, concurrency),
    }


def per_turn_top(top: dict[str, Any], concurrency: int) -> dict[str, Any]:
    """tracemalloc's growth from idle to loaded, each line's bytes divided by the turns in flight."""
    return {
        "kib_per_turn": top["total"] / concurrency / 1024,
        "top": [
            {
                "where": row["where"],
                "bytes_per_turn": row["bytes"] / concurrency,
                "count_per_turn": row["count"] / concurrency,
            }
            for row in top["top"]
        ],
    }


def spread(values: Sequence[float | None]) -> dict[str, float] | None:
    """Median, min and max over the repeats; ``None`` when a figure does not apply to the front."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"median": statistics.median(present), "min": min(present), "max": max(present)}


def summarise(repeats: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per front: the median and spread of each figure, the ratio taken within each repeat first."""
    for repeat in repeats:
        direct = repeat[BOT_DIRECT]["turns_per_s"]
        for figures in repeat.values():
            figures["ratio"] = figures["turns_per_s"] / direct if direct > 0 else 0.0
    out: dict[str, dict[str, Any]] = {}
    for name in repeats[0]:
        rounds = [repeat[name] for repeat in repeats]
        out[name] = {
            "turns_per_s": spread([r["turns_per_s"] for r in rounds]),
            "ratio": spread([r["ratio"] for r in rounds]),
            "errors": sum(r["errors"] for r in rounds),
            "p50_ms": spread([r["p50_ms"] for r in rounds]),
            "front_cpu_ms_per_turn": spread([r["front_cpu_ms_per_turn"] for r in rounds]),
            "redis_cpu_ms_per_turn": spread([r["redis_cpu_ms_per_turn"] for r in rounds]),
            "front_cores": spread([r["front_cores"] for r in rounds]),
            "redis_cores": spread([r["redis_cores"] for r in rounds]),
            "gc_cpu_s": spread([None if r["gc"] is None else r["gc"]["cpu_s"] for r in rounds]),
            "machine_busy": spread([r["machine_busy"] for r in rounds]),
            "rss_kib_per_turn_in_flight": spread([r["rss_kib_per_turn_in_flight"] for r in rounds]),
        }
    return out


def fronts_of(args: argparse.Namespace, clusters: dict[int, ClusterNodes]) -> list[Front]:
    fronts = [Front(BOT_DIRECT)]
    if not args.no_passthrough:
        fronts.append(Front(PASSTHROUGH))
        fronts.append(Front(PASSTHROUGH_GATEWAY_CLIENT, client="gateway"))
        fronts.append(Front(PASSTHROUGH_ASYNCIO_SERVER, client="gateway", server="asyncio"))
    if "memory" in args.stores:
        fronts.append(Front("gateway memory", "memory://"))
    if "redis" in args.stores:
        fronts.append(Front("gateway redis", args.redis_url))
    fronts.extend(Front(f"gateway memory gc={n}", "memory://", str(n)) for n in args.gc_threshold)
    if args.uvloop:
        fronts.append(Front("gateway memory uvloop", "memory://", loop="uvloop"))
    fronts.extend(
        Front(f"gateway cluster {size}", nodes.url, redis_pids=tuple(nodes.pids))
        for size, nodes in clusters.items()
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
        bot_url = f"http://127.0.0.1:{bot_port}/chat"
        setup = Setup(workdir, key_file, public_jwks(private), bot_url, args.tracemalloc)
        rounds: list[dict[str, Any]] = []
        for concurrency in args.where:
            repeats: list[dict[str, dict[str, Any]]] = []
            for repeat in range(args.repeats):
                shift = repeat % len(fronts)
                figures: dict[str, dict[str, Any]] = {}
                for front in fronts[shift:] + fronts[:shift]:
                    print(
                        f"# {concurrency} concurrent, repeat {repeat + 1}: {front.name}",
                        file=sys.stderr,
                        flush=True,
                    )
                    server = start_server(children, setup, front, bot, bot_port)
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
            "tracemalloc": args.tracemalloc,
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
                ratio = front["ratio"]["median"]
                out.append(
                    {
                        "name": f"{name} / bot direct at {TARGET_CONCURRENCY} (median), no failed turn",
                        "measured": ratio,
                        "target": f">= {RATIO_TARGET}",
                        "passed": ratio >= RATIO_TARGET and front["errors"] == 0,
                    }
                )
            kib = front["rss_kib_per_turn_in_flight"]
            per_turn = None if kib is None else kib["median"]
            out.append(
                {
                    "name": f"{name} KiB per turn in flight at {row['concurrency']} (median)",
                    "measured": per_turn,
                    "target": f"<= {MEMORY_TARGET_KIB:g}",
                    "passed": per_turn is not None and per_turn <= MEMORY_TARGET_KIB,
                }
            )
    return out


def _cell(figure: dict[str, float] | None, fmt: str) -> str:
    if figure is None:
        return "-"
    return f"{figure['median']:{fmt}} ({figure['min']:{fmt}}-{figure['max']:{fmt}})"


def render(result: dict[str, Any]) -> str:
    s = result["settings"]
    lines = [
        f"slow bot: {s['latency_s']:g} s a turn; {s['duration_s']:g} s measured after {s['warmup_s']:g} s; "
        f"median (min-max) of {s['repeats']} interleaved repeats",
        f"{'concurrent':>10} {'front':<27} {'turns/s':>20} {'ratio':>20} {'errors':>6} {'p50 ms':>7} "
        f"{'front ms/turn':>17} {'GC CPU s':>17} {'busy':>5} {'KiB/turn':>17} {'redis ms/turn':>17} "
        f"{'front cores':>17} {'redis cores':>17}",
    ]
    for row in result["rounds"]:
        for name, f in row["fronts"].items():
            busy = f["machine_busy"]["median"]
            lines.append(
                f"{row['concurrency']:>10} {name:<27} {_cell(f['turns_per_s'], '.0f'):>20} "
                f"{_cell(f['ratio'], '.3f'):>20} {f['errors']:>6} {f['p50_ms']['median']:>7.0f} "
                f"{_cell(f['front_cpu_ms_per_turn'], '.2f'):>17} {_cell(f['gc_cpu_s'], '.2f'):>17} "
                f"{busy:>5.0%} {_cell(f['rss_kib_per_turn_in_flight'], '.1f'):>17} "
                f"{_cell(f['redis_cpu_ms_per_turn'], '.2f'):>17} {_cell(f['front_cores'], '.2f'):>17} "
                f"{_cell(f['redis_cores'], '.2f'):>17}"
            )
        for name, figures in row["repeats"][-1].items():
            traced = figures["tracemalloc"]
            if traced is None:
                continue
            lines.append(
                f"tracemalloc, {name} at {row['concurrency']}: "
                f"{traced['kib_per_turn']:.1f} KiB per turn in flight"
            )
            lines.extend(
                f"  {t['bytes_per_turn']:>8.0f} B {t['count_per_turn']:>6.2f} blocks  {t['where']}"
                for t in traced["top"]
            )
    lines.append("targets:")
    for t in result["targets"]:
        measured = "n/a" if t["measured"] is None else f"{t['measured']:.3f}"
        lines.append(f"  {t['name']}: {measured} (target {t['target']}) {'PASS' if t['passed'] else 'MISS'}")
    return "\n".join(lines)


def _numbers(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n]


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["bot"]:
        return serve_bot(args_list[1:])
    served = serve_request(args_list, "python -m bench.slow_bot --serve THRESHOLD,LOOP,STATS -- serve …")
    if served is not None:
        threshold, loop, stats_path = served[0].split(",", 2)
        return serve_metered(threshold, loop, stats_path, served[1])
    parser = argparse.ArgumentParser(prog="python -m bench capacity slow_bot", description=__doc__)
    parser.add_argument("--latency", type=float, default=1.5, help="the bot's seconds per turn")
    parser.add_argument(
        "--where",
        type=_numbers,
        default=[TARGET_CONCURRENCY],
        help="concurrent conversations, comma-separated (default 2000)",
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
        "--gc-threshold",
        type=_numbers,
        default=[],
        help="young-generation GC thresholds, comma-separated: one more memory gateway for each",
    )
    parser.add_argument(
        "--uvloop",
        action="store_true",
        help="one more memory gateway on uvloop's event loop (installed apart)",
    )
    parser.add_argument(
        "--cluster",
        type=_numbers,
        default=[],
        help="primaries of Redis Clusters (one replica each) the run starts, comma-separated: "
        "one gateway cluster front on each",
    )
    parser.add_argument("--no-passthrough", action="store_true", help="leave the bare forwarders out")
    parser.add_argument("--tracemalloc", action="store_true", help="trace the gateways' allocations (slow)")
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
