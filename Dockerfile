# syntax=docker/dockerfile:1
#
# pact-gateway container image (no public image is published). From the repository's root, with
# BuildKit (Docker 23 or later; the bind mount below needs it):
#   docker build -t pact-gateway:local .
#   docker run --rm pact-gateway:local demo --check
#   docker run --rm pact-gateway:local keys generate > signing-key.json
#   docker run --rm -p 8080:8080 -p 9090:9090 \
#     -e PACT_SIGNING_KEY="$(cat signing-key.json)" -e ACME_BOT_TOKEN=the-bot-token \
#     -v "$PWD/config/example.yaml:/etc/pact-gateway/config.yaml:ro" \
#     pact-gateway:local
# config/example.yaml names those two variables (${PACT_SIGNING_KEY}, ${ACME_BOT_TOKEN}): serve
# refuses to start without them. For a cluster, tag it for your registry and push it
# (docker build -t REGISTRY/pact-gateway:TAG . && docker push REGISTRY/pact-gateway:TAG).
# The Helm chart in deploy/helm/pact-gateway runs this image as user 10001 with a read-only
# root filesystem, passing `serve --config /etc/pact-gateway/config.yaml [--workers N]`.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- builder: a wheel of the project and of every dependency -------------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# .dockerignore keeps the context to pyproject.toml, README/LICENSE and the packages.
COPY . .
# With the optional OpenTelemetry export, so `tracing:` in the configuration works in the image.
RUN pip wheel --wheel-dir /wheels ".[otel]"

# ---- runtime: the wheels installed into a venv, run as an unprivileged user -------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="pact-gateway" \
      org.opencontainers.image.description="PACT 1.0 reverse-proxy authentication gateway (A2A 1.0 HTTP+JSON)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="0.1.0"

ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Install from the builder's wheels only (no index, nothing compiled here); the wheels are
# bind-mounted so they never land in a layer. The venv gets no pip of its own. The installed
# package is then smoke-tested as an operator meets it: the demo (its configuration is package
# data) runs its whole curl session once, from outside any checkout (tests/test_packaging.py
# does the same with a wheel built from this build context).
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m venv --without-pip "$VIRTUAL_ENV" \
 && python -m pip --python "$VIRTUAL_ENV/bin/python" install --no-index --find-links=/wheels "pact-gateway[otel]" \
 && groupadd --system --gid 10001 pact \
 && useradd --system --uid 10001 --gid 10001 --no-create-home \
      --home-dir /nonexistent --shell /usr/sbin/nologin pact \
 && mkdir -p /etc/pact-gateway/keys \
 && pact-gateway --version \
 && pact-gateway demo --check --port 18080 --bot-port 19100 > /dev/null

# A read-only root filesystem needs nothing writable but /tmp (an emptyDir in the chart).
WORKDIR /tmp
USER 10001:10001

# 8080: A2A listener (listen.port); 9090: /metrics, /healthz, /readyz (metrics.port).
EXPOSE 8080 9090

ENTRYPOINT ["pact-gateway"]
CMD ["serve", "--config", "/etc/pact-gateway/config.yaml"]
