"""bench.procs: the bench's Redis Clusters, started and stopped with the run's children."""

from __future__ import annotations

from pathlib import Path

from bench.procs import Children, start_cluster
from bench.redis_probe import RedisProbe


def test_a_bench_cluster_serves_every_slot_with_a_replica_a_primary_and_is_stopped_by_pid(
    tmp_path: Path,
) -> None:
    """Issue 20 item 6: the bench's clusters split the 16384 slots over N primaries, each replica
    attached to its own primary; leaving the run's ``Children`` ends every node."""
    with Children(tmp_path) as children:
        nodes = start_cluster(children, 2, replicas=True)
        assert nodes.url.startswith("redis+cluster://127.0.0.1:")
        assert nodes.url.count(",") == 1
        ports = [port for _, port in (*nodes.primaries, *nodes.replicas)]
        probes = [RedisProbe(f"redis://127.0.0.1:{port}/0") for port in ports]
        for probe in probes:
            info = probe.command("CLUSTER", "INFO").decode()
            assert "cluster_state:ok" in info, info
            assert "cluster_slots_assigned:16384" in info, info
        for probe in probes[:2]:
            assert b"role:master" in probe.command("INFO", "replication")
        primary_ids = {probe.command("CLUSTER", "MYID") for probe in probes[:2]}
        for probe in probes[2:]:
            replication = probe.command("INFO", "replication").decode()
            assert "role:slave" in replication, replication
            assert "master_link_status:up" in replication, replication
            [line] = [ln for ln in probe.command("CLUSTER", "NODES").split(b"\n") if b"myself" in ln]
            assert line.split()[3] in primary_ids, line
        pids = nodes.pids
        assert len(pids) == 4
        assert all(Path(f"/proc/{pid}").exists() for pid in pids)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
