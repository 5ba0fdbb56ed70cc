"""``pact-gateway demo``: the gateway, the sample bot, a demo personal agent and a stand-in Brand
login in one process.

The demo personal agent's key is generated at start-up; the gateway process serves its
public JWKS itself, so nothing else has to run. The printed curl session mints tokens
with ``pact-gateway token`` from the key file written here. The access lines go to stderr (not
under ``--check``, which prints only its verdict) and ``/metrics`` is served on loopback
(:mod:`gateway.demo_ops`), as a deployed gateway would show them.
The admin API (:mod:`gateway.process.admin`) is served on loopback too, with a fresh token written
beside the key, so the operations guide's erasure example runs against the demo as pasted.

The ``acme`` Brand delegates (§5): the Provider's signing key is generated at start-up too and
reaches the configuration only through the environment mapping given to
:func:`~gateway.config.load_config` (``${PACT_DEMO_SIGNING_KEY}``), never through a file, and
the Brand's login is the stand-in of :mod:`examples.sample_login`, mounted under
``/demo-login/`` of the gateway's own port.

The configuration ships inside the package (``gateway/data/demo.yaml``, read through
:mod:`importlib.resources`), so the demo runs from any directory of a plain install or the image.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import os
import secrets
import shlex
import signal
import sys
import tempfile
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Final

import orjson
from aiohttp import web

from examples.sample_bot import ORDER_DETAIL, create_bot_app
from examples.sample_login import create_login_app
from gateway.app import create_app
from gateway.config import (
    AdminConfig,
    BrandConfig,
    ConfigError,
    GatewayConfig,
    load_config,
    read_config_document,
)
from gateway.demo_check import DELEGATED_TEXT, STEP_UP_TEXT, DemoCheckFailed, run_check
from gateway.demo_ops import LOOPBACK, DemoOps, count_requests, start_demo_ops
from gateway.oauth.metadata import DEVICE_CODE_GRANT
from gateway.ops.logs import configure_logging
from gateway.ops.metrics import Metrics
from gateway.pa_keys import generate_private_jwk, public_jwks
from gateway.process.admin import AdminListener
from gateway.process.ports import Listener, unavailable
from gateway.protocol.urls import OAuthUrls

DEFAULT_CONFIG: Final[Traversable] = resources.files("gateway") / "data" / "demo.yaml"
"""The demo's configuration, package data of :mod:`gateway` (it exists wherever the package does)."""
DEMO_SUB = "demo-user-1"
SIGNING_KEY_ENV: Final = "PACT_DEMO_SIGNING_KEY"
"""The variable ``demo.yaml`` names for the Provider's signing key (``oauth.signing_keys``)."""
LOGIN_PREFIX: Final = "/demo-login"
"""Where the stand-in Brand login is mounted on the gateway's port."""
ADMIN_TOKEN_FILE: Final = "admin-token"  # noqa: S105 - a file name, not a secret
"""The demo's admin token, beside the personal agent's key (docs/operations.md reads it from there)."""


def new_signing_key() -> str:
    """A fresh ES256 private JWK (JSON) for delegation tokens and receipts (§5.4, §5.6).

    It lives as long as the process: tokens and receipts of an earlier run no longer verify,
    which is what a demo wants, and the key is never written anywhere.
    """
    return json.dumps(generate_private_jwk("ES256"))


def demo_environ(signing_key: str) -> dict[str, str]:
    """The process environment plus the demo's signing key, as :func:`demo_config` expands it."""
    return {**os.environ, SIGNING_KEY_ENV: signing_key}


def demo_config(
    source: str | os.PathLike[str] | Traversable, port: int, bot_port: int, environ: Mapping[str, str]
) -> GatewayConfig:
    """The demo's YAML (:data:`DEFAULT_CONFIG` or the operator's ``--config``) with its loopback
    ports moved to the ones asked for.

    The file is checked as it stands first, so a file that is not a gateway configuration is
    refused with its problems (a :class:`~gateway.config.ConfigError`) before it is rewritten.
    A delegating Brand's login (§5.3) is pointed at the stand-in this process serves under
    :data:`LOGIN_PREFIX`: its page, its issuer and its key set.
    """
    raw: dict[str, Any] = read_config_document(source)
    load_config(raw, environ)
    if not raw.get("personal_agents", {}).get("registered"):
        raise ConfigError(
            "personal_agents.registered", "the demo needs one registered personal agent: it plays that agent"
        )
    base = f"http://127.0.0.1:{port}"
    raw.setdefault("listen", {})["port"] = port
    raw["public_url"] = base
    raw["provider"]["url"] = base
    raw["personal_agents"]["registered"][0]["issuer"] = f"{base}/demo-pa"
    raw["personal_agents"]["registered"][0]["jwks_uri"] = f"{base}/demo-pa/jwks.json"
    for brand in raw["brands"]:
        brand["upstream"]["url"] = f"http://127.0.0.1:{bot_port}/chat"
        if "delegation" in brand:
            login = brand["delegation"]["login"]
            login.pop("jwks", None)
            login.update(
                url=f"{base}{LOGIN_PREFIX}/login",
                issuer=f"{base}{LOGIN_PREFIX}",
                jwks_uri=f"{base}{LOGIN_PREFIX}/jwks.json",
            )
    return load_config(raw, environ)


def login_app(config: GatewayConfig) -> web.Application:
    """The stand-in login for every delegating Brand: it returns only to their consent URLs."""
    consent_urls = {
        OAuthUrls.of(config.public_url, brand.id).consent: brand.name
        for brand in config.brands.values()
        if brand.delegation is not None
    }
    return create_login_app(f"{config.public_url}{LOGIN_PREFIX}", consent_urls)


_HEADERS: Final = (
    '-H "Authorization: Bearer $TOKEN" -H "Content-Type: application/json" -H "A2A-Version: 1.0"'
)
_DELEGATION_HEADER: Final = '-H "X-A2A-User-Delegation: Bearer $DTOKEN"'


def _send(interface: str, message_id: str, text: str, context: bool, *, delegated: bool = False) -> str:
    """A ``message:send`` curl line; ``context`` continues ``$CTX``, ``delegated`` adds ``$DTOKEN``."""
    ctx = ',"contextId":"\'"$CTX"\'"' if context else ""
    parts = f'"parts":[{{"text":"{text}"}}]'
    body = f'{{"message":{{"messageId":"{message_id}","role":"ROLE_USER"{ctx},{parts}}}}}'
    headers = f"{_HEADERS} {_DELEGATION_HEADER}" if delegated else _HEADERS
    return f"curl -s -X POST {interface}/message:send {headers} -d '{body}'"


def _gateway_command() -> str:
    """The CLI as the README spells it, ``…/bin/pact-gateway``, where the running interpreter has the
    console script beside it (any install); ``python -m gateway`` from a bare source tree."""
    script = Path(sys.executable).parent / "pact-gateway"
    if script.is_file():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m gateway"


POLLS: Final = 60
"""Step 8's token polls, 5 s apart: five minutes for the person to approve, inside the device
code's ten (RFC 8628 ``expires_in``), and a loop that ends on its own when nobody does."""

# One reader for every JSON answer the session picks a field from. A body that is not the JSON
# expected (a bare 401 once a JWT has expired, a pending authorization) is said back in one line
# with a non-zero exit, never as a traceback (issue 19 row 9). No single quote: it is quoted so.
_JSON_FIELD: Final = """import json, sys
body = sys.stdin.read()
try:
    value = json.loads(body)
    for key in sys.argv[1:]:
        value = value[key]
except (ValueError, KeyError, TypeError):
    sys.exit("no " + ".".join(sys.argv[1:]) + " in the answer: " + (body.strip()[:300] or "(empty)"))
print(value)"""


def session_text(
    config: GatewayConfig, key_file: Path, *, python: str | None = None, cli: str | None = None
) -> str:
    """The ready-to-paste curl session: card, first turn, second turn, a retry; then, when the
    Brand delegates, the §5 flow: device authorization, login and consent, token, delegated turns.

    ``python`` and ``cli`` are shell words for the interpreter and the ``pact-gateway`` command;
    by default the running ones, so the demo prints paths that work as pasted. The README renders
    the same session with ``.venv/bin/…`` spellings and a placeholder ``key_file`` (its test holds
    the two equal, so they cannot drift).
    """
    python = shlex.quote(sys.executable) if python is None else python
    cli = _gateway_command() if cli is None else cli
    agent = config.personal_agents.registered[0]
    brand = next(iter(config.brands.values()))
    interface = f"{config.public_url}/a2a/{brand.id}"
    token_cmd = (
        f"{cli} token --key {shlex.quote(str(key_file))} --iss {agent.issuer} "
        f"--sub {DEMO_SUB} --aud {config.provider.audience} --ttl 300"
    )

    lines = [
        # Each answer that curl shows gets its line ended, as the JSON body does not.
        "# 1. The Agent Card (public, no token):",
        f"curl -s {interface}/.well-known/agent-card.json; echo",
        "",
        "# 2. A personal-agent JWT (valid 300 s; run again for a fresh one):",
        f"TOKEN=$({token_cmd})",
        "",
        "# 3. First turn: no contextId, the gateway opens a conversation. json_field prints one field of",
        "#    a JSON answer, or says what came back instead:",
        f'json_field() {{ {python} -c {shlex.quote(_JSON_FIELD)} "$@"; }}',
        f"CTX=$({_send(interface, 'm-1', 'Hi, where is my order?', False)} | tee /dev/stderr"
        " | json_field message contextId); echo >&2",
        "",
        "# 4. Second turn on the same contextId:",
        f"{_send(interface, 'm-2', 'It is A-10001', True)}; echo",
        "",
        "# 5. A retry of m-2: the stored reply, byte for byte, without calling the bot:",
        f"{_send(interface, 'm-2', 'It is A-10001', True)}; echo",
    ]
    if brand.delegation is not None:
        lines += ["", *_delegated_session(config, brand, token_cmd, python)]
    return "\n".join(lines)


def _delegated_session(config: GatewayConfig, brand: BrandConfig, token_cmd: str, python: str) -> list[str]:
    """§5 as curl: the personal agent's calls, and the one step only the User can take (the browser)."""
    agent = config.personal_agents.registered[0]
    urls = OAuthUrls.of(config.public_url, brand.id)
    client = f'--data-urlencode "client_id={agent.issuer}"'
    pa_auth = '-H "Authorization: Bearer $TOKEN"'
    pretty = f"{python} -m json.tool"
    minutes = POLLS * 5 // 60
    return [
        "# 6. Delegated profile (§5): a fresh JWT, then ask for orders:read (RFC 8628 device authorization):",
        f"TOKEN=$({token_cmd})",
        f"DA=$(curl -s -X POST {urls.device_authorization} {pa_auth} {client} -d scope=orders:read"
        " | tee /dev/stderr); echo >&2",
        "",
        "# 7. Open verification_uri_complete in a browser: the Brand's login (here a stand-in that takes",
        "#    any password), then tick the scopes to allow on the Provider's consent page:",
        'echo "$DA" | json_field verification_uri_complete',
        "",
        "# 8. Poll the token endpoint every 5 s (a fresh JWT each time) until you approve, for up to",
        f"#    {minutes} minutes; DTOKEN is the delegation token (§5.4). poll_token takes the device code",
        "#    and the step to go back to if nobody approves:",
        "poll_token() {",
        f"  for poll in $(seq {POLLS}); do",
        f"    DTOKEN=$(curl -s -X POST {urls.token} {pa_auth} -d grant_type={DEVICE_CODE_GRANT} \\",
        f'      -d "device_code=$1" {client} | json_field access_token) && return',
        f"    sleep 5; TOKEN=$({token_cmd})",
        "  done",
        f'  echo "No delegation token after {minutes} minutes: start again at step $2." >&2',
        "}",
        'poll_token "$(echo "$DA" | json_field device_code)" 6',
        "",
        "# 9. A delegated turn, both tokens sent: the reply's metadata carries a signed pact.receipt (§5.6):",
        f"{_send(urls.interface, 'd-1', DELEGATED_TEXT, False, delegated=True)} | {pretty}",
        "",
        "# 10. Cancelling needs orders:cancel, which this token lacks, for this one order: a",
        "#     TASK_STATE_AUTH_REQUIRED task with the missing scope, the order asked for as an RFC 9396",
        "#     authorization detail (pact.authorizationDetails) and a new link (§5.5 step-up):",
        f"SU=$({_send(urls.interface, 'd-2', STEP_UP_TEXT, False, delegated=True)} | tee /dev/stderr)"
        "; echo >&2",
        "",
        "# 11. Open the task's link and allow: the consent page shows the order as the condition of",
        "#     orders:cancel and keeps orders:read. Then send d-2 again on the task's contextId with the",
        "#     new token: the bot cancels that order, and the receipt's action names the approved detail",
        "#     (authorizationDetail):",
        'echo "$SU" | json_field task metadata pact.verificationUriComplete',
        'poll_token "$(echo "$SU" | json_field task metadata pact.deviceCode)" 10',
        'CTX=$(echo "$SU" | json_field task contextId)',
        f"{_send(urls.interface, 'd-2', STEP_UP_TEXT, True, delegated=True)} | {pretty}",
    ]


def _write_key_file(private: dict[str, Any]) -> Path:
    """The demo key on disk (mode 0600) so the printed `pact-gateway token` command can use it."""
    key_file = Path(tempfile.mkdtemp(prefix="pact-demo-")) / "demo-pa.jwk.json"
    key_file.write_text(json.dumps(private), encoding="utf-8")
    key_file.chmod(0o600)
    return key_file


def _remove_key_file(key_file: Path) -> None:
    key_file.unlink(missing_ok=True)
    (key_file.parent / ADMIN_TOKEN_FILE).unlink(missing_ok=True)
    key_file.parent.rmdir()


def quiet_access_log(config: GatewayConfig) -> GatewayConfig:
    """``config`` without the access lines: ``demo --check`` prints only its verdict (README), and
    its session's requests are counted from ``/metrics`` instead. Warnings and errors still show."""
    return dataclasses.replace(config, logging=dataclasses.replace(config.logging, access_log=False))


def with_admin(config: GatewayConfig) -> tuple[GatewayConfig, str | None]:
    """``config`` with the admin API on, on loopback, and the token made for it when the file did not
    turn it on itself (``None`` when it did: the operator's own token, never written anywhere here)."""
    if config.admin.enabled:
        return dataclasses.replace(config, admin=dataclasses.replace(config.admin, host=LOOPBACK)), None
    token = secrets.token_hex(32)
    admin = dataclasses.replace(config.admin, enabled=True, host=LOOPBACK, token=token)
    return dataclasses.replace(config, admin=admin), token


async def start_demo_admin(gateway: web.Application, config: AdminConfig) -> tuple[AdminListener, bool]:
    """The admin listener at ``config``'s port or, when that is taken (another demo, a ``serve``), a
    free one, as the ops listener does; and whether the port asked for was taken.

    The port is looked at before the listener is opened: an attempt that fails has already
    registered the admin API's metrics on the gateway's registry, and a second would clash.
    """
    taken = bool(unavailable([Listener("admin.port", config.host, config.port)]))
    listener = AdminListener(gateway)
    await listener.apply(dataclasses.replace(config, port=0) if taken else config)
    return listener, taken


class PortUnavailable(Exception):
    """The demo cannot listen on a port it was given (most often: something else already does)."""

    def __init__(self, role: str, port: int, error: OSError) -> None:
        why = "is already in use" if error.errno == errno.EADDRINUSE else f"cannot be used: {error.strerror}"
        super().__init__(f"127.0.0.1:{port}, the {role}'s port, {why}")
        self.role = role


async def start_demo(
    config: GatewayConfig, private: Mapping[str, Any], bot_port: int, *, metrics: Metrics | None = None
) -> list[web.AppRunner]:
    """The sample bot on ``bot_port`` and the gateway on ``config.listen.port``, both on loopback.

    The gateway also serves the demo personal agent's JWKS (for ``private``) and, when a Brand
    delegates, the stand-in login; the bot offers its account actions to those Brands only, and
    binds each cancellation to one order for those whose configuration has its detail type.
    The caller cleans the runners up, in reverse order; the gateway's is the last. ``metrics``
    is the gateway's registry, for the caller to serve. When a port cannot be had
    (:class:`PortUnavailable`), whatever had started is cleaned up here, the gateway's client
    sessions included.
    """
    jwks_body = orjson.dumps(public_jwks(private))

    async def serve_jwks(request: web.Request) -> web.Response:
        return web.Response(body=jwks_body, content_type="application/json")

    delegating = [brand.id for brand in config.brands.values() if brand.delegation is not None]
    order_bound = [
        brand.id
        for brand in config.brands.values()
        if brand.delegation is not None and ORDER_DETAIL in brand.delegation.authorization_details
    ]
    app = create_app(config, metrics=metrics)
    app.router.add_get("/demo-pa/jwks.json", serve_jwks)
    if delegating:
        app.add_subapp(LOGIN_PREFIX, login_app(config))
    bot = create_bot_app(delegating=delegating, order_bound=order_bound)
    runners: list[web.AppRunner] = []
    try:
        for role, served, listen_port in (
            ("sample bot", bot, bot_port),
            ("gateway", app, config.listen.port),
        ):
            runner = web.AppRunner(served, access_log=None)
            await runner.setup()
            runners.append(runner)
            try:
                await web.TCPSite(runner, "127.0.0.1", listen_port).start()
            except OSError as exc:
                raise PortUnavailable(role, listen_port, exc) from None
    except BaseException:
        for runner in reversed(runners):
            await runner.cleanup()
        raise
    return runners


def _ops_note(ops: DemoOps | None, port: int) -> str:
    if ops is None:
        return "metrics off (metrics.enabled: false)"
    taken = f" ({port} is in use)" if ops.preferred_port_taken else ""
    return f"Prometheus metrics on {ops.metrics_url}{taken}"


async def run_demo(config_path: str | None, *, port: int, bot_port: int, check: bool) -> int:
    """The demo until Ctrl+C (or its check, once); 2 when a port cannot be had.

    A file that is not a demo configuration raises :class:`~gateway.config.ConfigError` for the
    CLI to report.
    """
    environ = demo_environ(new_signing_key())
    config = demo_config(config_path or DEFAULT_CONFIG, port, bot_port, environ)
    admin_token: str | None = None
    if check:
        config = quiet_access_log(config)
    else:
        config, admin_token = with_admin(config)
    private = generate_private_jwk("ES256")
    configure_logging(config.logging)  # the access lines (not under --check), warnings and errors, on stderr
    metrics = Metrics()
    wanted = [Listener("--bot-port", "127.0.0.1", bot_port), Listener("--port", "127.0.0.1", port)]
    taken = unavailable(wanted)
    if taken:
        choose = "a free one with" if len(taken) == 1 else "free ones with"
        options = " and ".join(f"{each.listener.setting} PORT" for each in taken)
        said = "; ".join(map(str, taken))
        print(f"pact-gateway demo: {said}; choose {choose} {options}", file=sys.stderr)
        return 2
    try:
        runners = await start_demo(config, private, bot_port, metrics=metrics)
    except PortUnavailable as busy:
        option = "--bot-port" if busy.role == "sample bot" else "--port"
        print(f"pact-gateway demo: {busy}; choose a free one with {option} PORT", file=sys.stderr)
        return 2
    gateway_app = runners[-1].app  # start_demo's last runner is the gateway's
    delegating = any(brand.delegation is not None for brand in config.brands.values())
    key_file: Path | None = None
    admin: AdminListener | None = None
    try:
        ops = (
            await start_demo_ops(runners[-1].app, metrics, config.metrics) if config.metrics.enabled else None
        )
        if ops is not None:
            runners.append(ops.runner)
        if check:
            # Only the verdict: no session to paste, and so no key file for it to name.
            try:
                await run_check(config, private, DEMO_SUB)
            except DemoCheckFailed as failed:
                print(failed, file=sys.stderr)
                return 1
            if ops is not None:
                counted = await count_requests(ops.metrics_url)
                note = _ops_note(ops, config.metrics.port)
                print(f"demo check: {note}, counting {counted:g} requests", file=sys.stderr)
            return 0
        # Written once both ports are held, so a demo that could not start leaves no private key behind.
        key_file = _write_key_file(private)
        admin, admin_taken = await start_demo_admin(gateway_app, config.admin)
        admin_where = f"admin API on http://{LOOPBACK}:{admin.addresses[0][1]}/admin/"
        if admin_taken:
            admin_where += f" ({config.admin.port} is in use)"
        if admin_token is not None:
            token_file = key_file.parent / ADMIN_TOKEN_FILE
            token_file.write_text(admin_token, encoding="utf-8")
            token_file.chmod(0o600)
            admin_where += f", its token in {shlex.quote(str(token_file))}"
        login_note = f", stand-in Brand login on {config.public_url}{LOGIN_PREFIX}/" if delegating else ""
        bot_note = f"sample bot on 127.0.0.1:{bot_port}"
        print(f"pact-gateway demo: gateway on {config.public_url}, {bot_note}{login_note}")
        print(f"pact-gateway demo: {_ops_note(ops, config.metrics.port)}; access log on stderr")
        print(f"pact-gateway demo: {admin_where}\n")
        print(session_text(config, key_file), flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        print("\nPress Ctrl+C to stop.", flush=True)
        await stop.wait()
        return 0
    finally:
        if admin is not None:
            await admin.close()
        for runner in reversed(runners):
            await runner.cleanup()
        if key_file is not None:
            _remove_key_file(key_file)
