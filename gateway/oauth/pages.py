"""§5.3 the pages the User's browser sees: consent, the "connected" landing page, and the error page.

Plain HTML built with :func:`html.escape` (every value that did not come from this module is
escaped, quotes included), one inline stylesheet, no script: the pages work without
JavaScript and are served under a CSP that allows none (:mod:`gateway.oauth.consent`).
They are sized for a phone first: a viewport meta, one narrow column, wrapping long words,
and tap targets at least 48 px high.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import Final

__all__ = ["consent_page", "error_page", "landing_page", "too_many_attempts_page", "unavailable_page"]

_STYLE: Final = """
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%;text-size-adjust:100%}
body{margin:0;font:17px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1a1a1a;
background:#f4f4f6;overflow-wrap:anywhere}
main{max-width:32rem;margin:0 auto;padding:24px 16px 32px}
h1{font-size:1.45rem;line-height:1.25;margin:0 0 12px}
p{margin:0 0 16px}
.who{font-weight:600}
fieldset{border:0;margin:0 0 20px;padding:0}
legend{font-weight:600;margin-bottom:8px;padding:0}
label.scope{display:flex;gap:12px;align-items:flex-start;min-height:48px;padding:12px;margin:0 0 8px;
background:#fff;border:1px solid #d0d0d8;border-radius:10px;cursor:pointer}
label.scope input{flex:none;width:24px;height:24px;margin:0}
.actions{display:flex;flex-direction:column;gap:12px;margin-bottom:20px}
button{width:100%;min-height:48px;padding:12px 16px;font:inherit;font-weight:600;border-radius:10px;
border:1px solid #1d4ed8;background:#1d4ed8;color:#fff;cursor:pointer}
button.secondary{background:#fff;color:#1d4ed8}
ul{padding-left:1.25rem;margin:0 0 16px}
.small{font-size:.9rem;color:#555}
"""


def _document(title: str, body: str) -> str:
    """A whole page; ``title`` is escaped here, ``body`` must already be safe HTML."""
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="robots" content="noindex">\n'
        f"<title>{escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n"
        f"<body>\n<main>\n{body}</main>\n</body>\n</html>\n"
    )


def consent_page(
    *,
    pa_origin: str,
    brand_name: str,
    scopes: Sequence[tuple[str, str]],
    session: str,
    action: str,
) -> str:
    """The §5.3 consent form: who asks (the personal agent's issuer origin), for which Brand, and
    each requested scope as a checkbox, ticked by default, with the Brand's description verbatim."""
    boxes = "".join(
        f'<label class="scope"><input type="checkbox" name="scope" value="{escape(scope_id)}" checked>'
        f"<span>{escape(description)}</span></label>\n"
        for scope_id, description in scopes
    )
    brand = escape(brand_name)
    body = (
        f"<h1>Allow access to your {brand} account?</h1>\n"
        f'<p>The assistant at <span class="who">{escape(pa_origin)}</span> is asking to act for you '
        f"with {brand}.</p>\n"
        f'<form method="post" action="{escape(action)}">\n'
        f'<input type="hidden" name="session" value="{escape(session)}">\n'
        f"<fieldset>\n<legend>It may:</legend>\n{boxes}</fieldset>\n"
        '<div class="actions">\n'
        '<button type="submit" name="decision" value="allow">Allow</button>\n'
        '<button type="submit" name="decision" value="deny" class="secondary">Deny</button>\n'
        "</div>\n</form>\n"
        '<p class="small">Untick anything you do not want to share. '
        "Your assistant never sees your password.</p>\n"
    )
    return _document(f"Allow access to {brand_name}?", body)


def error_page() -> str:
    """The one answer to anything wrong with a hand-off or a consent form: nothing an attacker could use."""
    body = (
        "<h1>This sign-in link is invalid or has expired</h1>\n"
        "<p>Nothing was shared. Start again from your assistant.</p>\n"
    )
    return _document("Sign-in link invalid or expired", body)


def unavailable_page() -> str:
    """The Provider could not decide (its store failed): a retry may work, nothing was shared."""
    body = (
        "<h1>Something went wrong on our side</h1>\n"
        "<p>Nothing was shared. Please try again from your assistant in a moment.</p>\n"
    )
    return _document("Temporarily unavailable", body)


def too_many_attempts_page(retry_after: int) -> str:
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
    return _document("Too many attempts", body)


def landing_page(*, brand_name: str, status: str, scopes: Sequence[str]) -> str:
    """Where the User ends up when the Brand sets no landing page of its own.

    ``status`` only picks one of the fixed texts, and ``scopes`` are descriptions the caller
    looked up: nothing from the query string is ever shown as it came.
    """
    brand = escape(brand_name)
    if status == "approved":
        items = "".join(f"<li>{escape(description)}</li>\n" for description in scopes)
        allowed = f"<p>Your assistant may now:</p>\n<ul>\n{items}</ul>\n" if items else ""
        body = (
            f"<h1>You're connected</h1>\n<p>Your assistant can now act for you with {brand}.</p>\n"
            f"{allowed}<p>You can close this page.</p>\n"
        )
        return _document("You're connected", body)
    if status == "denied":
        body = (
            "<h1>Nothing was shared</h1>\n"
            f"<p>You declined, so your assistant cannot act for you with {brand}. "
            "You can close this page.</p>\n"
        )
        return _document("Nothing was shared", body)
    return _document("All done", "<h1>All done</h1>\n<p>You can close this page.</p>\n")
