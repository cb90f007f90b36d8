"""The JSON schema of `zkcoord describe` / `zkcoord groups` is a contract: these
tests pin every key and value type, so a change to it is a conscious one
(and bumps the schema version when a key is renamed or removed)."""

from __future__ import annotations

import json

from zkcoord.inspect.model import (
    DESCRIBE_SCHEMA, GROUPS_SCHEMA, Coordinator, Daemon, DescribeReport, GroupError, GroupsReport, GroupSummary,
    GroupView, KafkaGroupInfo, MemberView, Migration, OffsetRow,
)

VIEW = GroupView(
    "billing", ("zkcoord", "legacy", "kafka"), "Stable", "daemon", "dual", generation=7, protocol_type="consumer",
    assignment_strategy="range", coordinator=Coordinator(1, "coord-1", 9301, live=True),
    migration=Migration("dual", 1795315596682), kafka_group=KafkaGroupInfo("Empty", 0),
    members=(MemberView("m1", None, "c1", "/10.0.0.5", (("orders", (0, 2)),), member_type="classic"),
             MemberView("m2", "worker-b", "c2", "/10.0.0.6", None, member_type="classic")),
    offsets=(OffsetRow("orders", 0, 42, 42, 40, 50, "m1", "/10.0.0.5", "c1"),
             OffsetRow("orders", 1, None, None, None, 50)),
    notes=("a note",), group_type="classic")
CONSUMER_VIEW = GroupView(
    "kip848", ("zkcoord",), "Reconciling", "zookeeper", "zookeeper", protocol_type="consumer",
    assignment_strategy="uniform", group_type="consumer", group_epoch=5, assignment_epoch=5,
    members=(MemberView("AAAAAAAAAAAAAAAAAAAAAQ", None, "c1", "/10.0.0.5", (("orders", (0, 1)),),
                        member_type="consumer", member_epoch=4, target_assignment=(("orders", (0,)),),
                        subscribed_topic_names=("orders",)),
             MemberView("classic-1", "static-1", "c2", "/10.0.0.6", (), member_type="classic", member_epoch=5,
                        target_assignment=(("orders", (1,)),), rack_id="r1", subscribed_topic_names=("orders",),
                        subscribed_topic_regex="ord.*")))


def test_describe_document():
    report = DescribeReport("zk-1:2181/kafka", "/consumers", "k1:9092", (Daemon(1, "coord-1", 9301, "0.1.0"),),
                            (VIEW,), (GroupError("nope", "not-found", "consumer group 'nope' does not exist"),),
                            ("global note",))
    doc = json.loads(json.dumps(report.as_dict()))
    assert doc == {
        "schema": DESCRIBE_SCHEMA, "zookeeper": "zk-1:2181/kafka", "zk_root": "/consumers",
        "bootstrap_servers": "k1:9092",
        "daemons": [{"node_id": 1, "host": "coord-1", "port": 9301, "version": "0.1.0"}],
        "notes": ["global note"],
        "groups": [{
            "group": "billing", "sources": ["zkcoord", "legacy", "kafka"], "type": "classic", "state": "Stable",
            "read_from": "daemon", "generation": 7, "group_epoch": None, "assignment_epoch": None,
            "protocol_type": "consumer", "assignment_strategy": "range", "storage": "dual",
            "coordinator": {"node_id": 1, "host": "coord-1", "port": 9301, "live": True},
            "migration": {"phase": "dual", "since_ms": 1795315596682},
            "kafka_group": {"state": "Empty", "members": 0, "member_list": []},
            "members": [
                {"member_id": "m1", "group_instance_id": None, "client_id": "c1", "host": "/10.0.0.5",
                 "partitions": 2, "assignment": {"orders": [0, 2]}, "member_type": "classic", "member_epoch": None,
                 "target_assignment": None, "rack_id": None, "subscribed_topic_names": None,
                 "subscribed_topic_regex": None},
                {"member_id": "m2", "group_instance_id": "worker-b", "client_id": "c2", "host": "/10.0.0.6",
                 "partitions": None, "assignment": None, "member_type": "classic", "member_epoch": None,
                 "target_assignment": None, "rack_id": None, "subscribed_topic_names": None,
                 "subscribed_topic_regex": None}],
            "offsets": [
                {"topic": "orders", "partition": 0, "current_offset": 42, "zookeeper_offset": 42,
                 "kafka_offset": 40, "log_end_offset": 50, "lag": 8, "member_id": "m1", "host": "/10.0.0.5",
                 "client_id": "c1"},
                {"topic": "orders", "partition": 1, "current_offset": None, "zookeeper_offset": None,
                 "kafka_offset": None, "log_end_offset": 50, "lag": None, "member_id": None, "host": None,
                 "client_id": None}],
            "legacy_rebalance": None, "notes": ["a note"]}],
        "errors": [{"group": "nope", "error": "not-found", "message": "consumer group 'nope' does not exist"}]}
    assert report.exit_code == 1
    assert DescribeReport("z", "/consumers", None, (), (VIEW,)).exit_code == 0


def test_consumer_group_in_the_describe_document():
    """A KIP-848 group: its type and epochs, no generation; per member its
    type, epoch, current and target assignments, subscription."""
    [doc] = json.loads(json.dumps(DescribeReport("z", "/consumers", None, (), (CONSUMER_VIEW,)).as_dict()))["groups"]
    assert doc == {
        "group": "kip848", "sources": ["zkcoord"], "type": "consumer", "state": "Reconciling",
        "read_from": "zookeeper", "generation": None, "group_epoch": 5, "assignment_epoch": 5,
        "protocol_type": "consumer", "assignment_strategy": "uniform", "storage": "zookeeper", "coordinator": None,
        "migration": None, "kafka_group": None,
        "members": [
            {"member_id": "AAAAAAAAAAAAAAAAAAAAAQ", "group_instance_id": None, "client_id": "c1", "host": "/10.0.0.5",
             "partitions": 2, "assignment": {"orders": [0, 1]}, "member_type": "consumer", "member_epoch": 4,
             "target_assignment": {"orders": [0]}, "rack_id": None, "subscribed_topic_names": ["orders"],
             "subscribed_topic_regex": None},
            {"member_id": "classic-1", "group_instance_id": "static-1", "client_id": "c2", "host": "/10.0.0.6",
             "partitions": 0, "assignment": {}, "member_type": "classic", "member_epoch": 5,
             "target_assignment": {"orders": [1]}, "rack_id": "r1", "subscribed_topic_names": ["orders"],
             "subscribed_topic_regex": "ord.*"}],
        "offsets": [], "legacy_rebalance": None, "notes": []}
    assert CONSUMER_VIEW.mixed and not VIEW.mixed
    classic_only = GroupView("g", ("zkcoord",), "Stable", "daemon", "zookeeper", group_type="consumer",
                             members=(CONSUMER_VIEW.members[1],))
    assert not classic_only.mixed  # every member classic: not a mix (Kafka shows no UPGRADED column either)


def test_groups_document():
    report = GroupsReport("zk:2181", "/consumers", None, (), (
        GroupSummary("a", "Stable", ("zkcoord",), "zookeeper", 2, 3, Coordinator(4, None, None, live=False),
                     group_type="classic"),
        GroupSummary("b", "Empty", ("legacy",), "zookeeper", 0),
        GroupSummary("c", "Assigning", ("zkcoord",), "dual", 3, None, None, group_type="consumer", group_epoch=9,
                     assignment_epoch=8)), ("n",))
    assert json.loads(json.dumps(report.as_dict())) == {
        "schema": GROUPS_SCHEMA, "zookeeper": "zk:2181", "zk_root": "/consumers", "bootstrap_servers": None,
        "daemons": [], "notes": ["n"],
        "groups": [
            {"group": "a", "state": "Stable", "generation": 3,
             "owner": {"node_id": 4, "host": None, "port": None, "live": False}, "members": 2,
             "storage": "zookeeper", "sources": ["zkcoord"], "error": None, "type": "classic", "group_epoch": None,
             "assignment_epoch": None, "legacy_consumers": 0, "handover": None},
            {"group": "b", "state": "Empty", "generation": None, "owner": None, "members": 0,
             "storage": "zookeeper", "sources": ["legacy"], "error": None, "type": None, "group_epoch": None,
             "assignment_epoch": None, "legacy_consumers": 0, "handover": None},
            {"group": "c", "state": "Assigning", "generation": None, "owner": None, "members": 3,
             "storage": "dual", "sources": ["zkcoord"], "error": None, "type": "consumer", "group_epoch": 9,
             "assignment_epoch": 8, "legacy_consumers": 0, "handover": None}]}


def test_schema_versions():
    assert (DESCRIBE_SCHEMA, GROUPS_SCHEMA) == ("zkcoord/describe/v1", "zkcoord/groups/v1")
