"""§5.3 the pages the User's browser sees: consent, the "connected" landing page, and the error page.

Plain HTML built with :func:`html.escape` (every value that did not come from this module is
escaped, quotes included) and one inline stylesheet. The consent page carries one inline script,
the only one the CSP allows (by its hash, :data:`SCRIPT_SOURCE`, in :mod:`gateway.handlers.oauth.consent`):
it keeps Enter in a checkbox from submitting the form. Everything works without JavaScript, and
then that Enter presses Deny, the form's first button, never Allow.
They are sized for a phone first: a viewport meta, one narrow column, wrapping long words,
and tap targets at least 48 px high.

An RFC 9396 detail is shown as a condition of its scope (its type's consent sentence, the
detail's fields put in by :func:`~gateway.protocol.authorization_details.consent_sentence` and
escaped here like every other value): inside that scope's checkbox label, so it is part of what
the box says and goes with it, and nested under the scope in the lists of the end pages.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from html import escape
from typing import Final, NamedTuple

__all__ = [
    "SCRIPT_SOURCE",
    "Choice",
    "Listed",
    "consent_page",
    "error_page",
    "landing_page",
    "settled_page",
    "too_many_attempts_page",
    "unavailable_page",
    "wrong_method_page",
]

_STYLE: Final = """
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%;text-size-adjust:100%}
body{margin:0;font:17px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1a1a;
background:#f4f4f6;overflow-wrap:anywhere}
main{max-width:32rem;margin:0 auto;padding:24px 16px 32px}
h1{font-size:1.45rem;line-height:1.25;margin:0 0 12px}
p{margin:0 0 16px}
.who,.code{font-weight:600}
.code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;letter-spacing:.08em;white-space:nowrap}
fieldset{border:0;margin:0 0 20px;padding:0}
legend{font-weight:600;margin-bottom:8px;padding:0}
label.scope{display:flex;gap:12px;align-items:flex-start;min-height:48px;padding:12px;margin:0 0 8px;
background:#fff;border:1px solid #767680;border-radius:10px;cursor:pointer}
label.scope:focus-within{outline:3px solid #1d4ed8;outline-offset:2px}
label.scope input{flex:none;width:24px;height:24px;margin:0}
.condition{display:block;margin-top:6px;padding-left:10px;border-left:3px solid #767680}
.held{color:#555}
.actions{display:flex;gap:12px;margin-bottom:20px}
button{flex:1;min-height:48px;padding:12px 16px;font:inherit;font-weight:600;border-radius:10px;
border:1px solid #1d4ed8;background:#1d4ed8;color:#fff;cursor:pointer}
button.secondary{background:#fff;color:#1d4ed8}
:focus-visible{outline:3px solid #1d4ed8;outline-offset:2px}
button:focus-visible{outline-color:#1a1a1a}
ul{padding-left:1.25rem;margin:0 0 16px}
li ul{margin:0}
.small{font-size:.9rem;color:#555}
@media (forced-colors:active){button{font-weight:400}button.primary{border-width:3px;font-weight:700}}
"""
"""Under forced colours (Windows high contrast) the browser paints every button in the same system
colours, so Allow's fill is gone; its thicker border and bold label are what still set it apart."""

_ENTER_IN_A_CHECKBOX: Final = (
    "document.addEventListener('keydown',function(e){if(e.key==='Enter'&&e.target instanceof "
    "HTMLInputElement&&e.target.type==='checkbox')e.preventDefault()})"
)
"""A browser submits a form when Enter is pressed in a checkbox (implicit submission: HTML's
"form submission", pressing the first submit button it finds enabled). On the consent page that
would end the request, so Enter there does nothing, as Space still ticks and a button still submits."""

SCRIPT_SOURCE: Final = (
    f"'sha256-{base64.b64encode(hashlib.sha256(_ENTER_IN_A_CHECKBOX.encode()).digest()).decode()}'"
)
"""The CSP ``script-src`` source that allows that one script and no other (CSP Level 3 §2.3.1 hash)."""


def _document(title: str, body: str) -> str:
    """A whole page; ``title`` is escaped here, ``body`` must already be safe HTML."""
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="robots" content="noindex">\n'
        f"<title>{escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n"
        f"<body>\n<main>\n{body}</main>\n</body>\n</html>\n"
    )


class Choice(NamedTuple):
    """One checkbox of the consent form: a scope, the card's description, and its conditions."""

    scope: str
    description: str
    conditions: Sequence[str] = ()
    """The consent sentences of the RFC 9396 details that come with the scope (plain text)."""
    held: Sequence[str] = ()
    """Those the User's earlier grant already allows, kept with the scope if it stays ticked."""


class Listed(NamedTuple):
    """One item of an end page's list: a scope's description and, nested under it, its conditions."""

    description: str
    conditions: Sequence[str] = ()


def _condition(sentence: str, *, held: bool = False) -> str:
    mark = ' <span class="held">(you already allow this)</span>' if held else ""
    return f'\n<span class="condition">{escape(sentence)}{mark}</span>'


def _boxes(name: str, choices: Sequence[Choice]) -> str:
    """A checkbox per scope; its conditions are inside its label: part of the box's accessible name,
    and nothing a person could tick on its own."""
    return "".join(
        f'<label class="scope"><input type="checkbox" name="{name}" value="{escape(choice.scope)}" checked>'
        f"<span>{escape(choice.description)}"
        f"{''.join(_condition(text) for text in choice.conditions)}"
        f"{''.join(_condition(text, held=True) for text in choice.held)}</span></label>\n"
        for choice in choices
    )


def _list(items: Sequence[Listed]) -> str:
    """A list of scopes, each scope's conditions a list nested under it."""
    rows = "".join(
        f"<li>{escape(item.description)}"
        f"{_list([Listed(text) for text in item.conditions]) if item.conditions else ''}</li>\n"
        for item in items
    )
    return f"<ul>\n{rows}</ul>\n"


def consent_page(
    *,
    agent_name: str | None,
    pa_origin: str,
    brand_name: str,
    signed_in_as: str,
    user_code: str,
    scopes: Sequence[Choice],
    carried: Sequence[Choice],
    session: str,
    action: str,
    no_room: Sequence[Listed] = (),
    max_conditions: int = 0,
) -> str:
    """The §5.3 consent form: who asks (the registered agent's name, its issuer origin, and the
    RFC 8628 §3.3.1 ``user_code`` to compare with the assistant's), as which Brand account, and
    each requested scope as a checkbox, ticked by default, with the Brand's description verbatim
    and, inside its label, the conditions (RFC 9396 details) that come with it.

    ``carried`` are the scopes of the User's live grant for this agent that the new grant would
    keep (it supersedes that grant): shown ticked under ``keep``, so the User may drop them, each
    with the conditions that grant holds. ``no_room`` are the conditions that would be left out
    were everything left ticked, a grant holding at most ``max_conditions``: said before the
    person decides.

    Enter in a checkbox does nothing (the page's one script). Deny still comes first in the form:
    without JavaScript, a browser's implicit submission (Enter in a checkbox) presses the form's
    first submit button, and that must never be Allow.
    """
    brand = escape(brand_name)
    who = escape(pa_origin)
    agent = (
        f'The assistant <span class="who">{escape(agent_name)}</span> at <span class="who">{who}</span>'
        if agent_name
        else f'The assistant at <span class="who">{who}</span>'
    )
    kept = (
        f"<fieldset>\n<legend>It may already, and will keep unless you untick it:</legend>\n"
        f"{_boxes('keep', carried)}</fieldset>\n"
        if carried
        else ""
    )
    conditional = any(choice.conditions or choice.held for choice in (*scopes, *carried))
    conditions = (
        " Where a box lists conditions, it allows only what they say, and unticking it drops them too."
        if conditional
        else ""
    )
    full = (
        f"<p>One approval holds at most {max_conditions} conditions, so if everything stays ticked, "
        f"these are left out of it:</p>\n{_list(no_room)}"
        if no_room
        else ""
    )
    body = (
        f"<h1>Allow access to your {brand} account?</h1>\n"
        f'<p>Signed in to {brand} as <span class="who">{escape(signed_in_as)}</span>.</p>\n'
        f"<p>{agent} is asking to act for you with {brand}.</p>\n"
        f'<p>Your assistant should show the code <span class="code">{escape(user_code)}</span>. '
        "If it does not, press Deny.</p>\n"
        f'<form method="post" action="{escape(action)}" aria-describedby="consent-help">\n'
        '<p id="consent-help" class="small">Untick anything you do not want to share.'
        f"{conditions} Your assistant never sees your password.</p>\n"
        f'<input type="hidden" name="session" value="{escape(session)}">\n'
        f"<fieldset>\n<legend>It asks to:</legend>\n{_boxes('scope', scopes)}</fieldset>\n"
        f"{kept}{full}"
        '<div class="actions">\n'
        '<button type="submit" name="decision" value="deny" class="secondary">Deny</button>\n'
        '<button type="submit" name="decision" value="allow" class="primary">Allow</button>\n'
        "</div>\n</form>\n"
        f"<script>{_ENTER_IN_A_CHECKBOX}</script>\n"
    )
    return _document(f"Allow access to your {brand_name} account? - {brand_name}", body)


def error_page(brand_name: str) -> str:
    """The one answer to anything wrong with a hand-off or a consent form: nothing an attacker could use."""
    body = (
        "<h1>This sign-in link is invalid or has expired</h1>\n"
        "<p>Nothing was shared. Start again from your assistant.</p>\n"
    )
    return _document(f"Sign-in link invalid or expired - {brand_name}", body)


def unavailable_page(brand_name: str) -> str:
    """The Provider could not decide (its store failed): a retry may work, nothing was shared."""
    body = (
        "<h1>Something went wrong on our side</h1>\n"
        "<p>Nothing was shared. Please try again from your assistant in a moment.</p>\n"
    )
    return _document(f"Temporarily unavailable - {brand_name}", body)


def too_many_attempts_page(brand_name: str, retry_after: int) -> str:
    """Sign-in links paused (RFC 8628 §5.1): the one answer whatever the link named, so a
    paused guesser learns nothing about which codes exist; ``retry_after`` is the ``Retry-After``."""
    minutes = max(1, -(-retry_after // 60))
    wait = "a minute" if minutes == 1 else f"{minutes} minutes"
    body = (
        "<h1>Too many attempts</h1>\n"
        "<p>Nothing was shared. To keep accounts safe, sign-in links are paused here for a while "
        "after too many that did not work.</p>\n"
        f"<p>Please wait about {wait}, then start again from your assistant.</p>\n"
    )
    return _document(f"Too many attempts - {brand_name}", body)


def wrong_method_page(brand_name: str) -> str:
    """A ``GET`` on the consent URL: someone opened the address by hand (or bookmarked it); only the
    Brand's login can bring a person here, by posting its sign-in proof."""
    brand = escape(brand_name)
    body = (
        "<h1>Open this from your assistant</h1>\n"
        f"<p>This page only works when {brand}'s sign-in page sends you here. "
        f"Go back to your assistant and open its link again: it takes you to {brand}'s sign-in "
        "first. Nothing was shared.</p>\n"
    )
    return _document(f"Open this from your assistant - {brand_name}", body)


def settled_page(*, brand_name: str, outcome: str, scopes: Sequence[Listed]) -> str:
    """A valid sign-in for a request that was already decided (the link re-opened): what is true now.

    ``outcome`` is ``approved`` (``scopes``: what that approval allows, with its conditions, shown
    only to the Brand user who approved it) or ``denied``.
    """
    brand = escape(brand_name)
    if outcome == "approved":
        allowed = f"<p>It allows your assistant to:</p>\n{_list(scopes)}" if scopes else ""
        body = (
            "<h1>Already approved</h1>\n"
            f"<p>This request was already approved, so there is nothing more to decide. "
            f"Your assistant can act for you with {brand}.</p>\n{allowed}<p>You can close this page.</p>\n"
        )
        return _document(f"Already approved - {brand_name}", body)
    body = (
        "<h1>Already declined</h1>\n"
        "<p>This request was already declined: it shared nothing, and it cannot be approved now. "
        "To connect, start again from your assistant. You can close this page.</p>\n"
    )
    return _document(f"Already declined - {brand_name}", body)


def landing_page(
    *,
    brand_name: str,
    outcome: str | None,
    scopes: Sequence[Listed],
    carried: Sequence[Listed] = (),
    dropped: Sequence[Listed] = (),
    no_room: Sequence[Listed] = (),
    max_conditions: int = 0,
) -> str:
    """Where the User ends up when the Brand sets no landing page of its own: what is now true.

    Every argument comes from the server-side record of the decision (``outcome`` ``None`` when
    the link's record is unknown, spent or expired) and scope descriptions and consent sentences
    the caller looked up in the Brand's configuration: nothing from the query string is ever
    shown. ``carried`` lists what was kept from the earlier grant (a scope, or conditions of a
    scope asked again), ``dropped`` what the new grant no longer allows, and ``no_room`` the
    earlier conditions of scopes still allowed that found no room in a grant of at most
    ``max_conditions``.
    """
    brand = escape(brand_name)
    if outcome == "approved":
        kept = f"<p>Of these, kept from your earlier approval:</p>\n{_list(carried)}" if carried else ""
        gone = (
            "<p>Your earlier approval is replaced by this one, so once your assistant connects it "
            f"can no longer:</p>\n{_list(dropped)}"
            if dropped
            else ""
        )
        full = (
            f"<p>One approval holds at most {max_conditions} conditions, so these were left out of it:</p>\n"
            f"{_list(no_room)}"
            if no_room
            else ""
        )
        body = (
            f"<h1>You're connected</h1>\n<p>Your assistant can now act for you with {brand}. "
            f"It may:</p>\n{_list(scopes)}{kept}{gone}{full}<p>You can close this page.</p>\n"
        )
        return _document(f"You're connected - {brand_name}", body)
    if outcome in {"denied", "nothing_ticked"}:
        what = (
            "You pressed Allow with nothing ticked, so this request was declined and nothing new was shared."
            if outcome == "nothing_ticked"
            else "You declined this request, so nothing new was shared."
        )
        if scopes:
            still = (
                "<p>Your earlier approval still stands: your assistant can still act for you with "
                f"{brand}, and may:</p>\n{_list(scopes)}"
            )
            title = "Request declined"
        else:
            still = f"<p>Your assistant cannot act for you with {brand}.</p>\n"
            title = "Nothing was shared"
        body = f"<h1>{title}</h1>\n<p>{what}</p>\n{still}<p>You can close this page.</p>\n"
        return _document(f"{title} - {brand_name}", body)
    body = (
        "<h1>This page has expired</h1>\n"
        "<p>This page shows a decision only once, just after it is made, and this link has none "
        "to show. Opening it changed nothing. You can close this page.</p>\n"
    )
    return _document(f"Page expired - {brand_name}", body)
