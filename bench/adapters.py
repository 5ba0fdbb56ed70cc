"""``python -m bench adapters``: each bot adapter's cost per turn beside the ``pact`` adapter's (issue 13).

One gateway process per ``upstream.adapter`` on the memory store, each in front of a fake of its
bot's API on loopback (``tests.support.fake_bots``, each its own process; ``pact`` in front of the
sample bot), configured as docs/adapters.md says. Closed-loop rounds first (each front's peak),
then open-loop rounds at one rate for all (half the slowest peak: at one rate the CPU ratio is the
adapter's own, not its bot's speed), then instructions per turn under callgrind (full run). Target:
at most 1.10 × ``pact``'s for every adapter but ``directline``, reported and exempt (a turn is two
calls and polling). ``python -m bench throughput`` includes it under ``adapters``.
"""

from __future__ import annotations

import datetime as dt
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench import instructions
from bench.figures import fmt, front_cpu, paired, ratio_of, summarize_fronts, target, target_line
from bench.harness import MEMORY_BOUND_NOTE, Bench, Front, Settings, mode_main, mode_parser, progress
from bench.procs import Child, Children
from gateway.config import ADAPTERS, AdapterName

BASELINE: AdapterName = "pact"
LIMIT = 1.10
"""An adapter may add at most 10 % to the gateway's CPU per turn (issue 13)."""
EXEMPT: dict[AdapterName, str] = {
    "directline": "exempt: Direct Line's polling (each turn posts the activity, then reads the "
    "activities back; a conversation's first turn also opens a Direct Line conversation)"
}
FAKES = "tests.support.fake_bots"
_LISTEN_TIMEOUT = 20.0
_SYSTEM_PROMPT = "You are Acme's order assistant. Answer in one or two short sentences."


def credential_variable(adapter: AdapterName) -> str:
    """The environment variable the gateway's YAML names for the fake's key (only ever ``${NAME}``)."""
    return f"PACT_BENCH_{adapter.upper()}_CREDENTIAL"


HTTP_MAPPING: dict[str, Any] = {
    "method": "PUT",
    "body": {
        "session": "{{conversation_id}}",
        "first": "{{new_conversation}}",
        "input": {"id": "{{message_id}}", "text": "{{text}}"},
        "note": "turn {{message_id}} from {{pa_issuer}}",
        "account": {"user": "{{delegation_user}}", "scopes": "{{delegation_scopes}}"},
    },
    "reply": {
        "texts": "result.messages[].body",
        "end": "result.closed",
        "requires_scopes": "auth.needs",
        "actions": "auth.calls",
        "scopes_used": "auth.used",
    },
}
"""README "Home-grown HTTP bots", as written there: a nested body and every reply path."""


def upstream_block(adapter: AdapterName, url: str) -> dict[str, Any]:
    """The Brand's ``upstream`` for ``adapter`` with its bot at ``url``: the README's settings, defaults
    wherever the README leaves them out; a fake's key only ever named (``${NAME}``)."""
    key = f"${{{credential_variable(adapter)}}}"
    settings: dict[AdapterName, dict[str, Any]] = {
        "pact": {},
        "rasa": {},
        "http": HTTP_MAPPING,
        "openai": {"model": "bench-model", "api_key": key, "system_prompt": _SYSTEM_PROMPT}
        | {"max_tokens": 512, "temperature": 0.2},
        "directline": {"secret": key},
    }
    if adapter == "pact":
        return {"url": url}
    return {"adapter": adapter, "url": url} | ({adapter: settings[adapter]} if settings[adapter] else {})


@dataclass(frozen=True)
class Bot:
    """One adapter's bot: its process and the Brand's ``upstream`` block that reaches it."""

    process: Child
    upstream: dict[str, Any]


def start_bots(bench: Bench) -> dict[AdapterName, Bot]:
    """Every adapter's bot, listening: the run's sample bot for ``pact``, a fake process for the others.

    A fake's credential goes into the environment of every child started afterwards, under the
    name its adapter's ``upstream`` block gives it.
    """
    if bench.bot is None:
        sample, port = bench.start_bot()
        sample.wait_port(port)
    assert bench.bot is not None
    bots = {BASELINE: Bot(bench.bot, upstream_block(BASELINE, bench.bot_url))}
    fakes = {
        adapter: bench.children.python(f"fake-{adapter}", "-m", FAKES, adapter)
        for adapter in ADAPTERS
        if adapter != BASELINE
    }
    for adapter, fake in fakes.items():
        said = fake.said('{"url"', _LISTEN_TIMEOUT)  # tests.support.fake_bots: once it listens
        url, credential = str(said["url"]), said["credential"]
        if credential is not None:
            bench.children.env[credential_variable(adapter)] = credential
        bots[adapter] = Bot(fake, upstream_block(adapter, url))
    return bots


def measure(bench: Bench) -> dict[str, Any]:
    """Each adapter's cost per turn beside ``pact``'s, in ``bench``'s mode; stops what it started."""
    started: list[Child] = []
    try:
        bots = start_bots(bench)
        started += [bot.process for adapter, bot in bots.items() if adapter != BASELINE]
        fronts: dict[AdapterName, Front] = {}
        for adapter, bot in bots.items():
            front = bench.start(f"gateway-{adapter}", bench.gateway_front("memory://", bot.upstream))
            started += [front.process] if front.process is not None else []
            fronts[adapter] = replace(front, name=adapter, bot=bot.process)
        bench.fronts |= {front.name: front.listening() for front in fronts.values()}
        rounds = bench.peak_rounds(list(fronts))
        # In closed loop each gateway runs as fast as its bot lets it, and a gateway serving fewer
        # turns per event-loop pass pays more per turn: its CPU per turn would carry its bot's speed.
        # At one rate every gateway serves the same load, so the ratio is the adapter's own.
        rate = max(
            min(float(front["throughput_rps"]) for front in summarize_fronts(rounds).values()) / 2, 1.0
        )
        paced = bench.half_load([(adapter, adapter, rate) for adapter in fronts])
        argvs = [(adapter, bench.gateway_front("memory://", bot.upstream)) for adapter, bot in bots.items()]
        counted = instructions.count(bench, argvs)
    finally:
        for child in reversed(started):
            bench.children.stop(child)
        for adapter in ADAPTERS:
            bench.fronts.pop(adapter, None)
    others = [adapter for adapter in ADAPTERS if adapter != BASELINE]
    cpu_per_repeat = {adapter: paired(paced, adapter, BASELINE, ratio_of(front_cpu)) for adapter in others}
    cpu = {
        adapter: statistics.median(values) if values else None for adapter, values in cpu_per_repeat.items()
    }
    if counted["available"]:
        per_turn = instructions.per_turn(counted)
        counted["vs_pact"] = {adapter: per_turn[adapter] / per_turn[BASELINE] for adapter in others}
    return {
        "baseline": BASELINE,
        "limit": LIMIT,
        "exempt": dict(EXEMPT),
        "upstream": {adapter: bot.upstream for adapter, bot in bots.items()},
        "fronts": summarize_fronts(rounds),
        "rounds": rounds,
        "paced": {"rate_rps": rate, "fronts": summarize_fronts(paced), "rounds": paced},
        "cpu_per_turn_vs_pact": cpu,
        "cpu_per_turn_vs_pact_per_repeat": cpu_per_repeat,
        "instructions": counted,
        "targets": _targets(others, cpu, cpu_per_repeat, counted),
    }


def _targets(
    adapters: Sequence[AdapterName],
    cpu: dict[AdapterName, Any],
    per_repeat: dict[AdapterName, Any],
    counted: Any,
) -> list[dict[str, Any]]:
    """Two per adapter not exempt: CPU per turn (per-repeat verdict) and instructions per turn ÷ pact's."""
    goal, count = f"<= {LIMIT:.2f}", counted.get("vs_pact", {})
    note = "" if counted["available"] else counted["note"]
    return [
        t
        for a in adapters
        if a not in EXEMPT
        for t in (
            target(f"CPU per turn adapter {a} / pact", goal, cpu[a], per_repeat[a]),
            target(f"instructions per turn adapter {a} / pact", goal, count.get(a), note=note),
        )
    ]


def render(result: dict[str, Any]) -> list[str]:
    """The adapters' lines of the table: per adapter, its figures and their ratios to ``pact``'s."""
    counted = result["instructions"]
    counts = instructions.per_turn(counted) if counted["available"] else {}
    paced = result["paced"]
    at_rate = f"at {paced['rate_rps']:.0f}/s"
    lines = [
        "bot adapters, each against its fake on loopback (gateway on the memory store)",
        f"{'adapter':<12}{'peak/s':>8}{'errors':>7}{'CPU ms/turn: peak':>19}{at_rate:>10}{'/ pact':>8}"
        f"{'instructions/turn':>19}{'/ pact':>8}",
    ]
    for adapter, front in result["fronts"].items():
        steady = paced["fronts"][adapter]
        baseline = adapter == BASELINE
        cpu_ratio = 1.0 if baseline else result["cpu_per_turn_vs_pact"][adapter]
        count = f"{counts[adapter]:>19,.0f}" if adapter in counts else f"{'-':>19}"
        count_ratio = counted.get("vs_pact", {}).get(adapter, 1.0 if baseline and counts else None)
        exempt = result["exempt"].get(adapter, "")
        lines.append(
            f"{adapter:<12}{front['throughput_rps']:>8.0f}{front['errors'] + steady['errors']:>7}"
            f"{front['cpu_s_per_1000_turns']['front']:>19.3f}{steady['cpu_s_per_1000_turns']['front']:>10.3f}"
            f"{fmt(cpu_ratio):>8}{count}{fmt(count_ratio):>8}  {exempt}".rstrip()
        )
    if not counted["available"]:
        lines.append(f"instructions per turn: {counted['note']}")
    lines += [target_line(t) for t in result["targets"]]
    return lines


def run(settings: Settings, redis_url: str) -> dict[str, Any]:
    """The adapters alone, in ``settings``' mode (the throughput front runs :func:`measure` too)."""
    started = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory(prefix="pact-bench-adapters-") as tmp, Children(Path(tmp)) as children:
        progress(f"bot adapters, each against its fake (logs in {tmp}); {MEMORY_BOUND_NOTE}")
        adapters = measure(Bench(settings, children, Path(tmp), redis_url))
    return {"started_at": started, "settings": asdict(settings), "adapters": adapters}


def main(argv: Sequence[str] | None = None) -> int:
    return mode_main("adapters", mode_parser("adapters", __doc__), argv, run, _table)


def _table(result: dict[str, Any]) -> str:
    return "\n".join(
        [f"{result['settings']['mode']} run, {result['started_at']}", *render(result["adapters"])]
    )
