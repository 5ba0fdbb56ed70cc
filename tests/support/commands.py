"""Counting Redis round trips without ``MONITOR``: wrap one connection's ``execute``.

Every command the gateway sends, scripts included (``EVALSHA``), passes through
:meth:`RedisPipe.execute` once and costs one round trip, so the recorded list is the round
trips made through that connection, and nothing another test or process sends counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from gateway.store.redis_pipe import Arg, RedisPipe


@contextmanager
def recorded_commands(redis: RedisPipe) -> Iterator[list[str]]:
    """Yield the list of command names ``redis`` sends while the block runs."""
    commands: list[str] = []
    original = redis.execute

    async def counting(*args: Arg, replicated: bool = False, asking: bool = False) -> Any:
        commands.append(str(args[0]))  # a WAIT or ASKING sent with it rides along: no round trip of its own
        return await original(*args, replicated=replicated, asking=asking)

    redis.execute = counting  # type: ignore[method-assign]
    try:
        yield commands
    finally:
        del redis.execute  # the class's method again
