"""The thin consumer as a group: three members share a six-partition topic
through two zkcoord daemons; members join and leave; nothing is lost and no
partition has two owners in one generation."""

from __future__ import annotations

import pytest

from tests.integration.test_client_support import (
    ThreadDaemons,
    assignments_by_generation,
    commits_by_generation,
    config,
    create_topic,
    eventually,
    poll_all,
    produce,
    read_group_state,
    stable_split,
    start_member,
)
from zkcoord.client import TopicPartition

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
