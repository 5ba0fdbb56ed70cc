"""``python -m tests.reliability_report`` (issue 12, deliverable 6): what it selects exists, and what it
reads from pytest and the tests' figures is what it prints."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.reliability_report import (
    DEFAULT_OUT,
    GROUPS,
    REPO_ROOT,
    Case,
    Soak,
    in_selection,
    parse_junit,
    render,
    sections,
    summary_rows,
)
from tests.support.figures import FIGURES_ENV, Figure, read_figures, record_figure


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    }


@pytest.mark.parametrize("node", [node for group in GROUPS for node in group.selection])
def test_every_selected_test_exists(node: str) -> None:
    """A renamed or removed test would silently drop out of the document; this fails instead."""
    file, _, test = node.partition("::")
    assert (REPO_ROOT / file).is_file(), file
    if test:
        assert test in _test_functions(REPO_ROOT / file), node


def test_a_case_belongs_to_its_file_or_its_named_test_with_any_parameters() -> None:
    chosen = ["tests/ops/test_load.py", "tests/auth/test_jwks.py::test_redirect_is_not_followed"]
    assert in_selection("tests/ops/test_load.py::test_x[redis]", chosen)
    assert in_selection("tests/auth/test_jwks.py::test_redirect_is_not_followed", chosen)
    assert in_selection("tests/auth/test_jwks.py::test_redirect_is_not_followed[hang]", chosen)
    assert not in_selection("tests/auth/test_jwks.py::test_redirect_is_not_followed_twice", chosen)
    assert not in_selection("tests/auth/test_pa_jwt.py::test_redirect_is_not_followed", chosen)


def test_the_junit_report_gives_each_case_its_node_and_outcome(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    cases = [
        '<testcase classname="tests.ops.test_load" name="test_a[memory]" time="1.5" />',
        '<testcase classname="tests.ops.test_load" name="test_b" time="0.1">'
        '<failure message="boom"/></testcase>',
        '<testcase classname="tests.ops.test_load" name="test_c" time="0">'
        '<skipped type="pytest.xfail" message="row 5" /></testcase>',
        '<testcase classname="tests.ops.test_load" name="test_d" time="0">'
        '<skipped type="pytest.skip" message="no" /></testcase>',
    ]
    junit.write_text(
        f'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">{"".join(cases)}'
        "</testsuite></testsuites>",
        encoding="utf-8",
    )
    assert parse_junit(junit) == [
        Case("tests/ops/test_load.py::test_a[memory]", "passed", 1.5),
        Case("tests/ops/test_load.py::test_b", "failed", 0.1, "boom"),
        Case("tests/ops/test_load.py::test_c", "xfailed", 0.0, "row 5"),
        Case("tests/ops/test_load.py::test_d", "skipped", 0.0, "no"),
    ]


def test_a_figure_is_appended_only_when_a_report_asks_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = tmp_path / "figures.jsonl"
    monkeypatch.delenv(FIGURES_ENV, raising=False)
    record_figure("load", requests=1)
    assert not figures.exists()
    monkeypatch.setenv(FIGURES_ENV, str(figures))
    record_figure("recovery", what="failover", seconds=1.5, bound_s=45)
    (figure,) = read_figures(figures)
    assert figure["figure"] == "recovery"
    assert figure["values"] == {"what": "failover", "seconds": 1.5, "bound_s": 45}
    assert str(figure["test"]).endswith("::test_a_figure_is_appended_only_when_a_report_asks_for_it")


LOAD = "tests/ops/test_load.py::test_many_users_at_once_get_every_reply_and_only_their_own[redis]"
HOSTILE = "tests/http/test_hostile_input.py::test_s3_4_any_authorization_value_is_a_bare_401"
CORPUS = "tests/auth/test_jwt_attacks.py::test_jwt_attack_is_a_bare_401_costing_no_more_than_one_verification"
FAILOVER = "tests/ops/test_redis_failover.py::test_sentinel_failover_under_a_stream_of_turns"


def test_the_summary_adds_up_what_the_tests_recorded() -> None:
    cases = [
        Case(LOAD, "passed", 2.0),
        Case(HOSTILE, "passed", 0.3),
        Case(f"{CORPUS}[alg-none-pa]", "passed", 0.1),
        Case(f"{CORPUS}[alg-none-token]", "passed", 0.1),
        Case(f"{FAILOVER}_loses_no_reply_and_reruns_no_bot_call", "passed", 30.0),
        Case("tests/ops/test_bot_faults.py::test_x[refused]", "passed", 1.0),
        Case("tests/ops/test_bot_faults.py::test_x[garbage]", "failed", 1.0, "assert 500"),
        Case("tests/test_secrets_scan.py::test_y", "passed", 0.1),
        Case("tests/ops/test_other.py::test_not_selected", "passed", 0.1),
    ]
    figures: list[Figure] = [
        {
            "test": LOAD,
            "figure": "load",
            "values": {
                "backend": "redis",
                "requests": 1067,
                "turns": 800,
                "users": 100,
                "retries": 267,
                "errors": 0,
                "lost": 0,
                "crossed": 0,
            },
        },
        {
            "test": HOSTILE,
            "figure": "attack",
            "values": {"corpus": "hostile input (hypothesis)", "cases": 120},
        },
        {
            "test": f"{FAILOVER}_loses_no_reply_and_reruns_no_bot_call",
            "figure": "recovery",
            "values": {"what": "Sentinel failover", "seconds": 17.25, "bound_s": 45},
        },
    ]
    made = sections(cases, figures)
    rows = dict(summary_rows(made, Soak(wanted=False)))
    assert rows["Faults survived"] == "2 of 3 fault tests passed"
    assert rows["Attack cases tried"] == (
        "122 (120 hostile input (hypothesis); 2 tests/auth/test_jwt_attacks.py); "
        "every one answered as it must"
    )
    assert rows["Load held"] == (
        "redis: 1,067 requests (800 turns of 100 Users, 267 retries), 0 errors, 0 lost, 0 crossed"
    )
    assert rows["Recovery times"] == "Sentinel failover: 17.25 s (bound 45 s)"
    assert "Soak" not in rows
    document = render(made, Soak(wanted=True), "on a test day")
    assert "| Soak | did not finish: FAILED |" in document
    assert "| `tests/ops/test_bot_faults.py::test_x[garbage]` | failed: assert 500 | 1.00 |  |" in document
    assert "test_not_selected" not in document


def _table_nodes(document: str) -> list[tuple[str, str]]:
    """(section title, test node) for each row of the page's tables of tests."""
    found, title = [], ""
    for line in document.split("\n"):
        if line.startswith("## "):
            title = line[3:]
        elif line.startswith("| `tests/"):
            found.append((title, line.split("`")[1]))
    return found


def test_docs_reliability_md_is_not_stale() -> None:
    """docs/reliability.md is generated by a run of the fault tests, too slow for every change; what
    can be checked cheaply is checked here. Its fixed text is the generator's (the introduction,
    each section's heading and description in order, the way to regenerate it), every test it
    lists still exists in its section's selection, every selected test is listed, and it names a
    release rather than a commit. A failure here: run ``python -m tests.reliability_report``."""
    document = DEFAULT_OUT.read_text(encoding="utf-8")
    skeleton = render(sections([], []), Soak(wanted=False), "PROVENANCE")
    head, after = skeleton.split("PROVENANCE", 1)
    assert document.startswith(head), "the title or introduction differs from the generator's"
    assert after.split("\n", 1)[0] in document, "the sentence on where the figures come from differs"
    assert not re.search(r"from commit `", document), "the page names a commit, not a release"
    tail = skeleton[skeleton.index("\n## Regenerating\n") :]
    assert document.endswith(tail), "the regenerating section differs from the generator's"
    places = [document.index(f"\n## {group.title}\n\n{group.about}\n") for group in GROUPS]
    assert places == sorted(places), "the sections are not in the generator's order"

    listed = _table_nodes(document)
    by_title = {group.title: group for group in GROUPS}
    for title, node in listed:
        file, _, test = node.partition("::")
        assert (REPO_ROOT / file).is_file(), node
        assert re.sub(r"\[.*", "", test) in _test_functions(REPO_ROOT / file), f"{node}: no such test"
        assert in_selection(node, by_title[title].selection), f"{node}: not selected under {title}"
    names = {
        (file, re.sub(r"\[.*", "", test)) for _, node in listed for file, _, test in [node.partition("::")]
    }
    for group in GROUPS:
        for chosen in group.selection:
            file, _, test = chosen.partition("::")
            for name in [test] if test else sorted(_test_functions(REPO_ROOT / file)):
                assert (file, name) in names, f"{file}::{name} is selected but not on the page"
