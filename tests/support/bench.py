"""Running a benchmark tool as a user does: ``python -m …`` from the repository root."""

from __future__ import annotations

import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

from tests.support.redis import TEST_REDIS_URL, suite_database

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_REDIS_URL = TEST_REDIS_URL
"""The database a bench tool under test may flush: the test run's own (``PACT_TEST_REDIS_URL``), so
that the suite never flushes a database it was not given, and two runs never flush each other's."""


def run_module(module: str, *args: str, timeout: float = 300) -> str:
    """``python -m module args…``: its stdout; a non-zero exit fails the test with its stderr.

    A tool given :data:`BENCH_REDIS_URL` runs inside :func:`suite_database`: it flushes that database,
    so the suite first makes sure the database is its own, and leaves it marked as such."""
    with ExitStack() as stack:
        if BENCH_REDIS_URL in args:
            stack.enter_context(suite_database(BENCH_REDIS_URL))
        done = subprocess.run(
            [sys.executable, "-m", module, *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    assert done.returncode == 0, f"python -m {module} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    return done.stdout
