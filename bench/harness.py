"""The fronts of the throughput and adapter runs, and the harness that starts and drives them.

:class:`Bench` starts the sample bot, the pass-through and gateway CLIs as children (each its own
process, so its CPU can be read from ``/proc``) and drives them with the load generator;
:func:`gateway_yaml` is the one gateway configuration every bench front writes. Nothing here judges
a figure (:mod:`bench.figures`).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import redis
import yaml

from bench import loadgen
from bench.delegation import delegation_config, grant_users
from bench.figures import valid
from bench.loadgen import AUDIENCE, ISSUER
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
from gateway.config import RATE_RULE_NAMES
from gateway.pa_keys import generate_private_jwk, public_jwks

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
MEMORY_MAX_ENTRIES = 2_000_000
"""``cache.max_entries`` of the bench's memory-store gateways: no round opens as many conversations
within a ``retry_window`` as would fill it, so no round measures the bound's 429s (issue 29 item 4)."""
MEMORY_BOUND_NOTE = (
    f"memory-store gateways run with cache.max_entries {MEMORY_MAX_ENTRIES:,} (set for this run)"
)
RESULTS_DIR = REPO_ROOT / "bench" / "results"

DIRECT = "direct"
PASSTHROUGH = "passthrough"
GW_MEMORY = "gateway-memory"
GW_REDIS = "gateway-redis"
DELEGATED_MEMORY = "delegated-memory"
DELEGATED_REDIS = "delegated-redis"
DELEGATED_OF = {DELEGATED_MEMORY: GW_MEMORY, DELEGATED_REDIS: GW_REDIS}
"""Each delegated front and the Identity front of the same gateway process it is compared with."""
# §5.5 on top of §3: a delegated turn adds a cached token check, a grant check inside the store step
# it makes anyway and a receipt signature; its throughput may be at most 15 % below the Identity turn's.
DELEGATED_THROUGHPUT = 0.85
PASSTHROUGH_AT_REDIS_RATE = "passthrough-at-redis-rate"


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
    instruction_turns: int
    """Turns in the warm-up and the shorter callgrind window (the longer has twice as many); 0 skips."""
    delegated_users: int = 256
    """Users of the delegated fronts, one §5.3 grant and token each (the Identity fronts have 256 too)."""


MODES: dict[str, Settings] = {
    "smoke": Settings("smoke", 0.8, 0.3, 1, 16, 5, 0.8, 1, 32, 20, 16),
    "quick": Settings("quick", 1.6, 0.5, 2, 32, 5, 1.5, 1, 64, 0),
    "full": Settings("full", 12.0, 2.0, 4, 32, 5, 15.0, 3, 64, 400),
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
    delegation: Path | None = None
    bot: Child | None = None
    port: int = 0

    @classmethod
    def a2a(cls, name: str, port: int, process: Child) -> Front:
        """A front that speaks A2A on ``port``: turns go to the bench Brand's ``message:send``."""
        return cls(name, f"http://127.0.0.1:{port}/a2a/acme/message:send", "a2a", process, port=port)

    def listening(self) -> Front:
        """This front once its process accepts connections."""
        if self.process is not None:
            self.process.wait_port(self.port)
        return self


FrontArgv = Callable[[int], list[str]]
"""The Python arguments that start an A2A front (``-m …``) listening on the given port."""


def gateway_yaml(
    port: int,
    jwks: Mapping[str, Any],
    bot: Mapping[str, Any],
    cache: Mapping[str, Any],
    **more: Any,
) -> dict[str, Any]:
    """The gateway as an operator runs it, defaults everywhere but addresses, keys, store and limits.

    The personal agent's keys are inline (verification is measured, never a JWKS fetch); every §6
    rule is checked on each turn but never refuses (one bench agent stands for the whole load).
    ``bot`` is the Brand's ``upstream`` block, ``cache`` the ``cache`` block (on ``memory://`` its
    ``max_entries`` defaults to :data:`MEMORY_MAX_ENTRIES`, which the front prints once:
    :data:`MEMORY_BOUND_NOTE`); ``more`` adds top-level blocks, ``brand`` keys of the Brand.
    """
    brand = {
        "id": "acme",
        "name": "Acme Support",
        "description": "Order status.",
        "version": "1.0.0",
        "upstream": dict(bot),
        **more.pop("brand", {}),
    }
    return {
        "listen": {"host": "127.0.0.1", "port": port},
        "public_url": f"http://127.0.0.1:{port}",
        "provider": {"organization": "Bench", "url": "https://bench.invalid", "audience": AUDIENCE},
        "personal_agents": {"policy": "allowlist", "registered": [{"issuer": ISSUER, "jwks": jwks}]},
        "cache": {**({"max_entries": MEMORY_MAX_ENTRIES} if cache["url"] == "memory://" else {}), **cache},
        "rate_limits": {name: {"rate": 1_000_000, "burst": 1_000_000} for name in RATE_RULE_NAMES},
        "metrics": {"enabled": False},
        **more,
        "brands": [brand],
    }


def write_key(path: Path) -> dict[str, Any]:
    """A fresh ES256 private JWK written to ``path`` (the run's own directory); its public JWKS."""
    private = generate_private_jwk("ES256")
    path.write_text(json.dumps(private))
    return public_jwks(private)


def write_yaml(path: Path, raw: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(raw), sort_keys=False))
    return path


class Bench:
    def __init__(self, settings: Settings, children: Children, workdir: Path, redis_url: str) -> None:
        self.settings = settings
        self.children = children
        self.workdir = workdir
        self.redis_url = redis_url
        self.key_file = workdir / "pa-key.json"
        self.jwks = write_key(self.key_file)
        # The Brand's login (its assertions' key, inline in the gateway's config) and the Provider's
        # §5.4/§5.6 signing key: generated per run, kept in the run's directory only.
        self.login_key_file = workdir / "login-key.json"
        self.login_jwks = write_key(self.login_key_file)
        self.signing_key_file = workdir / "provider-key.json"
        write_key(self.signing_key_file)
        self.flows: dict[str, dict[str, Any]] = {}
        self.bot: Child | None = None
        self.bot_url = ""
        self.fronts: dict[str, Front] = {}
        self.redis_pid = _local_redis_pid(redis_url)  # its CPU per turn is part of the price

    # ---- processes ---------------------------------------------------------------------------

    def start_bot(self) -> tuple[Child, int]:
        port = free_port()
        bot = self.children.python("bot", "-m", "examples.sample_bot", "--port", str(port))
        self.bot = bot
        self.bot_url = f"http://127.0.0.1:{port}/chat"
        return bot, port

    def gateway_config(self, port: int, cache_url: str, upstream: dict[str, Any] | None = None) -> Path:
        """:func:`gateway_yaml` with metrics on and a Brand that delegates (§5): its scopes, its login's
        keys inline, the Provider's signing key; ``upstream`` defaults to the sample bot."""
        raw = gateway_yaml(
            port,
            self.jwks,
            upstream or {"url": self.bot_url},
            {"url": cache_url},
            metrics={"enabled": True, "host": "127.0.0.1", "port": free_port()},
            oauth={"signing_keys": [{"file": str(self.signing_key_file)}]},
            brand={"delegation": delegation_config(self.login_jwks)},
        )
        return write_yaml(self.workdir / f"gateway-{port}.yaml", raw)

    def passthrough_argv(self, port: int) -> list[str]:
        """The design's ceiling on the gateway's own stack: aiohttp's server, the gateway's bot client."""
        return ["-m", "bench.passthrough", "--port", str(port), "--upstream", self.bot_url]

    def gateway_front(self, cache_url: str, upstream: dict[str, Any] | None = None) -> FrontArgv:
        """How a gateway front on ``cache_url`` starts on a port (here, and in :mod:`bench.instructions`)."""

        def argv(port: int) -> list[str]:
            return ["-m", "gateway", "serve", "--config", str(self.gateway_config(port, cache_url, upstream))]

        return argv

    def start(self, name: str, argv: FrontArgv) -> Front:
        """A front started on a free port (not yet listening: :meth:`Front.listening`)."""
        port = free_port()
        return Front.a2a(name, port, self.children.python(name, *argv(port)))

    def start_all(self, redis_url: str) -> None:
        progress(MEMORY_BOUND_NOTE)
        bot, bot_port = self.start_bot()
        fronts = [self.start(PASSTHROUGH, self.passthrough_argv)]
        fronts += [
            self.start(name, self.gateway_front(url))
            for name, url in ((GW_MEMORY, "memory://"), (GW_REDIS, redis_url))
        ]
        bot.wait_port(bot_port)
        self.fronts = {DIRECT: Front(DIRECT, self.bot_url, "bot", None)} | {
            f.name: f.listening() for f in fronts
        }
        for delegated, identity in DELEGATED_OF.items():
            self.delegate(delegated, identity, self.fronts[identity].port)

    def delegate(self, name: str, identity: str, port: int) -> None:
        """Front ``name``: the gateway of front ``identity``, driven by users that hold real grants.

        Each user's grant and token come from the §5.3 flow over HTTP (``bench.delegation``), once,
        before any timed round, as a personal agent gets them once and then uses them for an hour.
        """
        tokens = self.workdir / f"{name}-tokens.json"
        url, users = f"http://127.0.0.1:{port}", self.settings.delegated_users
        self.flows[name] = grant_users(url, users, self.key_file, self.login_key_file, tokens)
        self.fronts[name] = replace(self.fronts[identity], name=name, delegation=tokens)

    def _parties(self, front: Front) -> dict[str, int]:
        """The processes whose CPU a round of ``front`` costs: its bot, itself, a local Redis."""
        bot = front.bot or self.bot
        parties = {} if bot is None else {"bot": bot.pid}
        parties |= {} if front.process is None else {"front": front.process.pid}
        if self.redis_pid is not None and Path(f"/proc/{self.redis_pid}").exists():
            parties["redis"] = self.redis_pid
        return parties

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
        users: int | None = None,
    ) -> dict[str, Any]:
        """One load-generator run against ``front``, with the CPU every party spent during it; ``users``
        overrides the load generator's number of users (one PA JWT each)."""
        self._check_alive(front)
        argv = loadgen.argv(
            front.url,
            self.key_file,
            mode=front.mode,
            duration=duration,
            warmup=self.settings.warmup,
            concurrency=concurrency,
            turns=self.settings.turns,
            rate=rate,
            max_turns=max_turns,
            users=users,
            delegation=front.delegation,
        )
        limit = self.settings.warmup + duration + 60
        result = run_load(argv, self._parties(front), self.workdir, limit, while_running, front.name)
        self._check_alive(front)
        return result | {"front": front.name}

    def peak_rounds(self, order: Sequence[str]) -> list[dict[str, Any]]:
        """Closed-loop rounds of every front in ``order``, ``repeats`` times.

        Every other repeat runs the fronts in reverse: on a machine whose speed drifts during the
        run, a fixed order would always measure one front later than another (a bias a same-repeat
        ratio cannot see), while alternating it cancels a steady drift.
        """
        s = self.settings
        plan = [
            [(name, name, 0.0) for name in (order if r % 2 == 0 else order[::-1])] for r in range(s.repeats)
        ]
        return self._rounds(plan, s.duration, s.concurrency)

    def half_load(self, plan: Sequence[tuple[str, str, float]]) -> list[dict[str, Any]]:
        """Open-loop rounds; ``plan`` is (series name, front, rate), interleaved per repeat like the peaks."""
        s = self.settings
        return self._rounds([plan] * s.half_load_repeats, s.half_load_duration, s.half_load_concurrency)

    def _rounds(
        self, plan: Sequence[Sequence[tuple[str, str, float]]], duration: float, concurrency: int
    ) -> list[dict[str, Any]]:
        rounds: list[dict[str, Any]] = []
        for repeat, series in enumerate(plan):
            for name, front, rate in series:
                result = self.drive(self.fronts[front], duration=duration, concurrency=concurrency, rate=rate)
                rounds.append(result | {"front": name, "repeat": repeat})
                latency = result["latency_ms"]
                progress(
                    f"  {repeat + 1}/{len(plan)} {name:<27} at {rate or 'peak'}: "
                    + (
                        f"{result['throughput_rps']:8.1f} turns/s  p50 {latency['p50']:6.2f} ms  "
                        f"p99 {latency['p99']:6.2f} ms  errors 0  others' CPU {result['other_cpu_share']:.0%}"
                        if valid(result)
                        else f"VOID: {result['errors']} answers not 2xx, no figure from this round"
                    )
                )
        return rounds


def run_load(
    argv: Sequence[str],
    parties: Mapping[str, int],
    workdir: Path,
    limit: float,
    while_running: Callable[[], None] | None = None,
    target: str = "the front",
) -> dict[str, Any]:
    """One load-generator run (``argv``: :func:`bench.loadgen.argv`) and its JSON, with the CPU each of
    ``parties`` (name: pid) and the load generator spent, and how busy the machine was meanwhile.

    ``while_running`` is called in a loop until the run ends (else a 50 ms sleep); past ``limit``
    seconds the load generator is killed and the round fails.
    """
    cpu_before = {name: cpu_seconds(pid) for name, pid in parties.items()}
    ticks_before = read_machine_ticks()
    wall_before = time.monotonic()
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out_path, err_path = workdir / "loadgen.out", workdir / "loadgen.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        running = subprocess.Popen(argv, cwd=REPO_ROOT, env=python_env(), stdout=out, stderr=err)
        deadline = time.monotonic() + limit
        try:
            while running.poll() is None:
                if time.monotonic() > deadline:
                    raise ChildFailed(f"the load generator did not finish against {target}")
                if while_running is not None:
                    while_running()
                else:
                    time.sleep(0.05)
        finally:
            if running.poll() is None:
                running.kill()
                running.wait(5)
    ticks_after = read_machine_ticks()
    wall = time.monotonic() - wall_before
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The load generator's whole life (start-up included), known once it has been reaped.
    loadgen_process = (children_after.ru_utime - children_before.ru_utime) + (
        children_after.ru_stime - children_before.ru_stime
    )
    # Read before any party is stopped: a process gone from /proc has no CPU to read.
    cpu = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in parties.items()}
    if running.returncode != 0:
        raise ChildFailed(f"load generator failed against {target}:\n{err_path.read_text()[-2000:]}")
    result: dict[str, Any] = json.loads(out_path.read_text())
    turns = max(int(result["turns_total"]), 1)
    cpu["loadgen"] = float(result["cpu_s"])
    result["cpu_s"] = cpu
    result["cpu_s_per_1000_turns"] = {party: seconds * 1000 / turns for party, seconds in cpu.items()}
    result["machine_busy"] = machine_busy(ticks_before, ticks_after)
    # CPU the machine spent on anything but this round's parties: other users of a shared machine.
    ours = sum(v for k, v in cpu.items() if k != "loadgen") + max(loadgen_process, cpu["loadgen"])
    others = max(machine_busy_seconds(ticks_before, ticks_after) - ours, 0.0)
    result["other_cpu_share"] = others / (wall * (os.cpu_count() or 1)) if wall > 0 else 0.0
    return result


def _local_redis_pid(url: str) -> int | None:
    """The Redis server's pid when it runs on this machine (a remote pid could name any local process)."""
    try:
        pid = int(redis.Redis.from_url(url).info("server")["process_id"])
        command = Path(f"/proc/{pid}/comm").read_text()
    except (OSError, redis.RedisError):  # no Redis (a front on the memory store) or not a local one
        return None
    return pid if command.startswith("redis") else None


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_json(argv: Sequence[str], timeout: float) -> dict[str, Any]:
    """A load-generator run (``argv``: :func:`bench.loadgen.argv`) whose CPU is not read: its JSON."""
    done = subprocess.run(
        argv, cwd=REPO_ROOT, env=python_env(), capture_output=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise ChildFailed(f"{' '.join(argv)} failed:\n{done.stderr.decode(errors='replace')[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def front_parser(
    front: str, doc: str | None, out: str = "also write the result as JSON here"
) -> argparse.ArgumentParser:
    """A front's options: its question (its module's first paragraph) as the description, and ``--out``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m bench {front}", description=(doc or "").split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, help=out)
    return parser


def report(result: Mapping[str, Any], out: Path | None, text: str) -> None:
    """A front's figures printed beside their targets, its result also written as JSON to ``out``."""
    if out is not None:
        # allow_nan=False: a NaN or infinity would make the file unreadable to strict parsers; fail instead.
        out.write_text(json.dumps(result, indent=2, allow_nan=False) + "\n")
    print(text)


def mode_parser(front: str, doc: str | None) -> argparse.ArgumentParser:
    """The options of a front run in :data:`MODES` (the throughput and adapter fronts)."""
    parser = front_parser(front, doc, "result file (default bench/results/<front>-<timestamp>.json)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true", help="short rounds; no instruction count")
    group.add_argument("--smoke", action="store_true", help="the shortest run that exercises every path")
    parser.add_argument("--duration", type=float, help="measured seconds per round")
    parser.add_argument("--repeats", type=int, help="interleaved repeats of every round")
    parser.add_argument("--concurrency", type=int, help="closed-loop concurrency of the peak rounds")
    parser.add_argument("--turns", type=int, help="turns per conversation")
    parser.add_argument(
        "--instruction-turns", type=int, help="turns in the shorter callgrind window (0 skips the count)"
    )
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="a database the run may flush")
    return parser


def mode_main(
    front: str,
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    run: Callable[[Settings, str], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
) -> int:
    """A front run in a mode: its result (with ``started_at``) as JSON in ``bench/results/``, its table."""
    args = parser.parse_args(argv)
    try:
        result = run(settings_from(args), args.redis_url)
    except ChildFailed as failure:
        print(f"python -m bench {front}: {failure}", file=sys.stderr)
        return 1
    stamp = result["started_at"].replace(":", "").replace("+0000", "Z")
    out = args.out or RESULTS_DIR / f"{front}-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    report(result, out, f"{render(result)}\n\nresult: {out}")
    return 0


def settings_from(args: argparse.Namespace) -> Settings:
    base = MODES["smoke" if args.smoke else "quick" if args.quick else "full"]
    fields = ("duration", "repeats", "concurrency", "turns", "instruction_turns")
    overrides = {name: value for name in fields if (value := getattr(args, name)) is not None}
    if "duration" in overrides:
        overrides["half_load_duration"] = overrides["duration"]
    return Settings(**{**asdict(base), **overrides})
