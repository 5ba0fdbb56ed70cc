"""Fixtures of the authentication tests: many open-policy issuers, and counted signature checks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import jwt
import pytest

from gateway.auth.signature import SIGNATURE_ONLY
from tests.support.issuers import IssuerFarm


@pytest.fixture
async def issuer_farm() -> AsyncIterator[IssuerFarm]:
    """A started :class:`IssuerFarm` publishing no keys yet."""
    async with IssuerFarm() as farm:
        yield farm


class CountedSignatures:
    """The one signature-only PyJWT a verifier uses, counting each ``decode`` (a signature check).

    Wraps the real object, so every check still runs: cost is asserted as a number of checks
    (and of key fetches), never as a time, on this shared noisy machine.
    """

    def __init__(self, inner: jwt.PyJWT) -> None:
        self._inner = inner
        self.count = 0

    def decode(self, *args: Any, **kwargs: Any) -> Any:
        self.count += 1
        return self._inner.decode(*args, **kwargs)


@pytest.fixture
def pa_signature_checks(monkeypatch: pytest.MonkeyPatch) -> CountedSignatures:
    """Signature checks of personal-agent JWTs (:class:`gateway.auth.pa_jwt.PAVerifier`)."""
    counted = CountedSignatures(SIGNATURE_ONLY)
    monkeypatch.setattr("gateway.auth.pa_jwt.SIGNATURE_ONLY", counted)
    return counted


@pytest.fixture
def delegation_signature_checks(monkeypatch: pytest.MonkeyPatch) -> CountedSignatures:
    """Signature checks of §5.4 delegation tokens (:func:`gateway.oauth.access_token.verify_access_token`)."""
    counted = CountedSignatures(SIGNATURE_ONLY)
    monkeypatch.setattr("gateway.oauth.access_token.SIGNATURE_ONLY", counted)
    return counted
