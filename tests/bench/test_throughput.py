"""``python -m bench throughput`` runs end to end and writes a well-formed result file.

``python -m bench throughput --smoke`` drives every front (the bot direct, the pass-through, the
gateway on memory and on Redis with §3 turns and with §5.5 delegated ones) and every measurement
path (the §5.3 flows that get the delegated users their tokens, peak rounds, half-load rounds,
instructions per turn under callgrind, the adapters)
for a fraction of a second each. Timings are never asserted: CI machines are too noisy for that, and the
benchmark reports figures rather than judging them. What is asserted is that the run worked
(no failed turns, every delegated reply with its receipt, something measured everywhere) and
that the result has the shape docs/performance.md describes. It needs Redis at 127.0.0.1:6379
(database 14, or the one ``PACT_TEST_REDIS_URL`` names) and fails, never skips, without it.
"""

from __future__ import annotations

import json
import math
import shutil
import statistics
from typing import Any

import pytest
import redis

from bench.throughput import SCHEMA
from gateway.config import ADAPTERS
from tests.support.bench import BENCH_REDIS_URL, run_module

FRONTS = {
    "direct",
    "passthrough",
    "gateway-memory",
    "gateway-redis",
    "delegated-memory",
    "delegated-redis",
}
DELEGATED = {"delegated-memory", "delegated-redis"}
SECTIONS = {
    "schema",
    "started_at",
    "finished_at",
    "machine",
    "settings",
    "fronts",
    "rounds",
    "ratios",
    "half_load",
    "delegation",
    "instructions",
    "adapters",
    "targets",
}
TARGET_COUNT = 8
# Differences between two measured latencies may fall below zero on a noisy machine.
SIGNED_KEYS = ("added_",)
DIFFERENCE_FIELDS = ("measured", "per_repeat")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _check_numbers(value: Any, path: str = "result", signed: bool = False) -> None:
    """Every number finite, and non-negative unless it is a difference of two measurements."""
    if isinstance(value, bool):
        return
    if isinstance(value, int | float):
        assert math.isfinite(value), f"{path} is {value}"
        assert signed or value >= 0, f"{path} is negative: {value}"
    elif isinstance(value, dict):
        # For the "added …" targets, the figure and its repeats are differences of latencies too.
        difference = str(value.get("name", "")).startswith("added")
        for key, item in value.items():
            signed_here = str(key).startswith(SIGNED_KEYS) or (difference and key in DIFFERENCE_FIELDS)
            _check_numbers(item, f"{path}.{key}", signed or signed_here)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_numbers(item, f"{path}[{index}]", signed)


def test_an_added_latency_target_may_be_negative_and_nothing_else() -> None:
    added = {"name": "added p50 latency at half peak (ms)", "measured": -0.2, "per_repeat": [-2.9, 0.3]}
    _check_numbers({"targets": [added], "half_load": {"added_per_repeat": {"p50_ms": [-1.0]}}})
    with pytest.raises(AssertionError, match="negative"):
        _check_numbers({"targets": [{**added, "name": "throughput gateway-memory / pass-through"}]})


def _positive(value: Any, what: str) -> None:
    assert isinstance(value, int | float), f"{what} is not a number"
    assert not isinstance(value, bool), f"{what} is a boolean"
    assert value > 0, f"{what} measured nothing: {value}"


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    try:
        redis.Redis.from_url(BENCH_REDIS_URL).ping()
    except (OSError, redis.RedisError) as exc:
        pytest.fail(f"the benchmark needs Redis at {BENCH_REDIS_URL}: {exc}")
    out = tmp_path_factory.mktemp("bench") / "result.json"
    stdout = run_module("bench", "throughput", "--smoke", "--out", str(out), "--redis-url", BENCH_REDIS_URL)
    result = json.loads(out.read_text(), parse_constant=_reject_constant)
    assert isinstance(result, dict)
    return result, stdout


def test_result_has_every_section_and_only_finite_numbers(smoke_run: tuple[dict[str, Any], str]) -> None:
    result, _ = smoke_run
    assert set(result) >= SECTIONS
    assert result["schema"] == SCHEMA
    assert result["settings"]["mode"] == "smoke"
    _check_numbers(result)


def test_every_front_was_driven_without_a_failed_turn(smoke_run: tuple[dict[str, Any], str]) -> None:
    result, _ = smoke_run
    fronts = result["fronts"]
    assert set(fronts) == FRONTS
    for name, front in fronts.items():
        _positive(front["throughput_rps"], f"{name} throughput")
        assert set(front["latency_ms"]) == {"p50", "p90", "p99"}
        assert front["errors"] == 0, f"{name} had failed turns; see the rounds' error_samples"
        cpu = front["cpu_s_per_1000_turns"]
        assert {"bot", "loadgen"} <= set(cpu)
        assert ("front" in cpu) == (name != "direct")
    for round_ in result["rounds"]:
        _positive(round_["turns_total"], f"{round_['front']} round turns")
        # The load generator fails a delegated reply that carries no §5.6 receipt (errors == 0 above).
        assert round_["delegated"] == (round_["front"] in DELEGATED)
    assert len(result["rounds"]) == len(FRONTS) * result["settings"]["repeats"]


def test_delegated_users_got_real_grants(smoke_run: tuple[dict[str, Any], str]) -> None:
    result, _ = smoke_run
    delegation = result["delegation"]
    assert set(delegation["flows"]) == DELEGATED
    for name, flows in delegation["flows"].items():
        assert flows["users"] == delegation["users"] == result["settings"]["delegated_users"], name
        _positive(flows["seconds"], f"{name} §5.3 flows")
        # §5.3: the User ticked every requested scope (the consent page's default).
        assert flows["scopes_granted"] == [" ".join(delegation["scopes_requested"])], name
    for key in (
        "throughput_delegated_memory_vs_gateway_memory",
        "throughput_delegated_redis_vs_gateway_redis",
    ):
        assert len(result["ratios_per_repeat"][key]) == result["settings"]["repeats"], key


def test_ratios_and_half_load_were_measured(smoke_run: tuple[dict[str, Any], str]) -> None:
    result, _ = smoke_run
    for name, value in result["ratios"].items():
        _positive(value, f"ratio {name}")
    half = result["half_load"]
    _positive(half["rate_rps"], "half-load rate")
    _positive(half["rate_rps_redis"], "half-load rate on Redis")
    assert set(half["fronts"]) == {
        "passthrough",
        "gateway-memory",
        "passthrough-at-redis-rate",
        "gateway-redis",
    }
    for key in ("added_p50_ms", "added_p99_ms", "added_p50_ms_redis", "added_p99_ms_redis"):
        assert isinstance(half[key], int | float)


def test_instructions_per_turn_were_counted_for_the_pass_through_and_both_gateways(
    smoke_run: tuple[dict[str, Any], str],
) -> None:
    result, stdout = smoke_run
    counted = result["instructions"]
    if shutil.which("valgrind") is None:
        assert not counted["available"]
        assert "valgrind" in counted["note"]
        return
    assert counted["available"], counted.get("note")
    assert set(counted["fronts"]) == {"passthrough", "gateway-memory", "gateway-redis"}
    for name, front in counted["fronts"].items():
        _positive(front["instructions_per_turn"], f"{name} instructions per turn")
        shorter, longer = front["windows"]
        assert longer["turns"] == 2 * shorter["turns"] == 2 * counted["turns"]
    _positive(counted["gateway_memory_vs_passthrough"], "instructions gateway-memory / pass-through")
    _positive(counted["gateway_redis_vs_passthrough"], "instructions gateway-redis / pass-through")
    assert "instructions per turn (callgrind" in stdout


def test_adapters_were_driven_and_counted_beside_pact(smoke_run: tuple[dict[str, Any], str]) -> None:
    """Issue 13's line: each adapter against its fake, ÷ the pact adapter's (shape in test_adapters.py)."""
    result, stdout = smoke_run
    adapters = result["adapters"]
    assert set(adapters["fronts"]) == set(ADAPTERS)
    assert all(front["errors"] == 0 for front in adapters["fronts"].values())
    counted = adapters["instructions"]
    if shutil.which("valgrind") is None:
        assert not counted["available"]
        return
    assert set(counted["fronts"]) == set(ADAPTERS)
    assert set(counted["vs_pact"]) == set(ADAPTERS) - {"pact"}
    for name, ratio in counted["vs_pact"].items():
        _positive(ratio, f"instructions per turn {name} / pact")
    measured = [t for t in adapters["targets"] if t["name"].startswith("instructions")]
    assert measured
    assert all(t["verdict"] in {"met", "missed"} for t in measured)
    assert "bot adapters" in stdout


def test_targets_are_named_with_a_boolean_verdict(smoke_run: tuple[dict[str, Any], str]) -> None:
    result, stdout = smoke_run
    targets = result["targets"]
    assert len(targets) == TARGET_COUNT
    assert len({t["name"] for t in targets}) == TARGET_COUNT
    for t in targets:
        assert isinstance(t["name"], str)
        assert t["name"]
        assert isinstance(t["target"], str)
        assert t["target"]
        assert isinstance(t["passed"], bool)
        assert t["measured"] is None or isinstance(t["measured"], int | float)
        assert t["verdict"] in {"met", "missed", "within noise", "not measured"}
        # The smoke run has one repeat, so the repeats cannot disagree with the median.
        assert len(t["per_repeat"]) <= 1
        if t["measured"] is not None:
            assert t["verdict"] == ("met" if t["passed"] else "missed")
    unmeasured = [t for t in targets if t["measured"] is None]
    assert all(not t["passed"] and t["note"] and t["verdict"] == "not measured" for t in unmeasured)
    timed = [
        t
        for t in targets
        if t["name"].startswith(("throughput gateway", "throughput delegated", "CPU per turn", "added"))
    ]
    assert len(timed) == 8
    assert all(len(t["per_repeat"]) == 1 for t in timed)
    assert "targets" in stdout
    assert "[PASS]" in stdout or "[FAIL]" in stdout


def test_ratios_are_the_medians_of_their_repeats(smoke_run: tuple[dict[str, Any], str]) -> None:
    result, _ = smoke_run
    assert set(result["ratios_per_repeat"]) == set(result["ratios"])
    for key, values in result["ratios_per_repeat"].items():
        assert values, key
        assert result["ratios"][key] == pytest.approx(statistics.median(values)), key
    half = result["half_load"]
    for key, values in half["added_per_repeat"].items():
        assert half[f"added_{key}"] == pytest.approx(statistics.median(values)), key
