"""Counting Redis round trips without ``MONITOR``: wrap one connection's ``execute``.

Every command the gateway sends, scripts included (``EVALSHA``), passes through
:meth:`RedisPipe.execute` once and costs one round trip, so the recorded list is the round
trips made through that connection, and nothing another test or process sends counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gateway.store.redis_pipe import Arg, RedisPipe


@contextmanager
def recorded_commands(redis: RedisPipe) -> Iterator[list[str]]:
    """Yield the list of command names ``redis`` sends while the block runs."""
    commands: list[str] = []
    original = redis.execute

    async def counting(
        *args: Arg, replicated: bool = False, asking: bool = False, idempotent: bool = False
    ) -> Any:
        commands.append(str(args[0]))  # a WAIT or ASKING sent with it rides along: no round trip of its own
        return await original(*args, replicated=replicated, asking=asking, idempotent=idempotent)

    redis.execute = counting  # type: ignore[method-assign]
    try:
        yield commands
    finally:
        del redis.execute  # the class's method again


@dataclass
class Rounds:
    """Round trips through one connection: a round starts with a command sent while none is awaiting
    its answer, and every command sent before all of those are answered rides in it (the pipe writes
    them together, or at least has them on the wire at once)."""

    rounds: int = 0
    sent: list[tuple[int, tuple[Arg, ...]]] = field(default_factory=list)
    """Each command as sent, with the round it rode in."""
    _waiting: int = 0

    @property
    def commands(self) -> list[str]:
        """The commands' names, in order."""
        return [str(args[0]) for _, args in self.sent]


@contextmanager
def recorded_rounds(redis: RedisPipe) -> Iterator[Rounds]:
    """Yield the :class:`Rounds` of what ``redis`` sends while the block runs."""
    seen = Rounds()
    original = redis.execute

    async def counting(
        *args: Arg, replicated: bool = False, asking: bool = False, idempotent: bool = False
    ) -> Any:
        if not seen._waiting:
            seen.rounds += 1
        seen.sent.append((seen.rounds, args))
        seen._waiting += 1
        try:
            return await original(*args, replicated=replicated, asking=asking, idempotent=idempotent)
        finally:
            seen._waiting -= 1

    redis.execute = counting  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        del redis.execute
