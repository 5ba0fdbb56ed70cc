"""A stored reply in as few bytes as it can be rebuilt from (issue 17: Redis bytes per conversation).

Most replies are :func:`gateway.protocol.messages.render_reply`'s plain shape: a random
``r-`` + 32-hex ``messageId``, the conversation's ``contextId`` and the bot's text. Stored
whole that is about 150 bytes of JSON around the text; the conversation key already names the
``contextId``, so the reply's own id (16 raw bytes) and its text are enough to render it again.
§4.3 wants a retry to get the very bytes first sent, so the compact form is used only when the
rebuild is byte-identical to the original (checked when it is stored); anything else (a §5.6
receipt, a step-up task, another renderer) is kept as it was sent.

The forms: ``C`` + 16 raw id bytes + UTF-8 text, or ``R`` + the reply bytes (which is also what
the previous release stored, so its replies read back unchanged).
"""

from __future__ import annotations

from typing import Final

import orjson

from gateway.protocol.messages import render_reply

COMPACT: Final = b"C"
RAW: Final = b"R"
_ID_PREFIX: Final = "r-"
_ID_HEX: Final = 32


def pack(reply: bytes, context_id: str) -> bytes:
    """``reply`` as stored for ``context_id``: compact when that rebuilds it exactly, else raw."""
    compact = _compact(reply, context_id)
    return RAW + reply if compact is None else compact


def unpack(stored: bytes, context_id: str) -> bytes:
    """The reply bytes :func:`pack` stored for ``context_id``."""
    if stored[:1] == COMPACT:
        reply_id = _ID_PREFIX + stored[1:17].hex()
        return render_reply(reply_id, context_id, stored[17:].decode())
    return stored[1:]


def _compact(reply: bytes, context_id: str) -> bytes | None:
    try:
        document = orjson.loads(reply)
        message = document["message"]
        reply_id, text = message["messageId"], message["parts"][0]["text"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
        return None
    if not (isinstance(reply_id, str) and isinstance(text, str) and reply_id.startswith(_ID_PREFIX)):
        return None
    digits = reply_id[len(_ID_PREFIX) :]
    if len(digits) != _ID_HEX or digits != digits.lower():
        return None
    try:
        raw_id = bytes.fromhex(digits)
    except ValueError:
        return None
    # The proof that nothing is lost: whatever else the reply held, it must render back the same.
    if render_reply(reply_id, context_id, text) != reply:
        return None
    return COMPACT + raw_id + text.encode()
