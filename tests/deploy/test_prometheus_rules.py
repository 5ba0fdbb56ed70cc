"""The chart's PrometheusRule under Prometheus's own ``promtool`` (issue 19).

``promtool check rules`` validates the rendered rules as Prometheus loads them, and ``promtool test
rules`` runs prometheus_rules_test.yaml beside this file: every alert the chart renders fires once
its condition has held for its ``for``, and not a minute before, with its labels and annotations
as Prometheus templates them. promtool is Debian's ``prometheus`` package (scripts/setup.sh installs
it); missing, these tests skip on a workstation and fail under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "deploy" / "helm" / "pact-gateway"
UNIT_TESTS = Path(__file__).with_name("prometheus_rules_test.yaml")
PROMTOOL_TIMEOUT = 120
"""Seconds one promtool run may take (it starts in well under one; the machine is shared)."""


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        message = "promtool is missing: run scripts/setup.sh (it installs Debian's prometheus package)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


@pytest.fixture(scope="module")
def rule_groups() -> list[dict[str, Any]]:
    """``spec.groups`` of the PrometheusRule of release ``pg`` in ``support``, every alert enabled."""
    values: dict[str, Any] = yaml.safe_load((CHART_DIR / "values-example.yaml").read_text(encoding="utf-8"))
    with helm.Chart.load(CHART_DIR) as chart:
        alerts = {name: {"enabled": True} for name in chart.values["metrics"]["prometheusRule"]["alerts"]}
        values["metrics"] = {"prometheusRule": {"enabled": True, "alerts": alerts}}
        rendered = chart.render(values, name="pg", namespace="support")
    (text,) = [body for path, body in rendered.items() if path.endswith("templates/prometheusrule.yaml")]
    groups: list[dict[str, Any]] = yaml.safe_load(text)["spec"]["groups"]
    return groups


def _run(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=PROMTOOL_TIMEOUT, cwd=cwd, check=False
    )


def _rules_dir(tmp_path: Path, groups: list[dict[str, Any]]) -> Path:
    rules = yaml.safe_dump({"groups": groups}, sort_keys=False)
    (tmp_path / "rules.yaml").write_text(rules, encoding="utf-8")
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return tmp_path


def test_promtool_accepts_the_rules(promtool: str, rule_groups: list[dict[str, Any]], tmp_path: Path) -> None:
    checked = _run(promtool, "check", "rules", "rules.yaml", cwd=_rules_dir(tmp_path, rule_groups))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    alerts = [rule for group in rule_groups for rule in group["rules"] if "alert" in rule]
    assert f"SUCCESS: {len(alerts)} rules found" in checked.stdout


def test_every_alert_fires_after_its_for_and_not_before(
    promtool: str, rule_groups: list[dict[str, Any]], tmp_path: Path
) -> None:
    tested = _run(promtool, "test", "rules", UNIT_TESTS.name, cwd=_rules_dir(tmp_path, rule_groups))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_of_the_chart_has_a_unit_test(rule_groups: list[dict[str, Any]]) -> None:
    """A new alert in templates/prometheusrule.yaml fails here until prometheus_rules_test.yaml fires it
    (firing, and pending just before its ``for``)."""
    rendered = {rule["alert"] for group in rule_groups for rule in group["rules"] if "alert" in rule}
    unit_tests = yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))
    firing: set[str] = set()
    pending: set[str] = set()
    for case in unit_tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else pending).add(check["alertname"])
    assert rendered == firing, "fire each of the chart's alerts in tests/deploy/prometheus_rules_test.yaml"
    assert rendered == pending, "check each alert is not yet firing just before its `for` elapses"
