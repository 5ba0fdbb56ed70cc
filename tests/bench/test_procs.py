"""bench.procs: the bench's Redis Clusters, started and stopped with the run's children."""

from __future__ import annotations

from pathlib import Path

import redis

from bench.procs import Children, start_cluster


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
        clients = [redis.Redis.from_url(f"redis://127.0.0.1:{port}/0") for port in ports]
        for client in clients:
            info = client.cluster("INFO")
            assert info["cluster_state"] == "ok", info
            assert int(info["cluster_slots_assigned"]) == 16384, info
        for client in clients[:2]:
            assert client.info("replication")["role"] == "master"
        primary_ids = {client.cluster("MYID").decode() for client in clients[:2]}
        for client in clients[2:]:
            replication = client.info("replication")
            assert replication["role"] == "slave", replication
            assert replication["master_link_status"] == "up", replication
            [myself] = [n for n in client.cluster("NODES").values() if "myself" in n["flags"]]
            assert myself["master_id"] in primary_ids, myself
        pids = nodes.pids
        assert len(pids) == 4
        assert all(Path(f"/proc/{pid}").exists() for pid in pids)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)
