"""The smaller Redis layout keeps every reply byte for byte (§4.3), however it stores it (issue 17).

A reply is stored compact only when it has the plain rendered shape, which joins back identical
(gateway/store/replies.py), and in listpack-sized pieces when it is longer than a listpack value;
each form is replayed exactly.
"""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from gateway.protocol.messages import render_reply
from gateway.store import keys as store_keys
from gateway.store import replies
from gateway.store.base import Owner, TurnStatus
from gateway.store.redis import RedisStore
from tests.support.redis_layout import stored_reply, tag_of

ALICE = Owner("acme", "https://pa.example", "alice")
REPLY_ID = "r-" + "0123456789abcdef" * 2


def test_s4_3_a_plain_reply_is_kept_as_its_id_and_text_and_joins_back_identical() -> None:
    reply = render_reply(REPLY_ID, "ctx-1", "Order A-10001 is shipped. ✓")
    packed = replies.pack(reply, "ctx-1")
    assert packed == b"C" + bytes.fromhex(REPLY_ID[2:]) + "Order A-10001 is shipped. ✓".encode()
    assert replies.unpack(packed, "ctx-1") == reply
    escaped = render_reply(REPLY_ID, "ctx-1", 'two lines\nand "quotes" \\ and }]}}')
    assert replies.pack(escaped, "ctx-1")[:1] == b"C"
    assert replies.unpack(replies.pack(escaped, "ctx-1"), "ctx-1") == escaped


@pytest.mark.parametrize(
    "reply",
    [
        render_reply(REPLY_ID, "ctx-1", "with a receipt", {"receipt": "x"}),  # §5.6: more than id and text
        render_reply(REPLY_ID.upper().replace("R-", "r-"), "ctx-1", "an id it would not render"),
        render_reply("r-short", "ctx-1", "another renderer's id"),
        render_reply(REPLY_ID, "ctx-2", "another conversation's"),
        b'{"message": {"messageId": "r-0123456789abcdef0123456789abcdef"}}',
        b"not json",
        render_reply(REPLY_ID, 'ctx-1"', "a contextId the JSON escapes"),
        b'{"message":{"messageId":"r-0123456789abcdef0123456789abcdeg","contextId":"ctx-1"}}',
    ],
)
def test_s4_3_any_other_reply_is_kept_exactly_as_sent(reply: bytes) -> None:
    packed = replies.pack(reply, "ctx-1")
    assert packed == b"R" + reply
    assert replies.unpack(packed, "ctx-1") == reply


@pytest.mark.parametrize("length", [10, 60, 61, 62, 63, 64, 200, 510, 511, 2000])
async def test_s4_3_replies_of_every_length_are_replayed_byte_for_byte(
    redis_store: RedisStore, redis_client: aioredis.Redis, length: int
) -> None:
    """Around the piece boundaries (62 bytes in the first piece, 64 in the others, 8 pieces at most)."""
    claim = await redis_store.begin_turn(ALICE, None, "m1", "hello", "ctx-1")
    assert claim.status is TurnStatus.NEW
    reply = render_reply(REPLY_ID, "ctx-1", "x" * length)
    await redis_store.complete_turn(ALICE, "ctx-1", "m1", reply, close=False)
    replay = await redis_store.begin_turn(ALICE, "ctx-1", "m1", "hello", "")
    assert (replay.status, replay.reply) == (TurnStatus.REPLAY, reply)
    assert await stored_reply(redis_client, "acme", "ctx-1", "m1") == reply
    small = len(replies.pack(reply, "ctx-1")) <= 62 + 64 * 7
    encoding = await redis_client.object("encoding", store_keys.conv_key("acme", "ctx-1", tag_of(ALICE)))
    assert encoding == (b"listpack" if small else b"hashtable")
