"""A steady stream of ``message:send`` turns through a real gateway, retried the way a personal agent would.

Each worker holds one conversation at a time (a first message without ``contextId``, then a few
turns on it, then a new one) and sends every message until it is answered: a failed attempt
(``INTERNAL``, or "still being processed" for a turn whose marker is still held) is retried with
the same ``messageId``, text and ``contextId``, bounded by ``retry_limit``. Any other answer fails
the stream: a lost conversation would show as "Unknown contextId". Given several gateways (replicas
behind one load balancer, over one store), each attempt goes to the next one, so a conversation's turns
and a message's retries land on different replicas. Afterwards
:meth:`TurnStream.check_replays` sends every answered message once more: §4.3 says each must
come back byte for byte, without the bot being called.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from tests.support.gateway import Harness

STILL_RUNNING = "A message with this messageId is still being processed"
RETRY_PAUSE = 0.05
"""Seconds between a failed attempt and its retry."""


@dataclass
class Sent:
    """One message and what became of it."""

    message_id: str
    text: str
    context_id: str | None
    sub: str
    failures: list[str] = field(default_factory=list)
    reply: bytes = b""
    started_at: float = 0.0
    """Loop time of its first attempt."""
    answered_at: float = 0.0


class TurnStream:
    """``workers`` concurrent personal-agent users of ``gw`` (one gateway, or replicas sharing one bot),
    each a conversation at a time."""

    def __init__(
        self,
        gw: Harness | Sequence[Harness],
        *,
        workers: int = 4,
        turns_per_conversation: int = 4,
        retry_limit: float,
    ) -> None:
        self._gws = [gw] if isinstance(gw, Harness) else list(gw)
        self._next = itertools.cycle(self._gws)
        self._bot = self._gws[0].bot
        self._workers = workers
        self._turns = turns_per_conversation
        self._retry_limit = retry_limit
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self.answered: list[Sent] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._worker(f"user-{index}")) for index in range(self._workers)]

    async def stop(self) -> None:
        """Let each worker finish the message it is on (bounded by the retry limit), then end."""
        self._stopping.set()
        async with asyncio.timeout(self._retry_limit + 10):
            await asyncio.gather(*self._tasks)

    async def cancel(self) -> None:
        """For a ``finally``: end the workers whatever they are doing."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def answered_since(self, moment: float) -> int:
        return sum(1 for sent in self.answered if sent.answered_at >= moment)

    async def until_answered(self, count: int, *, since: float = 0.0, limit: float) -> None:
        """Wait (``limit`` s at most) for ``count`` answers after ``since`` (a loop time)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        while self.answered_since(since) < count:
            for task in self._tasks:
                if task.done():
                    task.result()  # a worker that failed fails the test now, with its reason
            assert loop.time() - started < limit, f"{count} answers not within {limit} s"
            await asyncio.sleep(0.02)

    async def _worker(self, sub: str) -> None:
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            context_id: str | None = None
            for turn in range(self._turns):
                if self._stopping.is_set():
                    return
                sent = Sent(f"m-{uuid.uuid4().hex}", f"Where is order A-1000{turn}?", context_id, sub)
                sent.started_at = loop.time()
                await self._until_answered(sent)
                sent.answered_at = loop.time()
                self.answered.append(sent)
                context_id = orjson.loads(sent.reply)["message"]["contextId"]

    async def _until_answered(self, sent: Sent) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_limit
        while True:
            response = await next(self._next).send(
                sent.text, message_id=sent.message_id, context_id=sent.context_id, sub=sent.sub
            )
            body = await response.read()
            if response.status == 200:
                sent.reply = body
                return
            error: dict[str, Any] = orjson.loads(body)["error"]
            reason = f"{response.status} {error['details'][0]['reason']}: {error['message']}"
            # What a failover or a restart may answer; anything else is a fault of the gateway's.
            assert reason in ("500 INTERNAL: Internal error", f"400 INVALID_PARAMS: {STILL_RUNNING}"), reason
            sent.failures.append(reason)
            assert loop.time() < deadline, (
                f"{sent.message_id} unanswered after {self._retry_limit} s: {sent.failures}"
            )
            await asyncio.sleep(RETRY_PAUSE)

    async def check_replays(self) -> None:
        """§4.3: every answered message, sent again, gets the same bytes and costs no bot call."""
        calls = len(self._bot.calls)
        for sent in self.answered:
            response = await next(self._next).send(
                sent.text, message_id=sent.message_id, context_id=sent.context_id, sub=sent.sub
            )
            came = (response.status, await response.read())
            assert came == (200, sent.reply), (
                f"{sent.message_id} ({sent.sub}, failed attempts {sent.failures}) replayed as\n"
                f"  came:     {came[0]} {came[1]!r}\n  expected: 200 {sent.reply!r}"
            )
        assert len(self._bot.calls) == calls

    def bot_calls_beyond_attempts(self) -> dict[str, tuple[int, int]]:
        """Messages the bot ran more often than they were sent until answered: ``{id: (calls, attempts)}``.

        Only a failed attempt may have run the bot without its answer reaching the agent (a
        reply the store could not keep); a retry after an answer must never run it.
        """
        calls = Counter(call.body["message_id"] for call in self._bot.calls)
        return {
            sent.message_id: (calls[sent.message_id], len(sent.failures) + 1)
            for sent in self.answered
            if calls[sent.message_id] > len(sent.failures) + 1
        }
