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
from typing import Final

from gateway.store.base import Owner

REPO_ROOT = Path(__file__).resolve().parents[2]
PREVIOUS_RELEASE = "6ad6c1f"
"""The last landed release (issue 20): what replicas run beside this one during a rolling upgrade."""


CONVERSATIONS_WRITER = """
import asyncio, json, sys
from gateway.config import CacheConfig
from gateway.protocol.messages import render_reply
from gateway.store.base import GrantCheck, Owner
from gateway.store.redis import RedisStore

async def main(url, now):
    store = RedisStore(CacheConfig(url=url), clock=lambda: now)
    alice = Owner("acme", "https://pa.example", "alice")
    replies = {}
    for context, message, text, close in (("ctx-a", "a1", "hello", False), ("ctx-b", "b1", "bye", True)):
        await store.begin_turn(alice, None, message, text, context)
        replies[message] = render_reply("r-" + "ab" * 16, context, "Answer to " + text).decode()
        await store.complete_turn(alice, context, message, replies[message].encode(), close=close)
    await store.begin_turn(alice, "ctx-a", "a2", "more", "")
    replies["a2"] = '{"message":"kept as sent"}'
    await store.complete_turn(alice, "ctx-a", "a2", replies["a2"].encode(), close=False)
    await store.begin_turn(alice, "ctx-a", "a3", "still running", "")
    grant = GrantCheck("pact:acme:grant:g-1", "1" * 32)
    await store.begin_turn(alice, None, "c1", "as a user", "ctx-c", grant=grant)
    await store.complete_turn(alice, "ctx-c", "c1", b"delegated reply", close=False)
    await store.close()
    print(json.dumps(replies))

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""
"""Run by an earlier release (``run_release(root, CONVERSATIONS_WRITER, redis_url, now)``): Alice's
conversations ctx-a (two replies, a turn still running), ctx-b (closed) and ctx-c (delegated, as
the Brand user ``"1" * 32`` under the grant ``pact:acme:grant:g-1``); prints the replies it stored,
as JSON by ``messageId``. What every upgrade test starts from."""


ALICE: Final = Owner("acme", "https://pa.example", "alice")
"""The owner of every conversation :data:`CONVERSATIONS_WRITER` writes."""
GRANT: Final = "pact:acme:grant:g-1"
"""The grant its delegated conversation ctx-c ran under (its key, as the release reads it)."""
USER_1: Final = "1" * 32
"""ctx-c's Brand user (a user digest)."""
START: Final = 1_800_000_000.0
"""The time the upgrade tests give it (``now``), and start their own clock at."""


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
