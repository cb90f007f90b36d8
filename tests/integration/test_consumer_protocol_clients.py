"""KIP-848's consumer protocol through zkcoord's gateways, with real clients.

Kafka 4.4's VerifiableConsumer (many in one JVM, :mod:`tests.support.consumer_host`)
and librdkafka (confluent-kafka, :mod:`tests.support.rdkafka_members`),
bootstrapped from the gateways of two ``zkcoord run`` daemons in front of the
sandbox's Kafka 3.9 broker; Kafka 4.4's VerifiableProducer writing while
members come and go. A group's owner is never assumed: it is asked
(FindCoordinator through a gateway).

Every check is made from what the clients themselves printed, on one
monotonic clock (the Java members' ``System.nanoTime()``, librdkafka's
callbacks' ``time.monotonic_ns()``, the moments the test kills something):
no partition owned by two members at once
(:func:`tests.support.ownership.double_owners`), every acknowledged record
consumed (a record consumed twice only by two successive owners), no
acknowledged commit lost. Then Kafka 4.4's kafka-consumer-groups is run on
one group served by zkcoord and on the same group served by Kafka 4.4 itself
(fixture ``kafka4``), and what it prints compared.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.protocol.admin.groups import ListGroupsRequest

from tests.support import java_tools as jt
from tests.support import rdkafka_members
from tests.support.consumer_host import ConsumerHost, member_properties, redelivery
from tests.support.consumer_members import ConsumerMember
from tests.support.daemons import gateway_fleet, wait_for
from tests.support.java4_tools import VerifiableProducerProcess, parse_consumer_group_members
from tests.support.ownership import AssignmentChange, double_owners
from tests.support.placement import placed_name
from tests.support.rdkafka_members import RdkafkaMember
from tests.support.wire import coordinator_client, find_coordinator, open_client, parse_addresses
from zkcoord.schemas import ConsumerGroupDescribeRequest

pytestmark = pytest.mark.integration

WAIT_S = 120.0  # a join, a rebalance, a take-over: seconds on an idle machine
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 500
FLEET_OPTIONS = {"group_consumer_session_timeout_ms": SESSION_TIMEOUT_MS,
                 "group_consumer_heartbeat_interval_ms": HEARTBEAT_INTERVAL_MS,
                 "group_consumer_assignment_interval_ms": 0, "topic_metadata_refresh_ms": 500}
# Classic members: heartbeats often enough that a rebalance is heard within half a second.
CLASSIC = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}

TopicPartition = tuple[str, int]


# -- fixtures -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def java_host():
    """One ConsumerHost JVM for the whole file (its members are the tests')."""
    from zkcoord.errors import MissingToolError
    from zkcoord.local import jars

    try:
        jars.kafka4_distribution()
    except MissingToolError as exc:
        pytest.skip(f"Kafka 4.x's clients need Java 17+ and the Kafka 4.x jars: {exc}")
    with ConsumerHost("java-members") as host:
        yield host


# Every group's target assignment computed off the daemons' event loops, as a large group's is.
OFFLOADED = {"group_consumer_assignor_offload_min_size": 0}


@pytest.fixture
def fleet(request, services, zk_hosts, zk, tmp_path):
    """Two daemons with FLEET_OPTIONS (and a test's own, ``indirect`` parameters)."""
    options = {**FLEET_OPTIONS, **getattr(request, "param", {})}
    with gateway_fleet(zk_hosts, zk, tmp_path / "logs", services.bootstrap_servers, 1, 2, **options) as fleet:
        yield fleet


class Members:
    """The members a test starts, Java (in the shared host unless given
    another) and librdkafka, all stopped when the test ends (before its
    daemons). A Java member's label is its client id; in the host, which
    outlives the test, it is ``<label>.<tag>``."""

    def __init__(self, host: ConsumerHost, bootstrap: str, tag: str):
        self.host, self.bootstrap, self.tag = host, bootstrap, tag
        self.java: dict[str, object] = {}
        self.rdkafka: dict[str, RdkafkaMember] = {}
        self.running: dict[str, ConsumerHost] = {}

    def start_java(self, label: str, topic: str, group: str, protocol: str = "consumer", *,
                   host: ConsumerHost | None = None, **options):
        host = host or self.host
        self.java[label] = host.start_member(f"{label}.{self.tag}", topic, member_properties(
            self.bootstrap, group, protocol, label=label, **options))
        self.running[label] = host
        return self.java[label]

    def stop_java(self, label: str) -> None:
        self.running.pop(label).stop_member(f"{label}.{self.tag}")

    def start_rdkafka(self, label: str, topic: str, group: str) -> RdkafkaMember:
        member = RdkafkaMember(label, self.bootstrap, topic, group, {"group.protocol": "consumer"}).start()
        self.rdkafka[label] = member
        return member

    def all(self) -> list:
        return [*self.java.values(), *self.rdkafka.values()]

    def current(self) -> list:
        return [*(self.java[label] for label in self.running), *self.rdkafka.values()]

    def changes(self) -> list[AssignmentChange]:
        return [c for m in self.all() for c in m.changes()]

    def consumed(self) -> dict[TopicPartition, set[int]]:
        seen: dict[TopicPartition, set[int]] = {}
        for member in self.all():
            for tp, offsets in member.consumed_offsets().items():
                seen.setdefault(tp, set()).update(offsets)
        return seen

    def commits(self) -> list[tuple[int, dict[TopicPartition, int]]]:
        return sorted(c for m in self.all() for c in m.commits())

    def close(self) -> None:
        """Every member closed (leaving the group), the Java ones at once."""
        for member in self.rdkafka.values():
            member.close()
        by_host: dict[ConsumerHost, list[str]] = {}
        for label, host in self.running.items():
            by_host.setdefault(host, []).append(f"{label}.{self.tag}")
        self.running.clear()
        for host, labels in by_host.items():
            if host.alive():
                host.stop_members(labels)


@pytest.fixture
def members(java_host, fleet, unique_name):
    group = Members(java_host, gateways(fleet), unique_name("m").rpartition("-")[2])
    try:
        yield group
    finally:
        group.close()


# -- helpers --------------------------------------------------------------------------

def gateways(fleet) -> str:
    return ",".join(d.gateway_address for d in fleet.daemons.values() if d.alive())


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="consumer-protocol-test")
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()


def partitions_of(topic: str, count: int) -> frozenset[TopicPartition]:
    return frozenset((topic, p) for p in range(count))


def missing(acked: dict[TopicPartition, list[int]], consumed: dict[TopicPartition, set[int]]) -> dict:
    """Acknowledged offsets nobody consumed, per partition."""
    gaps = {tp: sorted(set(offsets) - consumed.get(tp, set())) for tp, offsets in acked.items()}
    return {tp: gap for tp, gap in gaps.items() if gap}


def merge(*produced: dict[TopicPartition, list[int]]) -> dict[TopicPartition, list[int]]:
    merged: dict[TopicPartition, list[int]] = {}
    for acked in produced:
        for tp, offsets in acked.items():
            merged.setdefault(tp, []).extend(offsets)
    return merged


def split_evenly(group_members, partitions: frozenset[TopicPartition]):
    """The members' holdings when they split ``partitions`` evenly between them
    by their callbacks, each partition once; None otherwise."""
    held = [m.assignment() for m in group_members]
    share, rest = divmod(len(partitions), len(held))
    if sorted(map(len, held)) != [share] * (len(held) - rest) + [share + 1] * rest:
        return None
    return held if frozenset().union(*held) == partitions else None


def assert_no_double_owner(changes) -> None:
    changes = list(changes)
    overlaps = double_owners(changes)
    assert overlaps == [], "partitions with two owners at once:\n" + "\n".join(map(str, overlaps)) + \
        "\nevery member's callbacks (ns, kind, partitions):\n" + "\n".join(
            f"  {c.member} {c.ts_ms} {c.kind} {sorted(p for _, p in c.partitions)}" for c in changes)


def zk_offsets(zk, group: str, topic: str) -> dict[TopicPartition, int]:
    path = f"/consumers/{group}/offsets/{topic}"
    if not zk.exists(path):
        return {}
    return {(topic, int(p)): int(zk.get(f"{path}/{p}")[0]) for p in zk.get_children(path)}


def wait_committed(zk, group: str, topic: str, ends: dict[TopicPartition, int], members) -> None:
    """Wait until ZooKeeper holds ``ends`` as the group's committed offsets;
    on time-out, say which partitions differ and who holds what now."""
    try:
        wait_for(lambda: zk_offsets(zk, group, topic) == ends, WAIT_S, "the last offsets committed")
    except AssertionError:
        stored = zk_offsets(zk, group, topic)
        differ = {tp: (stored.get(tp), end) for tp, end in ends.items() if stored.get(tp) != end}
        raise AssertionError(f"not within {WAIT_S:g} s: the last offsets committed; (stored, end) of the "
                             f"partitions that differ: {differ}; what each member did with them:\n"
                             f"{partition_story(members, set(differ))}") from None


def partition_story(members, partitions: set[TopicPartition]) -> str:
    """For a failure message: each member's events about ``partitions``
    (assigned, revoked, the last offset consumed, commits and failed
    commits), in the order it printed them, and what it holds now."""
    lines = []
    for member in members.all():
        label = getattr(member, "label", repr(member))
        told = []
        for event in member.events() if hasattr(member, "events") else []:
            data = event.data
            if event.name in ("partitions_assigned", "partitions_revoked"):
                mine = [f"{t}-{p}" for t, p in _event_partitions(data.get("partitions", [])) if (t, p) in partitions]
                if mine:
                    told.append(f"{event.name.split('_')[1]} {mine}")
            elif event.name == "records_consumed":
                for s in data.get("partitions", []):
                    if (s["topic"], int(s["partition"])) in partitions:
                        told.append(f"consumed {s['partition']}:{s['minOffset']}-{s['maxOffset']}")
            elif event.name == "offsets_committed":
                for o in data.get("offsets", []):
                    if (o["topic"], int(o["partition"])) in partitions:
                        told.append(f"commit {o['partition']}:{o['offset']} "
                                    f"{'ok' if data.get('success') else 'FAILED ' + str(data.get('error'))}")
        held = sorted(f"{t}-{p}" for t, p in member.assignment() if (t, p) in partitions)
        lines.append(f"  {label}: {'; '.join(told) or '-'}; holds now {held}")
    return "\n".join(lines)


def _event_partitions(raw) -> list[TopicPartition]:
    return [(x["topic"], int(x["partition"])) for x in raw]


def assert_commits_kept(commits, stored: dict[TopicPartition, int]) -> None:
    """Every acknowledged commit is still there (the stored offset is at
    least it) and, in the order they were acknowledged, commits of a
    partition never went back."""
    last: dict[TopicPartition, int] = {}
    for ts, offsets in commits:
        for tp, offset in offsets.items():
            assert offset >= last.get(tp, 0), f"{tp}: a commit of {offset} acknowledged after one of {last[tp]}"
            last[tp] = offset
    lost = {tp: (offset, stored.get(tp)) for tp, offset in last.items() if stored.get(tp, -1) < offset}
    assert not lost, f"acknowledged commits lost (acknowledged, stored): {lost}"


def group_types(bootstrap: str) -> dict[str, str]:
    """ListGroups v5 (KIP-848's group types) of every gateway, as Kafka's admin
    client asks every broker (each lists the groups its daemon owns): group ->
    ``classic`` / ``consumer``."""
    async def ask():
        listed: dict[str, str] = {}
        for host, port in parse_addresses(bootstrap):
            client = await open_client(host, port)
            try:
                answer = await client.call(ListGroupsRequest(version=5, states_filter=[], types_filter=[]))
            finally:
                await client.close()
            assert answer.error_code == 0, answer
            listed.update({g.group_id: g.group_type for g in answer.groups})
        return listed

    return asyncio.run(ask())


def describe_group(bootstrap: str, group: str):
    """ConsumerGroupDescribe of ``group``, asked of its owner."""
    async def ask():
        client = await coordinator_client(bootstrap, group)
        try:
            answer = await client.call(ConsumerGroupDescribeRequest(
                version=0, group_ids=[group], include_authorized_operations=False))
        finally:
            await client.close()
        (described,) = answer.groups
        assert described.error_code == 0, described
        return described

    return asyncio.run(ask())


# -- 1. six members of two client libraries split a topic ---------------------------------

@pytest.mark.parametrize("fleet", [{}, OFFLOADED], indirect=True, ids=["in-heartbeat", "offloaded"])
def test_librdkafka_and_java_members_split_a_topic(services, fleet, members, zk, unique_name):
    """Three librdkafka and three Kafka 4.4 Java members, group.protocol=consumer,
    one group on 12 partitions: two partitions each, every record consumed,
    every commit kept, no partition with two owners at once by their own callbacks.
    Also with the target computed off the event loop (a large group's way):
    the members then learn each new target at a later heartbeat."""
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 12)
    everything = partitions_of(topic, 12)
    bootstrap = gateways(fleet)
    before = rdkafka_members.produce(bootstrap, topic, 600, 12, tag="before")
    for i in (1, 2, 3):
        members.start_java(f"java-{i}", topic, group)
        members.start_rdkafka(f"rdkafka-{i}", topic, group)

    wait_for(lambda: split_evenly(members.all(), everything), WAIT_S,
             "each of the six members holding two partitions", interval_s=0.2)
    acked = merge(before, rdkafka_members.produce(bootstrap, topic, 600, 12, tag="after"))
    wait_for(lambda: not missing(acked, members.consumed()), WAIT_S, "every acknowledged record consumed",
             interval_s=0.2)
    ends = {tp: max(offsets) + 1 for tp, offsets in acked.items()}
    wait_committed(zk, group, topic, ends, members)
    assert [m.errors() for m in members.rdkafka.values()] == [[], [], []]
    members.close()
    assert_no_double_owner(members.changes())
    assert_commits_kept(members.commits(), zk_offsets(zk, group, topic))
    assert {describe_group(bootstrap, group).group_state} == {"Empty"}


# -- 2. a rolling bounce from classic to consumer and back ---------------------------------

@pytest.mark.parametrize("classic_assignor", ["org.apache.kafka.clients.consumer.RangeAssignor",
                                              "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"],
                         ids=["eager", "cooperative"])
def test_rolling_upgrade_and_downgrade_under_a_producer(services, fleet, members, java_host, zk, unique_name,
                                                        classic_assignor):
    """Four Java members of a classic group restarted one at a time with
    group.protocol=consumer (the first one's join converts the group: the
    online upgrade), then one at a time back to classic (the last consumer
    member's leave converts it back: the online downgrade), while Kafka's
    VerifiableProducer writes: the group's type flips at exactly those two
    steps, every acknowledged record is consumed, a record is consumed twice
    only by two successive owners, no acknowledged commit is lost and no
    partition ever has two owners."""
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 8)
    everything = partitions_of(topic, 8)
    bootstrap = gateways(fleet)
    types_seen: list[tuple[str, str]] = []

    def settle(step: str, expected_type: str) -> None:
        wait_for(lambda: split_evenly(members.current(), everything), WAIT_S,
                 f"{step}: the four members holding two partitions each", interval_s=0.2)
        wait_for(lambda: group_types(bootstrap).get(group) == expected_type, WAIT_S,
                 f"{step}: the group listed as a {expected_type} group", interval_s=0.2)
        listed = java_host.consumer_groups(bootstrap, "--list", "--type")  # kafka-consumer-groups 4.4
        assert {r["GROUP"]: r["TYPE"].strip() for r in jt._tables(listed.stdout, ("GROUP", "TYPE"))}.get(group) == \
            expected_type.capitalize(), listed
        types_seen.append((step, expected_type))

    def restart(number: int, old: str, new: str) -> None:
        members.stop_java(f"m{number}-{old}")
        classic = new.startswith("classic")
        members.start_java(f"m{number}-{new}", topic, group, new.rstrip("0123456789"),
                           assignor=classic_assignor if classic else None, extra=CLASSIC if classic else None)

    for number in (1, 2, 3, 4):
        members.start_java(f"m{number}-classic", topic, group, "classic", assignor=classic_assignor, extra=CLASSIC)
    settle("four classic members", "classic")
    with VerifiableProducerProcess(bootstrap, topic, throughput=200, repeating_keys=64) as producer:
        producer.wait_until(lambda: sum(map(len, producer.acked().values())) >= 200, "200 records acknowledged")
        for number in (1, 2, 3, 4):
            restart(number, "classic", "consumer")
            settle(f"m{number} upgraded", "consumer")
        for number in (1, 2, 3):
            restart(number, "consumer", "classic2")
            settle(f"m{number} downgraded", "consumer")  # m4 still speaks the consumer protocol
        members.stop_java("m4-consumer")  # the last consumer-protocol member leaves: the group goes classic
        wait_for(lambda: group_types(bootstrap).get(group) == "classic", WAIT_S,
                 "the group classic again once its last consumer-protocol member left", interval_s=0.2)
        members.start_java("m4-classic2", topic, group, "classic", assignor=classic_assignor, extra=CLASSIC)
        settle("m4 downgraded", "classic")
        # A member's last commit of a partition may be refused by the last rebalance (its generation just
        # ended), and VerifiableConsumer commits only after consuming (or on a revocation, which a
        # cooperative member keeping the partition never gets): a partition whose last record came
        # before that rebalance would keep its last commit refused. So every partition gets records
        # after it, consumed and committed in the final generation.
        before = {tp: max(offsets) for tp, offsets in producer.acked().items()}
        producer.wait_until(lambda: all(max(producer.acked()[tp]) > last for tp, last in before.items()),
                            "a record acknowledged on every partition after the last rebalance")
        producer.stop()
        assert producer.failures() == [] and producer.events()[-1]["name"] == "tool_data"
    acked = producer.acked()
    wait_for(lambda: not missing(acked, members.consumed()), WAIT_S, "every acknowledged record consumed",
             interval_s=0.2)
    ends = {tp: max(offsets) + 1 for tp, offsets in acked.items()}
    wait_committed(zk, group, topic, ends, members)
    members.close()

    assert [t for _, t in types_seen] == ["classic"] + ["consumer"] * 7 + ["classic"]
    assert_no_double_owner(members.changes())
    again = redelivery(members.all())
    assert again.within_ownership == {} and again.unowned == [], again
    print(f"{sum(map(len, acked.values()))} records acknowledged, {again.count()} consumed again by a later owner "
          f"across a rebalance: {dict(sorted((f'{t}-{p}', len(o)) for (t, p), o in again.across_rebalance.items()))}")
    assert_commits_kept(members.commits(), zk_offsets(zk, group, topic))
    assert java_host.errors() == []


# -- 3. the owner killed while a member joins ------------------------------------------------

REVOKE_DELAY_MS = 2000  # each member takes this long to give partitions up: the reconciliation spans heartbeats


@pytest.mark.parametrize("fleet", [{}, OFFLOADED], indirect=True, ids=["in-heartbeat", "offloaded"])
def test_kill_9_of_the_owner_mid_reconciliation(services, fleet, members, zk, unique_name):
    """Three Java members on 24 partitions, each taking two seconds to give
    partitions up; a fourth joins and the owner daemon is killed (-9) as the
    first member starts revoking: the other daemon takes the group over from
    ZooKeeper and the reconciliation completes there, six partitions each,
    the newcomer never given a partition before its old owner let it go;
    every record consumed, every acknowledged commit kept."""
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 24)
    everything = partitions_of(topic, 24)
    bootstrap = gateways(fleet)
    first = rdkafka_members.produce(bootstrap, topic, 1200, 24, tag="first")
    for label in ("a", "b", "c"):
        members.start_java(label, topic, group, revoke_delay_ms=REVOKE_DELAY_MS)
    old = [members.java[label] for label in ("a", "b", "c")]
    wait_for(lambda: split_evenly(old, everything), WAIT_S, "a, b and c holding eight partitions each",
             interval_s=0.2)
    wait_for(lambda: not missing(first, members.consumed()), WAIT_S, "the first records consumed", interval_s=0.2)
    owner_gateway = "%s:%d" % asyncio.run(find_coordinator(bootstrap, group))
    owner = next(d for d in fleet.daemons.values() if d.gateway_address == owner_gateway)
    survivor = next(d for d in fleet.daemons.values() if d is not owner)

    started_ns = time.monotonic_ns()
    d = members.start_java("d", topic, group, revoke_delay_ms=REVOKE_DELAY_MS)
    revoking = wait_for(lambda: [m.label for m in old if any(
        e.mono_ns > started_ns for e in m.events("revocation_started"))], WAIT_S,
        "a member starting to give partitions up to d", interval_s=0.005)
    owner.kill()
    killed_ns = time.monotonic_ns()
    held_by_d_at_kill = d.assignment()
    # What the dead owner stored is read before the new owner accepts a commit (it takes over once the
    # dead owner's session has ended, ended by the survivor's probe about a second after the kill or
    # expired by ZooKeeper; anything stored later is only higher): every commit a member had
    # acknowledged by then is there.
    stored_at_kill = zk_offsets(zk, group, topic)
    acked_at_kill: dict[TopicPartition, int] = {}
    for ts, offsets in members.commits():
        if ts < killed_ns:
            acked_at_kill.update({tp: max(o, acked_at_kill.get(tp, 0)) for tp, o in offsets.items()})
    lost = {tp: (o, stored_at_kill.get(tp)) for tp, o in acked_at_kill.items() if stored_at_kill.get(tp, -1) < o}
    assert acked_at_kill and not lost, f"commits acknowledged before the kill, not stored: {lost}"

    second = rdkafka_members.produce(survivor.gateway_address, topic, 1200, 24, tag="second")
    wait_for(lambda: split_evenly(members.current(), everything), WAIT_S,
             "the four members holding six partitions each, on the other daemon", interval_s=0.2)
    acked = merge(first, second)
    wait_for(lambda: not missing(acked, members.consumed()), WAIT_S, "every acknowledged record consumed",
             interval_s=0.2)
    ends = {tp: max(offsets) + 1 for tp, offsets in acked.items()}
    wait_committed(zk, group, topic, ends, members)

    assert "%s:%d" % asyncio.run(find_coordinator(survivor.gateway_address, group)) == survivor.gateway_address
    assert fleet.contenders(group)[0] == survivor.node_id
    assert len(held_by_d_at_kill) < 6, f"d held {sorted(held_by_d_at_kill)} when the owner died ({revoking} revoking)"
    assert any(c.ts_ms > killed_ns and c.partitions for c in d.changes() if c.kind == "assigned"), \
        "d got its partitions from the daemon that took over"
    members.close()
    assert_no_double_owner(members.changes())
    assert_commits_kept(members.commits(), zk_offsets(zk, group, topic))
    again = redelivery(members.all())
    assert again.within_ownership == {} and again.unowned == [], again
    print(f"owner {owner.node_id} killed while {revoking} revoked; {again.count()} records consumed again "
          f"by a later owner")


# -- 4. a member killed -----------------------------------------------------------------------

def test_kill_9_of_a_member(services, fleet, members, unique_name):
    """Three members on 6 partitions, one in a JVM of its own, killed (-9): no
    leave, so the group keeps it, partitions and all, until its session times
    out (group_consumer_session_timeout_ms); then the other two take its
    partitions, three each, and consume what comes, none of them before the
    killed member was dead."""
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 6)
    everything = partitions_of(topic, 6)
    bootstrap = gateways(fleet)
    with ConsumerHost("victim") as victim_host:
        survivors = [members.start_java(label, topic, group) for label in ("a", "b")]
        victim = members.start_java("v", topic, group, host=victim_host)
        wait_for(lambda: split_evenly([*survivors, victim], everything), WAIT_S, "two partitions each",
                 interval_s=0.2)
        first = rdkafka_members.produce(bootstrap, topic, 300, 6, tag="first")
        wait_for(lambda: not missing(first, members.consumed()), WAIT_S, "the first records consumed",
                 interval_s=0.2)
        held = victim.assignment()
        killed_ns = victim_host.kill()
    # (the victim's own label in its host is "v.<tag>", its client id "v")
    kept = {m.client_id: m for m in describe_group(bootstrap, group).members}
    assert {(t.topic_name, p) for t in kept["v"].assignment.topic_partitions for p in t.partitions} == held, \
        "right after the kill the group still holds the killed member with its partitions"
    wait_for(lambda: split_evenly(survivors, everything), WAIT_S, "a and b holding three partitions each",
             interval_s=0.2)
    moved_ns = min(c.ts_ms for m in survivors for c in m.changes()
                   if c.kind == "assigned" and c.partitions & held and c.ts_ms > killed_ns)
    assert "v" not in {m.client_id for m in describe_group(bootstrap, group).members}
    second = rdkafka_members.produce(bootstrap, topic, 300, 6, tag="second")
    wait_for(lambda: not missing(merge(first, second), members.consumed()), WAIT_S,
             "every acknowledged record consumed", interval_s=0.2)
    members.close()
    # The killed member held its partitions until it died.
    assert_no_double_owner([*members.changes(), AssignmentChange(victim.label, "revoked", killed_ns, held)])
    print(f"the killed member's partitions moved {(moved_ns - killed_ns) / 1e9:.1f} s after its death "
          f"(session time-out {SESSION_TIMEOUT_MS / 1000:g} s)")


# -- 5. Kafka 4.4's kafka-consumer-groups: zkcoord beside Kafka 4.4 ---------------------------

def _until_described_as_held(host: ConsumerHost, bootstrap: str, group: str, held: dict[str, frozenset]):
    """--describe --members --verbose once every member's current assignment
    is its target and what its callbacks hold (client id -> partitions)."""
    def settled():
        result = host.consumer_groups(bootstrap, "--describe", "--members", "--verbose", "--group", group)
        rows = parse_consumer_group_members(result.stdout) if result.returncode == 0 else []
        if {r.client_id: r.current_assignment for r in rows} != held:
            return None
        return result if all(r.current_epoch == r.target_epoch and r.current_assignment == r.target_assignment
                             for r in rows) else None

    return wait_for(settled, WAIT_S, f"{group} described as its members hold it", interval_s=0.3)


def until_coordinators_know(bootstrap: str, topic: str, partitions: int, probe_groups: list[str]) -> None:
    """Wait until the coordinators of ``probe_groups`` assign ``topic``'s
    partitions (a KIP-848 member of each probe group, on the wire, joins
    until it is given them, then leaves). A zkcoord daemon learns a topic
    from its next Metadata poll, Kafka at once: a member joining before
    would get a group epoch more (empty first, then assigned) and the
    transcripts of the two would differ by that alone."""
    async def probe(group: str) -> None:
        member = ConsumerMember(bootstrap, group, [topic])
        deadline = time.monotonic() + WAIT_S
        try:
            while len(member.partitions()) < partitions:
                assert time.monotonic() < deadline, f"{group}'s coordinator never assigned {topic}"
                await member.heartbeat()
                await asyncio.sleep(0.1)
            await member.leave()
        finally:
            await member.close()

    for group in probe_groups:
        asyncio.run(probe(group))


def tool_transcript(host: ConsumerHost, members: Members, bootstrap: str, topic: str, group: str,
                    probe_groups: list[str], first: str) -> dict:
    """What kafka-consumer-groups 4.4 prints about ``group`` through its life,
    on the cluster ``bootstrap`` leads to: one member (of the ``first``
    protocol: a classic one makes a classic group, which the second member's
    join upgrades), a second one (consumer protocol), both described and
    listed, offsets reset and the group deleted while it has members
    (refused); the second member leaves (a group with a classic member left
    goes back to classic: the online downgrade), then the first; offsets
    reset and the group deleted once empty. {step: (exit code, stdout,
    stderr)}."""
    acked = rdkafka_members.produce(bootstrap, topic, 40, 4)
    until_coordinators_know(bootstrap, topic, 4, probe_groups)
    ends = {tp: max(offsets) + 1 for tp, offsets in acked.items()}
    c1 = members.start_java("c1", topic, group, first, extra=CLASSIC if first == "classic" else None)
    wait_for(lambda: c1.assignment() == set(ends) and not missing(acked, c1.consumed_offsets()), WAIT_S,
             "c1 holding and consuming the four partitions", interval_s=0.2)
    wait_for(lambda: {tp: o for _, offsets in c1.commits() for tp, o in offsets.items()} == ends, WAIT_S,
             "c1's commits at the ends", interval_s=0.2)
    c2 = members.start_java("c2", topic, group)
    wait_for(lambda: split_evenly([c1, c2], frozenset(ends)), WAIT_S, "two partitions each", interval_s=0.2)
    run = lambda *args: host.consumer_groups(bootstrap, *args)  # noqa: E731
    steps = {"describe --members --verbose": _until_described_as_held(
        host, bootstrap, group, {"c1": c1.assignment(), "c2": c2.assignment()})}
    steps["describe"] = run("--describe", "--group", group)
    steps["describe --state"] = run("--describe", "--state", "--group", group)
    steps["list --type consumer"] = run("--list", "--type", "consumer")
    reset = ("--reset-offsets", "--to-earliest", "--topic", topic, "--execute", "--group", group)
    steps["reset-offsets (active)"] = run(*reset)
    steps["delete (active)"] = run("--delete", "--group", group)
    # c2 leaves first: with c1 a classic member the group goes back to classic (the online downgrade).
    members.stop_java("c2")
    wait_for(lambda: c1.assignment() == set(ends) and " Stable " in run(
        "--describe", "--state", "--group", group).stdout, WAIT_S, "c1 alone holding the four partitions", interval_s=0.3)
    steps["list --type (c2 gone)"] = run("--list", "--type")
    steps["describe --members --verbose (c2 gone)"] = run("--describe", "--members", "--verbose", "--group", group)
    steps["describe --state (c2 gone)"] = run("--describe", "--state", "--group", group)
    members.stop_java("c1")
    wait_for(lambda: "Empty" in run("--describe", "--state", "--group", group).stdout, WAIT_S,
             f"{group} empty", interval_s=0.3)
    steps["describe --state (empty)"] = run("--describe", "--state", "--group", group)
    steps["reset-offsets --dry-run"] = run(*reset[:-3], "--dry-run", "--group", group)
    steps["reset-offsets"] = run(*reset)
    steps["describe (reset)"] = run("--describe", "--group", group)
    steps["delete"] = run("--delete", "--group", group)
    steps["describe (deleted)"] = run("--describe", "--group", group)
    steps["list --type consumer (deleted)"] = run("--list", "--type", "consumer")
    ids = {r.member_id: r.client_id for r in parse_consumer_group_members(
        steps["describe --members --verbose"].stdout)}
    return {name: normalized(result, group, ids) for name, result in steps.items()}


def normalized(result, group: str, ids: dict[str, str]) -> tuple[int, list[str], list[str]]:
    """A tool run with what differs between two clusters, or between two runs,
    taken out: member ids (``ids``: member id -> client id, printed as
    ``<client id>``), the coordinator's address and id, other groups' rows of
    --list, column widths, the order of a table's rows (members come in the
    order of the coordinator's hash map), and stack traces (their first line
    kept)."""
    def lines(text: str) -> list[str]:
        kept: list[str] = []
        rows: list[str] = []  # of the table being read, sorted when it ends
        for line in [*text.splitlines(), ""]:
            if line.startswith(("\tat ", "\t... ")):
                continue
            line = re.sub(r"\b\d+\.\d+\.\d+\.\d+:\d+\s+\(\d+\)", "<coordinator>", line)
            fields = line.split()
            if fields and fields[0] not in (group, "GROUP") and text.startswith("GROUP"):
                continue  # --list: another group of that cluster
            if fields and fields[0] == group:
                rows.append(" ".join(fields))
                continue
            kept += sorted(rows)
            rows = []
            kept.append(" ".join(fields))
        return kept[:-1]

    stdout, stderr = result.stdout, result.stderr
    for member_id, client_id in ids.items():
        stdout, stderr = stdout.replace(member_id, f"<{client_id}>"), stderr.replace(member_id, f"<{client_id}>")
    return result.returncode, lines(stdout), lines(stderr)


@pytest.mark.parametrize("first", ["consumer", "classic"], ids=["consumer-group", "upgraded-group"])
def test_kafka_consumer_groups_4_4_prints_what_it_prints_for_kafka(services, fleet, members, java_host, kafka4,
                                                                  unique_name, first):
    """The same life of one consumer group, served by zkcoord through its
    gateways and by Kafka 4.4 itself: every command of Kafka 4.4's
    kafka-consumer-groups prints the same, but for member ids and the
    coordinator's address. The group is a consumer group from its first
    member, or a classic group upgraded by its second member's join (then
    one classic member inside a consumer group: the UPGRADED column) and
    downgraded when that member leaves."""
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 4)
    create_topic(kafka4, topic, 4)
    on_each_daemon = [placed_name(unique_name, "probe", (sorted(fleet.daemons), node)) for node in fleet.daemons]
    ours = tool_transcript(java_host, members, gateways(fleet), topic, group, on_each_daemon, first)
    theirs = tool_transcript(java_host, Members(java_host, kafka4, members.tag + "k"), kafka4, topic, group,
                             [unique_name("probe")], first)
    # The one difference: a group that does not exist. Kafka 4.4's admin client asks ConsumerGroupDescribe,
    # then DescribeGroups; Kafka 4.4 answers DescribeGroups v6 (KIP-1043) with GROUP_ID_NOT_FOUND, zkcoord
    # serves DescribeGroups up to v5 (Kafka 3.9's), where such a group is Dead, which the tool prints so.
    deleted = "describe (deleted)"
    assert ours.pop(deleted) == (0, ["", f"Error: Consumer group '{group}' does not exist."], [])
    not_found = f"org.apache.kafka.common.errors.GroupIdNotFoundException: Group {group} not found."
    assert theirs.pop(deleted)[1] == ["", f"Error: Executing consumer group command failed due to {not_found}"]
    differ = [f"{step}:\n  zkcoord:   {ours[step]}\n  Kafka 4.4: {theirs[step]}"
              for step in theirs if ours[step] != theirs[step]]
    assert not differ, "kafka-consumer-groups 4.4 printed differently:\n" + "\n".join(differ)
    assert list(ours) == list(theirs)
