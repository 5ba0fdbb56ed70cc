"""What every bot adapter takes and gives back, independent of the bot's own API."""

from __future__ import annotations

from typing import NamedTuple, Protocol


class Turn(NamedTuple):
    """One user turn, as the gateway hands it to a bot after all PACT checks passed.

    A named tuple rather than a frozen dataclass: equally immutable, and built once per turn
    for half the cost (a frozen dataclass sets each field through ``object.__setattr__``).
    """

    brand_id: str
    conversation_id: str
    message_id: str
    text: str
    pa_issuer: str
    sub: str
    new_conversation: bool
    request_id: str


class BotReply(NamedTuple):
    """What a bot answered: the text, and whether it ends the conversation (§4.2)."""

    text: str
    end: bool = False


class UpstreamError(Exception):
    """The bot did not answer usefully; ``reason`` is a bounded label for logs and metrics."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class BotBusy(Exception):
    """The bot is at its concurrency cap and no slot freed in time: answer a bare 429 (§6).

    Not a bot failure (the circuit breaker ignores it) and nothing was sent to the bot, so the
    turn's in-flight marker must be released for the personal agent's retry to run it.
    """

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"bot busy; retry after {retry_after} s")
        self.retry_after = retry_after


class BotAdapter(Protocol):
    async def send(self, turn: Turn) -> BotReply: ...
