"""``pact-gateway demo`` shows what an operator will see: access lines on stderr and ``/metrics`` on
loopback, at 9090 or, when that is taken, on a free port; it prints where, and ``--check`` scrapes it.
"""

from __future__ import annotations

import contextlib
import re
import socket
from collections.abc import Iterator

from tests.test_cli import free_port, run_cli

PREFERRED = 9090


@contextlib.contextmanager
def port_taken(port: int) -> Iterator[None]:
    """``port`` on loopback held by a listener for the block (or already held by someone else)."""
    with socket.socket() as holder:
        with contextlib.suppress(OSError):  # taken already: just as good
            holder.bind(("127.0.0.1", port))
            holder.listen()
        yield


def test_demo_shows_access_lines_and_serves_metrics_on_a_free_port_when_9090_is_taken() -> None:
    with port_taken(PREFERRED):
        result = run_cli("demo", "--check", "--port", str(free_port()), "--bot-port", str(free_port()))
    assert result.returncode == 0, result.stderr
    where = re.search(
        r"demo check: Prometheus metrics on (http://127\.0\.0\.1:(\d+)/metrics) \(9090 is in use\),"
        r" counting (\d+) requests",
        result.stderr,
    )
    assert where is not None, result.stderr
    assert int(where[2]) != PREFERRED
    # The access lines, as text: the demo's turns, its retry served from the store, each with a trace id.
    access = [line for line in result.stderr.splitlines() if " INFO pact_gateway.access " in line]
    turns = [line for line in access if "POST SendMessage 200" in line]
    assert len(turns) >= 3
    assert sum("retry_served=True" in line for line in turns) == 1
    assert all(re.search(r"trace_id=[0-9a-f]{32}\b", line) for line in access)
    assert "demo check passed" in result.stderr
    assert int(where[3]) == len(access)  # the registry the gateway counts in is the one served
