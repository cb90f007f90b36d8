"""Metadata changes: partitions added to a subscribed topic are assigned
and consumed. Either side may notice: the group leader (kafka-python
refreshes metadata every ``metadata_max_age_ms`` and rejoins when a count
changed) or the owning daemon (it polls Kafka's Metadata API for the topics
its groups subscribe to and starts the rebalance)."""

from __future__ import annotations

import pytest

from tests.integration.test_client_support import (
    ThreadDaemons,
    add_partitions,
    assert_one_owner_per_generation,
    config,
    create_topic,
    eventually,
    poll_all,
    produce,
    stable_split,
    start_member,
)
from zkcoord.client import TopicPartition

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("noticed_by", ["leader", "daemon"])
def test_record_in_an_added_partition_is_consumed(services, zk_hosts, unique_name, noticed_by):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 2)
    if noticed_by == "leader":  # the daemons have no source of partition counts
        daemon_settings, metadata_max_age_ms = {}, 1_000
    else:  # the consumers refresh metadata only when the daemon's rebalance makes them
        daemon_settings, metadata_max_age_ms = dict(bootstrap_servers=bootstrap, topic_metadata_refresh_ms=500), 600_000
    with ThreadDaemons(zk_hosts, 2, **daemon_settings) as daemons:
        cfg = config(daemons.addresses, bootstrap, group, metadata_max_age_ms=metadata_max_age_ms)
        members = [start_member(f"m{i}", cfg, [topic]) for i in range(2)]
        try:
            produced = produce(bootstrap, topic, range(2), 3, tag="old")
            consumed = lambda: {k for m in members for k in m.keys()}  # noqa: E731
            two = frozenset(TopicPartition(topic, p) for p in range(2))
            eventually(lambda: stable_split(members, two) and produced <= consumed(),
                       "2 partitions split and consumed", step=poll_all(members))
            generation = members[0].consumer.membership().generation_id

            add_partitions(bootstrap, topic, 4)
            produced |= produce(bootstrap, topic, [2, 3], 3, tag="new")
            four = frozenset(TopicPartition(topic, p) for p in range(4))
            eventually(lambda: stable_split(members, four) and produced <= consumed(),
                       "the added partitions are assigned and their records consumed",
                       step=poll_all(members))
            assert members[0].consumer.membership().generation_id > generation
            assert sorted(k for m in members for k in m.keys()) == sorted(produced)
            assert_one_owner_per_generation(members)
        finally:
            for m in members:
                m.consumer.close()
