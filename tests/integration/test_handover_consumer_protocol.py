"""A live handover of a KIP-848 consumer group: real Kafka 1.1.1 legacy
consumers and a Kafka 4.4 Java consumer with ``group.protocol=consumer``
(VerifiableConsumer in a :class:`~tests.support.consumer_host.ConsumerHost`)
through zkcoord's gateways, in one group, while a producer writes.

The scene is :mod:`tests.integration.test_handover_daemon`'s (its
``make_scene`` and helpers), its daemons giving consumer-group members a
heartbeat interval of half a second and no assignment interval. The legacy
members are stopped one by one; at every step the owner znodes are the
legacy range answer (the zkcoord member counted as a consumer), the Java
member holds exactly its range by its own callbacks, and when the last
legacy member is gone it holds every partition, with no legacy registration
and no owner znode left. From the records each member logged: every record
produced was consumed, and none twice (the legacy members auto-commit and
commit when they stop, the Java member commits after each batch, nobody but
a daemon is killed), and the Java member never lost a partition.
"""

from __future__ import annotations

import contextlib
import functools

import pytest

import tests.integration.test_handover_daemon as daemon_test
from tests.integration.test_handover_daemon import (
    PARTITIONS, WAIT_S, Producer, legacy_records, make_scene, owners, producer_stop_quietly, registered,
)
from tests.support.consumer_host import ConsumerHost, member_properties, redelivery
from tests.support.daemons import wait_for
from zkcoord.core.handover.registration import is_zkcoord_consumer_id
from zkcoord.errors import MissingToolError

pytestmark = pytest.mark.integration

# The Java member hears of a new target within half a second; the target is computed at every change.
CONSUMER_GROUP_OPTIONS = {"group_consumer_heartbeat_interval_ms": 500, "group_consumer_assignment_interval_ms": 0}


@pytest.fixture
def kip848_scene(services, zk_root, admin, unique_name, tmp_path, monkeypatch):
    """``make(daemons)``: test_handover_daemon's scene with that many daemons,
    started with CONSUMER_GROUP_OPTIONS, and a ConsumerHost JVM (closed first)."""
    from zkcoord.local import jars

    try:
        jars.kafka4_distribution()
    except MissingToolError as exc:
        pytest.skip(f"Kafka 4.x's clients need Java 17+ and the Kafka 4.x jars: {exc}")
    monkeypatch.setattr(daemon_test, "gateway_fleet", functools.partial(daemon_test.gateway_fleet,
                                                                        **CONSUMER_GROUP_OPTIONS))
    with contextlib.ExitStack() as stack:
        def make(daemons: int) -> tuple:
            scene = stack.enter_context(make_scene(services, zk_root, admin, unique_name, tmp_path, daemons))
            return (*scene, stack.enter_context(ConsumerHost("kip848-handover")))

        yield make


def zkcoord_thread(zk, group: str) -> str | None:
    ours = [cid for cid in registered(zk, group) if is_zkcoord_consumer_id(cid)]
    return f"{ours[0]}-0" if len(ours) == 1 else None


def range_answer(*streams: tuple[str, int]) -> dict[int, str]:
    """partition -> thread, the legacy range answer for ``(thread, partitions)``, in order."""
    threads = [thread for thread, count in streams for _ in range(count)]
    return dict(enumerate(threads))


def check_consumed_once(legacy, member, producer: Producer, changes) -> None:
    """Every record produced consumed, none by two members or twice by the
    Java member, which never lost a partition before it stopped."""
    again = redelivery([member])
    assert (again.across_rebalance, again.within_ownership, again.unowned) == ({}, {}, [])
    assert [c.kind for c in changes] == ["assigned"] * len(changes), "the Java member lost a partition"
    logged = [(e.data["partition"], e.data["offset"], e.member) for process in legacy.values()
              for e in process.events() if e.event == "consumed"]
    ours = [(p, o, member.label) for (_, p), offsets in member.consumed_offsets().items() for o in offsets]
    seen: dict[tuple[int, int], list[str]] = {}
    for p, o, who in logged + ours:
        seen.setdefault((p, o), []).append(who)
    twice = {tp: who for tp, who in seen.items() if len(who) > 1}
    assert not twice, f"{len(twice)} records went to two members, e.g. {sorted(twice.items())[:10]}"
    expected = {(i % PARTITIONS, i // PARTITIONS) for i in range(producer.sent)}
    missing = expected - {(p, o) for p, o, _ in logged + ours}
    assert not missing, f"{len(missing)} of {len(expected)} records consumed by nobody, e.g. {sorted(missing)[:20]}"
    assert [e for process in legacy.values() for e in process.events() if e.event == "error"] == []
    assert member.failed_commits() == []


def replace_legacy_members(zk, group: str, topic: str, legacy, member, producer: Producer, ours: str) -> list:
    """Stop a1, then b1: the member takes its range with b1, then every
    partition; every record produced consumed. The member's assignment
    changes until then."""
    def holds(*partitions: int) -> bool:
        return member.assignment() == {(topic, p) for p in partitions}

    legacy["a"].stop()
    wait_for(lambda: owners(zk, group, topic) == range_answer((f"{group}_b1-0", 3), (ours, 3))
             and holds(3, 4, 5), WAIT_S, "b1 and the zkcoord member split the topic")
    legacy["b"].stop()
    wait_for(lambda: registered(zk, group) == [] and owners(zk, group, topic) == {} and holds(*range(PARTITIONS)),
             WAIT_S, "the Java member holds every partition; no legacy registration, no owner znode left")
    producer.stop()
    expected = {(i % PARTITIONS, i // PARTITIONS) for i in range(producer.sent)}
    wait_for(lambda: expected <= {(p, o) for (_, p), offsets in member.consumed_offsets().items() for o in offsets}
             | legacy_records(legacy.values()), WAIT_S, "every record produced was consumed")
    return member.changes()


def three_way_split(zk, group: str, topic: str, member) -> str:
    """Wait until a1, b1 and the zkcoord member hold the range answer (the
    member's id sorts last) and the member holds 4 and 5; its thread id."""
    wait_for(lambda: zkcoord_thread(zk, group) and owners(zk, group, topic) == range_answer(
        (f"{group}_a1-0", 2), (f"{group}_b1-0", 2), (zkcoord_thread(zk, group), 2))
        and member.assignment() == {(topic, 4), (topic, 5)}, WAIT_S,
        "the owner znodes are the range answer of a1, b1 and the zkcoord member, which holds 4 and 5")
    return zkcoord_thread(zk, group)


def start(scene, services, zk, bootstrap_of) -> tuple:
    topic, group, start_legacy, fleet, host = scene
    producer = Producer(services.bootstrap_servers, topic).start()
    legacy = {prefix: start_legacy(prefix) for prefix in ("a", "b")}
    wait_for(lambda: sorted(owners(zk, group, topic).values()) == sorted(
        [f"{group}_a1-0"] * 3 + [f"{group}_b1-0"] * 3), WAIT_S, "the legacy members own every partition")
    member = host.start_member("z", topic, member_properties(bootstrap_of(fleet), group, "consumer", label="z",
                                                             extra={"auto.offset.reset": "earliest"}))
    return topic, group, fleet, host, producer, legacy, member


def test_legacy_members_replaced_one_by_one_by_a_kip848_consumer(services, zk_root, kip848_scene):
    topic, group, fleet, host, producer, legacy, member = start(
        kip848_scene(1), services, zk_root, lambda fleet: next(iter(fleet.daemons.values())).gateway_address)
    try:
        ours = three_way_split(zk_root, group, topic, member)
        changes = replace_legacy_members(zk_root, group, topic, legacy, member, producer, ours)
        host.stop_member("z")
    finally:
        producer_stop_quietly(producer)
    check_consumed_once(legacy, member, producer, changes)
    assert host.errors() == []
    log = next(iter(fleet.daemons.values())).log(400)
    assert "handover over" in log and "classic groups only" not in log


def test_kill_9_of_the_owner_daemon_mid_handover(services, zk_root, kip848_scene):
    """Two daemons, the Java member bootstrapped from both gateways. kill -9
    of the group's owner mid-handover: the member's registration and owner
    znodes are persistent and listed in the consumer group's record, so the
    legacy members never see them go; the other daemon loads the group with
    each member's assignment as its share and carries the handover on (the
    member keeps its partitions and goes on consuming), and the legacy
    members are then replaced as before."""
    topic, group, fleet, host, producer, legacy, member = start(
        kip848_scene(2), services, zk_root, lambda fleet: ",".join(d.gateway_address for d in fleet.daemons.values()))
    try:
        ours = three_way_split(zk_root, group, topic, member)
        split = owners(zk_root, group, topic)
        owner = fleet.daemons[fleet.contenders(group)[0]]
        survivor = next(d for d in fleet.daemons.values() if d is not owner)
        owner.kill()
        consumed_at_kill = {tp: max(offsets) for tp, offsets in member.consumed_offsets().items()}

        def carried_on() -> bool:
            assert owners(zk_root, group, topic) == split, "the owner znodes changed after the kill"
            consumed = member.consumed_offsets()
            return (fleet.contenders(group)[:1] == [survivor.node_id]
                    and all(max(consumed[tp]) > offset for tp, offset in consumed_at_kill.items()))

        wait_for(carried_on, WAIT_S, "the survivor owns the group and the member goes on consuming 4 and 5")
        changes = replace_legacy_members(zk_root, group, topic, legacy, member, producer, ours)
        host.stop_member("z")
    finally:
        producer_stop_quietly(producer)
    check_consumed_once(legacy, member, producer, changes)
    assert "carrying on its handover" in survivor.log(400) and "handover over" in survivor.log(400)
