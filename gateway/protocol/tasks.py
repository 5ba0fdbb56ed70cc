"""§2.2 task operations. The gateway never creates tasks, so every list is empty."""

from __future__ import annotations

import orjson

from gateway.protocol import errors
from gateway.protocol.errors import A2AError, Reason

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100


def parse_page_size(raw: str | None) -> int:
    """``pageSize`` is 1–100, default 50; anything else is ``INVALID_PARAMS`` (§6)."""
    if raw is None:
        return DEFAULT_PAGE_SIZE
    text = raw.strip()
    if not text.isascii() or not text.isdigit():
        raise A2AError(Reason.INVALID_PARAMS, errors.INVALID_PAGE_SIZE)
    size = int(text)
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise A2AError(Reason.INVALID_PARAMS, errors.INVALID_PAGE_SIZE)
    return size


def empty_task_list(page_size: int) -> bytes:
    return orjson.dumps({"tasks": [], "nextPageToken": "", "pageSize": page_size, "totalSize": 0})
