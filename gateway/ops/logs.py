"""Process logging: JSON lines (orjson) or text, one structured access line per request.

Structured fields reach a record in one of two ways, and both formatters print them alike:

* ``extra=`` on an ordinary logging call (errors, warnings, start-up): logging copies each
  field into the record, and the formatter sifts them back out of ``record.__dict__``, adding
  the ``trace_id`` of the request being handled, if any (:mod:`gateway.ops.tracing`);
* :func:`log_fields`, for the per-request access line: the fields travel as one dict on
  the record, so nothing is copied, sifted or looked up on the way to the formatter; and
  when the gateway's own JSON handler is the only one listening (production), the line is
  written straight from the fields, with no record at all, at the end of the event loop's
  pass (:meth:`GatewayLogHandler.defer`): every access line of a pass in one write.

What must never reach a log is kept out at the source (handlers log reasons, not tokens;
``sub`` only as :func:`sub_digest`). :class:`GatewayLogHandler` is the second line of defence:
anything shaped like a compact JWS in the finished line (message, field, traceback) becomes
``[redacted]`` before it is written.

One record is one line in both formats, whatever its values hold: an ``open``-policy issuer
is anyone's string, newlines and terminal escapes included. JSON escapes them by itself (and
here also the separators U+2028, U+2029 and U+0085 that some line readers split on); the text
format escapes every field and the message (:class:`TextFormatter`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
import logging
import os
import re
import sys
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, TextIO, TypeAlias

import orjson

from gateway.config import LoggingConfig
from gateway.ops.tracing import current_trace

__all__ = [
    "ACCESS_LOGGER",
    "AIOHTTP_ACCESS",
    "FIELDS_ATTR",
    "GatewayLogHandler",
    "JsonFormatter",
    "SubDigests",
    "TextFormatter",
    "configure_logging",
    "log_fields",
    "redact",
    "sub_digest",
]

ACCESS_LOGGER = "pact_gateway.access"
AIOHTTP_ACCESS = "aiohttp.access"

FIELDS_ATTR = "pact_fields"
"""The record attribute :func:`log_fields` puts its fields dict under."""
TRACE_ID = "trace_id"
"""The field naming the W3C trace a record belongs to, on every record logged during a request."""

# Three base64url segments, the first starting like a JSON object: a JWT, PA token or assertion.
_COMPACT_JWS = re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# Every match starts with this; a line without it cannot hold a token, so the regex is skipped.
_JWS_START = "eyJ"
# Valid raw inside a JSON string, but line breaks to str.splitlines and some log shippers.
_JSON_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}
# A text-format value printed bare: printable, and nothing that would end it or confuse key=value.
_BARE_VALUE = re.compile(r'[^\s"\\=]+')
# How the text format writes a character inside a quoted value; the rest of the non-printable
# ones as Python writes them (\x1b, \u2028).
_QUOTED_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_TRACE_INDENT = "    "
_REDACTED = "[redacted]"
# Whatever a bare record carries is logging's own; anything else on a record is an ``extra=`` field.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    FIELDS_ATTR,
}


def sub_digest(issuer: str, sub: str) -> str:
    """A stable, non-reversible handle for the User ``(issuer, sub)`` (§3.2) in logs.

    Hashing the pair, not ``sub`` alone, keeps the same person unlinkable across personal
    agents; 16 hex digits are plenty to follow one User through the log.
    """
    return hashlib.sha256(f"{issuer}\x00{sub}".encode()).hexdigest()[:16]


class SubDigests:
    """:func:`sub_digest` for the Users seen lately, so a User's turns hash their ``sub`` once.

    A personal agent reuses one token for many turns, so the same few ``(issuer, sub)`` pairs
    recur. Bounded to ``size`` entries; when full, the oldest entry goes (a miss only costs one
    hash again, so insertion order is as good as recency here, and cheaper to keep).
    """

    def __init__(self, size: int = 4096) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self._size = size
        self._digests: OrderedDict[tuple[str, str], str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._digests)

    def get(self, issuer: str, sub: str) -> str:
        key = (issuer, sub)
        digest = self._digests.get(key)
        if digest is None:
            digest = sub_digest(issuer, sub)
            if len(self._digests) >= self._size:
                # O(1): a plain dict's first key is found past every slot deleted before it.
                self._digests.popitem(last=False)
            self._digests[key] = digest
        return digest


def redact(text: str) -> str:
    """``text`` with anything shaped like a compact JWS replaced by ``[redacted]``."""
    return _COMPACT_JWS.sub(_REDACTED, text) if _JWS_START in text else text


def log_fields(logger: logging.Logger, level: int, message: str, fields: dict[str, Any]) -> None:
    """Log ``message`` with ``fields`` as its structured data, by the shortest path logging has.

    What ``logger.log(level, message, extra=fields)`` prints, for a fraction of the cost: no
    caller lookup (a frame walk whose answer, the access middleware, says nothing), no copy
    of each field into the record, and the formatter takes ``fields`` as it is. When the
    gateway's JSON handler is the one place the record would go (:func:`_sole_json_handler`),
    it queues the same line, made from ``fields`` directly, for the end of the event loop's
    pass (:meth:`GatewayLogHandler.defer`): building a ``LogRecord`` and passing it through
    logging's dispatch cost more than the line itself. ``message`` is final text
    (never %-formatted); ``fields`` must not be changed after the call.
    """
    if not logger.isEnabledFor(level):
        return
    handler = _sole_json_handler(logger, level)
    if handler is None:
        logger.handle(_fields_record(logger, level, message, fields))
        return
    handler.defer(logger, level, message, fields, time.time())


def _fields_record(
    logger: logging.Logger, level: int, message: str, fields: dict[str, Any]
) -> logging.LogRecord:
    record = logger.makeRecord(logger.name, level, "", 0, message, (), None)
    record.__dict__[FIELDS_ATTR] = fields
    return record


def _sole_json_handler(logger: logging.Logger, level: int) -> GatewayLogHandler | None:
    """The handler a ``level`` record of ``logger`` would reach, if it is the only one and plain.

    Plain: exactly a :class:`GatewayLogHandler` with exactly a :class:`JsonFormatter`, no filter
    on the logger or the handler, and not above ``level``; anything else (a test's capture
    handler, a filter, a second handler) gets an ordinary record through ``logger.handle``.
    This is the walk ``Logger.callHandlers`` makes, so the answer is never stale.
    """
    if logger.disabled or logger.filters:
        return None
    found: logging.Handler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        for handler in current.handlers:
            if found is not None:
                return None
            found = handler
        current = current.parent if current.propagate else None
    if (
        type(found) is not GatewayLogHandler
        or type(found.formatter) is not JsonFormatter
        or found.filters
        or level < found.level
    ):
        return None
    return found


def _fields(record: logging.LogRecord) -> Mapping[str, Any]:
    fields: Mapping[str, Any] | None = record.__dict__.get(FIELDS_ATTR)
    if fields is not None:
        return fields
    extra = {key: value for key, value in record.__dict__.items() if key not in _STANDARD}
    # A record logged while a request is handled carries the request's trace id: it is formatted
    # at once, in the context (the request's task) that logged it.
    trace = current_trace()
    if trace is not None and TRACE_ID not in extra:
        extra[TRACE_ID] = trace.trace_id
    return extra


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``level``, ``logger``, ``message``, ``pid``, the fields, ``timestamp``.

    Serialized by orjson in one call; anything it cannot serialize is written as ``str()``,
    and a value even that refuses (an int beyond 64 bits) falls back to the standard library.
    """

    def format(self, record: logging.LogRecord) -> str:
        head: dict[str, Any] = {
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "pid": record.process,
        }
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            head["exc_info"] = record.exc_text
        if record.stack_info:
            head["stack_info"] = self.formatStack(record.stack_info)
        return _json_line(head, _fields(record), record.created)


def _json_line(head: dict[str, Any], fields: Mapping[str, Any], created: float) -> str:
    """``head``, then ``fields``, then the UTC ``timestamp`` of ``created``: one JSON line (unredacted).

    Shared by :class:`JsonFormatter` and the record-less path of :func:`log_fields`, so both
    write the same bytes. ``head`` is extended in place.
    """
    head.update(fields)
    head["timestamp"] = dt.datetime.fromtimestamp(created, dt.UTC)
    try:
        line = orjson.dumps(head, default=str).decode()
    except TypeError:  # orjson.JSONEncodeError
        line = json.dumps(head, default=str)
    if line.isascii():
        return line
    # Outside strings a JSON line is ASCII, so these can only be inside one, where \uXXXX means the same.
    for raw, escaped in _JSON_LINE_BREAKS.items():
        line = line.replace(raw, escaped)
    return line


def _escape_text(text: str) -> str:
    """``text`` with every non-printable character written as an escape (``\\n``, ``\\x1b``)."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else _quoted_char(char) for char in text)


def _quoted_char(char: str) -> str:
    """How ``char`` is written inside a quoted text-format value."""
    escaped = _QUOTED_ESCAPES.get(char)
    if escaped is not None:
        return escaped
    return char if char.isprintable() else char.encode("unicode_escape").decode("ascii")


def _text_value(value: Any) -> str:
    """A field value for the text format: bare when plainly one word, else quoted with escapes."""
    text = str(value)
    if text.isprintable() and _BARE_VALUE.fullmatch(text):
        return text
    return '"' + "".join(map(_quoted_char, text)) + '"'


class TextFormatter(logging.Formatter):
    """``time level logger message key=value …``: the JSON fields, for a human at a terminal.

    Nothing a caller chose can break the one-record-one-line shape (issue 12 row 11): the
    message's non-printable characters are escaped, every field value that is not one plain
    word is quoted with its quotes, backslashes and non-printable characters escaped, and a
    traceback follows on lines of its own, each indented, so none can pass for a record.
    """

    def format(self, record: logging.LogRecord) -> str:
        head = (
            f"{self.formatTime(record)} {record.levelname} {record.name} {_escape_text(record.getMessage())}"
        )
        fields = " ".join(
            f"{_escape_text(str(key))}={_text_value(value)}"
            for key, value in _fields(record).items()
            if value is not None
        )
        line = f"{head} {fields}" if fields else head
        trace = self._trace(record)
        if not trace:
            return line
        return "\n".join([line, *(_TRACE_INDENT + _escape_text(part) for part in trace.splitlines())])

    def _trace(self, record: logging.LogRecord) -> str:
        """The record's traceback and stack, as :class:`logging.Formatter` would append them."""
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        parts = [record.exc_text] if record.exc_text else []
        if record.stack_info:
            parts.append(self.formatStack(record.stack_info))
        return "\n".join(parts)


_PendingLine: TypeAlias = tuple[logging.Logger, int, str, dict[str, Any], float]


class GatewayLogHandler(logging.StreamHandler[TextIO]):
    """The one handler :func:`configure_logging` installs; a second call replaces it.

    It redacts the finished text rather than each field: one substring test per record (or
    per batch of access lines) covers the message, every field and any traceback, and the
    regex runs only when that test finds the start of a token (a base64url token survives
    JSON escaping unchanged, ``[redacted]`` needs none, and no match can span a newline).
    """

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        # Read once: os.getpid() is a system call per line otherwise, and the gateway never
        # forks after configuring logging (``--workers`` starts new interpreters).
        self.pid = os.getpid()
        self._pending: list[_PendingLine] = []

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))

    def defer(
        self, logger: logging.Logger, level: int, message: str, fields: dict[str, Any], created: float
    ) -> None:
        """Queue a :func:`log_fields` line, made at ``created``, for the end of this event-loop pass.

        The access line is written once per request, and a write (a system call, the lock,
        the redaction scan) costs more than the line: so lines wait for the pass to end and
        go out together, in order, with one write. Nothing waits longer than that pass, an
        ordinary record written meanwhile goes out after them (:meth:`emit`), and with no
        loop running in this thread the line is written at once.
        """
        with self.lock:  # type: ignore[union-attr]  # created by Handler.__init__, never None
            self._pending.append((logger, level, message, fields, created))
            if len(self._pending) > 1:
                return  # the first line of the pass has scheduled the write
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        loop.call_soon(self.flush)

    def emit(self, record: logging.LogRecord) -> None:
        self.flush()  # queued access lines were logged first, so they are written first
        super().emit(record)

    def flush(self) -> None:
        """Write the queued lines, redacted, in one write; then flush the stream."""
        with self.lock:  # type: ignore[union-attr]
            pending, self._pending = self._pending, []
            if pending:
                try:
                    self.stream.write(redact("".join(self._line(*line) for line in pending)))
                except RecursionError:  # as StreamHandler.emit: not a logging failure to report and forget
                    raise
                except Exception:
                    for logger, level, message, fields, _ in pending:
                        self.handleError(_fields_record(logger, level, message, fields))
            super().flush()

    def _line(
        self, logger: logging.Logger, level: int, message: str, fields: dict[str, Any], created: float
    ) -> str:
        head = {
            "level": logging.getLevelName(level),
            "logger": logger.name,
            "message": message,
            "pid": self.pid,
        }
        return _json_line(head, fields, created) + self.terminator


def configure_logging(config: LoggingConfig, stream: TextIO | None = None) -> None:
    """Send every log record to ``stream`` (stderr) at ``config.level``, as JSON lines or text.

    Called at start-up and again after a configuration reload, so it replaces its own
    handler rather than stacking a second one; handlers others installed are left alone.
    """
    root = logging.getLogger()
    for existing in [h for h in root.handlers if isinstance(h, GatewayLogHandler)]:
        root.removeHandler(existing)
    handler = GatewayLogHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(JsonFormatter() if config.format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(config.level)
    # The gateway writes its own access line; aiohttp's would carry the raw path and query string.
    logging.getLogger(AIOHTTP_ACCESS).setLevel(logging.WARNING)
