"""``python -m bench``: what pact-gateway costs on top of the bot, measured side by side in one run.

The run starts the sample bot and, on loopback, three fronts before it: nothing (the bot
direct), a bare pass-through forwarder on the same HTTP stack (``bench.passthrough``, the
design's ceiling) and the real gateway CLI, on the memory store and on Redis (database 14,
flushed before and after). Each gateway is driven twice: with §3 turns alone (the Identity
front) and with the same turns under §5.5 delegation tokens from real grants (the delegated
front, same process and store; ``bench.delegation`` runs §5.3 for each user first). One load
generator process drives ``message:send`` against each front in turn at a fixed concurrency
for a fixed time; the rounds are interleaved and repeated, so drift on a shared machine shows
up as spread instead of as a bias against whichever front ran last. Then: latency at half the
gateway's peak, Redis round trips per turn (Identity and delegated), instructions per turn
under callgrind (the full run), each bot adapter's cost per turn beside the ``pact`` adapter's
(``bench.adapters``), memory per idle conversation, PA JWT and delegation-token verification and
receipt signing costs and, with ``--profile``, where a gateway spends its time.

Results: a JSON file (``bench/results/<timestamp>.json`` or ``--out``) and a table. Targets
are checked but never fail the run: a benchmark reports, CI does not judge timings.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from bench.delegation import SCOPES, delegation_config
from bench.procs import (
    REPO_ROOT,
    Child,
    ChildFailed,
    Children,
    cpu_seconds,
    free_port,
    machine_busy,
    machine_busy_seconds,
    python_env,
    read_machine_ticks,
)
from bench.redis_probe import RedisProbe
from gateway.config import RATE_RULE_NAMES
from gateway.pa_keys import generate_private_jwk, public_jwks

if TYPE_CHECKING:
    from bench.instructions import FrontArgv  # bench.instructions imports this module

SCHEMA = "pact-gateway-bench/1"
ISSUER = "https://pa.bench.invalid"
AUDIENCE = "pact-gateway-bench"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
RESULTS_DIR = REPO_ROOT / "bench" / "results"

DIRECT = "direct"
PASSTHROUGH = "passthrough"
GW_MEMORY = "gateway-memory"
GW_REDIS = "gateway-redis"
GW_REDIS_2W = "gateway-redis-2w"
DELEGATED_MEMORY = "delegated-memory"
DELEGATED_REDIS = "delegated-redis"
DELEGATED_OF = {DELEGATED_MEMORY: GW_MEMORY, DELEGATED_REDIS: GW_REDIS}
"""Each delegated front and the Identity front of the same gateway process it is compared with."""
# §5.5 on top of §3: a delegated turn adds a cached token check, a grant check inside the store step
# it makes anyway and a receipt signature; its throughput may be at most 15 % below the Identity turn's.
DELEGATED_THROUGHPUT = 0.85
PASSTHROUGH_AT_REDIS_RATE = "passthrough-at-redis-rate"
# "Scales with cores": a second worker must add at least a quarter. The ideal is 2.0, but on a
# 2-core machine the load generator, the bot and Redis share the cores the workers would use.
WORKER_SCALING = 1.25


@dataclass(frozen=True)
class Settings:
    """How long and how hard each part runs; ``smoke`` only proves every path works."""

    mode: str
    duration: float
    warmup: float
    repeats: int
    concurrency: int
    turns: int
    half_load_duration: float
    half_load_repeats: int
    half_load_concurrency: int
    rtt_turns: int
    memory_conversations: int
    memory_traced: int
    jwt_fresh: int
    jwt_repeated: int
    client_calls: int
    profile_duration: float
    instruction_turns: int
    """Turns in the warm-up and the shorter callgrind window (the longer has twice as many); 0 skips."""
    delegated_users: int = 256
    """Users of the delegated fronts, one §5.3 grant and token each (the Identity fronts have 256 too)."""


MODES: dict[str, Settings] = {
    "smoke": Settings("smoke", 0.8, 0.3, 1, 16, 5, 0.8, 1, 32, 40, 2_000, 1_000, 30, 2_000, 640, 2.0, 20, 16),
    "quick": Settings(
        "quick", 1.6, 0.5, 2, 32, 5, 1.5, 1, 64, 200, 20_000, 3_000, 200, 20_000, 5_000, 5.0, 0
    ),
    "full": Settings(
        "full", 12.0, 2.0, 4, 32, 5, 15.0, 3, 64, 1_000, 100_000, 20_000, 2_000, 100_000, 20_000, 15.0, 400
    ),
}


@dataclass
class Front:
    """Something the load generator can drive; ``process`` is the front's own (``None`` for direct).

    ``delegation`` is the token file of a delegated front (``bench.delegation``): every turn
    then carries its user's delegation token. ``bot`` is the bot behind the front when it is not
    the run's sample bot (an adapter's fake, ``bench.adapters``).
    """

    name: str
    url: str
    mode: str
    process: Child | None
    uses_redis: bool = False
    delegation: Path | None = None
    bot: Child | None = None

    @classmethod
    def a2a(cls, name: str, port: int, process: Child, uses_redis: bool = False) -> Front:
        """A front that speaks A2A on ``port``: turns go to the bench Brand's ``message:send``."""
        return cls(name, f"http://127.0.0.1:{port}/a2a/acme/message:send", "a2a", process, uses_redis)


class Bench:
    def __init__(self, settings: Settings, children: Children, workdir: Path, redis: RedisProbe) -> None:
        self.settings = settings
        self.children = children
        self.workdir = workdir
        self.redis = redis
        self.key_file = workdir / "pa-key.json"
        private = generate_private_jwk("ES256")
        self.key_file.write_text(json.dumps(private))
        self.jwks = public_jwks(private)
        # The Brand's login (its assertions' key, inline in the gateway's config) and the Provider's
        # §5.4/§5.6 signing key: generated per run, kept in the run's directory only.
        self.login_key_file = workdir / "login-key.json"
        login = generate_private_jwk("ES256")
        self.login_key_file.write_text(json.dumps(login))
        self.login_jwks = public_jwks(login)
        self.signing_key_file = workdir / "provider-key.json"
        self.signing_key_file.write_text(json.dumps(generate_private_jwk("ES256")))
        self.flows: dict[str, dict[str, Any]] = {}
        self.bot: Child | None = None
        self.bot_url = ""
        self.fronts: dict[str, Front] = {}
        self.workers_available = False
        self.redis_pid = _local_redis_pid(redis)  # its CPU per turn is part of the price

    # ---- processes ---------------------------------------------------------------------------

    def start_bot(self) -> tuple[Child, int]:
        port = free_port()
        bot = self.children.python("bot", "-m", "examples.sample_bot", "--port", str(port))
        self.bot = bot
        self.bot_url = f"http://127.0.0.1:{port}/chat"
        return bot, port

    def gateway_config(self, port: int, cache_url: str, upstream: dict[str, Any] | None = None) -> Path:
        """The gateway as an operator would run it: defaults everywhere but addresses, keys and cache.

        The Brand delegates (§5): its scopes, its login's key set inline, the Provider's key.
        ``upstream`` is the Brand's bot (default: the sample bot, ``adapter: pact``).
        """
        raw = {
            "listen": {"host": "127.0.0.1", "port": port},
            "public_url": f"http://127.0.0.1:{port}",
            "provider": {"organization": "Bench", "url": "https://bench.invalid", "audience": AUDIENCE},
            # Inline keys: verification is measured, never a JWKS fetch.
            "personal_agents": {"policy": "allowlist", "registered": [{"issuer": ISSUER, "jwks": self.jwks}]},
            "cache": {"url": cache_url},
            # Checked on every turn as in production, but never refusing: one personal agent here
            # stands for the whole load, far beyond the per-agent default of 50 turns/s, and one
            # address signs in every delegated bench user (past the per-address hand-off limit).
            "rate_limits": {name: {"rate": 1_000_000, "burst": 1_000_000} for name in RATE_RULE_NAMES},
            "metrics": {"enabled": True, "host": "127.0.0.1", "port": free_port()},
            "oauth": {"signing_keys": [{"file": str(self.signing_key_file)}]},
            "brands": [
                {
                    "id": "acme",
                    "name": "Acme Support",
                    "description": "Order status.",
                    "version": "1.0.0",
                    "upstream": upstream or {"url": self.bot_url},
                    "delegation": delegation_config(self.login_jwks),
                }
            ],
        }
        path = self.workdir / f"gateway-{port}.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False))
        return path

    def passthrough_argv(self, port: int) -> list[str]:
        return ["-m", "bench.passthrough", "--port", str(port), "--upstream", self.bot_url]

    def gateway_argv(self, config: Path, workers: int | None = None) -> list[str]:
        argv = ["-m", "gateway", "serve", "--config", str(config)]
        return [*argv, "--workers", str(workers)] if workers is not None else argv

    def start_gateway(
        self,
        name: str,
        cache_url: str,
        *,
        workers: int | None = None,
        profile_to: Path | None = None,
        upstream: dict[str, Any] | None = None,
    ) -> tuple[Front, int]:
        port = free_port()
        argv = self.gateway_argv(self.gateway_config(port, cache_url, upstream), workers)
        if profile_to is not None:
            argv = ["-m", "pyinstrument", "-r", "pyisession", "-o", str(profile_to), *argv]
        child = self.children.python(name, *argv)
        return Front.a2a(name, port, child, cache_url != "memory://"), port

    def start_passthrough(self) -> tuple[Front, int]:
        port = free_port()
        return Front.a2a(
            PASSTHROUGH, port, self.children.python(PASSTHROUGH, *self.passthrough_argv(port))
        ), port

    def detect_workers(self) -> bool:
        """Whether the CLI has ``--workers`` yet (another change adds it); absent is reported, not fatal."""
        out = subprocess.run(
            [sys.executable, *self.gateway_argv(Path("unused.yaml")), "--help"],
            cwd=REPO_ROOT,
            env=python_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        return "--workers" in out.stdout

    def start_all(self, redis_url: str) -> None:
        bot, bot_port = self.start_bot()
        waits: list[tuple[Child, int]] = [(bot, bot_port)]
        passthrough, pt_port = self.start_passthrough()
        assert passthrough.process is not None
        waits.append((passthrough.process, pt_port))
        self.fronts[DIRECT] = Front(DIRECT, self.bot_url, "bot", None)
        self.fronts[PASSTHROUGH] = passthrough
        self.workers_available = self.detect_workers()
        gateways = [
            (GW_MEMORY, "memory://", None),
            (GW_REDIS, redis_url, 1 if self.workers_available else None),
        ]
        if self.workers_available:
            gateways.append((GW_REDIS_2W, redis_url, 2))
        ports: dict[str, int] = {}
        for name, url, workers in gateways:
            front, port = self.start_gateway(name, url, workers=workers)
            self.fronts[name] = front
            ports[name] = port
            assert front.process is not None
            waits.append((front.process, port))
        for child, port in waits:
            child.wait_port(port)
        for delegated, identity in DELEGATED_OF.items():
            self.delegate(delegated, identity, ports[identity])

    def delegate(self, name: str, identity: str, port: int) -> None:
        """Front ``name``: the gateway of front ``identity``, driven by users that hold real grants.

        Each user's grant and token come from the §5.3 flow over HTTP (``bench.delegation``), once,
        before any timed round, as a personal agent gets them once and then uses them for an hour.
        """
        tokens = self.workdir / f"{name}-tokens.json"
        self.flows[name] = _python_json(
            [
                "-m",
                "bench.delegation",
                "--url",
                f"http://127.0.0.1:{port}",
                "--users",
                str(self.settings.delegated_users),
                "--key-file",
                str(self.key_file),
                "--issuer",
                ISSUER,
                "--audience",
                AUDIENCE,
                "--login-key-file",
                str(self.login_key_file),
                "--out",
                str(tokens),
            ],
            timeout=600,
        )
        self.fronts[name] = replace(self.fronts[identity], name=name, delegation=tokens)

    # ---- load --------------------------------------------------------------------------------

    def loadgen_argv(
        self,
        front: Front,
        *,
        duration: float,
        concurrency: int,
        rate: float = 0.0,
        max_turns: int = 0,
        users: int | None = None,
    ) -> list[str]:
        s = self.settings
        return [
            sys.executable,
            "-m",
            "bench.loadgen",
            "--url",
            front.url,
            "--mode",
            front.mode,
            "--duration",
            str(duration),
            "--warmup",
            str(s.warmup),
            "--concurrency",
            str(concurrency),
            "--rate",
            str(rate),
            "--turns",
            str(s.turns),
            "--max-turns",
            str(max_turns),
            "--key-file",
            str(self.key_file),
            "--issuer",
            ISSUER,
            "--audience",
            AUDIENCE,
            *([] if users is None else ["--subs", str(users)]),
            *([] if front.delegation is None else ["--delegation-file", str(front.delegation)]),
        ]

    def _party_cpu(self, front: Front) -> dict[str, float]:
        bot = front.bot or self.bot
        readings = {"bot": cpu_seconds(bot.pid) if bot is not None else 0.0}
        if front.process is not None:
            readings["front"] = cpu_seconds(front.process.pid)
        if self.redis_pid is not None and Path(f"/proc/{self.redis_pid}").exists():
            readings["redis"] = cpu_seconds(self.redis_pid)
        return readings

    def _check_alive(self, front: Front) -> None:
        for child in (front.bot or self.bot, front.process):
            if child is not None and not child.alive():
                raise ChildFailed(f"{child.name} exited with {child.popen.returncode}:\n{child.tail()}")

    def drive(
        self,
        front: Front,
        *,
        duration: float,
        concurrency: int,
        rate: float = 0.0,
        max_turns: int = 0,
        while_running: Callable[[], None] | None = None,
        redis_stats: bool = True,
        users: int | None = None,
    ) -> dict[str, Any]:
        """One load-generator run against ``front``, with the CPU every party spent during it.

        ``redis_stats=False`` keeps the probe's own INFO commands out of a MONITOR count;
        ``users`` overrides the load generator's number of users (one PA JWT each).
        """
        self._check_alive(front)
        argv = self.loadgen_argv(
            front, duration=duration, concurrency=concurrency, rate=rate, max_turns=max_turns, users=users
        )
        redis_stats = redis_stats and front.uses_redis
        stats_before = self.redis.commandstats() if redis_stats else {}
        cpu_before = self._party_cpu(front)
        ticks_before = read_machine_ticks()
        wall_before = time.monotonic()
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        out_path = self.workdir / "loadgen.out"
        err_path = self.workdir / "loadgen.err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            loadgen = subprocess.Popen(argv, cwd=REPO_ROOT, env=python_env(), stdout=out, stderr=err)
            limit = time.monotonic() + self.settings.warmup + duration + 60
            try:
                while loadgen.poll() is None:
                    if time.monotonic() > limit:
                        raise ChildFailed(f"the load generator did not finish against {front.name}")
                    if while_running is not None:
                        while_running()
                    else:
                        time.sleep(0.05)
            finally:
                if loadgen.poll() is None:
                    loadgen.kill()
                    loadgen.wait(5)
        ticks_after = read_machine_ticks()
        wall = time.monotonic() - wall_before
        children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # The load generator's whole life (start-up included), known once it has been reaped.
        loadgen_process = (children_after.ru_utime - children_before.ru_utime) + (
            children_after.ru_stime - children_before.ru_stime
        )
        cpu_after = self._party_cpu(front)
        stats_after = self.redis.commandstats() if redis_stats else {}
        if loadgen.returncode != 0:
            raise ChildFailed(f"load generator failed against {front.name}:\n{err_path.read_text()[-2000:]}")
        self._check_alive(front)
        result: dict[str, Any] = json.loads(out_path.read_text())
        turns = max(int(result["turns_total"]), 1)
        cpu = {party: cpu_after[party] - cpu_before[party] for party in cpu_before}
        cpu["loadgen"] = float(result["cpu_s"])
        result["front"] = front.name
        result["cpu_s"] = cpu
        result["cpu_s_per_1000_turns"] = {party: seconds * 1000 / turns for party, seconds in cpu.items()}
        result["machine_busy"] = machine_busy(ticks_before, ticks_after)
        # CPU the machine spent on anything but this round's parties: other users of a shared machine.
        ours = sum(v for k, v in cpu.items() if k != "loadgen") + max(loadgen_process, cpu["loadgen"])
        others = max(machine_busy_seconds(ticks_before, ticks_after) - ours, 0.0)
        result["other_cpu_share"] = others / (wall * (os.cpu_count() or 1)) if wall > 0 else 0.0
        if redis_stats:
            delta = {
                k: v - stats_before.get(k, 0) for k, v in stats_after.items() if v != stats_before.get(k, 0)
            }
            delta.pop("info", None)  # our own readings
            result["redis_commands_per_turn"] = sum(delta.values()) / turns
            result["redis_commands"] = delta
        return result

    def peak_rounds(self, order: Sequence[str]) -> list[dict[str, Any]]:
        rounds: list[dict[str, Any]] = []
        for repeat in range(self.settings.repeats):
            # Every other repeat runs the fronts in reverse: on a machine whose speed drifts during
            # the run, a fixed order would always measure one front later than another (a bias a
            # same-repeat ratio cannot see), while alternating it cancels a steady drift.
            for name in order if repeat % 2 == 0 else order[::-1]:
                result = self.drive(
                    self.fronts[name], duration=self.settings.duration, concurrency=self.settings.concurrency
                )
                result["repeat"] = repeat
                rounds.append(result)
                progress(
                    f"  round {repeat + 1}/{self.settings.repeats} {name:<17} "
                    f"{result['throughput_rps']:8.1f} turns/s  p50 {result['latency_ms']['p50']:6.2f} ms  "
                    f"errors {result['errors']}  others' CPU {result['other_cpu_share']:.0%}"
                )
        return rounds

    def half_load(self, plan: Sequence[tuple[str, str, float]]) -> list[dict[str, Any]]:
        """Open-loop rounds; ``plan`` is (series name, front, rate), interleaved per repeat like the peaks."""
        rounds: list[dict[str, Any]] = []
        for repeat in range(self.settings.half_load_repeats):
            for series, name, rate in plan:
                result = self.drive(
                    self.fronts[name],
                    duration=self.settings.half_load_duration,
                    concurrency=self.settings.half_load_concurrency,
                    rate=rate,
                )
                result["front"] = series
                result["repeat"] = repeat
                rounds.append(result)
                progress(
                    f"  half load {repeat + 1}/{self.settings.half_load_repeats} {series:<27} "
                    f"at {rate:.0f}/s: p50 {result['latency_ms']['p50']:6.2f} ms  "
                    f"p99 {result['latency_ms']['p99']:6.2f} ms  others' CPU {result['other_cpu_share']:.0%}"
                )
        return rounds

    def redis_round_trips(self, name: str = GW_REDIS) -> dict[str, Any]:
        """Round trips per turn on the hot path, counted exactly with MONITOR over a fixed number of turns."""
        front = self.fronts[name]
        monitor = self.redis.monitor()
        try:
            result = self.drive(
                front,
                duration=120.0,
                concurrency=4,
                max_turns=self.settings.rtt_turns,
                while_running=lambda: monitor.poll(0.05),
                redis_stats=False,
            )
            monitor.poll(0.5)  # the last replies' commands
        finally:
            monitor.close()
        turns = max(int(result["turns_total"]), 1)
        client = dict(monitor.client_commands)
        return {
            "turns": result["turns_total"],
            "errors": result["errors"],
            "turns_per_conversation": self.settings.turns,
            "round_trips_per_turn": sum(client.values()) / turns,
            "client_commands": client,
            "script_internal_commands_per_turn": sum(monitor.script_commands.values()) / turns,
            "script_internal_commands": dict(monitor.script_commands),
        }

    def gateway_front(self, cache_url: str, upstream: dict[str, Any] | None = None) -> FrontArgv:
        """How :meth:`count_instructions` starts a gateway front on a port it picks."""
        return lambda port: self.gateway_argv(self.gateway_config(port, cache_url, upstream))

    def count_instructions(self, fronts: Sequence[tuple[str, FrontArgv, bool]]) -> dict[str, Any]:
        """``fronts`` counted by :func:`bench.instructions.measure` in this run's mode, or why not."""
        from bench import instructions

        turns = self.settings.instruction_turns
        if turns <= 0:
            return {"available": False, "note": f"not counted in the {self.settings.mode} run"}
        if not instructions.available():
            return {"available": False, "note": "valgrind (callgrind) is not installed"}
        return instructions.measure(self, fronts, turns)

    def instructions(self, redis_url: str) -> dict[str, Any]:
        """Instructions per turn of the pass-through and both gateways, counted by callgrind."""
        from bench import instructions

        counted = self.count_instructions(
            [
                (PASSTHROUGH, self.passthrough_argv, False),
                (GW_MEMORY, self.gateway_front("memory://"), False),
                (GW_REDIS, self.gateway_front(redis_url), True),
            ]
        )
        if not counted["available"]:
            return counted
        per_turn = instructions.per_turn(counted)
        counted["gateway_memory_vs_passthrough"] = per_turn[GW_MEMORY] / per_turn[PASSTHROUGH]
        counted["gateway_redis_vs_passthrough"] = per_turn[GW_REDIS] / per_turn[PASSTHROUGH]
        return counted

    def profile(self) -> dict[str, Any] | None:
        """One gateway-memory round under pyinstrument; ``None`` (with a note) if it is not installed."""
        probe = subprocess.run(
            [sys.executable, "-c", "import pyinstrument"], capture_output=True, check=False, timeout=60
        )
        if probe.returncode != 0:
            return {"available": False, "note": "pyinstrument is not installed (pip install pyinstrument)"}
        session = self.workdir / "gateway.pyisession"
        front, port = self.start_gateway("gateway-profiled", "memory://", profile_to=session)
        assert front.process is not None
        front.process.wait_port(port)
        result = self.drive(
            front, duration=self.settings.profile_duration, concurrency=self.settings.concurrency
        )
        self.children.stop(front.process, signal.SIGINT)
        if not session.exists():
            return {"available": False, "note": f"pyinstrument wrote no session:\n{front.process.tail()}"}
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        text_path = RESULTS_DIR / f"profile-{stamp}.txt"
        pstats_path = self.workdir / "gateway.pstats"
        render = [sys.executable, "-m", "pyinstrument", "--load", str(session)]
        subprocess.run(
            [*render, "-r", "text", "--show", "*/gateway/*", "-o", str(text_path)], check=True, timeout=120
        )
        subprocess.run([*render, "-r", "pstats", "-o", str(pstats_path)], check=True, timeout=120)
        from bench.profile import summarize

        summary = summarize(pstats_path, int(result["turns_total"]))
        return {
            "available": True,
            "text_report": str(text_path),
            "throughput_rps_under_profiler": result["throughput_rps"],
            **summary,
        }


def _local_redis_pid(redis: RedisProbe) -> int | None:
    """The Redis server's pid when it runs on this machine (a remote pid could name any local process)."""
    pid = redis.server_pid()
    if pid is None:
        return None
    try:
        command = Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return None
    return pid if command.startswith("redis") else None


# ---- aggregation ----------------------------------------------------------------------------


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def summarize_fronts(rounds: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per front, the median over repeats of each figure (and the spread of throughput)."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["front"] for r in rounds):
        mine = [r for r in rounds if r["front"] == name]
        throughputs = [float(r["throughput_rps"]) for r in mine]
        per_1000 = {
            party: _median([float(r["cpu_s_per_1000_turns"][party]) for r in mine])
            for party in mine[0]["cpu_s_per_1000_turns"]
        }
        entry: dict[str, Any] = {
            "throughput_rps": _median(throughputs),
            "throughput_min_rps": min(throughputs),
            "throughput_max_rps": max(throughputs),
            "latency_ms": {
                q: _median([float(r["latency_ms"][q]) for r in mine]) for q in ("p50", "p90", "p99")
            },
            "errors": sum(int(r["errors"]) for r in mine),
            "turns": sum(int(r["turns_total"]) for r in mine),
            "cpu_s_per_1000_turns": per_1000,
            "machine_busy": _median([float(r["machine_busy"]) for r in mine]),
            "other_cpu_share": _median([float(r["other_cpu_share"]) for r in mine]),
        }
        if "redis_commands_per_turn" in mine[0]:
            entry["redis_commands_per_turn"] = _median([float(r["redis_commands_per_turn"]) for r in mine])
        out[name] = entry
    return out


def paired(
    rounds: Sequence[dict[str, Any]],
    top: str,
    bottom: str,
    combine: Callable[[dict[str, Any], dict[str, Any]], float | None],
) -> list[float]:
    """``combine(top's round, bottom's round)`` for every repeat that has both, in repeat order.

    Each pair comes from one repeat, so both rounds share that repeat's drift; ``combine``
    returns ``None`` for a pair it cannot combine (a ratio over zero), which is left out.
    """
    values = []
    for repeat in sorted({int(r["repeat"]) for r in rounds}):
        a = [r for r in rounds if r["repeat"] == repeat and r["front"] == top]
        b = [r for r in rounds if r["repeat"] == repeat and r["front"] == bottom]
        if a and b and (value := combine(a[0], b[0])) is not None:
            values.append(value)
    return values


def ratio_of(
    value: Callable[[dict[str, Any]], float],
) -> Callable[[dict[str, Any], dict[str, Any]], float | None]:
    return lambda a, b: value(a) / value(b) if value(b) > 0 else None


def difference_of(
    value: Callable[[dict[str, Any]], float],
) -> Callable[[dict[str, Any], dict[str, Any]], float | None]:
    return lambda a, b: value(a) - value(b)


def _rps(r: dict[str, Any]) -> float:
    return float(r["throughput_rps"])


def front_cpu(r: dict[str, Any]) -> float:
    return float(r["cpu_s_per_1000_turns"].get("front", 0.0))


def _p50(r: dict[str, Any]) -> float:
    return float(r["latency_ms"]["p50"])


def _p99(r: dict[str, Any]) -> float:
    return float(r["latency_ms"]["p99"])


MET, MISSED, WITHIN_NOISE, NOT_MEASURED = "met", "missed", "within noise", "not measured"


def verdict(passes: Callable[[float], bool], measured: float | None, per_repeat: Sequence[float]) -> str:
    """How far a time-based figure can be trusted against its target, from its repeats.

    ``met`` or ``missed`` when every repeat agrees (or there is one figure), ``within noise``
    when some repeats meet the target and others do not: on a shared machine the median
    alone would then pass in one run and fail in the next.
    """
    if measured is None:
        return NOT_MEASURED
    if len(per_repeat) < 2:
        return MET if passes(measured) else MISSED
    meeting = sum(1 for value in per_repeat if passes(value))
    if meeting == len(per_repeat):
        return MET
    return MISSED if meeting == 0 else WITHIN_NOISE


def target(
    name: str,
    goal: str,
    measured: float | None,
    passes: Callable[[float], bool],
    per_repeat: Sequence[float] = (),
    note: str = "",
) -> dict[str, Any]:
    """One target: ``passed`` judges the median; ``verdict`` weighs the repeats as well."""
    return {
        "name": name,
        "target": goal,
        "measured": measured,
        "passed": measured is not None and passes(measured),
        "per_repeat": list(per_repeat),
        "verdict": verdict(passes, measured, per_repeat),
        "note": note,
    }


def at_least(bound: float) -> Callable[[float], bool]:
    return lambda value: value >= bound


def at_most(bound: float) -> Callable[[float], bool]:
    return lambda value: value <= bound


def check_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    ratios, repeats = result["ratios"], result["ratios_per_repeat"]
    half, counted = result["half_load"], result["instructions"]

    def ratio_target(name: str, key: str, goal: str, passes: Callable[[float], bool]) -> dict[str, Any]:
        return target(name, goal, ratios[key], passes, repeats[key])

    def cpu_target(front: str) -> dict[str, Any]:
        # The instruction count barely moves between runs, where CPU time moves by a fifth: beside it.
        note = ""
        if counted["available"]:
            note = f"instructions per turn x{counted[f'gateway_{front}_vs_passthrough']:.2f}"
        key = f"cpu_per_turn_gateway_{front}_vs_passthrough"
        return target(
            f"CPU per turn gateway-{front} / pass-through",
            "<= 1.5",
            ratios[key],
            at_most(1.5),
            repeats[key],
            note,
        )

    def added_target(name: str, key: str, bound: float) -> dict[str, Any]:
        return target(
            name, f"<= {bound}", half[f"added_{key}"], at_most(bound), half["added_per_repeat"][key]
        )

    targets = [
        ratio_target(
            "throughput gateway-memory / pass-through",
            "throughput_gateway_memory_vs_passthrough",
            ">= 0.80",
            at_least(0.80),
        ),
        ratio_target(
            "throughput gateway-redis / pass-through",
            "throughput_gateway_redis_vs_passthrough",
            ">= 0.70",
            at_least(0.70),
        ),
        cpu_target("memory"),
        cpu_target("redis"),
        added_target("added p50 latency at half peak (ms)", "p50_ms", 1.0),
        added_target("added p99 latency at half peak (ms)", "p99_ms", 5.0),
        target(
            "full ES256 verification / repeated token",
            ">= 10",
            result["jwt"]["es256_vs_repeated_ratio"],
            at_least(10),
        ),
        target(
            "Redis round trips per turn",
            "<= 2",
            result["redis"]["round_trips_per_turn"],
            at_most(2.0),
        ),
        ratio_target(
            "throughput delegated-memory / gateway-memory",
            "throughput_delegated_memory_vs_gateway_memory",
            f">= {DELEGATED_THROUGHPUT}",
            at_least(DELEGATED_THROUGHPUT),
        ),
        ratio_target(
            "throughput delegated-redis / gateway-redis",
            "throughput_delegated_redis_vs_gateway_redis",
            f">= {DELEGATED_THROUGHPUT}",
            at_least(DELEGATED_THROUGHPUT),
        ),
        target(
            "full delegation-token verification / repeated token",
            ">= 10",
            result["jwt"]["delegation_fresh_vs_repeated_ratio"],
            at_least(10),
        ),
        target(
            "Redis round trips per delegated turn",
            "<= 2",
            result["redis"]["delegated"]["round_trips_per_turn"],
            at_most(2.0),
        ),
        target(
            "bytes per idle conversation, memory store, excluding replies (RSS)",
            "<= 1024",
            result["memory"]["rss_bytes_per_conversation_excluding_replies"],
            at_most(1024),
        ),
    ]
    workers = result["workers"]
    name = "throughput 2 workers / 1 worker on Redis"
    if workers["available"]:
        targets.append(
            target(
                name,
                f">= {WORKER_SCALING} (scales with cores)",
                workers["throughput_2_vs_1"],
                at_least(WORKER_SCALING),
                workers["throughput_2_vs_1_per_repeat"],
            )
        )
    else:
        targets.append(
            target(
                name, f">= {WORKER_SCALING}", None, at_least(WORKER_SCALING), note="workers: not available"
            )
        )
    return targets


# ---- output ---------------------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def delegated_breakdown(result: dict[str, Any]) -> list[str]:
    """Where the microseconds a delegated turn adds go, beside what the 0.85 target leaves for them.

    A front that is the bottleneck serves turns at the rate its CPU per turn allows, so delegated
    throughput ≥ 0.85 × Identity's needs its added CPU per turn ≤ Identity's × (1/0.85 − 1). The
    added CPU is the fronts' (delegated − Identity, medians); the steps are ``bench.jwt_cost``'s,
    in process; "the rest" is what the steps do not explain: the grant check in the store step,
    the bigger request, upstream call, stored reply and response, and the machine's noise.
    """
    jwt = result["jwt"]
    steps = (
        ("token check", jwt["delegation_repeated_us"]),
        ("claims", jwt["receipt_claims_us"]),
        ("signature", jwt["receipt_sign_us"]),
        ("reply", jwt["receipt_reply_us"]),
        ("metrics", jwt["delegation_metrics_us"]),
    )
    lines = [
        f"  where a delegated turn's added CPU goes, us per turn (throughput >= {DELEGATED_THROUGHPUT} "
        f"leaves Identity's x {1 / DELEGATED_THROUGHPUT - 1:.3f})"
    ]
    for delegated, identity in DELEGATED_OF.items():
        identity_us = result["fronts"][identity]["cpu_s_per_1000_turns"]["front"] * 1000
        added = result["fronts"][delegated]["cpu_s_per_1000_turns"]["front"] * 1000 - identity_us
        budget = identity_us * (1 / DELEGATED_THROUGHPUT - 1)
        rest = added - jwt["delegated_added_us"]
        lines.append(
            f"  {delegated:<20}added {added:.0f} of {budget:.0f} budget (Identity {identity_us:.0f}): "
            + ", ".join(f"{name} {us:.1f}" for name, us in steps)
            + f", the rest {rest:.0f}"
        )
    lines.append(
        f"  the signature with cold caches: {jwt['receipt_sign_cold_us']:.1f} us alone, "
        f"{jwt['receipt_sign_cold_together_us']:.1f} us each when signed back to back (SigningBatch)"
    )
    lines.append(
        f"  signing off the loop: two threads sign x{jwt['receipt_sign_two_threads_speedup']:.2f} as fast "
        f"as one (cryptography releases the GIL; 2 needs a free core); on a worker thread the loop "
        f"still pays {jwt['receipt_sign_offloaded_loop_us']:.1f} us per receipt of "
        f"{jwt['receipt_sign_us']:.1f}"
    )
    return lines


def render_table(result: dict[str, Any]) -> str:
    lines = [
        f"pact-gateway benchmark ({result['settings']['mode']}, {result['machine']['cpus']} cores, "
        f"{result['started_at']})",
        "",
        f"{'front':<18}{'turns/s':>9}{'p50 ms':>8}{'p90 ms':>8}{'p99 ms':>8}{'errors':>7}"
        f"{'CPU s/1k turns: front':>22}{'bot':>6}{'redis':>6}{'loadgen':>8}{'others':>8}",
    ]
    for name, front in result["fronts"].items():
        cpu = front["cpu_s_per_1000_turns"]
        latency = front["latency_ms"]
        lines.append(
            f"{name:<18}{front['throughput_rps']:>9.1f}{latency['p50']:>8.2f}{latency['p90']:>8.2f}"
            f"{latency['p99']:>8.2f}{front['errors']:>7}{_fmt(cpu.get('front')):>22}{cpu['bot']:>6.2f}"
            f"{_fmt(cpu.get('redis')):>6}{cpu['loadgen']:>8.2f}{front['other_cpu_share']:>8.0%}"
        )
    ratios = result["ratios"]
    lines += ["", f"{'ratios (median of same-repeat pairs)':<40}{'vs pass-through':>16}{'vs direct':>12}"]
    for label, key in (
        ("throughput gateway-memory", "throughput_gateway_memory"),
        ("throughput gateway-redis", "throughput_gateway_redis"),
    ):
        lines.append(
            f"  {label:<38}{ratios[key + '_vs_passthrough']:>16.2f}{ratios[key + '_vs_direct']:>12.2f}"
        )
    lines.append(
        f"  {'throughput pass-through':<38}{1.0:>16.2f}{ratios['throughput_passthrough_vs_direct']:>12.2f}"
    )
    for label, key in (
        ("CPU per turn gateway-memory", "cpu_per_turn_gateway_memory_vs_passthrough"),
        ("CPU per turn gateway-redis", "cpu_per_turn_gateway_redis_vs_passthrough"),
    ):
        lines.append(f"  {label:<38}{ratios[key]:>16.2f}")
    lines.append(f"  {'delegated vs the same gateway, Identity':<38}{'throughput':>16}{'CPU/turn':>12}")
    for delegated, identity in DELEGATED_OF.items():
        key = f"{delegated.replace('-', '_')}_vs_{identity.replace('-', '_')}"
        lines.append(
            f"  {delegated:<38}{ratios['throughput_' + key]:>16.2f}{ratios['cpu_per_turn_' + key]:>12.2f}"
        )
    lines += delegated_breakdown(result)
    half, redis, memory, jwt = result["half_load"], result["redis"], result["memory"], result["jwt"]
    delegated_redis = redis["delegated"]
    delegated_rtt = delegated_redis["round_trips_per_turn"]
    lines += [
        "",
        f"half of gateway-memory's peak ({half['rate_rps']:.0f} turns/s): added over pass-through "
        f"p50 {half['added_p50_ms']:.2f} ms, p99 {half['added_p99_ms']:.2f} ms",
        f"half of gateway-redis's peak ({half['rate_rps_redis']:.0f} turns/s): added over pass-through "
        f"p50 {half['added_p50_ms_redis']:.2f} ms, p99 {half['added_p99_ms_redis']:.2f} ms",
        f"Redis round trips per turn {redis['round_trips_per_turn']:.2f} ({redis['client_commands']}); "
        f"commands incl. inside scripts "
        f"{redis['round_trips_per_turn'] + redis['script_internal_commands_per_turn']:.2f}",
        f"Redis client CPU per script call, 32 concurrent: redis-py "
        f"{redis['client']['redis_py_cpu_us_per_call']:.1f} us, the gateway's pipe "
        f"{redis['client']['pipe_cpu_us_per_call']:.1f} us "
        f"(x{redis['client']['redis_py_vs_pipe_ratio']:.1f})",
        f"memory store: {memory['rss_bytes_per_conversation_excluding_replies']:.0f} B RSS per idle "
        f"conversation excluding replies ({memory['conversations']} conversations; "
        f"tracemalloc {memory['traced_bytes_per_conversation_excluding_replies']:.0f} B, "
        f"{memory['traced_idle_bytes_per_conversation_excluding_replies']:.0f} B past the retry window)",
        f"PA JWT: ES256 {jwt['es256_fresh_us']:.1f} us, RS256 {jwt['rs256_fresh_us']:.1f} us, "
        f"repeated token {jwt['repeated_token_us']:.2f} us (x{jwt['es256_vs_repeated_ratio']:.0f})",
        f"delegation token: ES256 {jwt['delegation_fresh_us']:.1f} us, repeated token "
        f"{jwt['delegation_repeated_us']:.2f} us (x{jwt['delegation_fresh_vs_repeated_ratio']:.0f}); "
        f"receipt signature (ES256, {jwt['receipt_payload_bytes']} B of claims) "
        f"{jwt['receipt_sign_us']:.1f} us per delegated turn",
        f"Redis round trips per delegated turn {delegated_rtt:.2f} "
        f"({delegated_redis['client_commands']}); commands incl. inside scripts "
        f"{delegated_rtt + delegated_redis['script_internal_commands_per_turn']:.2f}",
        "delegation flows (§5.3, before the rounds): "
        + ", ".join(
            f"{name} {flows['users']} users in {flows['seconds']:.1f} s"
            for name, flows in result["delegation"]["flows"].items()
        ),
    ]
    counted = result["instructions"]
    if counted["available"]:
        from bench.instructions import per_turn as instructions_per_turn

        per_turn = instructions_per_turn(counted)
        lines.append(
            f"instructions per turn (callgrind, {counted['concurrency']} in flight): pass-through "
            f"{per_turn[PASSTHROUGH]:,.0f}, gateway-memory {per_turn[GW_MEMORY]:,.0f} "
            f"(x{counted['gateway_memory_vs_passthrough']:.2f}), gateway-redis {per_turn[GW_REDIS]:,.0f} "
            f"(x{counted['gateway_redis_vs_passthrough']:.2f})"
        )
    else:
        lines.append(f"instructions per turn: {counted['note']}")
    workers = result["workers"]
    if workers["available"]:
        lines.append(
            f"workers on Redis: 1 -> {workers['throughput_1_rps']:.1f} turns/s, "
            f"2 -> {workers['throughput_2_rps']:.1f} turns/s (x{workers['throughput_2_vs_1']:.2f})"
        )
    else:
        lines.append("workers: not available (the CLI has no --workers)")
    from bench.adapters import render as render_adapters

    lines += ["", *render_adapters(result["adapters"]), "", "targets"]
    lines += [target_line(t) for t in result["targets"]]
    return "\n".join(lines)


def target_line(t: dict[str, Any]) -> str:
    """One target as the table shows it: its mark, figure, goal, repeats' spread and verdict."""
    mark = "PASS" if t["passed"] else "FAIL"
    spread = ""
    if len(t["per_repeat"]) > 1:
        spread = f", repeats {min(t['per_repeat']):.2f} to {max(t['per_repeat']):.2f}"
    return (
        f"  [{mark}] {t['name']}: {_fmt(t['measured'])} (target {t['target']}{spread}: "
        f"{t['verdict']}) {t['note']}".rstrip()
    )


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _python_json(argv: Sequence[str], timeout: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, *argv],
        cwd=REPO_ROOT,
        env=python_env(),
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise ChildFailed(f"{' '.join(argv)} failed:\n{done.stderr.decode(errors='replace')[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="short rounds; finishes in under two minutes")
    group.add_argument(
        "--smoke", action="store_true", help="the shortest run that exercises every path (tests)"
    )
    parser.add_argument("--out", type=Path, help="result file (default bench/results/<timestamp>.json)")
    parser.add_argument("--duration", type=float, help="measured seconds per round")
    parser.add_argument("--repeats", type=int, help="interleaved repeats of every round")
    parser.add_argument("--concurrency", type=int, help="closed-loop concurrency of the peak rounds")
    parser.add_argument("--turns", type=int, help="turns per conversation")
    parser.add_argument("--conversations", type=int, help="idle conversations for the memory reading")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="a database the run may flush")
    parser.add_argument("--profile", action="store_true", help="also profile the gateway with pyinstrument")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    base = MODES["smoke" if args.smoke else "quick" if args.quick else "full"]
    overrides: dict[str, Any] = {}
    for name, field_name in (
        ("duration", "duration"),
        ("repeats", "repeats"),
        ("concurrency", "concurrency"),
        ("turns", "turns"),
        ("conversations", "memory_conversations"),
    ):
        value = getattr(args, name)
        if value is not None:
            overrides[field_name] = value
    if "duration" in overrides:
        overrides["half_load_duration"] = overrides["duration"]
    return Settings(**{**asdict(base), **overrides})


def run(settings: Settings, redis_url: str, with_profile: bool) -> dict[str, Any]:
    from bench.adapters import measure as measure_adapters  # bench.adapters imports this module

    started = dt.datetime.now(dt.UTC)
    redis = RedisProbe(redis_url)
    try:
        redis.ping()
    except (OSError, ConnectionError) as exc:
        raise ChildFailed(f"the benchmark needs Redis at {redis_url}: {exc}") from None
    redis.flush()
    workdir = Path(tempfile.mkdtemp(prefix="pact-bench-"))
    load_before = os.getloadavg()
    try:
        with Children(workdir) as children:
            bench = Bench(settings, children, workdir, redis)
            progress(f"starting bot, pass-through and gateways (logs in {workdir})")
            bench.start_all(redis_url)
            # Each delegated front beside its Identity twin, so their same-repeat pair is close in time.
            order = [DIRECT, PASSTHROUGH, GW_MEMORY, DELEGATED_MEMORY, GW_REDIS, DELEGATED_REDIS]
            if bench.workers_available:
                order.append(GW_REDIS_2W)
            progress("peak rounds (closed loop)")
            rounds = bench.peak_rounds(order)
            fronts = summarize_fronts(rounds)
            # Half of each gateway's own peak; the pass-through runs at the same rate beside each.
            rate = max(fronts[GW_MEMORY]["throughput_rps"] / 2, 1.0)
            rate_redis = max(fronts[GW_REDIS]["throughput_rps"] / 2, 1.0)
            progress("half-load rounds (open loop)")
            half_rounds = bench.half_load(
                [
                    (PASSTHROUGH, PASSTHROUGH, rate),
                    (GW_MEMORY, GW_MEMORY, rate),
                    (PASSTHROUGH_AT_REDIS_RATE, PASSTHROUGH, rate_redis),
                    (GW_REDIS, GW_REDIS, rate_redis),
                ]
            )
            progress("Redis round trips (MONITOR)")
            redis_result = bench.redis_round_trips()
            redis_result["delegated"] = bench.redis_round_trips(DELEGATED_REDIS)
            progress("Redis client cost per script call")
            redis_result["client"] = _python_json(
                ["-m", "bench.redis_client", "--redis-url", redis_url, "--calls", str(settings.client_calls)],
                timeout=600,
            )
            progress("instructions per turn (callgrind)")
            counted = bench.instructions(redis_url)
            progress("bot adapters, each against its fake")
            adapters = measure_adapters(bench)
            profile = bench.profile() if with_profile else None
        progress("memory per idle conversation")
        memory = _python_json(
            [
                "-m",
                "bench.memory",
                "--conversations",
                str(settings.memory_conversations),
                "--traced-conversations",
                str(min(settings.memory_traced, settings.memory_conversations)),
            ],
            timeout=900,
        )
        progress("PA JWT and delegation-token verification, receipt signing")
        jwt_cost = _python_json(
            [
                "-m",
                "bench.jwt_cost",
                "--fresh",
                str(settings.jwt_fresh),
                "--repeated",
                str(settings.jwt_repeated),
            ],
            timeout=600,
        )
    finally:
        redis.flush()
        shutil.rmtree(workdir, ignore_errors=True)

    def per_repeat(top: str, bottom: str, value: Callable[[dict[str, Any]], float]) -> list[float]:
        return paired(rounds, top, bottom, ratio_of(value))

    def added(top: str, bottom: str, value: Callable[[dict[str, Any]], float]) -> list[float]:
        return paired(half_rounds, top, bottom, difference_of(value))

    ratios_per_repeat = {
        "throughput_passthrough_vs_direct": per_repeat(PASSTHROUGH, DIRECT, _rps),
        "throughput_gateway_memory_vs_passthrough": per_repeat(GW_MEMORY, PASSTHROUGH, _rps),
        "throughput_gateway_memory_vs_direct": per_repeat(GW_MEMORY, DIRECT, _rps),
        "throughput_gateway_redis_vs_passthrough": per_repeat(GW_REDIS, PASSTHROUGH, _rps),
        "throughput_gateway_redis_vs_direct": per_repeat(GW_REDIS, DIRECT, _rps),
        "cpu_per_turn_gateway_memory_vs_passthrough": per_repeat(GW_MEMORY, PASSTHROUGH, front_cpu),
        "cpu_per_turn_gateway_redis_vs_passthrough": per_repeat(GW_REDIS, PASSTHROUGH, front_cpu),
        "throughput_delegated_memory_vs_gateway_memory": per_repeat(DELEGATED_MEMORY, GW_MEMORY, _rps),
        "throughput_delegated_redis_vs_gateway_redis": per_repeat(DELEGATED_REDIS, GW_REDIS, _rps),
        "cpu_per_turn_delegated_memory_vs_gateway_memory": per_repeat(DELEGATED_MEMORY, GW_MEMORY, front_cpu),
        "cpu_per_turn_delegated_redis_vs_gateway_redis": per_repeat(DELEGATED_REDIS, GW_REDIS, front_cpu),
    }
    added_per_repeat = {
        "p50_ms": added(GW_MEMORY, PASSTHROUGH, _p50),
        "p99_ms": added(GW_MEMORY, PASSTHROUGH, _p99),
        "p50_ms_redis": added(GW_REDIS, PASSTHROUGH_AT_REDIS_RATE, _p50),
        "p99_ms_redis": added(GW_REDIS, PASSTHROUGH_AT_REDIS_RATE, _p99),
    }
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count() or 0,
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_before": list(load_before),
            "loadavg_after": list(os.getloadavg()),
        },
        "settings": asdict(settings),
        "fronts": fronts,
        "rounds": rounds,
        "ratios": {key: _median(values) for key, values in ratios_per_repeat.items()},
        "ratios_per_repeat": ratios_per_repeat,
        "half_load": {
            "rate_rps": rate,
            "fronts": summarize_fronts(half_rounds),
            "rounds": half_rounds,
            "added_p50_ms": _median(added_per_repeat["p50_ms"]),
            "added_p99_ms": _median(added_per_repeat["p99_ms"]),
            "rate_rps_redis": rate_redis,
            "added_p50_ms_redis": _median(added_per_repeat["p50_ms_redis"]),
            "added_p99_ms_redis": _median(added_per_repeat["p99_ms_redis"]),
            "added_per_repeat": added_per_repeat,
        },
        "redis": redis_result,
        "memory": memory,
        "jwt": jwt_cost,
        "delegation": {
            "users": settings.delegated_users,
            "scopes_requested": list(SCOPES),
            "flows": bench.flows,
        },
        "workers": {"available": bench.workers_available},
        "instructions": counted,
        "adapters": adapters,
        "profile": profile,
    }
    if bench.workers_available:
        one = fronts[GW_REDIS]["throughput_rps"]
        two = fronts[GW_REDIS_2W]["throughput_rps"]
        scaling = per_repeat(GW_REDIS_2W, GW_REDIS, _rps)
        result["workers"].update(
            {
                "throughput_1_rps": one,
                "throughput_2_rps": two,
                "throughput_2_vs_1": _median(scaling),
                "throughput_2_vs_1_per_repeat": scaling,
                "cpu_s_per_1000_turns_1": fronts[GW_REDIS]["cpu_s_per_1000_turns"]["front"],
                "cpu_s_per_1000_turns_2": fronts[GW_REDIS_2W]["cpu_s_per_1000_turns"]["front"],
            }
        )
    else:
        result["workers"]["note"] = "workers: not available (pact-gateway serve has no --workers)"
    result["targets"] = check_targets(result)
    _assert_finite(result)
    return result


def _assert_finite(value: Any, path: str = "result") -> None:
    """A NaN or infinity would make the JSON unreadable to strict parsers: fail loudly instead."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{path} is {value}")
    if isinstance(value, dict):
        for key, item in value.items():
            _assert_finite(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _assert_finite(item, f"{path}[{index}]")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = settings_from(args)
    try:
        result = run(settings, args.redis_url, args.profile)
    except ChildFailed as failure:
        print(f"bench: {failure}", file=sys.stderr)
        return 1
    out: Path = (
        args.out or RESULTS_DIR / f"{result['started_at'].replace(':', '').replace('+0000', 'Z')}.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(render_table(result))
    print(f"\nresult: {out}")
    return 0
