"""The memory backend's expiry without timers: deadlines inside the entries, a sweep that deletes them.

An entry past its deadline reads as absent at once; the sweep only reclaims its memory. Time
is a :class:`ManualClock`; the sweep runs every 10 ms, so no test sleeps more than 0.5 s.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator

import pytest

from gateway.config import CacheConfig
from gateway.store import Owner, TurnStatus
from gateway.store import keys as store_keys
from gateway.store.gcra import Hit, Rule
from gateway.store.limits import open_rate_limiter
from gateway.store.memory import MemoryKeyspace, MemoryStore
from tests.support.gateway import MakeGateway
from tests.support.pa import ManualClock
from tests.support.waiting import until

ALICE = Owner("acme", "https://pa.example", "alice")
CONFIG = CacheConfig(conversation_ttl=100, closed_ttl=1000, retry_window=30, pending_ttl=10)
CONVERSATION = store_keys.conversation_key("acme", "ctx-1")
FIRST = store_keys.first_message_key("acme", ALICE.digest, "m1")
COUNTER = "pact:acme:rl:per_user:abc"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=1_800_000_000.0)


@pytest.fixture
async def store(clock: ManualClock) -> AsyncIterator[MemoryStore]:
    backend = MemoryStore(CONFIG, clock=clock, sweep_interval=0.01)
    yield backend
    await backend.close()


async def answered(
    store: MemoryStore, *, close: bool = False, context_id: str = "ctx-1", message_id: str = "m1"
) -> None:
    claim = await store.begin_turn(ALICE, None, message_id, "hello", context_id)
    assert claim.status is TurnStatus.NEW
    await store.complete_turn(ALICE, context_id, message_id, b"r1", close=close)


async def test_sweep_deletes_expired_records_first_messages_and_counters(
    store: MemoryStore, clock: ManualClock
) -> None:
    await store.start()
    entries = store.keyspace.entries
    await answered(store)
    await answered(store, close=True, context_id="ctx-closed", message_id="m-bye")
    assert await open_rate_limiter(store).hit(COUNTER, rate=1, burst=5) == 0.0
    assert {CONVERSATION, FIRST, COUNTER} <= entries.keys()

    clock.advance(30)  # the counter is idle after 1 s, the retry window ends at 30 s
    await until(lambda: FIRST not in entries and COUNTER not in entries, limit=0.5)
    assert CONVERSATION in entries
    clock.advance(1000 - 30)  # a closed conversation is remembered closed_ttl
    await until(lambda: store_keys.conversation_key("acme", "ctx-closed") not in entries, limit=0.5)
    assert CONVERSATION in entries
    clock.advance(100)  # an open one idle_ttl + closed_ttl after its last turn
    await until(lambda: not entries, limit=0.5)


async def test_a_turn_keeps_its_conversation_from_the_sweep(store: MemoryStore, clock: ManualClock) -> None:
    await store.start()
    await answered(store)
    clock.advance(90)
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")).status is TurnStatus.NEW
    await store.complete_turn(ALICE, "ctx-1", "m2", b"r2", close=False)
    clock.advance(1050)  # 1140 s after the first turn, 1050 after the last
    await asyncio.sleep(0.05)
    replay = await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")
    assert (replay.status, replay.reply) == (TurnStatus.REPLAY, b"r2")


async def test_an_aborted_first_turn_is_expired_in_place_and_swept(
    store: MemoryStore, clock: ManualClock
) -> None:
    await store.start()
    entries = store.keyspace.entries
    claim = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    await store.abort_turn(ALICE, "ctx-1", "m1", new_conversation=claim.new_conversation)
    assert (await store.begin_turn(ALICE, "ctx-1", "m2", "x", "u")).status is TurnStatus.UNKNOWN_CONTEXT
    await until(lambda: CONVERSATION not in entries and FIRST not in entries, limit=0.5)


async def test_expired_but_unswept_entries_read_as_absent(store: MemoryStore, clock: ManualClock) -> None:
    """No sweep runs here (never started): every expired entry is still in the dict, and reads as gone."""
    entries = store.keyspace.entries
    await answered(store)
    limiter = open_rate_limiter(store)
    assert [await limiter.hit(COUNTER, rate=1, burst=2) for _ in range(3)] == [0.0, 0.0, 1.0]

    clock.advance(30)
    # The retry window is over: the same first message opens a second conversation.
    again = await store.begin_turn(ALICE, None, "m1", "hello", "ctx-2")
    assert (again.status, again.context_id) == (TurnStatus.NEW, "ctx-2")
    # An idle counter is a full burst again.
    assert [await limiter.hit(COUNTER, rate=1, burst=2) for _ in range(3)] == [0.0, 0.0, 1.0]

    clock.advance(1100 - 30)
    assert CONVERSATION in entries  # expired, unswept
    assert (await store.begin_turn(ALICE, "ctx-1", "m1", "hello", "u")).status is TurnStatus.UNKNOWN_CONTEXT
    await store.abort_turn(ALICE, "ctx-1", "m1", new_conversation=True)  # a no-op on what is gone
    # complete_turn on an expired record starts a fresh one, as it does for a missing record.
    await store.complete_turn(ALICE, "ctx-1", "m9", b"r9", close=False)
    assert (await store.begin_turn(ALICE, "ctx-1", "m1", "hello", "u")).status is TurnStatus.NEW


def expired_counters(keyspace: MemoryKeyspace, clock: ManualClock, count: int, tag: str) -> None:
    """``count`` counters idle 1 ms after now, then a second later."""
    for n in range(count):
        keyspace.charge([Hit(f"{tag}-{n}", Rule(rate=1000, burst=1))], int(clock() * 1_000_000))


async def test_sweep_work_per_tick_is_bounded(clock: ManualClock) -> None:
    keyspace = MemoryKeyspace(clock)
    total = 4 * MemoryKeyspace.SWEEP_MIN_BATCH + 100
    live = [Hit(f"live-{n}", Rule(rate=0.001, burst=1)) for n in range(10)]
    expired_counters(keyspace, clock, total, "idle")
    for hit in live:
        keyspace.charge([hit], int(clock() * 1_000_000))
    clock.advance(1)
    deleted = [keyspace.sweep() for _ in range(6)]
    assert max(deleted) <= MemoryKeyspace.SWEEP_MIN_BATCH
    assert sum(deleted) == total
    assert sorted(keyspace.entries) == sorted(hit.key for hit in live)
    assert keyspace.sweep() == 0  # the live keys go round again


async def test_the_sweep_goes_round_every_key_once_per_pass(clock: ManualClock) -> None:
    """Live keys go to the back of the ring and new ones join it there: each is looked at in turn."""
    keyspace = MemoryKeyspace(clock)
    batch = MemoryKeyspace.SWEEP_MIN_BATCH
    now = int(clock() * 1_000_000)
    for n in range(batch):
        keyspace.charge([Hit(f"long-{n}", Rule(rate=0.001, burst=1))], now)  # idle in 1,000 s
    expired_counters(keyspace, clock, batch, "short")  # idle in 1 ms
    clock.advance(1)
    assert keyspace.sweep() == 0  # the first batch is the long-lived keys, requeued
    expired_counters(keyspace, clock, 1, "late")
    assert keyspace.sweep() == batch  # then the expired ones
    clock.advance(1)
    assert keyspace.sweep() == 0  # the long-lived again
    assert keyspace.sweep() == 1  # and the one that came late
    # A key written again is not queued twice: the ring holds each key once.
    keyspace.charge([Hit("long-0", Rule(rate=0.001, burst=2))], now)
    assert sorted(keyspace._ring) == sorted(keyspace.entries)


async def test_aiocache_sees_what_the_store_writes_directly(store: MemoryStore) -> None:
    """The hot path writes aiocache 0.12's backend dict; this fails loudly if aiocache changes that."""
    await answered(store)
    record = await store.keyspace.cache.get(CONVERSATION)
    assert record is store.keyspace.entries[CONVERSATION]
    assert await store.keyspace.cache.exists(FIRST)


async def test_close_stops_the_sweep(clock: ManualClock) -> None:
    store = MemoryStore(CONFIG, clock=clock, sweep_interval=0.01)
    await store.start()
    await store.start()  # idempotent: one task
    tasks = [task for task in asyncio.all_tasks() if task.get_name() == "pact-store-sweep"]
    assert len(tasks) == 1
    await store.close()
    assert tasks[0].done()


async def test_the_app_runs_the_sweep_while_it_serves(make_gateway: MakeGateway) -> None:
    gw = await make_gateway()
    tasks = [task for task in asyncio.all_tasks() if task.get_name() == "pact-store-sweep"]
    assert len(tasks) == 1
    assert not tasks[0].done()
    await gw.client.close()
    assert tasks[0].done()


async def test_stored_records_leave_the_cyclic_collectors_sight(store: MemoryStore) -> None:
    """Plain tuples, so a full collection does not walk every stored conversation (the latency tail)."""
    owner = Owner("acme", "https://pa.example", "alice")
    claim = await store.begin_turn(owner, None, "m-1", "hi", "ctx-1")
    await store.complete_turn(owner, "ctx-1", "m-1", b"reply", close=False)
    await store.begin_turn(owner, "ctx-1", "m-2", "more", "", limits=[Hit("rl:alice", Rule(1.0, 5))])
    # A record's turns tuple is untracked in one collection and the record itself by the next: two
    # young collections, so records never reach the old generation that full collections walk.
    gc.collect()
    gc.collect()
    records = {
        "conversation": store.keyspace.entries[store_keys.conversation_key("acme", claim.context_id)],
        "first message": store.keyspace.entries[store_keys.first_message_key("acme", owner.digest, "m-1")],
        "rate counter": store.keyspace.entries["rl:alice"],
    }
    assert {name: gc.is_tracked(record) for name, record in records.items()} == dict.fromkeys(records, False)
