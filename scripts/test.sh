#!/usr/bin/env bash
# Set up on a fresh machine, make sure Redis answers on 127.0.0.1:6379, then run the whole test suite.
# The Redis-backed tests fail (never skip) when Redis is unreachable.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/ensure-redis.sh
exec .venv/bin/python -m pytest "$@"
