"""Counting what the gateway asks of Redis with ``MONITOR``, the commands inside its scripts included.

``MONITOR`` shows every command with its database and client address, and the commands a Lua script
runs as ``[db lua]``: counting the lines on the test's own database tallies what a client sent and
what its scripts ran inside Redis, however busy the rest of the server is.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import redis
from redis.client import Monitor


class MonitorCount:
    """A MONITOR connection that tallies, on ``url``'s database, client commands and script-run ones."""

    def __init__(self, url: str) -> None:
        # Kept: a client that is collected closes its pool's connections, the MONITOR one too.
        self._client = client = redis.Redis.from_url(url)
        self._db = int(client.connection_pool.connection_kwargs.get("db", 0))
        self.client_commands: Counter[str] = Counter()
        self.script_commands: Counter[str] = Counter()
        monitor = Monitor(client.connection_pool)  # type: ignore[no-untyped-call]  # untyped upstream
        # Entered once MONITOR answered OK: every command from here on is seen.
        self._monitor = monitor.__enter__()  # type: ignore[no-untyped-call]  # untyped upstream

    def poll(self, seconds: float) -> None:
        """Read whatever MONITOR sends for up to ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and self._monitor.connection.can_read(timeout=left):
            self._count(self._monitor.next_command())

    def _count(self, line: dict[str, Any]) -> None:
        if line["db"] == self._db:
            tally = self.script_commands if line["client_type"] == "lua" else self.client_commands
            tally[str(line["command"]).partition(" ")[0].lower()] += 1

    def close(self) -> None:
        self._monitor.__exit__()
