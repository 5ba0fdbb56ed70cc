"""The documentation site builds without a warning, and its generated references are current.

``mkdocs build --strict`` (mkdocs.yml) fails on a link to a missing page or anchor, a page left out
of the nav, and (scripts/mkdocs_hooks.py) a link from docs/ to a repository file that does not
exist or a README heading that is gone; docs/configuration.md's table of keys is generated from
``gateway.config.SCHEMA`` by scripts/gen_config_reference.py, the source of the chart's schema too.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = (sys.executable, "-m", "mkdocs")
"""The mkdocs of the interpreter running the tests (the `test` extra installs it)."""
REFERENCE_SCRIPT = ROOT / "scripts" / "gen_config_reference.py"
METRICS_SCRIPT = ROOT / "scripts" / "gen_metrics_reference.py"
BUILD_TIMEOUT = 120
"""Seconds a build may take: about one on an idle machine, many more on a busy shared one."""


def _build(site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MKDOCS, "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


def _reference_script(*args: str, script: Path = REFERENCE_SCRIPT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_site_builds_strict(tmp_path: Path) -> None:
    built = _build(tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()


def test_links_to_the_readme_threat_model_and_chart_readme_are_links(tmp_path: Path) -> None:
    """The three Markdown files outside docs/ are pages of the site, and a page's link to one of
    them (or from them back into docs/) is a link there, not the file's path printed as code."""
    built = _build(tmp_path / "site")
    assert built.returncode == 0, built.stderr
    index = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    operations = (tmp_path / "site" / "operations" / "index.html").read_text(encoding="utf-8")
    assert 'href="project/readme/#quick-start"' in index
    assert 'href="project/threat-model/"' in index
    assert 'href="../project/helm-chart/"' in operations
    readme = (tmp_path / "site" / "project" / "readme" / "index.html").read_text(encoding="utf-8")
    assert 'href="../../adapters/"' in readme
    assert 'href="../threat-model/"' in readme


def test_site_build_fails_on_a_broken_anchor(tmp_path: Path) -> None:
    """The strictness the first test relies on: a stale anchor in a copy of the pages is an error."""
    docs = tmp_path / "docs"
    docs.mkdir()
    sys.path.insert(0, str(ROOT / "scripts"))
    from mkdocs_hooks import INCLUDED

    # What the pages link to outside docs/, at its place; the pages the hook adds to the site, and
    # what they link to outside docs/ (a test, a script) too.
    outside = [
        (ROOT, linked)
        for page in (ROOT / "docs").glob("*.md")
        for linked in re.findall(r"\]\(\.\./([^)#\s]+)", page.read_text(encoding="utf-8"))
    ]
    outside += [(ROOT, source) for source in INCLUDED]
    for source in INCLUDED:
        text = (ROOT / source).read_text(encoding="utf-8")
        for linked in re.findall(r"\]\((?!https?:|mailto:|#)([^)#\s]+)", text):
            outside.append(((ROOT / source).parent, linked))
    for base, linked in outside:
        target = (base / linked).resolve()
        if target.is_relative_to(ROOT / "docs"):
            continue
        copy = tmp_path / target.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(target.read_bytes())
    for page in (ROOT / "docs").glob("*.md"):
        (docs / page.name).write_text(page.read_text(encoding="utf-8"), encoding="utf-8")
    with (docs / "index.md").open("a", encoding="utf-8") as index:
        index.write("\nSee [the old section](adapters.md#no-such-section).\n")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = config.replace("docs_dir: docs", f"docs_dir: {docs}")
    config = config.replace("scripts/mkdocs_hooks.py", str(ROOT / "scripts" / "mkdocs_hooks.py"))
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    built = subprocess.run(
        [*MKDOCS, "build", "--strict", "--config-file", str(tmp_path / "mkdocs.yml")],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
        cwd=tmp_path,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert built.returncode != 0
    assert "no-such-section" in built.stderr


def test_configuration_reference_is_current() -> None:
    checked = _reference_script("--check")
    assert checked.returncode == 0, checked.stderr


def test_reference_script_finds_and_fixes_a_stale_copy(tmp_path: Path) -> None:
    current = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    prose, generated = current.split("<!-- Generated below", 1)
    # As if SCHEMA had renamed a key since; the hand-written part above the marker is kept as is.
    stale = (
        prose
        + "<!-- Generated below"
        + generated.replace("| `cache.retry_window` |", "| `cache.retry_windw` |")
    )
    assert stale != current
    copy_path = tmp_path / "configuration.md"
    copy_path.write_text(stale, encoding="utf-8")

    checked = _reference_script("--check", "--file", str(copy_path))
    assert checked.returncode == 1
    assert "python scripts/gen_config_reference.py" in checked.stderr
    written = _reference_script("--file", str(copy_path))
    assert written.returncode == 0, written.stderr
    assert copy_path.read_text(encoding="utf-8") == current


def test_every_schema_key_is_in_the_reference() -> None:
    """Each top-level key and each Brand key of the schema has its row (the walk misses none)."""
    sys.path.insert(0, str(ROOT))
    from gateway.config import SCHEMA

    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name in SCHEMA["properties"]:
        assert f"| `{name}` |" in text, name
    for name in SCHEMA["properties"]["brands"]["items"]["properties"]:
        assert f"| `brands[].{name}` |" in text, name


def test_metrics_reference_is_current() -> None:
    checked = _reference_script("--check", script=METRICS_SCRIPT)
    assert checked.returncode == 0, checked.stderr


def test_metrics_script_finds_and_fixes_a_stale_table(tmp_path: Path) -> None:
    """A metric renamed in the code since the table was written: --check says so, a run rewrites the
    table between its markers and nothing else of the page."""
    current = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    stale = current.replace("| `pact_requests_total` | counter |", "| `pact_request_total` | counter |")
    assert stale != current
    copy_path = tmp_path / "operations.md"
    copy_path.write_text(stale, encoding="utf-8")

    checked = _reference_script("--check", "--file", str(copy_path), script=METRICS_SCRIPT)
    assert checked.returncode == 1
    assert "python scripts/gen_metrics_reference.py" in checked.stderr
    written = _reference_script("--file", str(copy_path), script=METRICS_SCRIPT)
    assert written.returncode == 0, written.stderr
    assert copy_path.read_text(encoding="utf-8") == current


def test_metrics_script_refuses_a_page_without_its_markers(tmp_path: Path) -> None:
    copy_path = tmp_path / "operations.md"
    copy_path.write_text("# Operations\n\nNo table here.\n", encoding="utf-8")
    checked = _reference_script("--check", "--file", str(copy_path), script=METRICS_SCRIPT)
    assert checked.returncode == 2
    assert "cannot place the metrics table" in checked.stderr


def test_every_metric_the_code_declares_is_in_the_table() -> None:
    """A metric declared on a registry the generator does not make (a new class of metrics) would be
    left out of the table silently: every ``Counter("pact_…"`` and the like in gateway/ has its row."""
    table = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    declared = re.compile(r"\b(Counter|Gauge|Histogram|Summary)\(\s*\"(pact_\w+)\"")
    missing = []
    for source in sorted((ROOT / "gateway").rglob("*.py")):
        for kind, name in declared.findall(source.read_text(encoding="utf-8")):
            scraped = f"{name}_total" if kind == "Counter" else name
            if f"| `{scraped}` |" not in table:
                missing.append(f"{source.relative_to(ROOT)}: {scraped}")
    assert not missing, "metrics not in docs/operations.md's table: extend scripts/gen_metrics_reference.py"


USER_DOCS = ("README.md", "deploy/helm/pact-gateway/README.md")
"""Besides every page of docs/: what a Provider reads."""
INTERNAL_REFERENCE = re.compile(
    r"\b(?:[Ii]ssue|[Rr]ow) [0-9]+"  # the project's own tracker and its review tables
    r"|(?<![\w-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])"  # a commit id
)
"""What only someone with the repository's history can follow. Fenced blocks are left out: their
ids (request ids, trace ids) are examples of what the gateway sends, not references."""


def internal_references(text: str) -> list[str]:
    """Each line of ``text`` outside fenced blocks that names an issue, a row or a commit."""
    found, fenced = [], False
    for number, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and INTERNAL_REFERENCE.search(line):
            found.append(f"{number}: {INTERNAL_REFERENCE.search(line).group(0)}")  # type: ignore[union-attr]
    return found


def test_user_docs_name_no_issue_row_or_commit() -> None:
    """A user doc says what a change means, not where it was tracked: "issue 20" or "`b17dd54`"
    tells a Provider nothing (the changelog keeps the history)."""
    pages = [*sorted((ROOT / "docs").glob("*.md")), *(ROOT / name for name in USER_DOCS)]
    found = {
        str(page.relative_to(ROOT)): refs
        for page in pages
        if (refs := internal_references(page.read_text(encoding="utf-8")))
    }
    assert not found, found


def test_internal_references_are_found_and_examples_are_not() -> None:
    text = "\n".join(
        [
            "Measured at `b17dd54` (issue 17, row 5).",
            "The previous release (6ad6c1f) reads them.",
            "```http",
            "X-Request-Id: 3f6c0d2e9a8b4c1d",
            "```",
            "a 2592000 s grant, trace 00-4bf92f3577b34da6-01, Issues and rows are fine without a number.",
        ]
    )
    assert internal_references(text) == ["1: b17dd54", "2: 6ad6c1f"]
    assert INTERNAL_REFERENCE.findall("(issue 17, row 5)") == ["issue 17", "row 5"]


GUIDE = ROOT / "docs" / "front-your-bot.md"
"""The walk-through whose every YAML block must be a configuration the gateway accepts."""
CHART_SCHEMA = ROOT / "deploy" / "helm" / "pact-gateway" / "values.schema.json"


def guide_config_blocks() -> list[tuple[int, Any]]:
    """Each ```yaml block of the guide, parsed, with the line its text starts on."""
    lines = GUIDE.read_text(encoding="utf-8").split("\n")
    found: list[tuple[int, Any]] = []
    for index, line in enumerate(lines):
        if line == "```yaml":
            end = lines.index("```", index + 1)
            found.append((index + 2, yaml.safe_load("\n".join(lines[index + 1 : end]))))
    return found


def as_gateway_config(block: Any, whole: dict[str, Any]) -> dict[str, Any]:
    """The configuration a block stands for: a whole file; the chart's values (their ``config``);
    or a part of a file (Brand keys such as ``upstream`` or ``delegation``, top-level keys such as
    ``oauth``) put in place in ``whole``, the guide's first whole file, as the text says to."""
    from gateway.config import SCHEMA

    if "brands" in block:
        return dict(block)
    if "config" in block and "image" in block:
        return dict(block["config"])
    merged = copy.deepcopy(whole)
    brand_keys = set(SCHEMA["properties"]["brands"]["items"]["properties"])
    for key, value in block.items():
        if key in brand_keys:
            merged["brands"][0][key] = value
        else:
            assert key in SCHEMA["properties"], f"{key}: neither a top-level nor a Brand key"
            merged[key] = value
    if "delegation" in block and "oauth" not in merged:  # the guide adds both, in two blocks
        merged["oauth"] = {"signing_keys": [{"value": "${PACT_SIGNING_KEY}"}]}
    return merged


def test_every_config_block_of_the_guide_is_valid() -> None:
    """docs/front-your-bot.md's YAML is what check-config accepts (``${NAME}``s unset, as on a
    laptop): a renamed key or a value out of bounds fails here, not for the reader."""
    from gateway.config import ConfigError, check_config

    blocks = guide_config_blocks()
    assert len(blocks) >= 8, "the guide's blocks: a whole file, five bots, delegation, the chart"
    whole = blocks[0][1]
    assert "brands" in whole, "the guide's first block is a whole file"
    chart = jsonschema.Draft202012Validator(json.loads(CHART_SCHEMA.read_text(encoding="utf-8")))
    problems = []
    for line, block in blocks:
        try:
            check_config(as_gateway_config(block, whole), environ={})
        except ConfigError as error:
            problems.append(f"docs/front-your-bot.md:{line}: {error}")
        if "config" in block and "image" in block:  # the chart's values: helm checks them too
            problems += [f"docs/front-your-bot.md:{line}: {e.message}" for e in chart.iter_errors(block)]
    assert not problems, problems


def test_a_wrong_key_in_a_guide_block_is_found() -> None:
    """The check above can fail: a misspelt adapter key in a block of the guide is refused."""
    from gateway.config import ConfigError, check_config

    whole = guide_config_blocks()[0][1]
    wrong = {"upstream": {"adapter": "openai", "url": "https://api.openai.com/v1", "openai": {"modle": "x"}}}
    with pytest.raises(ConfigError, match="modle"):
        check_config(as_gateway_config(wrong, whole), environ={})


OUTSIDE_PAGES = ("README.md", "THREAT_MODEL.md", "deploy/helm/pact-gateway/README.md")
"""Markdown files outside docs/ that link into it (or into each other): GitHub renders them, MkDocs not."""


def test_links_outside_the_site_resolve() -> None:
    """Every relative link of the README, the threat model and the chart's README names a file of
    the repository and, into a Markdown file, one of its headings in GitHub's spelling: moving a
    section to docs/ must move the links to it too."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from mkdocs_hooks import markdown_anchors

    broken = []
    for name in OUTSIDE_PAGES:
        page = ROOT / name
        text = page.read_text(encoding="utf-8")
        for target, anchor in re.findall(r"\]\((?!https?:|mailto:)([^)#\s]*)(?:#([^)\s]*))?\)", text):
            resolved = (page.parent / target).resolve() if target else page
            if not resolved.exists():
                broken.append(f"{name}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in markdown_anchors(resolved):
                broken.append(f"{name}: {target}#{anchor}")
    assert not broken, broken
