"""Real legacy consumers as the source of legacy offsets.

A group of Kafka 1.1.1's old ZooKeeper consumers (``ZookeeperConsumerConnector``,
run by :mod:`zkcoord.local.legacy`) consumes a topic on the sandbox's Kafka
3.9 broker, rebalancing and committing through ZooKeeper itself; then
``zkcoord migrate plan``/``apply``/``verify`` move the offsets it committed
and Kafka's committed offsets read back equal.

The driver's reports on several topics: members subscribed to two topics by
name and one by a whitelist with two streams, one of them stopped on its own
(``stop_member``): their claims name every topic's partitions, as the range
answer gives them, and their record logs hold every record exactly once.

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

from tests.support.daemons import process_marker, wait_for
from tests.support.rdkafka_members import produce
from zkcoord.cli.main import cli
from zkcoord.errors import MissingToolError
from zkcoord.local import jars
from zkcoord.local.legacy import LegacyGroup, LegacySettings, driver_classpath
from zkcoord.local.record_log import check_deliveries, read_record_logs

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
    """Start a legacy group with ``start(topic, members, **settings)`` (more
    :class:`LegacySettings` fields); always stopped, its znodes at the root
    deleted."""
    _java_or_skip()
    classpath = driver_classpath()
    group = unique_name("legacy-group")
    started: list[LegacyGroup] = []

    def start(topic: str, members: int, properties: tuple[tuple[str, str], ...] = (), **settings) -> LegacyGroup:
        settings = LegacySettings(services.zookeeper, group, topic, members=members,
                                  **{"commit_interval_ms": 100, "log_records": True, **settings},
                                  properties=(("zookeeper.session.timeout.ms", "6000"),
                                              ("rebalance.backoff.ms", "500"), ("rebalance.max.retries", "20"),
                                              *properties))
        process = LegacyGroup(settings, classpath, tmp_path / f"legacy-consumer-{len(started)}.log",
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


def last_claims(events) -> dict[str, frozenset[tuple[str, int]]]:
    """member -> what its last claim or release left it holding, every topic
    (a member that stopped released everything)."""
    held: dict[str, frozenset[tuple[str, int]]] = {}
    for event in sorted(events, key=lambda e: e.ts_ms):
        if event.event in ("claim", "release"):
            held[event.member] = event.topic_partitions() if event.event == "claim" else frozenset()
    return held


def test_legacy_group_offsets_migrate_to_kafka(services, zk_root, admin, topic, legacy_group):
    group = legacy_group.group
    ends = {p: 10 + 7 * p for p in range(PARTITIONS)}
    consumers = legacy_group(topic, members=2)
    consumers.wait_for(lambda events: committed_by_events(events) == ends, 90,
                       f"the legacy group commits {ends}")
    claims = last_claims(consumers.events())
    consumers.stop()

    events = consumers.events()
    assert {e.member for e in events if e.event == "started"} == {"m1", "m2"}
    assert [e for e in events if e.event == "error"] == []
    assert sorted(tp for parts in claims.values() for tp in parts) == [(topic, p) for p in range(PARTITIONS)]
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


def test_events_and_record_logs_name_every_topic(services, admin, unique_name, legacy_group, tmp_path):
    first, second = unique_name("legacy-a"), unique_name("legacy-b")
    admin.create_topics([NewTopic(first, 4, 1), NewTopic(second, 3, 1)], wait_for_metadata=True)
    auto_commit = (("auto.commit.enable", "true"), ("auto.commit.interval.ms", "100"))  # commits on release too
    named = legacy_group(first, members=2, topics=(second,), record_log=tmp_path / "named.records",
                         properties=auto_commit)
    # No backslash: Kafka 1.1 escapes a whitelist twice in its registration (docs/handover.md, Limits).
    filtered = legacy_group(first, members=1, prefix="w", streams=2, whitelist=f"{first}|{second}",
                            record_log=tmp_path / "filtered.records", properties=auto_commit)
    events = lambda: named.events() + filtered.events()  # noqa: E731
    a, b = (lambda *ps: {(first, p) for p in ps}), (lambda *ps: {(second, p) for p in ps})
    # Threads in Java's order, per topic: m1-0, m2-0, w1-0, w1-1 (the whitelist's streams count for both).
    wait_for(lambda: last_claims(events()) == {"m1": a(0) | b(0), "m2": a(1) | b(1), "w1": a(2, 3) | b(2)},
             90, "every member claims its range of both topics")
    produced = {tp: range(0, len(offsets)) for topic, count in ((first, 4), (second, 3))
                for tp, offsets in produce(services.bootstrap_servers, topic, 10 * count, count, "one").items()}
    logs = (tmp_path / "named.records", tmp_path / "filtered.records")
    wait_for(lambda: not check_deliveries(read_record_logs(logs), produced).missed, 60, "every record logged")

    stopped_at = named.stop_member("m2")  # its connector commits and leaves; the others rebalance without it
    wait_for(lambda: last_claims(events()) == {"m1": a(0, 1) | b(0), "m2": frozenset(), "w1": a(2, 3) | b(1, 2)},
             90, "m1 and w1 claim m2's partitions")
    more = produce(services.bootstrap_servers, first, 8, 4, "two")
    for tp, offsets in more.items():
        produced[tp] = range(0, max(offsets) + 1)
    wait_for(lambda: not check_deliveries(read_record_logs(logs), produced).missed, 60, "the new records logged")
    named.stop()
    filtered.stop()

    check = check_deliveries(read_record_logs(logs), produced)
    assert not check.duplicates and not check.missed, check.summary()
    deliveries = read_record_logs(logs)
    assert {(d.member, d.thread) for d in deliveries} == {("m1", "0"), ("m2", "0"), ("w1", "0"), ("w1", "1")}
    assert all(d.ts_ms <= stopped_at for d in deliveries if d.member == "m2")
    assert {d.topic for d in deliveries if d.member == "m1"} == {first, second}
    every = events()
    assert [e for e in every if e.event == "error"] == []
    assert {e.member for e in every if e.event == "stopped"} == {"m1", "m2", "w1"}
    # "partitions" stays the topic argument's alone, for the single-topic readers.
    claims = [e for e in every if e.event == "claim" and e.member == "m1"]
    assert claims[-1].data["partitions"] == [0, 1] and claims[-1].data["topics"] == {first: [0, 1], second: [0]}
    commits = [e for e in every if e.event == "commit" and e.member == "m1"]
    assert set().union(*(c.data["topics"] for c in commits)) == {first, second}
