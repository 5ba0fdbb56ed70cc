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
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from gateway.config import load_config
from tests.support.delegation import new_provider_key_pem

Manifest = dict[str, Any]

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "deploy" / "helm" / "pact-gateway"
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
    "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
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
        }
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

SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
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


def _render(chart: helm.Chart, values: Mapping[str, Any]) -> list[Manifest]:
    return _parse(chart.render(dict(values), name=RELEASE, namespace=NAMESPACE))


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
    configmap = _one(docs, "ConfigMap")
    assert configmap["metadata"]["name"] == FULLNAME
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


@pytest.mark.parametrize("scenario", ["default", "full", "existing-secrets"])
def test_helm_lint_passes(scenario: str) -> None:
    report = helm.lint(CHART_DIR, SCENARIOS[scenario] or None, strict=True, kube_version=f"v{KUBE_VERSION}")
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
    ],
)
def test_values_schema_rejects_typos(chart: helm.Chart, values: dict[str, Any], needle: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=re.escape(needle)):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


def test_chart_metadata(chart: helm.Chart) -> None:
    metadata = chart.metadata
    assert metadata["apiVersion"] == "v2"
    assert metadata["name"] == "pact-gateway"
    assert metadata["appVersion"] == "0.1.0"
    schema = chart.schema
    assert schema is not None
    assert schema["additionalProperties"] is False


# ---- every manifest is valid Kubernetes --------------------------------------------------------


@pytest.mark.parametrize("scenario", ["default", "full", "existing-secrets"])
def test_manifests_validate_against_kubernetes_schema(
    rendered: dict[str, list[Manifest]], scenario: str
) -> None:
    docs = rendered[scenario]
    assert docs
    for doc in docs:
        if doc["kind"] == "ServiceMonitor":
            continue  # a CRD: no upstream schema; its shape is asserted below
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(part) for part in exc.path)
            pytest.fail(f"{doc['kind']}/{doc['metadata']['name']} ({scenario}): {path}: {exc.message}")
        assert doc["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize(
    ("scenario", "kinds"),
    [
        ("default", {"ConfigMap", "Deployment", "Service", "ServiceAccount"}),
        (
            "full",
            {
                "ConfigMap",
                "Deployment",
                "Service",
                "ServiceAccount",
                "Secret",
                "Ingress",
                "HorizontalPodAutoscaler",
                "PodDisruptionBudget",
                "ServiceMonitor",
                "NetworkPolicy",
            },
        ),
        ("existing-secrets", {"ConfigMap", "Deployment", "Service", "ServiceAccount"}),
    ],
)
def test_rendered_kinds(rendered: dict[str, list[Manifest]], scenario: str, kinds: set[str]) -> None:
    docs = rendered[scenario]
    assert sorted(doc["kind"] for doc in docs) == sorted(kinds)


def test_standard_labels_everywhere(rendered: dict[str, list[Manifest]]) -> None:
    for doc in rendered["full"]:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "pact-gateway"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["helm.sh/chart"] == "pact-gateway-0.1.0"
        assert labels["team"] == "support"
        assert doc["metadata"]["annotations"]["owner"] == "support-platform"


# ---- the pod -----------------------------------------------------------------------------------


def test_pod_is_locked_down(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["default"]
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


def test_image_defaults_to_app_version(chart: helm.Chart, rendered: dict[str, list[Manifest]]) -> None:
    assert _container(rendered["default"])["image"] == "ghcr.io/example/pact-gateway:0.1.0"
    digest = "sha256:" + "ab" * 32
    docs = _render(chart, {"image": {"tag": "0.2.0", "digest": digest, "repository": "registry.local/gw"}})
    assert _container(docs)["image"] == f"registry.local/gw@{digest}"


def test_probes_hit_the_ops_listener(rendered: dict[str, list[Manifest]]) -> None:
    container = _container(rendered["default"])
    assert dict(_iter_named_ports(rendered["default"])) == {"http": 8080, "metrics": 9090}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "enabled" not in container["livenessProbe"]
    assert "startupProbe" not in container

    full = _container(rendered["full"])
    assert full["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert full["startupProbe"]["failureThreshold"] == 30


def test_command_line_and_mounts(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["default"]
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
    assert full_container["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}


def test_service_and_ports(rendered: dict[str, list[Manifest]]) -> None:
    service = _one(rendered["default"], "Service")
    ports = {port["name"]: port for port in service["spec"]["ports"]}
    assert (ports["http"]["port"], ports["http"]["targetPort"]) == (8080, "http")
    assert (ports["metrics"]["port"], ports["metrics"]["targetPort"]) == (9090, "metrics")
    pod_labels = _one(rendered["default"], "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()


def test_config_ports_follow_the_gateway_config(chart: helm.Chart) -> None:
    docs = _render(chart, {"config": {"listen": {"port": 8181}, "metrics": {"port": 9191}}})
    assert dict(_iter_named_ports(docs)) == {"http": 8181, "metrics": 9191}
    raw = _gateway_config(docs)
    assert raw["listen"] == {"port": 8181}
    assert raw["metrics"] == {"port": 9191}

    docs = _render(chart, {"containerPorts": {"http": 8000, "metrics": 9000}})
    assert dict(_iter_named_ports(docs)) == {"http": 8000, "metrics": 9000}
    assert load_config(_gateway_config(docs), environ={}).listen.port == 8000
    assert load_config(_gateway_config(docs), environ={}).metrics.port == 9000


def test_checksums_roll_the_pods_on_change(chart: helm.Chart, rendered: dict[str, list[Manifest]]) -> None:
    base = _pod_annotations(rendered["default"])["checksum/config"]
    assert re.fullmatch(r"[0-9a-f]{64}", base)
    assert _pod_annotations(_render(chart, {}))["checksum/config"] == base  # deterministic
    changed = _render(chart, {"config": {"logging": {"level": "DEBUG"}}})
    assert _pod_annotations(changed)["checksum/config"] != base
    assert "checksum/secret" not in _pod_annotations(rendered["default"])

    full = _pod_annotations(rendered["full"])
    assert full["example.com/scrape"] == "false"
    rotated = _render(chart, _merge(FULL_VALUES, {"secrets": {"env": {"ACME_BOT_TOKEN": "rotated"}}}))
    assert _pod_annotations(rotated)["checksum/secret"] != full["checksum/secret"]
    assert _pod_annotations(rotated)["checksum/config"] == full["checksum/config"]


# ---- the rendered gateway config ---------------------------------------------------------------


def test_default_config_loads_with_the_gateway_loader(rendered: dict[str, list[Manifest]]) -> None:
    docs = rendered["default"]
    config = load_config(_gateway_config(docs), environ=_pod_environ(docs))
    assert config.listen.port == 8080
    assert config.metrics.port == 9090
    assert config.metrics.enabled is True
    assert config.cache.backend == "memory"
    assert list(config.brands) == ["acme"]


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
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
    values["secrets"] = {"env": {"ACME_BOT_TOKEN": "a", "GLOBEX_BOT_TOKEN": "g"}}
    del values["redis"]
    with pytest.raises(helm.HelmRenderError, match=re.escape("config references ${REDIS_PASSWORD}")):
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


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
        chart.render(values, name=RELEASE, namespace=NAMESPACE)


def test_redis_cache_allows_replicas(chart: helm.Chart) -> None:
    docs = _render(chart, {"replicaCount": 2, "config": {"cache": {"url": "redis://redis.data:6379/0"}}})
    assert _one(docs, "Deployment")["spec"]["replicas"] == 2
    assert load_config(_gateway_config(docs), environ={}).cache.backend == "redis"


def test_metrics_listener_cannot_be_disabled(chart: helm.Chart) -> None:
    with pytest.raises(helm.HelmRenderError, match=re.escape("config.metrics.enabled is false")):
        chart.render({"config": {"metrics": {"enabled": False}}}, name=RELEASE, namespace=NAMESPACE)


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
    container = _container(rendered["default"])
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
        chart.render(values, name=RELEASE, namespace=NAMESPACE)
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
        chart.render({"config": config, "secrets": {"env": tokens}}, name=RELEASE, namespace=NAMESPACE)
    pem = new_provider_key_pem()
    docs = _render(chart, {"config": config, "secrets": {"env": {**tokens, "PACT_SIGNING_KEY": pem}}})
    assert load_config(_gateway_config(docs), environ=_pod_environ(docs)).oauth.signing_keys
