"""The Prometheus alerting rules (monitoring/prometheus/zkcoord-alerts.yml):
``promtool check rules`` accepts them, ``promtool test rules`` passes the
unit tests beside them, and every alert has a test in which it fires.
That the metrics exist is tests/integration/test_monitoring_metrics.py's
business."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

RULES_DIR = Path(__file__).resolve().parents[2] / "monitoring" / "prometheus"
RULES = RULES_DIR / "zkcoord-alerts.yml"
RULE_TESTS = RULES_DIR / "zkcoord-alerts.test.yml"
INSTALL_HINT = "promtool not found: apt-get install prometheus (Debian's package ships promtool)"


def promtool(*args: str) -> subprocess.CompletedProcess:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip(INSTALL_HINT)
    return subprocess.run([tool, *args], cwd=RULES_DIR, capture_output=True, text=True, timeout=120)


def alert_names() -> list[str]:
    return [rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules():
    result = promtool("check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in result.stdout


def test_promtool_rule_unit_tests_pass():
    result = promtool("test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_a_rule_unit_test_fails_when_an_alert_changes(tmp_path):
    """The promtool tests compare labels and annotations exactly: a changed
    threshold or annotation is caught (the tests can fail)."""
    changed = RULES.read_text().replace("zkcoord_zookeeper_connected == 0", "zkcoord_zookeeper_connected == 2")
    assert changed != RULES.read_text()
    (tmp_path / RULES.name).write_text(changed)
    (tmp_path / RULE_TESTS.name).write_text(RULE_TESTS.read_text())
    tool = shutil.which("promtool") or pytest.skip(INSTALL_HINT)
    result = subprocess.run([tool, "test", "rules", RULE_TESTS.name], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode != 0 and "ZkcoordZooKeeperDisconnected" in result.stdout + result.stderr


def test_every_alert_fires_in_some_test_and_has_severity_and_summary():
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {case["alertname"] for test in tests for case in test.get("alert_rule_test", []) if case["exp_alerts"]}
    assert set(alert_names()) - fired == set()
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
            assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


def test_every_rule_parses_as_promql():
    pytest.importorskip("promql_parser", reason="pip install -e '.[test]' (promql-parser)")
    from monitoring import promql

    queries = promql.rule_queries(yaml.safe_load(RULES.read_text()))
    assert len(queries) == len(alert_names())
    for where, expr in queries:
        assert promql.uses(expr, where), where


def test_the_error_alert_and_the_dashboards_error_ratio_leave_out_the_same_codes():
    pytest.importorskip("grafana_foundation_sdk", reason="pip install -e '.[test]' (grafana-foundation-sdk)")
    from monitoring.dashboard import PROTOCOL_STEPS

    rule = next(rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
                if rule["alert"] == "ZkcoordRequestErrors")
    assert f'error!~"{PROTOCOL_STEPS}"' in rule["expr"]
