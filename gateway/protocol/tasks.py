"""§2.2 task operations. The gateway never creates tasks, so every list is empty."""

from __future__ import annotations

import orjson

from gateway.protocol import errors
from gateway.protocol.errors import A2AError, Reason

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 100
_MAX_PAGE_SIZE_DIGITS = len(str(MAX_PAGE_SIZE))


def parse_page_size(raw: str | None) -> int:
    """``pageSize`` is 1–100, default 50; anything else is ``INVALID_PARAMS`` (§6).

    The digits are counted before they are converted: ``int()`` refuses a string of more than
    4,300 digits with a ``ValueError`` (Python's guard against quadratic conversion), and the
    client chooses the string. Leading zeros do not count, so ``007`` is still 7.
    """
    if raw is None:
        return DEFAULT_PAGE_SIZE
    text = raw.strip()
    if not text.isascii() or not text.isdigit():
        raise A2AError(Reason.INVALID_PARAMS, errors.INVALID_PAGE_SIZE)
    digits = text.lstrip("0")
    size = int(digits) if digits and len(digits) <= _MAX_PAGE_SIZE_DIGITS else 0
    if not 1 <= size <= MAX_PAGE_SIZE:
        raise A2AError(Reason.INVALID_PARAMS, errors.INVALID_PAGE_SIZE)
    return size


def empty_task_list(page_size: int) -> bytes:
    return orjson.dumps({"tasks": [], "nextPageToken": "", "pageSize": page_size, "totalSize": 0})
