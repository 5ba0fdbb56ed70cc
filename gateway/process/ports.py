"""Which of the ports a process is about to listen on are taken, asked all at once before it starts.

Starting the listeners one by one reports only the first busy port (and after the others have
started): an operator fixes it, starts again and meets the next. Binding each address briefly
first names every one in a single run. The listeners' own start still reports a port taken in
between, so this is the friendly answer, not the only guard.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Sequence
from typing import NamedTuple

__all__ = ["Busy", "Listener", "unavailable"]


class Listener(NamedTuple):
    setting: str
    """What names the port, as the operator would change it: ``listen.port``, ``--bot-port``."""
    host: str
    port: int


class Busy(NamedTuple):
    listener: Listener
    why: str
    """``is already in use``, or ``cannot be used: <the system's reason>``."""

    def __str__(self) -> str:
        return f"{self.listener.host}:{self.listener.port} ({self.listener.setting}) {self.why}"


def unavailable(listeners: Sequence[Listener]) -> list[Busy]:
    """The listeners whose address cannot be bound now (each reads e.g. ``0.0.0.0:8080 (listen.port)
    is already in use``); empty when all can. Port 0 (any free port) is never busy."""
    return [
        Busy(listener, why)
        for listener in listeners
        if listener.port != 0 and (why := _bind_failure(listener.host, listener.port)) is not None
    ]


def _bind_failure(host: str, port: int) -> str | None:
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"cannot be used: {exc.strerror}"
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            # As asyncio's servers do: a port left in TIME_WAIT by the last run is not busy.
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                return (
                    "is already in use"
                    if exc.errno == errno.EADDRINUSE
                    else f"cannot be used: {exc.strerror}"
                )
    return None
