"""Burrow 1.2 (Debian's package: /usr/bin/Burrow) monitoring zkcoord's
groups, with the configuration ``zkcoord burrow-config`` writes, against the
real sandbox, a real ``zkcoord run`` daemon and zkcoord's thin consumer:

* a group in ``zookeeper`` storage that consumes and commits steadily is OK,
  read from the legacy layout (Kafka has no offsets of it) while zkcoord
  writes commit metadata beside it (``offsets-metadata``);
* a group whose consumer stopped while records keep arriving is ERR, each of
  its partitions STOP, at exactly the offsets it last committed;
* a group in ``kafka`` storage (legacy offsets deleted at finalize) is seen
  through ``__consumer_offsets``, OK while it consumes and ERR once stopped;
  a group in ``dual`` storage is one group (its partitions once), OK.

What Burrow must report is its wiki's "Consumer Lag Evaluation Rules": a
partition with zero lag anywhere in its window is OK; one whose newest
commit is older than its window is long (now - newest > newest - oldest)
while it lags, and no recent broker offset equals that commit, is STOP; a
group with a STOP, STALL or REWIND partition is ERR. The window here is 5
commits at least 1 s apart, broker offsets are read every second.

Skipped, with the install command, where the ``Burrow`` binary is missing.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from click.testing import CliRunner
from kafka import KafkaProducer

from tests.integration.test_client_support import (
    Member, config, create_topic, polling_in_background, start_member,
)
from tests.support.burrow import INSTALL_HINT, BurrowProcess, burrow_binary, config_dir
from tests.support.daemons import DaemonFleet
from tests.support.kafka_ready import JOIN_POLL_MS
from zkcoord.cli.main import cli

pytestmark = pytest.mark.integration

CLUSTER = "zkc"
WINDOW_FLAGS = ("--intervals", "5", "--min-distance-s", "1", "--offset-refresh-s", "1", "--topic-refresh-s", "2",
                "--expire-cache-s", "1")
WAIT_S = 120.0
PARTITIONS = 2


@pytest.fixture
def burrow_bin() -> str:
    found = burrow_binary()
    if found is None:
        pytest.skip(INSTALL_HINT)
    return found


@pytest.fixture
def daemon(services, zk_hosts, zk, tmp_path):
    """One ``zkcoord run`` daemon with the brokers (dual and kafka storage need them)."""
    with DaemonFleet(zk_hosts, zk, tmp_path / "daemons",
                     options={"bootstrap_servers": services.bootstrap_servers,
                              "group_initial_rebalance_delay_ms": 0}) as fleet:
        running = fleet.start(1)
        try:
            yield running
        finally:
            print(f"---- daemon 1 log:\n{running.log(40)}")


@pytest.fixture
def topic(services, unique_name) -> str:
    name = unique_name("orders")
    create_topic(services.bootstrap_servers, name, PARTITIONS)
    return name


@contextlib.contextmanager
def steady_producer(bootstrap: str, topic: str, interval_s: float = 0.05):
    """Records keep arriving in every partition while the block runs."""
    stop = threading.Event()
    producer = KafkaProducer(bootstrap_servers=bootstrap)

    def produce() -> None:
        i = 0
        while not stop.is_set():
            producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % PARTITIONS)
            i += 1
            stop.wait(interval_s)

    thread = threading.Thread(target=produce, name="steady-producer", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(30)
        producer.close(timeout=10)


@contextlib.contextmanager
def burrow(burrow_bin: str, services, zk_hosts: str, tmp_path):
    """Burrow on the configuration ``zkcoord burrow-config`` writes for this
    test's chroot, started and, at the end, stopped."""
    directory = config_dir(tmp_path)
    result = CliRunner().invoke(cli, [
        "burrow-config", "--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers,
        "--cluster", CLUSTER, "--http-listen", "127.0.0.1:0", *WINDOW_FLAGS,
        "--log-level", "debug", "--log-file", str(directory / "burrow.log"),
        "--pidfile", str(directory / "burrow.pid"), "--output", str(directory / "burrow.toml")])
    assert result.exit_code == 0, result.output
    with BurrowProcess(burrow_bin, directory) as running:
        yield running


def wait_status(burrow: BurrowProcess, group: str, wanted, what: str, timeout_s: float = WAIT_S) -> dict:
    """Poll Burrow until the group's status satisfies ``wanted``; that status."""
    deadline = time.monotonic() + timeout_s
    seen = None
    while True:
        seen = burrow.status(CLUSTER, group)
        if seen is not None and wanted(seen):
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}; Burrow last said {seen}")
        time.sleep(0.5)


def full_window_ok(status: dict) -> bool:
    return status["status"] == "OK" and status["partition_count"] == PARTITIONS and all(
        p["complete"] == 1.0 for p in status["partitions"])


def stopped(status: dict) -> bool:
    return status["status"] == "ERR" and [p["status"] for p in status["partitions"]] == ["STOP"] * PARTITIONS


def ends(status: dict) -> dict[int, int]:
    """The newest committed offset Burrow has of each partition."""
    return {p["partition"]: p["end"]["offset"] for p in status["partitions"]}


def zk_offsets(zk, group: str, topic: str) -> dict[int, int]:
    return {p: int(zk.get(f"/consumers/{group}/offsets/{topic}/{p}")[0]) for p in range(PARTITIONS)}


def kafka_offsets(admin, group: str, topic: str) -> dict[int, int]:
    found = admin.list_group_offsets({group: None})[group]
    return {tp.partition: om.offset for tp, om in found.items() if tp.topic == topic and om.offset >= 0}


def member(name: str, daemon, services, group: str, topic: str) -> Member:
    return start_member(name, config(f"{daemon.host}:{daemon.port}", services.bootstrap_servers, group), [topic])


def stop_member(m: Member) -> None:
    m.consumer.close()


def migrate(*args: str) -> None:
    result = CliRunner().invoke(cli, ["migrate", *args])
    assert result.exit_code == 0, result.output


def test_burrow_reports_zookeeper_groups_ok_while_they_consume_and_err_once_stopped(
        burrow_bin, services, zk_hosts, zk, admin, daemon, topic, unique_name, tmp_path):
    live, gone = unique_name("live"), unique_name("gone")
    assert zk.exists("/consumers")  # the daemon made the root Burrow lists once, at its start
    with steady_producer(services.bootstrap_servers, topic), \
            burrow(burrow_bin, services, zk_hosts, tmp_path) as monitor:
        assert monitor.status(CLUSTER, live) is None  # nothing committed yet
        live_member = member("live", daemon, services, live, topic)
        gone_member = member("gone", daemon, services, gone, topic)
        with polling_in_background(live_member, JOIN_POLL_MS) as live_errors:
            with polling_in_background(gone_member, JOIN_POLL_MS) as gone_errors:
                wait_status(monitor, gone, full_window_ok, f"{gone} OK over a full window while consuming")
            stop_member(gone_member)
            assert gone_errors == []
            last = zk_offsets(zk, gone, topic)

            err = wait_status(monitor, gone, stopped, f"{gone} ERR with every partition STOP once stopped")
            assert ends(err) == last  # exactly what it last committed
            assert all(p["current_lag"] > 0 for p in err["partitions"])
            assert err["totallag"] > 0

            ok = wait_status(monitor, live, full_window_ok, f"{live} OK while it consumes")
            now = zk_offsets(zk, live, topic)
            assert all(0 < ends(ok)[p] <= now[p] for p in range(PARTITIONS)), (ends(ok), now)
            # Burrow had them from the legacy layout: Kafka holds no offsets of either group.
            assert kafka_offsets(admin, live, topic) == {} and kafka_offsets(admin, gone, topic) == {}
            # zkcoord wrote commit metadata beside the offsets; Burrow read on regardless.
            assert zk.get_children(f"/consumers/{live}/offsets-metadata/{topic}") == ["0", "1"]
            assert wait_status(monitor, gone, stopped, f"{gone} still ERR")
        stop_member(live_member)
        assert live_errors == []
        assert [e for e in monitor.errors() if e.get("group") in (live, gone)] == []


def test_burrow_sees_kafka_and_dual_groups_through_consumer_offsets(
        burrow_bin, services, zk_hosts, zk, admin, daemon, topic, unique_name, tmp_path):
    in_kafka, in_dual = unique_name("kafka"), unique_name("dual")
    z = ["--zookeeper", zk_hosts, "--bootstrap-servers", services.bootstrap_servers]
    with steady_producer(services.bootstrap_servers, topic), \
            burrow(burrow_bin, services, zk_hosts, tmp_path) as monitor:
        for group in (in_kafka, in_dual):  # legacy groups at offset 0, migrated to Kafka
            for p in range(PARTITIONS):
                zk.create(f"/consumers/{group}/offsets/{topic}/{p}", b"0", makepath=True)
        migrate("apply", "--group", in_kafka, "--group", in_dual, *z)
        migrate("verify", "--group", in_kafka, *z)
        migrate("finalize", "--group", in_kafka, "--delete-legacy", *z)
        assert not zk.exists(f"/consumers/{in_kafka}/offsets")  # from here on Kafka is its only store

        kafka_member = member("kafka", daemon, services, in_kafka, topic)
        dual_member = member("dual", daemon, services, in_dual, topic)
        with polling_in_background(dual_member, JOIN_POLL_MS) as dual_errors:
            with polling_in_background(kafka_member, JOIN_POLL_MS) as kafka_errors:
                ok = wait_status(monitor, in_kafka, lambda s: full_window_ok(s) and min(ends(s).values()) > 0,
                                 f"{in_kafka} (kafka storage) OK past the offsets ZooKeeper ever had")
            stop_member(kafka_member)
            assert kafka_errors == []
            assert not zk.exists(f"/consumers/{in_kafka}/offsets")  # so Burrow read them in __consumer_offsets
            committed = kafka_offsets(admin, in_kafka, topic)
            assert all(ends(ok)[p] <= committed[p] for p in range(PARTITIONS)), (ends(ok), committed)

            err = wait_status(monitor, in_kafka, stopped, f"{in_kafka} ERR with every partition STOP once stopped")
            assert ends(err) == committed

            dual = wait_status(monitor, in_dual, lambda s: full_window_ok(s) and min(ends(s).values()) > 0,
                               f"{in_dual} (dual storage) OK while it consumes, its partitions once")
            in_zookeeper, in_kafka_store = zk_offsets(zk, in_dual, topic), kafka_offsets(admin, in_dual, topic)
            assert all(ends(dual)[p] <= min(in_zookeeper[p], in_kafka_store[p]) for p in range(PARTITIONS))
        stop_member(dual_member)
        assert dual_errors == []


def test_a_daemon_creates_its_offsets_root(zk_hosts, zk, tmp_path):
    """Burrow's ZooKeeper module lists the root once, when it starts: a root
    made by the first commit would go unseen until Burrow restarts."""
    with DaemonFleet(zk_hosts, zk, tmp_path / "daemons", options={"offsets_zk_root": "/legacy/consumers"}) as fleet:
        assert not zk.exists("/legacy/consumers")
        fleet.start(1)
        assert zk.exists("/legacy/consumers") and zk.get_children("/legacy/consumers") == []
        fleet.daemons[1].terminate()
        fleet.start(2)  # a root that exists is left as it is
        assert zk.get_children("/legacy/consumers") == []
