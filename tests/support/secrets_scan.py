"""No secret in logs (issue 12): every test's log records are scanned for the secrets that test used.

The shared helpers that mint or receive a secret call :func:`remember`: :meth:`PAKey.mint
<tests.support.pa.PAKey.mint>` (personal-agent JWTs, and so Brand-login assertions and every
deliberately bad token), the §5 helpers of ``tests/support/delegation.py`` and
``tests/support/consent.py`` (device codes, user codes, delegation and refresh tokens, consent
sessions, the Brand user id signed in). A test that gets hold of a secret some other way passes it
to :func:`remember` itself.

The autouse fixture :func:`secret_scan` gives each test a ledger of those secrets and a handler on
the root logger, with the root at ``DEBUG`` and ``aiohttp.access`` at ``WARNING`` as
:func:`gateway.ops.logs.configure_logging` leaves it in production (aiohttp's own access line is
off there, so it is not scanned). After the test's teardown, the records are searched for every
secret: one substring search per secret over the joined text of all records (message, arguments,
``extra=`` fields, traceback), so the cost grows with what the test logged and minted, not with
their product. A hit fails the test, naming the kind of secret and the record, never the secret.

The raw record is what is scanned, not the line the gateway's handler writes: the handler's JWT mask
(:func:`gateway.ops.logs.redact`) is a last resort, and a handler that hands it a token is a bug.
A test that logs a secret on purpose says so with ``@pytest.mark.logs_secrets("why")``.

The ledger lives in a :class:`~contextvars.ContextVar` set for the test: pytest-asyncio runs every
fixture and test coroutine in a copy of the current context, so a helper called anywhere in the
test finds it without a fixture being threaded through every call. Outside a test (a module-scoped
fixture's set-up), :func:`remember` does nothing.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import pytest

from gateway.ops.logs import AIOHTTP_ACCESS

__all__ = [
    "MIN_SECRET_LENGTH",
    "Leak",
    "LogScan",
    "SecretLedger",
    "find_leaks",
    "record_text",
    "remember",
    "secret_scan",
]

MIN_SECRET_LENGTH = 8
"""Shorter values (a ``sub`` such as ``alice``) would match ordinary words; every real secret is longer."""

_MARKER = "logs_secrets"
# Whatever a bare record carries is logging's own; anything else on a record is an ``extra=`` field.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


@dataclass
class SecretLedger:
    """The secrets one test used: each value with the kind of secret it is (for the failure message)."""

    secrets: dict[str, str] = field(default_factory=dict)

    def add(self, kind: str, value: str) -> None:
        """Record ``value``; a compact JWS also records its payload and signature, which a log could
        carry alone (the header is shared by every token of one key, so it proves nothing).

        A value recorded twice keeps the later kind: the more specific helper (an assertion) calls
        :func:`remember` after the general one (the key that signed it)."""
        if len(value) >= MIN_SECRET_LENGTH:
            self.secrets[value] = kind
        segments = value.split(".")
        if len(segments) == 3:
            for part, name in ((segments[1], "payload"), (segments[2], "signature")):
                if len(part) >= 16:
                    self.secrets[part] = f"{kind} ({name})"


_LEDGER: ContextVar[SecretLedger | None] = ContextVar("pact_test_secret_ledger", default=None)


def remember(kind: str, *values: str | None) -> None:
    """Add ``values`` (``None`` and empty ones skipped) to the running test's ledger as ``kind``."""
    ledger = _LEDGER.get()
    if ledger is None:
        return
    for value in values:
        if value:
            ledger.add(kind, value)


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except (TypeError, ValueError):
        return f"{record.msg} {record.args!r}"  # a handler would print a formatting error, with the arguments


def record_text(record: logging.LogRecord) -> str:
    """Everything a formatter could print of ``record``: message, arguments, fields, traceback, stack."""
    parts = [str(record.msg), _message(record)]
    parts.extend(f"{key}={value}" for key, value in record.__dict__.items() if key not in _STANDARD)
    if record.exc_info and record.exc_info[1] is not None:
        parts.append("".join(traceback.format_exception(record.exc_info[1])))
    if record.exc_text:
        parts.append(record.exc_text)
    if record.stack_info:
        parts.append(record.stack_info)
    return "\n".join(parts)


@dataclass(frozen=True)
class Leak:
    kind: str
    logger: str
    level: str
    excerpt: str
    """The record's message with the secret masked, to find the call that logged it."""

    def describe(self) -> str:
        return f"{self.kind} in a {self.level} record of {self.logger}: {self.excerpt!r}"


def find_leaks(records: Sequence[logging.LogRecord], secrets: dict[str, str]) -> list[Leak]:
    """Each secret of ``secrets`` (value → kind) that appears in ``records``, with the first record
    carrying it. One search per secret over all the records' text; the per-record search only runs
    for a secret that was found. A part found inside a whole secret that was found too (a token's
    signature) is not reported again, and every secret found is masked in the excerpts."""
    if not records or not secrets:
        return []
    texts = [record_text(record) for record in records]
    joined = "\x00".join(texts)
    found = sorted((secret for secret in secrets if secret in joined), key=len, reverse=True)
    reported: list[str] = []
    leaks: list[Leak] = []
    for secret in found:
        if any(secret in whole for whole in reported):
            continue
        reported.append(secret)
        record = records[next(i for i, text in enumerate(texts) if secret in text)]
        leaks.append(Leak(secrets[secret], record.name, record.levelname, _masked(_message(record), found)))
    return leaks


def _masked(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:  # longest first, so a token is masked whole before its parts are looked for
        text = text.replace(secret, "[secret]")
    return text[:300]


class _Collector(logging.Handler):
    """Keeps every record that reaches the root logger during one test."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass(frozen=True)
class LogScan:
    """What :func:`secret_scan` yields: the test's ledger and the records captured so far."""

    ledger: SecretLedger = field(repr=False)
    records: list[logging.LogRecord] = field(repr=False)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis prints a failing example's arguments with this: the secrets stay out of it."""
        printer.text(repr(self))

    def tracebacks(self, start: int = 0) -> list[logging.LogRecord]:
        """The records from index ``start`` on that carry a traceback (``log.exception`` and the like)."""
        return [r for r in self.records[start:] if r.exc_info or "Traceback (" in record_text(r)]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{_MARKER}(reason): this test logs a secret on purpose; its records are not scanned"
    )


@pytest.fixture(autouse=True)
def secret_scan(request: pytest.FixtureRequest) -> Iterator[LogScan]:
    """Fail the test if a record logged during it carries a secret it used (see the module's doc)."""
    ledger = SecretLedger()
    reset = _LEDGER.set(ledger)
    collector = _Collector()
    root = logging.getLogger()
    access = logging.getLogger(AIOHTTP_ACCESS)
    levels = root.level, access.level
    root.addHandler(collector)
    root.setLevel(logging.DEBUG)
    access.setLevel(logging.WARNING)
    try:
        yield LogScan(ledger, collector.records)
    finally:
        root.removeHandler(collector)
        root.setLevel(levels[0])
        access.setLevel(levels[1])
        _LEDGER.reset(reset)
    if request.node.get_closest_marker(_MARKER) is not None:
        return
    leaks = find_leaks(collector.records, ledger.secrets)
    if leaks:
        pytest.fail(
            "secret in the logs (issue 12):\n" + "\n".join(f"  {leak.describe()}" for leak in leaks),
            pytrace=False,
        )
