"""How the benchmark turns rounds into figures and figures into verdicts against their targets.

Pure functions over the fronts' result dictionaries: medians and spreads of repeats, same-repeat
ratios, a target with its verdict, the line that prints it. It imports no bench module.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

Combine = Callable[[dict[str, Any], dict[str, Any]], float | None]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def valid(result: dict[str, Any]) -> bool:
    """Whether a round counts: every answer 2xx. A round with a 429 (a bound, a limit) measured that
    refusal, not the front, so it is void: printed as such, never part of a figure or a ratio."""
    return int(result.get("errors", 0)) == 0


def summarize_fronts(rounds: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per front, the median over its valid repeats of each figure (and the spread of throughput);
    a front with no valid repeat is summarised from all of them and marked ``void``."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r["front"] for r in rounds):
        every = [r for r in rounds if r["front"] == name]
        mine = [r for r in every if valid(r)] or every
        throughputs = [float(r["throughput_rps"]) for r in mine]
        per_1000 = {
            party: median([float(r["cpu_s_per_1000_turns"][party]) for r in mine])
            for party in mine[0]["cpu_s_per_1000_turns"]
        }
        entry: dict[str, Any] = {
            "throughput_rps": median(throughputs),
            "throughput_min_rps": min(throughputs),
            "throughput_max_rps": max(throughputs),
            "latency_ms": {
                q: median([float(r["latency_ms"][q]) for r in mine]) for q in ("p50", "p90", "p99")
            },
            "errors": sum(int(r["errors"]) for r in every),
            "void_rounds": sum(1 for r in every if not valid(r)),
            "void": not any(valid(r) for r in every),
            "turns": sum(int(r["turns_total"]) for r in mine),
            "cpu_s_per_1000_turns": per_1000,
            "machine_busy": median([float(r["machine_busy"]) for r in mine]),
            "other_cpu_share": median([float(r["other_cpu_share"]) for r in mine]),
        }
        out[name] = entry
    return out


def paired(rounds: Sequence[dict[str, Any]], top: str, bottom: str, combine: Combine) -> list[float]:
    """``combine(top's round, bottom's round)`` for every repeat that has both, in repeat order.

    Each pair comes from one repeat, so both rounds share that repeat's drift; ``combine``
    returns ``None`` for a pair it cannot combine (a ratio over zero), which is left out. A round
    with any answer that was not 2xx is void (:func:`valid`): no pair is made of it.
    """
    values = []
    for repeat in sorted({int(r["repeat"]) for r in rounds}):
        a = [r for r in rounds if r["repeat"] == repeat and r["front"] == top and valid(r)]
        b = [r for r in rounds if r["repeat"] == repeat and r["front"] == bottom and valid(r)]
        if a and b and (value := combine(a[0], b[0])) is not None:
            values.append(value)
    return values


def ratio_of(value: Callable[[dict[str, Any]], float]) -> Combine:
    return lambda a, b: value(a) / value(b) if value(b) > 0 else None


def difference_of(value: Callable[[dict[str, Any]], float]) -> Combine:
    return lambda a, b: value(a) - value(b)


Figure = Callable[[dict[str, Any]], float]
rps: Figure = lambda r: float(r["throughput_rps"])  # noqa: E731 - the figures a ratio is taken of
front_cpu: Figure = lambda r: float(r["cpu_s_per_1000_turns"].get("front", 0.0))  # noqa: E731
p50: Figure = lambda r: float(r["latency_ms"]["p50"])  # noqa: E731
p99: Figure = lambda r: float(r["latency_ms"]["p99"])  # noqa: E731


def spread(values: Sequence[float | None]) -> dict[str, float] | None:
    """Median, min and max over the repeats; ``None`` when a figure does not apply to the front."""
    present = [v for v in values if v is not None]
    return {"median": median(present), "min": min(present), "max": max(present)} if present else None


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
    return MET if meeting == len(per_repeat) else MISSED if meeting == 0 else WITHIN_NOISE


def target(
    name: str,
    goal: str,
    measured: float | None,
    per_repeat: Sequence[float] = (),
    note: str = "",
    passes: Callable[[float], bool] | None = None,
) -> dict[str, Any]:
    """One target: ``passed`` judges the median; ``verdict`` weighs the repeats as well.

    ``goal`` is written ``">= 0.8"`` or ``"<= 1.5"``, and is what ``passes`` tests unless given.
    """
    if passes is None:
        sign, bound = goal.split()
        passes = at_least(float(bound)) if sign == ">=" else at_most(float(bound))
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


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def target_line(t: dict[str, Any]) -> str:
    """One target as the table shows it: its mark, figure, goal, repeats' spread and verdict."""
    mark = "PASS" if t["passed"] else "FAIL"
    spread = ""
    if len(t["per_repeat"]) > 1:
        spread = f", repeats {min(t['per_repeat']):.2f} to {max(t['per_repeat']):.2f}"
    return (
        f"  [{mark}] {t['name']}: {fmt(t['measured'])} (target {t['target']}{spread}: "
        f"{t['verdict']}) {t['note']}".rstrip()
    )
