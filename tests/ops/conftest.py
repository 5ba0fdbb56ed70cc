"""Operations test helpers: a real ops listener beside a test gateway, Prometheus text parsing,
captured JSON logs, and ``pact-gateway serve`` run as a real subprocess (always killed at the end).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from gateway.config import CacheConfig, LoggingConfig
from gateway.ops.logs import AIOHTTP_ACCESS, GatewayLogHandler, configure_logging
from gateway.ops.metrics import Metrics
from gateway.process.health import GatewayReadiness, create_ops_app
from gateway.store.redis import RedisStore
from tests.support.gateway import Harness, MakeGateway

ROOT = Path(__file__).resolve().parents[2]


def sample(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called ``name`` whose labels include ``labels`` (0 when none)."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for point in family.samples:
            if point.name == name and all(point.labels.get(k) == v for k, v in labels.items()):
                total += point.value
    return total


OpsFor = Callable[[Harness, Metrics], Awaitable[TestClient[Any, Any]]]


@pytest.fixture
async def ops_for() -> AsyncIterator[OpsFor]:
    """``await ops_for(harness, metrics)``: the real ops listener for that gateway, on loopback."""
    clients: list[TestClient[Any, Any]] = []

    async def start(harness: Harness, metrics: Metrics) -> TestClient[Any, Any]:
        app = create_ops_app(metrics.registry, GatewayReadiness(harness.client.app))
        client: TestClient[Any, Any] = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        clients.append(client)
        return client

    yield start
    for client in clients:
        await client.close()


async def scrape(ops: TestClient[Any, Any]) -> str:
    response = await ops.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    return await response.text()


@dataclass
class CapturedLogs:
    stream: io.StringIO

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def records(self) -> list[dict[str, Any]]:
        """Every line, parsed: a line that is not one JSON object fails the test."""
        return [json.loads(line) for line in self.text.splitlines() if line.strip()]

    def access(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r["logger"] == "pact_gateway.access"]


@contextlib.contextmanager
def _captured(config: LoggingConfig) -> Iterator[CapturedLogs]:
    root = logging.getLogger()
    aiohttp_access = logging.getLogger(AIOHTTP_ACCESS)
    levels = root.level, aiohttp_access.level
    stream = io.StringIO()
    configure_logging(config, stream)
    try:
        yield CapturedLogs(stream)
    finally:
        for handler in [h for h in root.handlers if isinstance(h, GatewayLogHandler)]:
            root.removeHandler(handler)
        root.setLevel(levels[0])
        aiohttp_access.setLevel(levels[1])


@pytest.fixture
def json_logs() -> Iterator[CapturedLogs]:
    """The gateway's own logging set-up (JSON lines at INFO), writing to a buffer."""
    with _captured(LoggingConfig(level="INFO", format="json")) as logs:
        yield logs


Metered = Callable[..., Awaitable[tuple[Harness, TestClient[Any, Any]]]]


@pytest.fixture
def metered(make_gateway: MakeGateway, ops_for: OpsFor) -> Metered:
    """``await metered(...)``: ``make_gateway(...)`` with a registry of its own, and its ops listener."""

    async def start(*args: Any, **kwargs: Any) -> tuple[Harness, TestClient[Any, Any]]:
        metrics = Metrics()
        harness = await make_gateway(*args, metrics=metrics, **kwargs)
        return harness, await ops_for(harness, metrics)

    return start


@pytest.fixture
async def unreachable_store() -> AsyncIterator[RedisStore]:
    """A Redis store pointed at a loopback port nothing listens on."""
    store = RedisStore(CacheConfig(url=f"redis://127.0.0.1:{free_port()}/0"))
    yield store
    await store.close()


@pytest.fixture
def text_logs() -> Iterator[CapturedLogs]:
    with _captured(LoggingConfig(level="INFO", format="text")) as logs:
        yield logs


def free_port() -> int:
    """A loopback TCP port free right now (the subprocess binds it a moment later)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def until(condition: Callable[[], Awaitable[bool]], limit: float = 20.0, what: str = "") -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not await condition():
        assert loop.time() < deadline, f"not reached within {limit} s: {what}"
        await asyncio.sleep(0.05)


@dataclass
class ServeProcess:
    """``python -m gateway serve`` in its own process group, logging JSON to a file."""

    config_file: Path
    log_file: Path
    raw: dict[str, Any]
    process: asyncio.subprocess.Process | None = None
    tmpdir: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.raw['listen']['port']}"

    @property
    def ops_url(self) -> str:
        return f"http://127.0.0.1:{self.raw['metrics']['port']}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.raw['admin']['port']}"

    def write_config(self, raw: dict[str, Any]) -> None:
        self.raw = raw
        self.config_file.write_text(yaml.safe_dump(raw), encoding="utf-8")

    def logs(self) -> list[dict[str, Any]]:
        lines = self.log_file.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    async def start(self, *extra: str) -> ServeProcess:
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        if self.tmpdir is not None:
            env["TMPDIR"] = str(self.tmpdir)
        with self.log_file.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gateway",
                "serve",
                "--config",
                str(self.config_file),
                *extra,
                cwd=ROOT,
                env=env,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,  # its own process group: teardown kills workers too
            )
        return self

    def send(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    async def wait(self, limit: float = 30.0) -> int:
        assert self.process is not None
        return await asyncio.wait_for(self.process.wait(), limit)

    async def ready(self, limit: float = 30.0) -> None:
        """Poll ``/readyz`` until 200 (the process may still be importing, binding, fetching keys)."""
        async with aiohttp.ClientSession() as session:

            async def is_ready() -> bool:
                assert self.process is not None
                assert self.process.returncode is None, self.log_file.read_text()
                try:
                    async with session.get(f"{self.ops_url}/readyz") as response:
                        return response.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            await until(is_ready, limit, "readyz 200")

    def kill(self) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)


@dataclass
class Processes:
    tmp_path: Path
    started: list[ServeProcess] = field(default_factory=list)

    def new(self, raw: dict[str, Any], name: str = "gw") -> ServeProcess:
        """A process for ``raw`` with fresh loopback ports for its listeners (the admin API's on its
        default host, loopback)."""
        raw = {
            **raw,
            "listen": {"host": "127.0.0.1", "port": free_port()},
            "metrics": {"enabled": True, "host": "127.0.0.1", "port": free_port()},
            "admin": {**raw.get("admin", {}), "port": free_port()},
        }
        tmpdir = self.tmp_path / f"{name}-tmp"
        tmpdir.mkdir()
        served = ServeProcess(
            self.tmp_path / f"{name}.yaml", self.tmp_path / f"{name}.log", raw, tmpdir=tmpdir
        )
        served.write_config(raw)
        self.started.append(served)
        return served


@pytest.fixture
async def processes(tmp_path: Path) -> AsyncIterator[Processes]:
    """Makes :class:`ServeProcess` es; every one still running at the end is killed with its group."""
    made = Processes(tmp_path)
    yield made
    for served in made.started:
        served.kill()
        if served.process is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(served.process.wait(), 10)
