"""The thin consumer as a group: three members share a six-partition topic
through two zkcoord daemons; members join and leave; nothing is lost and no
partition has two owners in one generation."""

from __future__ import annotations

import time

import pytest

from tests.integration.test_client_support import (
    ThreadDaemons,
    assert_one_owner_per_generation,
    assignments_by_generation,
    commits_by_generation,
    config,
    create_topic,
    eventually,
    poll_all,
    produce,
    read_group,
    read_group_state,
    stable_split,
    start_member,
)
from zkcoord.client import CommitFailedError, TopicPartition

pytestmark = pytest.mark.integration


def test_three_members_share_six_partitions(services, zk_hosts, zk, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 6)
    partitions = frozenset(TopicPartition(topic, p) for p in range(6))
    produced = produce(services.bootstrap_servers, topic, range(6), 20)
    with ThreadDaemons(zk_hosts, 2) as daemons:
        cfg = config(daemons.addresses, services.bootstrap_servers, group)
        members = [start_member(f"m{i}", cfg, [topic]) for i in range(3)]
        try:
            step = poll_all(members)
            eventually(lambda: stable_split(members, partitions) and
                       sum(len(m.records) for m in members) >= len(produced), "3 members consumed everything",
                       step=step)
            consumed = [k for m in members for k in m.keys()]
            assert sorted(consumed) == sorted(produced)  # all, and each once

            final = {m.consumer.membership().generation_id for m in members}.pop()
            by_generation = assignments_by_generation(members)
            for generation, owned in by_generation.items():
                seen = [tp for parts in owned.values() for tp in parts]
                assert len(seen) == len(set(seen)), f"generation {generation}: a partition has two owners"
            assert set(by_generation[final]) == {m.consumer.membership().member_id for m in members}
            assert frozenset().union(*by_generation[final].values()) == partitions
            for generation, committed in commits_by_generation(members).items():
                assert all(len(who) == 1 for who in committed.values()), generation

            state, generation, member_ids = read_group_state(zk, group)
            assert (state, generation) == ("Stable", final)
            assert member_ids == sorted(m.consumer.membership().member_id for m in members)
            ends = members[0].consumer.end_offsets(partitions)
            assert {tp: o.offset for tp, o in members[0].consumer.committed(partitions).items()} == ends
        finally:
            for m in members:
                m.consumer.close()
        assert read_group_state(zk, group)[0] == "Empty"


def test_members_join_and_leave_nothing_left_unconsumed(services, zk_hosts, zk, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 6)
    partitions = frozenset(TopicPartition(topic, p) for p in range(6))
    with ThreadDaemons(zk_hosts, 2) as daemons:
        cfg = config(daemons.addresses, bootstrap, group)
        members = [start_member(f"m{i}", cfg, [topic]) for i in range(2)]
        everyone = list(members)
        try:
            produced = produce(bootstrap, topic, range(6), 10, tag="a")
            consumed = lambda: {k for m in everyone for k in m.keys()}  # noqa: E731
            eventually(lambda: stable_split(members, partitions) and produced <= consumed(),
                       "2 members consumed batch a", step=poll_all(members))

            members.append(start_member("m2", cfg, [topic]))
            everyone.append(members[-1])
            produced |= produce(bootstrap, topic, range(6), 10, tag="b")
            eventually(lambda: stable_split(members, partitions) and produced <= consumed()
                       and all(m.consumer.assignment() for m in members),
                       "3 members after a join consumed batch b", step=poll_all(members))

            leaving = members.pop(0)
            leaving.consumer.close()  # on_revoked commits, then LeaveGroup
            produced |= produce(bootstrap, topic, range(6), 10, tag="c")
            eventually(lambda: stable_split(members, partitions) and produced <= consumed(),
                       "2 members after a leave consumed batch c", step=poll_all(members))

            all_keys = [k for m in everyone for k in m.keys()]
            assert sorted(all_keys) == sorted(produced)  # nothing lost, nothing twice
            assert_one_owner_per_generation(everyone)
            assert not [f for m in everyone for f in m.failed_commits]
            committed = {tp: o.offset for tp, o in members[0].consumer.committed(partitions).items()}
            assert committed == members[0].consumer.end_offsets(partitions) == {tp: 30 for tp in partitions}
            assert read_group_state(zk, group)[2] == sorted(m.consumer.membership().member_id for m in members)
        finally:
            for m in members:
                m.consumer.close()


@pytest.mark.parametrize("strategy", ["roundrobin", "sticky", "cooperative-sticky"])
def test_assignment_strategies(services, zk_hosts, unique_name, strategy):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 6)
    partitions = frozenset(TopicPartition(topic, p) for p in range(6))
    produced = produce(bootstrap, topic, range(6), 5)
    with ThreadDaemons(zk_hosts, 1) as daemons:
        cfg = config(daemons.addresses, bootstrap, group, assignment_strategy=strategy)
        members = [start_member("m0", cfg, [topic]), start_member("m1", cfg, [topic])]
        try:
            eventually(lambda: stable_split(members, partitions), "2 members split 6 partitions",
                       step=poll_all(members))
            members.append(start_member("m2", cfg, [topic]))
            eventually(lambda: stable_split(members, partitions) and all(len(m.consumer.assignment()) == 2
                                                                        for m in members),
                       "3 members own 2 partitions each", step=poll_all(members))
            assert {m.consumer.membership().state for m in members} == {"stable"}
            eventually(lambda: {k for m in members for k in m.keys()} >= produced, "all consumed",
                       step=poll_all(members))
            assert sorted(k for m in members for k in m.keys()) == sorted(produced)
        finally:
            for m in members:
                m.consumer.close()


def test_consumer_that_stops_polling_loses_its_partitions(services, zk_hosts, zk, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 6)
    partitions = frozenset(TopicPartition(topic, p) for p in range(6))
    with ThreadDaemons(zk_hosts, 2) as daemons:
        # Session long, poll interval short: only the poll interval can remove it.
        cfg = config(daemons.addresses, bootstrap, group, session_timeout_ms=30_000, max_poll_interval_ms=3_000,
                     rebalance_timeout_ms=30_000)
        active, stalled = start_member("active", cfg, [topic]), start_member("stalled", cfg, [topic])
        try:
            eventually(lambda: stable_split([active, stalled], partitions) and stalled.consumer.assignment(),
                       "both members own partitions", step=poll_all([active, stalled]))
            stalled_had = stalled.consumer.assignment()
            stalled_member = stalled.consumer.membership()
            produced = produce(bootstrap, topic, range(6), 5)

            # Only `active` polls: `stalled`'s heartbeat thread keeps its session
            # alive but leaves the group once max_poll_interval_ms has passed.
            eventually(lambda: active.consumer.assignment() == partitions
                       and active.consumer.membership().state == "stable"
                       and produced <= set(active.keys()),
                       "the active member owns and consumed all 6 partitions", step=poll_all([active]))
            state, generation, member_ids = read_group_state(zk, group)
            assert (state, member_ids) == ("Stable", [active.consumer.membership().member_id])
            assert generation > stalled_member.generation_id

            # The stalled member may not commit for the generation it lost.
            with pytest.raises(CommitFailedError):
                stalled.consumer.commit({tp: 0 for tp in stalled_had})
            committed = {tp: o.offset for tp, o in active.consumer.committed(partitions).items()}
            assert committed == {tp: 5 for tp in partitions}

            # When it polls again it learns it lost them, then rejoins.
            eventually(lambda: stable_split([active, stalled], partitions) and stalled.consumer.assignment(),
                       "the stalled member rejoined", step=poll_all([active, stalled]))
            assert [parts for _, _, parts in stalled.lost] == [stalled_had]
            assert_one_owner_per_generation([active, stalled])
        finally:
            active.consumer.close()
            stalled.consumer.close()


def test_static_member_restart_keeps_its_partitions(services, zk_hosts, zk, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 4)
    partitions = frozenset(TopicPartition(topic, p) for p in range(4))
    with ThreadDaemons(zk_hosts, 1) as daemons:
        base = dict(session_timeout_ms=30_000)
        a = start_member("a", config(daemons.addresses, bootstrap, group, group_instance_id="worker-a", **base),
                         [topic])
        b = start_member("b", config(daemons.addresses, bootstrap, group, group_instance_id="worker-b", **base),
                         [topic])
        try:
            eventually(lambda: stable_split([a, b], partitions) and b.consumer.assignment(), "a and b split",
                       step=poll_all([a, b]))
            b_had, generation = b.consumer.assignment(), b.consumer.membership().generation_id
            a_had, a_revocations = a.consumer.assignment(), len(a.revoked)
            b.consumer.close()  # a static member does not leave: no rebalance
            state, stored_generation, _ = read_group_state(zk, group)
            assert (state, stored_generation) == ("Stable", generation)

            b = start_member("b2", config(daemons.addresses, bootstrap, group, group_instance_id="worker-b", **base),
                             [topic])
            eventually(lambda: b.consumer.membership().state == "stable" and b.consumer.assignment(),
                       "b is back", step=poll_all([a, b]))
            assert b.consumer.assignment() == b_had
            assert b.consumer.membership().generation_id == generation
            assert a.revoked[a_revocations:] == []  # a never noticed
            assert (a.consumer.assignment(), a.consumer.membership().generation_id) == (a_had, generation)
            assert read_group_state(zk, group)[:2] == ("Stable", generation)
        finally:
            a.consumer.close()
            b.consumer.close()


def test_settings_reach_the_coordinator_and_slow_processing_keeps_the_session(services, zk_hosts, zk, unique_name):
    """Heartbeats run in the background: a member that processes for longer
    than its session timeout (but less than max_poll_interval_ms) stays."""
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 2)
    partitions = frozenset(TopicPartition(topic, p) for p in range(2))
    with ThreadDaemons(zk_hosts, 1) as daemons:
        cfg = config(daemons.addresses, bootstrap, group, session_timeout_ms=6_000, heartbeat_interval_ms=1_000,
                     max_poll_interval_ms=60_000, rebalance_timeout_ms=20_000, group_instance_id="worker-7")
        member = start_member("client-7", cfg, [topic])
        try:
            eventually(lambda: stable_split([member], partitions), "joined", step=poll_all([member]))
            stored = read_group(zk, group).members[member.consumer.membership().member_id]
            assert (stored.client_id, stored.group_instance_id, stored.session_timeout_ms,
                    stored.rebalance_timeout_ms) == ("client-7", "worker-7", 6_000, 20_000)
            generation = member.consumer.membership().generation_id

            time.sleep(6_000 * 1.5 / 1000)  # "processing": no poll for 1.5 session timeouts
            member.poll(100)
            assert member.consumer.membership() == member.consumer.membership().__class__(
                group, generation, stored.member_id, "worker-7", "stable")
            assert member.lost == [] and member.consumer.assignment() == partitions
            assert read_group_state(zk, group) == ("Stable", generation, [stored.member_id])
        finally:
            member.consumer.close()
