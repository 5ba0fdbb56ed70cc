"""``python -m tests.reliability_report``: docs/reliability.md, generated from a run of the reliability tests.

The figures in that document are never typed: this command runs the fault, attack and load tests
(:data:`GROUPS`) with pytest, writing a JUnit XML report and, through ``PACT_RELIABILITY_FIGURES``,
the figures the tests measured (:mod:`tests.support.figures`); then a soak of the gateway CLI
(``python -m bench soak``, ``--soak`` seconds on the Redis database ``--soak-redis-url``, which it
flushes; ``--soak 0`` skips it); and renders what came back: faults survived, attack cases tried,
load held, recovery times, memory and descriptors under the soak, each test with its outcome.

Run it from the repository root with Redis up, as the suite needs it (``PACT_TEST_REDIS_URL``
names the test database). The document is written whatever the outcome, failures included; the
exit status is 1 when a test failed or the soak broke a bound.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import tomllib
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.figures import FIGURES_ENV, Figure, read_figures

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "docs" / "reliability.md"
DEFAULT_SOAK_REDIS_URL = "redis://127.0.0.1:6379/14"
"""The benchmark's own database (``bench.harness.DEFAULT_REDIS_URL``), which the soak flushes."""


@dataclass(frozen=True)
class Group:
    """A section of the document: the tests that measure one kind of reliability.

    ``selection`` holds pytest node ids: a file, or ``file::test`` for the tests of a file that
    are about this (every parametrization of it).
    """

    title: str
    about: str
    selection: tuple[str, ...]


GROUPS: tuple[Group, ...] = (
    Group(
        "Faults",
        "The bot, a personal agent's key server and Redis failing in every way a deployment meets, on real "
        "processes on loopback: each turn gets `INTERNAL` within its bound, nothing is stored, the retry "
        "after recovery runs once; key servers down, slow, garbage or flooded cost one fetch per cool-down; "
        "Redis killed, timing out or failed over loses no reply that was returned.",
        (
            "tests/ops/test_bot_faults.py",
            "tests/ops/test_bot_guard.py",
            "tests/auth/test_jwks.py::test_failed_first_fetch_is_jwks_unavailable",
            "tests/auth/test_jwks.py::test_last_good_keys_survive_an_outage_after_ttl_expiry",
            "tests/auth/test_jwks.py::test_failed_fetches_are_retried_only_after_the_cooldown",
            "tests/auth/test_jwks.py::test_redirect_is_not_followed",
            "tests/auth/test_jwks.py::test_body_over_max_bytes_refused",
            "tests/auth/test_jwks.py::test_s3_1_document_without_keys_array_is_a_failed_fetch",
            "tests/auth/test_jwks.py::test_s3_1_flood_of_50_random_kids_causes_no_extra_fetch_within_cooldown",
            "tests/auth/test_open_policy.py",
            "tests/ops/test_redis_faults.py",
            "tests/store/test_unknown_outcomes.py",
            "tests/ops/test_redis_failover.py",
        ),
    ),
    Group(
        "Attacks",
        "Hostile input: property-based requests (Hypothesis) over `message:send` bodies, the headers a "
        "client controls, query strings and paths, each answered in the shape of its class and never "
        "with a `5xx` or a traceback; the JWT attack corpus against the PA JWT, the OAuth client "
        "credential and the delegation token, each a bare `401` at the cost of one verification; slow "
        "and oversized requests cut off by `request_timeout` and the header limits.",
        (
            "tests/http/test_hostile_input.py",
            "tests/auth/test_jwt_attacks.py",
            "tests/ops/test_request_limits.py",
        ),
    ),
    Group(
        "Load",
        "Many personal-agent Users at once through `pact-gateway serve`, each reply checked against its "
        "request (the bot echoes the `messageId`, the `sub`, the conversation and the text), retries "
        "mixed in, on the memory store and on Redis.",
        ("tests/ops/test_load.py",),
    ),
    Group(
        "Secrets in logs",
        "Every test of the suite has its log records scanned for the tokens, codes, assertions and "
        "sessions it used (`tests/support/secrets_scan.py`); these tests prove the scan catches a leak.",
        ("tests/test_secrets_scan.py",),
    ),
)


@dataclass(frozen=True)
class Case:
    """One test case as the JUnit report has it."""

    node: str
    outcome: str
    """``passed``, ``failed``, ``error``, ``skipped`` or ``xfailed``."""
    seconds: float
    detail: str = ""


def _node_of(classname: str, name: str) -> str:
    """``tests.ops.test_load`` + ``test_x[memory]`` → ``tests/ops/test_load.py::test_x[memory]``.

    A test in a class has the class as the last part of ``classname``; the module is the longest
    prefix that is a file.
    """
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (REPO_ROOT / path).is_file():
            return "::".join([path, *parts[cut:], name])
    return f"{classname}::{name}"


def parse_junit(path: Path) -> list[Case]:
    """Every test case of a pytest JUnit XML report, with its outcome."""
    root = ET.parse(path).getroot()  # noqa: S314 - pytest's own report of this run
    cases: list[Case] = []
    for testcase in root.iter("testcase"):
        outcome, detail = "passed", ""
        for child in testcase:
            if child.tag in {"failure", "error"}:
                outcome, detail = ("failed" if child.tag == "failure" else "error"), child.get("message", "")
            elif child.tag == "skipped":
                is_xfail = child.get("type") == "pytest.xfail"
                outcome, detail = ("xfailed" if is_xfail else "skipped"), child.get("message", "")
        node = _node_of(testcase.get("classname", ""), testcase.get("name", ""))
        cases.append(Case(node, outcome, float(testcase.get("time", "0")), detail))
    return cases


def in_selection(node: str, selection: Iterable[str]) -> bool:
    """Whether the case ``node`` is one of ``selection``'s files or tests (any parametrization)."""
    file, _, test = node.partition("::")
    for chosen in selection:
        chosen_file, _, chosen_test = chosen.partition("::")
        if file == chosen_file and (
            not chosen_test or test == chosen_test or test.startswith(f"{chosen_test}[")
        ):
            return True
    return False


@dataclass(frozen=True)
class Soak:
    """Whether a soak was asked for, and its result (``None`` when it did not finish)."""

    wanted: bool
    result: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return not self.wanted or (self.result is not None and bool(self.result["verdict"]["ok"]))


@dataclass
class Section:
    group: Group
    cases: list[Case] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)

    def count(self, *outcomes: str) -> int:
        return sum(1 for case in self.cases if case.outcome in outcomes)

    def figures_named(self, name: str) -> list[dict[str, Any]]:
        return [_values(figure) for figure in self.figures if figure.get("figure") == name]


def _values(figure: Figure) -> dict[str, Any]:
    values = figure.get("values")
    return dict(values) if isinstance(values, dict) else {}


def sections(cases: Sequence[Case], figures: Sequence[Figure]) -> list[Section]:
    """The cases and figures of each group, in :data:`GROUPS` order."""
    made = [Section(group) for group in GROUPS]
    for section in made:
        section.cases = [case for case in cases if in_selection(case.node, section.group.selection)]
        nodes = {case.node for case in section.cases}
        section.figures = [figure for figure in figures if figure.get("test") in nodes]
    return made


# ---- rendering ---------------------------------------------------------------------------------


def _n(value: Any) -> str:
    """A figure as the document prints it: integers with thousands separators, floats to 2 places."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.2f}"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def attack_cases(section: Section) -> tuple[int, dict[str, int]]:
    """Attack cases tried: a property's examples as it counted them, every other test case as one;
    and the total per corpus."""
    counted = {figure.get("test") for figure in section.figures if figure.get("figure") == "attack"}
    per_corpus: dict[str, int] = {}
    for values in section.figures_named("attack"):
        corpus = str(values.get("corpus", "attack"))
        per_corpus[corpus] = per_corpus.get(corpus, 0) + int(values.get("cases", 0))
    for case in section.cases:
        if case.node not in counted and case.outcome != "skipped":
            file = case.node.partition("::")[0]
            per_corpus[file] = per_corpus.get(file, 0) + 1
    return sum(per_corpus.values()), per_corpus


def summary_rows(made: Sequence[Section], soak: Soak) -> list[tuple[str, str]]:
    by_title = {section.group.title: section for section in made}
    faults, attacks, load = by_title["Faults"], by_title["Attacks"], by_title["Load"]
    scan = by_title["Secrets in logs"]
    rows = [
        (
            "Faults survived",
            f"{_n(faults.count('passed'))} of {_n(len(faults.cases))} fault tests passed"
            + (f", {_n(faults.count('xfailed'))} known failures (xfail)" if faults.count("xfailed") else ""),
        ),
    ]
    total, per_corpus = attack_cases(attacks)
    corpora = "; ".join(f"{_n(count)} {corpus}" for corpus, count in per_corpus.items())
    failed = attacks.count("failed", "error")
    rows.append(
        (
            "Attack cases tried",
            f"{_n(total)} ({corpora}); "
            + ("every one answered as it must" if failed == 0 else f"{_n(failed)} tests FAILED"),
        )
    )
    held = [
        f"{values.get('backend', '?')}: {_n(values.get('requests', 0))} requests "
        f"({_n(values.get('turns', 0))} turns of {_n(values.get('users', 0))} Users, "
        f"{_n(values.get('retries', 0))} retries), {_n(values.get('errors', 0))} errors, "
        f"{_n(values.get('lost', 0))} lost, {_n(values.get('crossed', 0))} crossed"
        for values in load.figures_named("load")
    ]
    rows.append(("Load held", "; ".join(held) if held else "no load figure recorded"))
    recoveries = [
        f"{values.get('what', 'recovery')}: {_n(values.get('seconds'))} s"
        + (f" (bound {_n(values.get('bound_s'))} s)" if "bound_s" in values else "")
        for section in made
        for values in section.figures_named("recovery")
    ]
    rows.append(("Recovery times", "; ".join(recoveries) if recoveries else "no recovery figure recorded"))
    if soak.wanted:
        rows.append(
            ("Soak", _soak_line(soak.result) if soak.result is not None else "did not finish: FAILED")
        )
    scanned = sum(len(section.cases) for section in made)
    failing = sum(section.count("failed", "error") for section in made)
    verdict = "none leaked" if failing == 0 else "a failed test may be a leak (its message says)"
    rows.append(
        (
            "Secrets in logs",
            f"every one of these {_n(scanned)} tests had its log records scanned, {verdict}; the "
            f"scanner's own tests: {_n(scan.count('passed'))} of {_n(len(scan.cases))} passed",
        )
    )
    return rows


def _soak_line(soak: dict[str, Any]) -> str:
    checked, bounds = soak["verdict"], soak["bounds"]
    mib = 1024 * 1024
    return (
        f"{soak['duration_s']:g} s on {soak['cache']} at concurrency {soak['concurrency']}: "
        f"{_n(soak['turns'])} turns, {_n(soak['errors'])} errors; resident memory "
        f"{checked['rss_growth_bytes'] / mib:+.1f} MiB (bound {bounds['rss_bytes'] / mib:.1f} MiB), "
        f"open descriptors {checked['fd_growth']:+d} (bound {bounds['open_fds']}): "
        + ("within bounds" if checked["ok"] else "BOUND EXCEEDED")
    )


def _figure_text(figure: Figure) -> str:
    values = _values(figure)
    return f"{figure.get('figure')}: " + ", ".join(
        f"{key} {_n(value)}" for key, value in sorted(values.items())
    )


INTRO = (
    "What the gateway survives, shown by a test run rather than claimed: its bot, a personal "
    "agent's key server and Redis failing, hostile input and token attacks, many users at once, and "
    "a soak under load without memory or descriptors growing. Read it to judge whether the gateway can "
    "stand in front of your bot; each test below can be run again from the repository."
)
"""The page's first paragraph: what it is for, to someone who has never seen the project."""


def render(made: Sequence[Section], soak: Soak, provenance: str) -> str:
    """docs/reliability.md for these sections and soak."""
    lines = [
        "# Reliability, measured",
        "",
        "<!-- Generated by `python -m tests.reliability_report`. Do not edit: run it again. -->",
        "",
        INTRO,
        "",
        f"Generated by `python -m tests.reliability_report` {provenance}. Every figure below comes from "
        "that run: the tests' outcomes from pytest's JUnit report, the measurements from what the tests "
        "recorded (`tests/support/figures.py`), the soak from `python -m bench soak`. What each test "
        "defends against is in [THREAT_MODEL.md](../THREAT_MODEL.md).",
        "",
        "| | |",
        "| - | - |",
    ]
    lines += [f"| {title} | {_cell(text)} |" for title, text in summary_rows(made, soak)]
    for section in made:
        lines += ["", f"## {section.group.title}", "", section.group.about, ""]
        lines += [
            f"{_n(section.count('passed'))} passed, {_n(section.count('failed', 'error'))} failed, "
            f"{_n(section.count('xfailed'))} known failures (xfail), {_n(section.count('skipped'))} skipped.",
            "",
            "| Test | Outcome | Seconds | Figures |",
            "| - | - | - | - |",
        ]
        for case in section.cases:
            recorded = "; ".join(_figure_text(f) for f in section.figures if f.get("test") == case.node)
            outcome = (
                case.outcome
                if not case.detail or case.outcome == "passed"
                else f"{case.outcome}: {case.detail}"
            )
            lines.append(
                f"| `{_cell(case.node)}` | {_cell(outcome[:200])} | {case.seconds:.2f} | {_cell(recorded)} |"
            )
    if soak.result is not None:
        about = (
            "`python -m bench soak`: `pact-gateway serve` under closed-loop load from the benchmark's load "
            "generator, read from `/proc/<pid>` after a warm-up (before), every second (peak) and once the "
            "load's connections are closed (after)."
        )
        lines += ["", "## Soak", "", about, "", _soak_line(soak.result) + ".", ""]
        lines += ["| Reading | Resident memory (MiB) | Open descriptors |", "| - | - | - |"]
        for reading in ("before", "peak", "after"):
            values = soak.result[reading]
            lines.append(f"| {reading} | {values['rss_bytes'] / (1024 * 1024):.1f} | {values['open_fds']} |")
    lines += [
        "",
        "## Regenerating",
        "",
        "```sh",
        "PACT_TEST_REDIS_URL=redis://127.0.0.1:6379/15 .venv/bin/python -m tests.reliability_report"
        " [--soak SECONDS] [--soak-redis-url URL] [--out PATH]",
        "```",
        "",
        "A test adds a figure with `tests.support.figures.record_figure(name, **values)`; the names this "
        "document summarises are `load`, `attack` (`corpus`, `cases`) and `recovery` (`what`, `seconds`, "
        "`bound_s`); any other figure is listed beside its test.",
        "",
    ]
    return "\n".join(lines)


# ---- running -----------------------------------------------------------------------------------


def run_tests(workdir: Path, extra: Sequence[str]) -> tuple[list[Case], list[Figure], int]:
    """Run every group's tests once: their cases, the figures they recorded, pytest's exit status."""
    junit, figures = workdir / "junit.xml", workdir / "figures.jsonl"
    selection = [node for group in GROUPS for node in group.selection]
    env = {**os.environ, FIGURES_ENV: str(figures)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            f"--junitxml={junit}",
            *extra,
            *selection,
        ],
        cwd=REPO_ROOT,
        env=env,
        check=False,
    )
    cases = parse_junit(junit) if junit.exists() else []
    return cases, read_figures(figures), done.returncode


def run_soak(workdir: Path, seconds: float, redis_url: str) -> Soak:
    """``python -m bench soak`` for ``seconds`` (a tenth of it, at least 2 s, as warm-up)."""
    if seconds <= 0:
        return Soak(wanted=False)
    out = workdir / "soak.json"
    warmup = max(2.0, seconds / 10)
    argv = ["--duration", str(seconds), "--warmup", str(warmup), "--redis-url", redis_url, "--out", str(out)]
    subprocess.run([sys.executable, "-m", "bench", "soak", *argv], cwd=REPO_ROOT, check=False)
    if not out.exists():
        return Soak(wanted=True)
    result: dict[str, Any] = json.loads(out.read_text())
    return Soak(wanted=True, result=result)


def provenance() -> str:
    """When, from which release (and whether the tree had changes), on what.

    The release, not the commit: the page is for people who run the gateway, who know its
    version (``pact-gateway --version``) and the changelog, not the repository's history.
    """
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    dirty = " with uncommitted changes" if done.stdout.strip() else ""
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    today = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")
    return (
        f"on {today} from pact-gateway {version}{dirty}, on {os.cpu_count()} cores "
        f"(Linux {platform.release()}, Python {platform.python_version()})"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tests.reliability_report", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="the document (default docs/reliability.md)"
    )
    parser.add_argument("--soak", type=float, default=60.0, help="seconds of soak (default 60; 0 skips it)")
    parser.add_argument(
        "--soak-redis-url", default=DEFAULT_SOAK_REDIS_URL, help="a database the soak may flush"
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest before the tests (after --)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pact-reliability-") as tmp:
        cases, figures, status = run_tests(Path(tmp), args.pytest_args)
        soak = run_soak(Path(tmp), args.soak, args.soak_redis_url)
    if not cases:
        print("python -m tests.reliability_report: pytest ran no test; nothing written", file=sys.stderr)
        return 2
    made = sections(cases, figures)
    args.out.write_text(render(made, soak, provenance()), encoding="utf-8")
    print(f"wrote {args.out}")
    for title, text in summary_rows(made, soak):
        print(f"  {title}: {text}")
    return 0 if status == 0 and soak.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
