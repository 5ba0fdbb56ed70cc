"""``python -m bench soak``: the gateway under steady load; its memory and file descriptors before and after.

A leak is growth that more traffic makes larger: one ``pact-gateway serve`` process (in front of
the sample bot) is driven by the load generator for ``--duration`` seconds and read from
``/proc/<pid>`` (``VmRSS`` and open descriptors) after a warm-up run of the same shape, every second
(the peak), and once the load's connections are closed. On Redis (default; database 14 flushed
before and after, or ``--redis-url``) conversations live outside the process; on the memory store
(``--cache memory``) each may account for :data:`MEMORY_STORE_ALLOWANCE` bytes. Bounds: RSS growth
≤ ``--rss-bound-mib`` (16 MiB) plus that allowance, descriptors ≤ ``--fd-bound`` (8), no error; exit
status 1 when one is broken. ``tests/reliability_report.py`` runs it for docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import loadgen
from bench.harness import DEFAULT_REDIS_URL, gateway_yaml, write_yaml
from bench.procs import REPO_ROOT, Child, ChildFailed, Children, free_port, python_env, rss_bytes
from bench.redis_probe import RedisProbe
from gateway.pa_keys import generate_private_jwk, public_jwks

SCHEMA = "pact-gateway-soak/1"
MIB = 1024 * 1024
MEMORY_STORE_ALLOWANCE = 4096
"""Bytes of resident memory a conversation stored on the memory store may account for."""
SETTLE_LIMIT = 10.0
"""Seconds to wait after the load for the gateway to close the load generator's connections."""


class SoakFailed(RuntimeError):
    """The soak could not run to the end (the load generator or the gateway failed); no verdict."""


@dataclass(frozen=True)
class Reading:
    """One look at a process: resident memory and open file descriptors."""

    rss_bytes: int
    open_fds: int


def read_process(pid: int) -> Reading:
    return Reading(rss_bytes(pid), len(os.listdir(f"/proc/{pid}/fd")))


@dataclass(frozen=True)
class Bounds:
    rss_bytes: int
    open_fds: int


def bounds_for(args: argparse.Namespace, conversations: int) -> Bounds:
    """The growth this run may show: the fixed bounds, and on the memory store its stored conversations."""
    allowance = conversations * MEMORY_STORE_ALLOWANCE if args.cache == "memory" else 0
    return Bounds(int(args.rss_bound_mib * MIB) + allowance, args.fd_bound)


def verdict(before: Reading, after: Reading, bounds: Bounds, errors: int) -> dict[str, Any]:
    """Whether the run stayed within ``bounds`` (and saw no error), and by how much it grew."""
    rss_growth = after.rss_bytes - before.rss_bytes
    fd_growth = after.open_fds - before.open_fds
    return {
        "rss_growth_bytes": rss_growth,
        "fd_growth": fd_growth,
        "rss_ok": rss_growth <= bounds.rss_bytes,
        "fds_ok": fd_growth <= bounds.open_fds,
        "errors_ok": errors == 0,
        "ok": rss_growth <= bounds.rss_bytes and fd_growth <= bounds.open_fds and errors == 0,
    }


class Soak:
    def __init__(self, args: argparse.Namespace, workdir: Path, children: Children) -> None:
        self.args = args
        self.workdir = workdir
        self.children = children
        self.key_file = workdir / "pa-key.json"
        private = generate_private_jwk("ES256")
        self.key_file.write_text(json.dumps(private))
        self.jwks = public_jwks(private)

    def start(self) -> tuple[Child, str]:
        """The sample bot and the gateway in front of it; the gateway process and its turn URL."""
        bot_port, port = free_port(), free_port()
        bot = self.children.python("bot", "-m", "examples.sample_bot", "--port", str(bot_port))
        cache_url = "memory://" if self.args.cache == "memory" else self.args.redis_url
        raw = gateway_yaml(
            port,
            self.jwks,
            {"url": f"http://127.0.0.1:{bot_port}/chat"},
            {"url": cache_url},
            metrics={"enabled": True, "host": "127.0.0.1", "port": free_port()},
        )
        config = write_yaml(self.workdir / "gateway.yaml", raw)
        gateway = self.children.python("gateway", "-m", "gateway", "serve", "--config", str(config))
        bot.wait_port(bot_port)
        gateway.wait_port(port)
        return gateway, f"http://127.0.0.1:{port}/a2a/acme/message:send"

    def load(self, url: str, duration: float, gateway: Child) -> tuple[dict[str, Any], Reading]:
        """``duration`` seconds of closed-loop load; the load generator's result and the peak reading."""
        argv = loadgen.argv(
            url,
            self.key_file,
            duration=duration,
            warmup=0,
            concurrency=self.args.concurrency,
            turns=self.args.turns,
        )
        peak = read_process(gateway.pid)
        with subprocess.Popen(
            argv, cwd=REPO_ROOT, env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as running:
            deadline = time.monotonic() + duration + 60
            while running.poll() is None and time.monotonic() < deadline:
                time.sleep(1.0)
                now = read_process(gateway.pid)
                peak = Reading(max(peak.rss_bytes, now.rss_bytes), max(peak.open_fds, now.open_fds))
            out, err = running.communicate(timeout=30)
        if running.returncode != 0:
            raise SoakFailed(f"the load generator failed:\n{err.decode(errors='replace')[-2000:]}")
        result: dict[str, Any] = json.loads(out)
        return result, peak

    def settled(self, gateway: Child, before: Reading) -> Reading:
        """The reading once the gateway has closed the finished load's connections (or the limit passed)."""
        deadline = time.monotonic() + SETTLE_LIMIT
        reading = read_process(gateway.pid)
        while reading.open_fds > before.open_fds and time.monotonic() < deadline:
            time.sleep(0.2)
            reading = read_process(gateway.pid)
        return reading

    def run(self) -> dict[str, Any]:
        gateway, url = self.start()
        warm, _ = self.load(url, self.args.warmup, gateway)
        before = self.settled(gateway, read_process(gateway.pid))
        measured, peak = self.load(url, self.args.duration, gateway)
        after = self.settled(gateway, before)
        if not gateway.alive():
            raise SoakFailed(f"the gateway exited during the soak:\n{gateway.tail()}")
        # The warm-up's conversations are in the "before" reading already; the measured run's are not.
        conversations = int(measured["conversations"])
        bounds = bounds_for(self.args, conversations)
        errors = int(warm["errors"]) + int(measured["errors"])
        return {
            "schema": SCHEMA,
            "cache": self.args.cache,
            "duration_s": self.args.duration,
            "warmup_s": self.args.warmup,
            "concurrency": self.args.concurrency,
            "turns": int(measured["turns_total"]),
            "turns_per_s": measured["throughput_rps"],
            "errors": errors,
            "error_samples": measured["error_samples"] or warm["error_samples"],
            "conversations_stored": conversations if self.args.cache == "memory" else 0,
            "before": asdict(before),
            "peak": asdict(peak),
            "after": asdict(after),
            "bounds": asdict(bounds),
            "verdict": verdict(before, after, bounds, errors),
        }


def render(result: dict[str, Any]) -> str:
    """The soak's report for a person: what ran, then memory and descriptors against their bounds."""
    before, peak, after = result["before"], result["peak"], result["after"]
    bounds, checked = result["bounds"], result["verdict"]

    def mib(value: int) -> str:
        return f"{value / MIB:.1f} MiB"

    def mark(ok: bool) -> str:
        return "ok" if ok else "EXCEEDED"

    return "\n".join(
        [
            f"soak: pact-gateway serve on {result['cache']}, {result['duration_s']:g} s of load at "
            f"concurrency {result['concurrency']} after a {result['warmup_s']:g} s warm-up",
            f"  turns {result['turns']} ({result['turns_per_s']:.0f}/s), errors {result['errors']}",
            f"  resident memory  before {mib(before['rss_bytes'])}, peak {mib(peak['rss_bytes'])}, "
            f"after {mib(after['rss_bytes'])}: {checked['rss_growth_bytes'] / MIB:+.1f} MiB "
            f"(bound {mib(bounds['rss_bytes'])}) {mark(checked['rss_ok'])}",
            f"  open descriptors before {before['open_fds']}, peak {peak['open_fds']}, "
            f"after {after['open_fds']}: {checked['fd_growth']:+d} (bound {bounds['open_fds']}) "
            f"{mark(checked['fds_ok'])}",
            f"  errors: {mark(checked['errors_ok'])}",
        ]
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of measured load (default 60)")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds of load before the first reading")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--turns", type=int, default=5, help="turns per conversation")
    parser.add_argument("--cache", choices=["redis", "memory"], default="redis")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS_URL, help="a database the soak may flush")
    parser.add_argument("--rss-bound-mib", type=float, default=16.0, help="allowed growth of resident memory")
    parser.add_argument("--fd-bound", type=int, default=8, help="allowed growth of open file descriptors")
    parser.add_argument("--out", type=Path, help="also write the result as JSON to this file")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.warmup <= 0 or args.concurrency < 1 or args.turns < 1:
        parser.error("--duration and --warmup must be positive, --concurrency and --turns at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    redis = RedisProbe(args.redis_url) if args.cache == "redis" else None
    with tempfile.TemporaryDirectory(prefix="pact-soak-") as tmp:
        if redis is not None:
            redis.flush()
        try:
            with Children(Path(tmp)) as children:
                result = Soak(args, Path(tmp), children).run()
        except (ChildFailed, SoakFailed) as failed:
            print(f"python -m bench soak: {failed}", file=sys.stderr)
            return 2
        finally:
            if redis is not None:
                redis.flush()
    print(render(result))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["verdict"]["ok"] else 1
