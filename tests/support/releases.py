"""An earlier release of the gateway, run beside this one: its ``gateway/`` package taken out of git.

For the upgrade tests (tests/store/test_redis_upgrade.py, test_redis_rolling_upgrade.py,
test_oauth_rolling_upgrade.py): the
earlier release is the real code a deployment runs, in a temporary directory, run in a subprocess
of its own (its modules must not mix with this release's) against the test's Redis database.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = "6ad6c1f"
"""The last landed release (issue 20): what replicas run beside this one during a rolling upgrade."""


def extract_release(commit: str, into: Path) -> Path:
    """``gateway/`` as of ``commit``, extracted under ``into``; the directory to put on ``PYTHONPATH``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, "gateway"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def previous_release(tmp_path: Path) -> Path:
    """:data:`PREVIOUS_RELEASE`'s ``gateway/``, extracted under ``tmp_path``."""
    return extract_release(PREVIOUS_RELEASE, tmp_path / "previous-release")


async def run_release(root: Path, code: str, *args: str) -> str:
    """Run ``code`` with the release at ``root`` (and nothing of this one) importable; its stdout."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        *args,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    return out.decode()
