"""The log scan of tests/support/secrets_scan.py (issue 12: no secret in logs) catches a leak.

A scanner that never fires proves nothing, so these tests leak on purpose: straight into
:func:`find_leaks`, and through a whole pytest run (pytester) in which a test logs a token it
minted and must fail, while the same test without the leak, or marked ``logs_secrets``, passes.
"""

from __future__ import annotations

import logging
import sys

import pytest

from tests.support.pa import PAKey
from tests.support.secrets_scan import LogScan, SecretLedger, find_leaks, remember

log = logging.getLogger("pact_gateway.test")


def _record(message: str, *args: object, **extra: object) -> logging.LogRecord:
    return log.makeRecord(log.name, logging.INFO, __file__, 1, message, args, None, extra=extra)


def _ledger(*values: str) -> SecretLedger:
    ledger = SecretLedger()
    for value in values:
        ledger.add("a test secret", value)
    return ledger


TOKEN = PAKey.es256().mint("https://pa.example", "alice", "aud")


@pytest.mark.parametrize(
    "record",
    [
        _record("saw %s", TOKEN),
        _record("plain", request_id=f"id-{TOKEN}"),
        _record("plain", pact_fields={"path": f"/x?t={TOKEN}"}),
        _record(f"inline {TOKEN}"),
    ],
    ids=["argument", "extra_field", "access_fields", "message"],
)
def test_a_secret_anywhere_in_a_record_is_found(record: logging.LogRecord) -> None:
    (leak,) = find_leaks([record], _ledger(TOKEN).secrets)
    assert leak.kind == "a test secret"
    assert leak.logger == "pact_gateway.test"
    assert TOKEN not in leak.describe()


def test_a_secret_in_a_traceback_is_found() -> None:
    try:
        raise ValueError(f"bad token {TOKEN}")
    except ValueError:
        record = log.makeRecord(log.name, logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert [leak.kind for leak in find_leaks([record], _ledger(TOKEN).secrets)] == ["a test secret"]


def test_a_jwt_signature_or_payload_alone_is_a_leak_but_its_shared_header_is_not() -> None:
    header, payload, signature = TOKEN.split(".")
    secrets = _ledger(TOKEN).secrets
    assert [leak.kind for leak in find_leaks([_record("sig %s", signature)], secrets)] == [
        "a test secret (signature)"
    ]
    assert [leak.kind for leak in find_leaks([_record("claims %s", payload)], secrets)] == [
        "a test secret (payload)"
    ]
    assert find_leaks([_record("header %s", header)], secrets) == []


def test_short_values_are_not_secrets_and_clean_records_pass() -> None:
    secrets = _ledger("alice", TOKEN).secrets
    assert "alice" not in secrets
    assert find_leaks([_record("turn for alice done")], secrets) == []


def test_the_running_test_has_a_ledger_that_helpers_fill(secret_scan: LogScan) -> None:
    token = PAKey.es256().mint("https://pa.example", "bob", "aud")
    remember("a device code", "GmRhmhcxhwAzkoEqiMEg_DnyEysNkuNhszIySk9eS")
    assert secret_scan.ledger.secrets[token].startswith("a JWT")
    assert secret_scan.ledger.secrets["GmRhmhcxhwAzkoEqiMEg_DnyEysNkuNhszIySk9eS"] == "a device code"


LEAKY_TESTS = """
import logging

import pytest

from tests.support.pa import PAKey
from tests.support.secrets_scan import remember

log = logging.getLogger("pact_gateway.a2a")


def test_logs_its_token():
    token = PAKey.es256().mint("https://pa.example", "alice", "aud")
    log.info("refused token %s", token)


def test_logs_a_refresh_token_at_debug_in_a_field():
    remember("a refresh token", "rt_8qTQh3MwRZl1pQn0cWq5rHnY2QmWZ1pQ")
    log.debug("refresh", extra={"form": {"refresh_token": "rt_8qTQh3MwRZl1pQn0cWq5rHnY2QmWZ1pQ"}})


def test_logs_only_what_it_may():
    token = PAKey.es256().mint("https://pa.example", "alice", "aud")
    log.info("refused token of %d bytes", len(token))


@pytest.mark.logs_secrets("checks the last-resort mask")
def test_says_it_logs_a_token_on_purpose():
    log.warning("saw %s", PAKey.es256().mint("https://pa.example", "alice", "aud"))
"""


def test_a_test_that_logs_a_secret_it_used_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_leaky=LEAKY_TESTS)
    # The plugin is already imported by this run (in-process pytester), so it cannot be rewritten again.
    pytester.makeini(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
        "filterwarnings = ignore::pytest.PytestAssertRewriteWarning\n"
    )
    result = pytester.runpytest(
        "-p", "tests.support.secrets_scan", "-p", "no:cacheprovider", "--show-capture=no"
    )
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at teardown of test_logs_its_token*",
            "*a JWT signed by a test key (PAKey.mint) in a INFO record of pact_gateway.a2a:"
            " 'refused token [[]secret[]]'*",
            "*ERROR at teardown of test_logs_a_refresh_token_at_debug_in_a_field*",
            "*a refresh token in a DEBUG record of pact_gateway.a2a*",
        ]
    )
    assert "eyJ" not in result.stdout.str()
