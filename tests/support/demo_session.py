"""A running ``pact-gateway demo`` and the docs' shell blocks made runnable against it (issue 19 row 9).

The README's tour (tests/test_readme_session.py) and docs/operations.md's admin example
(tests/test_docs_sessions.py) are pasted as a reader pastes them; what differs on a test machine is
said here once: the ports (free ones, never the demo's defaults another run may hold), the venv
(the tests' interpreter's) and the directory the demo writes its key and admin token to.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest

from tests.test_cli import ROOT, free_port

# The docs' spellings: the demo's default ports, the scripts' venv, the demo's key directory.
DOCS_PORT: Final = 8080
DOCS_BOT_PORT: Final = 9100
DOCS_ADMIN_PORT: Final = 9091
DOCS_BIN: Final = ".venv/bin/"
DOCS_KEY_DIR: Final = "/tmp/pact-demo-…"
DOCS_KEY: Final = Path(f"{DOCS_KEY_DIR}/demo-pa.jwk.json")
START_LIMIT: Final = 60.0
"""Seconds the demo may take to print its session (an interpreter start on a busy machine)."""


async def pasted(script: Path, **options: Any) -> asyncio.subprocess.Process:
    """``script`` as a reader pastes it into a careful shell: ``bash -eu -o pipefail``, started in its
    own folder, with nothing on stdin and its output piped (``options`` go to the subprocess)."""
    return await asyncio.create_subprocess_exec(
        "bash",
        "-eu",
        "-o",
        "pipefail",
        str(script),
        cwd=script.parent,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        **options,
    )


class Demo:
    """``python -m gateway demo`` of this tree on free ports, in its own process group, its key in ``tmp``."""

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.bot_port = free_port()
        self.tmp = tmp
        self.log = tmp / "demo.stderr"
        self.process: asyncio.subprocess.Process | None = None
        self.printed = ""

    async def start(self) -> str:
        """Start the demo and return the session it prints."""
        # cwd is tmp, so the tree under test is put first on the path: not whatever the venv installed.
        environ = {**os.environ, "TMPDIR": str(self.tmp), "PYTHONPATH": str(ROOT)}
        with self.log.open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "gateway",
                "demo",
                "--port",
                str(self.port),
                "--bot-port",
                str(self.bot_port),
                cwd=self.tmp,
                env=environ,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
                start_new_session=True,
            )
        assert self.process.stdout is not None
        printed = await asyncio.wait_for(self.process.stdout.readuntil(b"Press Ctrl+C to stop."), START_LIMIT)
        self.printed = printed.decode()
        return self.printed

    @property
    def key_file(self) -> Path:
        """The personal agent's key, as the printed ``token --key`` names it."""
        found = re.search(r"token --key (\S+)", self.printed)
        assert found is not None, self.printed
        return Path(shlex.split(found.group(1))[0])

    @property
    def admin_port(self) -> int:
        """Where the demo says its admin API listens."""
        found = re.search(r"admin API on http://127\.0\.0\.1:(\d+)/admin/", self.printed)
        assert found is not None, self.printed
        return int(found.group(1))

    def runnable(self, block: str) -> str:
        """A docs block with the docs' spellings made this demo's: ports, venv, key directory."""
        bin_dir = f"{Path(sys.executable).parent}/"
        return (
            block.replace(DOCS_KEY_DIR, str(self.key_file.parent))
            .replace(f"127.0.0.1:{DOCS_PORT}", f"127.0.0.1:{self.port}")
            .replace(f"127.0.0.1:{DOCS_ADMIN_PORT}", f"127.0.0.1:{self.admin_port}")
            .replace(DOCS_BIN, bin_dir)
        )

    def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)

    async def wait(self) -> None:
        if self.process is not None:
            await self.process.wait()


@pytest.fixture
async def demo(tmp_path: Path) -> AsyncIterator[Demo]:
    """A demo for the test to start (``await demo.start()``); killed with its process group after."""
    running = Demo(tmp_path)
    try:
        yield running
    finally:
        running.stop()
        await running.wait()
