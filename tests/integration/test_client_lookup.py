"""A new consumer's first coordinator lookup overlaps the broker bootstrap
(``zkcoord/client/network.py``): the FindCoordinator to a daemon goes out
before the bootstrap has finished, and the coordinator's own first lookup
uses its answer instead of asking again. Asserted on the order of the
I/O thread's steps and on the number of lookups, never on time."""

from __future__ import annotations

import logging

import pytest

from tests.integration.test_client_support import (
    ThreadDaemons,
    config,
    create_topic,
    eventually,
    poll_all,
    start_member,
)
from zkcoord.client import TopicPartition

pytestmark = pytest.mark.integration

LOOKUP = "FindCoordinator goes to daemon"
BOOTSTRAPPED = "Bootstrap complete"
JOINING = "(Re-)joining group"


def test_first_lookup_overlaps_the_bootstrap_and_is_not_repeated(services, zk_hosts, unique_name, caplog):
    caplog.set_level(logging.INFO, logger="kafka.net.manager")
    caplog.set_level(logging.INFO, logger="kafka.coordinator")
    caplog.set_level(logging.DEBUG, logger="zkcoord.client.network")  # last: it also sets the handler's level
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 2)
    partitions = frozenset(TopicPartition(topic, p) for p in range(2))
    with ThreadDaemons(zk_hosts, 1) as daemons:
        member = start_member("m", config(daemons.addresses, bootstrap, group), [topic])
        try:
            eventually(lambda: member.consumer.assignment() == partitions, "the member owns both partitions",
                       step=poll_all([member]))
            steps = [step for record in caplog.records if record.threadName == "kafka-io-m"
                     for step in (LOOKUP, BOOTSTRAPPED, JOINING) if step in record.getMessage()]
            assert steps.count(LOOKUP) == 1, steps
            assert steps.index(LOOKUP) < steps.index(BOOTSTRAPPED) < steps.index(JOINING), steps
            assert member.consumer.coordinator_node_id() == daemons.running[0].node_id
        finally:
            member.consumer.close()
