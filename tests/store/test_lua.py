"""The Redis stores' Lua scripts as files (``gateway/store/lua``): each one loaded by a store, each
header saying what its script takes and returns, and every script compiling on the real Redis."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import redis.asyncio as aioredis

import gateway
import gateway.store
from gateway.store import lua
from gateway.store.redis_pipe import Script

PACKAGE = Path(gateway.__file__).parent
LUA = PACKAGE / "store" / "lua"
HEADER_PARTS = ("-- KEYS", "-- ARGV", "-- Returns", "-- Why one script")
"""What a script's header says, each on a line of its own: what it takes, what it answers, and why it
is one script (what must happen atomically)."""


def store_scripts() -> dict[str, Script]:
    """Every :class:`Script` a store module defines (imported as the gateway imports it), by source."""
    found: dict[str, Script] = {}
    for module in pkgutil.walk_packages(gateway.store.__path__, "gateway.store."):
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, Script):
                found[value.source] = value
    return found


def lua_files() -> list[str]:
    """Every ``.lua`` file under ``gateway/store/lua``, by its path there (``lib/gcra.lua``)."""
    return sorted(path.relative_to(LUA).as_posix() for path in LUA.rglob("*.lua"))


def header(text: str) -> list[str]:
    """The leading comment block of a file."""
    lines = text.splitlines()
    return lines[: next((i for i, line in enumerate(lines) if not line.startswith("--")), len(lines))]


def test_every_lua_file_of_the_package_is_under_store_lua() -> None:
    """Where the loader reads them and ``pyproject.toml`` ships them from: one anywhere else is neither."""
    assert [path for path in PACKAGE.rglob("*.lua") if not path.is_relative_to(LUA)] == []
    assert {path.parent for path in LUA.rglob("*.lua")} <= {LUA, LUA / "lib"}


def test_every_lua_file_is_loaded_by_a_store() -> None:
    """No orphan: each script is what some store's :class:`Script` runs, its libraries first; each
    library is part of one."""
    sources = store_scripts()
    assert lua_files(), "no .lua file found"
    for name in lua_files():
        if name.startswith("lib/"):
            assert any(lua.library(name) in source for source in sources), f"{name} is loaded by no store"
        else:
            assert lua.source(name) in sources, f"{name} is loaded by no store"


def test_every_store_script_is_a_lua_file_and_no_module_holds_lua() -> None:
    """Each script a store runs is a file's (its libraries first), and no module of the gateway calls
    into Redis from Lua in a string."""
    files = {lua.source(name) for name in lua_files() if not name.startswith("lib/")}
    assert [script for script in store_scripts() if script not in files] == []
    holding = [path for path in PACKAGE.rglob("*.py") if "redis.call(" in path.read_text(encoding="utf-8")]
    assert holding == []


def test_each_header_names_the_file_and_a_script_what_it_takes_and_returns() -> None:
    for name in lua_files():
        text = (LUA / name).read_text(encoding="utf-8")
        head = header(text)
        assert head, f"{name}: no header"
        assert head[0].startswith(f"-- {name}: "), f"{name}: the header's first line names the file"
        named = lua.after(text)
        if name.startswith("lib/"):
            assert not named, f"{name}: a library names no library (only a script's header is read for them)"
            continue
        for part in HEADER_PARTS:
            assert any(line.startswith(part) for line in head), f"{name}: no {part[3:]} in its header"
        for library in named:
            assert library.startswith("lib/"), f"{name}: {library} is not a library"
            assert (LUA / library).is_file(), f"{name}: no library {library}"


async def test_every_store_script_compiles_on_redis(redis_client: aioredis.Redis) -> None:
    """``SCRIPT LOAD`` compiles a script without running it: a syntax error anywhere in a script
    (its libraries included) fails here, not on the first turn that runs it."""
    scripts = store_scripts().values()
    assert scripts
    for script in scripts:
        assert await redis_client.script_load(script.source) == script.sha
