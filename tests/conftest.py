"""Shared fixtures live in tests/support; this file only registers them."""

pytest_plugins = [
    # First: the helpers below import it, and a plugin imported before it is registered is not rewritten.
    # Every test's log records are scanned for the secrets it used (issue 12).
    "tests.support.secrets_scan",
    "tests.support.pa",
    "tests.support.redis",
    "tests.support.redis_servers",
    "tests.support.redis_sentinel",
    "tests.support.redis_cluster",
    "tests.support.bot",
    "tests.support.gateway",
    "tests.support.delegation",
    "tests.support.fake_directline",
    "tests.support.fake_openai",
    "tests.support.fake_rasa",
    "tests.support.fake_http_bot",
    "tests.support.demo_session",
    # pytester: tests/support's own plugin is tested by running a test file through it.
    "pytester",
]
