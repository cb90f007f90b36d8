"""The rebalance notice (zkcoord.core.notice) on a real daemon and ZooKeeper:
a heartbeat on a connection that named the notice client software is held
while the group stays Stable and answered REBALANCE_IN_PROGRESS as soon as a
rebalance starts; every other connection's heartbeat is answered at once, as
a Kafka broker answers it; the feature is advertised in ApiVersions v3+ and
only while the hold is on. Holds are set far longer than the liveness
bounds, so an early answer can only come from the rebalance."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.consumer.group import HeartbeatRequest, LeaveGroupRequest
from kafka.protocol.metadata import ApiVersionsRequest

from tests.integration.test_daemon_disconnect import Member, find, stable_pair, stored
from tests.support.wire import WireClient
from zkcoord.config import DaemonConfig
from zkcoord.core import notice
from zkcoord.core.messages import session_key
from zkcoord.server.group_runtime import monotonic_ms
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration
E_NONE, E_REBALANCE_IN_PROGRESS = 0, 27
E_COORDINATOR_NOT_AVAILABLE, E_NOT_COORDINATOR = 15, 16
LIVENESS_S = 30.0


async def serve(zk_hosts: str, hold_ms: int) -> tuple[Daemon, tuple[str, int]]:
    daemon = Daemon(DaemonConfig(zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=1,
                                 group_initial_rebalance_delay_ms=0, zk_session_timeout_ms=6000,
                                 rebalance_notice_hold_ms=hold_ms))
    running = await daemon.start()
    return daemon, running.advertised


async def api_versions(client: WireClient, software: str):
    return await client.call(ApiVersionsRequest(version=3, client_software_name=software,
                                                client_software_version="1"))


def features(response) -> dict[str, tuple[int, int]]:
    return {f.name: (f.min_version, f.max_version) for f in (response.supported_features or [])}


async def notice_channel(address, member: Member) -> WireClient:
    channel = await WireClient.connect(*address, member.name + "-notice")
    assert notice.FEATURE in features(await api_versions(channel, notice.CLIENT_SOFTWARE_NAME))
    return channel


def held_heartbeat(channel: WireClient, member: Member, version: int = 4) -> asyncio.Task:
    return asyncio.create_task(channel.call(HeartbeatRequest(
        version=version, group_id=member.group, generation_id=member.generation, member_id=member.member_id,
        group_instance_id=None), timeout_s=LIVENESS_S))


def test_a_held_heartbeat_is_answered_when_a_member_joins(zk_hosts, unique_name):
    group = unique_name("g")

    async def scenario():
        daemon, address = await serve(zk_hosts, 600_000)
        try:
            await find(address, group)
            a, b = await stable_pair(address, group, session_ms=120_000)
            channel = await notice_channel(address, a)
            held = held_heartbeat(channel, a)
            done, _ = await asyncio.wait([held], timeout=1.0)
            assert not done, "a Stable member's heartbeat on the notice connection is held"
            assert daemon.manager.runtimes[group].held_heartbeats == 1
            # Heartbeats on the members' own connections are answered at once meanwhile.
            assert (await a.heartbeat(), await b.heartbeat()) == (E_NONE, E_NONE)
            c = Member(group, address, "c", 120_000)
            await c.connect()
            joining = asyncio.create_task(c.join())
            answer = await asyncio.wait_for(held, LIVENESS_S)  # the hold is 60 s at least (half the session)
            assert answer.error_code == E_REBALANCE_IN_PROGRESS
            # The group goes on as usual: everyone rejoins into generation 3.
            joined = await asyncio.gather(a.join(), b.join(), joining)
            assert {j.generation_id for j in joined} == {3}
            await asyncio.gather(*(m.sync(j) for m, j in zip((a, b, c), joined)))
            # Held again in the new generation, and answered when a member leaves.
            held = held_heartbeat(channel, a)
            done, _ = await asyncio.wait([held], timeout=1.0)
            assert not done
            left = await b.client.call(LeaveGroupRequest(
                version=3, group_id=group, members=[LeaveGroupRequest.MemberIdentity(
                    member_id=b.member_id, group_instance_id=None)]))
            assert left.error_code == E_NONE
            assert (await asyncio.wait_for(held, LIVENESS_S)).error_code == E_REBALANCE_IN_PROGRESS
            for m in (a, b, c):
                await m.client.close()
            await channel.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_a_hold_that_runs_out_answers_none_and_keeps_the_member(zk_hosts, zk, unique_name):
    group = unique_name("g")

    async def scenario():
        daemon, address = await serve(zk_hosts, 200)
        try:
            await find(address, group)
            a, b = await stable_pair(address, group, session_ms=120_000)
            channel = await notice_channel(address, a)
            for _ in range(5):
                assert (await held_heartbeat(channel, a, version=0)).error_code == E_NONE
            state = stored(zk, group)
            assert (state.state.value, state.generation_id) == ("Stable", 2)
            assert sorted(state.members) == sorted([a.member_id, b.member_id])
            for client in (a.client, b.client, channel):
                await client.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_the_answer_to_a_held_heartbeat_does_not_restart_the_session(zk_hosts, unique_name):
    """The session runs from the held heartbeat's arrival: a member that
    died while its heartbeat was held (the daemon does not read a connection
    whose request it holds, so it cannot see the close) is not kept alive
    one hold longer. Clocks compared: the daemon's (in this process) and
    ours, never a duration."""
    group = unique_name("g")

    async def scenario():
        daemon, address = await serve(zk_hosts, 2_000)
        try:
            await find(address, group)
            a, b = await stable_pair(address, group, session_ms=6_000)
            channel = await notice_channel(address, b)
            runtime = daemon.manager.runtimes[group]
            sent_ms = monotonic_ms()
            assert (await held_heartbeat(channel, b, version=4)).error_code == E_NONE  # held 2 s, then answered
            deadline = runtime._timers.deadline(session_key(b.member_id))
            # Restarted at the arrival (within 2 s of sending), not at the answer (2 s after the arrival).
            assert sent_ms + 6_000 <= deadline < sent_ms + 2_000 + 6_000
            for client in (a.client, b.client, channel):
                await client.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_kafka_clients_are_never_held(zk_hosts, unique_name):
    """A connection that did not name the notice software (every Kafka
    client) gets its heartbeat answered at once, even with a long hold."""
    group = unique_name("g")

    async def scenario():
        daemon, address = await serve(zk_hosts, 600_000)
        try:
            await find(address, group)
            a, b = await stable_pair(address, group, session_ms=120_000)
            other = await WireClient.connect(*address, "kafka-java")
            assert notice.FEATURE in features(await api_versions(other, "apache-kafka-java"))
            answers = [await asyncio.wait_for(held_heartbeat(other, a), 5.0) for _ in range(3)]
            assert [r.error_code for r in answers] == [E_NONE] * 3
            for client in (a.client, b.client, other):
                await client.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_hold_zero_turns_the_notice_off(zk_hosts, unique_name):
    group = unique_name("g")

    async def scenario():
        daemon, address = await serve(zk_hosts, 0)
        try:
            await find(address, group)
            a, b = await stable_pair(address, group, session_ms=120_000)
            channel = await WireClient.connect(*address, "a-notice")
            assert notice.FEATURE not in features(await api_versions(channel, notice.CLIENT_SOFTWARE_NAME))
            answer = await asyncio.wait_for(held_heartbeat(channel, a), 5.0)
            assert answer.error_code == E_NONE
            for client in (a.client, b.client, channel):
                await client.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_a_held_heartbeat_is_released_when_the_daemon_stops(zk_hosts, unique_name):
    """SIGTERM's graceful stop gives the group up: the held heartbeat is not
    left hanging (answered NOT_COORDINATOR, or its connection closed)."""
    group = unique_name("g")

    async def scenario():
        daemon, address = await serve(zk_hosts, 600_000)
        stopped = False
        try:
            await find(address, group)
            a, b = await stable_pair(address, group, session_ms=120_000)
            channel = await notice_channel(address, a)
            held = held_heartbeat(channel, a)
            done, _ = await asyncio.wait([held], timeout=1.0)
            assert not done
            await daemon.stop()
            stopped = True
            try:
                answer = await asyncio.wait_for(held, LIVENESS_S)
            except ConnectionError:
                pass
            else:
                assert answer.error_code in (E_NOT_COORDINATOR, E_COORDINATOR_NOT_AVAILABLE), answer
        finally:
            if not stopped:
                await daemon.stop()

    asyncio.run(scenario())
