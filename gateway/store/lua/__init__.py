"""The Redis stores' Lua scripts: one ``.lua`` file per script here, and the libraries they share in ``lib/``.

A script is what one ``EVALSHA`` runs: one atomic step against every replica's state. Redis has
no ``require``, so the libraries (``lib/*.lua``: GCRA, the placeholder prelude, a reply's pieces, a
layout's upgrade) are put in front of a script by text. A script's header says which, in order,
on its ``-- After: lib/no_key.lua lib/clock.lua …`` lines: the file is then all a reader needs to see
what Redis runs. :func:`source` puts them together; each store builds a
:class:`~gateway.store.redis_pipe.Script` of each of its scripts from it once, at import, as a module
constant (the SHA-1 is the whole text's, header comments included).

The files are package data (``pyproject.toml``), read through :mod:`importlib.resources`, so an
installed wheel finds them where a checkout does.
"""

from __future__ import annotations

from importlib.resources import files
from typing import Final

__all__ = ["AFTER", "after", "library", "source"]

AFTER: Final = "-- After:"
"""How the header line naming a script's libraries begins."""


def _read(name: str) -> str:
    """The text of ``name`` (``"turn_open.lua"``, ``"lib/gcra.lua"``), a path under this package."""
    return files(__name__).joinpath(*name.split("/")).read_text(encoding="utf-8")


def library(*names: str) -> str:
    """The libraries ``names`` (``"lib/gcra.lua"``) as one text, in that order."""
    return "".join(_read(name) for name in names)


def after(text: str) -> list[str]:
    """The libraries a script's header names on its ``-- After:`` lines, in order (none without one)."""
    named: list[str] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break  # the header is the leading comment block
        if line.startswith(AFTER):
            named += line.removeprefix(AFTER).split()
    return named


def source(name: str) -> str:
    """What Redis runs for the script ``name`` (``"turn_open.lua"``): its libraries, then its own text."""
    text = _read(name)
    return library(*after(text)) + text
