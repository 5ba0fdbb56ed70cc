"""The suite flushes only a Redis database it may call its own (issue 27 item 5).

``bash scripts/test.sh`` on a developer's machine points at whatever answers on 127.0.0.1:6379: the
test database (15, or ``PACT_TEST_REDIS_URL``) is flushed only when it is empty or carries the
suite's marker, and a database holding anyone else's keys fails the run, untouched.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from tests.support.redis import MARKER_KEY

REPO_ROOT = Path(__file__).resolve().parents[1]
A_REDIS_TEST = """
def test_uses_redis(redis_url):
    import redis
    redis.Redis.from_url(redis_url).set("written-by-the-test", "1")
"""


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, url: str) -> pytest.RunResult:
    """The Redis fixture as a run of the suite would use it: a fresh process given ``url``."""
    monkeypatch.setenv("PACT_TEST_REDIS_URL", url)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makepyfile(test_redis_user=A_REDIS_TEST)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    return pytester.runpytest_subprocess("-p", "tests.support.redis", "-p", "no:cacheprovider")


def test_a_database_holding_keys_the_suite_did_not_write_is_refused_and_left_untouched(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set("someone-elses:data", "precious")
    result = _run(pytester, monkeypatch, redis_url)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"*{redis_url} holds 1 key(s) this suite did not write*PACT_TEST_REDIS_URL=*"]
    )
    assert client.get("someone-elses:data") == b"precious"
    assert not client.exists("written-by-the-test")
    client.close()


def test_an_empty_or_marked_database_is_flushed_around_each_test_and_left_marked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set(MARKER_KEY, "1")
    client.set("pact:left-by-an-earlier-test", "1")
    _run(pytester, monkeypatch, redis_url).assert_outcomes(passed=1)
    assert client.keys("*") == [MARKER_KEY.encode()]
    client.delete(MARKER_KEY)
    _run(pytester, monkeypatch, redis_url).assert_outcomes(passed=1)
    assert client.keys("*") == [MARKER_KEY.encode()]
    client.close()
