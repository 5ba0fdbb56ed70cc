#!/usr/bin/env bash
# Creates .venv (if missing) and installs pact-gateway with its test and lint tools and the optional
# OpenTelemetry export (tested too) from pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[test,lint,otel]"
  rm -f .venv/.installed-* && touch "$stamp"
fi
# The consent-page browser test (tests/oauth/test_consent_browser.py) drives Debian's Chromium through
# Playwright; Playwright's own browser download (`playwright install`) is never used.
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium
  else
    echo "setup.sh: /usr/bin/chromium is missing and cannot be installed here (needs root and apt-get)." >&2
    echo "setup.sh: install Debian's 'chromium' package; the consent browser test fails without it under CI=true." >&2
  fi
fi
# The browser tests inject axe-core (npm, MPL-2.0) into every page they open and require no WCAG 2.1
# AA violation; the pinned version goes into .venv/node, beside the Python tools, never into the repo.
AXE_VERSION=4.14.1
if [ ! -f .venv/node/node_modules/axe-core/axe.min.js ] \
  || ! grep -q "\"version\": \"$AXE_VERSION\"" .venv/node/node_modules/axe-core/package.json; then
  if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends npm
  fi
  if command -v npm >/dev/null 2>&1; then
    npm install --silent --no-save --no-audit --no-fund --prefix .venv/node "axe-core@$AXE_VERSION"
  else
    echo "setup.sh: npm is missing, so axe-core is not installed; the browser tests fail without it under CI=true." >&2
  fi
fi
