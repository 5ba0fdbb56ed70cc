"""bench/ has no import circle (issue 17): every module imports alone, and the import graph is acyclic.

The bench's modules once imported each other (two of the imports hidden inside functions so that the
modules could load at all). The graph below counts every import of a bench module, at module level
or inside a function, so a circle hidden that way fails here too. ``python -m bench FRONT`` names
a module for each front that answers ``main(argv)``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from bench.__main__ import FRONTS
from tests.support.bench import REPO_ROOT

BENCH = REPO_ROOT / "bench"
MODULES = sorted(f"bench.{path.stem}" for path in BENCH.glob("*.py") if path.stem != "__main__")


def bench_imports(path: Path) -> set[str]:
    """The bench modules ``path`` imports anywhere in its body (``bench`` itself excluded)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("bench."))
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            if node.module == "bench":
                found.update(f"bench.{alias.name}" for alias in node.names)
            elif node.module.startswith("bench."):
                found.add(node.module)
    return found & set(MODULES)


def import_graph() -> dict[str, set[str]]:
    return {module: bench_imports(BENCH / f"{module.removeprefix('bench.')}.py") for module in MODULES}


def test_the_bench_import_graph_has_no_cycle() -> None:
    try:
        tuple(TopologicalSorter(import_graph()).static_order())
    except CycleError as circle:
        pytest.fail(f"bench/ imports in a circle: {' -> '.join(circle.args[1])}")


def test_the_graph_sees_imports_inside_functions(tmp_path: Path) -> None:
    """The check above cannot pass by missing the kind of import that hid the old circle."""
    assert "bench.adapters" in import_graph()["bench.throughput"]
    hidden = tmp_path / "hidden.py"
    hidden.write_text("def later() -> None:\n    from bench import instructions\n    import bench.figures\n")
    assert bench_imports(hidden) == {"bench.instructions", "bench.figures"}


def test_every_front_is_a_bench_module_with_a_main() -> None:
    for name, question in FRONTS.items():
        module = f"bench.{name}"
        assert module in MODULES, name
        assert question, name
        assert "def main(" in (BENCH / f"{module.removeprefix('bench.')}.py").read_text(), name


def test_no_front_or_an_unknown_one_lists_the_fronts() -> None:
    for argv in ([], ["no_such_front"]):
        done = subprocess.run(
            [sys.executable, "-m", "bench", *argv],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 2
        assert "usage: python -m bench FRONT [options]" in done.stderr
        assert all(f"  {name} " in done.stderr for name in FRONTS)


@pytest.mark.parametrize("module", MODULES)
def test_each_bench_module_imports_alone(module: str) -> None:
    """Imported first in a fresh interpreter, so no other module has loaded its dependencies already."""
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
