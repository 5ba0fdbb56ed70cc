#!/usr/bin/env bash
# The tests talk to a real Redis at 127.0.0.1:6379. Start one if this machine has redis-server but
# nothing answers; exit non-zero if Redis still cannot be reached, so CI fails instead of skipping.
set -euo pipefail
ping() { .venv/bin/python - <<'PY'
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", 6379), timeout=1) as s:
        s.sendall(b"PING\r\n")
        sys.exit(0 if s.recv(16).startswith(b"+PONG") else 1)
except OSError:
    sys.exit(1)
PY
}
if ping; then exit 0; fi
if command -v redis-server >/dev/null 2>&1; then
  mkdir -p /tmp/pact-gateway-redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /tmp/pact-gateway-redis --logfile /tmp/pact-gateway-redis/redis.log
  for _ in $(seq 1 50); do ping && exit 0; sleep 0.1; done
fi
echo "ensure-redis: no Redis answers on 127.0.0.1:6379 and none could be started" >&2
exit 1
