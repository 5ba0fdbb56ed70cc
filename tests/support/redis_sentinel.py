"""A Sentinel-watched primary for the whole test session, for the store suite's ``sentinel`` backend.

Issue 20: every store test runs on memory, Redis, Sentinel and Cluster. The failover tests
(tests/ops/test_redis_failover.py) build and break servers of their own per test; the store suite
only needs the gateway to find its primary through a sentinel, with the replica that
``cache.wait_replicas`` (1 by default under Sentinel) waits for. So one primary, one replica and one
sentinel serve the whole session (started once: a sentinel takes a second or two to see a replica),
on free loopback ports, under the session's tmp dir, with no snapshots; each test gets the primary
flushed, and every process is stopped by PID at the end, however the session ends.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from redis.exceptions import RedisError

from tests.support.redis_servers import START_LIMIT, STOP_LIMIT, free_port

SERVICE = "pact-store"


@dataclass
class SentinelSet:
    """The session's primary, replica and sentinel (each a ``redis-server`` child process)."""

    root: Path
    primary_port: int = 0
    replica_port: int = 0
    sentinel_port: int = 0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{SERVICE}"

    def _spawn(self, name: str, argv: list[str]) -> None:
        directory = self.root / name
        directory.mkdir(parents=True, exist_ok=True)
        argv = [*argv, "--bind", "127.0.0.1", "--dir", str(directory), "--logfile", "redis.log"]
        self.processes.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))

    def start(self) -> None:
        self.primary_port, self.replica_port, self.sentinel_port = free_port(), free_port(), free_port()
        no_disk = ["--save", "", "--appendonly", "no"]
        self._spawn("primary", ["redis-server", "--port", str(self.primary_port), *no_disk])
        self._spawn(
            "replica",
            [
                "redis-server",
                "--port",
                str(self.replica_port),
                *no_disk,
                "--replicaof",
                "127.0.0.1",
                str(self.primary_port),
            ],
        )
        conf = self.root / "sentinel" / "sentinel.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary_port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 5000\n",
            encoding="utf-8",
        )
        self._spawn("sentinel", ["redis-server", str(conf), "--sentinel", "--port", str(self.sentinel_port)])
        self._wait(self._ready, "the primary, its replica in sync, and the sentinel naming the primary")

    def _ready(self) -> bool:
        with (
            redis.Redis(port=self.primary_port, socket_timeout=1) as primary,
            redis.Redis(port=self.sentinel_port, socket_timeout=1) as sentinel,
        ):
            replica = primary.info("replication").get("slave0", {})
            named = sentinel.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
            # "online": the initial sync is over (a replica waiting for it is connected, but WAIT
            # counts it only once it acknowledges).
            return (
                replica.get("state") == "online" and named is not None and int(named[1]) == self.primary_port
            )

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_LIMIT
        while True:
            for process in self.processes:
                assert process.poll() is None, f"a redis-server of the sentinel set exited: see {self.root}"
            with contextlib.suppress(RedisError, OSError):
                if ready():
                    return
            assert time.monotonic() < deadline, f"not within {START_LIMIT} s: {what}"
            time.sleep(0.05)

    def flush(self) -> None:
        with redis.Redis(port=self.primary_port, socket_timeout=5) as primary:
            primary.flushall()

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(STOP_LIMIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.fixture(scope="session")
def sentinel_set(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSet]:
    servers = SentinelSet(tmp_path_factory.mktemp("sentinel-set"))
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.fixture
def sentinel_url(sentinel_set: SentinelSet) -> Iterator[str]:
    """The session's Sentinel URL, its primary flushed before and after the test."""
    sentinel_set.flush()
    yield sentinel_set.url
    sentinel_set.flush()
