"""The command line: check-config, keys generate, token, and the demo's own session."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import jwt
import pytest

from gateway.cli import main
from tests.support.delegation import new_provider_key_pem

ROOT = Path(__file__).resolve().parent.parent


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


def test_invalid_config_exits_nonzero_with_yaml_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "gw.yaml"
    bad.write_text((ROOT / "config" / "demo.yaml").read_text().replace("timeout: 5", "timeout: -1"))
    with pytest.raises(SystemExit) as exited:
        main(["check-config", str(bad)])
    assert exited.value.code == 2
    assert "brands[0].upstream.timeout" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--config", str(bad)])  # serve is the default verb, and refuses the same file


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
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "demo",
            "--check",
            "--port",
            str(free_port()),
            "--bot-port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "demo check passed" in result.stderr
    assert "message:send" in result.stdout
