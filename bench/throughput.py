"""``python -m bench throughput``: what pact-gateway costs on top of the bot, side by side in one run.

The sample bot with, in front of it on loopback: nothing, the bare pass-through
(:mod:`bench.passthrough`, the design's ceiling), and the gateway CLI on the memory store and on
Redis, each gateway driven with §3 turns and with the same turns under §5.5 delegation tokens from
real grants. Peak rounds interleaved and repeated, latency at half each gateway's peak, Redis round
trips per turn (``MONITOR``), instructions per turn under callgrind (full run), each bot adapter
beside ``pact`` (:mod:`bench.adapters`), and memory per idle conversation (:mod:`bench.memory`).
Results: a JSON file and a table; targets are reported, never an error exit (docs/performance.md).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench import adapters, instructions
from bench.delegation import SCOPES
from bench.figures import (
    at_least,
    at_most,
    difference_of,
    fmt,
    front_cpu,
    median,
    p50,
    p99,
    paired,
    ratio_of,
    rps,
    summarize_fronts,
    target,
    target_line,
)
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
    mode_parser,
    progress,
    python_json,
    settings_from,
    write_result,
)
from bench.procs import ChildFailed, Children
from bench.redis_probe import RedisProbe

SCHEMA = "pact-gateway-bench/1"


def count_instructions(bench: Bench, redis_url: str) -> dict[str, Any]:
    """Instructions per turn of the pass-through and both gateways, counted by callgrind."""
    counted = instructions.count(
        bench,
        [
            (PASSTHROUGH, bench.passthrough_argv, False),
            (GW_MEMORY, bench.gateway_front("memory://"), False),
            (GW_REDIS, bench.gateway_front(redis_url), True),
        ],
    )
    if not counted["available"]:
        return counted
    per_turn = instructions.per_turn(counted)
    counted["gateway_memory_vs_passthrough"] = per_turn[GW_MEMORY] / per_turn[PASSTHROUGH]
    counted["gateway_redis_vs_passthrough"] = per_turn[GW_REDIS] / per_turn[PASSTHROUGH]
    return counted


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

    return [
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
            f"{latency['p99']:>8.2f}{front['errors']:>7}{fmt(cpu.get('front')):>22}{cpu['bot']:>6.2f}"
            f"{fmt(cpu.get('redis')):>6}{cpu['loadgen']:>8.2f}{front['other_cpu_share']:>8.0%}"
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
    half, redis, memory = result["half_load"], result["redis"], result["memory"]
    delegated_redis = redis["delegated"]
    delegated_rtt = delegated_redis["round_trips_per_turn"]
    lines += [
        "",
        f"half of gateway-memory's peak ({half['rate_rps']:.0f} turns/s): added over pass-through "
        f"p50 {half['added_p50_ms']:.2f} ms, p99 {half['added_p99_ms']:.2f} ms",
        f"half of gateway-redis's peak ({half['rate_rps_redis']:.0f} turns/s): added over pass-through "
        f"p50 {half['added_p50_ms_redis']:.2f} ms, p99 {half['added_p99_ms_redis']:.2f} ms",
        f"Redis round trips per turn {redis['round_trips_per_turn']:.2f} ({redis['client_commands']}; "
        f"{redis['riding_commands_per_turn']:.2f} of them a turn in another's write); commands incl. "
        f"inside scripts {redis['round_trips_per_turn'] + redis['script_internal_commands_per_turn']:.2f}",
        f"memory store: {memory['rss_bytes_per_conversation_excluding_replies']:.0f} B RSS per idle "
        f"conversation excluding replies ({memory['conversations']} conversations; "
        f"tracemalloc {memory['traced_bytes_per_conversation_excluding_replies']:.0f} B, "
        f"{memory['traced_idle_bytes_per_conversation_excluding_replies']:.0f} B past the retry window)",
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
    lines += [target_line(t) for t in result["targets"]]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = mode_parser("python -m bench throughput", __doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, help="idle conversations for the memory reading")
    return parser.parse_args(argv)


def run(settings: Settings, redis_url: str) -> dict[str, Any]:
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
            progress("instructions per turn (callgrind)")
            counted = count_instructions(bench, redis_url)
            progress("bot adapters, each against its fake")
            adapter_costs = adapters.measure(bench)
        progress("memory per idle conversation")
        memory = python_json(
            [
                "-m",
                "bench",
                "memory",
                "--conversations",
                str(settings.memory_conversations),
                "--traced-conversations",
                str(min(settings.memory_traced, settings.memory_conversations)),
            ],
            timeout=900,
        )
    finally:
        redis.flush()
        shutil.rmtree(workdir, ignore_errors=True)

    def per_repeat(top: str, bottom: str, value: Callable[[dict[str, Any]], float]) -> list[float]:
        return paired(rounds, top, bottom, ratio_of(value))

    def added(top: str, bottom: str, value: Callable[[dict[str, Any]], float]) -> list[float]:
        return paired(half_rounds, top, bottom, difference_of(value))

    ratios_per_repeat = {
        "throughput_passthrough_vs_direct": per_repeat(PASSTHROUGH, DIRECT, rps),
        "throughput_gateway_memory_vs_passthrough": per_repeat(GW_MEMORY, PASSTHROUGH, rps),
        "throughput_gateway_memory_vs_direct": per_repeat(GW_MEMORY, DIRECT, rps),
        "throughput_gateway_redis_vs_passthrough": per_repeat(GW_REDIS, PASSTHROUGH, rps),
        "throughput_gateway_redis_vs_direct": per_repeat(GW_REDIS, DIRECT, rps),
        "cpu_per_turn_gateway_memory_vs_passthrough": per_repeat(GW_MEMORY, PASSTHROUGH, front_cpu),
        "cpu_per_turn_gateway_redis_vs_passthrough": per_repeat(GW_REDIS, PASSTHROUGH, front_cpu),
        "throughput_delegated_memory_vs_gateway_memory": per_repeat(DELEGATED_MEMORY, GW_MEMORY, rps),
        "throughput_delegated_redis_vs_gateway_redis": per_repeat(DELEGATED_REDIS, GW_REDIS, rps),
        "cpu_per_turn_delegated_memory_vs_gateway_memory": per_repeat(DELEGATED_MEMORY, GW_MEMORY, front_cpu),
        "cpu_per_turn_delegated_redis_vs_gateway_redis": per_repeat(DELEGATED_REDIS, GW_REDIS, front_cpu),
    }
    added_per_repeat = {
        "p50_ms": added(GW_MEMORY, PASSTHROUGH, p50),
        "p99_ms": added(GW_MEMORY, PASSTHROUGH, p99),
        "p50_ms_redis": added(GW_REDIS, PASSTHROUGH_AT_REDIS_RATE, p50),
        "p99_ms_redis": added(GW_REDIS, PASSTHROUGH_AT_REDIS_RATE, p99),
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
        "ratios": {key: median(values) for key, values in ratios_per_repeat.items()},
        "ratios_per_repeat": ratios_per_repeat,
        "half_load": {
            "rate_rps": rate,
            "fronts": summarize_fronts(half_rounds),
            "rounds": half_rounds,
            "added_p50_ms": median(added_per_repeat["p50_ms"]),
            "added_p99_ms": median(added_per_repeat["p99_ms"]),
            "rate_rps_redis": rate_redis,
            "added_p50_ms_redis": median(added_per_repeat["p50_ms_redis"]),
            "added_p99_ms_redis": median(added_per_repeat["p99_ms_redis"]),
            "added_per_repeat": added_per_repeat,
        },
        "redis": redis_result,
        "memory": memory,
        "delegation": {
            "users": settings.delegated_users,
            "scopes_requested": list(SCOPES),
            "flows": bench.flows,
        },
        "instructions": counted,
        "adapters": adapter_costs,
    }
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
    try:
        result = run(settings_from(args), args.redis_url)
    except ChildFailed as failure:
        print(f"bench throughput: {failure}", file=sys.stderr)
        return 1
    out = write_result(result, args.out, "throughput", result["started_at"])
    print(render_table(result))
    print(f"\nresult: {out}")
    return 0
