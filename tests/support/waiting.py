"""Waiting for something another task makes true, with a bound instead of a guessed sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def until(condition: Callable[[], bool], limit: float = 5.0) -> None:
    """Poll ``condition`` every 10 ms; fail the test if it is still false after ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not condition():
        assert loop.time() < deadline, f"condition not reached within {limit} s"
        await asyncio.sleep(0.01)
