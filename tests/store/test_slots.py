"""Hash slots as Redis computes them (issue 20): the CRC's check value and the Redis Cluster
specification's own examples of hash tags."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.store.slots import SLOTS, crc16, hashed_part, key_slot, tag


def test_crc16_is_xmodem() -> None:
    # The check value of CRC-16/XMODEM, and the specification's example.
    assert crc16(b"123456789") == 0x31C3


def test_spec_examples() -> None:
    assert hashed_part(b"{user1000}.following") == b"user1000"
    assert hashed_part(b"foo{}{bar}") == b"foo{}{bar}"
    assert hashed_part(b"foo{{bar}}zap") == b"{bar"
    assert hashed_part(b"foo{bar}{zap}") == b"bar"
    assert key_slot("foo") == 12182
    assert key_slot("{user1000}.following") == key_slot("{user1000}.followers")


_NAMES = st.text(min_size=1, max_size=12).filter(lambda s: "}" not in s)


@given(_NAMES, st.binary(max_size=20).filter(lambda b: b"{" not in b), st.binary(max_size=20))
def test_keys_with_one_tag_share_its_slot(name: str, before: bytes, after: bytes) -> None:
    key = before + tag(name).encode() + after
    assert key_slot(key) == key_slot(name)
    assert 0 <= key_slot(key) < SLOTS
