"""Shared fixtures live in tests/support; this file only registers them."""

pytest_plugins = [
    "tests.support.pa",
    "tests.support.redis",
    "tests.support.bot",
    "tests.support.gateway",
    "tests.support.delegation",
]
