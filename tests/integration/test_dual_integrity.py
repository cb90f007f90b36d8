"""A ``dual`` group's two stores on real ZooKeeper and Kafka (issue 16, dual
mode integrity): a stock consumer joining the same group through the broker
(Kafka's own coordinator) while a zkcoord member runs; a commit that reached
Kafka only (a daemon killed between its two writes); what ``migrate
verify``, ``zkcoord describe`` and the metrics say.

The zkcoord member is a stock kafka-python consumer bootstrapped from an
in-process daemon's gateway; the Kafka-side member a stock kafka-python
consumer bootstrapped from the broker (``active_kafka_member``).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families
from test_client_support import read_group_state
from test_gateway_daemon import gateway_config
from test_migrate_flow import (  # noqa: F401 (fixtures)
    OneDaemon, adapters_for, fetch, json_cli, kafka_offsets, layout, legacy, seed, topic,
)

from tests.support.http import http_get
from tests.support.kafka_ready import JOIN_POLL_MS, active_kafka_member, poll_until_assigned
from zkcoord.cli.main import cli
from zkcoord.migrate.apply import apply_group
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration


def metrics_of(port: int) -> dict:
    """{(name, labels as sorted tuple): value} of the daemon's /metrics."""
    status, body = asyncio.run(http_get(port, "/metrics"))
    assert status == 200
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def describe_json(zk_hosts: str, bootstrap: str, group: str) -> dict:
    result = CliRunner().invoke(cli, ["describe", group, "--zookeeper", zk_hosts, "--bootstrap-servers", bootstrap,
                                      "--output", "json"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    return json.loads(result.stdout)["groups"][0]


def test_a_kafka_side_member_neither_fences_zkcoord_members_nor_splits_the_stores(
        services, zk_hosts, layout, zk, admin, topic, unique_name):  # noqa: F811
    group = unique_name("g")
    seed(zk, group, {(topic, p): b"0" for p in range(4)})
    tp0 = TopicPartition(topic, 0)

    def with_a_running_daemon(running) -> None:
        gateway = "%s:%d" % running.gateway
        member = KafkaConsumer(topic, bootstrap_servers=gateway, group_id=group, client_id="zkcoord-side",
                               enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=500)
        try:
            poll_until_assigned(member)
            before = read_group_state(zk, group)
            assert before[0] == "Stable" and len(before[2]) == 1
            with active_kafka_member(services.bootstrap_servers, topic, group) as outsider:
                outsider_id = outsider._coordinator._generation.member_id
                # Kafka refuses the forwarded commit (its group has a member): the zkcoord member hears a failed
                # commit, not UNKNOWN_MEMBER_ID about itself, and keeps its membership.
                with pytest.raises(KafkaError) as refused:
                    member.commit({tp0: OffsetAndMetadata(15, "", -1)})
                assert type(refused.value).__name__ == "UnknownError", refused.value
                for _ in range(2):
                    member.poll(timeout_ms=JOIN_POLL_MS)
                generation = member._coordinator._generation  # kafka-python resets it on UNKNOWN_MEMBER_ID
                assert (generation.member_id, generation.generation_id) == (before[2][0], before[1])
                live = describe_json(zk_hosts, services.bootstrap_servers, group)  # the owner's live view
                assert (live["read_from"], live["state"], [m["member_id"] for m in live["members"]]) == \
                    ("daemon", "Stable", before[2])  # no rejoin, no ghost member
                assert member.assignment()
                # Neither store took the commit: they do not diverge.
                assert legacy(zk, group, topic, 0) == b"0"
                assert kafka_offsets(admin, group)[(topic, 0)] == 0
                # The owner saw the Kafka-side member; describe names it.
                seen = metrics_of(running.metrics_port)
                assert seen[("zkcoord_groups_with_kafka_members", ())] == 1
                assert seen[("zkcoord_kafka_side_members", ())] == 1
                assert seen[("zkcoord_forwarded_commit_refusals_total", (("error", "UNKNOWN_MEMBER_ID"),))] >= 1
                described = describe_json(zk_hosts, services.bootstrap_servers, group)
                assert [m["member_id"] for m in described["kafka_group"]["member_list"]] == [outsider_id]
                assert any(n.startswith("warning: Kafka's own coordinator reports 1 member(s)") and outsider_id in n
                           for n in described["notes"])
                assert described["sources"] == ["zkcoord", "kafka"]  # a consumer outside zkcoord uses the group
                listed = CliRunner().invoke(cli, ["groups", "--zookeeper", zk_hosts, "--bootstrap-servers",
                                                  services.bootstrap_servers, "--output", "json"])
                assert [g["sources"] for g in json.loads(listed.stdout)["groups"] if g["group"] == group] == \
                    [["zkcoord", "kafka"]]
            # The outsider left: Kafka's group is Empty, the commit goes to both stores.
            member.commit({tp0: OffsetAndMetadata(15, "", -1)})
            assert (legacy(zk, group, topic, 0), kafka_offsets(admin, group)[(topic, 0)]) == (b"15", 15)
            assert describe_json(zk_hosts, services.bootstrap_servers, group)["sources"] == ["zkcoord"]
            assert metrics_of(running.metrics_port)[("zkcoord_groups_with_kafka_members", ())] == 0
            assert read_group_state(zk, group) == before
        finally:
            member.close()

    serve_a_dual_group(services.bootstrap_servers, zk_hosts, group, with_a_running_daemon)


def serve_a_dual_group(bootstrap: str, zk_hosts: str, group: str, with_a_running_daemon) -> None:
    """``migrate apply`` puts ``group`` in dual, then an in-process daemon with
    a gateway and metrics serves it while ``with_a_running_daemon(running)``
    runs in a thread."""

    async def scenario():
        applied = await adapters_for(zk_hosts, bootstrap, lambda a: apply_group(a, group))
        assert applied.phase == "dual"
        daemon = Daemon(gateway_config(zk_hosts, bootstrap, 1))
        running = await daemon.start()
        try:
            await asyncio.to_thread(with_a_running_daemon, running)
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_verify_reports_both_directions_and_a_kafka_only_commit_is_repaired_on_load(
        services, zk_hosts, layout, zk, admin, topic, unique_name):  # noqa: F811
    group = unique_name("g")
    seed(zk, group, {(topic, 0): b"10", (topic, 1): b"20"})
    z = ["--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]
    assert json_cli("apply", "--group", group, *z)[0]["phase"] == "dual"
    assert json_cli("verify", "--group", group, *z)[0]["clean"] is True

    # A daemon killed after Kafka stored a commit and before ZooKeeper did: Kafka ahead on 0.
    admin.alter_group_offsets(group, {TopicPartition(topic, 0): OffsetAndMetadata(15, "m", -1)})
    # A partition only Kafka has, and a legacy consumer moving ZooKeeper on (Kafka behind on 1).
    admin.alter_group_offsets(group, {TopicPartition(topic, 2): OffsetAndMetadata(7, "", -1)})
    zk.set(f"/consumers/{group}/offsets/{topic}/1", b"25")

    found = json_cli("verify", "--group", group, *z, code=1)[0]
    assert found["clean"] is False
    assert found["behind"] == [{"topic": topic, "partition": 1, "zookeeper": 25, "kafka": 20}]
    assert found["zookeeper_behind"] == [{"topic": topic, "partition": 0, "zookeeper": 10, "kafka": 15},
                                         {"topic": topic, "partition": 2, "zookeeper": None, "kafka": 7}]
    table = CliRunner().invoke(cli, ["migrate", "verify", "--group", group, *z], env={"COLUMNS": "300"})
    assert table.exit_code == 1 and "ZooKeeper behind Kafka" in table.output and "Kafka behind ZooKeeper" in \
        table.output
    assert json_cli("finalize", "--group", group, *z, code=1)[0]["outcome"] == "not-clean"

    async def load_the_group():
        async with OneDaemon(zk_hosts, services.bootstrap_servers) as one:
            client = await one.coordinator(group)
            code, rows = await fetch(client, group)  # the first group request: the daemon contends and loads
            assert (code, rows[(topic, 0)]) == (0, (15, "m"))  # the larger offset, whatever the repair did yet
            repair = one.daemon.manager.group_offsets.repairs.get(group)
            if repair is not None:
                await repair

    asyncio.run(load_the_group())
    assert [legacy(zk, group, topic, p) for p in range(3)] == [b"15", b"25", b"7"]
    again = json_cli("verify", "--group", group, *z, code=1)[0]
    assert (again["behind"], again["zookeeper_behind"]) == (
        [{"topic": topic, "partition": 1, "zookeeper": 25, "kafka": 20}], [])
