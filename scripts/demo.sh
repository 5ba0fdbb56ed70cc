#!/usr/bin/env bash
# Set up on a fresh machine (the package and its runtime dependencies only), then run `pact-gateway demo`
# (gateway + sample bot + demo personal agent).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --runtime
exec "${VENV:-.venv}/bin/pact-gateway" demo "$@"
