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
# tests/bench/test_turn_count.py counts instructions per turn under Debian's valgrind (callgrind), the
# CI guard of docs/performance.md's instruction count.
if ! command -v valgrind >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends valgrind
  else
    echo "setup.sh: valgrind is missing and cannot be installed here (needs root and apt-get)." >&2
    echo "setup.sh: install Debian's 'valgrind' package; the instruction-count guard fails without it under CI=true." >&2
  fi
fi
