"""§5.3 from the Brand's login to the User's decision: the consent page, the decision, the landing page.

``POST {urls.consent}`` takes the Brand login's single-use ``assertion``
(:mod:`gateway.oauth.login`), and shows the consent form as the logged-in Brand user, or
approves at once when a live grant already covers the request (§5.3 "MAY be skipped").
``POST {urls.consent_decision}`` takes the form's single-use ``session`` and settles the
pending authorization; ``GET {urls.landing}`` is the "you can close this page" page the
decision redirects to when the Brand has no landing page of its own. That page says what the
decision made true from a single-use record the decision left in the store, named by an
unguessable id in the redirect: never from its query string. A ``GET`` on the consent URL
(the address opened by hand) is a page saying where a person should start.

Everything here answers a browser, so every refusal is the same short HTML page (the reason
goes to the log, never to the page), and every answer carries the same anti-framing, no-cache,
no-referrer headers. Hand-offs and decisions are limited per client address, and wrong
``user_code``s spend RFC 8628 §5.1 budgets (per Brand user, per address, per Brand), a token
reserved before a code is looked up and given back when it was right: over any of them the answer
is one "Too many attempts" page (429); the Brand's pauses only who missed recently.
The landing URL is always built from configuration, never taken from the request, so no
parameter can turn the redirect into an open one.

RFC 9396 details ride with their scopes (:mod:`gateway.oauth.consent_details`): the page shows
each under the scope it is a condition of, and a decision grants those of the scopes left
ticked, taken from the stored authorization and the earlier grant, never from the form.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from typing import Final, NamedTuple
from urllib.parse import parse_qsl

from aiohttp import web
from yarl import URL

from gateway.config import BrandConfig, DelegationConfig, PersonalAgentsConfig, RateLimitsConfig
from gateway.handlers.caller import read_body
from gateway.handlers.state import METRICS, RUNTIME
from gateway.http import responses
from gateway.http.client_address import limit_address
from gateway.http.notes import refused
from gateway.oauth import pages
from gateway.oauth.consent_details import (
    GrantedDetails,
    granted_details,
    held_details,
    requested_details,
    skip_covers_details,
    under_scopes,
)
from gateway.oauth.device import code_hash, normalize_user_code
from gateway.oauth.forms import FORM_TYPE
from gateway.oauth.login import InvalidAssertion, LoginAssertion, verify_assertion
from gateway.oauth.server import AuthorizationServer
from gateway.ops.limits import (
    CONSENT_DECISION,
    LOGIN_ASSERTION,
    Limit,
    RateLimited,
    RateLimits,
    named_limit,
    subject_digest,
    wrong_user_code_limits,
)
from gateway.ops.metrics import Metrics
from gateway.protocol.authorization_details import consent_sentence, scope_of
from gateway.protocol.claims import MAX_CLOCK_SKEW
from gateway.protocol.urls import OAuthUrls, with_query
from gateway.store.base import StoreError
from gateway.store.oauth import (
    AuthorizationStatus,
    ConsentSession,
    DeviceAuthorization,
    Grant,
    LandingRecord,
)

__all__ = [
    "LANDING_TTL",
    "MAX_FORM_BYTES",
    "SESSION_TTL",
    "carried_scopes",
    "consent",
    "consent_opened",
    "decision",
    "landing",
    "origin_of",
    "scopes_in_card_order",
    "security_headers",
    "skip_consent_scopes",
]

_log = logging.getLogger("gateway.oauth.consent")  # its name before the move, as docs/operations.md gives it

MAX_FORM_BYTES: Final = 65536
"""A posted form is read whole up to this size: an assertion is at most 8 KiB, a decision a few scopes."""
SESSION_TTL: Final = 600.0
"""A consent form is good for at most 10 minutes (and never past its authorization's expiry)."""
LANDING_TTL: Final = 300.0
"""The landing page's record of a decision is shown at most once, within 5 minutes of the decision."""
_MAX_FIELDS: Final = 256


class _Refused(Exception):
    """A hand-off or a decision that grants nothing; ``reason`` goes to the log, not to the page."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Delegating(NamedTuple):
    """A request for a Brand that delegates, with what every handler here needs."""

    server: AuthorizationServer
    brand: BrandConfig
    delegation: DelegationConfig
    urls: OAuthUrls
    headers: Mapping[str, str]
    agents: PersonalAgentsConfig
    limits: RateLimits
    address: str
    """The client's address as per-address limits count it
    (:func:`~gateway.http.client_address.limit_address`)."""

    @property
    def rate_limits(self) -> RateLimitsConfig:
        return self.brand.rate_limits

    async def enforce(self, limits: Sequence[Limit]) -> None:
        """Charge ``limits`` at this Brand or raise :class:`RateLimited` (the "too many" page)."""
        await self.limits.enforce(self.brand.id, limits, fail_open=self.rate_limits.fail_open)


def origin_of(url: str) -> str:
    """``scheme://host[:port]`` of an absolute URL, the default port left out (RFC 6454 serialization).

    The host is in its ASCII form (IDNA, RFC 5891: ``xn--`` labels), as CSP source expressions
    need it and as a person must see it on the consent page: under ``policy: open`` any issuer
    may ask, and ``https://gооgle.com`` with Cyrillic ``о`` shown as written would pass for Google
    (issue 18 F8). yarl encodes it as aiohttp does when it connects there.
    """
    parts = URL(url)
    scheme = parts.scheme.lower()
    host = (parts.raw_host or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.explicit_port
    default = {"http": 80, "https": 443}.get(scheme)
    return f"{scheme}://{host}" if port is None or port == default else f"{scheme}://{host}:{port}"


def security_headers(public_url: str, landing_url: str | None) -> dict[str, str]:
    """The headers of every page and redirect here: never framed, cached, sniffed or leaked by Referer.

    ``form-action`` names the gateway's own origin (the form posts there) and the landing
    page's: Chromium checks a form's redirect target against it too, and the decision's answer
    is a 303 to the landing page. ``script-src`` allows the consent page's one script by its hash
    (:data:`~gateway.oauth.pages.SCRIPT_SOURCE`), and no other.
    """
    origins = [origin_of(public_url)]
    if landing_url is not None and origin_of(landing_url) not in origins:
        origins.append(origin_of(landing_url))
    return {
        "Content-Type": "text/html; charset=utf-8",
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
        "Content-Security-Policy": (
            "frame-ancestors 'none'; default-src 'none'; style-src 'unsafe-inline'; "
            f"script-src {pages.SCRIPT_SOURCE}; form-action {' '.join(origins)}"
        ),
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }


def scopes_in_card_order(delegation: DelegationConfig, wanted: Iterable[str]) -> tuple[str, ...]:
    """``wanted`` in the card's order, without duplicates; ids no longer on the card are dropped."""
    chosen = set(wanted)
    return tuple(scope for scope in delegation.scopes if scope in chosen)


def _same_owner(grant: Grant, authorization: DeviceAuthorization) -> bool:
    """A grant of the same personal agent *and* the same PA ``sub`` as the authorization."""
    return grant.client_id == authorization.client_id and grant.owner_digest == authorization.owner_digest


def carried_scopes(
    delegation: DelegationConfig,
    authorization: DeviceAuthorization,
    grant: Grant | None,
    chosen: Iterable[str],
) -> tuple[str, ...]:
    """What the new grant keeps of the live one it will supersede though not ``chosen`` now, in card
    order (incremental authorization: a step-up token carries the earlier scopes as well as the new
    ones). Only the grant of the same personal agent and ``sub``; a scope that left the card is not
    granted again."""
    if grant is None or not _same_owner(grant, authorization):
        return ()
    return scopes_in_card_order(delegation, set(grant.scopes) - set(chosen))


def skip_consent_scopes(
    delegation: DelegationConfig, authorization: DeviceAuthorization, grant: Grant | None
) -> tuple[str, ...] | None:
    """§5.3 "consent MAY be skipped when an unexpired grant for (User, personal agent) already covers
    the request": the scopes to approve at once, or ``None`` when the User must be asked.

    Only when the Brand allows it, and only the live grant of the same personal agent and the
    same PA ``sub`` counts (:meth:`OAuthStore.live_grant_of`): another ``sub`` of that agent may
    be another person. The grant covers the request when it holds every requested scope and
    every requested RFC 9396 detail, byte for byte (:func:`skip_covers_details`).
    """
    if not delegation.skip_consent or grant is None or not _same_owner(grant, authorization):
        return None
    requested = set(authorization.scopes)
    if not requested <= set(grant.scopes) or not skip_covers_details(authorization, grant):
        return None
    return scopes_in_card_order(delegation, requested | set(grant.scopes))


def _delegating(request: web.Request) -> _Delegating | None:
    runtime = request.app[RUNTIME].current
    brand = runtime.config.brands.get(request.match_info["brand"])
    if brand is None or brand.delegation is None or runtime.oauth is None:
        return None
    headers = security_headers(runtime.config.public_url, brand.delegation.landing_url)
    return _Delegating(
        runtime.oauth,
        brand,
        brand.delegation,
        runtime.oauth.urls(brand),
        headers,
        runtime.config.personal_agents,
        runtime.limits,
        limit_address(request, runtime.config.listen),
    )


def _page(ctx: _Delegating, html: str, status: int = 200) -> web.Response:
    return web.Response(body=html.encode(), status=status, headers=ctx.headers)


async def _answer(
    ctx: _Delegating, request: web.Request, step: str, work: Awaitable[web.Response]
) -> web.Response:
    """``work``'s answer, or the page a person should see when it refused or failed.

    A refusal is the one error page, its reason logged with the Brand id only (never the
    assertion, the session or the user id); a rate limit or a spent budget is the "Too many
    attempts" page with ``Retry-After``, its limit noted for the access line. A store failure,
    or anything unexpected, is the Provider's: a "try again" page, logged once, so a browser
    never gets a JSON envelope. An HTTP answer raised on the way (the bare ``408`` of a body
    that came too slowly, :class:`~gateway.http.connection.RequestTimedOut`) is the edge's, and
    passes through as it is.
    """
    try:
        return await work
    except web.HTTPException:
        raise
    except _Refused as refusal:
        _log.info("%s refused for brand %s: %s", step, ctx.brand.id, refusal.reason)
        return _page(ctx, pages.error_page(ctx.brand.name), 400)
    except RateLimited as limited:
        _log.info("%s refused for brand %s: rate limited by %s", step, ctx.brand.id, limited.limit)
        refused(request, limited.limit)
        response = _page(ctx, pages.too_many_attempts_page(ctx.brand.name, limited.retry_after), 429)
        response.headers["Retry-After"] = str(limited.retry_after)
        return response
    except StoreError as exc:
        request.app[METRICS].store_error("oauth")
        _log.error("%s for brand %s failed, store unavailable: %s", step, ctx.brand.id, exc)
        return _page(ctx, pages.unavailable_page(ctx.brand.name), 503)
    except Exception:
        _log.exception("%s for brand %s failed", step, ctx.brand.id)
        return _page(ctx, pages.unavailable_page(ctx.brand.name), 500)


def _earlier(grant: Grant | None, authorization: DeviceAuthorization) -> Grant | None:
    """The live grant the new one would supersede: the slot's, if it is this agent's and ``sub``'s."""
    return grant if grant is not None and _same_owner(grant, authorization) else None


def _sentences(ctx: _Delegating, details: Iterable[str]) -> tuple[str, ...]:
    """The consent sentence of each detail (plain text: the page escapes it)."""
    return tuple(consent_sentence(text, ctx.delegation.authorization_details) for text in details)


def _listed(
    ctx: _Delegating, scopes: Iterable[str], details: Sequence[str] = (), *, among: Sequence[str] = ()
) -> list[pages.Listed]:
    """The card's descriptions of ``scopes``, in card order (ids no longer on the card left out), each
    with the sentences of the ``details`` that are its conditions among ``among`` (``scopes`` when
    empty); a scope of ``among`` not in ``scopes`` that has some is listed too."""
    wanted = tuple(scopes)
    grouped = under_scopes(details, ctx.delegation.authorization_details, tuple(among) or wanted)
    return [
        pages.Listed(ctx.delegation.scopes[scope], _sentences(ctx, grouped.get(scope, ())))
        for scope in scopes_in_card_order(ctx.delegation, {*wanted, *grouped})
    ]


async def _redirect(ctx: _Delegating, record: LandingRecord) -> web.Response:
    """303 to the landing page: the Brand's configured one, else ours; never a URL from the request.

    Both get the conformance notes' ``status=approved&scope=…`` or ``status=denied`` (the Brand's
    page may show them as it likes). Ours also gets ``r``, the id of ``record``, kept in the store
    for :data:`LANDING_TTL` and shown once: our page says only what the record says, never what
    the query claims.
    """
    params = {"status": "denied"}
    if record.outcome == "approved":
        params = {"status": "approved", "scope": " ".join(record.scopes)}
    if ctx.delegation.landing_url is not None:
        target = with_query(ctx.delegation.landing_url, **params)
    else:
        record_id = secrets.token_urlsafe(32)
        await ctx.server.store.put_landing(ctx.brand.id, code_hash(record_id), record)
        target = with_query(ctx.urls.landing, **params, r=record_id)
    return web.Response(status=303, headers={**ctx.headers, "Location": target})


async def _read_form(request: web.Request) -> list[tuple[str, str]]:
    """A urlencoded body, read whole up to :data:`MAX_FORM_BYTES` (more is refused, never truncated).

    Not :func:`gateway.oauth.forms.read_form`: the consent form repeats ``scope`` by design,
    and a refusal here is a page for a person, not RFC 6749 JSON.
    """
    if request.content_type.lower() != FORM_TYPE:
        raise _Refused("not_a_form")
    body = await read_body(request, MAX_FORM_BYTES)
    if body is None:
        raise _Refused("form_too_large")
    try:
        return parse_qsl(body.decode(), keep_blank_values=True, errors="strict", max_num_fields=_MAX_FIELDS)
    except ValueError:  # not UTF-8 (UnicodeDecodeError is one), or too many fields
        raise _Refused("bad_form") from None


def _one(fields: Sequence[tuple[str, str]], name: str) -> str:
    values = [value for key, value in fields if key == name]
    if len(values) != 1 or not values[0]:
        raise _Refused(f"bad_{name}")
    return values[0]


def _new_session(user_code: str) -> str:
    """The hidden ``session``: 256 random bits, led by the ``user_code`` it is for.

    The store keeps only its hash. The ``user_code`` prefix lets the decision find the
    authorization again (the session record names it only by device hash, and the store looks
    authorizations up by ``user_code``); tampering with the prefix changes the hash, so a
    forged session finds nothing.
    """
    return f"{user_code}.{secrets.token_urlsafe(32)}"


async def _accept_assertion(
    ctx: _Delegating, fields: Sequence[tuple[str, str]], now: float, metrics: Metrics
) -> tuple[LoginAssertion, DeviceAuthorization]:
    """The verified, first-time-used assertion and the authorization it names (pending or already decided)."""
    server, brand, login = ctx.server, ctx.brand, ctx.delegation.login
    try:
        assertion = await verify_assertion(
            _one(fields, "assertion"),
            brand_id=brand.id,
            login=login,
            keys=server.login_keys,
            audience=ctx.urls.consent,
            now=now,
            refused=server.refused_assertions,
        )
    except InvalidAssertion as invalid:
        raise _Refused(invalid.reason) from None
    # Single use by jti, remembered until no replica could still take the assertion as valid: its exp
    # (≤ 5 min away) plus the §3.2 clock skew another replica's clock may be behind ours by.
    marker = code_hash(f"{login.issuer}\0{assertion.jti}")
    if not await server.store.use_once(brand.id, marker, assertion.expires_at - now + MAX_CLOCK_SKEW):
        raise _Refused("replayed_jti")
    # RFC 8628 §5.1: a wrong code's token is reserved *before* the code is looked up, in one
    # atomic step (issue 28 M1: looked at, then spent after the look-up, concurrent guesses all
    # passed), and given back when the code was right. Past its budget, the Brand user or the
    # address is paused with the same answer whether the code exists or not: no oracle, and no
    # guess tried. The Brand's budget pauses only who missed recently (wrong_user_code_limits).
    wrong = wrong_user_code_limits(ctx.rate_limits, assertion.user, ctx.address)
    reserved = await ctx.limits.reserve(brand.id, wrong, fail_open=ctx.rate_limits.fail_open)
    try:
        authorization = await server.store.authorization_by_user_code(brand.id, assertion.user_code, now)
    except StoreError:
        await ctx.limits.give_back(reserved)  # no answer: nothing was learnt from this attempt
        raise
    if authorization is not None:
        await ctx.limits.give_back(reserved)
        return assertion, authorization
    metrics.delegation_event(brand.id, "wrong_user_code")
    if reserved.emptied:
        # Once per budget spent; never the code, and the Brand user only as a digest.
        _log.warning(
            "wrong user_code budget spent at brand %s (%s): user %s, address %s paused",
            brand.id,
            ", ".join(reserved.emptied),
            subject_digest(brand.id, assertion.user)[:16],
            ctx.address,
        )
    raise _Refused("unknown_user_code")


async def _approve(
    ctx: _Delegating,
    authorization: DeviceAuthorization,
    user: str,
    scopes: tuple[str, ...],
    carried: tuple[str, ...],
    now: float,
    details: GrantedDetails,
    dropped: tuple[str, ...] = (),
) -> web.Response:
    approved = await ctx.server.store.approve(
        ctx.brand.id,
        authorization,
        user,
        scopes,
        now,
        carried=carried,
        details=details.details,
        carried_details=details.carried,
    )
    if not approved:
        raise _Refused("not_pending")
    record = LandingRecord(
        "approved",
        scopes,
        carried,
        dropped,
        now + LANDING_TTL,
        details=details.details,
        carried_details=details.carried,
        dropped_details=details.dropped,
    )
    return await _redirect(ctx, record)


def _settled(ctx: _Delegating, assertion: LoginAssertion, authorization: DeviceAuthorization) -> web.Response:
    """A valid sign-in for a request already decided (its link opened again): what is true now.

    What an approval allowed is shown only to the Brand user who approved it.
    """
    if authorization.status is AuthorizationStatus.DENIED:
        return _page(ctx, pages.settled_page(brand_name=ctx.brand.name, outcome="denied", scopes=()))
    mine = authorization.user == assertion.user
    scopes = _listed(ctx, authorization.approved, authorization.approved_details) if mine else []
    return _page(ctx, pages.settled_page(brand_name=ctx.brand.name, outcome="approved", scopes=scopes))


async def _hand_off(request: web.Request, ctx: _Delegating) -> web.Response:
    store, now = ctx.server.store, ctx.server.clock()
    # Before the body and the signature check: an assertion costs an ES256 verification.
    await ctx.enforce(named_limit(LOGIN_ASSERTION, ctx.rate_limits.login_assertion, ctx.address))
    metrics = request.app[METRICS]
    assertion, authorization = await _accept_assertion(ctx, await _read_form(request), now, metrics)
    if authorization.status is not AuthorizationStatus.PENDING:
        return _settled(ctx, assertion, authorization)
    # The slot's grant only: the hand-off costs the same whatever else this user has approved.
    grant = await store.live_grant_of(ctx.brand.id, assertion.user, authorization.owner_digest, now)
    earlier = _earlier(grant, authorization)
    skipped = skip_consent_scopes(ctx.delegation, authorization, grant)
    if skipped:
        carried = carried_scopes(ctx.delegation, authorization, grant, authorization.scopes)
        details = granted_details(
            ctx.delegation, authorization, earlier, ticked=authorization.scopes, scopes=skipped
        )
        response = await _approve(ctx, authorization, assertion.user, skipped, carried, now, details)
        request.app[METRICS].delegation_event(ctx.brand.id, "authorization_approved")
        return response
    session = _new_session(authorization.user_code)
    expires_at = min(now + SESSION_TTL, authorization.expires_at)
    await store.put_consent_session(
        ctx.brand.id,
        code_hash(session),
        ConsentSession(device_hash=authorization.device_hash, user=assertion.user, expires_at=expires_at),
    )
    agent = ctx.agents.find(authorization.client_id)
    carried = carried_scopes(ctx.delegation, authorization, grant, authorization.scopes)
    choices = _choices(ctx, authorization, earlier, carried)
    html = pages.consent_page(
        agent_name=None if agent is None else agent.name,
        pa_origin=origin_of(authorization.client_id),
        brand_name=ctx.brand.name,
        signed_in_as=assertion.display or assertion.user,
        user_code=authorization.user_code,
        session=session,
        action=ctx.urls.consent_decision,
        scopes=choices.scopes,
        carried=choices.carried,
        no_room=choices.no_room,
        max_conditions=ctx.delegation.max_authorization_details,
    )
    return _page(ctx, html)


class _Choices(NamedTuple):
    """What the consent form shows: :func:`pages.consent_page`'s ``scopes``, ``carried``, ``no_room``."""

    scopes: list[pages.Choice]
    carried: list[pages.Choice]
    no_room: list[pages.Listed]


def _choices(
    ctx: _Delegating, authorization: DeviceAuthorization, earlier: Grant | None, carried: tuple[str, ...]
) -> _Choices:
    """The consent form's boxes: each requested scope with the details asked under it and those the
    earlier grant already holds under it, each ``keep`` scope with the earlier grant's under it; and
    what would find no room in the new grant were everything left ticked."""
    types = ctx.delegation.authorization_details
    asked = under_scopes(requested_details(ctx.delegation, authorization), types, authorization.scopes)
    held_scopes = () if earlier is None else earlier.scopes
    held = under_scopes(held_details(ctx.delegation, authorization, earlier), types, held_scopes)
    everything = granted_details(
        ctx.delegation,
        authorization,
        earlier,
        ticked=authorization.scopes,
        scopes={*authorization.scopes, *carried},
    )
    return _Choices(
        scopes=[
            pages.Choice(
                scope,
                ctx.delegation.scopes.get(scope, scope),
                _sentences(ctx, asked.get(scope, ())),
                _sentences(ctx, held.get(scope, ())),
            )
            for scope in authorization.scopes
        ],
        carried=[
            pages.Choice(scope, ctx.delegation.scopes[scope], _sentences(ctx, held.get(scope, ())))
            for scope in carried
        ],
        no_room=_listed(ctx, (), everything.dropped, among=(*authorization.scopes, *held_scopes)),
    )


async def consent(request: web.Request) -> web.Response:
    """``POST {urls.consent}``: the Brand login's hand-off (§5.3), answered with the consent page."""
    ctx = _delegating(request)
    if ctx is None:
        return responses.not_found()
    return await _answer(ctx, request, "login hand-off", _hand_off(request, ctx))


async def consent_opened(request: web.Request) -> web.Response:
    """``GET {urls.consent}``: the address opened by hand. Still a ``405`` (only the Brand login's
    ``POST`` does anything here), but with a page saying where to start, not the browser's own."""
    ctx = _delegating(request)
    if ctx is None:
        return responses.not_found()
    response = _page(ctx, pages.wrong_method_page(ctx.brand.name), 405)
    response.headers["Allow"] = "POST"
    return response


async def _settle(request: web.Request, ctx: _Delegating) -> web.Response:
    """The User's answer on the consent form, settled once; the redirect to the landing page."""
    store, now = ctx.server.store, ctx.server.clock()
    await ctx.enforce(named_limit(CONSENT_DECISION, ctx.rate_limits.consent_decision, ctx.address))
    fields = await _read_form(request)
    session = _one(fields, "session")
    choice = _one(fields, "decision")
    if choice not in {"allow", "deny"}:
        raise _Refused("bad_decision")
    ticked = [value for key, value in fields if key == "scope"]
    kept = {value for key, value in fields if key == "keep"}
    user_code, dot, _ = session.partition(".")
    if not dot or normalize_user_code(user_code) != user_code:
        raise _Refused("unknown_session")
    # Taken before anything else is decided: a session is spent by its first use, whatever it was.
    taken = await store.take_consent_session(ctx.brand.id, code_hash(session), now)
    if taken is None:
        raise _Refused("unknown_session")
    authorization = await store.authorization_by_user_code(ctx.brand.id, user_code, now)
    if authorization is None or authorization.device_hash != taken.device_hash:
        raise _Refused("unknown_authorization")
    if authorization.status is not AuthorizationStatus.PENDING:
        raise _Refused("not_pending")
    grant = await store.live_grant_of(ctx.brand.id, taken.user, authorization.owner_digest, now)
    earlier = _earlier(grant, authorization)
    if choice == "deny" or not ticked:  # the notes: no scope ticked counts as denied
        if not await store.deny(ctx.brand.id, authorization, now):
            raise _Refused("not_pending")
        request.app[METRICS].delegation_event(ctx.brand.id, "authorization_denied")
        # The earlier grant is untouched by a denial: the page says what it still allows.
        standing = () if earlier is None else earlier.scopes
        still = () if earlier is None else earlier.details
        outcome = "denied" if choice == "deny" else "nothing_ticked"
        record = LandingRecord(outcome, standing, (), (), now + LANDING_TTL, details=still)
        return await _redirect(ctx, record)
    if not set(ticked) <= set(authorization.scopes):
        raise _Refused("unrequested_scope")
    # §5.3 step-up: the new grant supersedes the live one and keeps only what the User left ticked
    # under "keep" (a scope missing from the form is dropped, never carried by default).
    offered = carried_scopes(ctx.delegation, authorization, grant, ticked)
    carried = tuple(scope for scope in offered if scope in kept)
    dropped = tuple(scope for scope in offered if scope not in kept)
    scopes = scopes_in_card_order(ctx.delegation, {*ticked, *carried})
    if not scopes:  # everything ticked left the card with a reload since the page was shown
        raise _Refused("unrequested_scope")
    # RFC 9396 details from the stored authorization and the earlier grant only: the form names
    # scopes, and a field naming a detail is never read (THREAT_MODEL D23).
    details = granted_details(ctx.delegation, authorization, earlier, ticked=ticked, scopes=scopes)
    response = await _approve(ctx, authorization, taken.user, scopes, carried, now, details, dropped)
    request.app[METRICS].delegation_event(ctx.brand.id, "authorization_approved")
    return response


async def decision(request: web.Request) -> web.Response:
    """``POST {urls.consent_decision}``: allow (the ticked scopes) or deny, then 303 to the landing page."""
    ctx = _delegating(request)
    if ctx is None:
        return responses.not_found()
    return await _answer(ctx, request, "consent decision", _settle(request, ctx))


async def _show_landing(request: web.Request, ctx: _Delegating) -> web.Response:
    record_id = request.query.get("r", "")
    record = None
    if record_id:
        record = await ctx.server.store.take_landing(ctx.brand.id, code_hash(record_id), ctx.server.clock())
    if record is None:
        return _page(ctx, pages.landing_page(brand_name=ctx.brand.name, outcome=None, scopes=[]))
    types = ctx.delegation.authorization_details
    # A dropped detail whose scope is among the dropped ones went with its scope; any other found
    # no room in the grant.
    gone = tuple(text for text in record.dropped_details if scope_of(text, types, record.dropped))
    no_room = tuple(text for text in record.dropped_details if text not in gone)
    html = pages.landing_page(
        brand_name=ctx.brand.name,
        outcome=record.outcome,
        scopes=_listed(ctx, record.scopes, record.details),
        carried=_listed(ctx, record.carried, record.carried_details, among=record.scopes),
        dropped=_listed(ctx, record.dropped, gone),
        no_room=_listed(ctx, (), no_room, among=record.scopes),
        max_conditions=ctx.delegation.max_authorization_details,
    )
    return _page(ctx, html)


async def landing(request: web.Request) -> web.Response:
    """``GET {urls.landing}``: what the User's decision made true (no Brand landing page set).

    Rendered from the decision's single-use record named by ``r``, so a crafted link cannot
    make a page under our name claim a grant: an unknown, spent or expired ``r`` shows only
    that there is nothing to show.
    """
    ctx = _delegating(request)
    if ctx is None:
        return responses.not_found()
    return await _answer(ctx, request, "landing page", _show_landing(request, ctx))
