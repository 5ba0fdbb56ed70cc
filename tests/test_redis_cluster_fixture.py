"""The Redis Cluster the tests start survives a port taken under it (issue 27 item 5: no flake).

:func:`~tests.support.redis_servers.free_port` finds a port free *now*; on a machine running other
suites another process may bind it before the node does. Such a node exits at once ("Address
already in use"); the cluster starts it again on fresh ports instead of waiting out its limit.
"""

from __future__ import annotations

import itertools
import socket
from pathlib import Path

import pytest

from tests.support import redis_cluster
from tests.support.redis_servers import free_port


def test_a_node_whose_port_was_taken_before_it_bound_starts_again_on_fresh_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        # The first node is handed the taken port; every other port is really free.
        ports = itertools.chain([busy], iter(free_port, None))
        monkeypatch.setattr(redis_cluster, "free_port", lambda: next(ports))
        with redis_cluster._cluster(tmp_path / "cluster") as cluster:
            assert busy not in {node.port for node in cluster.nodes}
            with cluster.nodes[0].client() as client:
                assert client.cluster("INFO")["cluster_state"] == "ok"
