"""A bot call in a span of its own, when tracing is on: the span the bot is told is its parent.

Wrapped around a Brand's guarded bot only when spans are recorded (``tracing.otlp_endpoint``),
so a gateway without tracing pays nothing. The span covers what the turn waits for: a
concurrency slot, and the call itself, or the refusal of an open circuit (``error.type``
``circuit_open``). The adapter inside sends this span's id as the ``traceparent``.
"""

from __future__ import annotations

from gateway.ops.tracing import Spans
from gateway.upstream.base import BotAdapter, BotReply, Turn

__all__ = ["TracedBot"]


class TracedBot:
    """``inner``'s calls, each in a client span ``pact.bot.call`` carrying the Brand id."""

    def __init__(self, inner: BotAdapter, spans: Spans) -> None:
        self._inner = inner
        self._spans = spans

    async def send(self, turn: Turn) -> BotReply:
        with self._spans.span("pact.bot.call", {"pact.brand": turn.brand_id}, client=True) as trace:
            return await self._inner.send(turn._replace(trace=trace))

    async def probe(self) -> str:
        """``check-config --probe`` checks the bot itself: nothing to trace."""
        return await self._inner.probe()
