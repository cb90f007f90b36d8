"""A sandbox at production shape: a ZooKeeper ensemble of three and three
brokers (``zkcoord local up --zookeepers 3 --brokers 3 --daemons 2``), and
the faults of its servers (:mod:`tests.support.cluster_faults`) under
groups that keep committing.

One sandbox for the module, in a state directory of its own
(``$ZKCOORD_TEST_STATE_DIR-ensemble``, else a temporary one), made and taken
down with the CLI. Each test leaves it whole (every server running, the
ensemble serving) for the next, and starts its own groups:

* ``up`` / ``env`` / ``status``: the connect string of all three servers
  everywhere (brokers, daemons, exports), one leader and two followers, the
  offsets topic on three replicas, a different count refused;
* kill -9 of the ZooKeeper leader: another is elected, a kafka-python group
  served by the daemons (offsets in ZooKeeper) keeps committing; a follower
  lost: nothing stops; the quorum lost: commits are refused with retriable
  errors, none acknowledged, until it is back; and every commit
  acknowledged before, during and after is there at the end, on every
  ZooKeeper server;
* kill -9 of a broker (replication 3, ``min.insync.replicas`` 2): the
  group's coordinator in Kafka moves with the leadership of its
  ``__consumer_offsets`` partition and keeps every acknowledged commit, and
  the daemons' group keeps committing through the gateways.

The module is marked ``ensemble``: ``-m "not ensemble"`` leaves it out (it
runs six JVMs and two daemons on its own).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import kafka.errors
import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError
from kafka.protocol.consumer.group import OffsetCommitRequest
from kafka.structs import OffsetAndMetadata
from kazoo.client import KazooClient

from tests.support.cluster_faults import OFFSETS_TOPIC, ClusterFaults, offsets_partition
from tests.support.daemons import wait_for
from tests.support.kafka_ready import JOIN_POLL_MS, wait_group_coordinator
from tests.support.state_dirs import state_directory
from tests.support.wire import coordinator_client
from zkcoord.local.sandbox import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.ensemble, pytest.mark.slow]  # ZKCOORD_TEST_SLOW=1

WAIT_S = 120.0
COMMIT_TIMEOUT_MS = 10_000  # a commit not acknowledged in this long fails (kafka-python retries retriable errors)
PARTITIONS = 3


def zkcoord_local(*args: str, state_dir: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "ZKCOORD_STATE_DIR": str(state_dir)}
    proc = subprocess.run([sys.executable, "-m", "zkcoord", "local", *args], capture_output=True, text=True,
                          env=env, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(f"zkcoord local {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc


@dataclass
class Cluster:
    state_dir: Path
    up_output: str
    sandbox: Sandbox
    faults: ClusterFaults

    @property
    def zookeeper(self) -> str:
        return self.sandbox.zookeeper_address(self.sandbox.load())

    @property
    def brokers(self) -> str:
        return self.sandbox.bootstrap_servers(self.sandbox.load())

    @property
    def gateways(self) -> str:
        return self.sandbox.gateway_addresses(self.sandbox.load())

    def make_whole(self) -> None:
        """Every server running (started again if a test killed it), the ensemble serving."""
        self.sandbox.up()
        self.faults.wait_zookeeper_leader()
        wait_for(lambda: self.faults.registered_brokers() == set(self.faults.broker_ids()), WAIT_S,
                 "every broker registered")


@pytest.fixture(scope="module")
def cluster(request):
    failed_before = request.session.testsfailed
    with state_directory(os.environ.get("ZKCOORD_TEST_STATE_DIR"), "ensemble") as state_dir:
        try:
            up = zkcoord_local("up", "--zookeepers", "3", "--brokers", "3", "--daemons", "2", "--workers", "1",
                               state_dir=state_dir)
            sandbox = Sandbox(state_dir, log=print)
            found = Cluster(state_dir, up.stdout, sandbox, ClusterFaults(sandbox, WAIT_S, say=print))
            wait_group_coordinator(found.brokers)
            yield found
        finally:
            if request.session.testsfailed > failed_before and (state_dir / "logs").is_dir():
                kept = Path(tempfile.mkdtemp(prefix="zkcoord-ensemble-logs-"))  # as a failed fault run keeps its own
                shutil.copytree(state_dir / "logs", kept / "logs")
                print(f"\nthe ensemble sandbox's server logs are kept in {kept}/logs")
            zkcoord_local("down", state_dir=state_dir, check=False)


@pytest.fixture
def whole(cluster):
    """The module's sandbox, whole when the test starts and again when it ends, pass or fail."""
    cluster.make_whole()
    yield cluster
    cluster.make_whole()


def create_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="ensemble-test-admin")
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 3)])
    finally:
        admin.close()


@dataclass
class Commit:
    started: float
    ended: float
    offsets: dict[int, int] = field(default_factory=dict)
    error: str | None = None  # the exception's class name when not acknowledged
    retriable: bool = False


class Committer:
    """A producer thread writing to ``topic`` on the brokers, and a
    kafka-python consumer in ``group`` (through ``bootstrap``: the daemons'
    gateways, or the brokers themselves) committing what it consumed after
    every poll, each commit's outcome logged with its start and end on
    ``time.monotonic()``."""

    def __init__(self, name: str, bootstrap: str, brokers: str, topic: str, group: str) -> None:
        self.name, self.topic, self.group = name, topic, group
        self.commits: list[Commit] = []
        self.problems: list[BaseException] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.producer = KafkaProducer(bootstrap_servers=brokers, acks="all", linger_ms=20,
                                      client_id=f"{name}-producer")
        self.consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=f"{name}-member",
                                      auto_offset_reset="earliest", enable_auto_commit=False,
                                      session_timeout_ms=30_000, heartbeat_interval_ms=1000)
        self.threads = [threading.Thread(target=self._guard(self._produce), name=f"{name}-produce", daemon=True),
                        threading.Thread(target=self._guard(self._consume), name=f"{name}-consume", daemon=True)]

    def __enter__(self) -> Committer:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, exc_type, *exc_info) -> None:
        self.stop(check=exc_type is None)  # a failure of the test itself is the one to see

    def _guard(self, loop):
        def run():
            try:
                loop()
            except BaseException as exc:  # reported by stop()
                self.problems.append(exc)
        return run

    def _produce(self) -> None:
        i = 0
        while not self._stop.is_set():
            for k in range(30):
                self.producer.send(self.topic, value=f"{i + k}".encode(), partition=(i + k) % PARTITIONS)
            i += 30
            try:
                self.producer.flush(timeout=20)
            except KafkaError:
                pass  # a broker killed: records to it wait for the partitions' new leaders
            self._stop.wait(0.05)

    def _consume(self) -> None:
        while not self._stop.is_set():
            records = self.consumer.poll(timeout_ms=JOIN_POLL_MS)
            if not records:
                continue
            offsets = {tp: OffsetAndMetadata(batch[-1].offset + 1, "", -1) for tp, batch in records.items()}
            started = time.monotonic()
            try:
                self.consumer.commit(offsets, timeout_ms=COMMIT_TIMEOUT_MS)
            except KafkaError as exc:
                commit = Commit(started, time.monotonic(), error=type(exc).__name__,
                                retriable=bool(getattr(exc, "retriable", False)))
            else:
                commit = Commit(started, time.monotonic(), {tp.partition: o.offset for tp, o in offsets.items()})
            with self._lock:
                self.commits.append(commit)

    def stop(self, check: bool = True) -> None:
        if not self._stop.is_set():
            self._stop.set()
            for thread in self.threads:
                thread.join(COMMIT_TIMEOUT_MS / 1000 + JOIN_POLL_MS / 1000 + 30)
            self.consumer.close(autocommit=False)
            self.producer.close(timeout=10)
        assert not check or not self.problems, f"{self.name}: {self.problems!r}"

    # -- what happened --------------------------------------------------------------------
    def snapshot(self) -> list[Commit]:
        with self._lock:
            return list(self.commits)

    def acknowledged(self, after: float = 0.0) -> list[Commit]:
        return [c for c in self.snapshot() if c.error is None and c.started >= after]

    def failed(self, after: float = 0.0) -> list[Commit]:
        return [c for c in self.snapshot() if c.error is not None and c.started >= after]

    def wait_acknowledged(self, count: int, after: float = 0.0, what: str = "") -> None:
        wait_for(lambda: len(self.acknowledged(after)) >= count, WAIT_S,
                 f"{self.name}: {count} commits acknowledged {what} (outcomes: {self.outcomes()})", 0.1)

    def highest_acknowledged(self) -> dict[int, int]:
        highest: dict[int, int] = {}
        for commit in self.acknowledged():
            for partition, offset in commit.offsets.items():
                highest[partition] = max(highest.get(partition, -1), offset)
        return highest

    def outcomes(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for commit in self.snapshot():
            key = commit.error or "acknowledged"
            counts[key] = counts.get(key, 0) + 1
        return counts


def committed(bootstrap: str, group: str) -> dict[int, int]:
    """The group's offsets as OffsetFetch answers them (asked of its coordinator, found through ``bootstrap``)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="ensemble-test-fetch", request_timeout_ms=30_000)
    try:
        answer = admin.list_group_offsets({group: None})[group]
        return {tp.partition: o.offset for tp, o in answer.items() if o.offset >= 0}
    finally:
        admin.close()


def assert_every_acknowledged_commit_kept(committer: Committer, bootstrap: str) -> dict[int, int]:
    """Each partition's committed offset is at least the highest one ever
    acknowledged (one member commits what it consumed: its offsets only go up)."""
    highest = committer.highest_acknowledged()
    assert highest, f"{committer.name}: no commit acknowledged at all ({committer.outcomes()})"
    found = committed(bootstrap, committer.group)
    lost = {p: (offset, found.get(p)) for p, offset in highest.items() if found.get(p, -1) < offset}
    assert not lost, f"{committer.name}: acknowledged commits lost (partition: (acknowledged, committed)): {lost}"
    return found


def zookeeper_offsets_on_each_server(cluster: Cluster, group: str, topic: str) -> dict[str, dict[int, int]]:
    """The group's legacy offset znodes as each ZooKeeper server holds them (after a sync)."""
    found = {}
    for server in cluster.sandbox.load().zookeepers:
        client = KazooClient(hosts=f"127.0.0.1:{server.port}", timeout=10)
        client.start(timeout=30)
        try:
            path = f"/consumers/{group}/offsets/{topic}"
            client.sync(path)
            found[server.name] = {int(p): int(client.get(f"{path}/{p}")[0]) for p in client.get_children(path)}
        finally:
            client.stop()
            client.close()
    return found


def daemon_group(cluster: Cluster, unique_name, name: str) -> Committer:
    topic, group = unique_name("t"), unique_name("g")
    create_topic(cluster.brokers, topic)
    return Committer(name, cluster.gateways, cluster.brokers, topic, group)


def finish(cluster: Cluster, committer: Committer) -> None:
    """Stop the group, then: every acknowledged commit is served by the
    daemons and held alike by every ZooKeeper server."""
    committer.stop()
    served = assert_every_acknowledged_commit_kept(committer, cluster.gateways)
    on_servers = zookeeper_offsets_on_each_server(cluster, committer.group, committer.topic)
    assert all(held == served for held in on_servers.values()), (served, on_servers)
    print(f"{committer.name}: {committer.outcomes()}, committed {served}")


# -- the sandbox --------------------------------------------------------------------------------------------

def test_up_env_status_of_an_ensemble_with_three_brokers(whole, unique_name):
    cluster = whole
    state = json.loads((cluster.state_dir / "sandbox.json").read_text())
    servers = [state["zookeeper"], *state["zookeeper_peers"]]
    connect = ",".join(f"127.0.0.1:{z['port']}" for z in servers)
    assert [z["name"] for z in servers] == ["zookeeper-1", "zookeeper-2", "zookeeper-3"]
    assert f"zookeeper:         {connect}  (an ensemble of 3)" in cluster.up_output

    again = zkcoord_local("up", state_dir=cluster.state_dir)
    assert "already up" in again.stdout
    other = zkcoord_local("up", "--zookeepers", "1", state_dir=cluster.state_dir, check=False)
    assert other.returncode == 2 and "Traceback" not in other.stderr
    assert (f"The sandbox in {cluster.state_dir} runs a ZooKeeper ensemble of 3, not 1; run `zkcoord local down` "
            "first to change --zookeepers.") in other.stderr

    exports = dict(line.removeprefix("export ").split("=", 1)
                   for line in zkcoord_local("env", state_dir=cluster.state_dir).stdout.splitlines())
    assert exports["ZKCOORD_ZOOKEEPER"] == connect
    assert len(exports["ZKCOORD_BOOTSTRAP_SERVERS"].split(",")) == 3

    status = zkcoord_local("status", state_dir=cluster.state_dir)
    names = [line.split("  ")[0] for line in status.stdout.splitlines()[1:]]
    roles = sorted(name.split()[1] for name in names if name.startswith("zookeeper-"))
    assert roles == ["follower", "follower", "leader"], status.stdout
    assert all(" up " in line for line in status.stdout.splitlines()[1:]), status.stdout

    for z in servers:
        home = cluster.state_dir / z["name"]
        assert (home / "data" / "myid").read_text().strip() == z["name"].split("-")[1]
        lines = (home / "zoo.cfg").read_text().splitlines()
        assert [line for line in lines if line.startswith("server.")] == [
            f"server.{s['name'].split('-')[1]}=127.0.0.1:{s['quorum_port']}:{s['election_port']}" for s in servers]
    for broker in state["brokers"]:
        properties = (cluster.state_dir / broker["name"] / "server.properties").read_text()
        assert f"zookeeper.connect={connect}\n" in properties
    for daemon in state["daemons"]:
        argv = Path(f"/proc/{daemon['pid']}/cmdline").read_bytes().decode().split("\0")
        assert argv[argv.index("--zookeeper") + 1] == connect

    for z in servers:  # each server alone sees the three brokers and the two daemons
        client = KazooClient(hosts=f"127.0.0.1:{z['port']}", timeout=10)
        client.start(timeout=30)
        try:
            client.sync("/")
            assert sorted(client.get_children("/brokers/ids")) == ["0", "1", "2"]
            assert sorted(client.get_children("/zkcoord/nodes")) == ["1", "2"]
        finally:
            client.stop()
            client.close()

    admin = KafkaAdminClient(bootstrap_servers=cluster.brokers, client_id="ensemble-test-admin")
    try:
        [offsets_topic] = admin.describe_topics([OFFSETS_TOPIC])
    finally:
        admin.close()
    assert len(offsets_topic["partitions"]) == 10
    assert all(len(p["replica_nodes"]) == 3 and len(p["isr_nodes"]) == 3 for p in offsets_topic["partitions"])

    with daemon_group(cluster, unique_name, "daemons") as group:
        group.wait_acknowledged(5)
        finish(cluster, group)


# -- ZooKeeper faults ------------------------------------------------------------------------------------------

def test_zookeeper_leader_killed_a_new_one_is_elected_and_commits_go_on(whole, unique_name):
    cluster, faults = whole, whole.faults
    with daemon_group(cluster, unique_name, "daemons") as group:
        group.wait_acknowledged(5, what="before the fault")
        killed, new = faults.kill_zookeeper_leader()
        elected = time.monotonic()
        assert new != killed and faults.zookeeper_roles()[killed] is None
        group.wait_acknowledged(5, after=elected, what=f"after {new} was elected")
        assert faults.restart_zookeeper(killed) == new  # the old leader comes back as a follower
        assert faults.zookeeper_roles()[killed] == "follower"
        group.wait_acknowledged(3, after=time.monotonic(), what=f"after {killed} came back")
        finish(cluster, group)


def test_zookeeper_follower_lost_service_goes_on(whole, unique_name):
    cluster, faults = whole, whole.faults
    with daemon_group(cluster, unique_name, "daemons") as group:
        group.wait_acknowledged(5, what="before the fault")
        leader = faults.wait_zookeeper_leader()
        killed, still = faults.kill_zookeeper_follower()
        lost = time.monotonic()
        assert still == leader  # two of three: the leader keeps its quorum
        group.wait_acknowledged(5, after=lost, what=f"with {killed} down")
        faults.restart_zookeeper(killed)
        group.wait_acknowledged(3, after=time.monotonic(), what=f"after {killed} came back")
        finish(cluster, group)


async def probe_commit(client, group: str, topic: str, offset: int) -> int:
    """A standalone commit (generation -1) of partition 0; the answer's error code."""
    answer = await client.call(OffsetCommitRequest(
        version=7, group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
        topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")])]))
    return answer.topics[0].partitions[0].error_code


def test_zookeeper_quorum_lost_commits_refused_then_served_nothing_acknowledged_lost(whole, unique_name):
    cluster, faults = whole, whole.faults
    probe_group = unique_name("probe")
    with daemon_group(cluster, unique_name, "daemons") as group:
        group.wait_acknowledged(5, what="before the fault")

        async def scenario():
            client = await coordinator_client(cluster.gateways, probe_group)
            try:
                assert await probe_commit(client, probe_group, group.topic, 1) == 0

                killed = await asyncio.to_thread(faults.lose_quorum)
                lost = time.monotonic()
                # Refused while no ZooKeeper server serves: a retriable error, and nothing acknowledged.
                codes = [await probe_commit(client, probe_group, group.topic, 2) for _ in range(3)]
                assert all(code != 0 and kafka.errors.for_code(code).retriable for code in codes), codes
                await asyncio.to_thread(wait_for, lambda: group.failed(after=lost), WAIT_S,
                                        "a commit of the group failed while the quorum was lost", 0.1)
                back = time.monotonic()
                assert not [c for c in group.acknowledged(after=lost) if c.ended < back], group.snapshot()
                refused = [c for c in group.failed(after=lost) if c.ended < back]
                assert all(c.retriable or c.error == "KafkaTimeoutError" for c in refused), refused

                # One server back makes a quorum of two again: served.
                await asyncio.to_thread(faults.regain_quorum, killed[:1])
                regained = time.monotonic()

                async def served():
                    while await probe_commit(client, probe_group, group.topic, 3) != 0:
                        await asyncio.sleep(0.2)

                await asyncio.wait_for(served(), WAIT_S)
                await asyncio.to_thread(group.wait_acknowledged, 5, regained, "after the quorum came back")
                await asyncio.to_thread(faults.regain_quorum, killed[1:])
            finally:
                await client.close()

        asyncio.run(scenario())
        finish(cluster, group)
    assert committed(cluster.gateways, probe_group) == {0: 3}


# -- a broker -------------------------------------------------------------------------------------------------

def test_broker_killed_offsets_topic_served_by_the_others(whole, unique_name):
    """A group of Kafka's own coordinator: kill -9 of the broker leading its
    ``__consumer_offsets`` partition; another replica leads it and the group
    keeps committing, every acknowledged commit kept. A group of the daemons
    commits through the gateways meanwhile."""
    cluster, faults = whole, whole.faults
    topic, group_id = unique_name("t"), unique_name("kafka-g")
    create_topic(cluster.brokers, topic)
    kafka_group = Committer("kafka", cluster.brokers, cluster.brokers, topic, group_id)
    with kafka_group, daemon_group(cluster, unique_name, "daemons") as daemons_group:
        kafka_group.wait_acknowledged(5, what="before the fault")
        daemons_group.wait_acknowledged(5, what="before the fault")
        partition = offsets_partition(group_id)
        coordinator = faults.group_coordinator(group_id)
        assert faults.wait_partition_leader(OFFSETS_TOPIC, partition) == coordinator

        killed = time.monotonic()
        faults.kill_broker(coordinator)
        new = faults.wait_partition_leader(OFFSETS_TOPIC, partition, not_=coordinator)
        assert faults.group_coordinator(group_id) == new != coordinator
        kafka_group.wait_acknowledged(5, after=killed, what=f"with broker {coordinator} down")
        daemons_group.wait_acknowledged(5, after=killed, what=f"with broker {coordinator} down")
        assert_every_acknowledged_commit_kept(kafka_group, faults.live_bootstrap())

        faults.restart_broker(coordinator)
        restarted = time.monotonic()
        kafka_group.wait_acknowledged(3, after=restarted, what=f"after broker {coordinator} came back")
        kafka_group.stop()
        kept = assert_every_acknowledged_commit_kept(kafka_group, cluster.brokers)
        print(f"kafka: {kafka_group.outcomes()}, committed {kept}")
        finish(cluster, daemons_group)
