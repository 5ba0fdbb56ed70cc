"""``pact-gateway``: serve, check-config, keys generate, token, grants, conversations, demo.

Every mistake an operator can make here ends in one line on stderr that says what to do instead,
and exit status 2: a traceback is for the gateway's own faults only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, Final, NoReturn

import jwt

from gateway.config import (
    ConfigError,
    GatewayConfig,
    check_config,
    config_document_from_stream,
    load_config,
    load_config_file,
    read_config_document,
)
from gateway.pa_keys import generate_private_jwk, mint_token, public_jwks

VERBS = {"serve", "check-config", "keys", "token", "grants", "conversations", "demo"}
DESCRIPTION: Final = (
    "A PACT 1.0 authentication gateway in front of Brands' support bots (A2A 1.0 HTTP+JSON). "
    "pact-gateway --config PATH is short for pact-gateway serve --config PATH."
)


class UsageError(Exception):
    """An operator's mistake: the message says what to do instead (the CLI exits 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line that points at ``--help``, not a usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _version() -> str:
    try:
        return metadata.version("pact-gateway")
    except metadata.PackageNotFoundError:
        # A source tree run as ``python -m gateway`` without ever being installed.
        return "(not installed)"


def _port(text: str) -> int:
    """A TCP port for ``--port``/``--bot-port``, refused by argparse (one line) when it is none."""
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return int(text)


GENERATE_DESCRIPTION: Final = (
    "keys generate prints a new private JWK and its public JWKS as one JSON document. For a personal"
    " agent: token --key takes the document, and the agent publishes the JWKS at its jwks_uri. For the"
    " Provider (delegation, §5): oauth.signing_keys takes the same document as printed, from a file or"
    " an environment variable; the gateway publishes the public half itself."
)
CACHE_NOTE: Final = (
    "It works on the cache that --config's cache.url names, a redis:// one: with memory:// all of it"
    " lives inside the serving process."
)
BRAND_HELP: Final = "the Brand's id (brands[].id in the YAML, the {brandId} of its /a2a/ path)"


def _sentence(text: str) -> str:
    """A verb's one-line ``help`` (lower case, as argparse lists it) as the first sentence of its own
    ``--help`` description."""
    return f"{text[:1].upper()}{text[1:]}."


SUB_VERBS: Final = {"keys": "generate", "grants": "list|revoke", "conversations": "list|close|erase"}
"""The verbs that need a second verb, and the ones they take."""


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pact-gateway", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    verbs = parser.add_subparsers(dest="verb", title="verbs", metavar="VERB")

    serve = verbs.add_parser(
        "serve",
        help="run the gateway (the default verb)",
        description="Run the gateway: the A2A listener, /metrics and health, until SIGTERM or SIGINT.",
    )
    serve.add_argument("--config", required=True, help="path of the gateway YAML")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes sharing the listen port (SO_REUSEPORT); more than 1 needs a redis:// cache",
    )
    # Internal: how a supervisor tells a worker it spawned where to say "serving".
    serve.add_argument("--worker-ready-fd", type=int, default=None, help=argparse.SUPPRESS)

    check = verbs.add_parser(
        "check-config",
        help="validate a file and print what it would serve",
        description="Validate a gateway YAML and print what serve would run from it; every problem is"
        " named with its YAML path. A ${NAME} not set here is a note: serve will need it.",
    )
    # The path as serve takes it (--config) or positional: an operator who just ran serve types the former.
    check.add_argument(
        "path",
        nargs="?",
        help="path of the gateway YAML; - reads it from stdin (the YAML, or what helm template renders)",
    )
    check.add_argument("--config", dest="config_path", default=None, help="the same path, as serve takes it")
    check.add_argument(
        "--probe",
        action="store_true",
        help="also ask the cache, key sets and every Brand's bot once each, and print what answered",
    )

    keys_text = "make keys: a personal agent's, or the Provider's signing key (oauth.signing_keys)"
    keys = verbs.add_parser(
        "keys",
        help=keys_text,
        description=f"{_sentence(keys_text)} {GENERATE_DESCRIPTION}",
    )
    key_verbs = keys.add_subparsers(dest="keys_verb", title="verbs", metavar="VERB")
    generate = key_verbs.add_parser(
        "generate", help="print a new private JWK and its public JWKS", description=GENERATE_DESCRIPTION
    )
    generate.add_argument(
        "--alg",
        choices=["ES256", "RS256"],
        default="ES256",
        help="the key's algorithm: ES256 (P-256, the default) or RS256 (RSA 2048)",
    )

    token = verbs.add_parser(
        "token",
        help="mint a personal-agent JWT (§3.2) for curl",
        description="Mint a personal-agent JWT (§3.2) signed with a key from keys generate, to try a"
        " gateway with curl as a registered personal agent would call it.",
    )
    token.add_argument(
        "--key", required=True, help="file holding a private JWK (what pact-gateway keys generate prints)"
    )
    token.add_argument("--iss", required=True, help="the personal agent's issuer URL (its registered issuer)")
    token.add_argument("--sub", required=True, help="the User the agent speaks for, as the agent names them")
    token.add_argument("--aud", required=True, help="the Provider's audience (provider.audience in the YAML)")
    token.add_argument(
        "--ttl", type=int, default=120, help="seconds until exp (default 120; §3.2 accepts at most 300)"
    )

    grants_text = "list or revoke a Brand user's delegation grants (§5)"
    grants = verbs.add_parser(
        "grants",
        help=grants_text,
        description=f"{_sentence(grants_text)} {CACHE_NOTE}",
    )
    grant_verbs = grants.add_subparsers(dest="grants_verb", title="verbs", metavar="VERB")
    for name, text in (("list", "print the user's live grants"), ("revoke", "end the user's grants now")):
        grant_verb = grant_verbs.add_parser(name, help=text, description=_sentence(text))
        grant_verb.add_argument("--config", required=True, help="path of the gateway YAML (its cache.url)")
        grant_verb.add_argument("--brand", required=True, help=BRAND_HELP)
        grant_verb.add_argument("--user", required=True, help="the Brand's own user id")
        if name == "revoke":
            grant_verb.add_argument("--grant", default=None, help="only this grant id (default: all of them)")

    conversations_text = "list, close or erase a person's conversations (Brand, PA, sub)"
    conversations = verbs.add_parser(
        "conversations",
        help=conversations_text,
        description=f"{_sentence(conversations_text)} {CACHE_NOTE}",
    )
    conversation_verbs = conversations.add_subparsers(
        dest="conversations_verb", title="verbs", metavar="VERB"
    )
    for name, text in (
        ("list", "print the person's conversations: ids, opened, turns, open or closed (never texts)"),
        ("close", "close one of the person's conversations (--context), as the bot's last reply would"),
        ("erase", "forget everything stored for the person: conversations, replies, counters, grants"),
    ):
        verb = conversation_verbs.add_parser(name, help=text, description=_sentence(text))
        verb.add_argument("--config", required=True, help="path of the gateway YAML (its cache.url)")
        verb.add_argument("--brand", required=True, help=BRAND_HELP)
        verb.add_argument("--pa", required=True, help="the personal agent's issuer")
        verb.add_argument("--sub", required=True, help="the sub the personal agent signs for")
        if name == "close":
            verb.add_argument("--context", required=True, help="the conversation's contextId")

    demo = verbs.add_parser(
        "demo",
        help="gateway + sample bot + demo personal agent in one process",
        description="Run the gateway, a sample bot, a demo personal agent and a stand-in Brand login in"
        " one process on loopback, and print a curl session to paste; --check runs that session once"
        " and prints only its verdict.",
    )
    demo.add_argument("--config", default=None, help="demo YAML (default: the one shipped with the package)")
    demo.add_argument("--port", type=_port, default=8080, help="the gateway's port on 127.0.0.1")
    demo.add_argument("--bot-port", type=_port, default=9100, help="the sample bot's port on 127.0.0.1")
    demo.add_argument("--check", action="store_true", help="run the printed session once and exit")
    return parser


def _describe(config: GatewayConfig) -> str:
    lines = [f"public_url: {config.public_url}", f"audience: {config.provider.audience}"]
    lines.append(f"cache: {config.cache.backend}")
    lines.append(f"personal agents ({config.personal_agents.policy}):")
    for agent in config.personal_agents.registered:
        source = "inline jwks" if agent.jwks is not None else agent.jwks_uri
        state = "enabled" if agent.enabled else "disabled"
        lines.append(f"  - {agent.issuer} [{state}] keys: {source}")
    lines.append("brands:")
    for brand in config.brands.values():
        lines.append(f"  - {brand.id}: {brand.name}")
        lines.append(f"      card: {config.public_url}/a2a/{brand.id}/.well-known/agent-card.json")
        if brand.domain:
            lines.append(f"      also: https://{brand.domain}/.well-known/agent-card.json")
        lines.append(f"      bot: {brand.upstream.url} (adapter {brand.upstream.adapter})")
        if brand.delegation is not None:
            lines.append(f"      delegation (§5): login {brand.delegation.login.url}")
            lines.extend(f"        {scope}: {text}" for scope, text in brand.delegation.scopes.items())
    return "\n".join(lines)


def _probe(config: GatewayConfig) -> int:
    """``check-config --probe``: the table of what answered; 2 when anything did not."""
    from gateway.ops.probe import format_table, run_probes

    results = asyncio.run(run_probes(config))
    print(format_table(results))
    failed = sum(not result.ok for result in results)
    if failed:
        print(f"pact-gateway: {failed} of {len(results)} probes failed", file=sys.stderr)
        return 2
    print(f"configuration OK; all {len(results)} probes answered")
    return 0


def _report(path: str, error: ConfigError) -> None:
    """Every problem of the file: on the one line when there is one, one line each otherwise."""
    if len(error.problems) == 1:
        print(f"pact-gateway: invalid configuration {path}: {error}", file=sys.stderr)
        return
    print(f"pact-gateway: invalid configuration {path}: {len(error.problems)} problems", file=sys.stderr)
    for problem in error.problems:
        print(f"  {problem}", file=sys.stderr)


def _load(path: str) -> GatewayConfig:
    """The configuration ``serve`` would run (every ``${NAME}`` set), or exit 2 saying why not."""
    try:
        return load_config_file(path)
    except ConfigError as error:
        _report(path, error)
        raise SystemExit(2) from None


STDIN_PATH = "-"
"""``check-config -``: the config (or ``helm template`` output) on standard input."""


def _read_stdin_document() -> Any:
    """The gateway YAML on stdin, taken out of the chart's ConfigMap when helm rendered it."""
    try:
        text = sys.stdin.read()
    except UnicodeDecodeError:
        raise ConfigError("", "standard input is not UTF-8 text") from None
    return config_document_from_stream(text)


def _check_config(path: str, probe: bool) -> int:
    shown = "<stdin>" if path == STDIN_PATH else path
    try:
        document = _read_stdin_document() if path == STDIN_PATH else read_config_document(path)
        if probe:
            # The probe talks to what the file names, so it needs the secrets serve would use.
            config = load_config(document)
        else:
            checked = check_config(document)
    except ConfigError as error:
        _report(shown, error)
        return 2
    if probe:
        print(_describe(config))
        return _probe(config)
    print(_describe(checked.config))
    for warning in checked.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if checked.unset:
        print(f"configuration OK; serve will need {', '.join(checked.unset)} set in its environment")
    else:
        print("configuration OK")
    return 0


def _private_jwk(path: str) -> Mapping[str, Any]:
    """The private JWK in ``path``: the whole output of ``keys generate``, or its ``private_jwk``."""
    try:
        document = json.loads(Path(path).read_bytes())
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError:
        raise UsageError(f"{path} is not JSON; --key takes what pact-gateway keys generate prints") from None
    private = document.get("private_jwk", document) if isinstance(document, dict) else None
    if not isinstance(private, dict):
        raise UsageError(f"{path} holds no JWK; --key takes what pact-gateway keys generate prints")
    if "keys" in private:
        raise UsageError(
            f"{path} is a public key set (JWKS), which verifies tokens; minting one needs the private"
            " key: the private_jwk that pact-gateway keys generate printed beside it"
        )
    if "d" not in private:
        raise UsageError(f"{path} holds a public key; minting a token needs the private one (with its d)")
    return private


def _token(args: argparse.Namespace) -> str:
    private = _private_jwk(args.key)
    try:
        return mint_token(private, iss=args.iss, sub=args.sub, aud=args.aud, ttl=args.ttl)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    except (jwt.PyJWTError, KeyError) as exc:
        raise UsageError(f"{args.key} holds no usable signing key: {exc}") from None


def _config_path(args: argparse.Namespace) -> str:
    """``check-config``'s file, given once: positional or ``--config``, not both, not neither."""
    if (args.path is None) == (args.config_path is None):
        raise UsageError(
            "name the file once: pact-gateway check-config gw.yaml or --config gw.yaml"
            " (see pact-gateway check-config --help)"
        )
    path: str = args.path if args.path is not None else args.config_path
    return path


def _dispatch(args: argparse.Namespace) -> int:
    if args.verb in SUB_VERBS and getattr(args, f"{args.verb}_verb") is None:
        verb = f"pact-gateway {args.verb}"
        raise UsageError(f"say what to do: {verb} {SUB_VERBS[args.verb]} (see {verb} --help)")
    if args.verb == "serve":
        from gateway.serve import serve

        return serve(args.config, _load(args.config), workers=args.workers, ready_fd=args.worker_ready_fd)
    if args.verb == "check-config":
        return _check_config(_config_path(args), args.probe)
    if args.verb == "keys":
        private = generate_private_jwk(args.alg)
        print(json.dumps({"private_jwk": private, "jwks": public_jwks(private)}, indent=2))
        return 0
    if args.verb == "token":
        print(_token(args))
        return 0
    if args.verb == "grants":
        from gateway.grants_cli import run_grants

        return asyncio.run(
            run_grants(
                _load(args.config), args.grants_verb, args.brand, args.user, getattr(args, "grant", None)
            )
        )
    if args.verb == "conversations":
        from gateway.conversations_cli import run_conversations
        from gateway.store.base import Owner

        person = Owner(args.brand, args.pa, args.sub)
        context_id = getattr(args, "context", None)
        return asyncio.run(run_conversations(_load(args.config), args.conversations_verb, person, context_id))
    from gateway.demo import run_demo

    try:
        return asyncio.run(run_demo(args.config, port=args.port, bot_port=args.bot_port, check=args.check))
    except ConfigError as error:
        _report(args.config or "(the demo's own)", error)
        return 2


def _names_a_file(word: str) -> bool:
    return word.endswith((".yaml", ".yml")) or "/" in word or Path(word).is_file()


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] not in VERBS and args_list[0].startswith("--config"):
        args_list.insert(0, "serve")
    if args_list and args_list[0] not in VERBS and _names_a_file(args_list[0]):
        # ``pact-gateway gw.yaml``: argparse would say "invalid choice"; say what was probably meant.
        first = args_list[0]
        print(
            f"pact-gateway: {first!r} is a file, not a verb: serve it with pact-gateway --config {first},"
            f" check it with pact-gateway check-config {first} (see pact-gateway --help)",
            file=sys.stderr,
        )
        return 2
    args = _parser().parse_args(args_list)
    if args.verb is None:
        _parser().print_help(sys.stderr)
        return 2
    try:
        code = _dispatch(args)
        sys.stdout.flush()
    except UsageError as error:
        print(f"pact-gateway {args.verb}: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as a tool killed by SIGPIPE does. The
        # interpreter would still flush stdout at exit and complain, so it now points at /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    return code
