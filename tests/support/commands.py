"""Counting Redis round trips without ``MONITOR``: wrap one client's ``execute_command``.

Every command redis-py sends outside a pipeline, scripts included (``EVALSHA``), passes
through ``execute_command`` once and costs one round trip, so the recorded list is the
round trips made through that client, and nothing another test or process sends counts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import cast

import redis.asyncio as aioredis

Execute = Callable[..., Awaitable[object]]


@contextmanager
def recorded_commands(client: aioredis.Redis) -> Iterator[list[str]]:
    """Yield the list of command names ``client`` sends while the block runs."""
    commands: list[str] = []
    original = cast(Execute, client.execute_command)

    async def counting(*args: object, **options: object) -> object:
        commands.append(str(args[0]))
        return await original(*args, **options)

    client.execute_command = counting  # type: ignore[method-assign]
    try:
        yield commands
    finally:
        del client.execute_command  # the class's method again
