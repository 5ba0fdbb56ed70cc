"""axe-core over a page in the browser tests: every page a person can reach must have no WCAG 2.1 A/AA
violation (issue 18).

axe-core is the npm package (MPL-2.0) that scripts/setup.sh installs, pinned, into ``.venv/node``;
it is evaluated in the page through the DevTools protocol, so the pages' CSP (which allows no
script) stays as it is. Missing, the check skips on a workstation and fails under ``CI=true``,
like the browser itself.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any, Final

import pytest
from playwright.async_api import Page

__all__ = ["AXE_SOURCE", "WCAG_21_AA", "assert_accessible"]

AXE_SOURCE: Final = Path(__file__).resolve().parents[2] / ".venv/node/node_modules/axe-core/axe.min.js"
WCAG_21_AA: Final = ("wcag2a", "wcag2aa", "wcag21a", "wcag21aa")
"""The axe rule tags of WCAG 2.0 and 2.1, levels A and AA."""


@cache
def _axe() -> str:
    if not AXE_SOURCE.is_file():
        message = f"{AXE_SOURCE} is missing: run scripts/setup.sh (it installs npm's axe-core)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return AXE_SOURCE.read_text(encoding="utf-8")


async def assert_accessible(page: Page) -> None:
    """No axe violation of :data:`WCAG_21_AA` on ``page`` as it is now; a failure names each rule and
    the elements that break it."""
    if not await page.evaluate("() => typeof window.axe === 'object'"):
        await page.evaluate(_axe())
    result: dict[str, Any] = await page.evaluate(
        "tags => axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})",
        list(WCAG_21_AA),
    )
    violations = [
        f"{violation['id']} ({violation['impact']}): {[node['target'] for node in violation['nodes']]}"
        for violation in result["violations"]
    ]
    assert violations == [], f"axe on {page.url}"
