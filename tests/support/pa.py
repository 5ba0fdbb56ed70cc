"""Shared personal-agent (§3) test fixtures: signing keys, token minting and a fake JWKS server.

Registered for the whole suite in ``tests/conftest.py``. Plain helpers (:class:`PAKey`,
:class:`FakeJwksServer`, :class:`ManualClock`, :func:`allowlist`, :func:`jwks_policy`,
:func:`refusal`) can be used directly; the fixtures at the bottom hand out ready-made instances.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import math
import secrets
import time
from collections.abc import AsyncIterator, Mapping
from enum import Enum
from types import TracebackType
from typing import Any, Literal

import aiohttp
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from gateway.auth.jwks import make_fetch_session
from gateway.auth.pa_jwt import AuthFailure, PAVerifier
from gateway.config import JwksPolicy, PersonalAgentConfig, PersonalAgentsConfig
from tests.support.secrets_scan import remember

__all__ = [
    "OMIT",
    "PA_AUDIENCE",
    "FailureMode",
    "FakeJwksServer",
    "ManualClock",
    "Omit",
    "PAKey",
    "allowlist",
    "es256_key",
    "fetch_session",
    "huge_exponent_key",
    "jwks_policy",
    "jwks_server",
    "pa_agents",
    "pa_audience",
    "pa_issuer",
    "refusal",
    "rs256_key",
]

PA_AUDIENCE = "pact-gateway.test"


class Omit(Enum):
    """Sentinel for :meth:`PAKey.mint`: leave this claim or header out entirely."""

    OMIT = "omit"


OMIT = Omit.OMIT


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _json(value: Mapping[str, object]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class PAKey:
    """A personal agent's signing key: ES256 (P-256) or RS256 (2048-bit RSA by default)."""

    def __init__(
        self, alg: Literal["ES256", "RS256"] = "ES256", *, kid: str | None = None, bits: int = 2048
    ) -> None:
        self.alg = alg
        self.kid = kid if kid is not None else f"{alg.lower()}-{secrets.token_hex(4)}"
        self.private_key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
        if alg == "ES256":
            self.private_key = ec.generate_private_key(ec.SECP256R1())
        else:
            self.private_key = rsa.generate_private_key(public_exponent=65537, key_size=bits)

    @classmethod
    def es256(cls, kid: str | None = None) -> PAKey:
        return cls("ES256", kid=kid)

    @classmethod
    def rs256(cls, kid: str | None = None, bits: int = 2048) -> PAKey:
        return cls("RS256", kid=kid, bits=bits)

    def _jwk(self, *, private: bool) -> dict[str, Any]:
        key = self.private_key
        if isinstance(key, ec.EllipticCurvePrivateKey):
            jwk = ECAlgorithm.to_jwk(key if private else key.public_key(), as_dict=True)
        else:
            jwk = RSAAlgorithm.to_jwk(key if private else key.public_key(), as_dict=True)
        return {**jwk, "kid": self.kid, "alg": self.alg, "use": "sig"}

    def public_jwk(self) -> dict[str, Any]:
        return self._jwk(private=False)

    def private_jwk(self) -> dict[str, Any]:
        return self._jwk(private=True)

    def public_pem(self) -> bytes:
        return self.private_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def mint(
        self,
        iss: str | Omit,
        sub: object,
        aud: object,
        *,
        iat: float | Omit | None = None,
        exp: float | Omit | None = None,
        ttl: float = 120,
        extra_claims: Mapping[str, object] | None = None,
        extra_headers: Mapping[str, object] | None = None,
        alg: str | None = None,
    ) -> str:
        """A compact JWS, built by hand so deliberately bad tokens are possible.

        ``OMIT`` leaves a claim (or, in ``extra_headers``, a header such as ``kid``) out;
        ``iat`` defaults to now and ``exp`` to ``iat + ttl``. ``alg`` only changes the header,
        except ``none`` (no signature) and ``HS*`` (HMAC with this key's public PEM as the
        secret: the classic algorithm-confusion forgery); otherwise this key signs as usual.
        """
        issued = int(time.time()) if iat is None else iat
        expires = (issued if not isinstance(issued, Omit) else time.time()) + ttl if exp is None else exp
        claims: dict[str, object] = {"iss": iss, "sub": sub, "aud": aud, "iat": issued, "exp": expires}
        claims["jti"] = secrets.token_hex(8)
        claims.update(extra_claims or {})
        header: dict[str, object] = {"alg": alg or self.alg, "typ": "JWT", "kid": self.kid}
        header.update(extra_headers or {})
        signing_input = ".".join(
            _b64url(_json({k: v for k, v in part.items() if not isinstance(v, Omit)}))
            for part in (header, claims)
        )
        token = f"{signing_input}.{_b64url(self._sign(signing_input.encode(), str(header.get('alg'))))}"
        remember("a JWT signed by a test key (PAKey.mint)", token)
        return token

    def _sign(self, message: bytes, alg: str) -> bytes:
        if alg == "none":
            return b""
        if alg.startswith("HS"):
            return hmac.new(self.public_pem(), message, hashlib.sha256).digest()
        if isinstance(self.private_key, ec.EllipticCurvePrivateKey):
            return ECAlgorithm(ECAlgorithm.SHA256).sign(message, self.private_key)
        return RSAAlgorithm(RSAAlgorithm.SHA256).sign(message, self.private_key)


def huge_exponent_key(kid: str | None = None) -> PAKey:
    """An RS256 key (2048 bits) whose public exponent is a 2040-bit number instead of 65537.

    Valid RSA, and OpenSSL verifies with it, at tens of times the cost of a normal key (issue 12 row 4).
    """
    key = PAKey.rs256(kid=kid)
    assert isinstance(key.private_key, rsa.RSAPrivateKey)
    numbers = key.private_key.private_numbers()
    p, q = numbers.p, numbers.q
    phi = (p - 1) * (q - 1)
    e = 0
    while math.gcd(e, phi) != 1:
        e = secrets.randbits(2040) | (1 << 2039) | 1
    d = pow(e, -1, phi)
    public = rsa.RSAPublicNumbers(e, p * q)
    crt = (rsa.rsa_crt_dmp1(d, p), rsa.rsa_crt_dmq1(d, q), rsa.rsa_crt_iqmp(p, q))
    key.private_key = rsa.RSAPrivateNumbers(p, q, d, *crt, public).private_key()
    return key


class ManualClock:
    """An injectable clock (wall or monotonic) that only moves when a test says so."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


FailureMode = Literal["error", "hang", "redirect", "oversize", "oversize_chunked", "not_json", "not_object"]

_HANG_LIMIT = 1.0  # a hanging response gives up after this long (or when the server closes)


class FakeJwksServer:
    """A real aiohttp server on 127.0.0.1 serving a mutable JWKS and an OIDC discovery document.

    ``/jwks.json`` serves ``keys``; ``/.well-known/openid-configuration`` names it. Set
    ``failure`` (or ``discovery_failure``) to make a route misbehave, ``cache_control`` to send
    that header, ``delay`` to slow every answer. ``fetch_count`` / ``discovery_count`` count
    requests, including failed ones.
    """

    def __init__(self) -> None:
        self.keys: list[Any] = []  # JWKs as published; tests may add junk entries
        self.cache_control: str | None = None
        self.failure: FailureMode | None = None
        self.discovery_failure: FailureMode | None = None
        self.discovery_document: dict[str, Any] | None = None
        self.delay = 0.0
        self.oversize_bytes = 70_000
        self.fetch_count = 0
        self.discovery_count = 0
        self._runner: web.AppRunner | None = None
        self._release = asyncio.Event()
        self._port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    @property
    def issuer(self) -> str:
        return self.base_url

    @property
    def jwks_uri(self) -> str:
        return f"{self.base_url}/jwks.json"

    def set_keys(self, *keys: PAKey | Mapping[str, Any]) -> None:
        """Publish exactly these keys (a rotation when they differ from the last set)."""
        self.keys = [key.public_jwk() if isinstance(key, PAKey) else dict(key) for key in keys]

    def add_key(self, key: PAKey | Mapping[str, Any]) -> None:
        self.keys.append(key.public_jwk() if isinstance(key, PAKey) else dict(key))

    def fail(self, mode: FailureMode | None) -> None:
        """Make ``/jwks.json`` misbehave from now on (``None`` heals it)."""
        self.failure = mode

    async def start(self) -> FakeJwksServer:
        app = web.Application()
        app.router.add_get("/jwks.json", self._jwks)
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = int(self._runner.addresses[0][1])
        return self

    async def close(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeJwksServer:
        return await self.start()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def _jwks(self, request: web.Request) -> web.StreamResponse:
        self.fetch_count += 1
        return await self._answer(request, self.failure, {"keys": self.keys})

    async def _discovery(self, request: web.Request) -> web.StreamResponse:
        self.discovery_count += 1
        document = self.discovery_document or {"issuer": self.issuer, "jwks_uri": self.jwks_uri}
        return await self._answer(request, self.discovery_failure, document)

    async def _answer(
        self, request: web.Request, mode: FailureMode | None, document: Mapping[str, Any]
    ) -> web.StreamResponse:
        if self.delay:
            await asyncio.sleep(self.delay)
        headers = {"Cache-Control": self.cache_control} if self.cache_control else {}
        if mode == "redirect" and "followed" not in request.query:
            raise web.HTTPFound(location=f"{request.path}?followed=1")
        if mode == "error":
            return web.Response(status=500, text="boom")
        if mode == "hang":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._release.wait(), timeout=_HANG_LIMIT)
        if mode == "not_json":
            return web.Response(text="<html>not json</html>", headers=headers)
        if mode == "not_object":
            return web.json_response([document], headers=headers)
        if mode == "oversize":
            return web.json_response({**document, "pad": "x" * self.oversize_bytes}, headers=headers)
        if mode == "oversize_chunked":
            return await self._stream_oversize(request, document, headers)
        return web.json_response(dict(document), headers=headers)

    async def _stream_oversize(
        self, request: web.Request, document: Mapping[str, Any], headers: Mapping[str, str]
    ) -> web.StreamResponse:
        """An oversize body without Content-Length, so the client must count as it reads."""
        response = web.StreamResponse(headers={**headers, "Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            await response.write(_json(document)[:-1] + b',"pad":"')
            remaining = self.oversize_bytes
            while remaining > 0:
                await response.write(b"x" * min(8192, remaining))
                remaining -= 8192
            await response.write(b'"}')
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client stopped reading at its cap, as it should
        return response


def jwks_policy(**overrides: Any) -> JwksPolicy:
    """Test bounds: the defaults, with a short timeout so hangs end quickly."""
    return JwksPolicy(**{"timeout": 0.3, **overrides})


def allowlist(
    issuer: str,
    jwks_uri: str | None,
    *,
    enabled: bool = True,
    jwks: Mapping[str, Any] | None = None,
    policy: Literal["allowlist", "open"] = "allowlist",
    jwks_settings: JwksPolicy | None = None,
) -> PersonalAgentsConfig:
    """A registry with one personal agent (§3.1)."""
    agent = PersonalAgentConfig(issuer=issuer, jwks_uri=jwks_uri, enabled=enabled, jwks=jwks)
    return PersonalAgentsConfig(policy=policy, registered=(agent,), jwks=jwks_settings or jwks_policy())


async def refusal(verifier: PAVerifier, token: str) -> str:
    """The §3.4 reason ``verifier`` refuses ``token`` with; the test fails if it accepts it."""
    with pytest.raises(AuthFailure) as failure:
        await verifier.verify(token)
    return failure.value.reason


@pytest.fixture
def es256_key() -> PAKey:
    return PAKey.es256()


@pytest.fixture
def rs256_key() -> PAKey:
    return PAKey.rs256()


@pytest.fixture
async def jwks_server(es256_key: PAKey) -> AsyncIterator[FakeJwksServer]:
    """A started :class:`FakeJwksServer` publishing ``es256_key``."""
    async with FakeJwksServer() as server:
        server.set_keys(es256_key)
        yield server


@pytest.fixture
def pa_issuer(jwks_server: FakeJwksServer) -> str:
    """The fake server's base URL, usable as a personal agent's ``iss``."""
    return jwks_server.issuer


@pytest.fixture
def pa_audience() -> str:
    return PA_AUDIENCE


@pytest.fixture
def pa_agents(jwks_server: FakeJwksServer) -> PersonalAgentsConfig:
    """An allowlist registering the fake server's issuer and JWKS."""
    return allowlist(jwks_server.issuer, jwks_server.jwks_uri)


@pytest.fixture
async def fetch_session() -> AsyncIterator[aiohttp.ClientSession]:
    """A key-fetch session as the app makes it, in development mode (the fake server is loopback)."""
    session = make_fetch_session(jwks_policy(), development=True)
    yield session
    await session.close()
