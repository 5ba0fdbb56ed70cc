"""Counting what the gateway asks of Redis: ``MONITOR`` over a fixed number of turns.

Round trips (what the hot-path target is about) are commands a client sent over the network:
``MONITOR`` shows each with its database and client address, and the commands a Lua script runs as
``[db lua]``, so counting the non-Lua lines on the bench's own database over a fixed number of turns
gives round trips per turn exactly, however busy the rest of the server is. The bench's other Redis
calls (flushing its own database, reading ``INFO``, setting up a cluster) are redis-py's.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import redis
from redis.client import Monitor


class MonitorCount:
    """A MONITOR connection that tallies client commands (not Lua-internal ones) on ``url``'s database.

    ``riding``: the SHA-1s of scripts the gateway only ever sends in the same write as another
    command (the per-agent §6 charge beside the turn's script on a Redis Cluster). They are client
    commands but no round trip of their own, and are tallied apart (:attr:`riding`).
    """

    def __init__(self, url: str, riding: frozenset[str] = frozenset()) -> None:
        # Kept: a client that is collected closes its pool's connections, the MONITOR one too.
        self._client = client = redis.Redis.from_url(url)
        self._db = int(client.connection_pool.connection_kwargs.get("db", 0))
        self._riding = riding
        self.riding = 0
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
        if line["db"] != self._db:
            return
        command, _, args = str(line["command"]).partition(" ")
        command = command.lower()
        if line["client_type"] == "lua":
            self.script_commands[command] += 1
            return
        self.client_commands[command] += 1
        if command == "evalsha" and args.partition(" ")[0] in self._riding:
            self.riding += 1

    @property
    def round_trips(self) -> int:
        """Client commands less those that rode in another's write."""
        return sum(self.client_commands.values()) - self.riding

    def close(self) -> None:
        self._monitor.__exit__()
