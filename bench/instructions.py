"""Instructions per turn of a front process under callgrind: the cost figure a noisy machine barely moves.

CPU seconds per turn swing by ±20 % between repeats on a shared machine; callgrind's instruction
count hardly depends on the neighbours (it leaves out the kernel's side of system calls and cache
misses). Each front runs under callgrind, instrumentation off until a warm-up has been served; then
two windows of ``turns`` and ``2 × turns``, each its own load-generator process (the same fresh PA
JWTs of :data:`USERS` users), dumped and zeroed by ``callgrind_control``: their difference is
``turns`` steady-state turns. One turn in flight, so no per-pass work is shared by chance.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import Bench, Front, FrontArgv
from bench.procs import ChildFailed, free_port

CONCURRENCY = 1
"""Turns in flight: one, so no work is shared between turns by chance (see above)."""

USERS = 4
"""Users (one PA JWT each) of every window: few, so that even a short window reaches them all."""

_STARTUP_TIMEOUT = 180.0  # a Python process starts about 50 times slower under callgrind
_DUMP_TIMEOUT = 30.0


def available() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


def callgrind_totals(path: Path) -> int:
    """The ``totals:`` line of one callgrind dump: instructions executed (event ``Ir``)."""
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise ChildFailed(f"{path} has no totals line")


def count(bench: Bench, fronts: Sequence[tuple[str, FrontArgv]]) -> dict[str, Any]:
    """Instructions per turn of each ``(name, argv for a port)`` front in ``bench``'s mode, or why not.

    ``bench`` is the running benchmark: its bot, children, work directory and load generator.
    """
    turns = bench.settings.instruction_turns
    if turns <= 0:
        return {"available": False, "note": f"not counted in the {bench.settings.mode} run"}
    if not available():
        return {"available": False, "note": "valgrind (callgrind) is not installed"}
    counted = {name: _count_front(bench, name, argv_for, turns) for name, argv_for in fronts}
    return {"available": True, "turns": turns, "concurrency": CONCURRENCY, "users": USERS, "fronts": counted}


def _count_front(bench: Bench, name: str, argv_for: FrontArgv, turns: int) -> dict[str, Any]:
    """One front under callgrind: a warm-up, then the two windows, each dumped and zeroed."""
    port, out = free_port(), bench.workdir / f"callgrind-{name}.out"
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]
    child = bench.children.start(f"{name}-callgrind", [*valgrind, sys.executable, *argv_for(port)])
    child.wait_port(port, timeout=_STARTUP_TIMEOUT)
    front = Front.a2a(name, port, child)

    def control(*args: str) -> None:
        subprocess.run(
            ["callgrind_control", *args, str(child.pid)], check=True, capture_output=True, timeout=60
        )

    def dump(number: int) -> int:
        """Dump (and zero) the counters; the instructions since the last dump."""
        control("-d")
        path, deadline = out.with_name(f"{out.name}.{number}"), time.monotonic() + _DUMP_TIMEOUT
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildFailed, FileNotFoundError):  # not yet (fully) written
                return callgrind_totals(path)
            time.sleep(0.1)
        raise ChildFailed(f"callgrind wrote no readable dump {path}:\n{child.tail()}")

    try:
        bench.drive(front, duration=600, concurrency=CONCURRENCY, max_turns=turns, users=USERS)
        control("-i", "on")
        windows = []
        for number, size in ((1, turns), (2, 2 * turns)):
            done = bench.drive(front, duration=600, concurrency=CONCURRENCY, max_turns=size, users=USERS)
            if done["errors"]:
                raise ChildFailed(f"{name} under callgrind failed turns: {done['error_samples']}")
            windows.append({"turns": int(done["turns_total"]), "instructions": dump(number)})
    finally:
        bench.children.stop(child)
    added = windows[1]["instructions"] - windows[0]["instructions"]
    return {
        "instructions_per_turn": added / max(windows[1]["turns"] - windows[0]["turns"], 1),
        "windows": windows,
    }


def per_turn(counted: dict[str, Any]) -> dict[str, float]:
    """Instructions per turn by front name, from what :func:`count` returned."""
    return {name: float(front["instructions_per_turn"]) for name, front in counted["fronts"].items()}
