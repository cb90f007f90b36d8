"""Daemon registration against a real ZooKeeper: the znode, a node id in use,
allocated ids, lookups, and registering again after the session is lost."""

from __future__ import annotations

import asyncio
import json

import pytest
from test_zk_support import connection, eventually, eventually_equal

from zkcoord.errors import NodeIdInUseError
from zkcoord.zk import paths
from zkcoord.zk.nodes import NodeInfo, NodeRegistry

pytestmark = pytest.mark.integration


def test_register_writes_the_ephemeral_node_znode(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as conn:
            registry = NodeRegistry(conn, host="coord-1.example", port=9300, node_id=7, version="0.1.0",
                                    start_time_ms=1_700_000_000_000, pid=4242)
            assert await registry.register() == 7
            data, stat = zk.get("/zkcoord/nodes/7")
            assert json.loads(data) == {"host": "coord-1.example", "port": 9300, "version": "0.1.0",
                                        "start_time_ms": 1_700_000_000_000, "pid": 4242}
            assert stat.ephemeralOwner == conn.session_id
            assert await registry.register() == 7  # again: our own znode, fine
            assert await registry.nodes() == {7: NodeInfo(7, "coord-1.example", 9300, "0.1.0",
                                                          1_700_000_000_000, 4242)}
            assert await registry.address(7) == ("coord-1.example", 9300)
            assert await registry.address(8) is None
            await registry.unregister()
            assert zk.exists("/zkcoord/nodes/7") is None
    asyncio.run(scenario())


def test_a_node_id_in_use_names_the_id_and_its_holder(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as c1, connection(zk_hosts) as c2:
            first = NodeRegistry(c1, host="coord-1.example", port=9300, node_id=3)
            await first.register()
            second = NodeRegistry(c2, host="coord-2.example", port=9301, node_id=3)
            with pytest.raises(NodeIdInUseError, match=r"node id 3 is in use by the daemon at coord-1.example:9300"):
                await second.register()
            assert json.loads(zk.get("/zkcoord/nodes/3")[0])["host"] == "coord-1.example"
            # lookups from another daemon see the first one, and follow it when it goes
            assert await second.address(3) == ("coord-1.example", 9300)
            await first.unregister()
            await eventually_equal(lambda: second.address(3), None, "node 3 to be gone")
            assert await second.register() == 3
    asyncio.run(scenario())


def test_allocated_ids_start_above_the_configured_range_and_are_not_reused(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as c1, connection(zk_hosts) as c2:
            zk.create(paths.node(1002), b'{"host":"h","port":1}', makepath=True)  # a configured 1002
            a = NodeRegistry(c1, host="a", port=1)
            b = NodeRegistry(c2, host="b", port=2)
            assert await a.register() == 1001
            assert await b.register() == 1003  # 1002 is taken: skipped
            await a.unregister()
            c = NodeRegistry(c1, host="c", port=3)
            assert await c.register() == 1004
            assert sorted(await b.nodes()) == [1002, 1003, 1004]
    asyncio.run(scenario())


def test_registers_again_after_the_session_is_lost(zk_hosts, zk, expire_session):
    async def scenario():
        errors = []
        async with connection(zk_hosts) as conn:
            registry = NodeRegistry(conn, host="coord-1.example", port=9300, node_id=5, on_error=errors.append)
            await registry.register()
            old_session = conn.session_id
            await asyncio.to_thread(expire_session, conn.client)

            def registered_in_new_session():
                stat = zk.exists("/zkcoord/nodes/5")
                return stat is not None and stat.ephemeralOwner not in (0, old_session)
            await eventually(registered_in_new_session, "node 5 registered in the new session")
            assert errors == [] and registry.check() is None
    asyncio.run(scenario())


def test_losing_the_id_while_the_session_was_lost_is_reported(zk_hosts, zk, expire_session):
    async def scenario():
        errors = []
        async with connection(zk_hosts) as conn:
            registry = NodeRegistry(conn, host="coord-1.example", port=9300, node_id=6, on_error=errors.append)
            await registry.register()
            # the session is lost and, before we are back, someone else takes id 6
            zk.delete("/zkcoord/nodes/6")
            zk.create("/zkcoord/nodes/6", b'{"host":"intruder.example","port":1}', ephemeral=True)
            await asyncio.to_thread(expire_session, conn.client)
            await eventually(lambda: errors, "the re-registration error")
            assert isinstance(errors[0], NodeIdInUseError) and "intruder.example:1" in str(errors[0])
            with pytest.raises(NodeIdInUseError):
                registry.check()
    asyncio.run(scenario())


def test_a_burst_of_lookups_of_one_node_reads_it_once_and_a_change_is_read_again(zk_hosts, zk):
    async def scenario():
        async with connection(zk_hosts) as owner_conn, connection(zk_hosts) as conn:
            owner = NodeRegistry(owner_conn, host="coord-1.example", port=9300, node_id=7, version="0.1.0",
                                 start_time_ms=1_700_000_000_000, pid=4242)
            await owner.register()
            registry = NodeRegistry(conn, host="coord-2.example", port=9301, node_id=-1, version="0.1.0")
            reads = []
            real_get = conn.client.get_async

            def counted_get(path, *args, **kwargs):  # the real read, counted
                reads.append(path)
                return real_get(path, *args, **kwargs)

            conn.client.get_async = counted_get
            found = await asyncio.gather(*(registry.node(7) for _ in range(500)))
            assert {info.port for info in found} == {9300}
            assert reads == [paths.node(7)]  # the burst made one read; the rest waited for it
            assert await registry.node(7) == found[0] and len(reads) == 1  # cached now

            changed = json.dumps({"host": "coord-1.example", "port": 9400, "version": "0.1.0",
                                  "start_time_ms": 1_700_000_000_000, "pid": 4242}).encode()
            zk.set(paths.node(7), changed)  # the watch drops the cached registration
            await eventually_equal(lambda: registry.node(7),
                                   NodeInfo(7, "coord-1.example", 9400, "0.1.0", 1_700_000_000_000, 4242),
                                   "the changed registration read again")
            reads.clear()
            again = await asyncio.gather(*(registry.node(7) for _ in range(100)))
            assert {info.port for info in again} == {9400} and len(reads) <= 1
    asyncio.run(scenario())
