"""The benchmark's target verdicts: a time-based figure is "met" or "missed" only when its repeats agree.

Pure functions of the figures, so they are checked here without running anything.
"""

from __future__ import annotations

import pytest

from bench.figures import (
    MET,
    MISSED,
    NOT_MEASURED,
    WITHIN_NOISE,
    at_least,
    at_most,
    paired,
    ratio_of,
    rps,
    summarize_fronts,
    target,
    verdict,
)


@pytest.mark.parametrize(
    ("measured", "per_repeat", "expected"),
    [
        (0.85, [0.82, 0.85, 0.91, 0.88], MET),
        (0.75, [0.71, 0.75, 0.78, 0.74], MISSED),
        (0.83, [0.79, 0.83, 0.98, 0.84], WITHIN_NOISE),  # the median passes, one repeat does not
        (0.78, [0.79, 0.78, 0.81, 0.70], WITHIN_NOISE),  # the median fails, two repeats pass
        (0.85, [], MET),  # a figure without repeats (JWT cost, memory): the figure decides
        (0.85, [0.85], MET),
        (0.75, [], MISSED),
        (None, [], NOT_MEASURED),
    ],
)
def test_verdict_weighs_every_repeat(measured: float | None, per_repeat: list[float], expected: str) -> None:
    assert verdict(at_least(0.80), measured, per_repeat) == expected


def test_a_bound_is_met_on_the_line() -> None:
    assert at_least(0.80)(0.80)
    assert at_most(1.5)(1.5)
    assert not at_least(0.80)(0.7999)
    assert not at_most(1.5)(1.5001)
    # A target's goal, as written, is its test.
    assert target("ratio", ">= 0.8", 0.8)["passed"]
    assert not target("ratio", ">= 0.8", 0.7999)["passed"]
    assert not target("CPU", "<= 1.5", 1.5001)["passed"]


def test_target_records_the_median_verdict_beside_the_repeats() -> None:
    t = target("CPU per turn", "<= 1.5", 1.45, [1.2, 1.45, 1.55], note="n")
    assert t == {
        "name": "CPU per turn",
        "target": "<= 1.5",
        "measured": 1.45,
        "passed": True,
        "per_repeat": [1.2, 1.45, 1.55],
        "verdict": WITHIN_NOISE,
        "note": "n",
    }
    unmeasured = target("workers", ">= 1.25", None, note="not available")
    assert not unmeasured["passed"]
    assert unmeasured["verdict"] == NOT_MEASURED


def _round(front: str, repeat: int, throughput: float, errors: int) -> dict[str, object]:
    return {
        "front": front,
        "repeat": repeat,
        "throughput_rps": throughput,
        "latency_ms": {"p50": 1.0, "p90": 2.0, "p99": 3.0},
        "errors": errors,
        "turns_total": 100,
        "cpu_s_per_1000_turns": {"front": 1.0},
        "machine_busy": 0.5,
        "other_cpu_share": 0.1,
    }


def test_a_round_with_a_non_2xx_answer_is_void_never_part_of_a_ratio_or_a_median() -> None:
    """Issue 29 item 4: a round that met a 429 measured the refusal, not the front."""
    rounds = [
        _round("gateway", 0, 900.0, 0),
        _round("bot", 0, 1000.0, 0),
        _round("gateway", 1, 5000.0, 12),  # fast because it refused
        _round("bot", 1, 1000.0, 0),
    ]
    assert paired(rounds, "gateway", "bot", ratio_of(rps)) == [0.9]
    summary = summarize_fronts(rounds)["gateway"]
    assert (summary["throughput_rps"], summary["void_rounds"], summary["void"]) == (900.0, 1, False)
    assert summary["errors"] == 12
