"""``python -m bench throughput``: what pact-gateway costs on top of the bot, side by side in one run.

The sample bot with, in front of it on loopback: nothing, the bare pass-through
(:mod:`bench.passthrough`, the design's ceiling), and the gateway CLI on the memory store and on
Redis, each gateway driven with §3 turns and with the same turns under §5.5 delegation tokens from
real grants. Peak rounds interleaved and repeated, latency at half each gateway's peak, instructions
per turn under callgrind (full run), and each bot adapter beside ``pact`` (:mod:`bench.adapters`).
Redis round trips per turn (2, a delegated turn's too) are held by tests through the gateway
(``tests/ops/test_replicas.py``, ``tests/store/test_conversation_grants.py``); memory per idle
conversation is the memory front's (:mod:`bench.memory`).
Results: a JSON file and a table; targets are reported, never an error exit (docs/performance.md).
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import redis

from bench import adapters, instructions
from bench import figures as fig
from bench.delegation import SCOPES
from bench.harness import (
    DELEGATED_MEMORY,
    DELEGATED_OF,
    DELEGATED_REDIS,
    DELEGATED_THROUGHPUT,
    DIRECT,
    GW_MEMORY,
    GW_REDIS,
    PASSTHROUGH,
    PASSTHROUGH_AT_REDIS_RATE,
    Bench,
    Settings,
    mode_main,
    mode_parser,
    progress,
)
from bench.procs import ChildFailed, Children

SCHEMA = "pact-gateway-bench/1"


def count_instructions(bench: Bench, redis_url: str) -> dict[str, Any]:
    """Instructions per turn of the pass-through and both gateways, counted by callgrind."""
    gateways = {GW_MEMORY: "memory://", GW_REDIS: redis_url}
    fronts = [
        (PASSTHROUGH, bench.passthrough_argv),
        *((n, bench.gateway_front(u)) for n, u in gateways.items()),
    ]
    counted = instructions.count(bench, fronts)
    if counted["available"]:
        per_turn = instructions.per_turn(counted)
        for name in gateways:
            counted[f"{_key(name)}_vs_passthrough"] = per_turn[name] / per_turn[PASSTHROUGH]
    return counted


TARGETS = (
    # figure, front, front it is divided by, goal
    ("throughput", GW_MEMORY, PASSTHROUGH, ">= 0.8"),
    ("throughput", GW_REDIS, PASSTHROUGH, ">= 0.7"),
    ("cpu_per_turn", GW_MEMORY, PASSTHROUGH, "<= 1.5"),
    ("cpu_per_turn", GW_REDIS, PASSTHROUGH, "<= 1.5"),
    ("throughput", DELEGATED_MEMORY, GW_MEMORY, f">= {DELEGATED_THROUGHPUT}"),
    ("throughput", DELEGATED_REDIS, GW_REDIS, f">= {DELEGATED_THROUGHPUT}"),
)


def _key(front: str) -> str:
    return front.replace("-", "_")


def check_targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    ratios, repeats, half = result["ratios"], result["ratios_per_repeat"], result["half_load"]
    counted, out = result["instructions"], []
    for figure, top, bottom, goal in TARGETS:
        key, note = f"{figure}_{_key(top)}_vs_{_key(bottom)}", ""
        # The instruction count barely moves between runs, where CPU time moves by a fifth: beside it.
        if figure == "cpu_per_turn" and counted["available"]:
            note = f"instructions per turn x{counted[key.removeprefix('cpu_per_turn_')]:.2f}"
        below = "pass-through" if bottom == PASSTHROUGH else bottom
        name = f"{'CPU per turn' if figure == 'cpu_per_turn' else figure} {top} / {below}"
        out.append(fig.target(name, goal, ratios[key], repeats[key], note))
    for quantile, goal in (("p50", "<= 1.0"), ("p99", "<= 5.0")):
        figures = half[f"added_{quantile}_ms"], half["added_per_repeat"][f"{quantile}_ms"]
        out.append(fig.target(f"added {quantile} latency at half peak (ms)", goal, *figures))
    return out


def render_table(result: dict[str, Any]) -> str:
    lines = [
        f"pact-gateway benchmark ({result['settings']['mode']}, {result['machine']['cpus']} cores, "
        f"{result['started_at']})",
        "",
        f"{'front':<18}{'turns/s':>9}{'p50 ms':>8}{'p90 ms':>8}{'p99 ms':>8}{'errors':>7}"
        f"{'CPU s/1k turns: front':>22}{'bot':>6}{'redis':>6}{'loadgen':>8}{'others':>8}",
    ]
    for name, front in result["fronts"].items():
        cpu, latency = front["cpu_s_per_1000_turns"], front["latency_ms"]
        lines.append(
            f"{name:<18}{front['throughput_rps']:>9.1f}{latency['p50']:>8.2f}{latency['p90']:>8.2f}"
            f"{latency['p99']:>8.2f}{front['errors']:>7}{fig.fmt(cpu.get('front')):>22}{cpu['bot']:>6.2f}"
            f"{fig.fmt(cpu.get('redis')):>6}{cpu['loadgen']:>8.2f}{front['other_cpu_share']:>8.0%}"
            + ("  VOID: no round all 2xx" if front["void"] else "")
        )
    lines += ["", "ratios (median of same-repeat pairs)"]
    lines += [f"  {key:<52}{value:>8.2f}" for key, value in result["ratios"].items()]
    half = result["half_load"]
    lines.append("")
    for store, suffix in (("memory", ""), ("redis", "_redis")):
        lines.append(
            f"half of gateway-{store}'s peak ({half['rate_rps' + suffix]:.0f} turns/s): added over "
            f"pass-through p50 {half['added_p50_ms' + suffix]:.2f} ms, "
            f"p99 {half['added_p99_ms' + suffix]:.2f} ms"
        )
    flows = result["delegation"]["flows"].items()
    lines.append(
        "delegation flows (§5.3): "
        + ", ".join(f"{n} {f['users']} users in {f['seconds']:.1f} s" for n, f in flows)
    )
    counted = result["instructions"]
    if counted["available"]:
        per_turn = instructions.per_turn(counted)
        lines.append(
            f"instructions per turn (callgrind, {counted['concurrency']} in flight): pass-through "
            f"{per_turn[PASSTHROUGH]:,.0f}, gateway-memory {per_turn[GW_MEMORY]:,.0f} "
            f"(x{counted['gateway_memory_vs_passthrough']:.2f}), gateway-redis {per_turn[GW_REDIS]:,.0f} "
            f"(x{counted['gateway_redis_vs_passthrough']:.2f})"
        )
    else:
        lines.append(f"instructions per turn: {counted['note']}")
    lines += ["", *adapters.render(result["adapters"]), "", "targets"]
    return "\n".join(lines + [fig.target_line(t) for t in result["targets"]])


def run(settings: Settings, redis_url: str) -> dict[str, Any]:
    started = dt.datetime.now(dt.UTC)
    store = redis.Redis.from_url(redis_url)
    try:
        store.ping()
    except (OSError, redis.RedisError) as exc:
        raise ChildFailed(f"the benchmark needs Redis at {redis_url}: {exc}") from None
    store.flushdb()
    workdir = Path(tempfile.mkdtemp(prefix="pact-bench-"))
    load_before = os.getloadavg()
    try:
        with Children(workdir) as children:
            bench = Bench(settings, children, workdir, redis_url)
            progress(f"starting bot, pass-through and gateways (logs in {workdir})")
            bench.start_all(redis_url)
            # Each delegated front beside its Identity twin, so their same-repeat pair is close in time.
            order = [DIRECT, PASSTHROUGH, GW_MEMORY, DELEGATED_MEMORY, GW_REDIS, DELEGATED_REDIS]
            progress("peak rounds (closed loop)")
            rounds = bench.peak_rounds(order)
            fronts = fig.summarize_fronts(rounds)
            # Half of each gateway's own peak; the pass-through runs at the same rate beside each.
            rate = max(fronts[GW_MEMORY]["throughput_rps"] / 2, 1.0)
            rate_redis = max(fronts[GW_REDIS]["throughput_rps"] / 2, 1.0)
            progress("half-load rounds (open loop)")
            plan = [(PASSTHROUGH, PASSTHROUGH, rate), (GW_MEMORY, GW_MEMORY, rate)]
            plan += [(PASSTHROUGH_AT_REDIS_RATE, PASSTHROUGH, rate_redis), (GW_REDIS, GW_REDIS, rate_redis)]
            half_rounds = bench.half_load(plan)
            progress("instructions per turn (callgrind)")
            counted = count_instructions(bench, redis_url)
            progress("bot adapters, each against its fake")
            adapter_costs = adapters.measure(bench)
    finally:
        store.flushdb()
        shutil.rmtree(workdir, ignore_errors=True)

    pairs = [(GW_MEMORY, PASSTHROUGH), (GW_MEMORY, DIRECT), (GW_REDIS, PASSTHROUGH), (GW_REDIS, DIRECT)]
    pairs += [(PASSTHROUGH, DIRECT), *DELEGATED_OF.items()]
    ratios_per_repeat = {
        f"{figure}_{_key(top)}_vs_{_key(bottom)}": fig.paired(rounds, top, bottom, fig.ratio_of(value))
        for top, bottom in pairs
        for figure, value in (("throughput", fig.rps), ("cpu_per_turn", fig.front_cpu))
        if figure == "throughput" or bottom != DIRECT
    }
    added_per_repeat = {
        f"{quantile}_ms{suffix}": fig.paired(half_rounds, top, bottom, fig.difference_of(value))
        for suffix, top, bottom in (
            ("", GW_MEMORY, PASSTHROUGH),
            ("_redis", GW_REDIS, PASSTHROUGH_AT_REDIS_RATE),
        )
        for quantile, value in (("p50", fig.p50), ("p99", fig.p99))
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
        "ratios": {key: fig.median(values) for key, values in ratios_per_repeat.items()},
        "ratios_per_repeat": ratios_per_repeat,
        "half_load": {
            "rate_rps": rate,
            "fronts": fig.summarize_fronts(half_rounds),
            "rounds": half_rounds,
            "rate_rps_redis": rate_redis,
            **{f"added_{key}": fig.median(values) for key, values in added_per_repeat.items()},
            "added_per_repeat": added_per_repeat,
        },
        "delegation": {
            "users": settings.delegated_users,
            "scopes_requested": list(SCOPES),
            "flows": bench.flows,
        },
        "instructions": counted,
        "adapters": adapter_costs,
    }
    result["targets"] = check_targets(result)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    return mode_main("throughput", mode_parser("throughput", __doc__), argv, run, render_table)
