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
# Debian packages the tests drive, each installed only when its command is missing (root and apt-get
# needed; elsewhere a message says what to install). `apt-get update` runs once, if anything is missing.
APT_UPDATED=no
debian_package() {  # COMMAND PACKAGE WHAT-FAILS-WITHOUT-IT
  command -v "$1" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    if [ "$APT_UPDATED" = no ]; then
      apt-get update
      APT_UPDATED=yes
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$2"
  else
    echo "setup.sh: $1 is missing and cannot be installed here (needs root and apt-get)." >&2
    echo "setup.sh: install Debian's '$2' package; $3 fail(s) without it under CI=true." >&2
  fi
}
# The consent-page browser tests drive Debian's Chromium through Playwright (Playwright's own browser
# download, `playwright install`, is never used).
debian_package /usr/bin/chromium chromium "the browser tests"
# tests/bench/test_turn_count.py counts instructions per turn under valgrind (callgrind), the CI guard
# of docs/performance.md's instruction count.
debian_package valgrind valgrind "the instruction-count guard"
# tests/deploy/test_prometheus_rules.py checks the chart's PrometheusRule with promtool (`check rules`,
# and `test rules` firing every alert); Debian's `prometheus` package brings it.
debian_package promtool prometheus "the alert-rule tests"
# The browser tests inject axe-core (npm, MPL-2.0) into every page they open and require no WCAG 2.1
# AA violation; the pinned version goes into .venv/node, beside the Python tools, never into the repo.
AXE_VERSION=4.14.1
if [ ! -f .venv/node/node_modules/axe-core/axe.min.js ] \
  || ! grep -q "\"version\": \"$AXE_VERSION\"" .venv/node/node_modules/axe-core/package.json; then
  debian_package npm npm "the browser tests' accessibility audits"
  if command -v npm >/dev/null 2>&1; then
    npm install --silent --no-save --no-audit --no-fund --prefix .venv/node "axe-core@$AXE_VERSION"
  fi
fi
