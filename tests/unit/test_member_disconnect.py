"""The daemon's opt-in member_disconnect_grace_ms, without ZooKeeper: which
connection a member last spoke on (MemberConnections), the transport's close
callback, and ApiHandler + GroupManager + GroupRuntime ending the session of
a member whose connection closed (on a real event loop, in-memory store)."""

from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.consumer.group import HeartbeatRequest
from kafka.protocol.parser import KafkaProtocol
from test_group_support import stable_harness
from test_migrate_daemon_storage import Ownership, Store, ZkOffsets
from test_transport import Client, Recorder, asyncio_test, serving

from tests.support.fake_clock import FakeClock

from zkcoord.config import DaemonConfig, build_config
from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import GroupConfig, GroupState, to_record
from zkcoord.errors import ConfigError
from zkcoord.server.apis import ApiHandler
from zkcoord.server.manager import GroupManager
from zkcoord.server.member_connections import MemberConnections
from zkcoord.wire.connections import ConnectionInfo
from zkcoord.wire.registry import COORDINATOR_APIS
from zkcoord.wire.requests import decode_request

S = GroupState
E = ErrorCode


# -- the setting -------------------------------------------------------------------

def test_the_setting_defaults_to_off_and_has_three_spellings(tmp_path):
    assert DaemonConfig(zookeeper="z:1").member_disconnect_grace_ms == -1
    config = build_config({}, environ={"ZKCOORD_ZOOKEEPER": "z:1", "ZKCOORD_MEMBER_DISCONNECT_GRACE_MS": "0"})
    assert config.member_disconnect_grace_ms == 0
    (tmp_path / "c.toml").write_text('zookeeper = "z:1"\nmember-disconnect-grace-ms = 250\n')
    assert build_config({}, tmp_path / "c.toml", environ={}).member_disconnect_grace_ms == 250
    with pytest.raises(ConfigError, match="member_disconnect_grace_ms=-2 is out of range"):
        DaemonConfig(zookeeper="z:1", member_disconnect_grace_ms=-2)


# -- MemberConnections -----------------------------------------------------------------

def test_a_closed_connection_names_the_members_that_last_spoke_on_it():
    c = MemberConnections()
    c.seen("g", "m1", 1)
    c.seen("g", "m1", 1)
    c.seen("g", "m2", 1)
    c.seen("h", "m1", 1)
    c.seen("g", "m3", 2)
    assert c.closed(1) == [("g", "m1"), ("g", "m2"), ("h", "m1")]
    assert c.closed(1) == [] and len(c) == 1


def test_a_member_seen_on_another_connection_since_is_not_named():
    c = MemberConnections()
    c.seen("g", "m1", 1)
    c.seen("g", "m1", 2)  # reconnected
    assert c.closed(1) == []
    c.seen("g", "m2", 3)
    c.forget("g", "m2")  # LeaveGroup
    assert c.closed(2) == [("g", "m1")] and c.closed(3) == [] and len(c) == 0


# -- the transport's close callback ---------------------------------------------------

class ClosingRecorder(Recorder):
    def __init__(self):
        super().__init__()
        self.closed = []

    def connection_closed(self, info):
        self.closed.append(info.connection_id)


@asyncio_test
async def test_the_handler_hears_of_a_peer_close_once_and_not_of_a_server_stop():
    recorder = ClosingRecorder()
    async with serving(recorder) as server:
        first = await Client.connect(server.bound_port)
        await first.send(HeartbeatRequest(version=4, group_id="g", generation_id=1, member_id="m"))
        await first.receive()
        await first.close()
        for _ in range(100):
            if recorder.closed:
                break
            await asyncio.sleep(0.01)
        assert recorder.closed == [recorder.infos[0].connection_id]
        second = await Client.connect(server.bound_port)
        await second.send(HeartbeatRequest(version=4, group_id="g", generation_id=1, member_id="m"))
        await second.receive()
    assert len(recorder.closed) == 1  # the stop closed the second one: not reported
    await second.close()


# -- ApiHandler + GroupManager + GroupRuntime -------------------------------------------

def heartbeat_request(member_id: str, generation: int = 1):
    protocol = KafkaProtocol(client_id="c")
    protocol.send_request(HeartbeatRequest(version=4, group_id="g", generation_id=generation,
                                           member_id=member_id), 1)
    return decode_request(protocol.send_bytes()[4:], COORDINATOR_APIS)


async def served(grace_ms: int, n: int = 3, instance_ids: bool = False):
    """The handler, manager and runtime of a Stable group, on a fake clock (``manager.fake``)."""
    fake = FakeClock()
    record = to_record(stable_harness(n, instance_ids=instance_ids).group)
    manager = GroupManager(1, GroupConfig(), Ownership(), Store({"g": record}), ZkOffsets(), nodes=None,
                           member_disconnect_grace_ms=grace_ms, clock=fake.clock, timer_loop=fake)
    manager.fake = fake
    runtime = await manager.runtime("g")
    return ApiHandler(manager), manager, runtime


def info(connection_id: int) -> ConnectionInfo:
    return ConnectionInfo(connection_id, "127.0.0.1", 40_000 + connection_id)


@asyncio_test
async def test_grace_zero_removes_a_member_whose_connection_closed_and_rebalances():
    handler, manager, runtime = await served(0)
    for member, connection in (("m1", 1), ("m2", 2), ("m3", 3)):
        assert handler.handle_now(heartbeat_request(member), info(connection)).error_code == 0
    handler.connection_closed(info(3))
    await manager.fake.settle()  # the grace is 0: the session ends now
    assert "m3" not in runtime.group.members
    assert runtime.group.state is S.PREPARING_REBALANCE and list(runtime.group.members) == ["m1", "m2"]
    # As for a session expiry: the rebalance's start writes only because this daemon took the
    # group over and reserves generations above its previous owner's (stored: 1 to 100).
    assert [(w[1]["s"], w[1]["g"], w[1]["gr"]) for w in manager.store.writes] == [("PreparingRebalance", 1, 200)]
    # the others learn of it at their next heartbeat
    assert handler.handle_now(heartbeat_request("m1"), info(1)).error_code == E.REBALANCE_IN_PROGRESS


@asyncio_test
async def test_off_by_default_a_closed_connection_changes_nothing():
    handler, manager, runtime = await served(-1)
    assert handler.members is None
    assert handler.handle_now(heartbeat_request("m3"), info(3)).error_code == 0
    before = runtime.group
    handler.connection_closed(info(3))
    assert manager.member_disconnected("g", "m3") is None
    await manager.fake.advance(50)
    assert runtime.group is before and runtime.group.state is S.STABLE


@asyncio_test
async def test_a_member_back_on_a_new_connection_within_the_grace_stays():
    handler, manager, runtime = await served(300)
    handler.handle_now(heartbeat_request("m3"), info(3))
    session = runtime.group.session_deadlines["m3"]
    handler.connection_closed(info(3))
    await manager.fake.settle()
    assert runtime.group.session_deadlines["m3"] == manager.fake.now + 300  # shortened to now + 300
    await manager.fake.advance(299)
    assert handler.handle_now(heartbeat_request("m3"), info(4)).error_code == 0  # back, heartbeats
    assert runtime.group.session_deadlines["m3"] >= session
    await manager.fake.advance(500)  # past the grace
    assert "m3" in runtime.group.members and runtime.group.state is S.STABLE


@asyncio_test
async def test_a_member_already_on_another_connection_is_not_expired():
    handler, manager, runtime = await served(0)
    handler.handle_now(heartbeat_request("m3"), info(3))
    handler.handle_now(heartbeat_request("m3"), info(4))  # the client reconnected first
    handler.connection_closed(info(3))
    await manager.fake.advance(50)
    assert "m3" in runtime.group.members and runtime.group.state is S.STABLE


@asyncio_test
async def test_static_members_keep_kafkas_semantics():
    handler, manager, runtime = await served(0, instance_ids=True)
    handler.members.seen("g", "m3", 3)  # even if noted, the core leaves a static member alone
    handler.connection_closed(info(3))
    await manager.fake.advance(50)
    assert "m3" in runtime.group.members and runtime.group.state is S.STABLE
