"""The opt-in member_disconnect_grace_ms on a real daemon and ZooKeeper: a
member whose connection closes without LeaveGroup is removed within the
grace instead of at its session timeout; off (the default, Kafka's
behaviour) it stays until its session expires; back on a new connection
within the grace, it stays. Outcomes are asserted (who is a member, which
generation, what the state znode says), time only as a liveness bound."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest
from kafka.protocol.metadata import FindCoordinatorRequest

from tests.support.wire import WireClient
from zkcoord.config import DaemonConfig
from zkcoord.core.group import from_record
from zkcoord.server.daemon import Daemon

pytestmark = pytest.mark.integration
E_NONE, E_REBALANCE_IN_PROGRESS, E_MEMBER_ID_REQUIRED = 0, 27, 79
LIVENESS_S = 30.0


class Member:
    """One dynamic member on a connection of its own."""

    def __init__(self, group: str, address: tuple[str, int], name: str, session_ms: int):
        self.group, self.address, self.name, self.session_ms = group, address, name, session_ms
        self.client: WireClient | None = None
        self.member_id = ""
        self.generation = -1

    async def connect(self) -> None:
        self.client = await WireClient.connect(*self.address, self.name)

    def join_request(self) -> JoinGroupRequest:
        return JoinGroupRequest(
            version=5, group_id=self.group, session_timeout_ms=self.session_ms, rebalance_timeout_ms=10_000,
            member_id=self.member_id, group_instance_id=None, protocol_type="consumer",
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"meta")])

    async def join(self):
        joined = await self.client.call(self.join_request(), timeout_s=LIVENESS_S)
        if joined.error_code == E_MEMBER_ID_REQUIRED:
            self.member_id = joined.member_id
            joined = await self.client.call(self.join_request(), timeout_s=LIVENESS_S)
        assert joined.error_code == E_NONE, joined
        self.member_id, self.generation = joined.member_id, joined.generation_id
        return joined

    async def sync(self, joined) -> None:
        assignments = [SyncGroupRequest.SyncGroupRequestAssignment(member_id=m.member_id, assignment=b"a")
                       for m in joined.members]  # only the leader's list is non-empty
        synced = await self.client.call(SyncGroupRequest(
            version=3, group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=None, assignments=assignments), timeout_s=LIVENESS_S)
        assert synced.error_code == E_NONE, synced

    async def heartbeat(self) -> int:
        answer = await self.client.call(HeartbeatRequest(
            version=3, group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=None))
        return answer.error_code


async def stable_pair(address, group: str, session_ms: int) -> tuple[Member, Member]:
    """Members a (leader) and b, Stable in one generation."""
    a, b = Member(group, address, "a", session_ms), Member(group, address, "b", session_ms)
    await a.connect()
    await b.connect()
    await a.sync(await a.join())  # generation 1: a alone
    b_joining = asyncio.create_task(b.join())
    while await a.heartbeat() != E_REBALANCE_IN_PROGRESS:
        await asyncio.sleep(0.05)
    a_joined, b_joined = await asyncio.gather(a.join(), b_joining)
    assert a_joined.generation_id == b_joined.generation_id == 2 and a_joined.leader == a.member_id
    await asyncio.gather(a.sync(a_joined), b.sync(b_joined))
    return a, b


def stored(zk, group: str):
    return from_record("g", json.loads(zk.get(f"/coordinators/{group}/state")[0]))


async def heartbeat_until_rebalance(a: Member, timeout_s: float) -> float:
    """a heartbeats until told to rejoin; the seconds that took."""
    started = time.monotonic()
    while (code := await a.heartbeat()) == E_NONE:
        assert time.monotonic() - started < timeout_s, "no rebalance"
        await asyncio.sleep(0.1)
    assert code == E_REBALANCE_IN_PROGRESS
    return time.monotonic() - started


async def rejoin_alone(a: Member, zk, group: str) -> None:
    joined = await a.join()
    assert [m.member_id for m in joined.members] == [a.member_id] and joined.generation_id == 3
    await a.sync(joined)
    state = stored(zk, group)
    assert (state.state.value, state.generation_id, list(state.members)) == ("Stable", 3, [a.member_id])


async def serve(zk_hosts: str, grace_ms: int, **settings) -> tuple[Daemon, tuple[str, int]]:
    daemon = Daemon(DaemonConfig(zookeeper=zk_hosts, listen="127.0.0.1:0", node_id=1,
                                 group_initial_rebalance_delay_ms=0, zk_session_timeout_ms=6000,
                                 member_disconnect_grace_ms=grace_ms, **settings))
    running = await daemon.start()
    return daemon, running.advertised


async def find(address, group: str) -> None:
    finder = await WireClient.connect(*address, "finder")
    try:
        found = await finder.call(FindCoordinatorRequest(version=3, key=group, key_type=0))
        assert found.error_code == E_NONE and found.node_id == 1
    finally:
        await finder.close()


def test_grace_zero_removes_a_closed_member_long_before_its_session(zk_hosts, zk, unique_name, caplog):
    group = unique_name("g")

    async def scenario():
        daemon, address = await serve(zk_hosts, 0)
        try:
            await find(address, group)
            a, b = await stable_pair(address, group, session_ms=120_000)
            assert (stored(zk, group).state.value, stored(zk, group).generation_id) == ("Stable", 2)
            with caplog.at_level(logging.INFO, logger="zkcoord.server.manager"):
                await b.client.close()  # no LeaveGroup: as a kill -9 of the member's process
                # Its session has 120 s to run; the liveness bound is a quarter of that.
                await heartbeat_until_rebalance(a, LIVENESS_S)
            assert f"the connection of member {b.member_id} closed" in caplog.text
            await rejoin_alone(a, zk, group)
            await a.client.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_off_by_default_a_closed_member_stays_until_its_session_expires(zk_hosts, zk, unique_name):
    group = unique_name("g")

    async def scenario():
        daemon, address = await serve(zk_hosts, -1)
        try:
            await find(address, group)
            a, b = await stable_pair(address, group, session_ms=6_000)
            await b.client.close()
            for _ in range(10):  # two seconds: still a member, nothing to rejoin for
                assert await a.heartbeat() == E_NONE
                await asyncio.sleep(0.2)
            await heartbeat_until_rebalance(a, LIVENESS_S)  # its session (6 s) ran out
            await rejoin_alone(a, zk, group)
            await a.client.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())


def test_a_member_back_within_the_grace_stays(zk_hosts, zk, unique_name, caplog):
    group = unique_name("g")

    async def scenario():
        daemon, address = await serve(zk_hosts, 3_000)
        try:
            await find(address, group)
            a, b = await stable_pair(address, group, session_ms=60_000)
            with caplog.at_level(logging.INFO, logger="zkcoord.server.manager"):
                await b.client.close()
                for _ in range(100):  # the daemon saw the close and shortened b's session
                    if f"the connection of member {b.member_id} closed" in caplog.text:
                        break
                    await asyncio.sleep(0.02)
                assert f"the connection of member {b.member_id} closed" in caplog.text
            await b.connect()  # back on a new connection, within the grace
            assert await b.heartbeat() == E_NONE
            for _ in range(20):  # 4 s: past the grace; both keep heartbeating
                assert (await a.heartbeat(), await b.heartbeat()) == (E_NONE, E_NONE)
                await asyncio.sleep(0.2)
            state = stored(zk, group)
            assert (state.state.value, state.generation_id) == ("Stable", 2)
            assert sorted(state.members) == sorted([a.member_id, b.member_id])
            await a.client.close()
            await b.client.close()
        finally:
            await daemon.stop()

    asyncio.run(scenario())
