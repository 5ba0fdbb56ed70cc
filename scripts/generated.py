"""What the ``gen_*.py`` scripts share: bring one file generated from the gateway's code (its
configuration schema, its metrics) up to date, or with ``--check`` only say whether it is (CI and
the tests run that).

Exit status: 0 up to date (or written), 1 out of date (``--check``), 2 the file cannot be read as what
it should be, or a usage error (argparse's own).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def main(
    argv: list[str] | None,
    *,
    description: str,
    default: Path,
    render: Callable[[str], str],
    script: str,
    unreadable: str,
    source: str = "gateway.config.SCHEMA",
) -> int:
    """Run one generator: ``render`` turns the file's current text into what it should be (raising
    ``ValueError`` or ``KeyError`` when that text is not the kind of file it generates); ``script`` is
    its path, for the hint; ``unreadable`` what to call a file it cannot read; ``source`` what the
    file is generated from, for the message."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="only report whether the file is up to date")
    parser.add_argument("--file", type=Path, default=default, help="the file to update")
    args = parser.parse_args(argv)
    path: Path = args.file
    try:
        current = path.read_text(encoding="utf-8")
        wanted = render(current)
    except (OSError, ValueError, KeyError) as error:
        print(f"{path}: {unreadable} ({error})", file=sys.stderr)
        return 2
    if current == wanted:
        return 0
    if args.check:
        print(f"{path} is out of date with {source}: run python {script}", file=sys.stderr)
        return 1
    path.write_text(wanted, encoding="utf-8")
    print(f"wrote {path}")
    return 0
