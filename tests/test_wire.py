"""``gateway.wire.json_bytes``: a JSON body the gateway keeps costs its own length, not orjson's buffer."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import orjson

from gateway.wire import json_bytes

DOC = {"message": {"messageId": "m-1", "role": "ROLE_AGENT", "parts": [{"text": "Shipped on Monday."}]}}
COUNT = 200


def _traced_per_result(build: Callable[[Any], bytes]) -> float:
    """Bytes tracemalloc sees held per result, ``COUNT`` results kept alive at once."""
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        kept = [build(DOC) for _ in range(COUNT)]
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) == COUNT
    return (after - before) / COUNT


def test_the_bytes_are_orjsons() -> None:
    assert json_bytes(DOC) == orjson.dumps(DOC)


def test_a_kept_body_holds_its_length_not_the_serializers_4_kib() -> None:
    size = len(orjson.dumps(DOC))
    assert _traced_per_result(json_bytes) < size + 256
    # What the helper is for: orjson's own result keeps about 4 KiB whatever the document.
    assert _traced_per_result(orjson.dumps) > 2048
