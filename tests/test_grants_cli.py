"""``pact-gateway grants list|revoke``: an operator ends a Brand user's §5 grants on the shared store."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main
from gateway.config import GatewayConfig, load_config
from gateway.oauth.device import code_hash
from gateway.store import open_store
from gateway.store.factory import open_oauth_store
from gateway.store.oauth import DeviceAuthorization, PollOutcome, RefreshToken
from tests.support.delegation import BrandLogin, enable_delegation, new_provider_key_pem
from tests.support.gateway import base_config


def _config_file(tmp_path: Path, cache_url: str) -> tuple[Path, GatewayConfig]:
    raw: dict[str, Any] = base_config(
        "https://pa.example", "https://pa.example/jwks", "http://bot", cache_url
    )
    enable_delegation(BrandLogin(), new_provider_key_pem())(raw)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, load_config(raw, {})


async def _grant(config: GatewayConfig, user: str, grant_id: str, details: tuple[str, ...] = ()) -> None:
    """A grant made the way the token endpoint makes one: an approved device code, redeemed; with the
    RFC 9396 ``details`` approved, if any."""
    store = open_store(config.cache)
    try:
        oauth = open_oauth_store(store)
        now = time.time()
        device = code_hash(grant_id)
        owner = code_hash(f"another agent for {grant_id}")[:32]  # one live grant per (user, agent, sub)
        created = DeviceAuthorization(
            device,
            f"BCDF-{grant_id[-4:]}",
            "acme",
            "https://pa.example",
            owner,
            ("orders:read",),
            now + 600,
            5,
        )
        await oauth.create_authorization(created)
        assert await oauth.approve("acme", created, user, ("orders:read",), now, details=details)
        result = await oauth.poll(
            "acme",
            device,
            owner,
            now,
            refresh=RefreshToken(grant_id, code_hash("family"), code_hash("rt" + grant_id)),
            grant_ttl=600,
        )
        assert result.outcome is PollOutcome.ISSUED
    finally:
        await store.close()


async def test_s5_operator_lists_and_revokes_a_users_grants(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, config = _config_file(tmp_path, redis_url)
    await _grant(config, "jane-4471", "a2agrant_one_HJKL")
    await _grant(config, "jane-4471", "a2agrant_two_MNPQ")
    await _grant(config, "someone-else", "a2agrant_six_RSTV")
    base = ["--config", str(path), "--brand", "acme", "--user", "jane-4471"]
    assert await _run(["grants", "list", *base]) == 0
    listed = capsys.readouterr().out
    assert "a2agrant_one_HJKL" in listed
    assert "a2agrant_two_MNPQ" in listed
    assert "2 live grant(s)" in listed
    assert "a2agrant_six_RSTV" not in listed
    assert await _run(["grants", "revoke", *base, "--grant", "a2agrant_one_HJKL"]) == 0
    assert "revoked a2agrant_one_HJKL" in capsys.readouterr().out
    assert await _run(["grants", "list", *base]) == 0
    assert "1 live grant(s)" in capsys.readouterr().out
    assert await _run(["grants", "revoke", *base]) == 0
    assert "1 grant(s) revoked" in capsys.readouterr().out
    other = ["--config", str(path), "--brand", "acme", "--user", "someone-else"]
    assert await _run(["grants", "list", *other]) == 0
    assert "1 live grant(s)" in capsys.readouterr().out


async def test_rfc9396_grants_list_shows_each_grants_authorization_details(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path, config = _config_file(tmp_path, redis_url)
    detail = '{"identifier":"A-10001","type":"https://acme.example/rar/order"}'
    await _grant(config, "jane-4471", "a2agrant_one_HJKL", details=(detail,))
    await _grant(config, "jane-4471", "a2agrant_two_MNPQ")
    assert (
        await _run(["grants", "list", "--config", str(path), "--brand", "acme", "--user", "jane-4471"]) == 0
    )
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["a2agrant_one_HJKL"].endswith(f"  details=[{detail}]")
    assert "details=" not in lines["a2agrant_two_MNPQ"]


async def test_rfc8628_revoking_a_users_grants_denies_what_they_approved_and_no_poll_redeemed(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 18 F4: without this the agent's next poll minted a fresh grant after the revocation."""
    path, config = _config_file(tmp_path, redis_url)
    await _grant(config, "jane-4471", "a2agrant_one_HJKL")
    store = open_store(config.cache)
    try:
        oauth = open_oauth_store(store)
        now = time.time()
        waiting = []
        for n, device in enumerate(code_hash(f"waiting-{n}") for n in range(2)):
            owner = code_hash(f"agent {n}")[:32]
            authorization = DeviceAuthorization(
                device,
                f"WXYZ-BCD{'FG'[n]}",
                "acme",
                "https://pa.example",
                owner,
                ("orders:read",),
                now + 600,
                5,
            )
            assert await oauth.create_authorization(authorization)
            waiting.append(authorization)
        assert await oauth.approve("acme", waiting[0], "jane-4471", ("orders:read",), now)
        base = ["--config", str(path), "--brand", "acme", "--user", "jane-4471"]
        assert await _run(["grants", "revoke", *base]) == 0
        out = capsys.readouterr().out
        assert "1 grant(s) revoked" in out
        assert "1 approved authorization(s) not yet redeemed denied" in out
        polled = []
        for n, waited in enumerate(waiting):
            refresh = RefreshToken(f"a2agrant_new_{n}", code_hash("family"), code_hash(f"rt-new-{n}"))
            device, owner = waited.device_hash, waited.owner_digest
            result = await oauth.poll("acme", device, owner, time.time(), refresh=refresh, grant_ttl=600)
            polled.append(result.outcome)
        # RFC 8628 §3.5: the approved one is refused; the pending one was no one's, and still waits.
        assert polled == [PollOutcome.ACCESS_DENIED, PollOutcome.AUTHORIZATION_PENDING]
        assert await oauth.grants_of_user("acme", "jane-4471", time.time()) == []
    finally:
        await store.close()


async def test_grants_refuses_memory_cache_and_unknown_brand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _config_file(tmp_path, "memory://")
    assert await _run(["grants", "list", "--config", str(path), "--brand", "acme", "--user", "u"]) == 2
    assert "memory://" in capsys.readouterr().err
    assert await _run(["grants", "list", "--config", str(path), "--brand", "globex", "--user", "u"]) == 2
    assert "no Brand 'globex' with delegation" in capsys.readouterr().err


async def _run(argv: list[str]) -> int:
    """``main`` runs its own event loop, so it runs in a thread beside the test's."""
    return await asyncio.to_thread(main, argv)
