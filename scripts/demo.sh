#!/usr/bin/env bash
# Set up on a fresh machine, then run `pact-gateway demo` (gateway + sample bot + demo personal agent).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/pact-gateway demo "$@"
