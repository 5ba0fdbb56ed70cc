"""The bench's §5.3 flow driver reads the gateway's own consent page as a browser would submit it.

The whole flow over HTTP is run by the smoke run (``test_throughput``); these pin the two
pure parts it rests on without starting anything.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import loadgen
from bench.delegation import SCOPES, ConsentForm
from gateway.oauth.pages import Choice, consent_page


def test_s5_3_consent_form_posts_the_session_and_every_ticked_scope() -> None:
    page = consent_page(
        agent_name=None,
        signed_in_as="jane",
        user_code="WDJB-MJHT",
        carried=[],
        pa_origin="https://pa.bench.invalid",
        brand_name="Acme & Sons",
        scopes=[Choice(scope, text) for scope, text in SCOPES.items()],
        session="WDJB-MJHT.s3cr&t",
        action="https://gw.test/a2a/acme/oauth/consent/decision",
    )
    form = ConsentForm()
    form.feed(page)
    assert form.action == "https://gw.test/a2a/acme/oauth/consent/decision"
    assert form.fields == [("session", "WDJB-MJHT.s3cr&t"), *(("scope", scope) for scope in SCOPES)]


def test_s5_3_an_unticked_scope_is_not_posted() -> None:
    form = ConsentForm()
    form.feed(
        '<form action="decision"><input type="hidden" name="session" value="s">'
        '<input type="checkbox" name="scope" value="orders:read">'
        '<input type="checkbox" name="scope" value="orders:cancel" checked></form>'
    )
    assert form.action == "decision"
    assert form.fields == [("session", "s"), ("scope", "orders:cancel")]


def test_s5_4_a_user_without_a_delegation_token_of_its_own_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A grant belongs to one (personal agent, sub): the load generator never lends one user's token.
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(["t0", "t1"]))
    with pytest.raises(SystemExit):
        loadgen.main(
            [
                *("--url", "http://127.0.0.1:9/a2a/acme/message:send"),
                *("--key-file", str(tmp_path / "unused.json")),
                *("--delegation-file", str(tokens), "--subs", "3"),
            ]
        )
    assert "--subs 3 is more than the 2 delegation tokens" in capsys.readouterr().err
