"""Redis Cluster hash slots and hash tags (issue 20), as the Redis Cluster specification defines them.

A cluster keeps each key in one of :data:`SLOTS` slots, ``CRC16(key) mod 16384``, where only the
part between the first ``{`` and the next ``}`` is hashed when that part is not empty (a *hash
tag*). A Lua script may only touch keys of one slot, so every key one of the gateway's scripts
touches carries the same tag (:mod:`gateway.store.keys`); the cluster client routes each command
to the primary serving its key's slot. The CRC is the XMODEM variant (polynomial 0x1021, initial
value 0), computed from a table as Redis's own ``crc16.c`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from gateway.store import lua

SLOTS: Final = 16384


def _table() -> tuple[int, ...]:
    rows = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
        rows.append(crc & 0xFFFF)
    return tuple(rows)


_TABLE: Final = _table()


def crc16(data: bytes) -> int:
    """CRC-16/XMODEM of ``data``."""
    crc = 0
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _TABLE[((crc >> 8) ^ byte) & 0xFF]
    return crc


def hashed_part(key: bytes) -> bytes:
    """What of ``key`` decides its slot: the hash tag if it has a non-empty one, else the whole key."""
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def key_slot(key: str | bytes) -> int:
    """The slot of ``key``, as ``CLUSTER KEYSLOT`` answers it."""
    raw = key.encode() if isinstance(key, str) else key
    return crc16(hashed_part(raw)) % SLOTS


def tag(name: str) -> str:
    """``name`` as a hash tag, for every key that must share its slot."""
    return "{" + name + "}"


NO_KEY_LUA: Final = lua.library("lib/no_key.lua")
"""The first lines of a script that takes ``""`` for a key it is not given (a layout not read, no
grant), ``lua/lib/no_key.lua``: a declared key that begins with ``{`` reads as ``""``, since
:func:`placeholders` names the absent key so on a cluster. No key of the gateway's begins with ``{``
(they all begin ``pact:``)."""


def placeholders(keys: Sequence[str | bytes]) -> list[str | bytes]:
    """``keys`` with each empty one named by the others' hash tag, for a Redis Cluster.

    A cluster checks every key a script declares, an empty one too (``""`` is in slot 0, so beside a
    key of any other slot it is ``CROSSSLOT``). The hash tag alone (``{1a2b3c4d}``) is a key of the
    call's own slot, and :data:`NO_KEY_LUA` turns it back into ``""`` in the script.
    """
    named = next((key for key in keys if key), None)
    if named is None:
        return list(keys)
    raw = named.encode() if isinstance(named, str) else named
    absent = b"{" + hashed_part(raw) + b"}"
    return [key if key else absent for key in keys]
