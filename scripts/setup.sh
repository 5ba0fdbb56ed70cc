#!/usr/bin/env bash
# Creates the virtual environment (if missing) and installs pact-gateway into it from pyproject.toml.
#
#   bash scripts/setup.sh             the package with its test and lint tools, the optional OpenTelemetry
#                                     export (tested too), and the browser the consent-page tests drive
#   bash scripts/setup.sh --runtime   the package and its runtime dependencies only: what the demo needs
#
# VENV names the environment (default .venv). A stamp per pyproject.toml's hash makes a second run free;
# the full install's stamp also stands for the runtime one.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
hash=$(sha256sum pyproject.toml | cut -c1-16)
if [ "${1:-}" = "--runtime" ]; then
  if [ ! -f "$VENV/.installed-$hash" ] && [ ! -f "$VENV/.installed-runtime-$hash" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
    "$VENV/bin/python" -m pip install --quiet -e .
    rm -f "$VENV"/.installed-runtime-* && touch "$VENV/.installed-runtime-$hash"
  fi
  exit 0
fi
if [ ! -f "$VENV/.installed-$hash" ]; then
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
  "$VENV/bin/python" -m pip install --quiet -e ".[test,lint,otel]"
  rm -f "$VENV"/.installed-* && touch "$VENV/.installed-$hash"
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
# tests/deploy/test_prometheus_rules.py checks the chart's PrometheusRule with Debian's promtool
# (`promtool check rules`, and `promtool test rules` firing every alert); the `prometheus` package
# brings it.
if ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
  else
    echo "setup.sh: promtool is missing and cannot be installed here (needs root and apt-get)." >&2
    echo "setup.sh: install Debian's 'prometheus' package; the alert-rule tests fail without it under CI=true." >&2
  fi
fi
