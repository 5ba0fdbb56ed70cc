"""Every shell block of the README and the docs is run against the demo, checked, or listed with
the reason it is neither (issue 19 row 9: "the shell blocks of the README and the docs run against
the demo", so they cannot drift).

* docs/operations.md's admin example is pasted into the tour's shell after its step 5, against a
  real ``pact-gateway demo``: each command must succeed and print what its ``# →`` line says (``…``
  standing for what varies), and the erasure must really erase: afterwards the person's
  conversation answers through the A2A interface exactly as an unknown one (§4.2).
* The README's tour is run by tests/test_readme_session.py.
* The benchmark commands take minutes: each line's module, subcommand and flags are checked against
  the command's own ``--help``, so a renamed flag fails here.
* Deployment commands need a registry and a cluster: listed with the reason, and the files they name
  must exist.

A new shell block that is none of these fails :func:`test_issue19_every_shell_block_is_run_or_listed`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Final, NamedTuple

import aiohttp
import pytest

from gateway.demo import DEMO_SUB
from gateway.pa_keys import mint_token
from tests.support.demo_session import DOCS_BIN, Demo, pasted
from tests.test_cli import ROOT
from tests.test_readme_session import readme_block

SHELL_FENCE: Final = re.compile(r"^```(sh|bash|shell|console)$")
ARROW: Final = "# → "
SESSION_LIMIT: Final = 120.0
"""Seconds the tour's first steps and the admin example may take together: a few interpreter starts."""
HELP_LIMIT: Final = 60.0


class Block(NamedTuple):
    """A fenced shell block: its file (relative to the repository), the line its text starts on, its text."""

    path: str
    line: int
    text: str

    @property
    def first(self) -> str:
        return self.text.split("\n", 1)[0]


def shell_blocks() -> list[Block]:
    """Every ```sh / bash / shell / console block of README.md and docs/*.md."""
    found: list[Block] = []
    for source in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = source.read_text(encoding="utf-8").split("\n")
        index = 0
        while index < len(lines):
            if SHELL_FENCE.match(lines[index]):
                end = lines.index("```", index + 1)
                text = "\n".join(lines[index + 1 : end])
                found.append(Block(str(source.relative_to(ROOT)), index + 2, text))
                index = end
            index += 1
    return found


# Each block by file and first line. Run against the demo here:
ADMIN_EXAMPLE: Final = (
    "docs/operations.md",
    "PACT_ADMIN_TOKEN=$(cat '/tmp/pact-demo-…/admin-token')   # the demo's; yours comes from your secret store",  # noqa: E501 - a block's first line, as the docs have it
)
# Run against the demo by tests/test_readme_session.py:
README_TOUR: Final = ("README.md", "# 1. The Agent Card (public, no token):")
# Benchmarks (minutes each, some need valgrind): every line checked against its own --help.
BENCH: Final = frozenset(
    {
        ("docs/capacity.md", ".venv/bin/python -m bench slow_bot --where 600,2000 --redis-url redis://127.0.0.1:6379/2"),
        ("docs/capacity.md", ".venv/bin/python -m bench redis_bytes --cluster --conversations 100000"),
        ("docs/performance.md", ".venv/bin/python -m bench throughput --quick   # under two minutes: 2 short rounds per front, small samples"),  # noqa: E501 - a block's first line, as the docs have it
        ("docs/performance.md", ".venv/bin/python -m bench turn_count                                  # the count beside the baseline"),  # noqa: E501 - a block's first line, as the docs have it
        ("docs/reliability.md", "PACT_TEST_REDIS_URL=redis://127.0.0.1:6379/15 .venv/bin/python -m tests.reliability_report [--soak SECONDS] [--soak-redis-url URL] [--out PATH]"),  # noqa: E501 - a block's first line, as the docs have it
    }
)  # fmt: skip


class NotRun(NamedTuple):
    """A block no test runs: why not, and what of it is checked instead."""

    why: str
    paths: tuple[str, ...]
    """Files of this repository the block names: they must exist."""


NOT_RUN: Final = {
    ("README.md", "bash scripts/demo.sh     # the gateway + the bundled sample bot + a demo personal agent, and a curl session to paste"): NotRun(  # noqa: E501 - a block's first line, as the docs have it
        "the quick start: demo.sh installs a venv and runs what the demo fixture runs (`pact-gateway demo`); "
        "test.sh is the whole suite, this test among it; both are checked for bash syntax",
        ("scripts/demo.sh", "scripts/test.sh"),
    ),
    ("docs/operations.md", "# 1. Build and push the image (REGISTRY: yours, e.g. registry.example-provider.com; TAG: e.g. 0.1.0)."): NotRun(  # noqa: E501 - a block's first line, as the docs have it
        "needs docker, a registry, helm and a cluster (tests/deploy renders the chart and checks its config)",
        (
            "Dockerfile",
            "deploy/helm/pact-gateway/values-example.yaml",
            "deploy/helm/pact-gateway/templates/configmap.yaml",
        ),
    ),
    ("docs/operations.md", "kubectl -n support port-forward deploy/support-pact-gateway 9091:9091   # the release above: any pod (they share the store)"): NotRun(  # noqa: E501 - a block's first line, as the docs have it
        "needs a cluster running the chart (the Deployment the chart names for release `support`)",
        ("deploy/helm/pact-gateway/templates/deployment.yaml",),
    ),
}  # fmt: skip


def test_issue19_every_shell_block_is_run_or_listed() -> None:
    """A shell block appears in the docs: it is run, checked or listed here, or this fails."""
    found = {(block.path, block.first) for block in shell_blocks()}
    known = {ADMIN_EXAMPLE, README_TOUR, *BENCH, *NOT_RUN}
    assert found - known == set(), "shell blocks neither run nor listed in tests/test_docs_sessions.py"
    assert known - found == set(), "listed shell blocks no longer in the docs: update the lists"


def test_issue19_blocks_not_run_name_files_that_exist() -> None:
    for (path, first), listed in NOT_RUN.items():
        for named in listed.paths:
            assert (ROOT / named).is_file(), f"{path}: {first!r} names {named}, which is not there"
        for script in (name for name in listed.paths if name.endswith(".sh")):
            checked = subprocess.run(
                ["bash", "-n", str(ROOT / script)], capture_output=True, text=True, check=False
            )
            assert checked.returncode == 0, f"{script}: {checked.stderr}"


class Command(NamedTuple):
    text: str
    expected: str | None
    """What its ``# →`` lines say it prints, or ``None``."""


def commands(block: str) -> list[Command]:
    """The block's commands (``\\``-continued lines joined) and the output each is said to print."""
    found: list[Command] = []
    pending: list[str] = []
    for line in block.split("\n"):
        if line.startswith(ARROW):
            found[-1] = found[-1]._replace(expected=line[len(ARROW) :])
        elif line.startswith("#    ") and found and found[-1].expected is not None:
            found[-1] = found[-1]._replace(expected=f"{found[-1].expected} {line[1:]}")
        elif line.strip() and not line.startswith("#"):
            pending.append(line)
            if not line.endswith("\\"):
                found.append(Command("\n".join(pending), None))
                pending = []
    assert not pending, f"a command ends in a continuation: {pending}"
    return found


def says(expected: str, output: str) -> bool:
    """``output`` is ``expected`` with each ``…`` standing for anything, whitespace aside."""
    parts = ["".join(part.split()) for part in expected.split("…")]
    return (
        re.fullmatch(".*?".join(map(re.escape, parts)), "".join(output.split()), flags=re.DOTALL) is not None
    )


def test_says_reads_an_ellipsis_as_anything() -> None:
    assert says('{…, "state": "closed"}', '{"brand": "acme", "state": "closed"}\n')
    assert not says('{…, "state": "closed"}', '{"brand": "acme", "state": "open"}')
    assert not says('{"turns": 2}', '{"turns": 20}')


def admin_example() -> str:
    (block,) = [block.text for block in shell_blocks() if (block.path, block.first) == ADMIN_EXAMPLE]
    return block


def tour_steps_1_to_5() -> str:
    """The README tour up to its Delegated part: what the admin example says to paste it after."""
    tour = readme_block()
    return tour[: tour.index("\n# 6. ")]


async def test_issue19_operations_admin_example_runs_against_the_demo(demo: Demo, tmp_path: Path) -> None:
    """docs/operations.md's list, close and erase, pasted after the tour's step 5: every command
    succeeds and prints what the doc says, and the person is gone from the gateway afterwards."""
    await demo.start()
    steps = commands(demo.runnable(admin_example()))
    marked = "\n".join(f"echo '@@ {index}'\n{step.text}" for index, step in enumerate(steps))
    script = tmp_path / "admin.sh"
    script.write_text(f"{demo.runnable(tour_steps_1_to_5())}\n{marked}\n", encoding="utf-8")
    session = await pasted(script, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(session.communicate(), SESSION_LIMIT)
    output = out.decode()
    assert session.returncode == 0, f"{output}\n{err.decode()}"
    printed = re.split(r"^@@ (\d+)\n", output, flags=re.MULTILINE)
    by_step = {int(index): text for index, text in zip(printed[1::2], printed[2::2], strict=True)}
    assert sorted(by_step) == list(range(len(steps))), output
    for index, step in enumerate(steps):
        if step.expected is not None:
            assert says(step.expected, by_step[index]), (
                f"{step.text}\nprinted {by_step[index]!r}\nnot {step.expected!r}"
            )
    listed = json.loads(
        by_step[next(i for i, step in enumerate(steps) if "/admin/conversations?" in step.text)]
    )
    (conversation,) = listed["conversations"]
    await assert_forgotten(demo, conversation["context_id"])
    assert "Traceback" not in demo.log.read_text(encoding="utf-8")


async def assert_forgotten(demo: Demo, context_id: str) -> None:
    """The erased conversation, asked for by its personal agent with a fresh JWT, is an unknown one
    (§4.2): a turn on it is refused with ``Unknown contextId``, its retry is not replayed."""
    private = json.loads(demo.key_file.read_text(encoding="utf-8"))
    token = mint_token(
        private, iss=f"http://127.0.0.1:{demo.port}/demo-pa", sub=DEMO_SUB, aud="pact-gateway-demo", ttl=60
    )
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    url = f"http://127.0.0.1:{demo.port}/a2a/acme/message:send"
    async with aiohttp.ClientSession() as http:
        for message_id in ("m-2", "m-3"):  # the tour's stored turn, and a new one
            message = {
                "messageId": message_id,
                "role": "ROLE_USER",
                "contextId": context_id,
                "parts": [{"text": "It is A-10001"}],
            }
            async with http.post(url, json={"message": message}, headers=headers) as response:
                body = await response.json(content_type=None)
                assert response.status == 400, body
                assert "Unknown contextId" in json.dumps(body), body


class BenchLine(NamedTuple):
    module: str
    words: tuple[str, ...]
    """Subcommands before the first option."""
    flags: tuple[str, ...]


def bench_lines() -> list[tuple[Block, BenchLine]]:
    lines: list[tuple[Block, BenchLine]] = []
    for block in shell_blocks():
        if (block.path, block.first) not in BENCH:
            continue
        for line in block.text.split("\n"):
            argv = [
                word for word in shlex.split(line, comments=True) if not re.fullmatch(r"[A-Z_]+=\S*", word)
            ]
            assert argv[:2] == [f"{DOCS_BIN}python", "-m"], (
                f"{block.path}: {line!r} is not `{DOCS_BIN}python -m …`"
            )
            rest = argv[3:]
            options = next((i for i, word in enumerate(rest) if word.startswith(("-", "["))), len(rest))
            flags = tuple(
                found.group(1) for word in rest if (found := re.fullmatch(r"\[?(--[a-z][a-z0-9-]*)", word))
            )
            lines.append((block, BenchLine(argv[2], tuple(rest[:options]), flags)))
    return lines


@pytest.mark.parametrize(
    ("block", "line"),
    [
        pytest.param(block, line, id=" ".join((line.module, *line.words, *line.flags)))
        for block, line in bench_lines()
    ],
)
async def test_issue19_bench_commands_parse(block: Block, line: BenchLine) -> None:
    """Each benchmark line names a module and subcommand that answer ``--help``, and offers only
    flags that help lists: a renamed flag or front fails here, not in a reader's terminal."""
    run = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        line.module,
        *line.words,
        "--help",
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(run.communicate(), HELP_LIMIT)
    helped = out.decode()
    assert run.returncode == 0, (
        f"{block.path}: python -m {line.module} {' '.join(line.words)} --help\n{helped}"
    )
    for flag in line.flags:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helped), (
            f"{block.path}: {flag} not in\n{helped}"
        )
