"""Prometheus metrics and the health endpoint of an in-process daemon
(``metrics_listen``): a join / sync / heartbeat / commit, then a scrape."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest
from kafka.protocol.consumer.group import HeartbeatRequest, OffsetCommitRequest, SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.test_daemon_protocol import E_MEMBER_ID_REQUIRED, E_NONE, daemon_config, join
from tests.support.http import http_get
from tests.support.wire import WireClient
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value}"""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_and_health_after_join_sync_heartbeat_commit(zk_hosts, zk, unique_name):
    group = unique_name("g")
    config = dataclasses.replace(daemon_config(zk_hosts, 1), metrics_listen="127.0.0.1:0")

    async def scenario():
        daemon = Daemon(config)
        running = await daemon.start()
        client = await WireClient.connect(*running.advertised, "c")
        try:
            assert running.metrics_port == daemon.metrics_port and daemon.metrics_port > 0
            found = await client.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
            assert found.error_code == E_NONE and found.node_id == running.node_id
            first = await client.call(join(group))
            assert first.error_code == E_MEMBER_ID_REQUIRED
            member = first.member_id
            joined = await client.call(join(group, member))
            assert (joined.error_code, joined.generation_id) == (E_NONE, 1)
            synced = await client.call(SyncGroupRequest(
                version=3, group_id=group, generation_id=1, member_id=member, group_instance_id=None,
                assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=member, assignment=b"all")]))
            assert synced.error_code == E_NONE
            hb = await client.call(HeartbeatRequest(version=3, group_id=group, generation_id=1, member_id=member,
                                                    group_instance_id=None))
            assert hb.error_code == E_NONE
            commit = await client.call(OffsetCommitRequest(
                version=7, group_id=group, generation_id_or_member_epoch=1, member_id=member,
                group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="orders", partitions=[
                    OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                        partition_index=0, committed_offset=42, committed_leader_epoch=-1,
                        committed_metadata="")])]))
            assert commit.topics[0].partitions[0].error_code == E_NONE

            status, body = await http_get(daemon.metrics_port, "/metrics")
            assert status == 200
            got = samples(body.decode())
            assert got[("zkcoord_groups_owned", ())] == 1
            assert got[("zkcoord_group_members", ())] == 1
            assert got[("zkcoord_held_heartbeats", ())] == 0  # no zkcoord consumer here
            assert got[("zkcoord_zookeeper_connected", ())] == 1
            assert got[("zkcoord_zookeeper_session_expiries_total", ())] == 0
            assert got[("zkcoord_requests_total", (("api", "JoinGroup"), ("error", "MEMBER_ID_REQUIRED")))] == 1
            assert got[("zkcoord_requests_total", (("api", "JoinGroup"), ("error", "NONE")))] == 1
            assert got[("zkcoord_requests_total", (("api", "SyncGroup"), ("error", "NONE")))] == 1
            assert got[("zkcoord_requests_total", (("api", "Heartbeat"), ("error", "NONE")))] == 1
            assert got[("zkcoord_requests_total", (("api", "OffsetCommit"), ("error", "NONE")))] == 1
            assert got[("zkcoord_request_latency_seconds_count", (("api", "JoinGroup"),))] == 2
            assert got[("zkcoord_offset_commits_total", (("mode", "zookeeper"),))] == 1
            # The commit went in one multi (through the daemon's session: the commits' own is opened in the
            # background at the first commit, not waited for); that session is then open.
            for _ in range(1000):
                if got[("zkcoord_zookeeper_commit_session_connected", ())] == 1:
                    break
                await asyncio.sleep(0.01)
                got = samples((await http_get(daemon.metrics_port, "/metrics"))[1].decode())
            assert got[("zkcoord_zookeeper_commit_session_connected", ())] == 1
            assert got[("zkcoord_zookeeper_commit_sessions_opened_total", ())] == 1
            assert got[("zkcoord_zookeeper_commit_session_open_failures_total", ())] == 0
            assert got[("zkcoord_zookeeper_offset_multis_total", ())] == 1
            assert got[("zkcoord_zookeeper_offset_multis_failed_total", ())] == 0
            assert got[("zkcoord_rebalances_total", ())] == 1
            assert got[("zkcoord_rebalance_duration_seconds_count", ())] == 1

            status, body = await http_get(daemon.metrics_port, "/health")
            assert status == 200
            assert json.loads(body) == {"status": "ready", "groups_owned": 1}
            assert (await http_get(daemon.metrics_port, "/nope"))[0] == 404
        finally:
            await client.close()
            await daemon.stop()

    asyncio.run(scenario())
