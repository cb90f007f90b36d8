"""Per-group owner election between daemons (one KazooClient each), against a
real ZooKeeper: one winner, no queueing, release and take-over, and what
connection trouble and session expiry do to ownership and fenced writes."""

from __future__ import annotations

import asyncio
import json

import pytest
from test_zk_support import CuttableProxy, connection, eventually, eventually_equal

from zkcoord.errors import NotOwnerError, ServiceUnavailableError
from zkcoord.zk import paths
from zkcoord.zk.connection import SessionEvent
from zkcoord.zk.ownership import ChangeKind, GroupOwnership
from zkcoord.zk.state_store import GroupStateStore


def _record(generation: int) -> dict:
    """A valid state record (the store refuses to load anything else) at ``generation``."""
    return {"v": 1, "s": "Empty", "g": generation, "os": "zookeeper"}

pytestmark = pytest.mark.integration


async def start_ownership(conn, node_id, changes=None):
    ownership = GroupOwnership(conn, node_id, on_change=None if changes is None else changes.append)
    await ownership.start()
    return ownership


def test_two_daemons_contend_one_wins_and_the_loser_withdraws(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as c1, connection(zk_hosts) as c2:
            o1, o2 = await start_ownership(c1, 1), await start_ownership(c2, 2)
            stores = {1: GroupStateStore(c1, o1), 2: GroupStateStore(c2, o2)}
            w1, w2 = await asyncio.gather(o1.contend("g"), o2.contend("g"))
            assert w1 == w2 and w1 in (1, 2)
            winner, loser = (o1, o2) if w1 == 1 else (o2, o1)
            assert winner.owned() == {"g"} and loser.owned() == frozenset()
            assert len(zk.get_children(paths.owner_dir("g"))) == 1  # the loser did not queue
            assert await loser.current_owner("g") == winner.node_id
            assert await winner.current_owner("g") == winner.node_id
            assert zk.Lock(paths.owner_dir("g")).contenders() == [str(winner.node_id)]
            # contending again changes nothing
            assert await loser.contend("g") == winner.node_id
            assert await winner.contend("g") == winner.node_id
            with pytest.raises(NotOwnerError):
                await stores[loser.node_id].write("g", {"v": 1}, None)
            assert zk.exists(paths.state("g")) is None
            assert await stores[winner.node_id].write("g", {"v": 1}, None) == 0
            await o1.stop()
            await o2.stop()
    asyncio.run(scenario())


def test_release_lets_the_other_daemon_win(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as c1, connection(zk_hosts) as c2:
            o1, o2 = await start_ownership(c1, 1), await start_ownership(c2, 2)
            assert await o1.contend("g") == 1
            assert await o2.contend("g") == 1
            await o1.release("g")
            assert o1.owned() == frozenset()
            # o2's cached answer is dropped when its children watch fires
            await eventually_equal(lambda: o2.current_owner("g"), None, "o2 to see no owner")
            assert await o2.contend("g") == 2
            assert await o1.current_owner("g") == 2
            assert await o1.contend("g") == 2 and o1.owned() == frozenset()
            await o2.release_all()
            assert zk.get_children(paths.owner_dir("g")) == []
    asyncio.run(scenario())


def test_an_owner_looked_up_before_any_election_is_seen_once_another_daemon_wins(zk_hosts, zk):
    """Lookups no longer contend (issue 16), so a daemon asks for the owner of
    a group that has no election directory yet. No watch can be set there,
    so that answer must not be cached: it would hide the winner for good."""
    async def scenario():
        async with connection(zk_hosts) as c1, connection(zk_hosts) as c2:
            o1, o2 = await start_ownership(c1, 1), await start_ownership(c2, 2)
            assert await o1.current_owner("g") is None
            assert zk.exists(paths.owner_dir("g")) is None  # asking wrote nothing
            assert await o2.contend("g") == 2
            assert await o1.current_owner("g") == 2
            # Now the directory's watch holds, and the cached answer goes with it.
            await o2.release("g")
            await eventually_equal(lambda: o1.current_owner("g"), None, "o1 to see no owner")
            assert await o1.contend("g") == 1
            assert await o2.current_owner("g") == 1
            await o1.stop()
            await o2.stop()
    asyncio.run(scenario())


def test_many_groups_are_shared_and_each_has_one_owner(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as c1, connection(zk_hosts) as c2:
            o1, o2 = await start_ownership(c1, 1), await start_ownership(c2, 2)
            groups = [f"g{i}" for i in range(20)]
            both = await asyncio.gather(*(o.contend(g) for g in groups for o in (o1, o2)))
            winners = dict(zip(groups, both[0::2]))
            assert winners == dict(zip(groups, both[1::2]))
            assert o1.owned() == {g for g, w in winners.items() if w == 1}
            assert o2.owned() == {g for g, w in winners.items() if w == 2}
            for g in groups:
                assert len(zk.get_children(paths.owner_dir(g))) == 1
    asyncio.run(scenario())


def test_owner_session_expiry_loses_groups_and_the_other_takes_over(zk_hosts, zk, expire_session):
    async def scenario():
        changes, events = [], []
        async with connection(zk_hosts, events=events) as c1, connection(zk_hosts) as c2:
            o1, o2 = await start_ownership(c1, 1, changes), await start_ownership(c2, 2)
            s1, s2 = GroupStateStore(c1, o1), GroupStateStore(c2, o2)
            assert await o1.contend("g") == 1
            assert await s1.write("g", _record(1), None) == 0
            stale_fence = o1.fence("g")

            await asyncio.to_thread(expire_session, c1.client)
            await eventually(lambda: any(c.kind is ChangeKind.LOST for c in changes), "LOST")
            lost = [c for c in changes if c.kind is ChangeKind.LOST]
            assert lost[0].groups == {"g"} and o1.owned() == frozenset()
            with pytest.raises(NotOwnerError):
                await s1.write("g", _record(2), 0)

            assert await o2.contend("g") == 2
            record, version = await s2.load("g")
            assert (record, version) == (_record(1), 0)
            assert await s2.write("g", _record(2), 0) == 1

            # a deposed owner that has not heard the news yet: its fence fails in the multi
            await eventually(lambda: events[-1:] == [SessionEvent.CONNECTED] and len(events) > 1,
                             "daemon 1 in a new session")
            deposed = DeposedOwnership(1, stale_fence)
            with pytest.raises(NotOwnerError, match="deposed"):
                await GroupStateStore(c1, deposed).write("g", _record(99), 1)
            assert deposed.dropped == ["g"]
            assert zk.get(paths.state("g"))[0] == json.dumps(_record(2), separators=(",", ":")).encode()
    asyncio.run(scenario())


class DeposedOwnership:
    """What a deposed owner believes before its watch fires: it still owns."""

    def __init__(self, node_id, fence):
        self.node_id, self._fence, self.dropped = node_id, fence, []

    def fence(self, group):
        return self._fence

    def drop(self, group, reason, fence=None):
        self.dropped.append(group)


def test_deleting_the_contender_znode_loses_the_group(zk_hosts, zk):
    async def scenario():
        changes = []
        async with connection(zk_hosts) as c1:
            o1 = await start_ownership(c1, 1, changes)
            await o1.contend("g")
            zk.delete(o1.fence("g").path)
            await eventually(lambda: changes, "a change")
            assert changes[0].kind is ChangeKind.LOST and changes[0].groups == {"g"}
            assert o1.owned() == frozenset()
    asyncio.run(scenario())


def test_suspended_then_reconnected_keeps_groups(services, zk_chroot, zk):
    async def scenario():
        proxy = CuttableProxy(services.zookeeper)
        changes, events = [], []
        try:
            async with connection(proxy.hosts(zk_chroot), events=events, session_timeout_ms=20_000) as c1:
                o1 = await start_ownership(c1, 1, changes)
                s1 = GroupStateStore(c1, o1)
                await o1.contend("a")
                await o1.contend("b")
                proxy.cut()
                await eventually(lambda: changes, "SUSPENDED")
                assert changes[0].kind is ChangeKind.SUSPENDED and changes[0].groups == {"a", "b"}
                assert o1.is_suspended("a") and o1.owned() == {"a", "b"}
                proxy.resume()
                await eventually(lambda: len(changes) >= 2, "RESUMED")
                assert changes[1].kind is ChangeKind.RESUMED and changes[1].groups == {"a", "b"}
                assert not o1.is_suspended("a") and o1.owned() == {"a", "b"}
                assert SessionEvent.SUSPENDED in events and SessionEvent.RECONNECTED in events
                assert SessionEvent.LOST not in events
                assert await s1.write("a", {"ok": True}, None) == 0
                # the contender watch was re-armed after the reconnect
                zk.delete(o1.fence("b").path)
                await eventually(lambda: len(changes) >= 3, "LOST of b")
                assert changes[2].kind is ChangeKind.LOST and changes[2].groups == {"b"}
        finally:
            proxy.close()
    asyncio.run(scenario())


def test_contender_deleted_while_suspended_is_dropped_on_reconnect(services, zk_chroot, zk):
    async def scenario():
        proxy = CuttableProxy(services.zookeeper)
        changes = []
        try:
            async with connection(proxy.hosts(zk_chroot), session_timeout_ms=20_000) as c1:
                o1 = await start_ownership(c1, 1, changes)
                await o1.contend("a")
                await o1.contend("b")
                proxy.cut()
                await eventually(lambda: changes, "SUSPENDED")
                zk.delete(o1.fence("a").path)  # e.g. an operator, while we cannot see it
                proxy.resume()
                await eventually(lambda: len(changes) >= 3, "RESUMED and LOST")
                by_kind = {c.kind: c.groups for c in changes[1:]}
                assert by_kind == {ChangeKind.RESUMED: {"b"}, ChangeKind.LOST: {"a"}}
                assert o1.owned() == {"b"}
        finally:
            proxy.close()
    asyncio.run(scenario())


def test_session_events_of_an_expiry(zk_hosts, expire_session):
    async def scenario():
        events = []
        async with connection(zk_hosts, events=events) as c1:
            await eventually(lambda: events == [SessionEvent.CONNECTED], "CONNECTED")
            first = c1.session_id
            await asyncio.to_thread(expire_session, c1.client)
            await eventually(lambda: events[-1:] == [SessionEvent.CONNECTED] and len(events) > 1, "new session")
            assert SessionEvent.LOST in events
            assert events.index(SessionEvent.LOST) < len(events) - 1
            assert c1.session_id != first
    asyncio.run(scenario())


def test_a_suspension_given_up_drops_every_group_and_the_session_back_rejoins_without_them(services, zk_chroot, zk):
    """The connection gives the session up (rule 6 of zkcoord.zk.connection)
    while ZooKeeper still holds it, as when ZooKeeper lost its quorum (it
    expires no session meanwhile): here the daemon counts a shorter time-out
    than the server's. Every group is dropped without a write; nothing is
    contended for; once the same session is back our old contenders are
    deleted, and only then is REJOINED reported."""
    async def scenario():
        proxy = CuttableProxy(services.zookeeper)
        changes, events = [], []
        try:
            async with connection(proxy.hosts(zk_chroot), events=events, session_timeout_ms=30_000) as c1:
                o1 = await start_ownership(c1, 1, changes)
                await o1.contend("a")
                await o1.contend("b")
                contenders = {g: o1.fence(g).path for g in ("a", "b")}
                session = c1.session_id
                c1.negotiated_timeout_ms = 1_500  # the server keeps it 30 s
                proxy.cut()
                await eventually(lambda: any(c.kind is ChangeKind.LOST for c in changes), "the groups given up")
                assert events == [SessionEvent.CONNECTED, SessionEvent.SUSPENDED, SessionEvent.GIVEN_UP]
                lost = [c for c in changes if c.kind is ChangeKind.LOST]
                assert len(lost) == 1 and lost[0].groups == {"a", "b"}
                assert lost[0].reason.startswith("ZooKeeper session given up: ZooKeeper not heard for ")
                assert o1.owned() == frozenset() and o1.session_given_up is not None
                with pytest.raises(ServiceUnavailableError, match="no ZooKeeper session"):
                    await o1.contend("c")
                assert all(zk.exists(path) for path in contenders.values())  # the server still has them

                proxy.resume()
                await eventually(lambda: any(c.kind is ChangeKind.REJOINED for c in changes), "REJOINED")
                assert SessionEvent.RECONNECTED in events and SessionEvent.LOST not in events
                assert c1.session_id == session
                assert not any(zk.exists(path) for path in contenders.values())
                assert o1.session_given_up is None and o1.owned() == frozenset()
                assert await o1.contend("a") == 1  # contending again
        finally:
            proxy.close()
    asyncio.run(scenario())


def test_a_suspension_given_up_then_expired_by_zookeeper_is_lost_then_a_new_session(services, zk_chroot, zk):
    async def scenario():
        proxy = CuttableProxy(services.zookeeper)
        changes, events = [], []
        try:
            async with connection(proxy.hosts(zk_chroot), events=events, session_timeout_ms=4_000) as c1:
                o1 = await start_ownership(c1, 1, changes)
                await o1.contend("a")
                contender = o1.fence("a").path
                proxy.cut()
                await eventually(lambda: any(c.kind is ChangeKind.LOST for c in changes), "the group given up")
                assert SessionEvent.GIVEN_UP in events
                assert [c.kind for c in changes] == [ChangeKind.SUSPENDED, ChangeKind.LOST]
                await eventually(lambda: not zk.exists(contender), "ZooKeeper expired the session")
                proxy.resume()
                await eventually(lambda: len(events) > 3 and events[-1:] == [SessionEvent.CONNECTED], "a new session")
                assert events == [SessionEvent.CONNECTED, SessionEvent.SUSPENDED, SessionEvent.GIVEN_UP,
                                  SessionEvent.LOST, SessionEvent.CONNECTED]
                assert o1.session_given_up is None
                assert await o1.contend("a") == 1
        finally:
            proxy.close()
    asyncio.run(scenario())
