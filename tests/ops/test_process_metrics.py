"""``/metrics`` serves ``process_*`` (memory, CPU, open files): unlabelled for one process, per process
with ``process`` and ``pid`` labels under ``--workers``; and never the ``_created`` duplicates.

The ``--workers`` cases run a real supervisor and two workers (as tests/ops/test_serve.py does).
"""

from __future__ import annotations

import os
import re
import signal
from typing import Any

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.ops.exposition import ProcessGroup, WithoutCreated
from tests.ops.conftest import Metered, Processes, ServeProcess, sample, scrape, until
from tests.ops.test_serve import status_of
from tests.support.bot import ControlledBot
from tests.support.gateway import base_config
from tests.support.pa import FakeJwksServer

PROCESS_SERIES = (
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_cpu_seconds_total",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
)


@pytest.fixture
def raw(pa_issuer: str, jwks_server: FakeJwksServer, bot: ControlledBot) -> dict[str, Any]:
    return base_config(pa_issuer, jwks_server.jwks_uri, bot.url, "memory://")


async def metrics_text(served: ServeProcess) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{served.ops_url}/metrics") as response:
        assert response.status == 200
        return await response.text()


def points(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(point.labels), point.value)
        for family in text_string_to_metric_families(text)
        for point in family.samples
        if point.name == name
    ]


def serving(served: ServeProcess) -> list[tuple[str, int]]:
    """``(worker-N, pid)`` of each "worker N serving (pid P)" line, in the order they were logged."""
    found = []
    for record in served.logs():
        match = re.fullmatch(r"worker (\d+) serving \(pid (\d+)\)", record["message"])
        if match is not None:
            found.append((f"worker-{match[1]}", int(match[2])))
    return found


def test_created_samples_are_left_out_and_nothing_else() -> None:
    registry = CollectorRegistry()
    Counter("turns", "Turns.", ["brand"], registry=registry).labels("acme").inc()
    Histogram("latency_seconds", "Latency.", registry=registry).observe(0.2)
    Gauge("queue_created", "A gauge whose own name ends like that.", registry=registry).set(3)
    assert b"turns_created" in generate_latest(registry)
    text = generate_latest(WithoutCreated(registry)).decode()
    assert "turns_created" not in text
    assert "latency_seconds_created" not in text
    assert 'turns_total{brand="acme"} 1.0' in text
    assert "latency_seconds_count 1.0" in text
    assert "queue_created 3.0" in text


def test_process_group_labels_each_process() -> None:
    """Read from /proc: this test's own process twice, under two names, and one that is gone."""
    listed = [("supervisor", os.getpid()), ("worker-0", os.getpid()), ("worker-1", 2**22 + 1)]
    text = generate_latest(ProcessGroup(lambda: listed)).decode()
    memory = points(text, "process_resident_memory_bytes")
    assert sorted(labels["process"] for labels, _ in memory) == ["supervisor", "worker-0"]
    assert all(labels["pid"] == str(os.getpid()) and value > 0 for labels, value in memory)
    assert len(points(text, "process_open_fds")) == 2
    assert "# TYPE process_cpu_seconds_total counter" in text


async def test_ops_listener_serves_no_created_duplicates(metered: Metered) -> None:
    h, ops = await metered()
    assert (await h.send()).status == 200
    text = await scrape(ops)
    assert sample(text, "pact_requests_total", operation="SendMessage", outcome="ok") == 1
    assert "_created" not in text


async def test_one_process_serves_its_own_process_metrics(processes: Processes, raw: dict[str, Any]) -> None:
    served = await processes.new(raw).start()
    await served.ready()
    assert await status_of(f"{served.base_url}/a2a/acme/.well-known/agent-card.json") == 200
    text = await metrics_text(served)
    for name in PROCESS_SERIES:
        ((labels, value),) = points(text, name)
        assert labels == {}
        assert value > 0, name
    assert "_created" not in text
    assert sample(text, "pact_requests_total", operation="GetAgentCard") == 1
    served.send(signal.SIGTERM)
    assert await served.wait() == 0


async def test_workers_each_serve_their_process_metrics(
    processes: Processes, raw: dict[str, Any], redis_url: str
) -> None:
    raw["cache"] = {"url": redis_url}
    served = await processes.new(raw).start("--workers", "2")
    await served.ready()
    assert served.process is not None
    for _ in range(4):
        assert await status_of(f"{served.base_url}/a2a/acme/.well-known/agent-card.json") == 200
    text = await metrics_text(served)
    workers = serving(served)
    expected = {"supervisor": str(served.process.pid), **{name: str(pid) for name, pid in workers}}
    assert sorted(expected) == ["supervisor", "worker-0", "worker-1"]
    for name in PROCESS_SERIES:
        assert {labels["process"]: labels["pid"] for labels, _ in points(text, name)} == expected, name
    assert all(value > 0 for _, value in points(text, "process_resident_memory_bytes"))
    assert "_created" not in text
    assert sample(text, "pact_requests_total", operation="GetAgentCard") == 4

    # A worker that dies is replaced: its series follow the new process, the dead pid is gone.
    victim_name, victim = workers[0]
    os.kill(victim, signal.SIGKILL)  # a worker this test started (through the supervisor), by its id

    async def replaced() -> bool:
        return len(serving(served)) == 3

    await until(replaced, 20, "a replacement worker")
    await served.ready()
    assert serving(served)[2][0] == victim_name
    memory = points(await metrics_text(served), "process_resident_memory_bytes")
    by_process = {labels["process"]: labels["pid"] for labels, _ in memory}
    assert by_process == {**expected, victim_name: str(serving(served)[2][1])}
    assert str(victim) not in by_process.values()
    served.send(signal.SIGTERM)
    assert await served.wait() == 0
