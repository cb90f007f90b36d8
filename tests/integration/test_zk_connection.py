"""Starting and stopping a ZooKeeper session (a daemon's, a command's), and its errors."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest
from click.testing import CliRunner
from test_zk_support import CuttableProxy, connection, eventually

from zkcoord.cli.main import cli
from zkcoord.config import DaemonConfig
from zkcoord.errors import ConfigError, ServiceUnavailableError
from zkcoord.local.procs import free_port
from zkcoord.server.daemon import Daemon
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


# -- a command's connection fails at once when nothing listens; a daemon's waits ------------------

def refusing_hosts(count: int, chroot: str = "/x") -> str:
    return ",".join(f"127.0.0.1:{free_port()}" for _ in range(count)) + chroot


def test_a_command_gives_up_at_once_when_every_server_refuses():
    hosts = refusing_hosts(2)
    conn = ZkConnection(hosts, connect_timeout_ms=120_000, fail_when_refused=True)  # not waited for
    servers = hosts.removesuffix("/x").split(",")
    with pytest.raises(ServiceUnavailableError) as caught:
        conn.start()
    assert str(caught.value) == (f"cannot connect to ZooKeeper at {hosts}: {servers[0]} refused the connection, "
                                 f"{servers[1]} refused the connection; check the address and that ZooKeeper is up")
    assert not conn.connected
    unresolved = ZkConnection("no-such-host.invalid:2181", connect_timeout_ms=120_000, fail_when_refused=True)
    with pytest.raises(ServiceUnavailableError, match=r"at no-such-host.invalid:2181: no-such-host.invalid does "
                                                      r"not resolve \("):
        unresolved.start()


def test_a_command_connects_when_one_server_of_several_refuses(services):
    conn = ZkConnection(f"127.0.0.1:{free_port()},{services.zookeeper}", connect_timeout_ms=120_000,
                        fail_when_refused=True)
    conn.start()
    try:
        assert conn.connected and conn.client.exists("/") is not None
    finally:
        conn.stop()


def test_a_command_waits_its_time_out_for_a_server_that_accepts_and_does_not_answer():
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nothing answers
        hosts = f"127.0.0.1:{silent.getsockname()[1]}"
        conn = ZkConnection(hosts, connect_timeout_ms=1_500, fail_when_refused=True)
        with pytest.raises(ServiceUnavailableError, match=rf"ZooKeeper at {hosts}: no answer within 1.5 s"):
            conn.start()


def test_a_command_waits_for_a_server_that_drops_connections_for_a_while(services):
    proxy = CuttableProxy(services.zookeeper)
    proxy.cut()  # accepts and closes at once, as a ZooKeeper still starting does
    threading.Timer(1.0, proxy.resume).start()
    conn = ZkConnection(proxy.hosts(""), connect_timeout_ms=120_000, fail_when_refused=True)
    try:
        conn.start()
        assert conn.connected
    finally:
        conn.stop()
        proxy.close()


def test_a_daemon_waits_for_a_zookeeper_that_starts_after_it(services, zk_hosts):
    port = free_port()
    chroot = zk_hosts[len(services.zookeeper):]
    late: list[CuttableProxy] = []
    starting = threading.Timer(1.0, lambda: late.append(CuttableProxy(services.zookeeper, port=port)))
    daemon = Daemon(DaemonConfig(zookeeper=f"127.0.0.1:{port}{chroot}", listen="127.0.0.1:0", node_id=1,
                                 zk_connect_timeout_ms=120_000))

    async def scenario():
        starting.start()  # refused until then
        running = await daemon.start()
        try:
            assert running.node_id == 1 and daemon.conn.connected
        finally:
            await daemon.stop()
    try:
        asyncio.run(scenario())
    finally:
        starting.join()
        for proxy in late:
            proxy.close()


@pytest.mark.parametrize("command", [
    ["describe", "g"], ["groups"], ["migrate", "status"], ["migrate", "export", "--all"],
    ["migrate", "plan", "--all", "--bootstrap-servers", "127.0.0.1:1"], ["migrate", "layout", "status"]],
    ids=lambda c: " ".join(c[:2]))
def test_cli_commands_say_at_once_that_zookeeper_refuses(command):
    hosts = refusing_hosts(1, chroot="")
    result = CliRunner().invoke(cli, [*command, "--zookeeper", hosts, "--timeout-ms", "120000"])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (f"error: cannot connect to ZooKeeper at {hosts}: {hosts} refused the connection; "
                             "check the address and that ZooKeeper is up\n")


def test_a_create_queued_straight_makes_the_node_kazoo_would_and_leaves_no_cycles(zk_hosts, zk):
    """``aio.create``: the path without the chroot, ephemeral and sequence flags,
    kazoo's errors, the client's default ACL; and no object left for the cycle
    collector (kazoo's ``create_async`` leaves about fifty per call)."""
    import gc

    from kazoo.exceptions import NodeExistsError, NoNodeError
    from kazoo.security import make_acl, make_digest_acl

    from zkcoord.zk import aio

    zk.ensure_path("/p")

    async def scenario():
        async with connection(zk_hosts) as conn:
            client = conn.client
            path = await aio.create(client, "/p/c-", b"data", ephemeral=True, sequence=True)
            assert path.startswith("/p/c-") and len(path) == len("/p/c-") + 10
            data, stat = zk.get(path)
            assert data == b"data" and stat.ephemeralOwner == conn.session_id
            assert await aio.create(client, "/p/plain") == "/p/plain"
            assert zk.get("/p/plain")[1].ephemeralOwner == 0
            with pytest.raises(NodeExistsError):
                await aio.create(client, "/p/plain")
            with pytest.raises(NoNodeError):
                await aio.create(client, "/no-parent/x", ephemeral=True)
            acl = [make_digest_acl("someone", "secret", all=True), make_acl("world", "anyone", read=True)]
            await aio.create(client, "/p/with-acl", acl=acl)
            assert [(a.perms, a.id.scheme) for a in zk.get_acls("/p/with-acl")[0]] == [(31, "digest"), (1, "world")]
            client.default_acl = [make_acl("world", "anyone", read=True, write=True)]  # as a secured daemon's
            await aio.create(client, "/p/default-acl")
            assert [(a.perms, a.id.scheme) for a in zk.get_acls("/p/default-acl")[0]] == [(3, "world")]
            client.default_acl = None

            gc.collect()
            gc.disable()
            gc.set_debug(gc.DEBUG_SAVEALL)
            try:
                for i in range(50):
                    await aio.create(client, "/p/n-", ephemeral=True, sequence=True)
                    with pytest.raises(NoNodeError):
                        await aio.create(client, f"/missing-{i}/x")
                gc.collect()
                left = [o for o in gc.garbage if type(o).__module__.startswith(("kazoo", "zkcoord"))]
            finally:
                gc.set_debug(0)
                gc.garbage.clear()
                gc.enable()
            assert left == []
    asyncio.run(scenario())
