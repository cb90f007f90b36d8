"""Regression: the daemon's forwarder follows a group's Kafka coordinator
when its broker is killed.

Found by the fault run (``test_fault_run.py``, seed 3145540815, ``dual``
storage): after ``broker-kill-9`` of the broker coordinating the group's
offsets, every commit of the group was answered after its member's 10 s
request time-out, for as long as the run waited (5 min), and the group
never drained. kafka-python 3.0's admin client caches each group's
coordinator and never drops it, so every forward went on to the killed
broker (connection refused), and once it was back, to a broker that is no
longer the coordinator (NOT_COORDINATOR), retried until the forwarder's
deadline. The fix: every retry looks the coordinator up again
(``zkcoord/kafka/admin_client.py``), as Kafka's own clients do.

Deterministic: the forward is tried while the old coordinator is down,
with the client that found it before the kill; without the fix it ends
with ServiceUnavailableError.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from tests.faults.harness import LIVENESS_S, replicas
from tests.support.cluster_faults import ClusterFaults
from zkcoord.kafka.forwarder import KafkaForwarder

pytestmark = pytest.mark.faults


def test_a_forward_follows_its_groups_coordinator_when_that_broker_is_killed(fault_sandbox):
    bootstrap = fault_sandbox.bootstrap_servers
    cluster = ClusterFaults(fault_sandbox.sandbox, timeout_s=LIVENESS_S, say=print)
    topic, group = f"moves-{uuid.uuid4().hex[:8]}", f"moves-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    admin.create_topics([NewTopic(topic, 1, replicas(bootstrap))])
    admin.close()
    # Every broker knows the topic before the first commit: the group's coordinator may be a broker the
    # controller has not told yet, which answers UNKNOWN_TOPIC_OR_PARTITION (a CI run got it).
    cluster.wait_topic(topic, 1)
    forwarder = KafkaForwarder(bootstrap, request_timeout_ms=30_000)  # the daemon's, as `zkcoord run` makes it
    tp = (topic, 0)

    async def commit(offset: int) -> dict:
        return await forwarder.commit(group, {tp: (offset, f"at {offset}")})

    try:
        assert asyncio.run(commit(5)) == {}  # the client finds the coordinator and keeps it
        old = cluster.group_coordinator(group)
        cluster.kill_broker(old)  # until its registration expired: the partition's leadership moves
        try:
            assert asyncio.run(commit(6)) == {}
            assert cluster.group_coordinator(group) != old
        finally:
            cluster.restart_broker(old)
        assert asyncio.run(commit(7)) == {}
        assert asyncio.run(forwarder.fetch(group, [tp])) == {tp: (7, "at 7")}
    finally:
        asyncio.run(forwarder.close())
