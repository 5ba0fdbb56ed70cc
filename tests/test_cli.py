"""The command line: check-config, keys generate, token, and the demo's own session.

An operator's mistake, with any verb, ends in one line on stderr that says what to do instead and
exit status 2, never a traceback: those are run through the real CLI, in a subprocess.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml

from gateway.cli import SUB_VERBS, VERBS, main
from gateway.demo import DEFAULT_CONFIG
from tests.support.delegation import new_provider_key_pem

ROOT = Path(__file__).resolve().parent.parent
CLI_TIMEOUT = 60
"""Seconds one CLI run may take (generous: it starts an interpreter on a busy machine)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_check_config_prints_what_it_would_serve(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACME_BOT_TOKEN", "t")
    monkeypatch.setenv("PACT_SIGNING_KEY", new_provider_key_pem())
    assert main(["check-config", str(ROOT / "config" / "example.yaml")]) == 0
    out = capsys.readouterr().out
    assert "delegation (§5): login https://login.acme.example/pact" in out
    assert "orders:cancel: Cancel an order that has not shipped" in out
    assert "acme: Acme Support" in out
    assert "https://support.example-provider.com/a2a/acme/.well-known/agent-card.json" in out
    assert "https://pa.example.com [enabled]" in out
    assert "cache: memory" in out
    assert "configuration OK" in out


def test_i5_check_config_warns_of_an_admin_api_off_loopback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 28 I5: ``admin.host: 0.0.0.0`` passed ``check-config`` without a note."""
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text(encoding="utf-8"))
    raw["admin"] = {"enabled": True, "token": "${PACT_ADMIN_TOKEN}", "host": "0.0.0.0"}  # noqa: S104
    config = tmp_path / "gw.yaml"
    config.write_text(yaml.safe_dump(raw), encoding="utf-8")
    assert main(["check-config", str(config)]) == 0  # allowed: a warning, not a refusal
    printed = capsys.readouterr()
    assert "warning: admin.host: 0.0.0.0 is not a loopback address" in printed.err
    assert "configuration OK" in printed.out


def test_invalid_config_exits_nonzero_with_yaml_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "gw.yaml"
    bad.write_text(DEFAULT_CONFIG.read_text(encoding="utf-8").replace("timeout: 5", "timeout: -1"))
    assert main(["check-config", str(bad)]) == 2
    assert "brands[0].upstream.timeout" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--config", str(bad)])  # serve is the default verb, and refuses the same file
    assert exited.value.code == 2


def test_keys_generate_and_token_round_trip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "generate"]) == 0
    generated = json.loads(capsys.readouterr().out)
    key_file = tmp_path / "pa.json"
    key_file.write_text(json.dumps(generated))
    assert (
        main(
            [
                "token",
                "--key",
                str(key_file),
                "--iss",
                "https://pa",
                "--sub",
                "u1",
                "--aud",
                "aud",
                "--ttl",
                "60",
            ]
        )
        == 0
    )
    token = capsys.readouterr().out.strip()
    public = jwt.PyJWK.from_dict(generated["jwks"]["keys"][0])
    claims = jwt.decode(token, public.key, algorithms=["ES256"], audience="aud")
    assert (claims["iss"], claims["sub"], claims["exp"] - claims["iat"]) == ("https://pa", "u1", 60)
    assert "d" not in generated["jwks"]["keys"][0]
    assert (
        main(["token", "--key", str(key_file), "--iss", "i", "--sub", "s", "--aud", "a", "--ttl", "301"]) == 2
    )


def test_rs256_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["keys", "generate", "--alg", "RS256"]) == 0
    generated = json.loads(capsys.readouterr().out)
    assert generated["private_jwk"]["kty"] == "RSA"


def test_demo_runs_its_own_curl_session() -> None:
    """The README's first command: gateway + sample bot + demo PA, card, two turns and a retry."""
    result = run_cli("demo", "--check", "--port", str(free_port()), "--bot-port", str(free_port()))
    assert result.returncode == 0, result.stderr
    assert "demo check passed" in result.stderr
    # Issue 19 row 12: only the verdict; the paste-this session would name a key file deleted on exit.
    assert result.stdout == ""
    # Issue 32: nor the session's access lines (the README: "prints only its verdict"); the verdict
    # and the request count read back from /metrics, nothing else.
    assert [line.split(":")[0] for line in result.stderr.splitlines()] == [
        "demo check passed",
        "demo check",
    ], result.stderr


def run_cli(
    *args: str, cwd: Path = ROOT, env: Mapping[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """``pact-gateway ARGS`` as an operator runs it, in its own process (``stdin`` piped to it)."""
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        cwd=cwd,
        env=None if env is None else dict(env),
        check=False,
    )


def assert_one_line_refusal(result: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit 2, nothing on stdout, and on stderr one line (no traceback) holding every word."""
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert result.stderr.endswith("\n")
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr


@pytest.fixture
def listening() -> Iterator[int]:
    """A loopback port something else already listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_version_comes_from_the_installed_metadata() -> None:
    result = run_cli("--version")
    assert (result.returncode, result.stdout) == (0, f"pact-gateway {metadata.version('pact-gateway')}\n")


@pytest.mark.parametrize("busy", ["--port", "--bot-port"])
def test_demo_on_a_busy_port_says_which_and_leaves_no_key_behind(
    busy: str, listening: int, tmp_path: Path
) -> None:
    """The demo's private key is written under $TMPDIR only once both ports are held, and the
    gateway's client sessions are closed (no "Unclosed client session")."""
    ports = {"--port": str(free_port()), "--bot-port": str(free_port()), busy: str(listening)}
    temp = tmp_path / "tmp"
    temp.mkdir()
    result = run_cli(
        "demo",
        "--check",
        *(item for pair in ports.items() for item in pair),
        env={**os.environ, "TMPDIR": str(temp)},
    )
    assert_one_line_refusal(
        result, f"127.0.0.1:{listening}", "already in use", f"choose a free one with {busy}"
    )
    assert "Unclosed" not in result.stderr
    assert list(temp.iterdir()) == []


def test_demo_names_both_busy_ports_in_one_run(listening: int) -> None:
    """Issue 19 row 10: the demo reported two busy ports one run at a time."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        bot_port = other.getsockname()[1]
        result = run_cli("demo", "--check", "--port", str(listening), "--bot-port", str(bot_port))
    assert_one_line_refusal(
        result,
        f"127.0.0.1:{bot_port} (--bot-port) is already in use;",
        f"127.0.0.1:{listening} (--port) is already in use;",
        "choose free ones with --bot-port PORT and --port PORT",
    )


def test_demo_with_a_missing_or_foreign_config_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    result = run_cli("demo", "--config", str(missing), "--port", str(free_port()))
    assert_one_line_refusal(result, str(missing), "cannot read the file: No such file or directory")
    foreign = tmp_path / "foreign.yaml"
    foreign.write_text("name: not a gateway\n")
    result = run_cli("demo", "--config", str(foreign), "--port", str(free_port()))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "name: unknown setting" in result.stderr


@pytest.fixture(scope="module")
def generated() -> dict[str, dict[str, object]]:
    """What ``keys generate`` prints: a private JWK and its public JWKS."""
    result = run_cli("keys", "generate")
    assert result.returncode == 0, result.stderr
    document: dict[str, dict[str, object]] = json.loads(result.stdout)
    return document


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("public-jwks", ["public key set (JWKS)", "the private_jwk that pact-gateway keys generate printed"]),
        ("public-jwk", ["holds a public key", "needs the private one"]),
        ("pem", ["is not JSON", "--key takes what pact-gateway keys generate prints"]),
    ],
)
def test_token_with_the_wrong_key_file_names_it(
    given: str, words: list[str], generated: dict[str, Any], tmp_path: Path
) -> None:
    key_file = tmp_path / "key.json"
    key_file.write_text(
        {
            "public-jwks": json.dumps(generated["jwks"]),
            "public-jwk": json.dumps(generated["jwks"]["keys"][0]),
            "pem": "-----BEGIN PRIVATE KEY-----\n",
        }[given]
    )
    result = run_cli("token", "--key", str(key_file), "--iss", "https://pa", "--sub", "u1", "--aud", "aud")
    assert_one_line_refusal(result, f"pact-gateway token: {key_file} ", *words)


def test_keys_generate_into_a_closed_pipe_stops_quietly() -> None:
    """`keys generate | head -c 400`: the reader is gone before the key is printed; like a Unix
    tool killed by SIGPIPE, it stops without a word (and without a BrokenPipeError)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "gateway", "keys", "generate"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (result.returncode, result.stderr) == (128 + signal.SIGPIPE, "")


@pytest.mark.parametrize(
    ("verb", "usage"),
    [
        ("keys", "pact-gateway keys generate"),
        ("grants", "list|revoke"),
        ("conversations", "list|close|erase"),
    ],
)
def test_a_verb_without_its_own_verb_says_which_to_give(verb: str, usage: str) -> None:
    result = run_cli(verb)
    assert_one_line_refusal(result, usage, f"pact-gateway {verb} --help")
    assert f"{verb}_verb" not in result.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["demo", "--bot-port", "99999"], ["--bot-port: '99999' is not a port (0 to 65535)"]),
        (["token", "--key", "k.json"], ["the following arguments are required: --iss"]),
        (["keys", "make"], ["invalid choice: 'make'"]),
        (["chek-config", "x.yaml"], ["invalid choice: 'chek-config'"]),
        # Issue 19 row 11: a file where a verb goes, and both spellings of check-config's file at once.
        (["gw.yaml"], ["is a file, not a verb", "pact-gateway --config gw.yaml"]),
        (["check-config", "a.yaml", "--config", "b.yaml"], ["name the file once"]),
        (["check-config"], ["name the file once"]),
    ],
)
def test_a_usage_mistake_is_one_line_pointing_at_help(args: list[str], words: list[str]) -> None:
    assert_one_line_refusal(run_cli(*args), "--help", *words)


@pytest.mark.parametrize(
    "args",
    [[], ["keys"], ["token"], ["demo"], ["check-config"], ["grants", "list"], ["conversations", "erase"]],
)
def test_help_is_plain_text(args: list[str]) -> None:
    result = run_cli(*args, "--help")
    assert result.returncode == 0
    assert "usage: pact-gateway" in result.stdout
    assert "`" not in result.stdout


VERB_PATHS = [
    ["serve"],
    ["check-config"],
    ["keys"],
    ["keys", "generate"],
    ["token"],
    ["grants"],
    ["grants", "list"],
    ["grants", "revoke"],
    ["conversations"],
    ["conversations", "list"],
    ["conversations", "close"],
    ["conversations", "erase"],
    ["demo"],
]
"""Every verb and second verb the CLI takes (checked against gateway.cli below)."""


def test_verb_paths_name_every_verb() -> None:
    firsts = {path[0] for path in VERB_PATHS}
    assert firsts == VERBS
    for verb, second in SUB_VERBS.items():
        seconds = {path[1] for path in VERB_PATHS if path[0] == verb and len(path) == 2}
        assert seconds == set(second.split("|"))


def _help_text(path: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("path", VERB_PATHS, ids=" ".join)
def test_every_verb_help_says_what_it_does_and_every_option(
    path: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 32: each verb's own ``--help`` opens with a description, and no option is bare."""
    blocks = _help_text(path, capsys).split("\n\n")
    assert blocks[0].startswith("usage: pact-gateway")
    description = blocks[1]
    assert not description.endswith(":"), description
    assert not description.startswith(("options:", "positional")), description
    lines = [line for block in blocks[1:] for line in block.splitlines()]
    for index, line in enumerate(lines):
        if not line.startswith("  -") or line.strip().startswith("-h, --help"):
            continue
        said_beside = len(re.split(r"\s{2,}", line.strip())) > 1
        said_below = index + 1 < len(lines) and re.match(r"\s{6,}\S", lines[index + 1]) is not None
        assert said_beside or said_below, f"{' '.join(path)}: {line.strip()} has no help text"


def test_keys_help_says_it_makes_the_providers_signing_keys(capsys: pytest.CaptureFixture[str]) -> None:
    for path in (["keys"], ["keys", "generate"]):
        text = " ".join(_help_text(path, capsys).split())
        assert "oauth.signing_keys" in text
        assert "Provider" in text


def test_readme_check_config_instruction_succeeds_with_no_environment() -> None:
    """docs/configuration.md: `pact-gateway check-config config/example.yaml`, as written, on a
    machine holding none of the file's secrets; serve needs them, and refuses the same file naming both."""
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"ACME_BOT_TOKEN", "PACT_SIGNING_KEY"}
    }
    result = run_cli("check-config", "config/example.yaml", env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith(
        "configuration OK; serve will need ACME_BOT_TOKEN, PACT_SIGNING_KEY set in its environment\n"
    )
    refused = run_cli("serve", "--config", "config/example.yaml", env=env)
    assert refused.returncode == 2
    assert "2 problems" in refused.stderr
    assert "oauth.signing_keys[0].value: environment variable PACT_SIGNING_KEY is not set" in refused.stderr
    assert "Authorization: environment variable ACME_BOT_TOKEN is not set" in refused.stderr


def test_check_config_takes_the_file_as_serve_does() -> None:
    """Issue 19 row 11: ``check-config --config gw.yaml`` is what an operator who runs ``serve`` types."""
    result = run_cli("check-config", "--config", "config/example.yaml")
    assert result.returncode == 0, result.stderr
    assert "configuration OK" in result.stdout


def test_check_config_reads_stdin_for_a_dash() -> None:
    """Issue 19 row 14: ``… | pact-gateway check-config -`` checks a config no file holds yet."""
    text = (ROOT / "config" / "example.yaml").read_text(encoding="utf-8")
    result = run_cli("check-config", "-", stdin=text)
    assert result.returncode == 0, result.stderr
    assert "acme: Acme Support" in result.stdout
    assert "configuration OK" in result.stdout

    bad = run_cli("check-config", "-", stdin=text.replace("\nbrands:\n", "\nbrnads:\n", 1))
    assert bad.returncode == 2
    assert bad.stderr.startswith("pact-gateway: invalid configuration <stdin>: ")
    assert "brnads: unknown setting; did you mean brands?" in bad.stderr

    empty = run_cli("check-config", "-", stdin="")
    assert empty.returncode == 2
    assert empty.stderr == "pact-gateway: invalid configuration <stdin>: the input is empty\n"


def test_check_config_dash_takes_the_config_out_of_rendered_manifests() -> None:
    """``helm template … | pact-gateway check-config -``: the ConfigMap's config.yaml is what is checked."""
    text = (ROOT / "config" / "example.yaml").read_text(encoding="utf-8")
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "pg-pact-gateway"}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "pg-pact-gateway"}}
    dashboard = {**configmap, "data": {"pact-gateway.json": "{}"}}
    stream = yaml.safe_dump_all([service, dashboard, {**configmap, "data": {"config.yaml": text}}])
    result = run_cli("check-config", "-", stdin=stream)
    assert result.returncode == 0, result.stderr
    assert "acme: Acme Support" in result.stdout

    bad = run_cli("check-config", "-", stdin=yaml.safe_dump_all([service, dashboard]))
    assert bad.returncode == 2
    assert "holds Kubernetes manifests but no ConfigMap with data['config.yaml']" in bad.stderr


def test_token_help_documents_every_option() -> None:
    """Issue 19 row 13: ``token --help`` says what each option is, and ``--ttl``'s default."""
    result = run_cli("token", "--help")
    for option in ("--key", "--iss", "--sub", "--aud"):
        line = next(line for line in result.stdout.splitlines() if line.strip().startswith(option))
        assert len(line.split()) > 2 or option == "--key", line
    assert "default 120" in result.stdout


def test_check_config_lists_every_problem_with_its_yaml_path(tmp_path: Path) -> None:
    text = (ROOT / "config" / "example.yaml").read_text()
    text = text.replace("public_url: https://", "public_url: htps://", 1)
    text = text.replace("\nbrands:\n", "\nbrnads:\n", 1)
    text = text.replace("  retry_window: 300", "  retry_windw: 300", 1)
    bad = tmp_path / "gw.yaml"
    bad.write_text(text)
    result = run_cli("check-config", str(bad))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"pact-gateway: invalid configuration {bad}: 3 problems",
        "  public_url: must be an http:// or https:// URL",
        "  cache.retry_windw: unknown setting; did you mean retry_window?",
        "  brnads: unknown setting; did you mean brands?",
    ]
