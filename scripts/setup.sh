#!/usr/bin/env bash
# Creates .venv (if missing) and installs pact-gateway with its test and lint tools from pyproject.toml.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.installed-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e ".[test,lint]"
  rm -f .venv/.installed-* && touch "$stamp"
fi
