"""Coordinator discovery and fail-over: discovery through any listed daemon,
and kill -9 of the daemon that owns the group while members keep consuming."""

from __future__ import annotations

import pytest

from tests.integration.test_client_support import (
    ThreadDaemons,
    assert_one_owner_per_generation,
    config,
    create_topic,
    eventually,
    free_port,
    poll_all,
    produce,
    read_group_state,
    stable_split,
    start_member,
)
from tests.support.daemons import DaemonFleet
from zkcoord.client import TopicPartition

pytestmark = pytest.mark.integration


def test_discovery_through_any_listed_daemon(services, zk_hosts, unique_name):
    """The first listed address answers nothing: the lookup moves on."""
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 2)
    produced = produce(services.bootstrap_servers, topic, range(2), 5)
    with ThreadDaemons(zk_hosts, 1) as daemons:
        coordinators = f"127.0.0.1:{free_port()},{daemons.addresses}"
        member = start_member("m", config(coordinators, services.bootstrap_servers, group), [topic])
        try:
            eventually(lambda: produced <= set(member.keys()), "consumed through the second address",
                       step=poll_all([member]))
            assert member.consumer.coordinator_node_id() == daemons.running[0].node_id
        finally:
            member.consumer.close()


def test_kill_9_of_the_owning_daemon(services, zk_hosts, zk, unique_name, tmp_path):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 6)
    partitions = frozenset(TopicPartition(topic, p) for p in range(6))
    with DaemonFleet(zk_hosts, zk, tmp_path, options=dict(zk_session_timeout_ms=4000,
                                                          group_initial_rebalance_delay_ms=0)) as fleet:
        addresses = ",".join(f"{d.host}:{d.port}" for d in fleet.start_many(1, 2))
        cfg = config(addresses, bootstrap, group, session_timeout_ms=20_000, request_timeout_ms=15_000)
        members = [start_member(f"m{i}", cfg, [topic]) for i in range(2)]
        try:
            produced = produce(bootstrap, topic, range(6), 10, tag="before")
            consumed = lambda: {k for m in members for k in m.keys()}  # noqa: E731
            eventually(lambda: stable_split(members, partitions) and produced <= consumed(),
                       "both members consumed the first batch", step=poll_all(members))
            owner = members[0].consumer.coordinator_node_id()
            assert owner in (1, 2) and members[1].consumer.coordinator_node_id() == owner
            survivor = 3 - owner

            fleet.daemons[owner].kill()  # kill -9: no graceful hand-over
            produced |= produce(bootstrap, topic, range(6), 10, tag="after")
            eventually(lambda: produced <= consumed()
                       and all(m.consumer.coordinator_node_id() == survivor for m in members)
                       and stable_split(members, partitions),
                       f"members moved to daemon {survivor} and consumed the second batch",
                       step=poll_all(members), timeout_s=120)
            # Commits go through the survivor: the last positions are stored.
            for m in members:
                m.commit_consumed()
            committed = {tp: o.offset for tp, o in members[0].consumer.committed(partitions).items()}
            assert committed == {tp: 20 for tp in partitions}
            state, _, member_ids = read_group_state(zk, group)
            assert (state, member_ids) == ("Stable", sorted(m.consumer.membership().member_id for m in members))
            assert_one_owner_per_generation(members)
        finally:
            for m in members:
                m.consumer.close()


def test_graceful_stop_of_the_owning_daemon(services, zk_hosts, zk, unique_name):
    """The owner releases the group on SIGTERM-like stop: members get
    NOT_COORDINATOR or a closed connection and find the other daemon."""
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 4)
    partitions = frozenset(TopicPartition(topic, p) for p in range(4))
    with ThreadDaemons(zk_hosts, 2) as daemons:
        members = [start_member(f"m{i}", config(daemons.addresses, bootstrap, group), [topic]) for i in range(2)]
        try:
            produced = produce(bootstrap, topic, range(4), 5, tag="before")
            consumed = lambda: {k for m in members for k in m.keys()}  # noqa: E731
            eventually(lambda: stable_split(members, partitions) and produced <= consumed(), "first batch",
                       step=poll_all(members))
            owner = members[0].consumer.coordinator_node_id()
            daemons.stop(owner)
            produced |= produce(bootstrap, topic, range(4), 5, tag="after")
            eventually(lambda: produced <= consumed() and stable_split(members, partitions)
                       and {m.consumer.coordinator_node_id() for m in members} == {3 - owner},
                       "members moved to the other daemon and consumed the second batch", step=poll_all(members))
            for m in members:
                m.commit_consumed()
            assert {tp: o.offset for tp, o in members[0].consumer.committed(partitions).items()} == \
                {tp: 10 for tp in partitions}
            assert_one_owner_per_generation(members)
        finally:
            for m in members:
                m.consumer.close()
