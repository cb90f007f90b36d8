"""The dashboard and the alerting rules read metrics a real daemon exports.

An in-process daemon with a gateway and ``--metrics-listen`` serves a
``dual`` group (migrated with ``migrate apply``'s code) to a stock
kafka-python consumer bootstrapped from the gateway: FindCoordinator,
JoinGroup, SyncGroup, Heartbeat, OffsetFetch and OffsetCommit are answered
by the daemon, Metadata, ListOffsets and Fetch forwarded to the broker. A
second consumer joins the same group in Kafka's own coordinator, so Kafka
refuses the group's forwarded commit (the refusal and the Kafka-side member
series exist). Then ``/metrics`` is scraped, and every series selector of
the generated dashboard and of the rules file, found by a PromQL parser
(:mod:`monitoring.promql`), must name a metric and labels the scrape has;
the label values they name must be values zkcoord can export. ``promtool
check metrics`` lints the scrape when promtool is installed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from kafka import KafkaConsumer
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families
from test_dual_integrity import serve_a_dual_group
from test_migrate_flow import RECORDS, layout, seed, topic  # noqa: F401 (fixtures)

from tests.support.http import http_get
from tests.support.kafka_ready import JOIN_POLL_MS, active_kafka_member, poll_until_assigned
from zkcoord.core.errors import ErrorCode
from zkcoord.core.groups import KINDS
from zkcoord.core.membership import OFFSET_STORAGES

promql = pytest.importorskip("monitoring.promql", reason="pip install -e '.[test]' (promql-parser)")

pytestmark = pytest.mark.integration
DASHBOARD = Path(__file__).resolve().parents[2] / "monitoring" / "grafana" / "zkcoord-dashboard.json"
RULES = DASHBOARD.parents[1] / "prometheus" / "zkcoord-alerts.yml"

# Every value zkcoord can give these labels (from the code that sets them).
KNOWN_VALUES = {
    "error": [e.name for e in ErrorCode],
    "mode": list(OFFSET_STORAGES),
    "state": [s for kind in KINDS for s in kind.state_names],
    "type": [kind.name for kind in KINDS],
    "protocol": [kind.name for kind in KINDS],  # the protocol a member speaks: classic or consumer
    "direction": ["request", "response"],
}


def drive_the_group_apis(gateway: str, bootstrap: str, topic: str, group: str) -> None:  # noqa: F811
    """Join, sync, heartbeat, fetch, commit and fetch offsets through the
    gateway; then a commit Kafka refuses (a member in its own coordinator)."""
    member = KafkaConsumer(topic, bootstrap_servers=gateway, group_id=group, client_id="monitoring-test",
                           enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=300,
                           auto_offset_reset="earliest")
    try:
        poll_until_assigned(member)  # Metadata, ListOffsets and Fetch through the gateway
        assert all(member.position(tp) == RECORDS for tp in member.assignment())  # its polls fetched every record
        tp = next(iter(member.assignment()))
        member.commit({tp: OffsetAndMetadata(3, "", -1)})  # a dual commit: both stores
        assert member.committed(tp) == 3  # OffsetFetch
        with active_kafka_member(bootstrap, topic, group):
            with pytest.raises(KafkaError):  # Kafka's own group has a member: the forward is refused
                member.commit({tp: OffsetAndMetadata(4, "", -1)})
            member.poll(timeout_ms=JOIN_POLL_MS)  # heartbeats go on meanwhile
    finally:
        member.close()


def scrape(port: int) -> tuple[str, list[tuple[str, dict]]]:
    status, body = asyncio.run(http_get(port, "/metrics"))
    assert status == 200
    text = body.decode()
    return text, [(s.name, s.labels) for family in text_string_to_metric_families(text) for s in family.samples]


def selectors() -> list:
    """Every series selector of the generated dashboard and of the rules file."""
    dashboard = json.loads(DASHBOARD.read_text())
    rules = yaml.safe_load(RULES.read_text())
    found = [use for where, expr in promql.dashboard_queries(dashboard) + promql.rule_queries(rules)
             for use in promql.uses(expr, where)]
    assert len(found) > 40
    return found


def test_every_metric_and_label_the_dashboard_and_rules_use_is_exported(
        services, zk_hosts, layout, zk, topic, unique_name):  # noqa: F811
    group = unique_name("g")
    seed(zk, group, {(topic, p): b"0" for p in range(4)})
    scraped: dict = {}

    def with_a_running_daemon(running) -> None:
        gateway = "%s:%d" % running.gateway
        drive_the_group_apis(gateway, services.bootstrap_servers, topic, group)
        scraped["text"], scraped["samples"] = scrape(running.metrics_port)

    serve_a_dual_group(services.bootstrap_servers, zk_hosts, group, with_a_running_daemon)
    samples = scraped["samples"]
    used = selectors()
    assert promql.unmatched(used, samples) == []
    assert promql.unknown_values(used, KNOWN_VALUES) == []
    # What the scenario made exist, so that the check above had labelled series to look at.
    names = {name for name, _ in samples}
    assert {"zkcoord_requests_total", "zkcoord_offset_commits_total", "zkcoord_forwarded_commit_refusals_total",
            "zkcoord_gateway_forwarded_requests_total", "zkcoord_gateway_forwarded_bytes_total"} <= names
    assert ("zkcoord_offset_commits_total", {"mode": "dual"}) in samples
    assert any(name == "zkcoord_requests_total" and labels["api"] == "Heartbeat" for name, labels in samples)
    assert any(name == "zkcoord_gateway_forwarded_bytes_total" and labels == {"api": "Fetch", "direction": "response"}
               for name, labels in samples)
    lint(scraped["text"])


def lint(text: str) -> None:
    """promtool's own check of the exposition (naming, units, types), when installed."""
    tool = shutil.which("promtool")
    if tool is None:
        return
    result = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
