"""Real legacy consumers as the source of legacy offsets.

A group of Kafka 1.1.1's old ZooKeeper consumers (``ZookeeperConsumerConnector``,
run by :mod:`zkcoord.local.legacy`) consumes a topic on the sandbox's Kafka
3.9 broker, rebalancing and committing through ZooKeeper itself; then
``zkcoord migrate plan``/``apply``/``verify`` move the offsets it committed
and Kafka's committed offsets read back equal.

The old consumer reads ``/brokers`` from its connection's root, so it runs
on ZooKeeper's root (where the broker registers), not in the test's chroot;
its group and topic names are unique to the test, and what it and the
migration wrote there is deleted afterwards. Its JVM carries the
``zkcoord-test-process`` marker that ``.ci/run`` kills by.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from kafka import KafkaProducer
from kafka.admin import NewTopic

from tests.support.daemons import process_marker
from zkcoord.cli.main import cli
from zkcoord.errors import MissingToolError
from zkcoord.local import jars
from zkcoord.local.legacy import LegacyGroup, LegacySettings, driver_classpath

pytestmark = pytest.mark.integration
PARTITIONS = 4


def _java_or_skip() -> None:
    try:
        jars.find_java()
    except MissingToolError as exc:
        pytest.skip(f"the legacy consumer needs java: {exc}")


@pytest.fixture
def topic(services, admin, unique_name):
    """A topic whose partition p holds 10 + 7p records (so offsets differ)."""
    name = unique_name("legacy-orders")
    admin.create_topics([NewTopic(name, PARTITIONS, 1)], wait_for_metadata=True)
    producer = KafkaProducer(bootstrap_servers=services.bootstrap_servers, acks="all")
    for partition in range(PARTITIONS):
        for i in range(10 + 7 * partition):
            producer.send(name, value=b"r%d" % i, partition=partition)
    producer.flush()
    producer.close()
    return name


@pytest.fixture
def legacy_group(services, zk_root, unique_name, tmp_path):
    """Start a legacy group with ``start(topic, members)``; always stopped,
    its znodes at the root deleted."""
    _java_or_skip()
    classpath = driver_classpath()
    group = unique_name("legacy-group")
    started: list[LegacyGroup] = []

    def start(topic: str, members: int) -> LegacyGroup:
        settings = LegacySettings(services.zookeeper, group, topic, members=members, commit_interval_ms=100,
                                  log_records=True,
                                  properties=(("zookeeper.session.timeout.ms", "6000"),
                                              ("rebalance.backoff.ms", "500"), ("rebalance.max.retries", "20")))
        process = LegacyGroup(settings, classpath, tmp_path / "legacy-consumer.log",
                              jvm_args=(f"-D{process_marker()}",))
        started.append(process)
        return process.start()

    start.group = group
    yield start
    for process in started:
        process.stop()
    for path in (f"/consumers/{group}", f"/coordinators/{group}", f"/zkcoord/migrations/{group}"):
        zk_root.delete(path, recursive=True)


def migrate(*args: str, code: int = 0):
    result = CliRunner().invoke(cli, ["migrate", *args, "--output", "json"], env={"COLUMNS": "300"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert result.exit_code == code, result.output
    document = json.loads(result.stdout)
    assert document["schema"] == f"zkcoord/migrate-{args[0]}/v1"
    return document if args[0] == "plan" else document["groups"]


def committed_by_events(events) -> dict[int, int]:
    """partition -> the last offset a member logged as committed."""
    offsets: dict[int, int] = {}
    for event in events:
        if event.event == "commit":
            offsets.update({int(p): o for p, o in event.data["offsets"].items()})
    return offsets


def final_claims(events) -> dict[str, list[int]]:
    claims: dict[str, list[int]] = {}
    for event in events:
        if event.event in ("claim", "release"):
            claims[event.member] = event.data["partitions"] if event.event == "claim" else []
    return claims


def test_legacy_group_offsets_migrate_to_kafka(services, zk_root, admin, topic, legacy_group):
    group = legacy_group.group
    ends = {p: 10 + 7 * p for p in range(PARTITIONS)}
    consumers = legacy_group(topic, members=2)
    consumers.wait_for(lambda events: committed_by_events(events) == ends, 90,
                       f"the legacy group commits {ends}")
    consumers.stop()

    events = consumers.events()
    assert {e.member for e in events if e.event == "started"} == {"m1", "m2"}
    assert [e for e in events if e.event == "error"] == []
    claims = final_claims(events)
    assert sorted(p for parts in claims.values() for p in parts) == list(range(PARTITIONS))
    consumed = {(e.data["partition"], e.data["offset"]) for e in events if e.event == "consumed"}
    assert consumed == {(p, o) for p, end in ends.items() for o in range(end)}
    # The old consumer wrote these itself, and registered and claimed through ZooKeeper.
    legacy_root = f"/consumers/{group}/offsets/{topic}"
    assert {int(p): int(zk_root.get(f"{legacy_root}/{p}")[0]) for p in zk_root.get_children(legacy_root)} == ends
    assert zk_root.get_children(f"/consumers/{group}/ids") == []  # stopped: sessions closed

    z = ["--group", group, "--zookeeper", services.zookeeper, "--bootstrap-servers", services.bootstrap_servers]
    plan = migrate("plan", *z)
    assert plan["totals"]["to_write"] == PARTITIONS and {d: n for d, n in plan["totals"]["by_decision"].items() if n} == {"copy": PARTITIONS}
    applied = migrate("apply", *z)
    assert [(r["group"], r["outcome"], r["phase"]) for r in applied] == [(group, "applied", "dual")]
    assert sorted(tuple(c) for c in applied[0]["committed"]) == [(topic, p, end) for p, end in ends.items()]
    verified = migrate("verify", *z)
    assert [(r["group"], r["clean"], r["checked"]) for r in verified] == [(group, True, PARTITIONS)]

    answer = admin.list_group_offsets({group: None})[group]
    assert {tp.partition: oam.offset for tp, oam in answer.items() if tp.topic == topic} == ends
