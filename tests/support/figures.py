"""Figures a reliability test measured, for docs/reliability.md (``python -m tests.reliability_report``).

A fault, load, attack or failover test calls :func:`record_figure` with what it measured::

    record_figure("redis_failover", recovery_s=1.8, bound_s=15, turns=420, lost=0, bot_calls_twice=0)

When ``PACT_RELIABILITY_FIGURES`` names a file (the report command sets it), one JSON line is
appended to it: ``{"test": "<node id>", "figure": "<name>", "values": {...}}``, the node id taken
from ``PYTEST_CURRENT_TEST``. Otherwise (an ordinary test run) nothing is written. Values are
numbers, strings or booleans; the report prints them as the test gave them, so name each value
with its unit (``recovery_s``, ``requests``). A test may record several figures, and the same
figure once per parameter (backend, fault) it runs with.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["FIGURES_ENV", "Figure", "read_figures", "record_figure"]

FIGURES_ENV = "PACT_RELIABILITY_FIGURES"

Value = int | float | str | bool
Figure = dict[str, object]


def record_figure(name: str, **values: Value) -> None:
    """Append the figure ``name`` with ``values`` to the report's file, if a report is being made."""
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    line = json.dumps({"test": test, "figure": name, "values": values}, sort_keys=True)
    with Path(path).open("a", encoding="utf-8") as figures:
        figures.write(line + "\n")


def read_figures(path: Path) -> list[Figure]:
    """Every figure recorded in ``path`` (none if no test wrote one)."""
    if not path.exists():
        return []
    figures: list[Figure] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            figure = json.loads(line)
            if isinstance(figure, dict):
                figures.append(figure)
    return figures
