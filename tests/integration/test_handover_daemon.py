"""A live handover through the daemon: real Kafka 1.1.1 legacy consumers
(:mod:`zkcoord.local.legacy`) and a stock kafka-python consumer through a
zkcoord gateway, in one group, while a producer writes.

The legacy members are stopped one by one; at every step the owner znodes
are the legacy range answer (zkcoord's member counted as a consumer), and
when the last legacy member is gone the stock consumer has every partition,
with no legacy registration and no owner znode left. From the records each
member logged: every record produced was consumed, and none by two members
(the legacy members auto-commit, the stock consumer commits after each poll,
nobody is killed).

The old consumer reads ``/brokers`` at ZooKeeper's root, so the daemon runs
there too (its group and topic are the test's own, deleted afterwards).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from kafka import KafkaAdminClient, KafkaProducer
from kazoo.exceptions import NoNodeError
from kafka.admin import NewTopic

from tests.integration.test_gateway_clients import PythonMember
from tests.support import java_tools as jt
from tests.support.handover import legacy_classpath_or_skip, owners
from tests.support.daemons import gateway_fleet, process_marker, wait_for
from zkcoord.cli.main import cli
from zkcoord.core.handover.legacy_range import range_assignment
from zkcoord.core.handover.registration import is_zkcoord_consumer_id, parse_registration
from zkcoord.local.legacy import LegacyGroup, LegacySettings
from zkcoord.local.record_log import Delivery, check_deliveries, read_record_logs

pytestmark = pytest.mark.integration
PARTITIONS = 6
WAIT_S = 120.0
LEGACY_PROPERTIES = (("zookeeper.session.timeout.ms", "6000"), ("rebalance.backoff.ms", "500"),
                     ("rebalance.max.retries", "20"), ("auto.commit.enable", "true"),
                     ("auto.commit.interval.ms", "100"))


def node_ids(count: int) -> list[int]:
    """Node ids of their own at ZooKeeper's root, where a previous run's daemon may
    still be registered until its session expires."""
    first = 26_000 + int.from_bytes(os.urandom(2), "big") % 10_000 * 10
    return list(range(first, first + count))


class Producer:
    """Writes ``<i>`` to partition i % PARTITIONS until stopped; what it wrote, acked."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        self.topic, self.sent, self._stop = topic, 0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self._producer.send(self.topic, value=str(self.sent).encode(), partition=self.sent % PARTITIONS)
            self.sent += 1
            time.sleep(0.01)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        self._producer.flush()
        self._producer.close()




def registered(zk, group: str) -> list[str]:
    path = f"/consumers/{group}/ids"
    return sorted(zk.get_children(path)) if zk.exists(path) else []


def zkcoord_ids(zk, group: str) -> list[str]:
    """The registrations of zkcoord members under ids, sorted."""
    return [cid for cid in registered(zk, group) if is_zkcoord_consumer_id(cid)]


def only_zkcoord_thread(zk, group: str) -> str | None:
    """The thread id of the one zkcoord member registered (None: not exactly one)."""
    ours = zkcoord_ids(zk, group)
    return f"{ours[0]}-0" if len(ours) == 1 else None


def three_way_split(zk, group: str, topic: str) -> bool:
    """a1, b1 and the zkcoord member hold the legacy range answer (its id sorts last)."""
    thread = only_zkcoord_thread(zk, group)
    return thread is not None and owners(zk, group, topic) == dict(enumerate(
        [f"{group}_a1-0"] * 2 + [f"{group}_b1-0"] * 2 + [thread] * 2))


@contextlib.contextmanager
def make_scene(services, zk_root, admin, unique_name, tmp_path, daemons: int):
    """A topic, a group, ``start_legacy(prefix)`` and a fleet of ``daemons`` daemons with
    gateways (at ZooKeeper's root); legacy members stopped and the group's znodes deleted after."""
    classpath = legacy_classpath_or_skip()
    topic, group = unique_name("handover-d-t"), unique_name("handover-d-g")
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], wait_for_metadata=True)
    started: list[LegacyGroup] = []

    def start_legacy(prefix: str) -> LegacyGroup:
        settings = LegacySettings(services.zookeeper, group, topic, members=1, prefix=prefix, commit_interval_ms=-1,
                                  log_records=True, properties=LEGACY_PROPERTIES)
        process = LegacyGroup(settings, classpath, tmp_path / f"legacy-{prefix}.log",
                              jvm_args=(f"-D{process_marker()}",))
        started.append(process)
        return process.start()

    try:
        with gateway_fleet(services.zookeeper, zk_root, tmp_path / "logs", services.bootstrap_servers,
                           *node_ids(daemons), metrics_listen="127.0.0.1:0") as fleet:
            yield topic, group, start_legacy, fleet
            # At ZooKeeper's root the next test's FindCoordinator would name a daemon of this one (a killed
            # one, until its session expires), and a client may keep asking it: leave none registered.
            for daemon in fleet.daemons.values():
                if daemon.alive():
                    daemon.terminate()
            wait_for(lambda: all(fleet.session_gone(n) for n in fleet.daemons), 60, "this test's daemons gone")
    finally:
        for process in started:
            process.stop()
        for path in (f"/consumers/{group}", f"/zkcoord/handovers/{group}", f"/coordinators/{group}"):
            zk_root.delete(path, recursive=True)


@pytest.fixture
def scene(services, zk_root, admin, unique_name, tmp_path):
    with make_scene(services, zk_root, admin, unique_name, tmp_path, 1) as made:
        yield made


@pytest.fixture
def scene2(services, zk_root, admin, unique_name, tmp_path):
    with make_scene(services, zk_root, admin, unique_name, tmp_path, 2) as made:
        yield made


def test_legacy_members_replaced_one_by_one_by_a_stock_consumer_through_the_gateway(services, zk_root, scene):
    topic, group, start_legacy, fleet = scene
    producer = Producer(services.bootstrap_servers, topic).start()
    legacy = {prefix: start_legacy(prefix) for prefix in ("a", "b")}
    wait_for(lambda: sorted(owners(zk_root, group, topic).values()) == sorted(
        [f"{group}_a1-0"] * 3 + [f"{group}_b1-0"] * 3), WAIT_S, "the legacy members own every partition")

    gateway = next(iter(fleet.daemons.values())).gateway_address
    member = PythonMember("kafka-python", gateway, group, topic).start()
    try:
        # Three consumers in the legacy range order: a1, b1, then zkcoord's (its id sorts last).
        wait_for(lambda: three_way_split(zk_root, group, topic), WAIT_S,
            "the owner znodes are the range answer of a1, b1 and the zkcoord member")
        wait_for(lambda: mixed_groups(fleet) == 1, WAIT_S, "the metric counts the mixed group")
        described = CliRunner().invoke(cli, ["describe", group, "--output", "json", "--zookeeper", services.zookeeper])
        [ours] = [c for c in json.loads(described.output)["groups"][0]["legacy_rebalance"]["consumers"]
                  if c["kind"] == "zkcoord"]
        assert ours["member"].startswith("kafka-python-m-") and ours["owned"] == {topic: [4, 5]}, ours
        consumed_at_join = len(member.records)
        wait_for(lambda: {p for p, _, _ in member.records[consumed_at_join:]} == {4, 5}, WAIT_S,
                 "the stock consumer consumes partitions 4 and 5")

        legacy["a"].stop()
        wait_for(lambda: owners(zk_root, group, topic) == dict(enumerate(
            [f"{group}_b1-0"] * 3 + [only_zkcoord_thread(zk_root, group)] * 3)), WAIT_S, "b1 and the zkcoord member split the topic")
        legacy["b"].stop()
        wait_for(lambda: registered(zk_root, group) == [] and owners(zk_root, group, topic) == {}, WAIT_S,
                 "no legacy registration and no owner znode left once the last legacy member stopped")
        wait_for(lambda: mixed_groups(fleet) == 0, WAIT_S, "the metric counts no mixed group")
        producer.stop()
        expected = {(i % PARTITIONS, i // PARTITIONS) for i in range(producer.sent)}

        def missing() -> set[tuple[int, int]]:
            return expected - {(p, o) for p, o, _ in member.records} - legacy_records(legacy.values())

        try:
            wait_for(lambda: not missing(), WAIT_S, "every record produced was consumed")
        except AssertionError:
            gone = sorted(missing())
            raise AssertionError(f"{len(gone)} of {len(expected)} records consumed by nobody, e.g. {gone[:20]}; "
                                 f"ours {sorted(member.records)[:5]}...") from None
    finally:
        member.close()
        producer_stop_quietly(producer)

    assert_once(topic, legacy.values(), [(p, o, "zkcoord") for p, o, _ in member.records])
    assert [e for process in legacy.values() for e in process.events() if e.event == "error"] == []
    assert "handover over" in next(iter(fleet.daemons.values())).log(400)


def live_state(services, group: str) -> str | None:
    """The group's state as its owner daemon answers `zkcoord describe`."""
    result = CliRunner().invoke(cli, ["describe", group, "--output", "json", "--zookeeper", services.zookeeper])
    found = json.loads(result.output)["groups"] if result.exit_code == 0 else []
    return found[0]["state"] if found and found[0]["read_from"] == "daemon" else None


def mixed_groups(fleet) -> float:
    """The daemon's ``zkcoord_mixed_groups`` gauge (its metrics port is in its log)."""
    daemon = next(iter(fleet.daemons.values()))
    port = int(re.search(r"metrics and health on http://[^:]+:(\d+)/metrics", daemon.log(400)).group(1))
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return float(re.search(r"^zkcoord_mixed_groups (\S+)$", text, re.M).group(1))


def handed_out_while_releasing(processes) -> set[tuple[str, int, int]]:
    """(topic, partition, offset) of records a legacy member handed to its
    application after it began releasing that partition in a rebalance (its
    ``release`` event) and before claiming it again. Kafka 0.8-1.1's consumer
    does that: its rebalance clears the stream's current chunk and commits,
    while the application thread may already be taking a record from that
    chunk, so it gets a record past the position committed, and the next
    owner gets it too. Between two legacy consumers the same happens; it is
    the old consumer's, not the handover's."""
    late = set()
    for process in processes:
        releasing: dict[str, set[int]] = {}
        for e in process.events():  # in the order the member emitted them
            if e.event == "release":
                for topic, parts in e.data.get("topics", {}).items():
                    releasing.setdefault(topic, set()).update(parts)
            elif e.event == "claim":
                for topic, parts in e.data.get("topics", {}).items():
                    releasing.get(topic, set()).difference_update(parts)
            elif e.event == "consumed" and e.data["partition"] in releasing.get(e.data.get("topic"), set()):
                late.add((e.data["topic"], e.data["partition"], e.data["offset"]))
    return late


def assert_once(topic: str, legacy, modern: list[tuple[int, int, str]], excused=lambda tp, who: False) -> None:
    """No record of ``topic`` went to two members (legacy members' ``consumed``
    events, and ``modern``'s (partition, offset, member)), except the old
    consumer's own race (:func:`handed_out_while_releasing`) and ``excused``."""
    late = handed_out_while_releasing(legacy)
    seen: dict[tuple[int, int], list[str]] = {}
    for process in legacy:
        for e in process.events():
            if e.event == "consumed":
                seen.setdefault((e.data["partition"], e.data["offset"]), []).append(e.member)
    for p, o, who in modern:
        seen.setdefault((p, o), []).append(who)
    twice = {tp: who for tp, who in seen.items()
             if len(who) > 1 and (topic, *tp) not in late and not excused(tp, who)}
    assert not twice, f"{len(twice)} records went to two members, e.g. {sorted(twice.items())[:10]}"


def legacy_records(processes) -> set[tuple[int, int]]:
    """(partition, offset) of every record the legacy members logged."""
    return {(e.data["partition"], e.data["offset"]) for process in processes for e in process.events()
            if e.event == "consumed"}


def producer_stop_quietly(producer: Producer) -> None:
    if not producer._stop.is_set():
        producer.stop()


def test_a_legacy_member_killed_then_the_stock_consumer_rolled_back(services, zk_root, scene):
    """kill -9 of a legacy member mid-handover: its partitions stay unconsumed
    until its ZooKeeper session expires (as in a legacy-only group), then the
    range answer of who is left; the stock consumer leaves (the rollback): the
    remaining legacy member takes every partition, nothing of zkcoord's is left
    in ZooKeeper. Only records the killed member consumed and had not committed
    may be delivered twice."""
    topic, group, start_legacy, fleet = scene
    producer = Producer(services.bootstrap_servers, topic).start()
    legacy = {prefix: start_legacy(prefix) for prefix in ("a", "b")}
    wait_for(lambda: len(owners(zk_root, group, topic)) == PARTITIONS, WAIT_S, "the legacy members own every partition")
    gateway = next(iter(fleet.daemons.values())).gateway_address
    member = PythonMember("kafka-python", gateway, group, topic).start()
    try:
        wait_for(lambda: three_way_split(zk_root, group, topic), WAIT_S, "three-way split")
        killed_at = len(member.records)
        legacy["b"].kill()
        wait_for(lambda: owners(zk_root, group, topic) == dict(enumerate(
            [f"{group}_a1-0"] * 3 + [only_zkcoord_thread(zk_root, group)] * 3)), WAIT_S, "a1 and the member split b1's share")
        wait_for(lambda: {p for p, _, _ in member.records[killed_at:]} >= {3}, WAIT_S, "the member consumes 3")
    finally:
        member.close()  # the rollback: the stock consumer leaves the group
    wait_for(lambda: registered(zk_root, group) == [f"{group}_a1"] and owners(zk_root, group, topic) == {
        p: f"{group}_a1-0" for p in range(PARTITIONS)}, WAIT_S, "a1 alone holds every partition")
    producer.stop()
    expected = {(i % PARTITIONS, i // PARTITIONS) for i in range(producer.sent)}
    wait_for(lambda: expected <= {(p, o) for p, o, _ in member.records} | legacy_records(legacy.values()),
             WAIT_S, "every record produced was consumed")
    # b1 auto-commits every 100 ms: what it consumed after its last commit before the kill is redelivered
    # to whoever takes its partitions (2 and 3); nothing else may come twice.
    assert_once(topic, legacy.values(), [(p, o, "zkcoord") for p, o, _ in member.records],
                excused=lambda tp, who: "b1" in who and tp[0] in (2, 3))


def test_kill_9_of_the_owner_daemon_mid_handover(services, zk_root, scene2):
    """Two daemons; a stock Java consumer through both gateways. kill -9 of
    the group's owner daemon mid-handover: the member's registration and owner
    znodes are persistent, so the legacy members never see them go and never
    take the member's partitions; the other daemon carries the handover on
    from the group's record (the member keeps consuming, nothing rebalances
    for the kill), and the legacy members are then replaced as before. No
    record is consumed twice, none is missed."""
    topic, group, start_legacy, fleet = scene2
    producer = Producer(services.bootstrap_servers, topic).start()
    legacy = {prefix: start_legacy(prefix) for prefix in ("a", "b")}
    wait_for(lambda: len(owners(zk_root, group, topic)) == PARTITIONS, WAIT_S, "the legacy members own every partition")
    bootstrap = ",".join(d.gateway_address for d in fleet.daemons.values())
    java = jt.ConsoleConsumerProcess(bootstrap, topic, group=group, client_id="java-m", consumer_properties={
        "session.timeout.ms": 10000, "heartbeat.interval.ms": 500, "auto.commit.interval.ms": 200,
        "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor"}).start()
    try:
        wait_for(lambda: three_way_split(zk_root, group, topic), WAIT_S, "three-way split")
        ours = only_zkcoord_thread(zk_root, group)
        registration = f"/consumers/{group}/ids/{ours[:-2]}"
        assert zk_root.exists(registration).ephemeralOwner == 0  # persistent: it outlives a daemon
        wait_for(lambda: {r.partition for r in java.records()} >= {4, 5}, WAIT_S, "the Java member consumes 4, 5")

        owner = fleet.daemons[fleet.contenders(group)[0]]
        survivor = next(d for d in fleet.daemons.values() if d is not owner)
        owner.kill()
        consumed_at_kill = len(java.records())
        # Until the survivor owns the group, and after: 4 and 5 stay the member's, the rest the legacy members'.
        split = dict(enumerate([f"{group}_a1-0"] * 2 + [f"{group}_b1-0"] * 2 + [ours] * 2))

        def carried_on() -> bool:
            assert owners(zk_root, group, topic) == split, "the owner znodes changed after the kill"
            return (fleet.contenders(group)[:1] == [survivor.node_id]
                    and {r.partition for r in java.records()[consumed_at_kill:]} >= {4, 5})

        wait_for(carried_on, WAIT_S, "the survivor owns the group and the member goes on consuming 4 and 5")
        legacy["a"].stop()
        wait_for(lambda: owners(zk_root, group, topic) == dict(enumerate(
            [f"{group}_b1-0"] * 3 + [ours] * 3)), WAIT_S, "b1 and the member split the topic (the survivor acting)")
        legacy["b"].stop()
        wait_for(lambda: registered(zk_root, group) == [] and owners(zk_root, group, topic) == {}, WAIT_S,
                 "nothing of the handover left")
        producer.stop()
        expected = {(i % PARTITIONS, i // PARTITIONS) for i in range(producer.sent)}
        wait_for(lambda: expected <= {(r.partition, r.offset) for r in java.records()}
                 | legacy_records(legacy.values()), WAIT_S, "every record produced was consumed")
        assert "carrying on its handover" in survivor.log(400)
    finally:
        java.stop()
        producer_stop_quietly(producer)
    assert_once(topic, legacy.values(), [(r.partition, r.offset, "java") for r in java.records()])


def test_an_orphaned_handover_is_adopted_and_ends(services, zk_root, scene2):
    """kill -9 of the owner daemon and of the stock member together: nobody asks
    for the group again, but its persistent znodes must not stay held for a
    member that is gone. The other daemon adopts the group (its marker under
    /zkcoord/handovers), the member's session expires there, its registration
    and owner znodes are deleted, and the legacy member takes every partition.
    The group stays in handover (a zkcoord member may come back) until the
    legacy member leaves too."""
    topic, group, start_legacy, fleet = scene2
    legacy = start_legacy("a")
    wait_for(lambda: len(owners(zk_root, group, topic)) == PARTITIONS, WAIT_S, "the legacy member owns every partition")
    bootstrap = ",".join(d.gateway_address for d in fleet.daemons.values())
    java = jt.ConsoleConsumerProcess(bootstrap, topic, group=group, client_id="java-m", consumer_properties={
        "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor"}).start()
    try:
        def ours() -> list[str]:
            return zkcoord_ids(zk_root, group)

        wait_for(lambda: len(ours()) == 1 and sorted(set(owners(zk_root, group, topic).values())) == sorted(
            [f"{group}_a1-0", f"{ours()[0]}-0"]), WAIT_S, "the legacy member and the stock member split the topic")
        assert zk_root.exists(f"/zkcoord/handovers/{group}")
        owner = fleet.daemons[fleet.contenders(group)[0]]
        survivor = next(d for d in fleet.daemons.values() if d is not owner)
        java.kill()
        owner.kill()
        wait_for(lambda: registered(zk_root, group) == [f"{group}_a1"] and owners(zk_root, group, topic) == {
            p: f"{group}_a1-0" for p in range(PARTITIONS)}, WAIT_S, "the legacy member holds every partition")
        assert fleet.contenders(group)[:1] == [survivor.node_id] and "adopted" in survivor.log(400)
        legacy.stop()  # the last legacy member leaves: the handover ends, its marker with it
        wait_for(lambda: not zk_root.exists(f"/zkcoord/handovers/{group}") and registered(zk_root, group) == [],
                 WAIT_S, "the marker is gone")
    finally:
        java.kill()
    assert [e for e in legacy.events() if e.event == "error"] == []


def test_kept_in_handover_a_legacy_consumer_can_come_back(services, zk_root, scene):
    """The rollback after the last legacy member left: `zkcoord handover keep`
    registers the stock member as a legacy consumer again (with owner znodes
    for every partition), so a legacy member started again takes only its
    range, handed over by the member, and then everything once the member
    leaves. No record twice."""
    topic, group, start_legacy, fleet = scene
    producer = Producer(services.bootstrap_servers, topic).start()
    member = PythonMember("kafka-python", next(iter(fleet.daemons.values())).gateway_address, group, topic).start()
    legacy: dict[str, LegacyGroup] = {}
    try:
        wait_for(lambda: {p for p, _, _ in member.records} == set(range(PARTITIONS)), WAIT_S,
                 "the stock member alone consumes every partition")
        keep = CliRunner().invoke(cli, ["handover", "keep", group, "--zookeeper", services.zookeeper])
        assert keep.exit_code == 0 and "kept in handover" in keep.output, keep.output

        wait_for(lambda: only_zkcoord_thread(zk_root, group) and owners(zk_root, group, topic) == {
            p: only_zkcoord_thread(zk_root, group) for p in range(PARTITIONS)}, WAIT_S, "the member registered, holding every partition")
        legacy["c"] = start_legacy("c")
        wait_for(lambda: owners(zk_root, group, topic) == dict(enumerate(
            [f"{group}_c1-0"] * 3 + [only_zkcoord_thread(zk_root, group)] * 3)), WAIT_S, "the legacy member takes its range, no more")
    finally:
        member.close()  # the rest of the rollback: the stock member leaves
    wait_for(lambda: owners(zk_root, group, topic) == {p: f"{group}_c1-0" for p in range(PARTITIONS)}
             and registered(zk_root, group) == [f"{group}_c1"], WAIT_S, "the legacy member holds everything")
    end = CliRunner().invoke(cli, ["handover", "end", group, "--zookeeper", services.zookeeper])
    assert end.exit_code == 0, end.output
    producer.stop()
    expected = {(i % PARTITIONS, i // PARTITIONS) for i in range(producer.sent)}
    wait_for(lambda: expected <= {(p, o) for p, o, _ in member.records} | legacy_records(legacy.values()),
             WAIT_S, "every record produced was consumed")
    assert_once(topic, legacy.values(), [(p, o, "zkcoord") for p, o, _ in member.records])


class TwoTopicProducer:
    """Writes ``<topic>:<i>`` values to two topics, round robin over their partitions."""

    def __init__(self, bootstrap: str, topics: list[str]) -> None:
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        self.topics, self.sent, self._stop = topics, {t: 0 for t in topics}, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TwoTopicProducer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            for topic in self.topics:
                i = self.sent[topic]
                self._producer.send(topic, value=f"{topic}:{i}".encode(), partition=i % PARTITIONS)
                self.sent[topic] = i + 1
            time.sleep(0.02)

    def stop(self) -> dict[tuple[str, int], range]:
        """Stop; the offsets written, per partition."""
        self._stop.set()
        self._thread.join(30)
        self._producer.flush()
        self._producer.close()
        return {(t, p): range(0, len(range(p, n, PARTITIONS))) for t, n in self.sent.items() for p in range(PARTITIONS)}


class ThinConsumer:
    """``zkcoord consume`` (zkcoord's own consumer) as a process: its records, by (topic, partition, offset)."""

    def __init__(self, fleet, topics: list[str], group: str, out: Path, bootstrap: str) -> None:
        coordinators = ",".join(f"{d.host}:{d.port}" for d in fleet.daemons.values())
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, "-X", process_marker(), "-m", "zkcoord", "consume", *topics, "--group", group,
             "--coordinators", coordinators, "--bootstrap-servers", bootstrap, "--heartbeat-interval-ms", "500"],
            stdout=open(out, "wb"), stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def records(self) -> list[tuple[str, int, int]]:
        found = []
        for line in self.out.read_text(errors="replace").splitlines():
            fields = line.split(" ")
            if len(fields) >= 3 and fields[1].isdigit() and fields[2].isdigit():
                found.append((fields[0], int(fields[1]), int(fields[2])))
        return found

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)


def range_answer(zk, group: str, topics: list[str]) -> dict[tuple[str, int], str]:
    """The legacy range answer of the registrations under ids, as every consumer computes it;
    empty while a registration vanishes as it is read (the membership is changing: not settled)."""
    try:
        regs = [parse_registration(cid, zk.get(f"/consumers/{group}/ids/{cid}")[0]) for cid in registered(zk, group)]
    except NoNodeError:
        return {}
    return range_assignment(regs, {t: tuple(range(PARTITIONS)) for t in zk.get_children("/brokers/topics")
                                   if t in topics})


def all_owners(zk, group: str, topics: list[str]) -> dict[tuple[str, int], str]:
    return {(t, p): holder for t in topics for p, holder in owners(zk, group, t).items()}


def test_the_issue_scenario_two_topics_streams_whitelist_replace_reverse_migrate(services, zk_root, scene2, tmp_path):
    """Three legacy members on two topics (one with two streams, one by a
    whitelist) while a producer writes; replaced one at a time by zkcoord's
    consumer and a stock Java consumer through the gateways; then the reverse
    (a legacy member back, the Java one gone); then the last legacy members
    leave and the group's offsets move to Kafka. At every step the owner
    znodes are the legacy range answer of who is registered; from every
    member's records: none delivered to two members, none missed."""
    topic, group, start_legacy, fleet = scene2
    ta, tb = topic, topic + "-b"
    topics = [ta, tb]
    KafkaAdminClient(bootstrap_servers=services.bootstrap_servers).create_topics([NewTopic(tb, PARTITIONS, 1)])
    producer = TwoTopicProducer(services.bootstrap_servers, topics).start()
    classpath = legacy_classpath_or_skip()
    legacy: dict[str, LegacyGroup] = {}

    def start(prefix: str, **how) -> LegacyGroup:
        settings = LegacySettings(services.zookeeper, group, ta, members=1, prefix=prefix, commit_interval_ms=-1,
                                  properties=LEGACY_PROPERTIES, record_log=tmp_path / f"records-{prefix}.log",
                                  log_records=True, **how)
        legacy[prefix] = LegacyGroup(settings, classpath, tmp_path / f"legacy2-{prefix}.log",
                                     jvm_args=(f"-D{process_marker()}",)).start()
        return legacy[prefix]

    def settled(what: str) -> None:
        def check():
            answer = range_answer(zk_root, group, topics)
            return len(answer) == 2 * PARTITIONS and all_owners(zk_root, group, topics) == answer
        wait_for(check, WAIT_S, what)

    start("s", topics=(tb,), streams=2)
    start("w", whitelist=re.escape(ta[:-9]) + ".*", topics=())
    start("p", topics=(tb,))
    settled("three legacy members (two streams, a whitelist, a plain one) own both topics")
    thin = ThinConsumer(fleet, topics, group, tmp_path / "thin.txt", services.bootstrap_servers)
    bootstrap = ",".join(d.gateway_address for d in fleet.daemons.values())
    java = None
    try:
        wait_for(lambda: len(zkcoord_ids(zk_root, group)) == 1, WAIT_S,
                 "zkcoord's consumer registered")
        legacy["p"].stop()
        settled("p1 replaced by zkcoord's consumer")
        java = jt.ConsoleConsumerProcess(bootstrap, ta, include="|".join(map(re.escape, topics)), group=group,
                                         client_id="java-m", consumer_properties={
                                             "heartbeat.interval.ms": 500, "auto.commit.interval.ms": 200,
                                             "partition.assignment.strategy":
                                                 "org.apache.kafka.clients.consumer.RangeAssignor"}).start()
        wait_for(lambda: len(zkcoord_ids(zk_root, group)) == 2, WAIT_S,
                 "the Java consumer registered")
        legacy["w"].stop()
        settled("w1 replaced by the Java consumer")
        start("q", topics=(tb,))  # the reverse: a legacy member back, the Java one gone
        wait_for(lambda: f"{group}_q1" in registered(zk_root, group), WAIT_S, "q1 registered")
        java.stop()
        settled("q1 back, the Java consumer gone")
        legacy["s"].stop()
        legacy["q"].stop()
        wait_for(lambda: registered(zk_root, group) == [] and all_owners(zk_root, group, topics) == {}, WAIT_S,
                 "the last legacy members gone: nothing of the handover left")
        produced = producer.stop()
        logs = [tmp_path / f"records-{p}.log" for p in legacy]

        def deliveries():
            found = read_record_logs(logs)
            found += [Delivery(t, p, o, "thin", "0", 0) for t, p, o in thin.records()]
            found += [Delivery(r.value.split(":")[0], r.partition, r.offset, "java", "0", 0) for r in java.records()]
            return found

        wait_for(lambda: not check_deliveries(deliveries(), produced).missed, WAIT_S,
                 "every record produced was consumed")
        check = check_deliveries(deliveries(), produced)
        late = handed_out_while_releasing(legacy.values())
        assert not (check.to_two_members - late), check.summary()
        for command in (["apply"], ["verify"], ["finalize"]):
            result = CliRunner().invoke(cli, ["migrate", *command, "--group", group, "--zookeeper", services.zookeeper,
                                              "--bootstrap-servers", services.bootstrap_servers])
            assert result.exit_code == 0, result.output
        listed = CliRunner().invoke(cli, ["groups", "--output", "json", "--zookeeper", services.zookeeper,
                                          "--bootstrap-servers", services.bootstrap_servers])
        assert any(g["group"] == group and g["storage"] == "kafka" for g in json.loads(listed.output)["groups"]), \
            listed.output
    finally:
        thin.stop()
        if java is not None:
            java.stop()
        producer._stop.set()


def test_a_legacy_consumer_that_gave_up_is_nudged(services, zk_root, scene, tmp_path):
    """A legacy consumer whose range grows onto a partition a zkcoord member
    holds retries `rebalance.max.retries` times (here once) and gives up
    while the member is slow to give it back (its JVM stopped); then it waits
    for the next change of ids, which would never come. The daemon sees the
    legacy ranges' partitions untaken for two back-offs and registers one of
    its members again: the legacy consumer rebalances and takes its range."""
    topic, group, start_legacy, fleet = scene
    bootstrap = next(iter(fleet.daemons.values())).gateway_address
    props = {"heartbeat.interval.ms": 500, "session.timeout.ms": 60000, "auto.commit.interval.ms": 200,
             "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RangeAssignor"}
    settings = LegacySettings(services.zookeeper, group, topic, members=1, prefix="c", commit_interval_ms=-1,
                              properties=(*LEGACY_PROPERTIES[:1], ("rebalance.backoff.ms", "100"),
                                          ("rebalance.max.retries", "1"), *LEGACY_PROPERTIES[3:]))
    legacy = LegacyGroup(settings, legacy_classpath_or_skip(), tmp_path / "legacy-c.log",
                         jvm_args=(f"-D{process_marker()}",)).start()
    slow = jt.ConsoleConsumerProcess(bootstrap, topic, group=group, client_id="slow", consumer_properties=props)
    other = jt.ConsoleConsumerProcess(bootstrap, topic, group=group, client_id="other", consumer_properties=props)
    try:
        wait_for(lambda: len(owners(zk_root, group, topic)) == PARTITIONS, WAIT_S, "c1 owns every partition")
        slow.start()
        wait_for(lambda: len(zkcoord_ids(zk_root, group)) == 1, WAIT_S,
                 "the slow member registered")
        other.start()

        def split() -> list[str] | None:
            ours = zkcoord_ids(zk_root, group)
            return ours if len(ours) == 2 and owners(zk_root, group, topic) == dict(enumerate(
                [f"{group}_c1-0"] * 2 + [f"{ours[0]}-0"] * 2 + [f"{ours[1]}-0"] * 2)) else None

        first, _ = wait_for(split, WAIT_S, "c1 and the two members split the topic")
        wait_for(lambda: live_state(services, group) == "Stable", WAIT_S, "the group Stable (no join parked)")
        os.kill(slow.pid, signal.SIGSTOP)  # the member holding 2 and 3 cannot answer for a while
        try:
            other.stop()  # c1's range grows to 0-2: partition 2 is the stopped member's
            wait_for(lambda: "can't rebalance after 1 retries" in (tmp_path / "legacy-c.log").read_text(
                errors="replace"), WAIT_S, "c1 gave up retrying")
        finally:
            os.kill(slow.pid, signal.SIGCONT)
        wait_for(lambda: owners(zk_root, group, topic) == dict(enumerate(
            [f"{group}_c1-0"] * 3 + [f"{first}-0"] * 3)), WAIT_S, "c1 nudged into taking its range")
        assert "to start their rebalance" in next(iter(fleet.daemons.values())).log(400)
    finally:
        slow.stop()
        other.stop()
        legacy.stop()
