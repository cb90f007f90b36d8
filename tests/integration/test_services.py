"""The services under every integration test are real: a Kafka broker in
ZooKeeper mode registering topics in ZooKeeper, producing, consuming and
storing group offsets; a ZooKeeper that stores znodes and expires sessions."""

from __future__ import annotations

import json
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata
from kazoo.client import KazooClient
from kazoo.protocol.states import KazooState

pytestmark = pytest.mark.integration


def create_topic(admin, name: str, partitions: int) -> None:
    """The topic created; the sandbox's broker is shared, and a test of another
    worker may be restarting it: its CreateTopics then answers UNKNOWN_SERVER_ERROR
    (seen in CI), so a transient error is retried for up to 60 s."""
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    deadline = time.monotonic() + 60
    while True:
        try:
            admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
            return
        except TopicAlreadyExistsError:
            return  # an earlier try landed after all
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def wait_for(predicate, timeout_s: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_topic_created_with_admin_client_is_registered_in_zookeeper(admin, zk_root, unique_name):
    topic = unique_name("t")
    create_topic(admin, topic, 3)
    data, _ = wait_for(lambda: zk_root.exists(f"/brokers/topics/{topic}") and zk_root.get(f"/brokers/topics/{topic}"),
                       what=f"/brokers/topics/{topic}")
    registration = json.loads(data)
    assert sorted(int(p) for p in registration["partitions"]) == [0, 1, 2]
    assert all(replicas for replicas in registration["partitions"].values())
    states = wait_for(lambda: zk_root.exists(f"/brokers/topics/{topic}/partitions")
                      and zk_root.get_children(f"/brokers/topics/{topic}/partitions"), what="partition state")
    assert sorted(states) == ["0", "1", "2"]


def test_produce_then_consume_every_record(admin, services, unique_name):
    topic = unique_name("t")
    create_topic(admin, topic, 3)
    producer = KafkaProducer(bootstrap_servers=services.bootstrap_servers, acks="all")
    sent = set()
    for i in range(30):
        meta = producer.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 3).get(timeout=30)
        sent.add((meta.partition, meta.offset, f"v{i}"))
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=services.bootstrap_servers, enable_auto_commit=False)
    consumer.assign([TopicPartition(topic, p) for p in range(3)])
    consumer.seek_to_beginning()
    received = set()
    deadline = time.monotonic() + 30
    while len(received) < 30 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            received.update((r.partition, r.offset, r.value.decode()) for r in records)
    consumer.close()
    assert received == sent
    assert {offset for partition, offset, _ in received if partition == 0} == set(range(10))


def test_offsets_of_a_group_without_members_round_trip(admin, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    create_topic(admin, topic, 3)
    offsets = {TopicPartition(topic, p): OffsetAndMetadata(10 * (p + 1), f"meta-{p}", -1) for p in range(3)}
    # The offsets topic may still be loading right after the first start.
    result = wait_for(lambda: _try_alter(admin, group, offsets), timeout_s=60, what="alter_group_offsets")
    assert all(err.__name__ == "NoError" for err in result.values()), result
    fetched = admin.list_group_offsets(group)[group]
    assert {tp: (om.offset, om.metadata) for tp, om in fetched.items()} == {
        TopicPartition(topic, 0): (10, "meta-0"),
        TopicPartition(topic, 1): (20, "meta-1"),
        TopicPartition(topic, 2): (30, "meta-2"),
    }


def _try_alter(admin, group, offsets):
    from kafka.errors import KafkaError

    try:
        result = admin.alter_group_offsets(group, offsets)
    except KafkaError:
        return None
    if any(getattr(err, "retriable", False) for err in result.values()):
        return None
    return result


def test_znode_write_and_read_in_the_test_chroot(zk, zk_root, zk_chroot):
    zk.create("/state", b'{"generation": 1}', makepath=True)
    zk.set("/state", b'{"generation": 2}')
    data, stat = zk.get("/state")
    assert json.loads(data) == {"generation": 2}
    assert stat.version == 1
    # The chroot is a real prefix on the server, not a client-side illusion.
    assert zk_root.get(f"{zk_chroot}/state")[0] == data


def test_expire_session_fixture_expires_the_session_on_the_server(zk_hosts, expire_session):
    client = KazooClient(hosts=zk_hosts, timeout=10)
    client.start(timeout=30)
    try:
        client.create("/ephemeral", b"x", ephemeral=True, makepath=True)
        states = []
        client.add_listener(states.append)
        old_session = client.client_id[0]
        expire_session(client)
        # kazoo starts a new session after LOST; the old ephemeral is gone.
        wait_for(lambda: client.state == KazooState.CONNECTED and client.client_id[0] != old_session,
                 what="a new session")
        assert KazooState.LOST in states
        assert client.exists("/ephemeral") is None
    finally:
        client.stop()
        client.close()


def test_zookeeper_restart_keeps_data_and_clients_reconnect(sandbox, zk):
    zk.create("/survives", b"yes", makepath=True)
    sandbox.restart_server("zookeeper")
    wait_for(lambda: zk.state == KazooState.CONNECTED, what="kazoo to reconnect")
    assert wait_for(lambda: _safe_get(zk, "/survives"), what="/survives readable") == b"yes"


def _safe_get(client, path):
    from kazoo.exceptions import KazooException
    from kazoo.handlers.threading import KazooTimeoutError

    try:
        return client.get(path)[0]
    except (KazooException, KazooTimeoutError):
        return None


def test_broker_restart_then_produce_again(sandbox, admin, services, unique_name):
    topic = unique_name("t")
    create_topic(admin, topic, 1)
    sandbox.restart_server("kafka-0", kill=True)
    producer = KafkaProducer(bootstrap_servers=services.bootstrap_servers, acks="all", retries=20,
                             request_timeout_ms=30000)
    try:
        meta = wait_for(lambda: _try_send(producer, topic), timeout_s=90, what="produce after broker restart")
    finally:
        producer.close()
    assert meta.topic == topic and meta.offset == 0
    assert "kafka-0" in [s.name for s in sandbox.status() if s.state == "up"]


def _try_send(producer, topic):
    from kafka.errors import KafkaError

    try:
        return producer.send(topic, b"after-restart").get(timeout=30)
    except KafkaError:
        return None
