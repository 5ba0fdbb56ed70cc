"""Issue 17: one person's conversations cost O(1) each, and ``cache.max_entries`` bounds the memory store.

Costs are counted, never timed: the bytes a new conversation allocates at its peak (tracemalloc,
which an index rebuilt per conversation shows growing with the person's count), and the keys the
bound's eviction looks at. The bound's rule: expired and closed entries go first; a live
conversation or a stored reply a retry may still ask for is never dropped, the new conversation
is refused instead (``STORE_FULL``), seen by the agent as a bare 429, by the operator in the log
and on ``/metrics``.
"""

from __future__ import annotations

import gc
import logging
import statistics
import tracemalloc
from collections import deque
from typing import Any

import orjson
import pytest

from gateway.config import CacheConfig
from gateway.handlers.state import METRICS
from gateway.ops.metrics import Metrics
from gateway.store import Owner, TurnStatus
from gateway.store import keys as store_keys
from gateway.store.admin_memory import MemoryConversationAdmin
from gateway.store.gcra import Hit, Rule
from gateway.store.memory import MemoryKeyspace, MemoryStore
from tests.ops.test_rate_limits import bare_429, ok
from tests.support.gateway import MakeGateway
from tests.support.pa import ManualClock
from tests.support.waiting import until

ALICE = Owner("acme", "https://pa.example", "alice")
SETTINGS: dict[str, Any] = {
    "conversation_ttl": 100,
    "closed_ttl": 1000,
    "retry_window": 30,
    "pending_ttl": 10,
    "person_share": 1.0,  # the tests of the share set their own
}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_800_000_000.0)


async def opened(
    store: MemoryStore, owner: Owner, tag: str, *, answer: bool = True, close: bool = False
) -> str:
    """One new conversation of ``owner``, answered (or left in flight); its ``contextId``."""
    claim = await store.begin_turn(owner, None, f"m-{tag}", f"hello {tag}", f"ctx-{tag}")
    assert claim.status is TurnStatus.NEW, claim
    if answer:
        await store.complete_turn(owner, claim.context_id, f"m-{tag}", f"reply {tag}".encode(), close=close)
    return claim.context_id


async def peak_bytes_per_new_conversation(store: MemoryStore, held: int, samples: int = 41) -> float:
    """The median over ``samples`` new conversations of what one allocates at its peak, once
    ALICE holds ``held`` conversations."""
    for index in range(held):
        await opened(store, ALICE, f"fill-{index}", answer=False)
    peaks: list[int] = []
    tracemalloc.start()
    try:
        for index in range(samples):
            current, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            await opened(store, ALICE, f"probe-{held}-{index}", answer=False)
            peaks.append(tracemalloc.get_traced_memory()[1] - current)
    finally:
        tracemalloc.stop()
    return statistics.median(peaks)


async def test_a_new_conversation_costs_the_same_at_a_persons_1000th_and_100000th(clock: ManualClock) -> None:
    """Issue 17 row 2: O(1) per new conversation per person. The old index, one tuple rebuilt per
    new conversation, allocated 16 bytes per conversation held each time (1.6 MB at 100,000)."""
    small = MemoryStore(CacheConfig(**SETTINGS, max_entries=None), clock=clock)
    large = MemoryStore(CacheConfig(**SETTINGS, max_entries=None), clock=clock)
    at_1k = await peak_bytes_per_new_conversation(small, 1_000)
    at_100k = await peak_bytes_per_new_conversation(large, 100_000)
    assert at_100k <= 1.2 * at_1k, (at_1k, at_100k)
    assert at_100k < 4096, at_100k  # a few records and keys, nothing in proportion to the 100,000
    # Still every conversation listed: the index lost none of them growing.
    listed = await MemoryConversationAdmin(large.keyspace, large._config, ()).conversations(ALICE)
    assert len(listed) == 100_041
    await small.close()
    await large.close()


async def test_a_large_index_drops_its_dead_conversations_and_lists_the_live(clock: ManualClock) -> None:
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=None), clock=clock)
    admin = MemoryConversationAdmin(store.keyspace, store._config, ())
    early = [await opened(store, ALICE, f"early-{index}") for index in range(20)]
    clock.advance(SETTINGS["conversation_ttl"] + SETTINGS["closed_ttl"] + 1)  # all of them gone
    late = [await opened(store, ALICE, f"late-{index}") for index in range(50)]
    index = store.keyspace.entries[ALICE.digest_bytes]
    held = index[2]
    assert type(held) is dict
    assert len(held) <= 2 * 50  # pruned as it doubled: the early ones left it
    assert not {store_keys.conversation_key("acme", context) for context in early} & held.keys()
    assert sorted(info.context_id for info in await admin.conversations(ALICE)) == sorted(late)
    await store.close()


class CountingRing(deque[Any]):
    """The sweep's ring, counting the keys taken off its front."""

    taken = 0

    def popleft(self) -> Any:
        self.taken += 1
        return super().popleft()


async def keys_looked_at_by_a_refusal(clock: ManualClock, live: int) -> int:
    """A store held full by ``live`` live conversations: the keys one refused conversation looks at."""
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=3 * live), clock=clock)
    for index in range(live):
        await opened(store, Owner("acme", "https://pa.example", f"user-{index}"), f"{index}")
    ring = CountingRing(store.keyspace._ring)
    store.keyspace._ring = ring
    claim = await store.begin_turn(ALICE, None, "m-new", "hello", "ctx-new")
    assert claim.status is TurnStatus.STORE_FULL
    await store.close()
    return ring.taken


async def test_making_room_looks_at_the_same_few_keys_at_1000_and_20000_entries(clock: ManualClock) -> None:
    small = await keys_looked_at_by_a_refusal(clock, 1_000)
    large = await keys_looked_at_by_a_refusal(clock, 20_000)
    assert small == large == MemoryKeyspace.EVICT_SCAN


async def test_expired_then_closed_entries_go_first_at_the_bound(clock: ManualClock) -> None:
    metrics = Metrics()
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=9), clock=clock, observer=metrics)
    bob = Owner("acme", "https://pa.example", "bob")
    closed = await opened(store, ALICE, "closed", close=True)
    await opened(store, ALICE, "open")
    await opened(store, bob, "bob")
    assert len(store.keyspace.entries) == 8  # 3 records, 3 first-message records, 2 indexes
    clock.advance(SETTINGS["retry_window"] + 1)  # the first-message records expire; nothing is swept
    for index in range(3):  # bob has an index: 2 entries each
        await opened(store, bob, f"later-{index}")
    evictions = metrics.registry.get_sample_value
    assert evictions("pact_store_evictions_total", {"reason": "expired"}) == 3.0
    # The closed conversation (its reply older than the retry window) made room before any open one.
    assert evictions("pact_store_evictions_total", {"reason": "closed"}) == 1.0
    claim = await store.begin_turn(ALICE, closed, "m-2", "again", "")
    assert claim.status is TurnStatus.UNKNOWN_CONTEXT
    assert len(store.keyspace.entries) <= 9
    await store.close()


async def test_a_stored_reply_within_retry_window_survives_the_bound(clock: ManualClock) -> None:
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=6), clock=clock)
    # Closed at once: only the retry window keeps its reply from being dropped for room.
    context = await opened(store, ALICE, "first", close=True)
    await opened(store, ALICE, "second")
    limit = Hit("pact:acme:rl:per_user:alice", Rule(1, 1))
    refused = await store.begin_turn(ALICE, None, "m-third", "third", "ctx-third", limits=[limit])
    assert refused.status is TurnStatus.STORE_FULL
    # Nothing charged: the same limit still lets one turn through.
    retried = await store.begin_turn(ALICE, None, "m-first", "hello first", "ctx-other", limits=[limit])
    assert retried.status is TurnStatus.REPLAY
    assert (retried.context_id, retried.reply) == (context, b"reply first")
    # A turn of an open conversation is never refused for room.
    assert (await store.begin_turn(ALICE, "ctx-second", "m-2", "more", "")).status is TurnStatus.NEW
    await store.close()


async def test_a_running_turn_keeps_its_closed_conversation(clock: ManualClock) -> None:
    # In flight longer than the retry window: the turn outlives it.
    store = MemoryStore(CacheConfig(**{**SETTINGS, "pending_ttl": 60}, max_entries=3), clock=clock)
    context = await opened(store, ALICE, "first")
    assert (await store.begin_turn(ALICE, context, "m-2", "more", "")).status is TurnStatus.NEW
    admin = MemoryConversationAdmin(store.keyspace, store._config, ())
    assert await admin.close(ALICE, context)  # closed while its second turn runs
    clock.advance(SETTINGS["retry_window"] + 1)
    store.keyspace.sweep()  # its first-message record goes: the conversation is what could make room
    assert (await store.begin_turn(ALICE, None, "m-new", "new", "ctx-new")).status is TurnStatus.STORE_FULL
    await store.complete_turn(ALICE, context, "m-2", b"late reply", close=False)
    assert (await store.begin_turn(ALICE, context, "m-2", "more", "")).reply == b"late reply"
    await store.close()


async def test_a_full_store_refuses_a_new_conversation_with_a_bare_429(
    make_gateway: MakeGateway, caplog: pytest.LogCaptureFixture
) -> None:
    """What each side sees: the agent a 429 with Retry-After, the operator a log line and the metrics;
    the conversation already open goes on, and its first message's retry is still answered."""

    def bounded(raw: dict[str, Any]) -> None:
        # The first conversation's 3 entries (record, first message, index); a second needs 2 more.
        raw["cache"]["max_entries"] = 4

    gw = await make_gateway(edit=bounded)
    first = await gw.send("Hi, where is my order?", message_id="m-1")
    await ok(first)
    context = orjson.loads(await first.read())["message"]["contextId"]
    with caplog.at_level(logging.WARNING, logger="pact_gateway.turns"):
        assert await bare_429(await gw.send("A new question", message_id="m-2")) == 60
    assert "store full: 1 new conversation(s) refused with 429" in caplog.text
    assert len(gw.bot.calls) == 1
    await ok(await gw.send("And my refund?", message_id="m-3", context_id=context))
    replay = await gw.send("Hi, where is my order?", message_id="m-1")
    await ok(replay)
    assert orjson.loads(await replay.read())["message"]["contextId"] == context
    app = gw.client.app
    assert app is not None
    sample = app[METRICS].registry.get_sample_value
    assert sample("pact_rate_limited_total", {"brand": "acme", "limit": "store_full"}) == 1.0
    await until(lambda: sample("pact_store_max_entries") == 4.0)
    assert sample("pact_store_entries") == 3.0


async def test_at_the_bound_the_least_recently_used_idle_conversation_makes_room(clock: ManualClock) -> None:
    """Issue 29 item 1: a full store of open conversations evicts like a cache, the least recently
    used idle one first (before: every new conversation was refused with STORE_FULL)."""
    metrics = Metrics()
    # Three people's conversations, each its record and its owner's index once the sweep took the
    # first-message records: 6 entries; a fourth person's needs 3 more.
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=8), clock=clock, observer=metrics)
    people = {name: Owner("acme", "https://pa.example", name) for name in ("ann", "ben", "cat")}
    contexts = {name: await opened(store, people[name], name) for name in ("ann", "ben")}
    clock.advance(SETTINGS["retry_window"] + 1)
    store.keyspace.sweep()
    contexts["cat"] = await opened(store, people["cat"], "cat")
    clock.advance(1)
    # Ann, who opened first, used hers after cat opened: ben's is now the least recently used.
    assert (
        await store.begin_turn(people["ann"], contexts["ann"], "m-2", "more", "")
    ).status is TurnStatus.NEW
    await store.complete_turn(people["ann"], contexts["ann"], "m-2", b"reply", close=False)
    clock.advance(SETTINGS["retry_window"] + 1)
    store.keyspace.sweep()
    assert len(store.keyspace.entries) == 6
    dan = Owner("acme", "https://pa.example", "dan")
    assert (await store.begin_turn(dan, None, "m-dan", "hello", "ctx-dan")).status is TurnStatus.NEW
    assert (await store.begin_turn(people["ben"], contexts["ben"], "m-2", "x", "")).status is (
        TurnStatus.UNKNOWN_CONTEXT
    )
    for name in ("ann", "cat"):
        assert (await store.begin_turn(people[name], contexts[name], "m-3", "x", "")).status is TurnStatus.NEW
    assert metrics.registry.get_sample_value("pact_store_evictions_total", {"reason": "idle"}) == 1.0
    # Ben's index went with his only conversation: it does not hold his place in the store.
    assert people["ben"].digest_bytes not in store.keyspace.entries
    assert len(store.keyspace.entries) <= 8
    await store.close()


async def test_an_idle_conversation_within_retry_window_or_running_is_not_evicted(clock: ManualClock) -> None:
    """Only what may go goes: a stored reply inside ``retry_window`` and a running turn keep their
    conversation, and a new one is refused (429) when nothing else can go."""
    store = MemoryStore(CacheConfig(**{**SETTINGS, "pending_ttl": 60}, max_entries=5), clock=clock)
    running = Owner("acme", "https://pa.example", "running")
    context = await opened(store, running, "running")
    clock.advance(SETTINGS["retry_window"] + 1)
    store.keyspace.sweep()
    assert (await store.begin_turn(running, context, "m-2", "more", "")).status is TurnStatus.NEW
    replied = await opened(store, ALICE, "replied")  # its reply is inside the retry window
    store.keyspace.sweep()
    assert (await store.begin_turn(Owner("acme", "https://pa.example", "x"), None, "m", "t", "c")).status is (
        TurnStatus.STORE_FULL
    )
    await store.complete_turn(running, context, "m-2", b"late reply", close=False)
    assert (await store.begin_turn(running, context, "m-2", "more", "")).reply == b"late reply"
    assert (
        await store.begin_turn(ALICE, replied, "m-replied", "hello replied", "")
    ).reply == b"reply replied"
    await store.close()


async def test_a_person_past_their_share_makes_room_from_their_own_conversations(clock: ManualClock) -> None:
    """Issue 29 item 2 on the store: past ``cache.person_share`` a person's new conversation evicts
    their own least recently used one, never anyone else's."""
    metrics = Metrics()
    # 30 entries, a share of 0.3: 4 conversations a person (2 entries each, and an index).
    store = MemoryStore(
        CacheConfig(**{**SETTINGS, "person_share": 0.3}, max_entries=30), clock=clock, observer=metrics
    )
    assert store.person_limit == 4
    bob = Owner("acme", "https://pa.example", "bob")
    bobs = await opened(store, bob, "bob")
    hoarded = [await opened(store, ALICE, f"hoard-{index}") for index in range(4)]
    claim = await store.begin_turn(ALICE, None, "m-5", "t", "ctx-5")
    assert claim.status is TurnStatus.STORE_FULL  # her share is full and none of hers may go yet
    clock.advance(SETTINGS["retry_window"] + 1)
    for index in range(4, 12):
        assert (
            await store.begin_turn(ALICE, None, f"m-{index}", "t", f"ctx-{index}")
        ).status is TurnStatus.NEW
        await store.complete_turn(ALICE, f"ctx-{index}", f"m-{index}", b"r", close=False)
        clock.advance(SETTINGS["retry_window"] + 1)
    # Bob's is still there (closed by now: idle past conversation_ttl, but not forgotten).
    assert (await store.begin_turn(bob, bobs, "m-2", "still here", "")).status is TurnStatus.CLOSED
    assert metrics.registry.get_sample_value("pact_store_evictions_total", {"reason": "share"}) == 8.0
    assert metrics.registry.get_sample_value("pact_store_evictions_total", {"reason": "idle"}) is None
    # Her oldest went first; her newest is there.
    assert (await store.begin_turn(ALICE, hoarded[0], "m-x", "x", "")).status is TurnStatus.UNKNOWN_CONTEXT
    assert (await store.begin_turn(ALICE, "ctx-11", "m-x", "x", "")).status is TurnStatus.NEW
    assert len(await MemoryConversationAdmin(store.keyspace, store._config, ()).conversations(ALICE)) == 4
    assert len(store.keyspace.entries) <= 30
    await store.close()


def hoarding(raw: dict[str, Any]) -> None:
    # 400 entries, a person's share 0.25: 50 conversations each.
    raw["cache"].update(max_entries=400, person_share=0.25, retry_window=30)
    raw["rate_limits"]["per_agent"] = {"rate": 1000, "burst": 100_000}


async def test_a_hoarder_cannot_take_the_store_from_other_people(
    make_gateway: MakeGateway, clock: ManualClock
) -> None:
    """Issue 29 item 2 through HTTP: one person fills the store and keeps opening conversations;
    another person's 50 new conversations are all answered, and the hoarder's newest still works
    (before: once full of open conversations, every new one of everyone got a 429 for days)."""
    metrics = Metrics()
    gw = await make_gateway(edit=hoarding, clock=clock, metrics=metrics)

    async def hoard(count: int) -> str:
        context = ""
        for _ in range(count):
            response = await gw.send("mine", sub="hoarder")
            if response.status != 200:
                assert await bare_429(response) == 60
                break
            context = orjson.loads(await response.read())["message"]["contextId"]
        return context

    await hoard(100)  # until refused: their share is full and nothing of theirs may go yet
    clock.advance(31)
    newest = await hoard(100)  # and on, past the retry window: their own make room
    clock.advance(31)
    newest = await hoard(100) or newest
    for index in range(50):
        await ok(await gw.send(f"question {index}", sub="honest"))
    await ok(await gw.send("still mine", sub="hoarder", context_id=newest))
    app = gw.client.app
    assert app is not None
    sample = app[METRICS].registry.get_sample_value
    assert sample("pact_rate_limited_total", {"brand": "acme", "limit": "store_full"}) == 3.0  # the hoarder's
    assert sample("pact_store_evictions_total", {"reason": "share"}) == 100.0


async def test_s4_2_an_evicted_conversation_answers_unknown_context(
    make_gateway: MakeGateway, clock: ManualClock
) -> None:
    """Dropped for room, a conversation's next turn gets the §4.2 unknown-context answer, and the
    agent's new conversation (no contextId) is answered."""

    def bounded(raw: dict[str, Any]) -> None:
        # Two people's conversations and §6 counters (a person's, the agent's) fill it; a third fits.
        raw["cache"].update(max_entries=12, retry_window=30)

    gw = await make_gateway(edit=bounded, clock=clock)
    first = await gw.send("Hi, where is my order?", sub="ann")
    await ok(first)
    context = orjson.loads(await first.read())["message"]["contextId"]
    clock.advance(31)
    for sub in ("ben", "cat", "dan"):
        await ok(await gw.send("Hello", sub=sub))
    response = await gw.send("And my refund?", sub="ann", context_id=context)
    clock.advance(31)
    assert response.status == 400
    error = orjson.loads(await response.read())["error"]
    assert (error["details"][0]["reason"], error["message"]) == ("INVALID_PARAMS", "Unknown contextId")
    await ok(await gw.send("And my refund?", sub="ann"))


async def test_idle_conversations_behind_a_run_of_busy_keys_still_make_room(clock: ManualClock) -> None:
    """The 32 keys at the ring's front may all be busy (answered within retry_window) while idle
    conversations wait behind them: the sweep notes those as it passes, so a new conversation is
    answered rather than refused while something may go."""
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=120), clock=clock)
    people = [Owner("acme", "https://pa.example", f"p-{index}") for index in range(40)]
    contexts = [await opened(store, owner, f"{index}") for index, owner in enumerate(people)]
    clock.advance(SETTINGS["retry_window"] + 1)
    store.keyspace.sweep()  # the first-message records go: 40 records and 40 indexes
    for owner, context in zip(people[:20], contexts[:20], strict=True):  # the ring's front: busy again
        assert (await store.begin_turn(owner, context, "m-busy", "more", "")).status is TurnStatus.NEW
        await store.complete_turn(owner, context, "m-busy", b"reply", close=False)
    while store.keyspace.fits(3):
        tag = f"new-{len(store.keyspace.entries)}"
        await opened(store, Owner("acme", "https://pa.example", tag), tag)
    store.keyspace.sweep()  # one tick (the whole ring, at this size), as every 0.25 s
    late = Owner("acme", "https://pa.example", "late")
    assert (await store.begin_turn(late, None, "m-late", "hello", "ctx-late")).status is TurnStatus.NEW
    assert (await store.begin_turn(people[0], contexts[0], "m-again", "x", "")).status is TurnStatus.NEW
    await store.close()


async def test_the_keyspace_dictionary_is_never_untracked_so_it_stays_frozen(clock: ManualClock) -> None:
    """Issue 29 item 3: a plain dict whose records are all untracked is untracked by a full collection
    and tracked again, young, at the next write: the next young collection then walked every entry
    (46.7 ms at 300,000, python -m bench memory --at-bound). The keyspace's dict is never untracked."""
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=None), clock=clock)
    for index in range(100):
        await opened(store, Owner("acme", "https://pa.example", f"p-{index}"), f"{index}")
    for _ in range(3):  # the turns tuples, then the records, then the dict of them all (were it plain)
        gc.collect()
    assert gc.is_tracked(store.keyspace.entries)
    tracked = len(gc.get_objects())
    for index in range(1000):
        await opened(store, Owner("acme", "https://pa.example", f"q-{index}"), f"q{index}")
    gc.collect()
    gc.collect()
    # Stored records are tuples of atoms: once collections have looked at them (a record after the
    # turns tuple inside it), none is tracked.
    assert len(gc.get_objects()) - tracked <= 1000 * 0.05
    assert not any(gc.is_tracked(entry) for entry in store.keyspace.entries.values())
    await store.close()


async def test_the_store_collects_its_new_records_every_few_thousand_writes(clock: ManualClock) -> None:
    """Issue 29 item 3: at a steady state (the bound, or expiry keeping pace) CPython's young count
    stays level, as the old records dropped count as deallocations, while new records pile up
    tracked in the young generation (a 77 ms collection at five times the bound). The sweep's tick
    collects them once enough were written: none stays tracked for the next collection to walk."""
    store = MemoryStore(CacheConfig(**SETTINGS, max_entries=None), clock=clock)
    gc.disable()  # only the store's own collection may run
    try:
        writes = MemoryKeyspace.YOUNG_COLLECT_WRITES
        for index in range(writes // 2):  # two records each: opened, answered
            await opened(store, Owner("acme", "https://pa.example", f"p-{index}"), f"{index}")
        assert store.keyspace.writes == writes
        assert any(gc.is_tracked(entry) for entry in store.keyspace.entries.values())
        store.keyspace.collect_young()
        assert store.keyspace.writes == 0
        assert not any(gc.is_tracked(entry) for entry in store.keyspace.entries.values())
    finally:
        gc.enable()
    await store.close()
