"""The handover's ZooKeeper steps against a real ZooKeeper: a member registered
as a legacy consumer, owner znodes claimed and released only when ours, a
group read as the legacy consumers read it, the watches that start a
rebalance, session expiry; and the core's plan carried out beside a
stand-in legacy consumer (a kazoo session of its own, rebalancing as Kafka
1.1.1 does) until both hold exactly the range answer. Each test runs in its
own chroot; the znodes are written by hand as Kafka writes them. The real
legacy consumer is in test_handover_legacy_consumer.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from kazoo.client import KazooClient
from test_zk_support import connection, eventually

from zkcoord.core.handover.decision import Member, Owner, plan
from zkcoord.core.handover.legacy_range import range_assignment
from zkcoord.core.handover.registration import LegacyRegistration, encode_registration, thread_id
from zkcoord.errors import ConflictError, StateError
from zkcoord.zk.handover import LegacyRebalanceZk

pytestmark = pytest.mark.integration
ZID = "g_zkcoord-1795315596682-0a1b2c3d"


def topic_registration(partitions: int) -> bytes:
    return json.dumps({"version": 1, "partitions": {str(p): [0] for p in range(partitions)}}).encode()


def legacy_registration(topics: dict[str, int], pattern: str = "static") -> bytes:
    return json.dumps({"version": 1, "subscription": topics, "pattern": pattern, "timestamp": "1"},
                      separators=(",", ":")).encode()


@pytest.fixture
def legacy(zk_hosts):
    """Factory of kazoo sessions standing in for legacy consumers (each its own session)."""
    clients = []

    def make() -> KazooClient:
        client = KazooClient(hosts=zk_hosts, timeout=10)
        client.start(timeout=30)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


def test_a_member_registers_as_a_legacy_consumer_and_only_ours_is_unregistered(zk_hosts, zk, legacy):
    async def scenario():
        async with connection(zk_hosts) as conn:
            handover = LegacyRebalanceZk(conn)
            old = legacy()
            old.create("/consumers/g/ids/g_old", legacy_registration({"t": 1}), ephemeral=True, makepath=True)
            await handover.register("g", ZID, {"t": 1}, 1795315596682)
            await handover.register("g", ZID, {"t": 1}, 1795315596682)  # again (a lost answer): ours already
            data, stat = zk.get(f"/consumers/g/ids/{ZID}")
            assert data == encode_registration({"t": 1}, 1795315596682) and stat.ephemeralOwner == conn.session_id
            reading = await handover.read("g")
            assert reading.ours == {ZID} and set(reading.registrations) == {"g_old", ZID}
            assert reading.registrations[ZID] == LegacyRegistration.static(ZID, {"t": 1}, 1795315596682)
            with pytest.raises(ConflictError, match="g_old is held by another ZooKeeper session"):
                await handover.register("g", "g_old", {"t": 1}, 1)
            assert await handover.unregister("g", "g_old") is False
            assert await handover.unregister("g", ZID) is True
            assert zk.get_children("/consumers/g/ids") == ["g_old"]
            assert await handover.unregister("g", ZID) is False
    asyncio.run(scenario())


def test_owner_znodes_are_claimed_where_absent_and_released_only_when_ours(zk_hosts, zk, legacy):
    async def scenario():
        async with connection(zk_hosts) as conn:
            handover = LegacyRebalanceZk(conn)
            old = legacy()
            old.create("/consumers/g/owners/t/0", b"g_old-0", ephemeral=True, makepath=True)
            mine = thread_id(ZID, 0)
            assert await handover.claim("g", ("t", 0), mine) is False
            assert await handover.claim("g", ("t", 1), mine) is True
            assert await handover.claim("g", ("t", 1), mine) is True  # ours already
            assert await handover.claim("g", ("t", 1), thread_id(ZID, 1)) is False  # ours, another thread
            assert zk.get("/consumers/g/owners/t/1")[0] == mine.encode()
            assert await handover.release("g", ("t", 0), "g_old-0") is False  # never another session's
            assert await handover.release("g", ("t", 1), "someone-0") is False  # ours, but not that name
            assert await handover.release("g", ("t", 1), mine) is True
            assert await handover.release("g", ("t", 2), mine) is False
            assert sorted(zk.get_children("/consumers/g/owners/t")) == ["0"]
    asyncio.run(scenario())


def test_a_group_is_read_as_the_legacy_consumers_read_it(zk_hosts, zk, legacy):
    async def scenario():
        async with connection(zk_hosts) as conn:
            handover = LegacyRebalanceZk(conn)
            zk.create("/brokers/topics/orders", topic_registration(3), makepath=True)
            zk.create("/brokers/topics/orders-eu", topic_registration(1), makepath=True)
            zk.create("/brokers/topics/payments", topic_registration(2), makepath=True)
            old = legacy()
            old.create("/consumers/g/ids/g_w", legacy_registration({"orders.*": 1}, "white_list"),
                       ephemeral=True, makepath=True)
            old.create("/consumers/g/owners/orders/0", b"g_w-0", ephemeral=True, makepath=True)
            old.create("/consumers/g/owners/orders/not-a-partition", b"x", ephemeral=True)
            old.create("/consumers/g/ids/g_odd", legacy_registration({"no/such/topic": 1}), ephemeral=True)
            await handover.register("g", ZID, {"payments": 1, "missing": 1}, 1)
            await handover.claim("g", ("payments", 1), thread_id(ZID, 0))
            reading = await handover.read("g")
            assert reading.topics == {"orders": (0, 1, 2), "orders-eu": (0,), "payments": (0, 1)}  # no "no/such/topic"
            assert reading.owners == {("orders", 0): Owner("g_w-0", False),
                                      ("payments", 1): Owner(thread_id(ZID, 0), True)}
            result = plan(reading.view({ZID: Member(ZID, {"payments": 1, "missing": 1})}))
            assert result.claim[0].partition == ("payments", 0) and len(result.claim) == 1
            assert result.assignment == {ZID: frozenset({("payments", 1)})}
            assert result.target == range_assignment(reading.registrations.values(), reading.topics)
    asyncio.run(scenario())


def test_an_unreadable_registration_is_reported_by_the_view_not_by_the_read(zk_hosts, zk, legacy):
    async def scenario():
        async with connection(zk_hosts) as conn:
            old = legacy()
            old.create("/consumers/g/ids/g_old", b"*1*orders", ephemeral=True, makepath=True)
            reading = await LegacyRebalanceZk(conn).read("g")
            assert set(reading.problems) == {"g_old"}
            with pytest.raises(StateError, match="/consumers/g/ids/g_old cannot be read as a legacy consumer"):
                reading.view({})
    asyncio.run(scenario())


def test_the_watches_fire_on_what_starts_a_rebalance_and_on_releases(zk_hosts, zk, legacy):
    async def scenario():
        async with connection(zk_hosts) as conn:
            handover = LegacyRebalanceZk(conn)
            fired = []
            await handover.read("g", on_change=lambda: fired.append("ids"))  # nothing there yet
            old = legacy()
            old.create("/consumers/g/ids/g_old", legacy_registration({"t": 1}), ephemeral=True, makepath=True)
            await eventually(lambda: fired == ["ids"], "a registration appearing under a missing /ids")
            await handover.read("g", on_change=lambda: fired.append("topic"))
            zk.create("/brokers/topics/t", topic_registration(2), makepath=True)
            await eventually(lambda: fired[-1:] == ["topic"], "the subscribed topic created")
            old.create("/consumers/g/owners/t/0", b"g_old-0", ephemeral=True, makepath=True)
            await handover.read("g", on_change=lambda: fired.append("owner"))
            old.delete("/consumers/g/owners/t/0")
            await eventually(lambda: fired[-1:] == ["owner"], "an owner znode released")
            await asyncio.sleep(0.2)
            assert fired == ["ids", "topic", "owner"]  # each read's watches call back once
    asyncio.run(scenario())


def test_session_expiry_takes_our_registration_and_owners_with_it(zk_hosts, zk, expire_session):
    async def scenario():
        async with connection(zk_hosts) as conn:
            handover = LegacyRebalanceZk(conn)
            await handover.register("g", ZID, {"t": 1}, 1)
            await handover.claim("g", ("t", 0), thread_id(ZID, 0))
            await asyncio.to_thread(expire_session, conn.client)
            await eventually(lambda: not zk.exists(f"/consumers/g/ids/{ZID}") and not zk.exists(
                "/consumers/g/owners/t/0"), "the ephemeral znodes gone")
            reading = await handover.read("g")
            assert reading.ours == frozenset() and reading.owners == {}
    asyncio.run(scenario())


def legacy_rebalance(client: KazooClient, cid: str) -> bool:
    """One attempt of Kafka 1.1.1's rebalance by a stand-in legacy consumer: release
    its owner znodes, compute the range answer from /ids, claim all of its share or none."""
    client.ensure_path("/consumers/g/owners/t")
    for topic in client.get_children("/consumers/g/owners"):
        for p in client.get_children(f"/consumers/g/owners/{topic}"):
            path = f"/consumers/g/owners/{topic}/{p}"
            if client.get(path)[0].decode().rsplit("-", 1)[0] == cid:
                client.delete(path)
    regs = [LegacyRegistration.static(c, json.loads(client.get(f"/consumers/g/ids/{c}")[0])["subscription"])
            for c in client.get_children("/consumers/g/ids")]
    target = range_assignment(regs, {"t": tuple(range(4))})
    claimed = []
    for (topic, p), thread in sorted(target.items()):
        if thread.rsplit("-", 1)[0] == cid:
            if client.exists(f"/consumers/g/owners/{topic}/{p}"):
                for path in claimed:
                    client.delete(path)
                return False
            claimed.append(client.create(f"/consumers/g/owners/{topic}/{p}", thread.encode(), ephemeral=True))
    return True


def test_the_plan_carried_out_beside_a_legacy_consumer_ends_in_the_range_answer(zk_hosts, zk, legacy):
    async def scenario():
        zk.create("/brokers/topics/t", topic_registration(4), makepath=True)
        old = legacy()
        old.create("/consumers/g/ids/g_old", legacy_registration({"t": 1}), ephemeral=True, makepath=True)
        assert legacy_rebalance(old, "g_old")  # alone: it holds all four
        members = {ZID: Member(ZID, {"t": 1})}
        async with connection(zk_hosts) as conn:
            handover = LegacyRebalanceZk(conn)
            rounds = 0
            while True:
                rounds += 1
                assert rounds < 10, "did not settle"
                result = plan((await handover.read("g")).view(members))
                if result.settled:
                    break
                outcome = await handover.carry_out("g", result, members, now_ms=1)
                assert outcome.claimed == tuple(c.partition for c in result.claim) and outcome.complete
                if result.waiting:  # the legacy consumer's watch fired: it rebalances
                    await asyncio.to_thread(legacy_rebalance, old, "g_old")
            owners = {("t", int(p)): zk.get(f"/consumers/g/owners/t/{p}")[0].decode()
                      for p in zk.get_children("/consumers/g/owners/t")}
            assert owners == result.target == {("t", 0): "g_old-0", ("t", 1): "g_old-0",
                                               ("t", 2): f"{ZID}-0", ("t", 3): f"{ZID}-0"}
            assert result.assignment == {ZID: frozenset({("t", 2), ("t", 3)})}
    asyncio.run(scenario())
