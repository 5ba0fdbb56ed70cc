"""A real Redis Cluster on loopback: 3 primaries and 3 replicas, for the ``redis+cluster://`` tests.

Started as an operator would: six ``redis-server --cluster-enabled yes`` on free loopback ports,
each under the test's (or the session's) tmp dir with no snapshots and no AOF, then ``redis-cli
--cluster create … --cluster-replicas 1 --cluster-yes``; ready once every node says
``cluster_state:ok``, agrees on all 16384 slots, and every replica's link to its primary is up.
Two fixtures: ``redis_cluster_set`` for the whole session (tests that break nothing; the data
is flushed around each test by ``cluster_url``), and ``redis_cluster`` for one test (kill -9, a
failover, a slot migration, a stopped node). Every process is stopped by PID however the test or
the session ends (a stopped one is continued first, or SIGTERM would wait on it).
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError, ResponseError
from redis.retry import Retry

from gateway.store.slots import key_slot
from tests.support.redis_servers import START_LIMIT, STOP_LIMIT, free_port

NODE_TIMEOUT_MS = 1000
"""``cluster-node-timeout``: how long a silent primary takes to be declared failed (then its
replica is promoted); short, so the failover tests finish in seconds."""
CLUSTER_LIMIT = 30.0
"""Seconds the cluster gets to form, or to settle after a test broke it (a failover included)."""
BIND_ATTEMPTS = 5
"""Starts a node gets on fresh ports when the ones it was given were taken before it bound them."""


@dataclass
class ClusterNode:
    """One ``redis-server`` of the cluster."""

    directory: Path
    port: int
    bus_port: int
    """The cluster bus's port, free like ``port`` (its default, ``port`` + 10000, may be neither
    free nor a port at all)."""
    process: subprocess.Popen[bytes] | None = None

    def client(self) -> redis.Redis:
        """A redis-py client (the caller closes it) to look at or steer this node alone."""
        return redis.Redis(port=self.port, socket_timeout=5)

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        argv = [
            "redis-server",
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--logfile",
            "redis.log",
            "--save",
            "",
            "--appendonly",
            "no",
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            str(NODE_TIMEOUT_MS),
            "--cluster-port",
            str(self.bus_port),
        ]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, number: signal.Signals) -> None:
        """Send ``number`` (SIGKILL, SIGSTOP, SIGCONT) to this node's process, by its PID."""
        assert self.process is not None
        assert self.process.poll() is None
        self.process.send_signal(number)

    def stop(self) -> None:
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)  # a stopped process would not act on SIGTERM
            process.terminate()
            try:
                process.wait(STOP_LIMIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@dataclass
class RedisCluster:
    """Six nodes: after :meth:`start`, three primaries, each with one replica."""

    root: Path
    nodes: list[ClusterNode] = field(default_factory=list)

    @property
    def url(self) -> str:
        """A ``redis+cluster://`` URL naming two seed nodes (one would be a single point of failure)."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port},127.0.0.1:{self.nodes[1].port}"

    def start(self) -> None:
        self.nodes = [ClusterNode(self.root / f"node{index}", free_port(), free_port()) for index in range(6)]
        for node in self.nodes:
            node.start()
        for index in range(len(self.nodes)):
            self._answering(index)
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{node.port}" for node in self.nodes),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            timeout=CLUSTER_LIMIT,
        )
        self.wait_healthy()

    def _answering(self, index: int) -> None:
        """Wait for node ``index`` to answer PING. A free port can be taken by another process
        between :func:`free_port` and the node binding it (the machine runs other suites): a node
        that exited for that is started again on fresh ports, in a directory of its own."""
        node = self.nodes[index]
        for attempt in range(BIND_ATTEMPTS):
            if attempt:
                node = ClusterNode(self.root / f"node{index}-{attempt}", free_port(), free_port())
                self.nodes[index] = node
                node.start()
            deadline = time.monotonic() + START_LIMIT
            while node.process is not None and node.process.poll() is None:
                with contextlib.suppress(RedisError, OSError):
                    if self._answers(node):
                        return
                assert time.monotonic() < deadline, f"node {node.port} not answering: {node.directory}"
                time.sleep(0.05)
            log = (node.directory / "redis.log").read_text(errors="replace")
            assert "Address already in use" in log, f"node {node.port} exited: {node.directory}"
        raise AssertionError(f"node {index} found no free ports in {BIND_ATTEMPTS} attempts: {self.root}")

    def _answers(self, node: ClusterNode) -> bool:
        """``node``'s own process answers (``INFO``'s ``process_id`` is its PID): a short look, once,
        as whatever took its port may accept a connection and never answer, or be another server."""
        assert node.process is not None
        once = Retry(NoBackoff(), retries=0)
        with redis.Redis(
            port=node.port, socket_timeout=0.5, socket_connect_timeout=0.5, retry=once
        ) as client:  # fmt: skip
            return int(client.info("server")["process_id"]) == node.process.pid

    def wait_healthy(self) -> None:
        """Until every running node says ``cluster_state:ok``, three primaries serve every slot, and
        each has a replica online (a cluster settling after a failover counts when it is whole)."""
        self._wait(self._healthy, "cluster_state:ok, 16384 slots on 3 primaries, every replica online")

    def _healthy(self) -> bool:
        running = [node for node in self.nodes if node.running]
        for node in running:
            with node.client() as client:
                info = client.execute_command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info or "cluster_slots_ok:16384" not in info:
                    return False
        primaries = self.primaries()
        if len(primaries) != 3:
            return False
        for node in primaries:
            with node.client() as client:
                replication = client.info("replication")
                if replication.get("slave0", {}).get("state") != "online":
                    return False
        return True

    def primaries(self) -> list[ClusterNode]:
        """The running nodes that are primaries serving slots now."""
        found = []
        for node in self.nodes:
            if not node.running:
                continue
            with contextlib.suppress(RedisError, OSError), node.client() as client:
                if client.info("replication").get("role") == "master":
                    found.append(node)
        return found

    def node_of_key(self, key: str) -> ClusterNode:
        """The running primary that serves ``key``'s slot now: the one that does not redirect ``EXISTS``."""
        for node in self.primaries():
            with contextlib.suppress(ResponseError), node.client() as client:
                client.exists(key)
                return node
        raise AssertionError(f"no primary serves {key!r}")

    def migrate(self, key: str) -> tuple[ClusterNode, ClusterNode]:
        """Start moving ``key``'s slot to another primary as ``redis-cli --cluster reshard`` does: the
        slot importing on the target and migrating on the source, then its keys ``MIGRATE``d in
        batches. The slot stays migrating (a key asked of the source meets ``ASK``) until
        :meth:`assign`. The source and the target."""
        slot = key_slot(key)
        source = self.node_of_key(key)
        target = next(node for node in self.primaries() if node is not source)
        source_id, target_id = self.node_id(source), self.node_id(target)
        with source.client() as source_client, target.client() as target_client:
            target_client.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            source_client.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
            while moving := source_client.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                source_client.execute_command(
                    "MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *moving
                )
        return source, target

    def assign(self, key: str, source: ClusterNode, target: ClusterNode) -> None:
        """End a :meth:`migrate`: the slot the target's for good (``CLUSTER SETSLOT … NODE``), told to
        the target, the source and the other primaries in that order, as ``redis-cli`` does."""
        slot, target_id = key_slot(key), self.node_id(target)
        others = [node for node in self.primaries() if node not in (source, target)]
        for node in (target, source, *others):
            with node.client() as client:
                client.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)

    def take_down(self, key: str) -> ClusterNode:
        """Leave ``key``'s slot unserved (every node forgets its owner) and wait until each node says
        the cluster is down: with ``cluster-require-full-coverage`` (the default) every call to any
        node is then answered ``CLUSTERDOWN``. The slot's owner, for :meth:`bring_up`."""
        owner, slot = self.node_of_key(key), key_slot(key)
        for node in self.nodes:
            with node.client() as client:
                client.execute_command("CLUSTER", "DELSLOTS", slot)
        self._wait(lambda: all(_state(node) == "fail" for node in self.nodes), "the cluster down")
        return owner

    def bring_up(self, key: str, owner: ClusterNode) -> None:
        """Undo :meth:`take_down`: ``owner`` serves ``key``'s slot again, and tells the others."""
        with owner.client() as client:
            client.execute_command("CLUSTER", "ADDSLOTS", key_slot(key))

    def replica_of(self, primary: ClusterNode) -> ClusterNode:
        with primary.client() as client:
            port = int(client.info("replication")["slave0"]["port"])
        return self.by_port(port)

    def by_port(self, port: int) -> ClusterNode:
        return next(node for node in self.nodes if node.port == port)

    def node_id(self, node: ClusterNode) -> str:
        with node.client() as client:
            return str(client.execute_command("CLUSTER", "MYID").decode())

    def flush(self) -> None:
        for node in self.primaries():
            with node.client() as client:
                client.flushall()

    def _wait(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + max(START_LIMIT, CLUSTER_LIMIT)
        while True:
            for node in self.nodes:
                assert node.process is None or node.process.poll() != 1, (
                    f"node {node.port} exited: {self.root}"
                )
            with contextlib.suppress(RedisError, OSError):
                if ready():
                    return
            assert time.monotonic() < deadline, f"not within {CLUSTER_LIMIT} s: {what} (logs in {self.root})"
            time.sleep(0.05)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _state(node: ClusterNode) -> str:
    """``cluster_state`` as ``node`` sees it: ``ok`` or ``fail``."""
    with node.client() as client:
        return str(client.cluster("INFO")["cluster_state"])


@contextlib.contextmanager
def _cluster(root: Path) -> Iterator[RedisCluster]:
    cluster = RedisCluster(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster_set(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One cluster for the session's tests that break nothing."""
    with _cluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture
def cluster_url(redis_cluster_set: RedisCluster) -> Iterator[str]:
    """The session cluster's URL, every primary flushed before and after the test."""
    redis_cluster_set.flush()
    yield redis_cluster_set.url
    redis_cluster_set.flush()


@pytest.fixture(params=["memory", "redis", "cluster"])
def delegation_store_url(request: pytest.FixtureRequest) -> str:
    """Each backend a §5 state test runs on in turn: memory, the suite's Redis database, and a Redis
    Cluster of three primaries (where a grant's and a person's keys are in different slots)."""
    if request.param == "memory":
        return "memory://"
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
def redis_cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    """A cluster of the test's own, for one that kills, stops, fails over or migrates."""
    with _cluster(tmp_path / "redis-cluster") as cluster:
        yield cluster
