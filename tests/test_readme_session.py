"""The README's curl walk-through is the demo's printed session, and it works as pasted (issue 19 row 9).

The README once held hand-written copies that drifted: a polling loop that reused a 300-second JWT
and, five minutes on, printed a ``JSONDecodeError`` traceback every 5 s forever. Here the README's
block is held equal to :func:`gateway.demo.session_text`, then run in bash against a real demo,
with the test as the person at the browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import aiohttp

from gateway.demo import DEFAULT_CONFIG, SIGNING_KEY_ENV, demo_config, new_signing_key, session_text
from gateway.demo_check import log_in_and_allow
from tests.support.demo_session import DOCS_BIN, DOCS_BOT_PORT, DOCS_KEY, DOCS_PORT, Demo, pasted
from tests.test_cli import ROOT

README = ROOT / "README.md"
HEADING = "## A five-minute tour"
SESSION_LIMIT = 120.0
"""Seconds the whole pasted session may take: one or two 5 s polls, a few CLI starts."""


def readme_block() -> str:
    """The one ``sh`` block of the README's walk-through section."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index(f"\n{HEADING}\n") :]
    section = section[: section.index("\n## ", len(HEADING) + 2)]
    blocks = re.findall(r"\n```sh\n(.*?)\n```\n", section, flags=re.DOTALL)
    assert len(blocks) == 1, f"{HEADING} holds {len(blocks)} sh blocks, not one"
    return str(blocks[0])


def test_issue19_readme_walk_through_is_the_demo_session() -> None:
    config = demo_config(DEFAULT_CONFIG, DOCS_PORT, DOCS_BOT_PORT, {SIGNING_KEY_ENV: new_signing_key()})
    printed = session_text(config, DOCS_KEY, python=f"{DOCS_BIN}python", cli=f"{DOCS_BIN}pact-gateway")
    assert readme_block() == printed


async def play_the_person(lines: asyncio.StreamReader, seen: list[str]) -> None:
    """Read the session's output and, each time a poll loop has polled once in vain, log in and Allow
    what it polls for: step 6's device authorization (step 8's loop), then step 10's step-up (step
    11's), whose consent page asks for orders:cancel and keeps orders:read. Each loop has to wait,
    mint a fresh JWT and poll again."""
    authorizations: list[tuple[dict[str, Any], dict[str, list[str]]]] = []
    approved = 0
    while approved < 2:
        line = (await lines.readline()).decode()
        assert line, f"the session ended before polling for its tokens: {''.join(seen)}"
        seen.append(line)
        with contextlib.suppress(ValueError):
            answer = json.loads(line)
            if isinstance(answer, dict) and "verification_uri_complete" in answer:
                authorizations.append((answer, {}))
            elif isinstance(answer, dict) and "task" in answer:
                metadata = answer["task"]["metadata"]
                started = {
                    "verification_uri_complete": metadata["pact.verificationUriComplete"],
                    "user_code": metadata["pact.userCode"],
                }
                authorizations.append((started, {"scopes": ["orders:cancel"], "kept": ["orders:read"]}))
        if line.startswith("no access_token in the answer: ") and len(authorizations) > approved:
            assert '"authorization_pending"' in line, line
            started, consent = authorizations[approved]
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
                await log_in_and_allow(browser, started, **consent)
            approved += 1


async def test_issue19_readme_walk_through_runs_against_the_demo(demo: Demo, tmp_path: Path) -> None:
    """Steps 1-11 as pasted, in ``bash -eu -o pipefail``: each step succeeds, step 8's loop gets the
    token once the person approves, step 9 carries a receipt, step 10 asks for a step-up bound to
    one order (RFC 9396), step 11's loop gets the stepped-up token once the person approves it and
    the cancellation's receipt names the approved detail, and nothing anywhere is a traceback."""
    await demo.start()
    script = tmp_path / "session.sh"
    script.write_text(demo.runnable(readme_block()), encoding="utf-8")
    # stderr: the teed answers, interleaved as a terminal shows them.
    session = await pasted(script, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    assert session.stdout is not None
    seen: list[str] = []
    try:
        await asyncio.wait_for(play_the_person(session.stdout, seen), SESSION_LIMIT)
        rest = await asyncio.wait_for(session.stdout.read(), SESSION_LIMIT)
        code = await asyncio.wait_for(session.wait(), SESSION_LIMIT)
    finally:
        if session.returncode is None:
            os.killpg(session.pid, signal.SIGKILL)
            await session.wait()
    output = "".join(seen) + rest.decode()
    assert code == 0, output
    assert "Traceback" not in output
    assert "Traceback" not in demo.log.read_text(encoding="utf-8")
    assert "No delegation token" not in output
    receipt = output.index('"pact.receipt"')
    step_up = output.index("TASK_STATE_AUTH_REQUIRED", receipt)
    assert '"orders:cancel"' in output[receipt:]
    assert '"pact.authorizationDetails":[{"actions":["cancel"],"identifier":"A-10002"' in output[step_up:]
    cancelled = output.index("Order A-10002 is cancelled.", step_up)
    assert '"authorizationDetail": {' in output[cancelled:]
