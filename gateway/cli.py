"""``pact-gateway``: serve, check-config, keys generate, token, grants, demo."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway.config import ConfigError, GatewayConfig, load_config_file
from gateway.pa_keys import generate_private_jwk, mint_token, public_jwks

VERBS = {"serve", "check-config", "keys", "token", "grants", "demo"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pact-gateway", description=__doc__)
    verbs = parser.add_subparsers(dest="verb")

    serve = verbs.add_parser("serve", help="run the gateway (the default verb)")
    serve.add_argument("--config", required=True, help="path of the gateway YAML")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes sharing the listen port (SO_REUSEPORT); more than 1 needs a redis:// cache",
    )
    # Internal: how a supervisor tells a worker it spawned where to say "serving".
    serve.add_argument("--worker-ready-fd", type=int, default=None, help=argparse.SUPPRESS)

    check = verbs.add_parser("check-config", help="validate a file and print what it would serve")
    check.add_argument("path")

    keys = verbs.add_parser("keys", help="key tools for personal agents")
    key_verbs = keys.add_subparsers(dest="keys_verb", required=True)
    generate = key_verbs.add_parser("generate", help="print a new private JWK and its public JWKS")
    generate.add_argument("--alg", choices=["ES256", "RS256"], default="ES256")

    token = verbs.add_parser("token", help="mint a personal-agent JWT (§3.2) for curl")
    token.add_argument("--key", required=True, help="file holding a private JWK (from `keys generate`)")
    token.add_argument("--iss", required=True)
    token.add_argument("--sub", required=True)
    token.add_argument("--aud", required=True)
    token.add_argument("--ttl", type=int, default=120)

    grants = verbs.add_parser("grants", help="list or revoke a Brand user's delegation grants (§5)")
    grant_verbs = grants.add_subparsers(dest="grants_verb", required=True)
    for name, text in (("list", "print the user's live grants"), ("revoke", "end the user's grants now")):
        grant_verb = grant_verbs.add_parser(name, help=text)
        grant_verb.add_argument("--config", required=True, help="path of the gateway YAML (its cache.url)")
        grant_verb.add_argument("--brand", required=True)
        grant_verb.add_argument("--user", required=True, help="the Brand's own user id")
        if name == "revoke":
            grant_verb.add_argument("--grant", default=None, help="only this grant id (default: all of them)")

    demo = verbs.add_parser("demo", help="gateway + sample bot + demo personal agent in one process")
    demo.add_argument("--config", default=None, help="demo YAML (default: config/demo.yaml of this checkout)")
    demo.add_argument("--port", type=int, default=8080)
    demo.add_argument("--bot-port", type=int, default=9100)
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
        lines.append(f"      bot: {brand.upstream.url}")
        if brand.delegation is not None:
            lines.append(f"      delegation (§5): login {brand.delegation.login.url}")
            lines.extend(f"        {scope}: {text}" for scope, text in brand.delegation.scopes.items())
    return "\n".join(lines)


def _load(path: str) -> GatewayConfig:
    try:
        return load_config_file(path)
    except ConfigError as error:
        print(f"pact-gateway: invalid configuration {path}: {error}", file=sys.stderr)
        raise SystemExit(2) from None


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] not in VERBS and args_list[0].startswith("--config"):
        args_list.insert(0, "serve")
    args = _parser().parse_args(args_list)
    if args.verb in (None, "serve"):
        if args.verb is None:
            _parser().print_help(sys.stderr)
            return 2
        from gateway.serve import serve

        return serve(args.config, _load(args.config), workers=args.workers, ready_fd=args.worker_ready_fd)
    if args.verb == "check-config":
        print(_describe(_load(args.path)))
        print("configuration OK")
        return 0
    if args.verb == "keys":
        private = generate_private_jwk(args.alg)
        print(json.dumps({"private_jwk": private, "jwks": public_jwks(private)}, indent=2))
        return 0
    if args.verb == "token":
        try:
            document = json.loads(Path(args.key).read_text(encoding="utf-8"))
            private = document.get("private_jwk", document)
            print(mint_token(private, iss=args.iss, sub=args.sub, aud=args.aud, ttl=args.ttl))
        except (OSError, ValueError, KeyError) as error:
            print(f"pact-gateway token: {error}", file=sys.stderr)
            return 2
        return 0
    if args.verb == "grants":
        from gateway.grants_cli import run_grants

        return asyncio.run(
            run_grants(
                _load(args.config), args.grants_verb, args.brand, args.user, getattr(args, "grant", None)
            )
        )
    from gateway.demo import run_demo

    return asyncio.run(run_demo(args.config, port=args.port, bot_port=args.bot_port, check=args.check))
