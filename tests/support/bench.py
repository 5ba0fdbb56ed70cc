"""Running a benchmark tool as a user does: ``python -m …`` from the repository root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bench.fronts import DEFAULT_REDIS_URL

REPO_ROOT = Path(__file__).resolve().parents[2]
BENCH_REDIS_URL = os.environ.get("PACT_TEST_REDIS_URL", DEFAULT_REDIS_URL)
"""The database a bench tool under test may flush: the bench's own, or the one this test run was given,
so that two test runs on one machine never flush each other's."""


def run_module(module: str, *args: str, timeout: float = 300) -> str:
    """``python -m module args…``: its stdout; a non-zero exit fails the test with its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"python -m {module} failed:\n{done.stderr[-4000:]}"
    return done.stdout
