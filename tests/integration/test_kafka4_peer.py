"""The reference peer: Apache Kafka 4.x in KRaft mode beside the sandbox
(`zkcoord local up --kafka4`), with Kafka 4.x's own clients and tools in
KIP-848's consumer protocol.

`local up --kafka4` / `env` / `status` / a settings change / bad input /
`down` as a user runs them, in a state directory of the test's own; then on
the test sandbox's 4.x broker (fixture `kafka4`): two VerifiableConsumers
splitting a topic, kafka-consumer-groups 4.x describing the consumer group,
and a restart with another `group.consumer.migration.policy` taking effect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.support import java4_tools
from tests.support.daemons import wait_for
from tests.support.java4_tools import AssignmentReporterProcess, VerifiableConsumerProcess
from tests.support.ownership import double_owners
from zkcoord.local import kraft
from zkcoord.local.sandbox import Sandbox

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("kafka4_tools_available")]

DEADLINE_S = 120.0  # a member's join and each reconciliation step: seconds on an idle machine


@pytest.fixture
def kafka4_tools_available() -> None:
    """Skip, saying why, where Kafka 4.x cannot run (no Java 17+, no jars)."""
    from zkcoord.errors import MissingToolError
    from zkcoord.local import jars

    try:
        jars.kafka4_distribution()
    except MissingToolError as exc:
        pytest.skip(f"Kafka 4.x needs Java 17+ and its jars: {exc}")


def zkcoord(*args, state_dir, check=True):
    env = {**os.environ, "ZKCOORD_STATE_DIR": str(state_dir)}
    proc = subprocess.run([sys.executable, "-m", "zkcoord", "local", *args], capture_output=True, text=True,
                          env=env, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"zkcoord local {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc


def recorded(state_dir) -> dict:
    return json.loads((state_dir / "sandbox.json").read_text())


def gone(pid) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture
def state_dir(tmp_path):
    """A sandbox directory of the test's own, brought down when it ends."""
    state_dir = tmp_path / "sandbox"
    yield state_dir
    if state_dir.exists():
        zkcoord("down", state_dir=state_dir, check=False)


def cluster_id_served(bootstrap: str) -> str:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="t")
    try:
        return admin.describe_cluster()["cluster_id"]
    finally:
        admin.close()


def test_local_up_kafka4_env_status_settings_down(state_dir):
    """The 4.x node's whole life in the CLI: up, up again, status, env, a
    settings change (restart, data kept), bad settings (clear errors, the
    previous settings kept), down."""
    first = zkcoord("up", "--kafka4", state_dir=state_dir)
    assert "started: zookeeper, kafka-0, kafka4" in first.stdout
    node = recorded(state_dir)["kafka4"]
    address = f"127.0.0.1:{node['port']}"
    assert f"kafka 4.4.0 (KRaft): {address}  (its settings: none)" in first.stdout

    again = zkcoord("up", "--kafka4", state_dir=state_dir)
    assert "already up" in again.stdout and recorded(state_dir)["kafka4"]["pid"] == node["pid"]

    rows = [line.split() for line in zkcoord("status", state_dir=state_dir).stdout.splitlines()[1:]]
    assert [row[:4] for row in rows if row[0] == "kafka4"] == [["kafka4", address, str(node["pid"]), "up"]]

    exports = dict(line.removeprefix("export ").split("=", 1)
                   for line in zkcoord("env", state_dir=state_dir).stdout.splitlines())
    assert exports["ZKCOORD_KAFKA4_BOOTSTRAP_SERVERS"] == address
    assert exports["ZKCOORD_TOOLS_LOG4J2"] == f"{state_dir}/tools-log4j2.xml"
    assert '<Root level="WARN">' in (state_dir / "tools-log4j2.xml").read_text()
    cluster_id = kraft.cluster_id(Sandbox(state_dir))
    assert cluster_id and cluster_id_served(address) == cluster_id

    changed = zkcoord("up", "--kafka4-config", "group.consumer.migration.policy=downgrade",
                      "--kafka4-config", "group.consumer.heartbeat.interval.ms=3000",
                      "--kafka4-config", "group.consumer.min.heartbeat.interval.ms=1000", state_dir=state_dir)
    assert "started: kafka4" in changed.stdout
    restarted = recorded(state_dir)["kafka4"]
    assert gone(node["pid"]) and restarted["pid"] != node["pid"]
    assert (restarted["port"], restarted["controller_port"]) == (node["port"], node["controller_port"])
    assert recorded(state_dir)["kafka4_settings"] == {"group.consumer.heartbeat.interval.ms": "3000",
                                                      "group.consumer.migration.policy": "downgrade",
                                                      "group.consumer.min.heartbeat.interval.ms": "1000"}
    properties = (state_dir / "kafka4" / "server.properties").read_text().splitlines()
    assert properties[-3:] == ["group.consumer.heartbeat.interval.ms=3000", "group.consumer.migration.policy=downgrade",
                               "group.consumer.min.heartbeat.interval.ms=1000"]
    assert cluster_id_served(address) == cluster_id  # its storage kept
    assert "already up" in zkcoord("up", "--kafka4-config", "group.consumer.migration.policy=downgrade",
                                   state_dir=state_dir).stdout

    for bad, says in [("nope", "give KEY=VALUE"), ("listeners=PLAINTEXT://0.0.0.0:1", "is set by the sandbox"),
                      ("=1", "not a property name")]:
        refused = zkcoord("up", "--kafka4-config", bad, state_dir=state_dir, check=False)
        assert refused.returncode == 2 and says in refused.stderr and "Traceback" not in refused.stderr
    invalid = zkcoord("up", "--kafka4-config", "group.consumer.migration.policy=sideways", state_dir=state_dir,
                      check=False)
    assert invalid.returncode == 1 and "Traceback" not in invalid.stderr
    assert "Invalid value sideways for configuration group.consumer.migration.policy" in invalid.stderr
    assert "settings are back to" in invalid.stderr
    assert recorded(state_dir)["kafka4_settings"]["group.consumer.migration.policy"] == "downgrade"
    assert zkcoord("status", state_dir=state_dir, check=False).returncode == 1  # kafka4 down
    back = zkcoord("up", state_dir=state_dir)
    assert "started: kafka4" in back.stdout and "group.consumer.migration.policy=downgrade" in back.stdout

    last = recorded(state_dir)["kafka4"]["pid"]
    down = zkcoord("down", state_dir=state_dir)
    assert "stopped: kafka4, kafka-0, zookeeper" in down.stdout
    assert gone(last) and not state_dir.exists()


def test_kafka4_refused_on_a_secure_sandbox(tmp_path):
    proc = zkcoord("up", "--secure", "--kafka4", state_dir=tmp_path / "s", check=False)
    assert proc.returncode == 2
    assert "plain sandboxes only" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "s" / "sandbox.json").exists()


def make_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="t")
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="t")
    try:
        answer = admin.list_group_offsets({group: None})[group]
        return {(tp.topic, tp.partition): meta.offset for tp, meta in answer.items() if meta.offset >= 0}
    finally:
        admin.close()


def test_two_verifiable_consumers_split_a_topic(kafka4, unique_name):
    """Kafka's VerifiableConsumer, group.protocol=consumer, two members on a
    4-partition topic: two partitions each, every acknowledged record
    consumed and committed, no partition with two owners by their callbacks."""
    topic, group = unique_name("t"), unique_name("g")
    make_topic(kafka4, topic, 4)
    acked = java4_tools.verifiable_produce(kafka4, topic, 400, repeating_keys=16)
    assert sorted(acked) == [(topic, p) for p in range(4)]
    with VerifiableConsumerProcess(kafka4, topic, group, label="a") as a, \
            VerifiableConsumerProcess(kafka4, topic, group, label="b") as b:
        def split():
            held = [a.assignment(), b.assignment()]
            return held if [len(h) for h in held] == [2, 2] and held[0] | held[1] == set(acked) else None

        a.wait_until(split, "the two members holding two partitions each", DEADLINE_S)

        def all_consumed():
            seen = {tp: a.consumed_offsets().get(tp, set()) | b.consumed_offsets().get(tp, set()) for tp in acked}
            return all(seen[tp] >= set(offsets) for tp, offsets in acked.items())

        a.wait_until(all_consumed, "every acknowledged record consumed", DEADLINE_S)
        wait_for(lambda: committed(kafka4, group) == {tp: len(offsets) for tp, offsets in acked.items()},
                 DEADLINE_S, f"the group's committed offsets at the ends of {topic}", interval_s=0.5)
        assert double_owners([*a.changes(), *b.changes()]) == []
        for member in (a, b):
            member.stop()
            assert member.events()[-1]["name"] == "shutdown_complete"
            assert member.unparsed_lines() == []


def test_consumer_group_command_shows_the_consumer_group(kafka4, unique_name):
    """Kafka 4.x's kafka-consumer-groups on a group of two consumer-protocol
    members (range assignor): --describe --members --verbose shows each member
    id and client id with the assignment the member's own callbacks hold, at
    equal current and target epochs; --list --type consumer lists the group."""
    topic, group = unique_name("t"), unique_name("g")
    make_topic(kafka4, topic, 4)
    members = [AssignmentReporterProcess(kafka4, topic, group, label=label,
                                         consumer_properties=java4_tools.consumer_protocol("range"))
               for label in ("m1", "m2")]
    try:
        for member in members:
            member.start()

        def settled():
            held = {m.member_id(): m.assignment() for m in members}
            if None in held or sorted(map(len, held.values())) != [2, 2]:
                return None
            rows = java4_tools.describe_consumer_group_members(kafka4, group)
            stable = all(r.current_epoch == r.target_epoch and r.current_assignment == r.target_assignment
                         for r in rows)
            return rows if stable and {r.member_id: r.current_assignment for r in rows} == held else None

        rows = wait_for(settled, DEADLINE_S, f"{group} described as its members hold it", interval_s=0.5)
        by_id = {m.member_id(): m for m in members}
        assert sorted((r.client_id, by_id[r.member_id].label) for r in rows) == [("m1", "m1"), ("m2", "m2")]
        assert sorted(sorted(p for _, p in r.current_assignment) for r in rows) == [[0, 1], [2, 3]]  # range
        assert {r.partitions for r in rows} == {2} and len({r.current_epoch for r in rows}) == 1
        assert java4_tools.list_group_types(kafka4, "consumer")[group] == "Consumer"
        assert double_owners([c for m in members for c in m.changes()]) == []
        assert [m.errors() for m in members] == [[], []]
    finally:
        for member in members:
            member.kill()


def test_restart_with_another_migration_policy(kafka4, kafka4_reconfigure, kafka4_sandbox, unique_name):
    """`group.consumer.migration.policy` applied by a restart: with
    `disabled` a consumer-protocol member cannot join a classic group that
    has a member (Kafka's GroupIdNotFoundException); restarted with `upgrade`
    (data and cluster id kept), the same join upgrades the group to a consumer
    group, the classic member handing a partition over with no overlap."""
    topic, group = unique_name("t"), unique_name("g")
    make_topic(kafka4, topic, 2)
    cluster_id = kraft.cluster_id(kafka4_sandbox)
    kafka4_reconfigure({"group.consumer.migration.policy": "disabled"})
    assert kafka4_sandbox.load().kafka4_settings == {"group.consumer.migration.policy": "disabled"}
    classic = AssignmentReporterProcess(kafka4, topic, group, label="classic",
                                        consumer_properties={"group.protocol": "classic"})
    with classic:
        classic.wait_until(lambda: len(classic.assignment()) == 2, "the classic member holding both partitions",
                           DEADLINE_S)
        with AssignmentReporterProcess(kafka4, topic, group, label="refused",
                                       consumer_properties=java4_tools.consumer_protocol()) as refused:
            errors = refused.wait_until(refused.errors, "an error", DEADLINE_S)
            assert errors == [f"org.apache.kafka.common.errors.GroupIdNotFoundException: Cannot upgrade classic "
                              f"group {group} to consumer group because online upgrade is disabled."]
            refused.wait_until(lambda: refused.events("stopped"), "its exit", DEADLINE_S)
        assert java4_tools.list_group_types(kafka4)[group] == "Classic"

        kafka4_reconfigure({"group.consumer.migration.policy": "upgrade"})
        assert kraft.cluster_id(kafka4_sandbox) == cluster_id
        with AssignmentReporterProcess(kafka4, topic, group, label="upgraded",
                                       consumer_properties=java4_tools.consumer_protocol()) as upgraded:
            both = lambda: len(upgraded.assignment()) == 1 and len(classic.assignment()) == 1  # noqa: E731
            upgraded.wait_until(both, "one partition each", DEADLINE_S)
            assert java4_tools.list_group_types(kafka4)[group] == "Consumer"
            assert upgraded.assignment() | classic.assignment() == {(topic, 0), (topic, 1)}
            assert double_owners([*classic.changes(), *upgraded.changes()]) == []
            assert [classic.errors(), upgraded.errors()] == [[], []]
            upgraded.stop()
            assert upgraded.events()[-1]["event"] == "stopped"
