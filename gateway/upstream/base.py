"""What every bot adapter takes and gives back, independent of the bot's own API."""

from __future__ import annotations

from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Final, NamedTuple, Protocol

from gateway.ops.tracing import TraceContext
from gateway.protocol.receipts import Action as Action


class UserDelegation(NamedTuple):
    """What a verified delegation token lets the bot do: act as Brand user ``user`` within ``scopes``."""

    user: str
    scopes: tuple[str, ...]
    grant_id: str
    authorization_details: tuple[str, ...] = ()
    """RFC 9396: the token's approved details (canonical JSON each), the resources the bot may act on."""


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


class BotReply(NamedTuple):
    """What a bot answered: the text, whether it ends the conversation (§4.2), and its §5 claims.

    ``requires_scopes`` are the scopes the turn needs (missing ones make it a §5.5 step-up);
    ``actions`` and ``scopes_used`` are what it did on the User's account (the §5.6 receipt).
    RFC 9396: ``requires_details`` are the authorization details the turn needs, and
    ``action_details`` the detail each action says it used; the turn service checks both
    against the token's details, never the adapter.
    """

    text: str
    end: bool = False
    requires_scopes: tuple[str, ...] = ()
    actions: tuple[Action, ...] = ()
    scopes_used: tuple[str, ...] = ()
    requires_details: tuple[str, ...] = ()
    """``requires_authorization_details``: canonical JSON each, in the bot's order, each once."""
    action_details: tuple[str | None, ...] = ()
    """One per action of :attr:`actions` (or none at all when no action names one): the canonical
    JSON of the detail the action used, ``None`` for an action bound to no resource. Kept apart from
    :attr:`Action.authorization_detail`, which only ever holds the granted detail that covered it."""


class UpstreamError(Exception):
    """The bot did not answer usefully; ``reason`` is a bounded label for logs and metrics."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


MAX_THROTTLE_SECONDS: Final = 60.0
"""The longest a bot's own ``429`` keeps the gateway from calling it: a provider asking for an hour
must not take a Brand off the air for an hour on one answer."""
DEFAULT_THROTTLE_SECONDS: Final = 1.0
"""A ``429`` with no usable ``Retry-After``: wait as long as a turn refused at the concurrency cap."""


def retry_after_seconds(value: str | None, now: float) -> float:
    """RFC 9110 §10.2.3 ``Retry-After``: delay-seconds or an HTTP-date (against the wall clock ``now``).

    Anything else, or nothing, is :data:`DEFAULT_THROTTLE_SECONDS`; the result is bounded to
    ``[0, MAX_THROTTLE_SECONDS]``.
    """
    if value is None:
        return DEFAULT_THROTTLE_SECONDS
    value = value.strip()
    if value.isascii() and value.isdigit():
        return min(float(value), MAX_THROTTLE_SECONDS)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return DEFAULT_THROTTLE_SECONDS
    if when.tzinfo is None:  # RFC 9110 §5.6.7: an HTTP-date is GMT
        when = when.replace(tzinfo=UTC)
    return min(max(when.timestamp() - now, 0.0), MAX_THROTTLE_SECONDS)


class UpstreamThrottled(UpstreamError):
    """The bot (or its model provider) answered ``429``: stop calling it for ``retry_after`` seconds.

    An :class:`UpstreamError` (reason ``throttled``), so a caller with no guard, such as
    ``check-config --probe``, reports it as a failure; :class:`~gateway.upstream.guard.GuardedBot`
    instead holds every turn back for the bot until then and answers them like :class:`BotBusy`.
    ``retry_after`` is bounded to ``[0, MAX_THROTTLE_SECONDS]``.
    """

    def __init__(self, retry_after: float, detail: str = "") -> None:
        super().__init__("throttled", detail)
        self.retry_after = min(max(retry_after, 0.0), MAX_THROTTLE_SECONDS)


class BotBusy(Exception):
    """The bot is at its concurrency cap and no slot freed in time: answer a bare 429 (§6).

    Not a bot failure (the circuit breaker ignores it) and nothing was sent to the bot, so the
    turn's in-flight marker must be released for the personal agent's retry to run it.
    """

    def __init__(self, retry_after: int, limit: str) -> None:
        super().__init__(f"bot busy ({limit}); retry after {retry_after} s")
        self.retry_after = retry_after
        self.limit = limit
        """Why the turn was held back (``concurrency``, ``upstream_retry_after``, …): the same bounded
        name the metric counts it under, so the access line and the metric agree."""


class BotAdapter(Protocol):
    async def send(self, turn: Turn) -> BotReply:
        """Run one turn; :class:`UpstreamError` (a bounded ``reason``) when the bot gave no useful answer."""
        ...

    async def probe(self) -> str:
        """One harmless request to the bot (it starts no conversation there), for ``check-config --probe``.

        Returns one line saying what answered; raises :class:`UpstreamError` when nothing useful did.
        Each adapter documents which request it sends and why it is harmless.
        """
        ...
