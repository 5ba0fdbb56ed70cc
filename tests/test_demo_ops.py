"""``pact-gateway demo`` shows what an operator will see: access lines on stderr and ``/metrics`` on
loopback, at 9090 or, when that is taken, on a free port; it prints where, and ``--check`` scrapes it
and prints only its verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from gateway.demo import DEFAULT_CONFIG, DEMO_SUB, SIGNING_KEY_ENV, demo_config, new_signing_key
from gateway.demo_check import run_check
from gateway.demo_ops import count_requests
from tests.support.demo_session import Demo
from tests.test_cli import free_port, run_cli

PREFERRED = 9090
LOG_WAIT: Final = 10.0
"""Seconds the demo's last access lines may take to reach its stderr file on a busy machine."""
LOG_LOOK: Final = 0.05
"""Seconds between looks at that file."""


@contextlib.contextmanager
def port_taken(port: int) -> Iterator[None]:
    """``port`` on loopback held by a listener for the block (or already held by someone else)."""
    with socket.socket() as holder:
        with contextlib.suppress(OSError):  # taken already: just as good
            holder.bind(("127.0.0.1", port))
            holder.listen()
        yield


def test_demo_check_serves_metrics_on_a_free_port_when_9090_is_taken_and_prints_only_its_verdict() -> None:
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
    assert "demo check passed" in result.stderr
    assert int(where[3]) > 0  # the registry the gateway counts in is the one served
    # Issue 32: the README says --check prints only its verdict; the session's access lines are not.
    assert " pact_gateway.access " not in result.stderr


def access_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if " INFO pact_gateway.access " in line]


async def test_demo_shows_an_access_line_per_request_on_stderr(demo: Demo) -> None:
    """The running demo (not --check) logs each request as text on stderr, as ``/metrics`` counts it."""
    printed = await demo.start()
    metrics_url = re.search(r"Prometheus metrics on (http://127\.0\.0\.1:\d+/metrics)", printed)
    assert metrics_url is not None, printed
    environ = {SIGNING_KEY_ENV: new_signing_key()}  # only the client's view of the config is used
    config = demo_config(DEFAULT_CONFIG, demo.port, demo.bot_port, environ)
    await run_check(config, json.loads(demo.key_file.read_text()), DEMO_SUB)
    counted = await count_requests(metrics_url[1])
    # A line is written as its answer goes out: give the last ones a moment to land, then compare.
    for _ in range(int(LOG_WAIT / LOG_LOOK)):
        if len(access_lines(demo.log)) >= counted:
            break
        await asyncio.sleep(LOG_LOOK)
    access = access_lines(demo.log)
    # The demo's turns, its retry served from the store, each with a trace id.
    turns = [line for line in access if "POST SendMessage 200" in line]
    assert len(turns) >= 3
    assert sum("retry_served=True" in line for line in turns) == 1
    assert all(re.search(r"trace_id=[0-9a-f]{32}\b", line) for line in access)
    assert len(access) == counted
