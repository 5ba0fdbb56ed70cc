"""What every bot adapter takes and gives back, independent of the bot's own API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Turn:
    """One user turn, as the gateway hands it to a bot after all PACT checks passed."""

    brand_id: str
    conversation_id: str
    message_id: str
    text: str
    pa_issuer: str
    sub: str
    new_conversation: bool
    request_id: str


@dataclass(frozen=True, slots=True)
class BotReply:
    text: str
    end: bool = False


class UpstreamError(Exception):
    """The bot did not answer usefully; ``reason`` is a bounded label for logs and metrics."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class BotAdapter(Protocol):
    async def send(self, turn: Turn) -> BotReply: ...
