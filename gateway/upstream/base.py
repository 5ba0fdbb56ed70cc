"""What every bot adapter takes and gives back, independent of the bot's own API."""

from __future__ import annotations

from typing import NamedTuple, Protocol

from gateway.ops.tracing import TraceContext


class UserDelegation(NamedTuple):
    """What a verified delegation token lets the bot do: act as Brand user ``user`` within ``scopes``."""

    user: str
    scopes: tuple[str, ...]
    grant_id: str


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
    delegation: UserDelegation | None = None
    """§5.5: the Brand user and scopes the turn may act with; ``None`` under §3 alone."""
    trace: TraceContext | None = None
    """The gateway's span the bot call belongs to: every adapter sends
    :func:`~gateway.ops.tracing.trace_headers` of it, so the bot's spans join the caller's trace."""


class Action(NamedTuple):
    """One tool call the bot made on the User's account, for the §5.6 receipt.

    ``canonical_args`` is the RFC 8785 canonical JSON of the call's arguments, made while the
    reply is parsed, so a bot's arguments that cannot be canonicalized are a bad reply and the
    receipt only ever hashes bytes.
    """

    tool: str
    canonical_args: bytes | None = None


class BotReply(NamedTuple):
    """What a bot answered: the text, whether it ends the conversation (§4.2), and its §5 claims.

    ``requires_scopes`` are the scopes the turn needs (missing ones make it a §5.5 step-up);
    ``actions`` and ``scopes_used`` are what it did on the User's account (the §5.6 receipt).
    """

    text: str
    end: bool = False
    requires_scopes: tuple[str, ...] = ()
    actions: tuple[Action, ...] = ()
    scopes_used: tuple[str, ...] = ()


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
