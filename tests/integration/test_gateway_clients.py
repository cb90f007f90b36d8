"""Stock Kafka clients through the gateway: Kafka 3.9's Java consumer,
producer and tools, librdkafka (confluent-kafka) and kafka-python, each
with bootstrap.servers set to zkcoord gateways and nothing else changed.

Every test runs two ``zkcoord run`` daemons with gateways in its own
ZooKeeper chroot, in front of the sandbox's real broker, and checks the
outcome where it lands: the group's state in ``/coordinators/<group>``,
its offsets where its offset storage mode puts them, and what Kafka's own
tools print.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.structs import TopicPartition as KafkaTP

from tests.integration.test_client_support import read_group
from tests.support import java_tools as jt
from tests.support.daemons import gateway_fleet, wait_for
from zkcoord.inspect.views import decode_assignment

pytestmark = pytest.mark.integration
WAIT_S = 90.0
KAFKA_PYTHON_POLL_MS = 5000


@pytest.fixture
def fleet(services, zk_hosts, zk, tmp_path):
    with gateway_fleet(zk_hosts, zk, tmp_path / "logs", services.bootstrap_servers, 1, 2) as fleet:
        yield fleet


def gateways(fleet) -> str:
    return ",".join(d.gateway_address for d in fleet.daemons.values() if d.alive())


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="gateway-test-admin")
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def produce_python(bootstrap: str, topic: str, count: int, partitions: int, tag: str = "r") -> set[str]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for i in range(count):
            producer.send(topic, key=f"{tag}-{i}".encode(), value=f"{tag}-{i}".encode(), partition=i % partitions)
        producer.flush()
    finally:
        producer.close()
    return {f"{tag}-{i}" for i in range(count)}


def log_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        ends = consumer.end_offsets([KafkaTP(topic, p) for p in range(partitions)])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        consumer.close()


def zk_offsets(zk, group: str, topic: str) -> dict[int, int]:
    path = f"/consumers/{group}/offsets/{topic}"
    if not zk.exists(path):
        return {}
    return {int(p): int(zk.get(f"{path}/{p}")[0]) for p in zk.get_children(path)}


def kafka_offsets(bootstrap: str, group: str) -> dict[int, int]:
    """What the broker's own coordinator holds for the group, asked directly (not through the gateway)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer = admin.list_group_offsets({group: None})[group]
        return {tp.partition: o.offset for tp, o in answer.items() if o.offset >= 0}
    finally:
        admin.close()


class PythonMember:
    """A stock consumer polling in a thread: confluent-kafka or kafka-python."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str) -> None:
        self.kind, self.records, self._stop = kind, [], threading.Event()
        if kind == "librdkafka":
            from confluent_kafka import Consumer

            self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "rdkafka-m",
                                      "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                      "session.timeout.ms": 10000, "heartbeat.interval.ms": 500})
            self.consumer.subscribe([topic])
        else:
            self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                          client_id="kafka-python-m", auto_offset_reset="earliest",
                                          enable_auto_commit=False, session_timeout_ms=10000,
                                          heartbeat_interval_ms=500)
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"member-{kind}", daemon=True)

    def start(self) -> PythonMember:
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            got = self._poll()
            with self._lock:
                self.records.extend(got)
            if got:
                self._commit()

    def _poll(self):
        if self.kind == "librdkafka":
            message = self.consumer.poll(0.2)
            if message is None or message.error():
                return []
            return [(message.partition(), message.offset(), message.value().decode())]
        # kafka-python 3.0.12 loses a join whose JoinGroup or SyncGroup outlives the poll's timeout (its
        # join_group_async returns without applying the assignment; seen against Kafka's own brokers too,
        # with poll(timeout_ms=5)): poll long enough for any rebalance of these tests.
        batches = self.consumer.poll(timeout_ms=KAFKA_PYTHON_POLL_MS)
        return [(r.partition, r.offset, r.value.decode()) for rs in batches.values() for r in rs]

    def _commit(self) -> None:
        try:
            self.consumer.commit() if self.kind == "kafka-python" else self.consumer.commit(asynchronous=False)
        except Exception:  # a commit during a rebalance: the next poll's commit covers it
            pass

    def values(self) -> set[str]:
        with self._lock:
            return {v for _, _, v in self.records}

    def close(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.consumer.close()


def consume_all_with(kind: str, bootstrap: str, group: str, topic: str, expected: set[str]) -> PythonMember:
    member = PythonMember(kind, bootstrap, group, topic).start()
    try:
        wait_for(lambda: member.values() >= expected, WAIT_S, f"{kind} consumed {len(expected)} records")
    finally:
        member.close()  # commits on the way: the last poll's commit, then leaves the group
    return member


def stored_assignment(zk, group: str):
    stored = read_group(zk, group)
    return stored, {mid: decode_assignment("consumer", m.assignment) for mid, m in stored.members.items()}


# -- one client at a time -------------------------------------------------------------

def test_java_producer_and_consumer_through_the_gateway(services, fleet, zk, unique_name):
    bootstrap = gateways(fleet)
    topic, group = unique_name("t"), unique_name("g")
    create_topic(bootstrap, topic, 3)
    jt.produce(bootstrap, topic, [(f"k{i}", f"v{i}") for i in range(90)])
    records = jt.consume(bootstrap, topic, group=group, max_messages=90)
    assert sorted(r.value for r in records) == sorted(f"v{i}" for i in range(90))
    ends = log_ends(services.bootstrap_servers, topic, 3)
    assert sum(ends.values()) == 90
    wait_for(lambda: zk_offsets(zk, group, topic) == ends, 30, "the Java consumer's commit in ZooKeeper")
    assert read_group(zk, group).state.value == "Empty"  # it left the group on close
    assert kafka_offsets(services.bootstrap_servers, group) == {}  # zookeeper mode: Kafka has nothing


@pytest.mark.parametrize("kind", ["librdkafka", "kafka-python"])
def test_python_clients_through_the_gateway(services, fleet, zk, unique_name, kind):
    bootstrap = gateways(fleet)
    topic, group = unique_name("t"), unique_name("g")
    create_topic(bootstrap, topic, 3)
    expected = produce_python(bootstrap, topic, 60, 3)
    consume_all_with(kind, bootstrap, group, topic, expected)
    ends = log_ends(services.bootstrap_servers, topic, 3)
    assert zk_offsets(zk, group, topic) == ends
    assert read_group(zk, group).state.value == "Empty"
    assert kafka_offsets(services.bootstrap_servers, group) == {}


@pytest.mark.parametrize("mode", ["dual", "kafka"])
def test_offsets_land_where_the_mode_says(services, fleet, zk, zk_hosts, unique_name, mode):
    from zkcoord.zk.modes import set_offset_storage
    from zkcoord.zk.connection import ZkConnection

    bootstrap = gateways(fleet)
    topic, group = unique_name("t"), unique_name("g")
    create_topic(bootstrap, topic, 2)
    conn = ZkConnection(zk_hosts)
    conn.start()
    try:
        asyncio.run(set_offset_storage(conn, group, mode))
    finally:
        conn.stop()
    expected = produce_python(bootstrap, topic, 40, 2)
    consume_all_with("kafka-python", bootstrap, group, topic, expected)
    ends = log_ends(services.bootstrap_servers, topic, 2)
    assert kafka_offsets(services.bootstrap_servers, group) == ends
    assert zk_offsets(zk, group, topic) == (ends if mode == "dual" else {})
    assert read_group(zk, group).offset_storage == mode


# -- one group, three clients ------------------------------------------------------------

def test_three_stock_clients_share_one_group(services, fleet, zk, unique_name):
    bootstrap = gateways(fleet)
    topic, group = unique_name("t"), unique_name("g")
    create_topic(bootstrap, topic, 6)
    java = jt.ConsoleConsumerProcess(bootstrap, topic, group=group, client_id="java-m", consumer_properties={
        "session.timeout.ms": 10000, "heartbeat.interval.ms": 500, "partition.assignment.strategy":
        "org.apache.kafka.clients.consumer.RangeAssignor"}).start()
    members = [PythonMember("librdkafka", bootstrap, group, topic).start(),
               PythonMember("kafka-python", bootstrap, group, topic).start()]
    try:
        def split():
            if not zk.exists(f"/coordinators/{group}/state"):
                return None
            stored, assigned = stored_assignment(zk, group)
            if stored.state.value != "Stable" or len(assigned) != 3:
                return None
            return stored, assigned

        stored, assigned = wait_for(split, WAIT_S, "one Stable generation with the three members")
        owned = [(t, p) for parts in assigned.values() for t, ps in parts for p in ps]
        assert sorted(owned) == [(topic, p) for p in range(6)]  # each partition to exactly one member
        assert {m.client_id for m in stored.members.values()} == {"java-m", "rdkafka-m", "kafka-python-m"}
        assert all(len(parts) == 1 and len(parts[0][1]) == 2 for parts in assigned.values())

        expected = produce_python(bootstrap, topic, 120, 6)
        wait_for(lambda: java.records() and {r.value for r in java.records()} | members[0].values()
                 | members[1].values() >= expected, WAIT_S, "the three members consumed every record")
        if read_group(zk, group).generation_id == stored.generation_id:  # no rebalance since: each once
            by_member = [{r.value for r in java.records()}, members[0].values(), members[1].values()]
            assert sum(len(v) for v in by_member) == 120
    finally:
        for member in members:
            member.close()
        java.stop()


# -- transactions and tools --------------------------------------------------------------

def test_transactional_producer_through_the_gateway(services, fleet, unique_name):
    bootstrap = gateways(fleet)
    topic = unique_name("t")
    create_topic(bootstrap, topic, 2)
    result = jt.transactional_produce(bootstrap, topic, 200, unique_name("tx"), transaction_duration_ms=200)
    assert result.records_sent == 200
    records = jt.consume(bootstrap, topic, group=unique_name("g"), max_messages=200, isolation_level="read_committed")
    assert sorted(int(r.value) for r in records) == list(range(200))


def test_kafka_consumer_groups_through_the_gateway(services, fleet, zk, unique_name):
    bootstrap = gateways(fleet)
    topic, group = unique_name("t"), unique_name("g")
    create_topic(bootstrap, topic, 2)
    expected = produce_python(bootstrap, topic, 40, 2)
    consume_all_with("kafka-python", bootstrap, group, topic, expected)
    ends = log_ends(services.bootstrap_servers, topic, 2)

    assert group in jt.list_groups(bootstrap)
    rows = jt.describe_group_offsets(bootstrap, group)
    assert {r.partition: (r.current_offset, r.log_end_offset, r.lag) for r in rows} == {
        p: (e, e, 0) for p, e in ends.items()}

    reset = jt.consumer_groups(bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
                               "--to-earliest", "--execute")
    assert reset.returncode == 0, reset.stderr
    assert zk_offsets(zk, group, topic) == {0: 0, 1: 0}

    with jt.ConsoleConsumerProcess(bootstrap, topic, group=group, client_id="java-active", consumer_properties={
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 500}) as active:
        active.wait_for_records(40)
        members = jt.describe_group_members(bootstrap, group)
        assert [(m.client_id, m.partitions) for m in members] == [("java-active", 2)]
        assert members[0].consumer_id in read_group(zk, group).members
        state = jt.consumer_groups(bootstrap, "--describe", "--state", "--group", group)
        assert "Stable" in state.stdout and "range" in state.stdout, state.stdout
        refused = jt.consumer_groups(bootstrap, "--reset-offsets", "--group", group, "--topic", topic,
                                     "--to-earliest", "--execute")
        assert "inactive" in refused.stdout + refused.stderr  # no rewind of an active group
        deleted = jt.consumer_groups(bootstrap, "--delete", "--group", group)
        assert "not empty" in (deleted.stdout + deleted.stderr).lower() or "NonEmpty" in deleted.stdout
        assert zk.exists(f"/coordinators/{group}/state")
        active.stop()
    wait_for(lambda: read_group(zk, group).state.value == "Empty", 30, "the group empty again")
    deleted = jt.consumer_groups(bootstrap, "--delete", "--group", group)
    assert deleted.returncode == 0 and "successful" in deleted.stdout, deleted.stdout + deleted.stderr
    assert not zk.exists(f"/coordinators/{group}/state")
    assert zk_offsets(zk, group, topic) == {}
    assert group not in jt.list_groups(bootstrap)
