"""Load without loss (issue 12, deliverable 5): many Users at once, each reply the one its request asked for.

``pact-gateway serve`` runs as a real process in front of a real bot on loopback that echoes each
turn (:func:`tests.support.bot.echo_text`: the ``messageId``, the ``sub``, the conversation and the
text). A hundred Users of two personal agents each hold one conversation of eight turns at the same
time; some turns are sent twice (a personal agent whose answer got lost retries, §4.3), a first
turn sometimes without its ``contextId`` (the retry window). Every reply is checked against its
request, so a lost reply (an error, a missing answer) and a crossed one (another User's, another
turn's, another conversation's) both fail the test; a retry must return the first answer byte for
byte, and the bot must have run every turn exactly once, for the User who sent it.

Bounded by count, not by time: 800 turns and 267 retries per backend, a few seconds on the
development machine; every wait has a generous limit so a stuck run fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from gateway.protocol.errors import A2A_CONTENT_TYPE
from tests.ops.conftest import Processes, ServeProcess
from tests.support.bot import ControlledBot, echo_text
from tests.support.figures import record_figure
from tests.support.gateway import AUDIENCE, OTHER_PA, base_config
from tests.support.pa import FakeJwksServer, PAKey

USERS = 100
MAX_CONCURRENCY = 128
"""The Brand's bot-call cap, above ``USERS``: each User has one turn in flight at most, so a refusal
for the cap (a bare ``429``) would be the gateway's fault, not the load's."""
TURNS = 8
TEXTS = ("Hi, where is my order?", "It is A-10001.", "When will it arrive?", "Thanks!")
RUN_LIMIT = 120.0
"""Seconds the whole load may take before the test fails as stuck (it takes a few)."""


@dataclass
class Tally:
    """What the load saw: requests sent, and each way a reply can go wrong, counted apart."""

    requests: int = 0
    retries: int = 0
    lost: int = 0
    """No ``200`` A2A reply: an error status, a refused or broken connection, a timeout."""
    crossed: int = 0
    """A reply that is not the one its request asked for, or a retry that got other bytes."""
    details: list[str] = field(default_factory=list)

    @property
    def errors(self) -> int:
        return self.lost + self.crossed

    def note(self, what: str) -> None:
        if len(self.details) < 20:
            self.details.append(what)


@dataclass(frozen=True)
class User:
    issuer: str
    sub: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "A2A-Version": "1.0",
        }


def _retried(user_index: int, turn: int) -> bool:
    """Which turns a User sends twice: about a third, spread over first and later turns."""
    return (user_index + turn) % 3 == 0


async def _post(
    session: aiohttp.ClientSession, url: str, user: User, message: dict[str, Any], tally: Tally
) -> bytes | None:
    tally.requests += 1
    try:
        async with session.post(
            url, data=orjson.dumps({"message": message}), headers=user.headers
        ) as response:
            body = await response.read()
            if response.status == 200 and response.content_type == A2A_CONTENT_TYPE:
                return body
            what = f"HTTP {response.status} {body[:200]!r}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        what = f"{type(exc).__name__}: {exc}"
    tally.lost += 1
    tally.note(f"{user.sub} {message['messageId']}: {what}")
    return None


async def _conversation(
    session: aiohttp.ClientSession, url: str, index: int, user: User, tally: Tally
) -> str | None:
    """One User's turns, each reply checked against its request; the conversation's ``contextId``."""
    context_id: str | None = None
    for turn in range(TURNS):
        text = f"{TEXTS[turn % len(TEXTS)]} (turn {turn} of {user.sub})"
        message: dict[str, Any] = {
            "messageId": f"m-{uuid.uuid4().hex}",
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        if context_id is not None:
            message["contextId"] = context_id
        body = await _post(session, url, user, message, tally)
        if body is None:
            return None
        reply = orjson.loads(body)["message"]
        if context_id is None:
            context_id = reply["contextId"]
        call = {"message_id": message["messageId"], "user": {"sub": user.sub}, "conversation_id": context_id}
        expected = echo_text({**call, "text": text})
        if reply["contextId"] != context_id or reply["parts"] != [{"text": expected}]:
            tally.crossed += 1
            tally.note(f"{user.sub} turn {turn}: crossed reply {reply}")
            return None
        if _retried(index, turn):
            tally.retries += 1
            again = await _post(session, url, user, message, tally)
            if again is not None and again != body:
                tally.crossed += 1
                tally.note(f"{user.sub} turn {turn}: the retry got {again[:200]!r}, not the stored reply")
    return context_id


async def _load(served: ServeProcess, users: list[User]) -> tuple[Tally, list[str | None], float]:
    url = f"{served.base_url}/a2a/acme/message:send"
    tally = Tally()
    connector = aiohttp.TCPConnector(limit=len(users))
    started = time.monotonic()
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
        contexts = await asyncio.wait_for(
            asyncio.gather(*(_conversation(session, url, i, user, tally) for i, user in enumerate(users))),
            RUN_LIMIT,
        )
    return tally, list(contexts), time.monotonic() - started


async def test_many_users_at_once_get_every_reply_and_only_their_own(
    processes: Processes,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    pa_issuer: str,
    bot: ControlledBot,
    cache_url: str,
) -> None:
    bot.mode = "echo"
    raw = base_config(pa_issuer, jwks_server.jwks_uri, bot.url, cache_url)
    raw["brands"][0]["upstream"]["max_concurrency"] = MAX_CONCURRENCY
    served = await processes.new(raw).start()
    await served.ready()
    users = [
        User(issuer, f"load-user-{i}", es256_key.mint(issuer, f"load-user-{i}", AUDIENCE, ttl=300))
        for i in range(USERS)
        for issuer in [pa_issuer if i % 2 == 0 else OTHER_PA]
    ]

    tally, contexts, elapsed = await _load(served, users)
    record_figure(
        "load",
        backend="memory" if cache_url == "memory://" else "redis",
        users=USERS,
        turns=USERS * TURNS,
        retries=tally.retries,
        requests=tally.requests,
        errors=tally.errors,
        lost=tally.lost,
        crossed=tally.crossed,
        bot_calls=len(bot.calls),
        elapsed_s=round(elapsed, 2),
    )

    assert (tally.lost, tally.crossed) == (0, 0), tally.details
    assert None not in contexts
    assert len(set(contexts)) == USERS  # one conversation each, none shared
    # The bot ran every turn once, for the User who sent it, in that User's conversation; no retry reached it.
    owners = {context: user for context, user in zip(contexts, users, strict=True)}
    assert len(bot.calls) == USERS * TURNS
    assert Counter(call.body["message_id"] for call in bot.calls).most_common(1)[0][1] == 1
    for call in bot.calls:
        owner = owners[call.body["conversation_id"]]
        assert (call.body["user"]["pa"], call.body["user"]["sub"]) == (owner.issuer, owner.sub)
    # The process logged no error, and none of the Users' tokens.
    log_text = served.log_file.read_text(encoding="utf-8")
    assert [line for line in served.logs() if line["level"] in {"ERROR", "CRITICAL"}] == []
    assert not any(user.token in log_text for user in users)
