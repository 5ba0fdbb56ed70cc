"""Write the "Every value" table of the Helm chart's README from the chart's values.yaml.

One source: values.yaml carries each value's default and, in the comment above it, what it does
(helm-docs style: a comment starting ``# --`` describes the key below it, its following comment lines
included). The README's table is those, so the README cannot miss a value or state an old default.

    python scripts/gen_chart_values.py            # rewrite the README's table
    python scripts/gen_chart_values.py --check    # exit 1 when it is out of date (CI, tests)

A key with a ``# --`` comment is one row, whatever its value (a map such as ``resources`` is set as a
whole); a map without one is a section, and its keys are the rows; a key that is neither (``config``)
is a row described by the first sentence of the plain comment above it. A key with no comment at all
is an error: a value nobody described. Everything above the ``MARKER`` line of the README is kept as
it is. Exit status: 0 up to date (or written), 1 out of date, 2 a file that cannot be read as what it
should be, or a usage error.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
CHART: Final = REPO_ROOT / "deploy" / "helm" / "pact-gateway"
VALUES: Final = CHART / "values.yaml"
README: Final = CHART / "README.md"
SCRIPT: Final = "scripts/gen_chart_values.py"

MARKER: Final = f"<!-- Generated below from values.yaml's comments by {SCRIPT}; do not edit by hand. -->"
HEADER: Final = "| Value | Default | What it does |\n|---|---|---|\n"

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[^\s:#][^:\s]*):(?:\s|$)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s")


@dataclass(frozen=True, slots=True)
class _Key:
    """A key of values.yaml as written: its dotted path and the comment block right above it."""

    path: str
    comment: tuple[str, ...]


def _keys(text: str) -> Iterator[_Key]:
    """Every mapping key of the file, in order, with its comment; list items and their keys are
    part of their key's value, not keys of their own."""
    parents: list[tuple[int, str]] = []
    comment: list[str] = []
    list_indent: int | None = None
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if not stripped:
            comment = []
            continue
        if stripped.startswith("#"):
            comment.append(stripped.removeprefix("#").strip())
            continue
        if list_indent is not None and (indent > list_indent or stripped.startswith("- ")):
            comment = []
            continue
        list_indent = None
        if stripped.startswith("- ") or stripped == "-":
            list_indent = indent
            comment = []
            continue
        match = _KEY.match(line)
        if match is None:
            raise ValueError(f"cannot read the line {line!r}")
        while parents and parents[-1][0] >= indent:
            parents.pop()
        path = ".".join([*(name for _, name in parents), match["key"]])
        yield _Key(path, tuple(comment))
        parents.append((indent, match["key"]))
        comment = []


def _described(comment: tuple[str, ...]) -> str | None:
    """The ``# --`` description in a comment block (from that line to the block's end), if any."""
    for index, line in enumerate(comment):
        if line.startswith("-- "):
            return " ".join([line.removeprefix("-- "), *comment[index + 1 :]]).strip()
    return None


def _lookup(values: Any, path: str) -> Any:
    node = values
    for name in path.split("."):
        node = node[name]
    return node


def rows(text: str) -> list[tuple[str, Any, str]]:
    """(path, default, description) for every value, in the file's order."""
    values = yaml.safe_load(text)
    found: list[tuple[str, Any, str]] = []
    whole: list[str] = []  # keys set as a whole: whatever lies under them is part of their row
    for key in _keys(text):
        if any(key.path.startswith(f"{parent}.") for parent in whole):
            continue
        default = _lookup(values, key.path)
        description = _described(key.comment)
        if description is not None:
            whole.append(key.path)
            found.append((key.path, default, description))
        elif not (isinstance(default, dict) and default):
            if not key.comment:
                raise ValueError(f"{key.path} has no comment saying what it does")
            first = _SENTENCE_END.split(" ".join(key.comment), maxsplit=1)[0]
            found.append((key.path, default, first))
    return found


def table(text: str) -> str:
    """The README's generated part: the table of every value."""
    lines = [HEADER]
    for path, default, description in rows(text):
        shown = json.dumps(default, ensure_ascii=False).replace("|", "\\|")
        said = description.replace("|", "\\|")
        lines.append(f"| `{path}` | `{shown}` | {said} |\n")
    return "".join(lines)


def render(readme: str, values_text: str) -> str:
    """The README with everything below ``MARKER`` replaced by the table."""
    head, marker, _ = readme.partition(MARKER)
    if not marker:
        raise ValueError(f"the README has no line {MARKER!r}")
    return f"{head}{MARKER}\n\n{table(values_text)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report whether the README is up to date")
    args = parser.parse_args(argv)
    try:
        current = README.read_text(encoding="utf-8")
        wanted = render(current, VALUES.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError) as error:
        print(f"{README}: cannot write its values table ({error})", file=sys.stderr)
        return 2
    if current == wanted:
        return 0
    if args.check:
        print(
            f"{README} is out of date with values.yaml: run python scripts/gen_chart_values.py",
            file=sys.stderr,
        )
        return 1
    README.write_text(wanted, encoding="utf-8")
    print(f"wrote {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
