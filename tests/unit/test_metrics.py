"""The metrics HTTP responder and the error naming of zkcoord.server.metrics,
without ZooKeeper."""

from __future__ import annotations

import asyncio
import json

from tests.support.http import http_get
from zkcoord.server.metrics import DaemonMetrics, MetricsServer, response_error


def test_metrics_responder_404_405_and_unhealthy_without_zookeeper():
    class Disconnected:
        connected = False

    async def scenario():
        server = MetricsServer(DaemonMetrics(conn=Disconnected()), "127.0.0.1", 0)
        await server.start()
        try:
            status, body = await http_get(server.bound_port, "/other")
            assert (status, body) == (404, b"not found\n")
            status, body = await http_get(server.bound_port, "/health")
            assert status == 503 and json.loads(body)["reason"] == "ZooKeeper not connected"
            status, body = await http_get(server.bound_port, "/metrics")
            assert status == 200 and b"zkcoord_zookeeper_connected 0.0" in body
        finally:
            await server.stop()
        assert server.respond("POST", "/metrics")[0] == 405

    asyncio.run(scenario())


def test_response_error_names_first_nonzero_code():
    from kafka.protocol.consumer.group import HeartbeatResponse, OffsetCommitResponse

    from zkcoord.server.codec import build_message

    assert response_error(build_message(HeartbeatResponse, 3, error_code=27)) == "REBALANCE_IN_PROGRESS"
    assert response_error(build_message(HeartbeatResponse, 3, error_code=0)) == "NONE"
    nested = build_message(OffsetCommitResponse, 7, topics=[{"name": "t", "partitions": [
        {"partition_index": 0, "error_code": 0}, {"partition_index": 1, "error_code": 3}]}])
    assert response_error(nested) == "UNKNOWN_TOPIC_OR_PARTITION"


def test_rebalances_are_counted_and_timed_from_preparing_to_stable_written_or_not():
    from dataclasses import replace

    from zkcoord.core.group_states import GroupState
    from zkcoord.core.membership import new_group

    now = [0.0]
    metrics = DaemonMetrics(clock=lambda: now[0])
    group = new_group("g")

    def step(state, generation, at):
        now[0] = at
        metrics.observe_transition(replace(group, state=state, generation_id=generation))

    def value(name):
        return metrics.registry.get_sample_value(name) or 0

    metrics.observe_loaded(replace(group, state=GroupState.STABLE, generation_id=4))
    step(GroupState.PREPARING_REBALANCE, 4, 10.0)  # a member joins
    step(GroupState.PREPARING_REBALANCE, 4, 10.5)  # still the same rebalance
    step(GroupState.COMPLETING_REBALANCE, 5, 11.0)  # generation 5 (reserved: not written)
    assert value("zkcoord_rebalances_total") == 1 and value("zkcoord_rebalance_duration_seconds_count") == 0
    step(GroupState.STABLE, 5, 11.25)  # the leader's assignment written
    assert value("zkcoord_rebalance_duration_seconds_count") == 1
    assert value("zkcoord_rebalance_duration_seconds_sum") == 1.25
    step(GroupState.EMPTY, 6, 20.0)  # everybody left: a new (empty) generation, no duration
    assert value("zkcoord_rebalances_total") == 2 and value("zkcoord_rebalance_duration_seconds_count") == 1
