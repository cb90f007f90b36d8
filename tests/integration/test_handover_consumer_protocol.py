"""A live handover of a KIP-848 consumer group: real Kafka 1.1.1 legacy
consumers and a Kafka 4.4 Java consumer with ``group.protocol=consumer``
(VerifiableConsumer in a :class:`~tests.support.consumer_host.ConsumerHost`)
through a zkcoord gateway, in one group, while a producer writes.

The scene is :mod:`tests.integration.test_handover_daemon`'s (its fixture
and helpers), its daemon given short consumer-group heartbeats and no
assignment interval. The legacy members are stopped one by one; at every
step the owner znodes are the legacy range answer (the zkcoord member counted
as a consumer), the Java member holds exactly its range by its own
callbacks, and when the last legacy member is gone it holds every
partition, with no legacy registration and no owner znode left. From the
records each member logged: every record produced was consumed, and none
twice (the legacy members auto-commit and commit when they stop, the Java
member commits after each batch, nobody is killed).
"""

from __future__ import annotations

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
CONSUMER_GROUP_OPTIONS = {"group_consumer_heartbeat_interval_ms": 500, "group_consumer_session_timeout_ms": 6000,
                          "group_consumer_assignment_interval_ms": 0}


@pytest.fixture
def kip848_scene(services, zk_root, admin, unique_name, tmp_path, monkeypatch):
    """test_handover_daemon's scene (one daemon), its fleet started with
    CONSUMER_GROUP_OPTIONS; and a ConsumerHost JVM, closed first."""
    from zkcoord.local import jars

    try:
        jars.kafka4_distribution()
    except MissingToolError as exc:
        pytest.skip(f"Kafka 4.x's clients need Java 17+ and the Kafka 4.x jars: {exc}")
    monkeypatch.setattr(daemon_test, "gateway_fleet", functools.partial(daemon_test.gateway_fleet,
                                                                        **CONSUMER_GROUP_OPTIONS))
    with make_scene(services, zk_root, admin, unique_name, tmp_path, 1) as (topic, group, start_legacy, fleet), \
            ConsumerHost("kip848-handover") as host:
        yield topic, group, start_legacy, fleet, host


def test_legacy_members_replaced_one_by_one_by_a_kip848_consumer(services, zk_root, kip848_scene):
    topic, group, start_legacy, fleet, host = kip848_scene
    producer = Producer(services.bootstrap_servers, topic).start()
    legacy = {prefix: start_legacy(prefix) for prefix in ("a", "b")}
    wait_for(lambda: sorted(owners(zk_root, group, topic).values()) == sorted(
        [f"{group}_a1-0"] * 3 + [f"{group}_b1-0"] * 3), WAIT_S, "the legacy members own every partition")

    gateway = next(iter(fleet.daemons.values())).gateway_address
    member = host.start_member("z", topic, member_properties(gateway, group, "consumer", label="z",
                                                             extra={"auto.offset.reset": "earliest"}))
    try:
        def zkcoord_thread() -> str | None:
            ours = [cid for cid in registered(zk_root, group) if is_zkcoord_consumer_id(cid)]
            return f"{ours[0]}-0" if len(ours) == 1 else None

        def holds(*partitions: int) -> bool:
            return member.assignment() == {(topic, p) for p in partitions}

        # Three consumers in the legacy range order: a1, b1, then zkcoord's (its id sorts last).
        wait_for(lambda: zkcoord_thread() and owners(zk_root, group, topic) == dict(enumerate(
            [f"{group}_a1-0"] * 2 + [f"{group}_b1-0"] * 2 + [zkcoord_thread()] * 2)) and holds(4, 5), WAIT_S,
            "the owner znodes are the range answer of a1, b1 and the zkcoord member, which holds 4 and 5")

        legacy["a"].stop()
        wait_for(lambda: owners(zk_root, group, topic) == dict(enumerate(
            [f"{group}_b1-0"] * 3 + [zkcoord_thread()] * 3)) and holds(3, 4, 5), WAIT_S,
            "b1 and the zkcoord member split the topic")
        legacy["b"].stop()
        wait_for(lambda: registered(zk_root, group) == [] and owners(zk_root, group, topic) == {}
                 and holds(*range(PARTITIONS)), WAIT_S,
                 "the Java member holds every partition; no legacy registration, no owner znode left")
        producer.stop()
        expected = {(i % PARTITIONS, i // PARTITIONS) for i in range(producer.sent)}

        def consumed_by_member() -> set[tuple[int, int]]:
            return {(p, o) for (_, p), offsets in member.consumed_offsets().items() for o in offsets}

        def missing() -> set[tuple[int, int]]:
            return expected - consumed_by_member() - legacy_records(legacy.values())

        try:
            wait_for(lambda: not missing(), WAIT_S, "every record produced was consumed")
        except AssertionError:
            gone = sorted(missing())
            raise AssertionError(f"{len(gone)} of {len(expected)} records consumed by nobody, e.g. {gone[:20]}")
        changes = member.changes()
        host.stop_member("z")
    finally:
        producer_stop_quietly(producer)

    # Each partition was given to the Java member once and never taken back: no record twice on its side.
    again = redelivery([member])
    assert (again.across_rebalance, again.within_ownership, again.unowned) == ({}, {}, [])
    logged = [(e.data["partition"], e.data["offset"], e.member) for process in legacy.values()
              for e in process.events() if e.event == "consumed"]
    ours = [(p, o, "z") for (_, p), offsets in member.consumed_offsets().items() for o in offsets]
    seen: dict[tuple[int, int], list[str]] = {}
    for p, o, who in logged + ours:
        seen.setdefault((p, o), []).append(who)
    twice = {tp: who for tp, who in seen.items() if len(who) > 1}
    assert not twice, f"{len(twice)} records went to two members, e.g. {sorted(twice.items())[:10]}"
    assert [c.kind for c in changes] == ["assigned"] * len(changes)  # nothing taken back before it stopped
    assert [e for process in legacy.values() for e in process.events() if e.event == "error"] == []
    assert host.errors() == [] and member.failed_commits() == []
    log = next(iter(fleet.daemons.values())).log(400)
    assert "handover over" in log and "no handover (classic groups only)" not in log
