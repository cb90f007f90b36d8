"""A Kafka 4.x cluster in KRaft mode as the migration's target.

Kafka's ZooKeeper-to-KRaft migration moves topics, configs and ACLs, not
``/consumers``: the legacy groups' offsets stay in the old ZooKeeper
ensemble. Here the legacy offsets are read from the sandbox's ZooKeeper and
written into the sandbox's Kafka 4.x KRaft node (``kafka4``), whose topics
were made with the same partition counts and the same records (what
MirrorMaker or the operator's own copy leaves there):

* the whole story with real clients: Kafka 1.1.1's old consumer commits in
  ZooKeeper (against the 3.9 ZooKeeper-mode broker), ``migrate plan``,
  ``apply``, ``verify``, ``finalize`` into the KRaft cluster, Kafka 4.x's
  Java consumer (KIP-848's consumer protocol) resumes exactly where the old
  one stopped, and ``rollback`` brings its progress back to ZooKeeper;
* a group with active members in Kafka 4.x's own coordinator (a KIP-848
  consumer group, which Kafka 4.x describes only with ConsumerGroupDescribe)
  is refused by apply;
* a zkcoord daemon in ``dual`` and then ``kafka`` mode, its
  ``--bootstrap-servers`` the KRaft cluster, commits there (its chroot has
  no ``/brokers/topics``: partition counts come from the KRaft cluster);
* ``migrate run-job`` plan / apply / verify into the KRaft cluster, the
  same rows as the single-group path.
"""

from __future__ import annotations

import asyncio

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic
from test_legacy_consumer import committed_by_events, legacy_group  # noqa: F401 (a fixture)
from test_migrate_flow import OneDaemon, commit, fetch, json_cli, layout, legacy, seed, state  # noqa: F401
from test_zk_support import connection

from tests.support import java4_tools, java_tools
from tests.support.daemons import wait_for
from zkcoord.kafka.offsets import KafkaOffsets
from zkcoord.migrate.plan import Selection, gather_plan
from zkcoord.migrate.spark_job import JobConfig, run_job, spark_session
from zkcoord.zk.legacy import LegacyOffsets

pytestmark = pytest.mark.integration
PARTITIONS = 4
E_NONE = 0


@pytest.fixture
def kraft_admin(kafka4):
    client = KafkaAdminClient(bootstrap_servers=kafka4, request_timeout_ms=30_000)
    yield client
    client.close()


def produce(bootstrap: str, topic: str, counts: dict[int, int], prefix: str) -> None:
    """``counts[p]`` records into partition ``p``, values ``<prefix><i>``, acknowledged."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for partition, count in counts.items():
        for i in range(count):
            producer.send(topic, value=f"{prefix}{i}".encode(), partition=partition)
    producer.flush()
    producer.close()


def partition_counts(bootstrap: str, topic: str) -> dict[str, int | None]:
    with KafkaOffsets(bootstrap) as kafka:
        return kafka.partition_counts([topic])


def group_offsets(admin, group: str) -> dict[tuple[str, int], int]:
    answer = admin.list_group_offsets({group: None})[group]
    return {(tp.topic, tp.partition): oam.offset for tp, oam in answer.items() if oam.offset >= 0}


def test_a_legacy_group_moves_into_a_kraft_cluster_and_a_java_consumer_resumes_there(
        services, admin, kafka4, kraft_admin, zk_root, unique_name, legacy_group):  # noqa: F811
    topic = unique_name("kraft-orders")
    group = legacy_group.group
    ends = {p: 10 + 7 * p for p in range(PARTITIONS)}
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], wait_for_metadata=True)
    produce(services.bootstrap_servers, topic, ends, "r")
    consumers = legacy_group(topic, members=2)
    consumers.wait_for(lambda events: committed_by_events(events) == ends, 90, f"the legacy group commits {ends}")
    consumers.stop()
    legacy_root = f"/consumers/{group}/offsets/{topic}"
    assert {int(p): int(zk_root.get(f"{legacy_root}/{p}")[0]) for p in zk_root.get_children(legacy_root)} == ends

    # The cluster moved to KRaft: the topic is there with its records (the same offsets), and more came since.
    kraft_admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    wait_for(lambda: partition_counts(kafka4, topic) == {topic: PARTITIONS}, 30, "the topic in the KRaft metadata")
    produce(kafka4, topic, ends, "r")
    later = 5
    produce(kafka4, topic, {p: later for p in range(PARTITIONS)}, "after-")

    z = ["--group", group, "--zookeeper", services.zookeeper, "--bootstrap-servers", kafka4]
    plan = json_cli("plan", *z)
    rows = {(r["topic"], r["partition"]): r for r in plan["groups"][0]["partitions"]}
    assert {k: (r["decision"], r["target"], r["log_end"]) for k, r in rows.items()} == \
        {(topic, p): ("copy", end, end + later) for p, end in ends.items()}
    applied = json_cli("apply", *z)
    assert [(r["outcome"], r["phase"]) for r in applied] == [("applied", "dual")]
    assert group_offsets(kraft_admin, group) == {(topic, p): end for p, end in ends.items()}
    assert group not in {g["group_id"] for g in admin.list_groups()}  # nothing went to the old cluster
    assert [(r["clean"], r["checked"]) for r in json_cli("verify", *z)] == [(True, PARTITIONS)]
    assert [(r["outcome"], r["phase"]) for r in json_cli("finalize", *z)] == [("finalized", "kafka")]

    records = java_tools.consume(kafka4, topic, group=group, max_messages=later * PARTITIONS, kafka4=True,
                                 consumer_properties=java4_tools.consumer_protocol())
    assert sorted((r.partition, r.offset) for r in records) == \
        sorted((p, end + i) for p, end in ends.items() for i in range(later))
    assert {r.value for r in records} == {f"after-{i}" for i in range(later)}
    moved_on = {(topic, p): end + later for p, end in ends.items()}
    wait_for(lambda: group_offsets(kraft_admin, group) == moved_on, 30, "the Java consumer's commits in KRaft")

    back = json_cli("rollback", *z)
    assert [(r["outcome"], r["phase"]) for r in back] == [("rolled-back", "zookeeper")]
    assert {int(p): int(zk_root.get(f"{legacy_root}/{p}")[0]) for p in zk_root.get_children(legacy_root)} == \
        {p: end + later for p, end in ends.items()}


def test_a_group_with_members_in_kafka_4s_consumer_protocol_is_refused(services, zk, zk_hosts, kafka4,
                                                                        kraft_admin, unique_name):
    topic, group = unique_name("kraft-busy"), unique_name("busy")
    kraft_admin.create_topics([NewTopic(topic, 2, 1)])
    produce(kafka4, topic, {0: 3, 1: 3}, "r")
    seed(zk, group, {(topic, 0): b"1", (topic, 1): b"2"})
    member = java_tools.ConsoleConsumerProcess(kafka4, topic, group=group, kafka4=True,
                                               consumer_properties=java4_tools.consumer_protocol()).start()
    try:
        member.wait_for_records(6, timeout_s=60)
        with KafkaOffsets(kafka4) as kafka:
            described = kafka.group(group)
        assert (described.state, described.members, described.protocol_type) == ("Stable", 1, "consumer")
        z = ["--group", group, "--zookeeper", zk_hosts, "--bootstrap-servers", kafka4]
        refused = json_cli("apply", *z, code=1)
        assert [r["outcome"] for r in refused] == ["refused"]
        assert "active member" in refused[0]["message"]
    finally:
        member.stop()
    with KafkaOffsets(kafka4) as kafka:
        assert wait_for(lambda: kafka.group(group).members == 0, 60, "the member left")


def test_a_daemon_in_dual_then_kafka_mode_commits_into_the_kraft_cluster(zk_hosts, layout, zk, kafka4,  # noqa: F811
                                                                        kraft_admin, unique_name):
    topic, group = unique_name("kraft-dual"), unique_name("dual")
    kraft_admin.create_topics([NewTopic(topic, 3, 1)])
    produce(kafka4, topic, {p: 50 for p in range(3)}, "r")
    seed(zk, group, {(topic, 0): b"10", (topic, 1): b"20", (topic, 2): b"30"})
    z = ["--group", group, "--zookeeper", zk_hosts, "--bootstrap-servers", kafka4]
    assert [r["phase"] for r in json_cli("apply", *z)] == ["dual"]

    async def scenario():
        async with OneDaemon(zk_hosts, kafka4) as one:
            client = await one.coordinator(group)
            assert await commit(client, group, {(topic, 0): (15, "m0")}) == [E_NONE]
            assert legacy(zk, group, topic, 0) == b"15"
            assert group_offsets(kraft_admin, group) == {(topic, 0): 15, (topic, 1): 20, (topic, 2): 30}
            assert await commit(client, group, {(topic, 7): (1, "")}) != [E_NONE]  # no such partition in KRaft
            code, rows = await fetch(client, group)
            assert (code, rows) == (E_NONE, {(topic, 0): (15, "m0"), (topic, 1): (20, ""), (topic, 2): (30, "")})

            assert [r["clean"] for r in await asyncio.to_thread(json_cli, "verify", *z)] == [True]
            # the daemon owns the group: it applies the mode change itself, on request
            assert [r["phase"] for r in await asyncio.to_thread(json_cli, "finalize", *z)] == ["kafka"]
            assert state(zk, group)["os"] == "kafka"
            assert await commit(client, group, {(topic, 1): (33, "")}) == [E_NONE]
            assert group_offsets(kraft_admin, group)[(topic, 1)] == 33
            assert legacy(zk, group, topic, 1) == b"20"  # ZooKeeper no longer written

    asyncio.run(scenario())


def test_run_job_plans_applies_and_verifies_into_the_kraft_cluster(zk, zk_hosts, kafka4, kraft_admin, unique_name,
                                                                   tmp_path):
    topic = unique_name("kraft-job")
    kraft_admin.create_topics([NewTopic(topic, 3, 1)])
    produce(kafka4, topic, {p: 40 for p in range(3)}, "r")
    groups = [unique_name(f"job{i}") for i in range(6)]
    for i, group in enumerate(groups):
        seed(zk, group, {(topic, p): str((i * 5 + p * 7) % 41).encode() for p in range(3)})  # 40: the log end
    seed(zk, groups[0], {(unique_name("gone"), 0): b"3"})  # a topic the KRaft cluster does not have

    async def single_plan():
        async with connection(zk_hosts) as conn:
            with KafkaOffsets(kafka4) as kafka:
                return await gather_plan(LegacyOffsets(conn), kafka, Selection(all_groups=True))

    expected = sorted((r.facts.group, r.facts.topic, r.facts.partition, r.decision.value, r.plan.target_offset)
                      for r in asyncio.run(single_plan()).rows)
    assert {d for *_, d, _ in expected} == {"copy", "topic-missing"}

    def job(mode: str):
        config = JobConfig(zk_hosts, kafka4, Selection(all_groups=True), str(tmp_path / mode), mode=mode,
                           spark_partitions=2, batch_groups=2)
        return run_job(config, spark)

    with spark_session() as spark:
        planned = job("plan")
        rows = sorted((r[0], r[1], r[2], r[7], r[8]) for r in spark.read.parquet(planned.report.parquet).collect())
        assert rows == expected
        applied = job("apply")
        assert dict(applied.outcomes) == {"applied": len(groups)}
        verified = job("verify")
        assert dict(verified.outcomes) == {"clean": len(groups)}
    with KafkaOffsets(kafka4) as kafka:
        found = kafka.committed_offsets(groups)
    writes = {(g, t, p): target for g, t, p, d, target in expected if d == "copy"}
    assert {(g, t, p): o for g, offsets in found.items() for (t, p), o in offsets.items()} == writes
