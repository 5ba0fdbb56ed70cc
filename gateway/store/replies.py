"""A stored reply in as few bytes as it can be rebuilt from (issue 17: Redis bytes per conversation).

Most replies are :func:`gateway.protocol.messages.render_reply`'s plain shape: a random
``r-`` + 32-hex ``messageId``, the conversation's ``contextId`` and the bot's text. Stored
whole that is about 110 bytes of JSON around the text; the conversation key already names the
``contextId``, so the reply's own id (16 raw bytes) and what follows ``"text":"`` are enough to
put it back together. §4.3 wants a retry to get the very bytes first sent: a reply is stored
compact only when it is exactly :data:`_HEAD`, the id, :func:`_middle`, the text's JSON and
:data:`_TAIL`, which is what :func:`unpack` joins again, so the rebuild is byte-identical by
construction (no parse, no re-render: about a microsecond). Anything else (a §5.6 receipt, a
step-up task, an id in another form) is kept as sent.

The forms: ``C`` + 16 raw id bytes + the text as it stands in the JSON, or ``R`` + the reply
bytes (which is also what the previous release stored, so its replies read back unchanged).
"""

from __future__ import annotations

from typing import Final

COMPACT: Final = b"C"
RAW: Final = b"R"
_HEAD: Final = b'{"message":{"messageId":"r-'
_ID_HEX: Final = 32
_TAIL: Final = b'"}]}}'


def _middle(context_id: str) -> bytes:
    """What stands between the reply's id and its text, as render_reply writes it for ``context_id``."""
    return b'","contextId":"' + context_id.encode() + b'","role":"ROLE_AGENT","parts":[{"text":"'


def pack(reply: bytes, context_id: str) -> bytes:
    """``reply`` as stored for ``context_id``: compact when :func:`unpack` joins it back exactly."""
    if reply.startswith(_HEAD) and reply.endswith(_TAIL):
        id_end = len(_HEAD) + _ID_HEX
        hex_id = reply[len(_HEAD) : id_end]
        text_start = id_end + len(middle := _middle(context_id))
        if reply[id_end:text_start] == middle and len(reply) >= text_start + len(_TAIL):
            try:
                raw_id = bytes.fromhex(hex_id.decode("ascii"))
            except (UnicodeDecodeError, ValueError):
                return RAW + reply
            # Only lower-case hex comes back from .hex(): any other id is kept as sent.
            if raw_id.hex().encode() == hex_id:
                return COMPACT + raw_id + reply[text_start : len(reply) - len(_TAIL)]
    return RAW + reply


def unpack(stored: bytes, context_id: str) -> bytes:
    """The reply bytes :func:`pack` stored for ``context_id``."""
    if stored[:1] == COMPACT:
        return _HEAD + stored[1:17].hex().encode() + _middle(context_id) + stored[17:] + _TAIL
    return stored[1:]
