"""Starting and stopping a daemon's ZooKeeper session, and its errors."""

from __future__ import annotations

import asyncio

import pytest
from test_zk_support import connection, eventually

from zkcoord.errors import ConfigError, ServiceUnavailableError
from zkcoord.local.procs import free_port
from zkcoord.zk.connection import SessionEvent, ZkConnection

pytestmark = pytest.mark.integration


def test_unreachable_zookeeper_names_the_address_and_the_timeout():
    port = free_port()
    conn = ZkConnection(f"127.0.0.1:{port}/x", connect_timeout_ms=1500)
    with pytest.raises(ServiceUnavailableError, match=rf"ZooKeeper at 127.0.0.1:{port}/x: no answer within 1.5 s"):
        conn.start()
    assert not conn.connected


def test_a_missing_chroot_is_a_config_error(services):
    conn = ZkConnection(f"{services.zookeeper}/zkcoord-tests/no-such-chroot-xyz")
    with pytest.raises(ConfigError, match="chroot /zkcoord-tests/no-such-chroot-xyz of .* does not exist"):
        conn.start()
    assert not conn.connected


def test_events_and_stop(zk_hosts, zk):
    async def scenario():
        events = []
        async with connection(zk_hosts, events=events) as conn:
            await eventually(lambda: events == [SessionEvent.CONNECTED], "CONNECTED")
            assert conn.connected and conn.session_id == conn.client.client_id[0]
            conn.client.create("/eph", b"", ephemeral=True)
        assert not conn.connected
        assert zk.exists("/eph") is None  # the session ended with stop()
        assert events == [SessionEvent.CONNECTED]  # no events after stop()
    asyncio.run(scenario())
