"""``pact-gateway demo``: its configuration, its printed §5 session, and how its check reads pages.

The whole session is run over real HTTP by ``demo --check`` (tests/test_cli.py).
"""

from __future__ import annotations

import dataclasses
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gateway.app import create_app
from gateway.config import ADMIN_TOKEN_MIN, ConfigError
from gateway.demo import (
    DEFAULT_CONFIG,
    POLLS,
    SIGNING_KEY_ENV,
    demo_config,
    new_signing_key,
    session_text,
    start_demo_admin,
    with_admin,
)
from gateway.demo_check import read_form
from gateway.oauth import pages
from gateway.provider_keys import parse_signing_key
from tests.test_cli import CLI_TIMEOUT, free_port


def test_s5_demo_brand_delegates_with_its_login_on_the_chosen_port() -> None:
    key = new_signing_key()
    config = demo_config(DEFAULT_CONFIG, 18080, 19100, {SIGNING_KEY_ENV: key})
    delegation = config.brands["acme"].delegation
    assert delegation is not None
    assert dict(delegation.scopes) == {
        "orders:read": "Look up your orders and their status",
        "orders:cancel": "Cancel an order that has not shipped",
    }
    assert delegation.login.url == "http://127.0.0.1:18080/demo-login/login"
    assert delegation.login.issuer == "http://127.0.0.1:18080/demo-login"
    assert delegation.login.jwks_uri == "http://127.0.0.1:18080/demo-login/jwks.json"
    assert [signing.kid for signing in config.oauth.signing_keys] == [parse_signing_key(key).kid]
    assert config.oauth.signing_keys[0].alg == "ES256"
    assert (config.metrics.enabled, config.metrics.host, config.metrics.port) == (True, "127.0.0.1", 9090)
    assert config.logging.format == "text"


def test_s5_4_demo_signing_key_comes_only_from_the_environment() -> None:
    """No key in the committed file: without the variable the demo configuration does not load."""
    with pytest.raises(ConfigError) as refused:
        demo_config(DEFAULT_CONFIG, 18080, 19100, {})
    assert refused.value.path == "oauth.signing_keys[0].value"
    assert new_signing_key() != new_signing_key()


def test_s5_demo_session_walks_the_delegated_flow() -> None:
    config = demo_config(DEFAULT_CONFIG, 18080, 19100, {SIGNING_KEY_ENV: new_signing_key()})
    text = session_text(config, Path("/tmp/pact-demo-x/demo-pa.jwk.json"))
    oauth = "http://127.0.0.1:18080/a2a/acme/oauth"
    steps = [
        f"{oauth}/device_authorization",
        "scope=orders:read",
        "verification_uri_complete",
        f"{oauth}/token",
        "grant_type=urn:ietf:params:oauth:grant-type:device_code",
        "pact.receipt",
        '-H "X-A2A-User-Delegation: Bearer $DTOKEN"',
        "list my orders",
        "TASK_STATE_AUTH_REQUIRED",
        "pact.authorizationDetails",
        "(authorizationDetail)",
        "task metadata pact.verificationUriComplete",
        "task metadata pact.deviceCode",
        '"messageId":"d-2","role":"ROLE_USER","contextId"',
    ]
    positions = [text.index(step) for step in steps]
    assert positions == sorted(positions)
    assert "client_id=http://127.0.0.1:18080/demo-pa" in text


def test_demo_session_spells_the_cli_as_the_readme_and_ends_teed_lines() -> None:
    """Issue 19 row 13: ``…/bin/pact-gateway token`` as the README writes it, not ``python -m gateway``;
    a reply shown through ``tee /dev/stderr`` gets its line ended."""
    config = demo_config(DEFAULT_CONFIG, 18080, 19100, {SIGNING_KEY_ENV: new_signing_key()})
    text = session_text(config, Path("/tmp/pact-demo-x/demo-pa.jwk.json"))
    assert f"TOKEN=$({Path(sys.executable).parent / 'pact-gateway'} token --key" in text
    assert "-m gateway" not in text
    teed = [line for line in text.splitlines() if "tee /dev/stderr" in line]
    assert len(teed) == 3
    assert all(line.endswith("; echo >&2") for line in teed)


def test_s5_3_check_reads_the_consent_form_as_a_browser_submits_it() -> None:
    html = pages.consent_page(
        agent_name=None,
        signed_in_as="jane",
        user_code="WDJB-MJHT",
        carried=[],
        pa_origin="http://127.0.0.1:18080",
        brand_name="Acme",
        scopes=[pages.Choice("orders:read", "Look up your orders & their status")],
        session="WDJB-MJHT.secret",
        action="/a2a/acme/oauth/consent/decision",
    )
    form = read_form(html, "http://127.0.0.1:18080/a2a/acme/oauth/consent")
    assert form.action == "http://127.0.0.1:18080/a2a/acme/oauth/consent/decision"
    assert form.fields == [("session", "WDJB-MJHT.secret"), ("scope", "orders:read")]
    assert form.buttons == [("decision", "deny"), ("decision", "allow")]  # Deny first: implicit submission
    assert form.submission(button=("decision", "allow")) == [*form.fields, ("decision", "allow")]


def _session_part(text: str, first: str, end: str) -> str:
    """The session's lines from the one starting ``first`` up to (not including) the one starting ``end``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    stop = next(i for i, line in enumerate(lines) if i > start and line.startswith(end))
    return "\n".join(lines[start:stop])


def _bash(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-eu", "-o", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def test_issue19_session_reader_says_what_came_back_instead_of_a_traceback() -> None:
    """A bare 401 (an expired JWT) or a page that is not JSON: one line naming it, a non-zero exit."""
    config = demo_config(DEFAULT_CONFIG, 18080, 19100, {SIGNING_KEY_ENV: new_signing_key()})
    reader = _session_part(session_text(config, Path("/tmp/k.json")), "json_field() {", "CTX=")
    for body, said in [("", "(empty)"), ("<html>Bad Gateway</html>", "<html>Bad Gateway</html>")]:
        result = _bash(f"{reader}\nprintf %s {shlex.quote(body)} | json_field access_token")
        assert result.returncode == 1
        assert result.stderr == f"no access_token in the answer: {said}\n"
    pending = _bash(f'{reader}\necho \'{{"error":"authorization_pending"}}\' | json_field access_token')
    assert pending.stderr == 'no access_token in the answer: {"error":"authorization_pending"}\n'
    assert (
        _bash(f'{reader}\necho \'{{"message":{{"contextId":"c-1"}}}}\' | json_field message contextId').stdout
        == "c-1\n"
    )


def test_issue19_session_token_loop_ends_with_a_message() -> None:
    """Step 8 polls a fixed number of times, minting a JWT before each retry, then says so and ends:
    run against a port nothing listens on, with ``sleep`` and the CLI made instant."""
    config = demo_config(DEFAULT_CONFIG, free_port(), free_port(), {SIGNING_KEY_ENV: new_signing_key()})
    text = session_text(config, Path("/tmp/k.json"), cli="echo")
    reader = _session_part(text, "json_field() {", "CTX=")
    step8 = _session_part(text, "# 8.", "# 9.")
    before = ["sleep() { :; }", "TOKEN=expired", reader, """DA='{"device_code":"x"}'"""]
    result = _bash("\n".join([*before, step8, 'echo "TOKEN=$TOKEN"']))
    assert result.returncode == 0, result.stderr
    said = result.stderr.splitlines()
    assert said == ["no access_token in the answer: (empty)"] * POLLS + [
        "No delegation token after 5 minutes: start again at step 6."
    ]
    assert result.stdout.startswith("TOKEN=token --key /tmp/k.json")  # minted afresh in the loop


async def test_issue19_demo_admin_api_moves_off_a_taken_port_and_makes_its_own_token() -> None:
    """The demo serves the admin API the operations guide's example uses: on loopback with a fresh
    token when its file leaves the API off, and on a free port when ``admin.port`` is taken (another
    demo), saying so, as its ops listener does."""
    config = demo_config(DEFAULT_CONFIG, free_port(), free_port(), {SIGNING_KEY_ENV: new_signing_key()})
    assert not config.admin.enabled
    served, token = with_admin(config)
    assert served.admin.enabled
    assert served.admin.host == "127.0.0.1"
    assert token is not None
    assert served.admin.token == token
    assert len(token) >= ADMIN_TOKEN_MIN
    assert with_admin(config)[1] != token  # fresh at every start
    gateway = create_app(served)
    runner = web.AppRunner(gateway)
    await runner.setup()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        listener, moved = await start_demo_admin(gateway, dataclasses.replace(served.admin, port=taken))
        try:
            assert moved
            ((_, port),) = listener.addresses
            assert port != taken
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{port}/admin/erase") as answer,
            ):
                assert answer.status == 401  # there, and asking for its token
        finally:
            await listener.close()
            await runner.cleanup()
