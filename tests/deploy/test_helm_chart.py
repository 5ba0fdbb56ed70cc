"""The Helm chart in deploy/helm/pact-gateway, linted and rendered in-process.

helm-python-sdk (import name ``helm_python``) embeds Helm's Go SDK, so linting and
rendering need neither a ``helm`` binary nor a cluster. Every rendered manifest is checked
against the Kubernetes OpenAPI schemas (``kubernetes_validate``, strict mode), and the
rendered config.yaml is fed to the gateway's own loader with the environment the pod would
actually get from its Secrets.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import promql_parser
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import gateway
from gateway.config import SCHEMA, LimitsConfig, load_config
from gateway.ops.metrics import Metrics
from gateway.process.admin import AdminMetrics
from gateway.redis_url import ClusterAddress, parse_redis_url
from tests.support.delegation import new_provider_key_pem

Manifest = dict[str, Any]

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "deploy" / "helm" / "pact-gateway"
SCHEMA_SCRIPT = REPO_ROOT / "scripts" / "gen_chart_schema.py"
DOCKERFILE = REPO_ROOT / "Dockerfile"
RELEASE = "pg"
NAMESPACE = "support"
FULLNAME = "pg-pact-gateway"
KUBE_VERSION = "1.33.0"
ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - the gateway's bind address inside the pod

# Secrets that exist in the cluster before the release (the existingSecret variants).
EXISTING_SECRETS: dict[str, dict[str, str]] = {
    "bot-tokens": {"ACME_BOT_TOKEN": "acme-from-existing", "GLOBEX_BOT_TOKEN": "globex-from-existing"},
    "redis-auth": {"password": "redis-from-existing"},
    "redis-cluster-auth": {"password": "cluster-from-existing", "seeds": "n1.redis:6379,n2.redis:6379"},
}

_GATEWAY_CONFIG: dict[str, Any] = {
    "public_url": "https://support.example-provider.com",
    "provider": {
        "organization": "Example Provider",
        "url": "https://example-provider.com",
        "audience": "pact-gateway.example-provider",
    },
    "listen": {"host": ALL_INTERFACES},
    "personal_agents": {
        "policy": "allowlist",
        "registered": [
            {"issuer": "https://pa.example.com", "jwks_uri": "https://pa.example.com/.well-known/jwks.json"}
        ],
        "jwks": {"max_ttl": 86400, "max_bytes": 1048576},
    },
    "cache": {
        "url": "rediss://:${REDIS_PASSWORD}@redis.data.svc.cluster.local:6380/0",
        "conversation_ttl": 86400,
        "closed_ttl": 1209600,
    },
    "limits": {"max_body_bytes": 1048576, "request_timeout": 45.5},
    "logging": {"level": "INFO", "format": "json", "access_log": True},
    "brands": [
        {
            "id": "acme",
            "name": "Acme Support",
            "description": "Orders and returns.",
            "version": "1.0.0",
            "domain": "support.acme.example",
            "upstream": {
                "url": "http://acme-bot.support.svc.cluster.local:9000/chat",
                "timeout": 10,
                "headers": {"Authorization": "Bearer ${ACME_BOT_TOKEN}"},
            },
        },
        {
            "id": "globex",
            "name": "Globex Help",
            "description": "Billing questions.",
            "version": "2.1.0",
            "upstream": {
                "url": "https://bot.globex.example/v1/chat",
                "headers": {"X-Api-Key": "${GLOBEX_BOT_TOKEN}"},
            },
        },
    ],
}

# Every optional feature of the chart switched on.
FULL_VALUES: dict[str, Any] = {
    "config": _GATEWAY_CONFIG,
    "replicaCount": 3,
    "workers": 4,
    "commonLabels": {"team": "support"},
    "commonAnnotations": {"owner": "support-platform"},
    "secrets": {"env": {"ACME_BOT_TOKEN": "acme-token", "GLOBEX_BOT_TOKEN": "globex-token"}},
    "redis": {"password": "redis-pass"},
    "signingKeys": {"existingSecret": "pact-gateway-signing-keys"},
    "extraEnv": [{"name": "TZ", "value": "UTC"}],
    "extraVolumes": [{"name": "ca", "configMap": {"name": "corporate-ca"}}],
    "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/ssl/corporate", "readOnly": True}],
    "imagePullSecrets": [{"name": "regcred"}],
    "serviceAccount": {"annotations": {"iam.gke.io/gcp-service-account": "gw@example.iam"}},
    "podAnnotations": {"example.com/scrape": "false"},
    "podLabels": {"tier": "edge"},
    "priorityClassName": "high-priority",
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "edge", "effect": "NoSchedule"}],
    "affinity": {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 100,
                    "podAffinityTerm": {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "pact-gateway"}},
                    },
                }
            ]
        }
    },
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
    ],
    "startupProbe": {"enabled": True},
    "terminationGracePeriodSeconds": 45,
    "lifecycle": {"preStop": {"sleep": {"seconds": 15}}, "postStart": {"sleep": {"seconds": 1}}},
    "service": {"annotations": {"example.com/lb": "internal"}},
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
        "hosts": [{"host": "support.example-provider.com", "paths": [{"path": "/", "pathType": "Prefix"}]}],
        "tls": [{"secretName": "pact-gateway-tls", "hosts": ["support.example-provider.com"]}],
    },
    "autoscaling": {
        "enabled": True,
        "minReplicas": 2,
        "maxReplicas": 6,
        "targetCPUUtilizationPercentage": 70,
        "targetMemoryUtilizationPercentage": 80,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
    },
    "podDisruptionBudget": {"enabled": True, "maxUnavailable": 1},
    "metrics": {
        "serviceMonitor": {
            "enabled": True,
            "namespace": "monitoring",
            "labels": {"release": "kube-prometheus-stack"},
            "interval": "15s",
            "scrapeTimeout": "5s",
            "relabelings": [{"action": "replace", "targetLabel": "cluster", "replacement": "eu-1"}],
        },
        "prometheusRule": {
            "enabled": True,
            "labels": {"release": "kube-prometheus-stack"},
            "annotations": {"example.com/owner": "sre"},
            "alertLabels": {"team": "support"},
            "alerts": {"botErrors": {"threshold": 0.2, "window": "10m", "for": "5m", "severity": "critical"}},
            "extraRules": [
                {"record": "pact:requests:rate5m", "expr": "sum by (brand) (rate(pact_requests_total[5m]))"}
            ],
        },
        "grafanaDashboard": {"enabled": True, "annotations": {"grafana_folder": "PACT"}},
    },
    "networkPolicy": {
        "enabled": True,
        "ingress": {"from": [{"namespaceSelector": {"matchLabels": {"name": "ingress-nginx"}}}]},
        "egress": {
            "redis": {"port": 6380},
            "https": {"except": ["10.0.0.0/8"]},
            "upstreams": [
                {"ports": [9000], "cidrs": ["10.20.0.0/16"]},
                {"ports": [9000], "to": [{"podSelector": {"matchLabels": {"app": "acme-bot"}}}]},
            ],
            "extraRules": [{"ports": [{"port": 4317, "protocol": "TCP"}]}],
        },
    },
}

# Bot tokens and the Redis password come from Secrets that already exist.
EXISTING_SECRET_VALUES: dict[str, Any] = {
    "config": _GATEWAY_CONFIG,
    "replicaCount": 2,
    "secrets": {"existingSecret": "bot-tokens", "env": {"IGNORED": "not-rendered"}},
    "redis": {"existingSecret": "redis-auth", "existingSecretPasswordKey": "password", "password": "ignored"},
    "signingKeys": {"existingSecret": "pact-gateway-signing-keys"},
}

EXAMPLE_FILE = CHART_DIR / "values-example.yaml"
EXAMPLE_VALUES: dict[str, Any] = yaml.safe_load(EXAMPLE_FILE.read_text(encoding="utf-8"))
"""The chart's example release: values.yaml ships no config and no image (issue 19 rows 5 and 6),
so every render here starts from it, as ``helm … -f values-example.yaml -f more.yaml`` would."""

SCENARIOS: dict[str, dict[str, Any]] = {
    "example": {},
    "full": FULL_VALUES,
    "existing-secrets": EXISTING_SECRET_VALUES,
}


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _parse(rendered: Mapping[str, str]) -> list[Manifest]:
    docs: list[Manifest] = []
    for path, text in sorted(rendered.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc is not None:
                assert isinstance(doc, dict), f"{path} rendered a non-mapping document"
                docs.append(doc)
    return docs


def _render_text(chart: helm.Chart, values: Mapping[str, Any]) -> dict[str, str]:
    """``helm template -f values-example.yaml`` with ``values`` layered over the example."""
    return chart.render(_merge(EXAMPLE_VALUES, values), name=RELEASE, namespace=NAMESPACE)


def _render(chart: helm.Chart, values: Mapping[str, Any]) -> list[Manifest]:
    return _parse(_render_text(chart, values))


def _all(docs: list[Manifest], kind: str) -> list[Manifest]:
    return [doc for doc in docs if doc["kind"] == kind]


def _one(docs: list[Manifest], kind: str) -> Manifest:
    found = _all(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def _container(docs: list[Manifest]) -> Manifest:
    containers: list[Manifest] = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["gateway"]
    return containers[0]


def _pod_annotations(docs: list[Manifest]) -> dict[str, str]:
    annotations: dict[str, str] = _one(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    return annotations


def _secret_data(docs: list[Manifest], name: str) -> dict[str, str] | None:
    """A Secret as the kubelet sees it: rendered by the chart, else one of EXISTING_SECRETS."""
    for secret in _all(docs, "Secret"):
        if secret["metadata"]["name"] == name:
            return {key: base64.b64decode(value).decode() for key, value in secret.get("data", {}).items()}
    return EXISTING_SECRETS.get(name)


def _pod_environ(docs: list[Manifest]) -> dict[str, str]:
    """The gateway container's environment, resolved the way Kubernetes resolves it."""
    container = _container(docs)
    environ: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "secretRef" in source:
            data = _secret_data(docs, source["secretRef"]["name"])
            assert data is not None, f"envFrom names an unknown Secret {source['secretRef']['name']}"
            environ.update(data)
    for var in container.get("env", []):
        if "value" in var:
            environ[var["name"]] = var["value"]
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            data = _secret_data(docs, ref["name"])
            assert data is not None, f"env {var['name']} names an unknown Secret {ref['name']}"
            assert ref["key"] in data, f"env {var['name']} names a missing key {ref['key']}"
            environ[var["name"]] = data[ref["key"]]
    return environ


def _gateway_config(docs: list[Manifest]) -> Any:
    (configmap,) = [doc for doc in _all(docs, "ConfigMap") if doc["metadata"]["name"] == FULLNAME]
    return yaml.safe_load(configmap["data"]["config.yaml"])


def _iter_named_ports(docs: list[Manifest]) -> Iterator[tuple[str, int]]:
    for port in _container(docs)["ports"]:
        yield port["name"], port["containerPort"]


@pytest.fixture(scope="module")
def chart() -> Iterator[helm.Chart]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="module")
def rendered(chart: helm.Chart) -> dict[str, list[Manifest]]:
    return {name: _render(chart, values) for name, values in SCENARIOS.items()}


# ---- lint and schema ---------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["example", "full", "existing-secrets"])
def test_helm_lint_passes(scenario: str) -> None:
    values = _merge(EXAMPLE_VALUES, SCENARIOS[scenario])
    report = helm.lint(CHART_DIR, values, strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["total_charts_linted"] == 1
    assert report["errors"] == []
    # Severity 2 is a warning, 3 an error; strict lint fails on either.
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == []


def test_lint_reports_a_broken_value() -> None:
    report = helm.lint(CHART_DIR, {"replicaCount": "three"}, strict=True)
    assert report["errors"] or any(m["severity"] == 3 for m in report["messages"])


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"replicaCont": 2}, "replicaCont"),
        ({"ingress": {"enable": True}}, "enable"),
        ({"secrets": {"env": {"not-an-env-name": "x"}}}, "not-an-env-name"),
        ({"config": {"cache": {"url": "memcached://x"}}}, "url"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        # The gateway's own schema, at any depth: what `pact-gateway check-config` refuses.
        ({"config": {"brnads": []}}, "brnads"),
        ({"config": {"limits": {"shutdown_timeout": "20s"}}}, "shutdown_timeout"),
        ({"config": {"personal_agents": {"policy": "anyone"}}}, "policy"),
        (
            {
                "config": {
                    "brands": [{**_GATEWAY_CONFIG["brands"][1], "upstream": {"url": "http://b", "timout": 5}}]
                }
            },
            "timout",
        ),
        ({"lifecycle": {"preStopp": {"sleep": {"seconds": 5}}}}, "preStopp"),
        ({"preStopSleepSeconds": -1}, "preStopSleepSeconds"),
        ({"metrics": {"prometheusRule": {"alerts": {"latency": {"treshold": 5}}}}}, "treshold"),
        ({"metrics": {"prometheusRule": {"alerts": {"botErrors": {"threshold": 5}}}}}, "threshold"),
        ({"metrics": {"prometheusRule": {"alerts": {"storeErrors": {"window": "5 minutes"}}}}}, "window"),
        ({"metrics": {"grafanaDashboard": {"label": "not a label"}}}, "label"),
    ],
)
def test_values_schema_rejects_typos(chart: helm.Chart, values: dict[str, Any], needle: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(needle)):
        _render_text(chart, values)


def test_lint_refuses_a_gateway_config_typo() -> None:
    """``config: {brnads: []}`` used to render and crash-loop the pod; helm now refuses it."""
    report = helm.lint(CHART_DIR, {"config": {"brnads": []}}, strict=True)
    problems = report["errors"] + [m["error"] for m in report["messages"] if m["severity"] == 3]
    assert any("brnads" in str(problem) for problem in problems), report


def test_chart_config_schema_is_the_gateway_schema(chart: helm.Chart) -> None:
    """One source: values.schema.json's ``config`` is gateway.config.SCHEMA, regenerated by a script."""
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    config = dict(schema["properties"]["config"])
    assert "scripts/gen_chart_schema.py" in config.pop("$comment")
    config.pop("description")
    # All but the top-level `required`, which the chart's template checks with a better message.
    gateway = {key: value for key, value in json.loads(json.dumps(SCHEMA)).items() if key != "required"}
    assert config == gateway, "run python scripts/gen_chart_schema.py"
    # Read with the draft the gateway validates with (gateway.config uses Draft202012Validator).
    assert schema["$schema"] == jsonschema.Draft202012Validator.META_SCHEMA["$id"]
    assert chart.schema == schema


def _schema_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCHEMA_SCRIPT), *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_schema_script_finds_and_fixes_a_stale_copy(tmp_path: Path) -> None:
    assert _schema_script("--check").returncode == 0
    current = (CHART_DIR / "values.schema.json").read_text(encoding="utf-8")
    stale = json.loads(current)
    del stale["properties"]["config"]["properties"]["brands"]  # as if SCHEMA had grown a key since
    copy_path = tmp_path / "values.schema.json"
    copy_path.write_text(json.dumps(stale, indent=2), encoding="utf-8")

    checked = _schema_script("--check", "--file", str(copy_path))
    assert checked.returncode == 1
    assert "out of date" in checked.stderr
    assert "python scripts/gen_chart_schema.py" in checked.stderr
    written = _schema_script("--file", str(copy_path))
    assert written.returncode == 0, written.stderr
    assert copy_path.read_text(encoding="utf-8") == current
    assert _schema_script("--check", "--file", str(copy_path)).returncode == 0

    copy_path.write_text("{not json", encoding="utf-8")
    broken = _schema_script("--check", "--file", str(copy_path))
    assert broken.returncode == 2
    assert "Traceback" not in broken.stderr


def test_config_ports_must_be_fixed(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape("must be fixed ports (1-65535)")):
        _render_text(chart, {"config": {"listen": {"port": 0}}})


def test_chart_metadata(chart: helm.Chart) -> None:
    metadata = chart.metadata
    assert metadata["apiVersion"] == "v2"
    assert metadata["name"] == "pact-gateway"
    assert metadata["appVersion"] == gateway.__version__  # the image the chart runs is this release
    assert metadata["kubeVersion"] == ">=1.30.0-0"  # the preStop sleep action (GA in 1.34, beta since 1.30)
    # Issue 32: they named a placeholder (github.com/example/…) for `helm show chart` and Artifact
    # Hub to send readers to. The project names no public repository: point them at it once it does.
    assert "home" not in metadata
    assert "sources" not in metadata
    schema = chart.schema
    assert schema is not None
    assert schema["additionalProperties"] is False


VALUES_FILE = CHART_DIR / "values.yaml"
CHART_README = CHART_DIR / "README.md"
VALUES_SCRIPT = REPO_ROOT / "scripts" / "gen_chart_values.py"


def _leaf_paths(node: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Every value's dotted path down to a leaf (a scalar, a list or an empty map)."""
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _leaf_paths(value, f"{path}.")
        else:
            yield path


def test_the_readme_names_every_value() -> None:
    """Issue 32: docs/operations.md says the chart's README lists every value; every value of
    values.yaml, at any depth, is a row of its table or inside one (a map set as a whole), and every
    row is a value that exists."""
    readme = CHART_README.read_text(encoding="utf-8")
    table = readme[readme.index("\n## Every value\n") :]
    rows = re.findall(r"^\| `([^`]+)` \|", table, flags=re.MULTILINE)
    values = yaml.safe_load(VALUES_FILE.read_text(encoding="utf-8"))
    leaves = list(_leaf_paths(values))
    unnamed = [leaf for leaf in leaves if not any(leaf == row or leaf.startswith(f"{row}.") for row in rows)]
    assert unnamed == [], "run python scripts/gen_chart_values.py"
    stale = [row for row in rows if not any(leaf == row or leaf.startswith(f"{row}.") for leaf in leaves)]
    assert stale == []


def test_the_readme_values_table_is_up_to_date() -> None:
    checked = subprocess.run(
        [sys.executable, str(VALUES_SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr


# ---- every manifest is valid Kubernetes --------------------------------------------------------


@pytest.mark.parametrize("scenario", ["example", "full", "existing-secrets"])
def test_manifests_validate_against_kubernetes_schema(
    rendered: dict[str, list[Manifest]], scenario: str
) -> None:
    docs = rendered[scenario]
    assert docs
    for doc in docs:
        if doc["kind"] in {"ServiceMonitor", "PrometheusRule"}:
            continue  # CRDs: no upstream schema; their shapes are asserted below
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(part) for part in exc.path)
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} ({scenario}): {path}: {exc.message}")
        assert doc["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize(
    ("scenario", "kinds"),
    [
        ("example", ["ConfigMap", "Deployment", "Service", "ServiceAccount"]),
        (
            "full",
            [
                "ConfigMap",
                "ConfigMap",  # the Grafana dashboard
                "Deployment",
                "Service",
                "ServiceAccount",
                "Secret",
                "Ingress",
                "HorizontalPodAutoscaler",
                "PodDisruptionBudget",
                "ServiceMonitor",
                "PrometheusRule",
                "NetworkPolicy",
            ],
        ),
        ("existing-secrets", ["ConfigMap", "Deployment", "Service", "ServiceAccount"]),
    ],
)
def test_rendered_kinds(rendered: dict[str, list[Manifest]], scenario: str, kinds: list[str]) -> None:
    docs = rendered[scenario]
    assert sorted(doc["kind"] for doc in docs) == sorted(kinds)


def test_standard_labels_everywhere(rendered: dict[str, list[Manifest]]) -> None:
    for doc in rendered["full"]:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "pact-gateway"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == gateway.__version__
        assert labels["helm.sh/chart"] == "pact-gateway-0.2.1"
        assert labels["team"] == "support"
        assert doc["metadata"]["annotations"]["owner"] == "support-platform"


# ---- the pod -----------------------------------------------------------------------------------


def test_pod_is_locked_down(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["example"]
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["securityContext"]["fsGroup"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    assert pod["serviceAccountName"] == FULLNAME
    assert _one(docs, "ServiceAccount")["automountServiceAccountToken"] is False
    assert pod["terminationGracePeriodSeconds"] == 30

    container = _container(docs)
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] == 10001
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "128Mi"}
    assert container["resources"]["limits"]["memory"] == "512Mi"


def _pod_termination(docs: list[Manifest]) -> tuple[int, dict[str, Any] | None]:
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    return pod["terminationGracePeriodSeconds"], _container(docs).get("lifecycle")


def test_default_prestop_pause_lets_endpoints_drain(rendered: dict[str, list[Manifest]]) -> None:
    """The gateway stops accepting on SIGTERM, so by default the pod keeps serving 5 s before it."""
    assert _pod_termination(rendered["example"]) == (30, {"preStop": {"sleep": {"seconds": 5}}})
    assert _pod_termination(rendered["existing-secrets"]) == (30, {"preStop": {"sleep": {"seconds": 5}}})


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (
            {"preStopSleepSeconds": 12, "terminationGracePeriodSeconds": 40},
            (40, {"preStop": {"sleep": {"seconds": 12}}}),
        ),
        ({"preStopSleepSeconds": 0}, (30, None)),
        # A preStop of the user's own replaces the pause; other hooks keep it.
        (
            {"lifecycle": {"preStop": {"exec": {"command": ["/bin/drain"]}}}},
            (30, {"preStop": {"exec": {"command": ["/bin/drain"]}}}),
        ),
        (
            {"lifecycle": {"postStart": {"sleep": {"seconds": 1}}}},
            (30, {"postStart": {"sleep": {"seconds": 1}}, "preStop": {"sleep": {"seconds": 5}}}),
        ),
        (
            {"terminationGracePeriodSeconds": 90, "config": {"limits": {"shutdown_timeout": 60}}},
            (90, {"preStop": {"sleep": {"seconds": 5}}}),
        ),
    ],
)
def test_prestop_pause_is_configurable(
    chart: helm.Chart, values: dict[str, Any], expected: tuple[int, dict[str, Any] | None]
) -> None:
    docs = _render(chart, values)
    assert _pod_termination(docs) == expected
    kubernetes_validate.validate(_one(docs, "Deployment"), KUBE_VERSION, strict=True)


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        # The chart assumes the gateway's own default drain when config.limits sets none.
        (
            {"terminationGracePeriodSeconds": 5 + int(LimitsConfig().shutdown_timeout)},
            f"preStop pause (5 s) and config.limits.shutdown_timeout ({LimitsConfig().shutdown_timeout:g} s)",
        ),
        ({"config": {"limits": {"shutdown_timeout": 25}}}, "terminationGracePeriodSeconds is 30"),
        ({"config": {"limits": {"shutdown_timeout": 24.5}}, "preStopSleepSeconds": 6}, "need 30.5 s"),
        ({"lifecycle": {"preStop": {"sleep": {"seconds": 10}}}}, "preStop pause (10 s)"),
    ],
)
def test_grace_period_must_outlast_pause_and_drain(
    chart: helm.Chart, values: dict[str, Any], needle: str
) -> None:
    """Kubernetes kills the pod when the grace period (preStop included) ends, mid-request if need be."""
    with pytest.raises(helm.HelmRenderError, match=re.escape(needle)):
        _render_text(chart, values)


def test_grace_period_just_above_pause_and_drain_renders(chart: helm.Chart) -> None:
    grace = 5 + int(LimitsConfig().shutdown_timeout) + 1
    docs = _render(chart, {"terminationGracePeriodSeconds": grace})
    assert _pod_termination(docs)[0] == grace
    # A preStop hook that is not a sleep adds nothing the chart can count.
    _render(
        chart,
        {"lifecycle": {"preStop": {"exec": {"command": ["true"]}}}, "terminationGracePeriodSeconds": 21},
    )


def test_image_defaults_to_app_version(chart: helm.Chart, rendered: dict[str, list[Manifest]]) -> None:
    repository = EXAMPLE_VALUES["image"]["repository"]
    default_tag = _container(_render(chart, {"image": {"tag": ""}}))["image"]
    assert default_tag == f"{repository}:{gateway.__version__}"
    digest = "sha256:" + "ab" * 32
    docs = _render(chart, {"image": {"tag": "9.9.9", "digest": digest, "repository": "registry.local/gw"}})
    assert _container(docs)["image"] == f"registry.local/gw@{digest}"


def test_probes_hit_the_ops_listener(rendered: dict[str, list[Manifest]]) -> None:
    container = _container(rendered["example"])
    assert dict(_iter_named_ports(rendered["example"])) == {"http": 8080, "metrics": 9090}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "enabled" not in container["livenessProbe"]
    assert "startupProbe" not in container

    full = _container(rendered["full"])
    assert full["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert full["startupProbe"]["failureThreshold"] == 30


def test_command_line_and_mounts(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["example"]
    container = _container(docs)
    assert "command" not in container  # the image's ENTRYPOINT is pact-gateway
    assert container["args"] == ["serve", "--config", "/etc/pact-gateway/config.yaml"]
    mounts = {mount["name"]: mount for mount in container["volumeMounts"]}
    assert mounts["config"]["mountPath"] == "/etc/pact-gateway/config.yaml"
    assert mounts["config"]["subPath"] == "config.yaml"
    assert mounts["config"]["readOnly"] is True
    assert mounts["tmp"]["mountPath"] == "/tmp"
    assert "signing-keys" not in mounts
    volumes = {
        volume["name"]: volume for volume in _one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    }
    assert volumes["config"]["configMap"]["name"] == FULLNAME
    assert "emptyDir" in volumes["tmp"]

    full = rendered["full"]
    full_container = _container(full)
    assert full_container["args"] == ["serve", "--config", "/etc/pact-gateway/config.yaml", "--workers", "4"]
    full_mounts = {mount["name"]: mount for mount in full_container["volumeMounts"]}
    assert full_mounts["signing-keys"] == {
        "name": "signing-keys",
        "mountPath": "/etc/pact-gateway/keys",
        "readOnly": True,
    }
    assert full_mounts["ca"]["mountPath"] == "/etc/ssl/corporate"
    full_pod = _one(full, "Deployment")["spec"]["template"]["spec"]
    full_volumes = {volume["name"]: volume for volume in full_pod["volumes"]}
    assert full_volumes["signing-keys"]["secret"]["secretName"] == "pact-gateway-signing-keys"
    assert full_pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert full_pod["tolerations"][0]["key"] == "dedicated"
    assert full_pod["priorityClassName"] == "high-priority"
    assert full_pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert "podAntiAffinity" in full_pod["affinity"]
    # A spread constraint without a labelSelector gets the chart's selector labels.
    assert full_pod["topologySpreadConstraints"][0]["labelSelector"] == {
        "matchLabels": {"app.kubernetes.io/name": "pact-gateway", "app.kubernetes.io/instance": RELEASE}
    }
    assert full_container["lifecycle"] == {
        "preStop": {"sleep": {"seconds": 15}},
        "postStart": {"sleep": {"seconds": 1}},
    }


def test_service_and_ports(rendered: dict[str, list[Manifest]]) -> None:
    service = _one(rendered["example"], "Service")
    ports = {port["name"]: port for port in service["spec"]["ports"]}
    assert (ports["http"]["port"], ports["http"]["targetPort"]) == (8080, "http")
    assert (ports["metrics"]["port"], ports["metrics"]["targetPort"]) == (9090, "metrics")
    pod_labels = _one(rendered["example"], "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_config_ports_follow_the_gateway_config(chart: helm.Chart) -> None:
    docs = _render(chart, {"config": {"listen": {"port": 8181}, "metrics": {"port": 9191}}})
    assert dict(_iter_named_ports(docs)) == {"http": 8181, "metrics": 9191}
    raw = _gateway_config(docs)
    assert raw["listen"]["port"] == 8181
    assert raw["metrics"] == {"port": 9191}

    docs = _render(chart, {"containerPorts": {"http": 8000, "metrics": 9000}})
    assert dict(_iter_named_ports(docs)) == {"http": 8000, "metrics": 9000}
    assert load_config(_gateway_config(docs), environ={}).listen.port == 8000
    assert load_config(_gateway_config(docs), environ={}).metrics.port == 9000


POD_NETWORKS = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fd00::/8"]


def test_the_pod_networks_are_trusted_proxies_behind_a_cluster_ip_service(chart: helm.Chart) -> None:
    """Issue 28 L3: with the gateway's default of no trusted proxy, every browser behind an Ingress
    shared the controller's address and its per-address budgets; the chart trusts the private
    networks pods use, while only pods reach the gateway (a ClusterIP Service)."""
    raw = _gateway_config(_render(chart, {}))
    assert raw["listen"]["trusted_proxies"] == POD_NETWORKS
    assert [str(network) for network in load_config(raw, environ={}).listen.trusted_proxies] == POD_NETWORKS
    # What the operator names wins, none included; a node port or load balancer trusts none by default
    # (a node's private address can carry a client's own X-Forwarded-For).
    named = {"config": {"listen": {"trusted_proxies": ["10.42.0.0/16"]}}}
    assert _gateway_config(_render(chart, named))["listen"]["trusted_proxies"] == ["10.42.0.0/16"]
    assert _gateway_config(_render(chart, {"trustedProxies": []}))["listen"]["trusted_proxies"] == []
    for service in ("NodePort", "LoadBalancer"):
        exposed = _gateway_config(_render(chart, {"service": {"type": service}}))
        assert "trusted_proxies" not in exposed["listen"]


def test_checksums_roll_the_pods_on_change(chart: helm.Chart, rendered: dict[str, list[Manifest]]) -> None:
    base = _pod_annotations(rendered["example"])["checksum/config"]
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    assert _pod_annotations(_render(chart, {}))["checksum/config"] == base  # deterministic
    changed = _render(chart, {"config": {"logging": {"level": "DEBUG"}}})
    assert _pod_annotations(changed)["checksum/config"] != base
    assert "checksum/secret" not in _pod_annotations(rendered["example"])

    full = _pod_annotations(rendered["full"])
    assert full["example.com/scrape"] == "false"
    rotated = _render(chart, _merge(FULL_VALUES, {"secrets": {"env": {"ACME_BOT_TOKEN": "rotated"}}}))
    assert _pod_annotations(rotated)["checksum/secret"] != full["checksum/secret"]
    assert _pod_annotations(rotated)["checksum/config"] == full["checksum/config"]


# ---- the rendered gateway config ---------------------------------------------------------------


def test_example_config_loads_with_the_gateway_loader(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["example"]
    config = load_config(_gateway_config(docs), environ=_pod_environ(docs))
    assert config.listen.port == 8080
    assert config.metrics.port == 9090
    assert config.metrics.enabled is True
    assert config.cache.backend == "memory"
    assert list(config.brands) == ["acme"]


@pytest.mark.parametrize(
    "redis",
    [
        {"password": "cluster-pw", "seeds": "n1.redis:6379,n2.redis:6379"},
        {
            "existingSecret": "redis-cluster-auth",
            "existingSecretSeedsKey": "seeds",
            "existingSecretPasswordKey": "password",
        },
    ],
    ids=["chart-secret", "existing-secret"],
)
def test_a_redis_cluster_url_takes_its_seed_nodes_and_password_from_a_secret(
    chart: helm.Chart, redis: dict[str, str]
) -> None:
    """Issue 20: ``redis+cluster://:${REDIS_PASSWORD}@${REDIS_SEEDS}``, both variables from a Secret."""
    url = "redis+cluster://:${REDIS_PASSWORD}@${REDIS_SEEDS}"
    docs = _render(chart, {"replicaCount": 2, "config": {"cache": {"url": url}}, "redis": redis})
    config = load_config(_gateway_config(docs), environ=_pod_environ(docs))
    address = parse_redis_url(config.cache.url)
    assert isinstance(address, ClusterAddress)
    assert address.seeds == (("n1.redis", 6379), ("n2.redis", 6379))
    assert address.password in {"cluster-pw", "cluster-from-existing"}
    assert config.cache.replicas == 1
    assert "n1.redis" not in json.dumps(_gateway_config(docs))  # in the Secret, not the ConfigMap


def test_a_cluster_url_whose_seeds_nothing_provides_fails_to_render(chart: helm.Chart) -> None:
    url = "redis+cluster://:${REDIS_PASSWORD}@${REDIS_SEEDS}"
    with pytest.raises(helm.HelmRenderError, match=re.escape("${REDIS_SEEDS}")):
        _render(chart, {"config": {"cache": {"url": url}}, "redis": {"password": "pw"}})


# ---- issue 19 rows 5, 6 and 14: nothing placeholder in values.yaml; checked before rollout ----


def test_values_yaml_ships_no_config_and_no_image(chart: helm.Chart) -> None:
    """Helm merges maps: anything in values.yaml's ``config`` would leak into a real release."""
    assert chart.values["config"] == {}
    assert chart.values["image"]["repository"] == ""


def test_an_open_policy_inherits_no_placeholder_issuer(chart: helm.Chart) -> None:
    """Issue 19 row 6: ``personal_agents: {policy: open}`` used to keep the chart's placeholder
    ``https://pa.example.com`` in ``registered``, and /readyz stayed 503 waiting for its keys."""
    config = {key: EXAMPLE_VALUES["config"][key] for key in ("public_url", "provider", "brands")}
    config["personal_agents"] = {"policy": "open"}
    text = chart.render(
        {"image": EXAMPLE_VALUES["image"], "config": config}, name=RELEASE, namespace=NAMESPACE
    )
    docs = _parse(text)
    raw = _gateway_config(docs)
    assert raw["personal_agents"] == {"policy": "open"}
    assert "pa.example.com" not in "".join(text.values())
    loaded = load_config(raw, environ=_pod_environ(docs))
    assert loaded.personal_agents.policy == "open"
    assert loaded.personal_agents.registered == ()


def test_no_config_fails_to_render_naming_the_example(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmRenderError) as refused:
        chart.render({"image": EXAMPLE_VALUES["image"]}, name=RELEASE, namespace=NAMESPACE)
    message = str(refused.value)
    assert "config.public_url, config.provider, config.brands not set" in message
    assert "values-example.yaml" in message


@pytest.mark.parametrize("key", SCHEMA["required"])
def test_the_chart_requires_what_the_gateway_requires(chart: helm.Chart, key: str) -> None:
    """The template's list is gateway.config.SCHEMA's ``required``: a key added there fails here."""
    config = {name: value for name, value in EXAMPLE_VALUES["config"].items() if name != key}
    with pytest.raises(helm.HelmRenderError, match=re.escape(f"config.{key} not set")):
        chart.render({**EXAMPLE_VALUES, "config": config}, name=RELEASE, namespace=NAMESPACE)


def test_no_image_fails_to_render_saying_how_to_build_it(chart: helm.Chart) -> None:
    """Issue 19 row 5: no public image exists, so an unset repository is refused, not ImagePullBackOff."""
    with pytest.raises(helm.HelmRenderError) as refused:
        chart.render({"config": EXAMPLE_VALUES["config"]}, name=RELEASE, namespace=NAMESPACE)
    message = str(refused.value)
    assert "image.repository is not set" in message
    assert "docker build -t REGISTRY/pact-gateway:TAG ." in message
    assert "docker push REGISTRY/pact-gateway:TAG" in message


def _check_config_stdin(stream: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", "check-config", "-"],
        input=stream,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        check=False,
    )


@pytest.mark.parametrize("scenario", ["example", "full"])
def test_s19_rendered_release_checks_before_rollout(chart: helm.Chart, scenario: str) -> None:
    """NOTES step 3: ``helm template … | pact-gateway check-config -``, with no pod running.

    The whole release (the dashboard's ConfigMap included, in ``full``) and the ConfigMap alone
    (``--show-only templates/configmap.yaml``) both check; a config the gateway refuses fails.
    """
    text = _render_text(chart, SCENARIOS[scenario])
    notes = next(body for path, body in text.items() if path.endswith("NOTES.txt"))
    assert "--show-only templates/configmap.yaml | pact-gateway check-config -" in notes
    manifests = {path: body for path, body in text.items() if not path.endswith("NOTES.txt")}
    whole = _check_config_stdin("\n---\n".join(manifests.values()))
    assert whole.returncode == 0, whole.stderr
    assert "configuration OK" in whole.stdout
    (configmap,) = [body for path, body in manifests.items() if path.endswith("templates/configmap.yaml")]
    alone = _check_config_stdin(configmap)
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout == whole.stdout

    # Beyond the schema: the gateway's own rule that an allowlist needs an issuer.
    refused = _render_text(
        chart, _merge(SCENARIOS[scenario], {"config": {"personal_agents": {"registered": []}}})
    )
    bad = _check_config_stdin(next(body for path, body in refused.items() if path.endswith("configmap.yaml")))
    assert bad.returncode == 2
    assert bad.stderr.startswith("pact-gateway: invalid configuration <stdin>: ")
    assert "personal_agents" in bad.stderr


@pytest.mark.parametrize(
    ("scenario", "acme", "globex", "redis"),
    [
        ("full", "acme-token", "globex-token", "redis-pass"),
        ("existing-secrets", "acme-from-existing", "globex-from-existing", "redis-from-existing"),
    ],
)
def test_config_loads_with_the_environment_the_pod_gets(
    rendered: dict[str, list[Manifest]], scenario: str, acme: str, globex: str, redis: str
) -> None:
    docs = rendered[scenario]
    raw = _gateway_config(docs)
    assert raw["brands"][0]["upstream"]["headers"]["Authorization"] == "Bearer ${ACME_BOT_TOKEN}"
    assert raw["personal_agents"]["jwks"]["max_bytes"] == 1048576  # large ints stay ints
    config = load_config(raw, environ=_pod_environ(docs))
    assert config.listen.port == 8080
    assert config.listen.host == ALL_INTERFACES
    assert config.metrics.port == 9090
    assert config.cache.backend == "redis"
    assert config.cache.url == f"rediss://:{redis}@redis.data.svc.cluster.local:6380/0"
    assert config.cache.closed_ttl == 1209600
    assert config.limits.request_timeout == 45.5
    assert config.brands["acme"].upstream.headers == {"Authorization": f"Bearer {acme}"}
    assert config.brands["globex"].upstream.headers == {"X-Api-Key": globex}


# ---- secrets -----------------------------------------------------------------------------------


def test_chart_secret_holds_tokens_and_redis_password(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["full"]
    secret = _one(docs, "Secret")
    assert secret["metadata"]["name"] == FULLNAME
    assert secret["type"] == "Opaque"
    assert _secret_data(docs, FULLNAME) == {
        "ACME_BOT_TOKEN": "acme-token",
        "GLOBEX_BOT_TOKEN": "globex-token",
        "REDIS_PASSWORD": "redis-pass",
    }
    container = _container(docs)
    assert container["envFrom"] == [{"secretRef": {"name": FULLNAME}}]
    assert container["env"] == [{"name": "TZ", "value": "UTC"}]


def test_existing_secrets_replace_the_chart_secret(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["existing-secrets"]
    assert _all(docs, "Secret") == []
    container = _container(docs)
    assert container["envFrom"] == [{"secretRef": {"name": "bot-tokens"}}]
    assert container["env"] == [
        {"name": "REDIS_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "redis-auth", "key": "password"}}}
    ]
    assert "checksum/secret" not in _pod_annotations(docs)
    assert "IGNORED" not in _pod_environ(docs)


def test_existing_bot_secret_with_inline_redis_password(chart: helm.Chart) -> None:
    docs = _render(
        chart,
        {"config": _GATEWAY_CONFIG, "secrets": {"existingSecret": "bot-tokens"}, "redis": {"password": "pw"}},
    )
    assert _secret_data(docs, FULLNAME) == {"REDIS_PASSWORD": "pw"}
    assert _container(docs)["envFrom"] == [
        {"secretRef": {"name": "bot-tokens"}},
        {"secretRef": {"name": FULLNAME}},
    ]
    assert "checksum/secret" in _pod_annotations(docs)
    load_config(_gateway_config(docs), environ=_pod_environ(docs))


def test_unprovided_env_reference_fails_to_render(chart: helm.Chart) -> None:
    values = {"config": _GATEWAY_CONFIG, "redis": {"password": "pw"}}
    with pytest.raises(helm.HelmRenderError, match=re.escape("config references ${ACME_BOT_TOKEN}")):
        _render_text(chart, values)
    values["secrets"] = {"env": {"ACME_BOT_TOKEN": "a", "GLOBEX_BOT_TOKEN": "g"}}
    del values["redis"]
    with pytest.raises(helm.HelmRenderError, match=re.escape("config references ${REDIS_PASSWORD}")):
        _render_text(chart, values)


# ---- replicas and the cache --------------------------------------------------------------------


MEMORY_CACHE_MESSAGE = "config.cache.url is memory:// (one process only)"


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"replicaCount": 2}, "replicaCount is 2 but " + MEMORY_CACHE_MESSAGE),
        ({"autoscaling": {"enabled": True}}, "autoscaling.enabled needs the shared Redis cache"),
        ({"workers": 2}, "workers is 2 but " + MEMORY_CACHE_MESSAGE),
        ({"replicaCount": 2, "config": {"cache": {"url": "memory://local"}}}, MEMORY_CACHE_MESSAGE),
    ],
)
def test_memory_cache_refuses_more_than_one_process(
    chart: helm.Chart, values: dict[str, Any], needle: str
) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape(needle)):
        _render_text(chart, values)


def test_redis_cache_allows_replicas(chart: helm.Chart) -> None:
    docs = _render(chart, {"replicaCount": 2, "config": {"cache": {"url": "redis://redis.data:6379/0"}}})
    assert _one(docs, "Deployment")["spec"]["replicas"] == 2
    assert load_config(_gateway_config(docs), environ={}).cache.backend == "redis"


def test_metrics_listener_cannot_be_disabled(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape("config.metrics.enabled is false")):
        _render_text(chart, {"config": {"metrics": {"enabled": False}}})


# ---- optional resources ------------------------------------------------------------------------


def test_hpa_and_pdb(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["full"]
    assert "replicas" not in _one(docs, "Deployment")["spec"]
    hpa = _one(docs, "HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    targets = {
        m["resource"]["name"]: m["resource"]["target"]["averageUtilization"] for m in hpa["spec"]["metrics"]
    }
    assert targets == {"cpu": 70, "memory": 80}
    pdb = _one(docs, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"] == {
        "maxUnavailable": 1,
        "selector": {
            "matchLabels": {"app.kubernetes.io/name": "pact-gateway", "app.kubernetes.io/instance": RELEASE}
        },
    }


def test_ingress(rendered: dict[str, list[Manifest]]) -> None:
    ingress = _one(rendered["full"], "Ingress")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [
        {"hosts": ["support.example-provider.com"], "secretName": "pact-gateway-tls"}
    ]
    rule = ingress["spec"]["rules"][0]
    assert rule["host"] == "support.example-provider.com"
    assert rule["http"]["paths"][0]["backend"] == {"service": {"name": FULLNAME, "port": {"name": "http"}}}
    assert ingress["metadata"]["annotations"]["cert-manager.io/cluster-issuer"] == "letsencrypt"


def test_values_yaml_ships_no_ingress_host(chart: helm.Chart) -> None:
    """Issue 32: a host in values.yaml is live data helm merges into every release (as ``config``)."""
    assert chart.values["ingress"]["hosts"] == []


def test_an_ingress_without_hosts_refuses_to_render(chart: helm.Chart) -> None:
    """Issue 32: ``ingress.enabled`` alone used to route the chart's example host to the gateway."""
    config = {**EXAMPLE_VALUES["config"], "public_url": "https://help.acme.example"}
    with pytest.raises(helm.HelmRenderError) as refused:
        _render_text(chart, {"ingress": {"enabled": True}, "config": config})
    message = str(refused.value)
    assert "ingress.enabled is true but ingress.hosts is empty" in message
    assert "{host: help.acme.example, paths: [{path: /, pathType: Prefix}]}" in message
    docs = _render(
        chart, {"ingress": {"enabled": True, "hosts": [{"host": "h.example", "paths": [{"path": "/"}]}]}}
    )
    assert [rule["host"] for rule in _one(docs, "Ingress")["spec"]["rules"]] == ["h.example"]


def test_service_monitor_shape(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["full"]
    monitor = _one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    service_labels = _one(docs, "Service")["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service_labels.items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics"
    assert endpoint["path"] == "/metrics"
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "5s")
    assert endpoint["relabelings"][0]["targetLabel"] == "cluster"
    assert "metrics" in {port["name"] for port in _one(docs, "Service")["spec"]["ports"]}


# ---- dashboards and alerts ---------------------------------------------------------------------

# Labels Prometheus adds to every series it scrapes through the chart's ServiceMonitor.
TARGET_LABELS = frozenset({"namespace", "service", "pod", "container", "endpoint", "job", "instance"})
RELEASE_MATCHERS = {("namespace", NAMESPACE), ("service", FULLNAME)}
DASHBOARD_FILE = CHART_DIR / "dashboards" / "pact-gateway.json"
# Grafana's built-in and the dashboard's own variables, replaced as Grafana would before querying.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "6h"}
ALERTS = {
    "PactGatewayBotErrors",
    "PactGatewayCircuitOpen",
    "PactGatewayStoreErrors",
    "PactGatewayStoreFull",
    "PactGatewayAuthFailures",
    "PactGatewayHighLatency",
    "PactGatewayUserCodeGuessing",
}

_DURATION = {"type": "string", "pattern": r"^(0|([0-9]+(ms|s|m|h|d|w|y))+)$"}
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
# The PrometheusRule CRD (monitoring.coreos.com/v1) as the Prometheus Operator defines it, but
# closed: the API server would silently prune an unknown field such as a misspelt `for`.
PROMETHEUS_RULE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {
            "type": "object",
            "required": ["name", "namespace"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63},
                "namespace": {"type": "string", "minLength": 1},
                "labels": _STRING_MAP,
                "annotations": _STRING_MAP,
            },
        },
        "spec": {
            "type": "object",
            "required": ["groups"],
            "additionalProperties": False,
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "rules"],
                        "additionalProperties": False,
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "interval": _DURATION,
                            "rules": {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "object",
                                    "required": ["expr"],
                                    "oneOf": [{"required": ["alert"]}, {"required": ["record"]}],
                                    "additionalProperties": False,
                                    "properties": {
                                        "alert": {"type": "string", "minLength": 1},
                                        "record": {
                                            "type": "string",
                                            "pattern": r"^[a-zA-Z_:][a-zA-Z0-9_:]*$",
                                        },
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": _DURATION,
                                        "keep_firing_for": _DURATION,
                                        "labels": _STRING_MAP,
                                        "annotations": _STRING_MAP,
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}


@pytest.fixture(scope="module")
def exposed() -> dict[str, frozenset[str]]:
    """Every series name a real gateway's /metrics exposes, with its label names.

    One sample recorded in each metric (labelled metrics show no series before their first), then
    the registry scraped as the ops listener serves it.
    """
    metrics = Metrics()
    metrics.observe_request("acme", "SendMessage", "ok", 0.02)
    metrics.observe_bot_call("acme", "timeout", 10.0)
    metrics.auth_failed("expired")
    metrics.jwks_fetched("https://pa.example.com", ok=True)
    metrics.retry_served("acme")
    metrics.store_error("begin_turn")
    metrics.delegation_event("acme", "token_issued")
    metrics.discovery_fetched(True)
    metrics.open_fetch_refused("jwks")
    metrics.rate_limited.labels(brand="acme", limit="per_agent").inc()
    metrics.circuit_state.labels(brand="acme").set(2)
    metrics.store_size(1000, 300_000)
    metrics.store_evicted("closed")
    metrics.cluster_command("10.0.0.1:6379", ok=True)
    metrics.cluster_redirect("10.0.0.1:6379", "moved")
    metrics.cluster_refresh("ok")
    metrics.late_release("released")
    metrics.directline_late_messages.labels(brand="acme", outcome="delivered").inc()
    admin = AdminMetrics(metrics.registry)
    admin.erasures.labels("acme").inc()
    admin.actions.labels("erase", "ok").inc()
    series: dict[str, frozenset[str]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        assert family.samples, f"{family.name} has no sample: record one in the exposed() fixture"
        for sample in family.samples:
            series[sample.name] = series.get(sample.name, frozenset()) | frozenset(sample.labels)
    return series


def _nodes(expr: promql_parser.Expr) -> list[promql_parser.Expr]:
    found: list[promql_parser.Expr] = []
    promql_parser.walk(expr, found.append)
    return found


def _check_query(query: str, exposed: dict[str, frozenset[str]]) -> list[promql_parser.VectorSelector]:
    """Parse ``query`` as PromQL and check every series and label it names exists; its selectors."""
    try:
        parsed = promql_parser.parse(query)
    except ValueError as error:
        pytest.fail(f"not PromQL: {query!r}: {error}")
    nodes = _nodes(parsed)
    selectors = [node for node in nodes if isinstance(node, promql_parser.VectorSelector)]
    assert selectors, f"no series in {query!r}"
    known = set(TARGET_LABELS)
    for selector in selectors:
        assert selector.name in exposed, f"{selector.name} is not a gateway metric (in {query!r})"
        labels = exposed[selector.name] | TARGET_LABELS
        for matcher in selector.matchers.matchers:
            assert matcher.name in labels, f"{selector.name} has no label {matcher.name} (in {query!r})"
        known |= labels
    for node in nodes:
        grouping: list[str] = []
        if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            grouping = node.modifier.labels
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier and node.modifier.matching:
            grouping = node.modifier.matching.labels
        unknown = set(grouping) - known
        assert not unknown, f"grouping by unknown labels {sorted(unknown)} in {query!r}"
    return selectors


def _rules(docs: list[Manifest]) -> dict[str, dict[str, Any]]:
    (group,) = _one(docs, "PrometheusRule")["spec"]["groups"]
    return {rule.get("alert") or rule["record"]: rule for rule in group["rules"]}


def _comparison(expr: str) -> tuple[float, timedelta]:
    """The threshold an alert compares against and the range of its rate()/increase()."""
    parsed = promql_parser.parse(expr)
    assert isinstance(parsed, promql_parser.BinaryExpr)
    assert isinstance(parsed.rhs, promql_parser.NumberLiteral)
    (window,) = {node.range for node in _nodes(parsed) if isinstance(node, promql_parser.MatrixSelector)}
    return parsed.rhs.val, window


def _dashboard_queries(dashboard: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            query = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                query = query.replace(variable, value)
            yield panel["title"], query


def test_dashboard_and_alerts_are_off_by_default(rendered: dict[str, list[Manifest]]) -> None:
    for scenario in ("example", "existing-secrets"):
        assert _all(rendered[scenario], "PrometheusRule") == []
        assert [doc["metadata"]["name"] for doc in _all(rendered[scenario], "ConfigMap")] == [FULLNAME]


def test_prometheus_rule_shape(rendered: dict[str, list[Manifest]]) -> None:
    rule = _one(rendered["full"], "PrometheusRule")
    errors = sorted(jsonschema.Draft202012Validator(PROMETHEUS_RULE_SCHEMA).iter_errors(rule), key=str)
    assert not errors, [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]
    assert rule["metadata"]["name"] == FULLNAME
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert rule["metadata"]["annotations"] == {"owner": "support-platform", "example.com/owner": "sre"}
    rules = _rules(rendered["full"])
    assert set(rules) == ALERTS | {"pact:requests:rate5m"}
    for name in ALERTS:
        alert = rules[name]
        promql_parser.parse_duration(alert["for"])
        assert alert["labels"]["team"] == "support"
        assert {"summary", "description"} <= set(alert["annotations"])
        assert "{{ $labels." in alert["annotations"]["description"]  # Prometheus templating survives helm
    assert rules["PactGatewayBotErrors"]["labels"]["severity"] == "critical"
    assert rules["PactGatewayCircuitOpen"]["labels"]["severity"] == "critical"
    assert rules["PactGatewayHighLatency"]["labels"]["severity"] == "warning"


def test_alert_expressions_query_real_metrics_of_this_release(
    rendered: dict[str, list[Manifest]], exposed: dict[str, frozenset[str]]
) -> None:
    """Every ``expr`` parses as PromQL and names series and labels a real gateway exports.

    A renamed metric or label fails here; so does an alert that would also count another release.
    """
    rules = _rules(rendered["full"])
    for name in ALERTS:
        for selector in _check_query(rules[name]["expr"], exposed):
            matchers = {(m.name, m.value) for m in selector.matchers.matchers}
            assert matchers >= RELEASE_MATCHERS, f"{name}: {selector} is not limited to this release"
    _check_query(rules["pact:requests:rate5m"]["expr"], exposed)


def test_alert_thresholds_follow_the_values(chart: helm.Chart, rendered: dict[str, list[Manifest]]) -> None:
    five_minutes = timedelta(minutes=5)
    defaults = _rules(_render(chart, {"metrics": {"prometheusRule": {"enabled": True}}}))
    assert set(defaults) == ALERTS
    assert _comparison(defaults["PactGatewayBotErrors"]["expr"]) == (0.05, five_minutes)
    assert _comparison(defaults["PactGatewayStoreErrors"]["expr"]) == (0, five_minutes)
    assert _comparison(defaults["PactGatewayAuthFailures"]["expr"]) == (1, five_minutes)
    assert _comparison(defaults["PactGatewayHighLatency"]["expr"]) == (10, five_minutes)
    # Issue 17: the memory store nearly at cache.max_entries, before new conversations get 429.
    store_full = promql_parser.parse(defaults["PactGatewayStoreFull"]["expr"])
    assert isinstance(store_full, promql_parser.BinaryExpr)
    assert str(store_full.rhs) == "0.9"
    circuit = promql_parser.parse(defaults["PactGatewayCircuitOpen"]["expr"])
    assert isinstance(circuit, promql_parser.BinaryExpr)
    assert str(circuit.rhs) == "2"  # pact_circuit_state: 2 is open
    assert {name: rule["for"] for name, rule in defaults.items()} == {
        "PactGatewayBotErrors": "10m",
        "PactGatewayCircuitOpen": "1m",
        "PactGatewayStoreErrors": "2m",
        "PactGatewayStoreFull": "5m",
        "PactGatewayAuthFailures": "10m",
        "PactGatewayHighLatency": "15m",
        "PactGatewayUserCodeGuessing": "1m",
    }
    # RFC 8628 §5.1: any paused hand-off alerts, by Brand and by the budget that paused it.
    guessing = defaults["PactGatewayUserCodeGuessing"]["expr"]
    assert _comparison(guessing) == (0, timedelta(minutes=10))
    assert 'limit=~"wrong_user_code_.*"' in guessing
    assert "by (namespace, service, brand, limit)" in guessing

    full = _rules(rendered["full"])["PactGatewayBotErrors"]
    assert _comparison(full["expr"]) == (0.2, timedelta(minutes=10))
    assert full["for"] == "5m"

    values = {
        "metrics": {
            "prometheusRule": {
                "enabled": True,
                "selector": 'job="pact-gateway"',
                "alerts": {
                    "latency": {"threshold": 2.5, "window": "15m"},
                    "authFailures": {"threshold": 0.1},
                    "circuitOpen": {"enabled": False},
                },
            }
        }
    }
    tuned = _rules(_render(chart, values))
    assert set(tuned) == ALERTS - {"PactGatewayCircuitOpen"}
    assert _comparison(tuned["PactGatewayHighLatency"]["expr"]) == (2.5, timedelta(minutes=15))
    assert _comparison(tuned["PactGatewayAuthFailures"]["expr"])[0] == 0.1
    for rule in tuned.values():
        for node in _nodes(promql_parser.parse(rule["expr"])):
            if isinstance(node, promql_parser.VectorSelector):
                assert ("job", "pact-gateway") in {(m.name, m.value) for m in node.matchers.matchers}


def test_prometheus_rule_needs_an_alert(chart: helm.Chart) -> None:
    names = (
        "botErrors",
        "circuitOpen",
        "storeErrors",
        "storeFull",
        "authFailures",
        "latency",
        "userCodeGuessing",
    )
    off = {name: {"enabled": False} for name in names}
    with pytest.raises(helm.HelmRenderError, match=re.escape("every alert under metrics.prometheusRule")):
        _render_text(chart, {"metrics": {"prometheusRule": {"enabled": True, "alerts": off}}})


def test_dashboard_configmap_for_the_grafana_sidecar(
    chart: helm.Chart, rendered: dict[str, list[Manifest]]
) -> None:
    (configmap,) = [doc for doc in _all(rendered["full"], "ConfigMap") if doc["metadata"]["name"] != FULLNAME]
    assert configmap["metadata"]["name"] == f"{FULLNAME}-dashboard"
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"]["grafana_folder"] == "PACT"
    (key,) = configmap["data"]
    assert key.endswith(".json")
    # Served verbatim: helm must not read Grafana's {{label}} legends as its own templates.
    assert json.loads(configmap["data"][key]) == json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))

    docs = _render(
        chart,
        {
            "metrics": {
                "grafanaDashboard": {
                    "enabled": True,
                    "namespace": "grafana",
                    "label": "example.com/dashboard",
                    "labelValue": "pact",
                    "labels": {"team": "sre"},
                }
            }
        },
    )
    (moved,) = [doc for doc in _all(docs, "ConfigMap") if doc["metadata"]["name"] != FULLNAME]
    kubernetes_validate.validate(moved, KUBE_VERSION, strict=True)
    assert moved["metadata"]["namespace"] == "grafana"
    assert moved["metadata"]["labels"]["example.com/dashboard"] == "pact"
    assert moved["metadata"]["labels"]["team"] == "sre"
    assert "grafana_dashboard" not in moved["metadata"]["labels"]


def test_dashboard_queries_real_metrics(exposed: dict[str, frozenset[str]]) -> None:
    """Every panel and variable query parses as PromQL over series a real gateway exports."""
    dashboard = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    assert dashboard["uid"] == "pact-gateway"
    variables = {variable["name"]: variable for variable in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for name in ("namespace", "service", "brand"):
        found = re.fullmatch(r"label_values\((.*), (\w+)\)", variables[name]["definition"])
        assert found is not None, variables[name]["definition"]
        (selector,) = _check_query(found.group(1), exposed)
        assert found.group(2) in exposed[str(selector.name)] | TARGET_LABELS

    charted: set[str] = set()
    panel_ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(panel_ids) == len(set(panel_ids))
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        assert panel["gridPos"]["x"] >= 0, panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
    for title, query in _dashboard_queries(dashboard):
        for selector in _check_query(query, exposed):
            matchers = {(m.name, m.value) for m in selector.matchers.matchers}
            assert {("namespace", "$namespace"), ("service", "$service")} <= matchers, title
            charted.add(re.sub(r"_(total|bucket|count|sum)$", "", str(selector.name)))
    # A metric the gateway exports but no panel shows is a dashboard gone stale.
    families = {re.sub(r"_(total|bucket|count|sum|created)$", "", name) for name in exposed}
    assert families - charted == set(), "add a panel for these metrics to dashboards/pact-gateway.json"


def test_network_policy(rendered: dict[str, list[Manifest]]) -> None:
    policy = _one(rendered["full"], "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    http_rule, metrics_rule = policy["ingress"]
    assert http_rule["ports"] == [{"port": 8080, "protocol": "TCP"}]
    assert http_rule["from"] == [{"namespaceSelector": {"matchLabels": {"name": "ingress-nginx"}}}]
    assert metrics_rule["ports"] == [{"port": 9090, "protocol": "TCP"}]
    assert metrics_rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]

    egress = policy["egress"]
    dns, redis, https, upstream_cidr, upstream_pods, extra = egress
    assert dns["ports"] == [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
    assert "to" not in dns
    assert redis["ports"] == [{"port": 6380, "protocol": "TCP"}]
    assert https["ports"] == [{"port": 443, "protocol": "TCP"}]
    assert https["to"] == [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8"]}}]
    assert upstream_cidr == {
        "ports": [{"port": 9000, "protocol": "TCP"}],
        "to": [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
    }
    assert upstream_pods["to"] == [{"podSelector": {"matchLabels": {"app": "acme-bot"}}}]
    assert extra == {"ports": [{"port": 4317, "protocol": "TCP"}]}


def test_network_policy_ingress_open_by_default(chart: helm.Chart) -> None:
    docs = _render(chart, {"networkPolicy": {"enabled": True}})
    kubernetes_validate.validate(_one(docs, "NetworkPolicy"), KUBE_VERSION, strict=True)
    policy = _one(docs, "NetworkPolicy")["spec"]
    assert "from" not in policy["ingress"][0]
    assert len(policy["egress"]) == 3

    closed = _render(
        chart,
        {
            "networkPolicy": {
                "enabled": True,
                "egress": {
                    "dns": {"enabled": False},
                    "redis": {"enabled": False},
                    "https": {"enabled": False},
                },
            }
        },
    )
    assert _one(closed, "NetworkPolicy")["spec"]["egress"] == []


# ---- the image the chart runs ------------------------------------------------------------------


def test_dockerfile_matches_the_chart(rendered: dict[str, list[Manifest]]) -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\w+)", text, flags=re.MULTILINE)
    assert [name for _, name in stages] == ["builder", "runtime"]
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, flags=re.MULTILINE)
    assert re.search(r"pip wheel\b", text)
    assert re.search(r"^USER 10001(:10001)?$", text, flags=re.MULTILINE)
    assert re.search(r"^EXPOSE 8080 9090$", text, flags=re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["pact-gateway"\]$', text, flags=re.MULTILINE)
    cmd = re.search(r"^CMD (\[.*\])$", text, flags=re.MULTILINE)
    assert cmd is not None
    container = _container(rendered["example"])
    assert yaml.safe_load(cmd.group(1)) == container["args"]
    assert container["securityContext"]["runAsUser"] == 10001


# ---- §5 delegation: the Provider's signing keys ------------------------------------------------


def _delegating_config(signing_key: dict[str, str]) -> dict[str, Any]:
    config = copy.deepcopy(_GATEWAY_CONFIG)
    config["cache"] = {"url": "memory://"}
    config["oauth"] = {"signing_keys": [signing_key]}
    config["brands"][0]["delegation"] = {
        "scopes": {"orders:read": "Look up your orders"},
        "login": {
            "url": "https://login.acme.example/pact",
            "issuer": "https://login.acme.example",
            "jwks_uri": "https://login.acme.example/jwks.json",
        },
    }
    return config


def test_s5_signing_key_files_come_from_the_mounted_secret(chart: helm.Chart, tmp_path: Path) -> None:
    config = _delegating_config({"file": "/etc/pact-gateway/keys/signing.pem"})
    values: dict[str, Any] = {
        "config": config,
        "secrets": {"env": {"ACME_BOT_TOKEN": "a", "GLOBEX_BOT_TOKEN": "g"}},
    }
    with pytest.raises(helm.HelmRenderError, match=re.escape("signingKeys.existingSecret is not set")):
        _render_text(chart, values)
    docs = _render(chart, {**values, "signingKeys": {"existingSecret": "pact-gateway-signing-keys"}})
    mounts = {mount["name"]: mount["mountPath"] for mount in _container(docs)["volumeMounts"]}
    assert mounts["signing-keys"] == "/etc/pact-gateway/keys"
    # The rendered config loads once the key is where the Secret puts it.
    raw = _gateway_config(docs)
    key_file = tmp_path / "signing.pem"
    key_file.write_text(new_provider_key_pem())
    raw["oauth"]["signing_keys"][0]["file"] = str(key_file)
    loaded = load_config(raw, environ=_pod_environ(docs))
    assert loaded.brands["acme"].delegation is not None
    assert [key.alg for key in loaded.oauth.signing_keys] == ["ES256"]


def test_s5_signing_key_from_the_environment_must_be_provided(chart: helm.Chart) -> None:
    config = _delegating_config({"value": "${PACT_SIGNING_KEY}"})
    tokens = {"ACME_BOT_TOKEN": "a", "GLOBEX_BOT_TOKEN": "g"}
    with pytest.raises(helm.HelmRenderError, match=re.escape("config references ${PACT_SIGNING_KEY}")):
        _render_text(chart, {"config": config, "secrets": {"env": tokens}})
    pem = new_provider_key_pem()
    docs = _render(chart, {"config": config, "secrets": {"env": {**tokens, "PACT_SIGNING_KEY": pem}}})
    assert load_config(_gateway_config(docs), environ=_pod_environ(docs)).oauth.signing_keys
