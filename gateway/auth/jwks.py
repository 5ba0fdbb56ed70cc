"""Personal agents' key sets (§3.1 ``jwksUri``, §3.2 signature check): fetched, parsed once, cached.

Fetching follows the peers' practice in the conformance notes: ``Cache-Control`` honoured
within bounds, one fetch in flight per issuer, an unknown ``kid`` refetches at most once per
cool-down, the last good keys survive a failed refetch, a timeout, a size cap, no redirects
and the :mod:`gateway.auth.ssrf` guard. Everything is aiohttp: PyJWT's ``PyJWKClient`` would
block the event loop. Keys are parsed into ``cryptography`` objects once per fetch, so the
request path only looks them up.

Under the ``open`` policy anyone can name an issuer, so those issuers are kept apart: their
keys live in a partition of their own, bounded and least-recently-used, which can never push
out a registered personal agent's keys; and their fetches (OIDC discovery and key sets alike)
draw on one process-wide :class:`FetchBudget`, so a flood of invented issuers buys a bounded
number of fetches per second, however many tokens it sends.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import aiohttp
import jwt
import orjson
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1, EllipticCurvePublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from gateway.auth.ssrf import BlockedTarget, PublicAddressResolver, check_fetch_url, resolve_public
from gateway.config import JwksPolicy
from gateway.protocol.claims import AuthFailure
from gateway.store.gcra import Rule, gcra, now_us

__all__ = [
    "FetchBudget",
    "FetchError",
    "JsonFetcher",
    "JwksCache",
    "KeySet",
    "ParsedKey",
    "PublicKey",
    "RefreshingStore",
    "log_safe",
    "make_fetch_session",
    "parse_jwk",
    "parse_jwks",
    "ttl_from_cache_control",
]

_log = logging.getLogger(__name__)

PublicKey = EllipticCurvePublicKey | RSAPublicKey
T = TypeVar("T")

MIN_RSA_BITS = 2048  # below this a key is refused as weak (NIST SP 800-131A)
MAX_RSA_BITS = 8192  # above this a key is skipped: verifying with it is a CPU cost anyone could impose
# A verification costs one modular exponentiation by ``e``: 65537 (17 bits) is what every signer
# publishes, and a 2048-bit ``e`` made each failed verification tens of times dearer (10.7 ms against
# 0.17 ms in the review, issue 12 row 4). RFC 8017 sets no bound; up to 2**32 covers every standard
# choice (3, 17, 65537) at a normal cost.
MAX_RSA_EXPONENT = 2**32


def log_safe(value: str) -> str:
    """A caller-chosen string (an ``iss``) shortened and quoted so it cannot forge log lines."""
    return repr(value[:120])


def make_fetch_session(policy: JwksPolicy, development: bool) -> aiohttp.ClientSession:
    """The one session key and discovery fetches use; the app owns and closes it.

    Outside development its connector resolves names through :class:`PublicAddressResolver`,
    so the guard also holds at connect time. No cookies, no proxy from the environment.
    """
    connector = aiohttp.TCPConnector(
        resolver=None if development else PublicAddressResolver(),
        limit=64,
        limit_per_host=4,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=policy.timeout),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        headers={"User-Agent": "pact-gateway", "Accept": "application/json"},
    )


def ttl_from_cache_control(value: str | None, policy: JwksPolicy) -> float:
    """Seconds to keep a fetched document: ``max-age`` clamped to [min_ttl, max_ttl].

    ``policy.default_ttl`` when the header is absent, says ``no-cache``/``no-store``, or has no
    parseable ``max-age``: a key set that may not be cached at all would mean a fetch per request.
    """
    if not value:
        return policy.default_ttl
    max_age: int | None = None
    for directive in value.split(","):
        name, _, argument = directive.partition("=")
        name = name.strip().lower()
        if name in {"no-cache", "no-store"}:
            return policy.default_ttl
        if name == "max-age":
            argument = argument.strip().strip('"')
            if not (argument.isascii() and argument.isdigit()):
                return policy.default_ttl
            # Past ten digits the clamp to max_ttl decides anyway; and int() refuses a string of
            # more than 4,300 digits, which a key server (under `open`, anyone's) may send.
            max_age = int(argument) if len(argument) <= 10 else 10**10
    if max_age is None:
        return policy.default_ttl
    return min(max(float(max_age), policy.min_ttl), policy.max_ttl)


class FetchError(Exception):
    """A fetch that produced no usable document; the message is a short cause for the log."""


class FetchBudget:
    """How many fetches for ``open``-policy issuers may start: one GCRA bucket for the whole process.

    ``policy.open_fetch_rate`` fetches per second sustained, ``policy.open_fetch_burst`` at once
    (the §6 arithmetic of :mod:`gateway.store.gcra`). Discovery documents and key sets draw on
    the same bucket, so a flood of invented issuers costs at most that many outgoing requests
    whatever it sends. ``on_refused`` hears the ``kind`` of each fetch refused, for the metrics.
    """

    def __init__(
        self,
        policy: JwksPolicy,
        clock: Callable[[], float],
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self._rule = Rule(rate=policy.open_fetch_rate, burst=policy.open_fetch_burst)
        self._clock = clock
        self._on_refused = on_refused
        self._tat: int | None = None

    def take(self, kind: str) -> bool:
        """Whether a fetch of ``kind`` (``discovery`` or ``jwks``) may start now; charges it if so."""
        tat, wait = gcra(self._tat, now_us(self._clock), self._rule)
        if wait:
            if self._on_refused is not None:
                self._on_refused(kind)
            return False
        self._tat = tat
        return True


class JsonFetcher:
    """GETs a small JSON object from a personal agent's server under the fetch rules."""

    def __init__(self, session: aiohttp.ClientSession, policy: JwksPolicy, *, development: bool) -> None:
        self._session = session
        self.policy = policy
        self.development = development

    async def get(self, url: str) -> tuple[dict[str, Any], float]:
        """The document and how long it may be cached; :class:`FetchError` on any failure."""
        try:
            async with asyncio.timeout(self.policy.timeout):
                body, cache_control = await self._download(url)
        except TimeoutError:
            raise FetchError("timed out") from None
        except (aiohttp.ClientError, OSError) as exc:
            # The session's resolver refuses at connect time; aiohttp wraps that refusal.
            blocked = exc if isinstance(exc, BlockedTarget) else exc.__cause__
            if isinstance(blocked, BlockedTarget):
                raise FetchError(f"refused by the address guard: {blocked}") from None
            raise FetchError(f"connection failed: {type(exc).__name__}") from None
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise FetchError("body is not JSON") from None
        if not isinstance(document, dict):
            raise FetchError("body is not a JSON object")
        return document, ttl_from_cache_control(cache_control, self.policy)

    async def _download(self, url: str) -> tuple[bytes, str | None]:
        target = check_fetch_url(url, development=self.development)
        if not self.development and target.host is not None:
            # Checked again at connect time by the session's resolver (make_fetch_session).
            await resolve_public(target.host, target.port or 443)
        limit = self.policy.max_bytes
        async with self._session.get(target, allow_redirects=False) as response:
            if response.status != 200:  # a 3xx is a failure too: redirects are never followed
                raise FetchError(f"HTTP status {response.status}")
            if response.content_length is not None and response.content_length > limit:
                raise FetchError("body over the size cap")
            body = bytearray()
            async for chunk in response.content.iter_chunked(16384):
                body += chunk
                if len(body) > limit:
                    raise FetchError("body over the size cap")
            cache_control = ", ".join(response.headers.getall("Cache-Control", [])) or None
        return bytes(body), cache_control


@dataclass(slots=True)
class _Slot(Generic[T]):
    source: str | None
    pinned: bool = False
    value: T | None = None
    fresh_until: float = -math.inf
    last_attempt: float = -math.inf
    inflight: asyncio.Task[None] | None = None


class RefreshingStore(Generic[T]):
    """Per-issuer documents with a TTL, one fetch in flight per issuer, and a cool-down.

    A fetch is started at most once per ``cooldown`` seconds per issuer, whatever asks for
    it (expiry, an unknown ``kid``, a retry after a failure); concurrent callers await the
    same task. A failed fetch keeps the previous value, and its time, so a failing issuer is
    not asked again within the cool-down either. Pinned values (inline keys from the
    configuration) are never fetched. With ``max_entries``, at most that many unpinned issuers
    are kept (least recently used dropped first); ``None`` for a store whose issuers all come
    from the configuration. ``may_fetch``, when given, is asked before each fetch starts (a
    :class:`FetchBudget`); a refused fetch is not made, and a new issuer's entry is not even
    created, so what a budget refuses takes no room from anyone.
    """

    def __init__(
        self,
        load: Callable[[str, str], Awaitable[tuple[T, float]]],
        *,
        clock: Callable[[], float],
        cooldown: float,
        max_entries: int | None,
        label: str,
        failure_log_level: int = logging.WARNING,
        may_fetch: Callable[[], bool] | None = None,
    ) -> None:
        self._load = load
        self._clock = clock
        self._cooldown = cooldown
        self._max_entries = max_entries
        self._label = label
        self._failure_log_level = failure_log_level
        self._may_fetch = may_fetch
        self._slots: OrderedDict[str, _Slot[T]] = OrderedDict()

    def current(self, key: str) -> T | None:
        """The value held now, fresh or stale, without any I/O."""
        slot = self._slots.get(key)
        return None if slot is None else slot.value

    async def get(self, key: str, source: str | None) -> T | None:
        """The value for ``key``, fetched from ``source`` first if it is missing or expired."""
        slot = self._slot(key, source)
        if not slot.pinned and self._clock() >= slot.fresh_until:
            await self._refresh(key, slot)
        return slot.value

    async def refresh(self, key: str, source: str | None) -> T | None:
        """Fetch again now unless a fetch ran within the cool-down; the value afterwards."""
        slot = self._slot(key, source)
        if not slot.pinned:
            await self._refresh(key, slot)
        return slot.value

    def pin(self, key: str, value: T) -> None:
        self._slots[key] = _Slot(source=None, pinned=True, value=value, fresh_until=math.inf)

    def discard(self, key: str) -> None:
        self._slots.pop(key, None)

    def _slot(self, key: str, source: str | None) -> _Slot[T]:
        slot = self._slots.get(key)
        if slot is not None and slot.source == source:
            self._slots.move_to_end(key)
            return slot
        # New issuer, or its URL changed with a configuration reload (pinned keys have no URL,
        # so an issuer moved from inline keys to a jwks_uri is fetched): start afresh. The new
        # entry is stored when its first fetch starts (_refresh), not before.
        return _Slot(source=source)

    def _keep(self, key: str, slot: _Slot[T]) -> None:
        self._slots[key] = slot
        self._slots.move_to_end(key)
        if self._max_entries is None:
            return
        excess = len(self._slots) - self._max_entries
        if excess <= 0:
            return
        victims: list[str] = []
        for name, held in self._slots.items():
            if len(victims) == excess:
                break
            if not held.pinned and held.inflight is None:
                victims.append(name)
        for name in victims:
            del self._slots[name]

    async def _refresh(self, key: str, slot: _Slot[T]) -> None:
        if slot.inflight is None:
            now = self._clock()
            if now - slot.last_attempt < self._cooldown:
                return
            if self._may_fetch is not None and not self._may_fetch():
                return
            slot.last_attempt = now
            slot.inflight = asyncio.create_task(self._run(key, slot))
            if self._slots.get(key) is not slot:
                self._keep(key, slot)
        # shield: a caller that gives up (client gone) does not cancel the others' fetch.
        await asyncio.shield(slot.inflight)

    async def _run(self, key: str, slot: _Slot[T]) -> None:
        try:
            if slot.source is None:
                raise FetchError("no URL to fetch from")
            value, ttl = await self._load(key, slot.source)
        except FetchError as exc:
            _log.log(
                self._failure_log_level,
                "%s fetch for issuer %s failed (%s); %s",
                self._label,
                log_safe(key),
                exc,
                "keeping the last good copy" if slot.value is not None else "nothing cached",
            )
        else:
            slot.value = value
            slot.fresh_until = self._clock() + ttl
        finally:
            slot.inflight = None


@dataclass(frozen=True, slots=True)
class ParsedKey:
    """One usable JWK: its ``kid``, the one §3.2 ``alg`` its type allows, and the key object."""

    kid: str | None
    alg: str
    key: PublicKey
    weak: bool
    fingerprint: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class KeySet:
    """An issuer's parsed keys; ``version`` changes whenever the keys do."""

    keys: tuple[ParsedKey, ...]
    version: int

    def same_keys(self, keys: tuple[ParsedKey, ...]) -> bool:
        return [k.fingerprint for k in self.keys] == [k.fingerprint for k in keys]

    def find(self, kid: str | None, alg: str) -> ParsedKey | None:
        """The key for a token header; ``None`` if unknown, AuthFailure if it exists but cannot be used."""
        if kid is None:
            # No kid: usable only when exactly one key fits the alg (§3.2 says kid SHOULD be set).
            matching = [k for k in self.keys if k.alg == alg]
            return _usable(matching[0]) if len(matching) == 1 else None
        named = [k for k in self.keys if k.kid == kid]
        if not named:
            return None
        for key in named:
            if key.alg == alg:
                return _usable(key)
        raise AuthFailure("bad_alg")  # the kid exists but its key type does not fit the token's alg


def _usable(key: ParsedKey) -> ParsedKey:
    if key.weak:
        raise AuthFailure("weak_key")
    return key


def parse_jwk(entry: Any) -> ParsedKey | None:
    """A JWK as a key object, or ``None`` when it is not a §3.2 signing key (skipped, not fatal).

    Only the public members are read, so a published private key costs nothing to parse.
    EC keys must be on P-256 (ES256); RSA keys are RS256, at most :data:`MAX_RSA_BITS` long with
    a public exponent of at most :data:`MAX_RSA_EXPONENT`, so no key makes a verification dearer
    than a normal one. A declared ``alg`` must agree.
    """
    if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
        return None
    kid = entry.get("kid")
    if kid is not None and not isinstance(kid, str):
        return None
    key: PublicKey
    try:
        if entry.get("kty") == "EC" and entry.get("crv") == "P-256":
            alg = "ES256"
            public = {"kty": "EC", "crv": "P-256", "x": entry["x"], "y": entry["y"]}
            ec_key = ECAlgorithm.from_jwk(public)
            if not isinstance(ec_key, EllipticCurvePublicKey) or not isinstance(ec_key.curve, SECP256R1):
                return None
            key = ec_key
        elif entry.get("kty") == "RSA":
            alg = "RS256"
            public = {"kty": "RSA", "n": entry["n"], "e": entry["e"]}
            rsa_key = RSAAlgorithm.from_jwk(public)
            if (
                not isinstance(rsa_key, RSAPublicKey)
                or rsa_key.key_size > MAX_RSA_BITS
                or rsa_key.public_numbers().e > MAX_RSA_EXPONENT
            ):
                return None
            key = rsa_key
        else:
            return None
    except (KeyError, TypeError, ValueError, jwt.PyJWTError):
        return None
    if entry.get("alg", alg) != alg:
        return None
    weak = isinstance(key, RSAPublicKey) and key.key_size < MIN_RSA_BITS
    fingerprint = (kid, alg, *(str(v) for v in public.values()))
    return ParsedKey(kid=kid, alg=alg, key=key, weak=weak, fingerprint=fingerprint)


def parse_jwks(document: Mapping[str, Any]) -> tuple[ParsedKey, ...]:
    """The usable keys of a JWKS; ``ValueError`` when it has no ``keys`` array at all."""
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise ValueError("a JWKS must be a JSON object with a keys array")
    return tuple(key for key in map(parse_jwk, entries) if key is not None)


class JwksCache:
    """Issuers' parsed signing keys, fetched with aiohttp under the §3.1/§3.2 fetch rules.

    Two partitions: registered issuers (and, for the §5 Brand login, Brands), whose number the
    configuration bounds, so none is ever dropped for room; and issuers the ``open`` policy
    admitted, bounded by ``policy.max_cached_issuers`` and fetched only as the shared
    :attr:`open_budget` allows. ``on_refused`` hears each fetch that budget refused.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        policy: JwksPolicy,
        *,
        development: bool,
        clock: Callable[[], float] = time.monotonic,
        on_fetch: Callable[[str, bool], None] | None = None,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        self._fetcher = JsonFetcher(session, policy, development=development)
        self._clock = clock
        self._on_fetch = on_fetch
        self._versions = itertools.count(1)
        self._budget = FetchBudget(policy, clock, on_refused)
        self._registered: RefreshingStore[KeySet] = RefreshingStore(
            self._load_registered,
            clock=clock,
            cooldown=policy.refetch_cooldown,
            max_entries=None,
            label="JWKS",
        )
        self._open: RefreshingStore[KeySet] = RefreshingStore(
            self._load_open,
            clock=clock,
            cooldown=policy.refetch_cooldown,
            max_entries=policy.max_cached_issuers,
            label="JWKS",
            # Anyone can name an issuer under the open policy: its failures are not the operator's.
            failure_log_level=logging.INFO,
            may_fetch=lambda: self._budget.take("jwks"),
        )

    @property
    def fetcher(self) -> JsonFetcher:
        """The guarded fetcher, shared with OIDC discovery so both follow the same rules."""
        return self._fetcher

    @property
    def clock(self) -> Callable[[], float]:
        return self._clock

    @property
    def open_budget(self) -> FetchBudget:
        """The fetch budget of ``open``-policy issuers, shared with their OIDC discovery."""
        return self._budget

    async def key_for(
        self, issuer: str, jwks_uri: str | None, kid: str | None, alg: str, *, open_policy: bool = False
    ) -> PublicKey:
        """The key to verify a token of ``issuer`` whose header says ``kid`` and ``alg``.

        ``open_policy`` for an issuer the ``open`` policy admitted (its own partition and the
        fetch budget). An unknown ``kid`` refetches the key set (rotation, §3.1) unless the
        cool-down (or the budget) forbids it. Raises AuthFailure: ``jwks_unavailable``,
        ``unknown_kid``, ``bad_alg``, ``weak_key``.
        """
        store = self._open if open_policy else self._registered
        keys = await store.get(issuer, jwks_uri)
        if keys is None:
            raise AuthFailure("jwks_unavailable")
        found = keys.find(kid, alg)
        if found is None:
            keys = await store.refresh(issuer, jwks_uri)
            found = keys.find(kid, alg) if keys is not None else None
        if found is None:
            raise AuthFailure("unknown_kid")
        return found.key

    def preload(self, issuer: str, jwks: Mapping[str, Any]) -> None:
        """Inline keys from the configuration (air-gapped set-ups); they are never fetched."""
        keys = parse_jwks(jwks)
        self._registered.pin(issuer, self._key_set(self._registered, issuer, keys))

    async def prefetch(self, issuer: str, jwks_uri: str) -> bool:
        """Fetch a registered ``issuer``'s keys unless fresh ones are held; whether usable keys are
        held afterwards.

        For start-up and readiness, which know no ``kid``: the same store path as :meth:`key_for`,
        so the cool-down and the one-fetch-in-flight rule still hold.
        """
        await self._registered.get(issuer, jwks_uri)
        return self.has_keys(issuer)

    def has_keys(self, issuer: str) -> bool:
        """Whether usable keys of the registered ``issuer`` are held (readiness)."""
        keys = self._registered.current(issuer)
        return keys is not None and bool(keys.keys)

    def version(self, issuer: str) -> int | None:
        """Changes whenever the issuer's keys change: lets a cached verdict notice a rotation.

        Versions are unique across both partitions, and an issuer is only ever in one of them
        (the verifier discards it when a reload moves it), so one number answers for either.
        """
        keys = self._registered.current(issuer)
        if keys is None:
            keys = self._open.current(issuer)
        return None if keys is None else keys.version

    def discard(self, issuer: str) -> None:
        """Forget an issuer's keys, in both partitions (it left, or its key source changed)."""
        self._registered.discard(issuer)
        self._open.discard(issuer)

    def _key_set(self, store: RefreshingStore[KeySet], issuer: str, keys: tuple[ParsedKey, ...]) -> KeySet:
        previous = store.current(issuer)
        if previous is not None and previous.same_keys(keys):
            return previous
        return KeySet(keys=keys, version=next(self._versions))

    async def _load_registered(self, issuer: str, url: str) -> tuple[KeySet, float]:
        return await self._load(self._registered, issuer, url)

    async def _load_open(self, issuer: str, url: str) -> tuple[KeySet, float]:
        return await self._load(self._open, issuer, url)

    async def _load(self, store: RefreshingStore[KeySet], issuer: str, url: str) -> tuple[KeySet, float]:
        try:
            document, ttl = await self._fetcher.get(url)
            keys = parse_jwks(document)
        except (FetchError, ValueError) as exc:
            self._notify(issuer, ok=False)
            raise FetchError(str(exc)) from None
        self._notify(issuer, ok=True)
        return self._key_set(store, issuer, keys), ttl

    def _notify(self, issuer: str, *, ok: bool) -> None:
        if self._on_fetch is not None:
            self._on_fetch(issuer, ok)
