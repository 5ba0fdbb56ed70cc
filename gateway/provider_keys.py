"""The Provider's signing keys (§5.1 ``jwks_uri``, §5.4, §5.6): parsed once, the first signs, all published.

Several keys at once is how keys rotate: publish the new one beside the old, move it first
(it signs from then on), and drop the old one once every token it signed has expired.
A key is PEM (PKCS#8 or traditional) or a private JWK; its ``kid`` is the JWK's own or else
its RFC 7638 thumbprint, so the same key always gets the same ``kid`` on every replica.
The algorithm is fixed by the key (P-256 → ES256, RSA ≥ 2048 bits → RS256) and is the only
one a token signed with it is ever checked with.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import jwt
import orjson
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

__all__ = ["ProviderKeys", "SigningBatch", "SigningKey", "parse_signing_key"]

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey

MIN_RSA_BITS = 2048


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One private key with the ``kid`` and ``alg`` it signs under and the public JWK it is published as."""

    kid: str
    alg: str
    private_key: PrivateKey = field(repr=False, compare=False)
    public_jwk: Mapping[str, Any] = field(compare=False)

    @property
    def public_key(self) -> PublicKey:
        return self.private_key.public_key()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


_URL_SAFE: Final = bytes.maketrans(b"+/", b"-_")


def _b64url_bytes(data: bytes) -> bytes:
    """RFC 7515 base64url, no padding, as bytes: ``binascii`` directly, a copy fewer than ``base64``."""
    return binascii.b2a_base64(data, newline=False).translate(_URL_SAFE).rstrip(b"=")


def _raw_signer(key: PrivateKey) -> Callable[[bytes], bytes]:
    """The JWS signature over a signing input, with the key's algorithm objects made once.

    Decided once per key rather than per call: an ``isinstance`` against ``cryptography``'s
    abstract key classes and a fresh ``ECDSA(SHA256())`` cost a few microseconds each, and
    every delegated reply signs (§5.6).
    """
    if isinstance(key, ec.EllipticCurvePrivateKey):
        ecdsa = ec.ECDSA(hashes.SHA256())

        def es256(signing_input: bytes) -> bytes:
            # JWS ES256 is R || S, 32 bytes each (RFC 7518 §3.4), not the DER that OpenSSL returns.
            r, s = decode_dss_signature(key.sign(signing_input, ecdsa))
            return r.to_bytes(32, "big") + s.to_bytes(32, "big")

        return es256
    pkcs1 = padding.PKCS1v15()
    sha256 = hashes.SHA256()

    def rs256(signing_input: bytes) -> bytes:
        return key.sign(signing_input, pkcs1, sha256)

    return rs256


def _thumbprint(jwk: Mapping[str, Any]) -> str:
    """RFC 7638: SHA-256 over the required members in lexicographic order, no white space."""
    required = ("crv", "kty", "x", "y") if jwk["kty"] == "EC" else ("e", "kty", "n")
    canonical = json.dumps({name: jwk[name] for name in required}, separators=(",", ":"), sort_keys=True)
    return _b64url(hashlib.sha256(canonical.encode()).digest())


def _alg_of(key: PrivateKey) -> str:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise ValueError(f"EC keys must be on P-256 for ES256, not {key.curve.name}")
        return "ES256"
    if key.key_size < MIN_RSA_BITS:
        raise ValueError(f"RSA keys must have at least {MIN_RSA_BITS} bits, this one has {key.key_size}")
    return "RS256"


def _public_jwk(key: PrivateKey) -> dict[str, Any]:
    public = key.public_key()
    if isinstance(public, ec.EllipticCurvePublicKey):
        return dict(ECAlgorithm.to_jwk(public, as_dict=True))
    return dict(RSAAlgorithm.to_jwk(public, as_dict=True))


def parse_signing_key(material: str) -> SigningKey:
    """A PEM private key or a private JWK (JSON) as a :class:`SigningKey`; ``ValueError`` says why not."""
    text = material.strip()
    declared_kid: str | None = None
    declared_alg: str | None = None
    key: Any
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(text.encode(), password=None)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"not a readable unencrypted PEM private key ({exc})") from None
    elif text.startswith("{"):
        try:
            document = json.loads(text)
        except ValueError:
            raise ValueError("not valid JSON") from None
        if not isinstance(document, dict):
            raise ValueError("a JWK must be a JSON object")
        # `pact-gateway keys generate` prints {"private_jwk": …, "jwks": …}: accept it as printed.
        jwk = document.get("private_jwk", document)
        if not isinstance(jwk, dict) or "d" not in jwk:
            raise ValueError("a JWK with its private member 'd' is required (this looks like a public key)")
        declared_kid = jwk.get("kid") if isinstance(jwk.get("kid"), str) else None
        declared_alg = jwk.get("alg") if isinstance(jwk.get("alg"), str) else None
        try:
            # Without its `alg`, so a mismatch is reported as one below rather than as a key error.
            key = jwt.PyJWK.from_dict({name: value for name, value in jwk.items() if name != "alg"}).key
        except jwt.PyJWTError as exc:
            raise ValueError(f"not a usable JWK ({exc})") from None
    else:
        raise ValueError("expected a PEM private key ('-----BEGIN …') or a private JWK ('{…}')")
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ValueError("only EC (P-256) and RSA private keys can sign (ES256, RS256)")
    alg = _alg_of(key)
    if declared_alg is not None and declared_alg != alg:
        raise ValueError(f"the JWK says alg {declared_alg} but the key signs {alg}")
    public = _public_jwk(key)
    kid = declared_kid or _thumbprint(public)
    return SigningKey(
        kid=kid, alg=alg, private_key=key, public_jwk={**public, "kid": kid, "alg": alg, "use": "sig"}
    )


class ProviderKeys:
    """The Provider's keys: :meth:`sign` with the first, :meth:`find` any to verify, :meth:`jwks` all."""

    def __init__(self, keys: Sequence[SigningKey]) -> None:
        if not keys:
            raise ValueError("at least one signing key is needed")
        self._keys = tuple(keys)
        self._by_kid = {key.kid: key for key in self._keys}
        self._jwks = orjson.dumps({"keys": [dict(key.public_jwk) for key in self._keys]})
        # The encoded protected header per ``typ`` (a handful: access tokens and receipts), with
        # its "." already appended: the signing input's first part.
        self._headers: dict[str, bytes] = {}
        self._signature = _raw_signer(self._keys[0].private_key)
        self.batch = SigningBatch(self)
        """Where the event loop's hot path asks for its signatures (§5.6 receipts)."""

    @property
    def current(self) -> SigningKey:
        return self._keys[0]

    def sign(self, payload: bytes, typ: str) -> str:
        """A compact JWS over exactly ``payload`` (§5.6: "payload exactly the claims JSON").

        RFC 7515 by hand on ``cryptography``: every delegated reply signs a receipt, so this is
        on the hot path, and PyJWT's ``encode`` re-serializes the same header on each call and
        converts the signature through extra layers (it costs half again as much). The header of
        each ``typ`` is encoded once, and the key's signing objects are made once (see
        :func:`_raw_signer`); the result is checked against PyJWT in the tests.
        """
        header = self._headers.get(typ)
        if header is None:
            key = self._keys[0]
            header = self._headers[typ] = (
                _b64url_bytes(orjson.dumps({"alg": key.alg, "kid": key.kid, "typ": typ})) + b"."
            )
        signing_input = header + _b64url_bytes(payload)
        return (signing_input + b"." + _b64url_bytes(self._signature(signing_input))).decode()

    def find(self, kid: str) -> SigningKey | None:
        return self._by_kid.get(kid)

    def jwks_bytes(self) -> bytes:
        """The public JWKS, serialized once: what ``jwks_uri`` serves."""
        return self._jwks

    def jwks(self) -> dict[str, Any]:
        doc: dict[str, Any] = orjson.loads(self._jwks)
        return doc


class SigningBatch:
    """Signatures asked for in one pass of the event loop, made together in one callback just after.

    Every delegated reply signs a receipt (§5.6). Signed one at a time between the other work of
    a turn, an ES256 signature costs several times what it costs in a loop, because OpenSSL's
    P-256 tables have left the CPU's caches since the previous one; turns whose bot replies
    arrive together have their receipts signed back to back, so all but the first find the tables
    warm. No thread: ``cryptography`` releases the GIL while it signs, but on a machine whose
    cores are all busy (a worker per core, the bot, the load) a worker thread only adds the
    hand-off (measured by a bench tool since folded out, docs/performance.md). The batch holds only the
    signatures of turns already in flight, so it is bounded by ``upstream.max_concurrency``.
    """

    def __init__(self, keys: ProviderKeys) -> None:
        self._keys = keys
        self._pending: list[tuple[bytes, str, asyncio.Future[str]]] = []

    def __len__(self) -> int:
        """Signatures asked for and not made yet."""
        return len(self._pending)

    def sign(self, payload: bytes, typ: str) -> asyncio.Future[str]:
        """The compact JWS :meth:`ProviderKeys.sign` makes, once this pass's batch has been signed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[str] = loop.create_future()
        if not self._pending:
            loop.call_soon(self._sign_pending)
        self._pending.append((payload, typ, future))
        return future

    def _sign_pending(self) -> None:
        pending, self._pending = self._pending, []
        for payload, typ, future in pending:
            if future.cancelled():
                continue  # its turn was cancelled while waiting: nobody will read this signature
            # A failure belongs to the turn that asked (raised where it awaits), not to this callback.
            try:
                future.set_result(self._keys.sign(payload, typ))
            except Exception as exc:
                future.set_exception(exc)
