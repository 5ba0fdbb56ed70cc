"""The address guard on key and discovery fetches (conformance notes: HTTPS only, no private or
loopback addresses outside explicit development settings)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from gateway.auth.jwks import JwksCache, make_fetch_session
from gateway.auth.pa_jwt import AuthFailure
from gateway.auth.ssrf import (
    BlockedTarget,
    PublicAddressResolver,
    check_fetch_url,
    is_forbidden_address,
    resolve_public,
)
from gateway.config import JwksPolicy
from tests.support.pa import FakeJwksServer, PAKey, jwks_policy

AddrInfo = list[tuple[int, int, int, str, tuple[Any, ...]]]


@pytest.fixture
async def guarded_session() -> AsyncIterator[aiohttp.ClientSession]:
    session = make_fetch_session(jwks_policy(), development=False)
    yield session
    await session.close()


def fake_getaddrinfo(monkeypatch: pytest.MonkeyPatch, *answers: list[str]) -> list[str]:
    """Make the running loop's getaddrinfo return ``answers`` in turn (the last one repeats)."""
    asked: list[str] = []

    async def getaddrinfo(host: str, port: int, **_: Any) -> AddrInfo:
        asked.append(host)
        addresses = answers[min(len(asked), len(answers)) - 1]
        return [
            (
                socket.AF_INET6 if ":" in address else socket.AF_INET,
                socket.SOCK_STREAM,
                6,
                "",
                (address, port, 0, 0) if ":" in address else (address, port),
            )
            for address in addresses
        ]

    monkeypatch.setattr(asyncio.get_running_loop(), "getaddrinfo", getaddrinfo)
    return asked


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "10.0.0.1",
        "10.255.1.2",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",  # cloud metadata
        "100.64.0.1",  # carrier-grade NAT
        "0.0.0.0",  # noqa: S104 - the point of the test
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
    ],
)
def test_guard_forbids_private_loopback_link_local_and_reserved(address: str) -> None:
    assert is_forbidden_address(address)


@pytest.mark.parametrize("address", ["93.184.216.34", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_guard_allows_public_addresses(address: str) -> None:
    assert not is_forbidden_address(address)


@pytest.mark.parametrize(
    "url",
    [
        "http://pa.example.com/jwks.json",  # §3.1: jwksUri is HTTPS
        "ftp://pa.example.com/jwks.json",
        "file:///etc/passwd",
        "https://127.0.0.1/jwks.json",
        "https://10.0.0.1/jwks.json",
        "https://169.254.169.254/latest/meta-data",
        "https://[::1]:8443/jwks.json",
        "https://[::ffff:127.0.0.1]/jwks.json",
        "https://user:secret@pa.example.com/jwks.json",
        "/relative/jwks.json",
        "https:///no-host",
    ],
)
def test_guard_refuses_url_outside_development(url: str) -> None:
    with pytest.raises(BlockedTarget):
        check_fetch_url(url, development=False)


def test_guard_allows_public_https_and_anything_http_in_development() -> None:
    assert check_fetch_url("https://pa.example.com/jwks.json", development=False).host == "pa.example.com"
    assert check_fetch_url("http://127.0.0.1:8080/jwks.json", development=True).port == 8080
    with pytest.raises(BlockedTarget):
        check_fetch_url("ftp://127.0.0.1/jwks.json", development=True)


async def test_guard_refuses_a_name_if_any_address_is_private(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_getaddrinfo(monkeypatch, ["93.184.216.34", "10.0.0.5"])
    with pytest.raises(BlockedTarget):
        await resolve_public("mixed.example", 443)


async def test_guard_passes_a_name_with_only_public_addresses(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_getaddrinfo(monkeypatch, ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"])
    results = await resolve_public("public.example", 443)
    assert [r["host"] for r in results] == ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]
    assert all(r["port"] == 443 and r["hostname"] == "public.example" for r in results)


async def test_guard_refuses_localhost_by_real_resolution() -> None:
    with pytest.raises(BlockedTarget):
        await PublicAddressResolver().resolve("localhost", 443, socket.AF_UNSPEC)


async def test_fetch_session_resolver_refuses_private_names_at_connect_time(
    guarded_session: aiohttp.ClientSession, jwks_server: FakeJwksServer
) -> None:
    """make_fetch_session pins connections to checked addresses: aiohttp never sees a private one."""
    url = jwks_server.jwks_uri.replace("http://127.0.0.1", "https://localhost")
    with pytest.raises(aiohttp.ClientConnectorError) as error:
        await guarded_session.get(url)
    assert isinstance(error.value.os_error, BlockedTarget)
    assert jwks_server.fetch_count == 0


def jwks_cache(session: aiohttp.ClientSession, fetches: list[tuple[str, bool]]) -> JwksCache:
    return JwksCache(
        session, JwksPolicy(timeout=0.3), development=False, on_fetch=lambda i, ok: fetches.append((i, ok))
    )


@pytest.mark.parametrize(
    "make_url",
    [
        lambda port: f"https://127.0.0.1:{port}/jwks.json",
        lambda port: f"https://[::1]:{port}/jwks.json",
        lambda port: f"https://localhost:{port}/jwks.json",
        lambda port: "https://10.1.2.3/jwks.json",
        lambda port: "https://169.254.169.254/jwks.json",
        lambda port: f"http://pa.example.com:{port}/jwks.json",
    ],
)
async def test_jwks_cache_refuses_private_targets_outside_development(
    guarded_session: aiohttp.ClientSession,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    make_url: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    fetches: list[tuple[str, bool]] = []
    jwks = jwks_cache(guarded_session, fetches)
    port = jwks_server.jwks_uri.split(":")[2].split("/")[0]
    with pytest.raises(AuthFailure) as failure:
        await jwks.key_for("https://pa.example.com", make_url(port), es256_key.kid, "ES256")
    assert failure.value.reason == "jwks_unavailable"
    assert fetches == [("https://pa.example.com", False)]
    assert "address guard" in caplog.text
    assert jwks_server.fetch_count == 0


async def test_jwks_cache_guard_holds_through_a_dns_rebind(
    guarded_session: aiohttp.ClientSession,
    jwks_server: FakeJwksServer,
    es256_key: PAKey,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The name looks public when checked and turns loopback when connected: still refused."""
    asked = fake_getaddrinfo(monkeypatch, ["93.184.216.34"], ["127.0.0.1"])
    port = jwks_server.jwks_uri.split(":")[2].split("/")[0]
    fetches: list[tuple[str, bool]] = []
    jwks = jwks_cache(guarded_session, fetches)
    with pytest.raises(AuthFailure) as failure:
        await jwks.key_for(
            "https://pa.example.com", f"https://rebind.example:{port}/jwks.json", es256_key.kid, "ES256"
        )
    assert failure.value.reason == "jwks_unavailable"
    assert asked == ["rebind.example", "rebind.example"]  # checked, then re-checked at connect time
    assert "address guard" in caplog.text
    assert jwks_server.fetch_count == 0
