"""Child processes for the benchmark: started in their own process group, measured from /proc, always ended.

Each party (bot, pass-through, gateway, load generator) is a process of its own so its CPU can be
read from ``/proc/<pid>/stat`` (``utime`` + ``stime`` of it and its descendants). :func:`start_cluster`
starts a Redis Cluster the same way, one child a node (the tests start theirs apart,
``tests/support/redis_cluster.py``: the tests do not depend on ``bench``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

from gateway.store.slots import SLOTS

REPO_ROOT = Path(__file__).resolve().parent.parent
_CLK_TCK = os.sysconf("SC_CLK_TCK")


class ChildFailed(RuntimeError):
    """A child process died or never became ready; the message carries the tail of its log."""


def free_port() -> int:
    """A loopback port nobody listens on right now (the kernel's choice, so no guessing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def python_env() -> dict[str, str]:
    """The environment children run with: this checkout first on the path, unbuffered output."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of a process (``VmRSS`` of ``/proc/<pid>/status``; the kernel writes kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: split after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def _descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in parents.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by ``pid`` and every live descendant."""
    total = 0
    for member in (pid, *_descendants(pid)):
        fields = _stat_fields(member)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / _CLK_TCK


def read_machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of the whole machine since boot, from ``/proc/stat``."""
    with open("/proc/stat") as stat:
        values = [int(v) for v in stat.readline().split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # steal included, guest already counted in user
    return total - idle, total


def machine_busy(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Fraction of all cores busy between two readings: 1.0 means the run was CPU-bound."""
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


def machine_busy_seconds(before: tuple[int, int], after: tuple[int, int]) -> float:
    """CPU seconds the whole machine spent busy between two readings, every process included."""
    return (after[0] - before[0]) / _CLK_TCK


class Child:
    """One started process with its own process group and a log file for its stdout and stderr."""

    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.popen = subprocess.Popen(
            list(argv),
            cwd=REPO_ROOT,
            env={**python_env(), **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: stop() ends it and anything it forked
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def said(self, prefix: str, timeout: float) -> dict[str, Any]:
        """The JSON object of the first whole line of its output that starts with ``prefix``: how a
        child reports what the run needs from it (where it listens, what it measured)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise ChildFailed(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")
            # Only whole lines: the last one may still be being written.
            for line in self.log_path.read_text(errors="replace").split("\n")[:-1]:
                if line.startswith(prefix):
                    said: dict[str, Any] = json.loads(line)
                    return said
            time.sleep(0.05)
        raise ChildFailed(f"{self.name} did not say {prefix}… within {timeout:.0f} s:\n{self.tail()}")

    def wait_port(self, port: int, timeout: float = 20.0) -> None:
        """Return once ``port`` accepts connections; ChildFailed if the process dies or time runs out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                raise ChildFailed(f"{self.name} exited with {self.popen.returncode}:\n{self.tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
            time.sleep(0.05)
        raise ChildFailed(
            f"{self.name} did not listen on 127.0.0.1:{port} within {timeout} s:\n{self.tail()}"
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> int | None:
        """Signal the whole process group, wait, then SIGKILL whatever is left; the exit code."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)
        # The leader is gone; a straggler in its group (a forked worker) must not outlive the run.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self._log.close()
        return self.popen.returncode


class Children:
    """Every child the run started; leaving the block (normally, on error or on SIGTERM) stops them all."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self._children: list[Child] = []
        self.env: dict[str, str] = {}
        """Variables every child started from now on gets on top of :func:`python_env`: a bot's key,
        which a gateway's YAML may only name (``${NAME}``), never hold."""
        self._previous_handler: signal.Handlers | int | None = None

    def start(self, name: str, argv: Sequence[str]) -> Child:
        child = Child(name, argv, self.log_dir / f"{name}.log", self.env)
        self._children.append(child)
        return child

    def python(self, name: str, *args: str) -> Child:
        return self.start(name, [sys.executable, *args])

    def stop(self, child: Child, sig: int = signal.SIGTERM) -> int | None:
        if child in self._children:
            self._children.remove(child)
        return child.stop(sig)

    def __enter__(self) -> Children:
        previous = signal.getsignal(signal.SIGTERM)
        self._previous_handler = previous if isinstance(previous, int | signal.Handlers) else None

        def terminate(signum: int, frame: object) -> None:
            raise SystemExit(128 + signum)  # unwinds through __exit__, which stops the children

        signal.signal(signal.SIGTERM, terminate)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for child in reversed(self._children):
            child.stop()
        self._children.clear()
        signal.signal(signal.SIGTERM, self._previous_handler or signal.SIG_DFL)


CLUSTER_LIMIT = 30.0
"""Seconds a bench cluster gets to agree on its slots and attach its replicas."""


@dataclass
class ClusterNodes:
    """A Redis Cluster the bench started: its primaries and replicas, each a :class:`Child`."""

    primaries: list[tuple[Child, int]]
    """Each primary's process and port, in slot order (the first serves slot 0)."""
    replicas: list[tuple[Child, int]]

    @property
    def url(self) -> str:
        """The ``redis+cluster://`` URL an operator would give: every primary a seed node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for _, port in self.primaries)

    @property
    def pids(self) -> list[int]:
        """Every node's PID: the cluster's CPU is theirs summed (:func:`cpu_seconds`)."""
        return [child.pid for child, _ in (*self.primaries, *self.replicas)]


def start_cluster(children: Children, primaries: int, *, replicas: bool = False) -> ClusterNodes:
    """``primaries`` cluster-enabled ``redis-server`` (each with one replica if ``replicas``) on free
    loopback ports, stopped with ``children`` by PID.

    The slots are split evenly by ``CLUSTER ADDSLOTSRANGE`` and the nodes introduced by ``CLUSTER MEET``
    rather than by ``redis-cli --cluster create``, which refuses fewer than three primaries: a
    one-primary cluster is what the bench compares three with, measured the same way. No snapshots,
    no AOF (what is measured is memory and turns, not disks); the installed server's defaults else.
    """
    nodes: list[tuple[Child, int]] = []
    buses: list[int] = []
    for index in range(primaries * (2 if replicas else 1)):
        port, bus = free_port(), free_port()
        directory = children.log_dir / f"redis-cluster-{port}"
        directory.mkdir()
        argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory)]
        argv += ["--save", "", "--appendonly", "no", "--cluster-enabled", "yes"]
        argv += ["--cluster-config-file", "nodes.conf", "--cluster-port", str(bus)]
        # A node learns its address from a peer's MEET; a lone primary has none, and would name
        # itself "" in CLUSTER SHARDS.
        argv += ["--cluster-announce-ip", "127.0.0.1"]
        nodes.append((children.start(f"redis-cluster-{index}", argv), port))
        buses.append(bus)
    for child, port in nodes:
        child.wait_port(port)
    clients = [redis.Redis.from_url(f"redis://127.0.0.1:{port}/0") for _, port in nodes]
    for index, client in enumerate(clients[:primaries]):
        first, last = index * SLOTS // primaries, (index + 1) * SLOTS // primaries - 1
        client.cluster("ADDSLOTSRANGE", first, last)
    for client in clients[1:]:
        # The bus port is named: its default (port + 10000) is not the free one each node was given.
        client.cluster("MEET", "127.0.0.1", nodes[0][1], buses[0])
    _until(lambda: all(_knows(client, len(nodes)) for client in clients), "every node to know every other")
    for replica, primary in zip(clients[primaries:], clients[: len(nodes) - primaries], strict=True):
        replica.cluster("REPLICATE", primary.cluster("MYID"))
    _until(
        lambda: (
            all(node.info("replication").get("master_link_status") == "up" for node in clients[primaries:])
            and all(_knows(client, len(nodes)) for client in clients)
        ),
        "every replica's link to its primary, and every node's cluster_state:ok",
    )
    return ClusterNodes(nodes[:primaries], nodes[primaries:])


def _knows(client: redis.Redis, nodes: int) -> bool:
    info = client.cluster("INFO")
    return bool(info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == nodes)


def _until(ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + CLUSTER_LIMIT
    while not ready():
        if time.monotonic() > deadline:
            raise ChildFailed(f"the bench cluster did not settle within {CLUSTER_LIMIT} s: {what}")
        time.sleep(0.05)
