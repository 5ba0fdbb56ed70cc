"""The wheel is all an install has: ``pip install .`` (not ``-e``) and the container image run the demo.

The wheel is built the way the Dockerfile's builder stage builds it, from the files the Docker
build context holds (``.dockerignore`` applied), installed into a fresh venv (its dependencies
come from the package index as for any install), and ``pact-gateway demo --check`` is run there
from a directory that has nothing of the checkout. The image cannot be built here (no container
engine): the Dockerfile is checked to build and smoke-test that same wheel.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from gateway.config import load_config_file
from tests.test_cli import free_port

ROOT = Path(__file__).resolve().parent.parent
BUILD_TIMEOUT = 300
INSTALL_TIMEOUT = 600
RUN_TIMEOUT = 120
"""Generous bounds, in seconds, on a busy 2-core machine: building, installing, running the demo."""
SMOKE = "pact-gateway demo --check"
"""What the Dockerfile runs in its runtime stage, and this test in the installed venv."""

pytestmark = pytest.mark.packaging


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A ``.dockerignore`` pattern (Go's filepath.Match plus ``**``) as a regular expression."""
    out = ""
    for token in re.findall(r"\*\*/|\*\*|\*|\?|\[[^\]]*\]|[^*?\[]+", pattern):
        wildcard = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token)
        out += wildcard or (token if token.startswith("[") else re.escape(token))
    return re.compile(out)


def docker_context(root: Path) -> list[Path]:
    """The files ``docker build .`` sends: each ``.dockerignore`` rule in turn, the last that matches
    a file or one of its folders deciding, ``!`` taking a path back in."""
    rules: list[tuple[bool, re.Pattern[str]]] = []
    for line in (root / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), _glob_regex(line.removeprefix("!").strip("/"))))

    def sent(relative: str) -> bool:
        parts = relative.split("/")
        prefixes = ["/".join(parts[: length + 1]) for length in range(len(parts))]
        keep = True
        for include, regex in rules:
            if any(regex.fullmatch(prefix) for prefix in prefixes):
                keep = include
        return keep

    files: list[Path] = []
    for top in sorted(root.iterdir()):
        if top.name in {".git", ".venv"} or not sent(top.name):
            continue
        candidates = [top] if top.is_file() else sorted(path for path in top.rglob("*") if path.is_file())
        files.extend(path for path in candidates if sent(path.relative_to(root).as_posix()))
    return files


def header_commands(dockerfile: str) -> list[str]:
    """The shell commands of the Dockerfile's opening comment (``#   docker …``), continuations joined."""
    commands: list[str] = []
    current = ""
    for line in dockerfile[: dockerfile.index("\nARG ")].splitlines():
        if line.startswith("#   "):
            text = line.removeprefix("#").strip()
            continued = text.endswith("\\")
            current += text.removesuffix("\\").strip() + " " if continued else text
            if not continued:
                commands.append(current)
                current = ""
    return commands


def directive(dockerfile: str, name: str) -> str:
    """The argument of the one ``NAME …`` instruction of the Dockerfile."""
    (found,) = re.findall(rf"^{name} (.*)$", dockerfile, flags=re.MULTILINE)
    return str(found)


def docker_run(command: str, files: dict[str, str]) -> tuple[list[str], dict[str, str], list[str]]:
    """A ``docker run`` line as the shell would pass it, read as docker reads it: the options (with
    ``-e`` and ``-v`` applied to the returned environment and mounts), the image, and its arguments.
    ``files`` are what earlier commands wrote (for ``$(cat FILE)``), ``$PWD`` is the checkout."""
    for name, text in files.items():
        command = command.replace(f'"$(cat {name})"', shlex.quote(text))
    words = shlex.split(command.replace("$PWD", str(ROOT)))
    assert words[:3] == ["docker", "run", "--rm"], command
    environ: dict[str, str] = {}
    mounts: list[str] = []
    ports: list[str] = []
    rest = words[3:]
    while rest[0].startswith("-"):
        option, value, rest = rest[0], rest[1], rest[2:]
        if option == "-e":
            name, _, given = value.partition("=")
            environ[name] = given
        elif option == "-v":
            mounts.append(value)
        else:
            assert option == "-p", command
            ports.append(value)
    return [*ports, *mounts], environ, rest


def test_the_dockerfile_header_runs_as_written(tmp_path: Path) -> None:
    """Issue 32: its example tagged ``REGISTRY/pact-gateway:TAG`` (docker refuses an upper-case
    repository) and served config/example.yaml without the two variables it names, which serve
    refuses to start without. Each command is checked as the image would run it: the arguments
    parse, the files written are what later ones read, and the served file loads with exactly the
    environment given, on the ports published."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert json.loads(directive(dockerfile, "ENTRYPOINT")) == ["pact-gateway"]
    default_command = json.loads(directive(dockerfile, "CMD"))
    exposed = set(directive(dockerfile, "EXPOSE").split())
    build, *runs = header_commands(dockerfile)
    tag = re.fullmatch(r"docker build -t (\S+) \.", build)
    assert tag is not None, build
    # A reference docker takes: lower-case path components, an optional tag.
    assert re.fullmatch(r"[a-z0-9]+(?:[._/-][a-z0-9]+)*(?::[\w][\w.-]{0,127})?", tag[1]), tag[1]
    files: dict[str, str] = {}
    served = 0
    for command in runs:
        command, _, written = command.partition(" > ")
        options, environ, rest = docker_run(command, files)
        assert rest[0] == tag[1], command
        arguments = rest[1:] or default_command
        if arguments[:1] == ["keys"]:
            generated = subprocess.run(
                [sys.executable, "-m", "gateway", *arguments], capture_output=True, text=True, check=True
            )
            files[written] = generated.stdout
            continue
        assert not written, command
        if arguments[:1] == ["demo"]:
            assert arguments == ["demo", "--check"]  # what the image's own build runs, tests/test_cli.py too
            continue
        assert arguments[:2] == ["serve", "--config"], command
        sources = {mount.split(":")[1]: mount.split(":")[0] for mount in options if mount.count(":") == 2}
        config = load_config_file(sources[arguments[2]], environ=environ)
        published = {option.split(":")[1] for option in options if option.count(":") == 1}
        assert published == {str(config.listen.port), str(config.metrics.port)} == exposed
        assert config.listen.host == config.metrics.host == "0.0.0.0"  # noqa: S104 - reachable through -p
        served += 1
    assert served == 1


def test_the_checkout_tracks_no_stray_pid_file_and_ignores_one() -> None:
    """Issue 32: a ``pid`` file a background run wrote at the root was committed by mistake."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--", "pid"], capture_output=True, text=True, check=True
    )
    assert tracked.stdout == ""
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", "pid"], check=False)
    assert ignored.returncode == 0


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built as the Dockerfile builds it, from the Docker build context alone."""
    context = tmp_path_factory.mktemp("context")
    for path in docker_context(ROOT):
        target = context / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--wheel-dir",
            str(wheels),
            str(context),
        ],
        check=True,
        timeout=BUILD_TIMEOUT,
        cwd=context,
    )
    (built,) = wheels.glob("pact_gateway-*.whl")
    return built


def test_the_build_context_holds_the_package_and_no_checkout_files() -> None:
    sent = {path.relative_to(ROOT).as_posix() for path in docker_context(ROOT)}
    assert {"pyproject.toml", "README.md", "gateway/cli.py", "gateway/data/demo.yaml"} <= sent
    assert "examples/sample_bot/__init__.py" in sent
    assert not {path for path in sent if path.startswith(("tests/", "config/", "deploy/", ".venv/"))}
    assert not {path for path in sent if "__pycache__" in path or path.endswith((".pyc", ".pyo"))}


def test_the_dockerfile_builds_that_wheel_and_runs_the_demo_check_in_the_image() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'RUN pip wheel --wheel-dir /wheels ".[otel]"' in dockerfile
    assert f"&& {SMOKE} --port" in dockerfile
    assert '--no-index --find-links=/wheels "pact-gateway[otel]"' in dockerfile


def test_wheel_ships_the_demo_configuration(wheel: Path) -> None:
    """``package-data`` matches a file inside the package (``config/`` at the top level never was)."""
    listing = subprocess.run(
        [sys.executable, "-m", "zipfile", "-l", str(wheel)], capture_output=True, text=True, check=True
    ).stdout
    assert "gateway/data/demo.yaml" in listing


def test_wheel_ships_the_lua_scripts(wheel: Path) -> None:
    """The Redis stores read their scripts at import (``gateway/store/lua``): a wheel without them
    could not even import the Redis backend."""
    with zipfile.ZipFile(wheel) as built:
        shipped = {name for name in built.namelist() if name.endswith(".lua")}
    scripts = {path.relative_to(ROOT).as_posix() for path in (ROOT / "gateway").rglob("*.lua")}
    assert scripts
    assert shipped == scripts


def test_a_plain_install_runs_the_demo_check_from_any_directory(wheel: Path, tmp_path: Path) -> None:
    """The issue's failure: ``FileNotFoundError: …/site-packages/config/demo.yaml`` out of a checkout."""
    environment = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(environment)
    python = environment / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", str(wheel)], check=True, timeout=INSTALL_TIMEOUT
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Nothing of the checkout may leak in: no PYTHONPATH, and a cwd holding no gateway/ or config/.
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    gateway = environment / "bin" / "pact-gateway"
    demo = subprocess.run(
        [str(gateway), *SMOKE.split()[1:], "--port", str(free_port()), "--bot-port", str(free_port())],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    assert "demo check passed" in demo.stderr
    assert "Traceback" not in demo.stderr
    version = subprocess.run(
        [str(gateway), "--version"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert version.stdout == f"pact-gateway {project['version']}\n", version.stderr


def test_the_demo_script_installs_the_runtime_only_and_runs_the_demo(tmp_path: Path) -> None:
    """Issue 19 row 8: ``scripts/demo.sh`` on a fresh machine installs the package and its runtime
    dependencies, not the test and lint tools (nor, as root, the browser), and the demo runs there."""
    environment = tmp_path / "venv"
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    ports = ["--port", str(free_port()), "--bot-port", str(free_port())]
    demo = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh"), "--check", *ports],
        capture_output=True,
        text=True,
        env={**env, "VENV": str(environment)},
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr
    assert "demo check passed" in demo.stderr
    # Issue 32: the editable install prints no setuptools warning box (pyproject.toml's package-dir).
    assert "Editable installation" not in demo.stderr, demo.stderr
    assert "BuildBackendWarning" not in demo.stderr, demo.stderr
    installed = subprocess.run(
        [str(environment / "bin" / "python"), "-m", "pip", "list", "--format=freeze"],
        capture_output=True,
        text=True,
        check=True,
        timeout=RUN_TIMEOUT,
    ).stdout.lower()
    assert "aiohttp==" in installed
    for tool in ("pytest", "ruff", "mypy", "playwright", "hypothesis", "botbuilder-core"):
        assert f"\n{tool}==" not in f"\n{installed}", tool
