"""Reading a configuration document: a YAML file, or a stream that is the file itself or what
``helm template`` renders (the chart's ConfigMap carries it under :data:`CHART_CONFIG_KEY`).

The only part that touches files and YAML syntax, apart from the checks: what comes out is a parsed
document, checked for nothing but being readable YAML with something in it, for
:mod:`gateway.config.build` to check and build.
"""

from __future__ import annotations

import os
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import yaml

from gateway.config.errors import ConfigError


def _yaml_trouble(exc: yaml.YAMLError) -> str:
    """PyYAML's account of a syntax error: where, what, and what it was reading."""
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return f"not valid YAML: {exc}"
    mark = exc.problem_mark
    reason = f"not valid YAML at line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    if exc.context is not None:
        since = exc.context_mark
        start = f" from line {since.line + 1}, column {since.column + 1}" if since is not None else ""
        reason += f" ({exc.context}{start})"
    if "'\\t'" in (exc.problem or ""):
        reason += "; YAML indents with spaces, never tabs"
    return reason


def read_config_document(source: str | os.PathLike[str] | Traversable) -> Any:
    """The parsed YAML of a configuration file, checked for nothing but being readable YAML
    with something in it; any failure is a :class:`ConfigError` (with an empty ``path``)."""
    file = source if isinstance(source, Traversable) else Path(source)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read the file: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError("", "the file is not UTF-8 text") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("", _yaml_trouble(exc)) from None
    if raw is None:
        raise ConfigError("", "the file is empty" if not text.strip() else "the file holds only comments")
    return raw


CHART_CONFIG_KEY = "config.yaml"
"""The key of the Helm chart's ConfigMap that holds the gateway's config.yaml."""


def config_document_from_stream(text: str) -> Any:
    """The gateway YAML in ``text``: the file itself, or what ``helm template`` renders.

    ``helm template … | pact-gateway check-config -`` checks a release's config before rollout,
    when no pod exists yet to check it in. A stream holding Kubernetes manifests is read for the
    one ConfigMap carrying ``data["config.yaml"]`` (the chart's); anything else is the gateway
    YAML itself. Failures are a :class:`ConfigError` with an empty ``path``, as for a file.
    """
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise ConfigError("", _yaml_trouble(exc)) from None
    if not documents:
        raise ConfigError("", "the input is empty" if not text.strip() else "the input holds only comments")
    manifests = [doc for doc in documents if isinstance(doc, dict) and "apiVersion" in doc and "kind" in doc]
    if not manifests:
        if len(documents) > 1:
            raise ConfigError("", f"the input holds {len(documents)} YAML documents; a config is one")
        return documents[0]
    carried = [
        doc["data"][CHART_CONFIG_KEY]
        for doc in manifests
        if doc["kind"] == "ConfigMap"
        and isinstance(doc.get("data"), dict)
        and isinstance(doc["data"].get(CHART_CONFIG_KEY), str)
    ]
    if len(carried) != 1:
        found = "no ConfigMap" if not carried else f"{len(carried)} ConfigMaps"
        raise ConfigError(
            "",
            f"the input holds Kubernetes manifests but {found} with data[{CHART_CONFIG_KEY!r}];"
            " render one release of the pact-gateway chart"
            " (helm template … --show-only templates/configmap.yaml)",
        )
    return config_document_from_stream(carried[0])
