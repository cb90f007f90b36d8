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

from tests.integration.test_daemon_disconnect import Member, find, rejoin_alone, serve, stable_pair, stored
from tests.support.wire import WireClient
from zkcoord.core import notice
from zkcoord.core.messages import session_key
from zkcoord.server.group_runtime import monotonic_ms

pytestmark = pytest.mark.integration
E_NONE, E_REBALANCE_IN_PROGRESS, E_UNKNOWN_MEMBER_ID = 0, 27, 25
E_COORDINATOR_NOT_AVAILABLE, E_NOT_COORDINATOR = 15, 16
LIVENESS_S = 30.0


class Scene:
    """A daemon with the given hold and a Stable pair a (leader), b of
    ``group``; ``open()`` connections are closed at the end."""

    def __init__(self, daemon, address, group: str, a: Member, b: Member):
        self.daemon, self.address, self.group, self.a, self.b = daemon, address, group, a, b
        self.clients = [a.client, b.client]
        self.stopped = False

    async def open(self, name: str) -> WireClient:
        client = await WireClient.connect(*self.address, name)
        self.clients.append(client)
        return client

    async def notice_channel(self, member: Member) -> WireClient:
        channel = await self.open(member.name + "-notice")
        assert notice.FEATURE in features(await api_versions(channel, notice.CLIENT_SOFTWARE_NAME))
        return channel

    async def stop_daemon(self) -> None:
        self.stopped = True
        await self.daemon.stop()


def play(zk_hosts: str, group: str, hold_ms: int, scenario, session_ms: int = 120_000, **settings) -> None:
    """Run ``await scenario(scene)`` on a fresh daemon and Stable pair."""

    async def main():
        daemon, address = await serve(zk_hosts, -1, rebalance_notice_hold_ms=hold_ms, **settings)
        scene = None
        try:
            await find(address, group)
            a, b = await stable_pair(address, group, session_ms=session_ms)
            scene = Scene(daemon, address, group, a, b)
            await scenario(scene)
        finally:
            for client in scene.clients if scene else ():
                await client.close()
            if scene is None or not scene.stopped:
                await daemon.stop()

    asyncio.run(main())


async def api_versions(client: WireClient, software: str):
    return await client.call(ApiVersionsRequest(version=3, client_software_name=software,
                                                client_software_version="1"))


def features(response) -> dict[str, tuple[int, int]]:
    return {f.name: (f.min_version, f.max_version) for f in (response.supported_features or [])}


def held_heartbeat(channel: WireClient, member: Member, version: int = 4) -> asyncio.Task:
    return asyncio.create_task(channel.call(HeartbeatRequest(
        version=version, group_id=member.group, generation_id=member.generation, member_id=member.member_id,
        group_instance_id=None), timeout_s=LIVENESS_S))


async def still_held(held: asyncio.Task) -> bool:
    done, _ = await asyncio.wait([held], timeout=1.0)
    return not done


def test_a_held_heartbeat_is_answered_when_a_member_joins(zk_hosts, unique_name):
    async def scenario(s: Scene):
        a, b = s.a, s.b
        channel = await s.notice_channel(a)
        held = held_heartbeat(channel, a)
        assert await still_held(held), "a Stable member's heartbeat on the notice connection is held"
        assert s.daemon.manager.runtimes[s.group].held_heartbeats == 1
        # Heartbeats on the members' own connections are answered at once meanwhile.
        assert (await a.heartbeat(), await b.heartbeat()) == (E_NONE, E_NONE)
        c = Member(s.group, s.address, "c", 120_000)
        await c.connect()
        s.clients.append(c.client)
        joining = asyncio.create_task(c.join())
        answer = await asyncio.wait_for(held, LIVENESS_S)  # the hold is 60 s at least (half the session)
        assert answer.error_code == E_REBALANCE_IN_PROGRESS
        # The group goes on as usual: everyone rejoins into generation 3.
        joined = await asyncio.gather(a.join(), b.join(), joining)
        assert {j.generation_id for j in joined} == {3}
        await asyncio.gather(*(m.sync(j) for m, j in zip((a, b, c), joined)))
        # Held again in the new generation, and answered when a member leaves.
        held = held_heartbeat(channel, a)
        assert await still_held(held)
        left = await b.client.call(LeaveGroupRequest(
            version=3, group_id=s.group, members=[LeaveGroupRequest.MemberIdentity(
                member_id=b.member_id, group_instance_id=None)]))
        assert left.error_code == E_NONE
        assert (await asyncio.wait_for(held, LIVENESS_S)).error_code == E_REBALANCE_IN_PROGRESS

    play(zk_hosts, unique_name("g"), 600_000, scenario)


def test_a_hold_that_runs_out_answers_none_and_keeps_the_member(zk_hosts, zk, unique_name):
    async def scenario(s: Scene):
        channel = await s.notice_channel(s.a)
        for _ in range(5):
            assert (await held_heartbeat(channel, s.a, version=0)).error_code == E_NONE
        state = stored(zk, s.group)
        assert (state.state.value, state.generation_id) == ("Stable", 2)
        assert sorted(state.members) == sorted([s.a.member_id, s.b.member_id])

    play(zk_hosts, unique_name("g"), 200, scenario)


def test_the_answer_to_a_held_heartbeat_does_not_restart_the_session(zk_hosts, unique_name):
    """The session runs from the held heartbeat's arrival: a member that
    died while its heartbeat was held (the daemon does not read a connection
    whose request it holds, so it cannot see the close) is not kept alive
    one hold longer. Clocks compared: the daemon's (in this process) and
    ours, never a duration."""

    async def scenario(s: Scene):
        channel = await s.notice_channel(s.b)
        runtime = s.daemon.manager.runtimes[s.group]
        sent_ms = monotonic_ms()
        assert (await held_heartbeat(channel, s.b)).error_code == E_NONE  # held 2 s, then answered
        deadline = runtime._timers.deadline(session_key(s.b.member_id))
        # Restarted at the arrival (within 2 s of sending), not at the answer (2 s after the arrival).
        assert sent_ms + 6_000 <= deadline < sent_ms + 2_000 + 6_000

    play(zk_hosts, unique_name("g"), 2_000, scenario, session_ms=6_000)


def test_kafka_clients_are_never_held(zk_hosts, unique_name):
    """A connection that did not name the notice software (every Kafka
    client) gets its heartbeat answered at once, even with a long hold."""

    async def scenario(s: Scene):
        other = await s.open("kafka-java")
        assert notice.FEATURE in features(await api_versions(other, "apache-kafka-java"))
        answers = [await asyncio.wait_for(held_heartbeat(other, s.a), 5.0) for _ in range(3)]
        assert [r.error_code for r in answers] == [E_NONE] * 3

    play(zk_hosts, unique_name("g"), 600_000, scenario)


def test_hold_zero_turns_the_notice_off(zk_hosts, unique_name):
    async def scenario(s: Scene):
        channel = await s.open("a-notice")
        assert notice.FEATURE not in features(await api_versions(channel, notice.CLIENT_SOFTWARE_NAME))
        assert (await asyncio.wait_for(held_heartbeat(channel, s.a), 5.0)).error_code == E_NONE

    play(zk_hosts, unique_name("g"), 0, scenario)


def test_a_held_heartbeat_is_released_when_the_daemon_stops(zk_hosts, unique_name):
    """SIGTERM's graceful stop gives the group up: the held heartbeat is not
    left hanging (answered NOT_COORDINATOR, or its connection closed)."""

    async def scenario(s: Scene):
        channel = await s.notice_channel(s.a)
        held = held_heartbeat(channel, s.a)
        assert await still_held(held)
        await s.stop_daemon()
        try:
            answer = await asyncio.wait_for(held, LIVENESS_S)
        except ConnectionError:
            return
        assert answer.error_code in (E_NOT_COORDINATOR, E_COORDINATOR_NOT_AVAILABLE), answer

    play(zk_hosts, unique_name("g"), 600_000, scenario)


def test_a_members_own_leave_answers_its_held_heartbeat_first(zk_hosts, unique_name):
    """zkcoord's consumer leaves with a heartbeat held on its notice
    connection. That heartbeat arrived before the LeaveGroup, so Kafka would
    have answered it NONE; it is answered as of before the leave, not
    UNKNOWN_MEMBER_ID after it, and counted so. A heartbeat sent after the
    LeaveGroup is still UNKNOWN_MEMBER_ID, answered and counted as Kafka
    answers and counts it."""

    async def scenario(s: Scene):
        def counts() -> dict[str, float]:
            return {error: s.daemon.metrics.registry.get_sample_value(
                "zkcoord_requests_total", {"api": "Heartbeat", "error": error}) or 0
                for error in ("NONE", "REBALANCE_IN_PROGRESS", "UNKNOWN_MEMBER_ID")}

        channel = await s.notice_channel(s.b)
        held = held_heartbeat(channel, s.b)
        assert await still_held(held)
        others = held_heartbeat(await s.notice_channel(s.a), s.a)
        assert await still_held(others)
        before = counts()
        left = await s.b.client.call(LeaveGroupRequest(
            version=3, group_id=s.group, members=[LeaveGroupRequest.MemberIdentity(
                member_id=s.b.member_id, group_instance_id=None)]))
        assert (left.error_code, [m.error_code for m in left.members]) == (E_NONE, [E_NONE])
        assert (await asyncio.wait_for(held, LIVENESS_S)).error_code == E_NONE
        # The member that stays hears of the rebalance its partner's leave started.
        assert (await asyncio.wait_for(others, LIVENESS_S)).error_code == E_REBALANCE_IN_PROGRESS
        assert await s.b.heartbeat() == E_UNKNOWN_MEMBER_ID  # really after the leave: an error
        after = counts()
        assert {error: after[error] - before[error] for error in after} == {
            "NONE": 1, "REBALANCE_IN_PROGRESS": 1, "UNKNOWN_MEMBER_ID": 1}

    play(zk_hosts, unique_name("g"), 600_000, scenario, metrics_listen="127.0.0.1:0")


def test_a_lone_members_own_rejoin_answers_its_held_heartbeat_first(zk_hosts, zk, unique_name):
    """A member alone in its group rejoins (a leader whose assignment
    changed the metadata does) with its heartbeat held: its JoinGroup
    completes the rebalance at once, into the next generation. The held
    heartbeat arrived before the JoinGroup and is answered as of then,
    NONE, not ILLEGAL_GENERATION for the generation the rejoin ended."""

    async def scenario(s: Scene):
        left = await s.b.client.call(LeaveGroupRequest(
            version=3, group_id=s.group, members=[LeaveGroupRequest.MemberIdentity(
                member_id=s.b.member_id, group_instance_id=None)]))
        assert left.error_code == E_NONE
        await rejoin_alone(s.a, zk, s.group)  # generation 3: a alone
        held = held_heartbeat(await s.notice_channel(s.a), s.a)
        assert await still_held(held)
        illegal = {"api": "Heartbeat", "error": "ILLEGAL_GENERATION"}
        before = s.daemon.metrics.registry.get_sample_value("zkcoord_requests_total", illegal) or 0
        rejoined = await s.a.join()
        assert rejoined.generation_id == 4
        assert (await asyncio.wait_for(held, LIVENESS_S)).error_code == E_NONE
        assert (s.daemon.metrics.registry.get_sample_value("zkcoord_requests_total", illegal) or 0) == before

    play(zk_hosts, unique_name("g"), 600_000, scenario, metrics_listen="127.0.0.1:0")
