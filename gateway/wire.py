"""JSON bytes that cost their own length: :func:`json_bytes` for whatever the gateway keeps.

orjson (3.x) returns a ``bytes`` object that keeps the whole growth buffer it serialized into,
about 4 KiB however short the document: ``orjson.dumps({"a": 1})`` holds 4,098 bytes
(tracemalloc) for its 7. A body that lives for a bot's whole turn (the request to a bot that
takes seconds), a stored reply, or a bot adapter's saved state would each keep those 4 KiB per
turn in flight or per conversation (docs/capacity.md, "Slow bots: turns in flight"). Copying
the result into an exact-size object costs about 60 ns for a short document.

A module of its own, below every package, because the rules (:mod:`gateway.protocol`), the bot
adapters (:mod:`gateway.upstream`) and the OAuth server all build such bodies.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["json_bytes"]


def json_bytes(doc: Any) -> bytes:
    """``orjson.dumps(doc)``, copied into a ``bytes`` object of exactly its length."""
    return bytes(memoryview(orjson.dumps(doc)))
