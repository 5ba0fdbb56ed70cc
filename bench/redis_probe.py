"""Counting what the gateway asks of Redis, with plain RESP over a socket (no client library needed).

Round trips (what the hot-path target is about) are commands a client sent over the network:
``MONITOR`` shows each with its database and client address, and the commands a Lua script runs as
``[db lua]``, so counting the non-Lua lines on the bench's own database over a fixed number of turns
gives round trips per turn exactly, however busy the rest of the server is. Only database ``db`` is
ever flushed.
"""

from __future__ import annotations

import re
import socket
import time
from collections import Counter
from io import BufferedReader
from typing import IO, Any
from urllib.parse import urlsplit

_MONITOR_LINE = re.compile(rb'^\+\d+\.\d+ \[(\d+) ([^\]]+)\] "([^"]+)"(?: "([^"]*)")?')


class RedisProbe:
    """A tiny synchronous RESP client for the few admin commands the benchmark needs."""

    def __init__(self, url: str, timeout: float = 3.0) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 6379
        self.db = int(parts.path.lstrip("/") or "0")
        self.timeout = timeout

    def _connect(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=self.timeout)

    @staticmethod
    def _encode(*args: str | bytes) -> bytes:
        out = [f"*{len(args)}\r\n".encode()]
        for arg in args:
            data = arg.encode() if isinstance(arg, str) else arg
            out.append(b"$%d\r\n%s\r\n" % (len(data), data))
        return b"".join(out)

    @staticmethod
    def _read_reply(stream: IO[bytes]) -> bytes:
        line = stream.readline()
        if not line:
            raise ConnectionError("redis closed the connection")
        kind, rest = line[:1], line[1:].rstrip(b"\r\n")
        if kind == b"-":
            raise RuntimeError(f"redis error: {rest.decode(errors='replace')}")
        if kind == b"$":
            size = int(rest)
            data = stream.read(size + 2) if size >= 0 else b"\r\n"  # a buffered read waits for it all
            if len(data) < size + 2:
                raise ConnectionError("redis closed the connection")
            return data[:-2]
        return rest

    def command_array(self, *args: str | bytes) -> list[Any]:
        """Run one command on ``db`` whose reply is an array (of bulk strings or arrays, as ``SCAN``'s)."""
        with self._connect() as sock, sock.makefile("rb") as stream:
            sock.sendall(self._encode("SELECT", str(self.db)) + self._encode(*args))
            self._read_reply(stream)
            return self._read_array(stream)

    @classmethod
    def _read_array(cls, stream: BufferedReader) -> list[Any]:
        header = stream.readline()
        if header[:1] != b"*":
            raise RuntimeError(f"redis answered {header!r} where an array was expected")
        return [
            cls._read_array(stream) if stream.peek(1)[:1] == b"*" else cls._read_reply(stream)
            for _ in range(int(header[1:]))
        ]

    def command(self, *args: str | bytes) -> bytes:
        """Run one command on ``db`` and return its (simple or bulk) reply."""
        with self._connect() as sock, sock.makefile("rb") as stream:
            sock.sendall(self._encode("SELECT", str(self.db)) + self._encode(*args))
            self._read_reply(stream)
            return self._read_reply(stream)

    def scan(self, pattern: str = "*") -> list[bytes]:
        """Every key of ``db`` matching ``pattern``, by ``SCAN`` (never ``KEYS``, which blocks a server)."""
        found: list[bytes] = []
        cursor = b"0"
        while True:
            cursor, batch = self.command_array("SCAN", cursor, "MATCH", pattern, "COUNT", "1000")
            found += batch
            if cursor == b"0":
                return found

    def ping(self) -> None:
        if self.command("PING") != b"PONG":
            raise ConnectionError(f"redis at {self.host}:{self.port} did not answer PONG")

    def flush(self) -> None:
        """FLUSHDB on the benchmark's own database, never another."""
        self.command("FLUSHDB")

    def server_pid(self) -> int | None:
        """The Redis server's process id (``INFO server``), so its CPU can be read when it is local."""
        for line in self.command("INFO", "server").decode().splitlines():
            if line.startswith("process_id:"):
                return int(line.split(":", 1)[1])
        return None

    def monitor(self, riding: frozenset[str] = frozenset()) -> MonitorCount:
        return MonitorCount(self, riding)


class MonitorCount:
    """A MONITOR connection that tallies client commands (not Lua-internal ones) on the probe's db.

    ``riding``: the SHA-1s of scripts the gateway only ever sends in the same write as another
    command (the per-agent §6 charge beside the turn's script, in the tagged layout: issue 20). They
    are client commands but no round trip of their own, and are tallied apart (:attr:`riding`).
    """

    def __init__(self, probe: RedisProbe, riding: frozenset[str] = frozenset()) -> None:
        self._riding = {sha.encode() for sha in riding}
        self.riding = 0
        self._db = str(probe.db).encode()
        self._sock = probe._connect()
        self._sock.sendall(RedisProbe._encode("MONITOR"))
        self._buffer = b""
        self.client_commands: Counter[str] = Counter()
        self.script_commands: Counter[str] = Counter()
        self._expect_ok = True

    def poll(self, seconds: float) -> None:
        """Read whatever MONITOR sends for up to ``seconds``."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            self._sock.settimeout(remaining)
            try:
                chunk = self._sock.recv(65536)
            except TimeoutError:
                return
            if not chunk:
                raise ConnectionError("redis closed the MONITOR connection")
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\r\n")
            for line in lines:
                self._count(line)

    def _count(self, line: bytes) -> None:
        if self._expect_ok and line == b"+OK":
            self._expect_ok = False
            return
        match = _MONITOR_LINE.match(line)
        if match is None or match.group(1) != self._db:
            return
        command = match.group(3).decode(errors="replace").lower()
        if match.group(2) == b"lua":
            self.script_commands[command] += 1
        else:
            self.client_commands[command] += 1
            if command == "evalsha" and match.group(4) in self._riding:
                self.riding += 1

    @property
    def round_trips(self) -> int:
        """Client commands less those that rode in another's write."""
        return sum(self.client_commands.values()) - self.riding

    def close(self) -> None:
        self._sock.close()
