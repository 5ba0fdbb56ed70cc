"""Every script the Redis stores run touches keys of one hash slot in the tagged layout (issue 20).

A Redis Cluster refuses a script whose keys live in different slots (and a multi-key command
likewise), so the tagged layout puts every key a conversation's script touches under its owner's
tag (gateway/store/keys.py). This records every command and script call the stores send through
their connection (``store.redis``) over a full tour, with ``slots.key_slot``: open, continue, replay,
a first message retried, an abort, a completion that closes, a delegated turn with its grant, both
§6 refusals, the separate limiter, the adapters' state, and the operator's list, close and erase.
The store runs as on a cluster (``reads_previous=False``: no untagged layout to read there, its keys
passed as ``""``; ``slot_bound``: the per-agent counter charged by a script of its own). The same
tour in the previous layout crosses slots: the check can fail.

It also counts round trips (calls in flight together are one): an accepted turn stays two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gateway.config import CacheConfig, KeyLayoutName, RateLimitsConfig, RateRule
from gateway.ops.limits import RateLimits
from gateway.process.erasure import PersonRecords
from gateway.store import keys
from gateway.store.base import GrantCheck, Owner, TurnStatus
from gateway.store.factory import open_adapter_state, open_conversation_admin, open_oauth_store
from gateway.store.limits import open_rate_limiter
from gateway.store.redis import RedisStore
from gateway.store.redis_pipe import Arg
from gateway.store.slots import key_slot
from tests.support.commands import Rounds, recorded_rounds
from tests.support.pa import ManualClock

ALICE = Owner("acme", "https://pa.example", "alice")
SCRIPTS = {"EVALSHA", "EVAL"}
MULTI_KEY = {"DEL", "MGET", "EXISTS"}


@dataclass
class Call:
    """One command or script call: its name, its keys ("" placeholders left out), its round."""

    name: str
    keys: list[bytes]
    round: int


@dataclass
class Recorder:
    calls: list[Call]

    @classmethod
    def of(cls, seen: Rounds) -> Recorder:
        return cls([Call(str(args[0]).upper(), _keys(args), number) for number, args in seen.sent])

    def slots(self, call: Call) -> set[int]:
        return {key_slot(key) for key in call.keys}

    def crossing(self) -> list[Call]:
        """Calls whose keys are not all in one slot: what a cluster would refuse."""
        return [call for call in self.calls if len(self.slots(call)) > 1]


def _keys(args: tuple[Arg, ...]) -> list[bytes]:
    name = str(args[0]).upper()
    if name in SCRIPTS:
        count = int(args[2])
        found = args[3 : 3 + count]
    elif name in MULTI_KEY:
        found = args[1:]
    elif name in {"PING", "WAIT"}:
        found = ()
    else:
        found = args[1:2]
    raw = [key.encode() if isinstance(key, str) else key for key in found if not isinstance(key, int)]
    return [key for key in raw if key]


@dataclass
class Tour:
    recorder: Recorder
    turn_rounds: list[int]
    """Round trips of each accepted turn (begin and complete)."""


async def tour(redis_url: str, layout: KeyLayoutName, clock: ManualClock) -> Tour:
    """Everything the stores do for one person, recorded."""
    config = CacheConfig(url=redis_url, key_layout=layout)
    tagged = layout == "tagged"
    store = RedisStore(config, clock=clock, reads_previous=not tagged, slot_bound=tagged)
    limiter = open_rate_limiter(store)
    rates = RateLimits(limiter)
    settings = RateLimitsConfig(per_agent=RateRule(100.0, 100), per_user=RateRule(100.0, 100))
    charge = rates.a2a_charge("acme", settings, ALICE.issuer, ALICE.sub)
    tag = keys.owner_tag(ALICE.digest)
    # Where keys.grant_key puts a grant minted for Alice in the tagged layout (its id carries her tag).
    grant_key = f"pact:acme:{{{tag}}}grant:a2agrant_{tag}" if layout == "tagged" else "pact:acme:grant:g-1"
    turn_rounds: list[int] = []
    try:
        with recorded_rounds(store.redis) as seen:
            await store.redis.execute("HSET", grant_key, "o", ALICE.digest, "e", int(clock()) + 3600)

            async def accepted(context: str | None, message: str, new: str = "", **extra: Any) -> str:
                before = seen.rounds
                claim = await store.begin_turn(ALICE, context, message, "hello " + message, new, **extra)
                assert claim.status is TurnStatus.NEW, claim
                await store.complete_turn(
                    ALICE, claim.context_id, message, b"reply " + message.encode(), close=False
                )
                turn_rounds.append(seen.rounds - before)
                return claim.context_id

            # Scripts are loaded (EVALSHA answered NOSCRIPT, then EVAL) by a first turn: not counted.
            await accepted(None, "warm", "ctx-warm", limits=charge.hits)
            await accepted("ctx-warm", "warm-2", limits=charge.hits)
            turn_rounds.clear()
            context = await accepted(None, "m1", "ctx-1", limits=charge.hits)  # open
            await accepted(context, "m2", limits=charge.hits)  # continue
            replay = await store.begin_turn(ALICE, context, "m2", "hello m2", "", limits=charge.hits)
            assert replay.status is TurnStatus.REPLAY
            retried = await store.begin_turn(ALICE, None, "m1", "hello m1", "ctx-x", limits=charge.hits)
            assert (retried.status, retried.context_id) == (TurnStatus.REPLAY, context)
            aborted = await store.begin_turn(ALICE, None, "m3", "hello m3", "ctx-3", limits=charge.hits)
            await store.abort_turn(ALICE, "ctx-3", "m3", new_conversation=aborted.new_conversation)
            claim = await store.begin_turn(ALICE, context, "m4", "bye", "", limits=charge.hits)
            await store.complete_turn(ALICE, context, "m4", b"farewell", close=True)
            assert claim.status is TurnStatus.NEW
            grant = GrantCheck(grant_key, "1" * 32)
            await accepted(None, "d1", "ctx-d", limits=charge.hits, grant=grant)  # delegated
            # §6 refusals: the per-person counter (in the turn's script), then the per-agent one (beside it).
            tight = RateLimitsConfig(per_agent=RateRule(100.0, 100), per_user=RateRule(0.001, 1))
            person = RateLimits(limiter).a2a_charge("acme", tight, ALICE.issuer, ALICE.sub)
            await store.begin_turn(ALICE, "ctx-d", "r1", "x", "", limits=person.hits, grant=grant)
            refused = await store.begin_turn(ALICE, "ctx-d", "r2", "x", "", limits=person.hits, grant=grant)
            assert refused.status is TurnStatus.RATE_LIMITED
            tight = RateLimitsConfig(per_agent=RateRule(0.001, 1), per_user=RateRule(100.0, 100))
            agent = RateLimits(limiter).a2a_charge("acme", tight, ALICE.issuer, "someone else")
            await limiter.hit_all(agent.hits)  # the separate path, as a malformed request charges
            agent = RateLimits(limiter).a2a_charge("acme", tight, ALICE.issuer, ALICE.sub)
            refused = await store.begin_turn(ALICE, "ctx-d", "r3", "x", "", limits=agent.hits)
            assert refused.status is TurnStatus.RATE_LIMITED
            await limiter.waits(agent.hits)
            state = open_adapter_state(store)
            state_key = keys.adapter_key("acme", "ctx-d", "openai")
            await state.put(state_key, b"history", 60)
            await state.get(state_key)
            await state.delete(state_key)
            admin = open_conversation_admin(store, config, ("openai", "directline"))
            records = PersonRecords(admin, open_oauth_store(store), clock, via="api")
            listed = await records.conversations(ALICE)
            assert {info.context_id for info in listed} >= {"ctx-1", "ctx-d"}
            assert await records.close(ALICE, "ctx-d")
            await admin.erase(ALICE, [])
    finally:
        await store.close()
    return Tour(Recorder.of(seen), turn_rounds)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_800_000_000.0)


@pytest.fixture
async def tagged(redis_url: str, clock: ManualClock) -> Tour:
    return await tour(redis_url, "tagged", clock)


async def test_every_script_and_command_touches_one_slot_in_the_tagged_layout(tagged: Tour) -> None:
    recorder = tagged.recorder
    scripts = [call for call in recorder.calls if call.name in SCRIPTS]
    assert len(scripts) > 30
    assert recorder.crossing() == []
    # The conversation's scripts all run in the owner's slot (the per-agent charge in its own).
    owner_slot = key_slot("{" + keys.owner_tag(ALICE.digest) + "}")
    conversation = keys.conv_key("acme", "", keys.owner_tag(ALICE.digest)).encode()
    touching = [call for call in scripts if any(key.startswith(conversation) for key in call.keys)]
    assert touching
    assert {slot for call in touching for slot in recorder.slots(call)} == {owner_slot}


async def test_an_accepted_turn_is_two_round_trips_with_both_counters(tagged: Tour) -> None:
    """Begin (the turn's script and the per-agent charge, sent together) and complete."""
    assert tagged.turn_rounds == [2, 2, 2]


async def test_the_previous_layout_crosses_slots_so_the_check_can_fail(
    redis_url: str, clock: ManualClock
) -> None:
    previous = await tour(redis_url, "previous", clock)
    assert previous.recorder.crossing()
