"""What ``/metrics`` serves besides the gateway's own metrics: ``process_*`` of every process, and no
``_created`` duplicates.

``process_*`` (memory, CPU, open files): one process serves its own as any Prometheus client does
(:func:`serve_process_metrics`). Under ``--workers`` prometheus-client's multiprocess mode has no
process collector (its values live in files, and a file cannot say how much memory a process uses
now), so the supervisor reads ``/proc`` of itself and of each live worker at scrape time
(:class:`ProcessGroup`): always current, nothing for a worker to keep up to date, and a dead
worker's series simply stop. They are labelled ``process`` (``supervisor``, ``worker-0`` …: stable
across restarts, for dashboards) and ``pid`` (to find the process in the logs, whose lines carry it).

``_created``: prometheus-client adds a ``_created`` timestamp to every counter, histogram and
summary child, which the text format prints as a gauge family of its own beside each one: twice
the series for nothing an alert uses. :class:`WithoutCreated` leaves them out of the scrape, so
nothing process-wide (the library's switch, an environment variable read on import) is changed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = ["ProcessGroup", "WithoutCreated", "serve_process_metrics"]

_WITH_CREATED = frozenset(("counter", "histogram", "summary"))


class WithoutCreated(Collector):
    """``source``'s families without their ``_created`` samples."""

    def __init__(self, source: Collector) -> None:
        self._source = source

    def collect(self) -> Iterable[Metric]:
        for family in self._source.collect():
            if family.type not in _WITH_CREATED:
                yield family
                continue
            created = f"{family.name}_created"
            kept = Metric(family.name, family.documentation, family.type, family.unit)
            kept.samples = [sample for sample in family.samples if sample.name != created]
            yield kept


def serve_process_metrics(registry: CollectorRegistry) -> None:
    """Add this process's ``process_*`` series, unlabelled, to the ``registry`` one process serves."""
    ProcessCollector(registry=registry)


def _of(pid: int, proc: str) -> ProcessCollector:
    return ProcessCollector(pid=lambda: pid, proc=proc, registry=None)


class ProcessGroup(Collector):
    """``process_*`` of each ``(name, pid)`` that ``processes()`` lists now, labelled ``process`` and ``pid``.

    A process that exits between the listing and the read just has no series in that scrape.
    """

    def __init__(self, processes: Callable[[], Iterable[tuple[str, int]]], proc: str = "/proc") -> None:
        self._processes = processes
        self._proc = proc

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for name, pid in self._processes():
            for family in _of(pid, self._proc).collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(family.name, family.documentation, family.type)
                for sample in family.samples:
                    labels = {**sample.labels, "process": name, "pid": str(pid)}
                    merged.add_sample(sample.name, labels, sample.value)
        return families.values()
