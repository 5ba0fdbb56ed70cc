"""Write the metrics table of docs/operations.md from the metrics the gateway registers.

One source: the table lists what ``/metrics`` exports because it is read from the very objects
that export it. The gateway's :class:`gateway.ops.metrics.Metrics` and the admin API's
:class:`gateway.process.admin.AdminMetrics` are made on one fresh registry, as ``create_app``
makes them, and every metric registered there becomes a row: its name as scraped, its type, its
labels and its help text. Rows are sorted by name, so the table does not depend on the order the
code declares them in.

    python scripts/gen_metrics_reference.py            # rewrite the table between the markers
    python scripts/gen_metrics_reference.py --check    # exit 1 when it is out of date (CI, tests)

Everything outside the two markers is kept as it is. Exit status: 0 up to date (or written),
1 out of date, 2 the page has not exactly one pair of markers, or a usage error.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a file, the gateway package sits beside this folder
    sys.path.insert(0, str(REPO_ROOT))

import generated  # noqa: E402 - scripts/generated.py, beside this file
from prometheus_client import CollectorRegistry  # noqa: E402
from prometheus_client.metrics import MetricWrapperBase  # noqa: E402

from gateway.ops.metrics import Metrics  # noqa: E402 - needs the path set above
from gateway.process.admin import AdminMetrics  # noqa: E402

PAGE = REPO_ROOT / "docs" / "operations.md"

BEGIN = (
    "<!-- Generated below from gateway.ops.metrics by scripts/gen_metrics_reference.py; "
    "do not edit by hand. -->"
)
END = "<!-- End of the generated metrics table. -->"

_SUFFIX = {"counter": "_total"}
"""What the exposition adds to a metric's name: a counter ``pact_x`` is scraped as ``pact_x_total``."""


class Row(NamedTuple):
    """One metric as the table shows it."""

    name: str
    kind: str
    labels: tuple[str, ...]
    meaning: str


def registered() -> CollectorRegistry:
    """A registry holding every metric the gateway and its admin API register, and nothing else."""
    registry = CollectorRegistry()
    Metrics(registry)
    AdminMetrics(registry)
    return registry


def rows(registry: CollectorRegistry) -> Iterator[Row]:
    """Each metric of ``registry``, sorted by the name it is scraped under."""
    found: list[Row] = []
    # prometheus-client has no public list of a registry's collectors or of a metric's label
    # names; both are plain attributes of the objects that export them.
    for collector in registry._collector_to_names:
        if not isinstance(collector, MetricWrapperBase):
            continue
        for family in collector.describe():
            name = family.name + _SUFFIX.get(family.type, "")
            found.append(Row(name, family.type, tuple(collector._labelnames), family.documentation))
    yield from sorted(found)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table() -> str:
    """The markers and the table between them."""
    lines = [BEGIN, "", "| Metric | Type | Labels | Meaning |", "| - | - | - | - |"]
    for row in rows(registered()):
        labels = ", ".join(f"`{label}`" for label in row.labels) or "—"
        lines.append(f"| `{row.name}` | {row.kind} | {labels} | {_cell(row.meaning)} |")
    return "\n".join([*lines, "", END])


def render(current: str) -> str:
    """``current`` with the text between the markers replaced (both markers kept)."""
    if current.count(BEGIN) != 1 or current.count(END) != 1 or current.index(BEGIN) > current.index(END):
        raise ValueError(f"expected one {BEGIN!r} line, then one {END!r} line")
    head, rest = current.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    return f"{head}{render_table()}{tail}"


def main(argv: list[str] | None = None) -> int:
    return generated.main(
        argv,
        description=__doc__.splitlines()[0],
        default=PAGE,
        render=render,
        script="scripts/gen_metrics_reference.py",
        unreadable="cannot place the metrics table",
        source="the metrics of gateway.ops.metrics and gateway.process.admin",
    )


if __name__ == "__main__":
    sys.exit(main())
