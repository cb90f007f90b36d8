"""The offset commits' own ZooKeeper session (zk/multi_session.py) against a real ZooKeeper:
multis applied and refused as through kazoo, a session apart from kazoo's on kazoo's server, a
dropped connection failing what is in flight and the next connection reattaching the same session
(a new one once ZooKeeper has expired it), the digest login."""

from __future__ import annotations

import asyncio

import pytest
from kazoo.exceptions import BadVersionError, ConnectionLoss, NoAuthError
from kazoo.security import ACL, Id, Permissions
from test_zk_support import CuttableProxy, connection, eventually

from zkcoord.zk.auth import ZkSecurity, digest_id
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.jute import EncodedMulti, MultiRefused, OpCodec
from zkcoord.zk.multi_session import MultiSession, usable

pytestmark = pytest.mark.integration

DIGEST = "multi-u:multi-Secret-1"


def _codec(conn: ZkConnection) -> OpCodec:
    return OpCodec(conn.client.chroot, conn.client.default_acl)


def _with_session(hosts: str, body) -> None:
    """``await body(conn, session, codec)`` with a connection like a daemon's and a session beside it."""
    async def scenario():
        async with connection(hosts) as conn:
            session = MultiSession(conn)
            try:
                await body(conn, session, _codec(conn))
            finally:
                await session.close()
    asyncio.run(scenario())


def test_a_multi_lands_on_a_session_of_its_own_at_kazoos_server(zk_hosts, zk):
    async def body(conn, session, codec):
        zk.create("/m/a", b"1", makepath=True)
        answer = await session.multi(EncodedMulti([codec.check("/m/a", 0), codec.set_data("/m/a", b"2"),
                                                   codec.create("/m/b", b"new")]))
        assert answer == []
        assert zk.get("/m/a")[0] == b"2" and zk.get("/m/b")[0] == b"new"
        # read through kazoo's session right after the answer: the same server, which applied it
        assert (await asyncio.to_thread(conn.client.get, "/m/a"))[0] == b"2"
        assert session.session_id not in (None, conn.session_id)
        assert session._link == conn.current_link() and session._link.number == 1
        await session.multi(EncodedMulti([codec.set_data("/m/a", b"3")]))
        assert session.sessions_opened == 1  # one session serves every multi
        await session.close()
        assert session.session_id is None
        assert await session.multi(EncodedMulti([codec.set_data("/m/a", b"4")])) == []  # opens another
        assert session.sessions_opened == 2 and zk.get("/m/a")[0] == b"4"
    _with_session(zk_hosts, body)


def test_a_refused_multi_names_the_op_and_writes_nothing(zk_hosts, zk):
    async def body(conn, session, codec):
        zk.create("/r/a", b"1", makepath=True)
        answer = await session.multi(EncodedMulti([codec.set_data("/r/a", b"2"), codec.check("/r/a", 7),
                                                   codec.create("/r/b", b"x")]))
        assert len(answer) == 1 and isinstance(answer[0], MultiRefused)
        assert answer[0].index == 1 and isinstance(answer[0].error, BadVersionError)
        assert zk.get("/r/a")[0] == b"1" and zk.exists("/r/b") is None
    _with_session(zk_hosts, body)


def test_a_dropped_connection_fails_the_multi_in_flight_and_the_next_reattaches_the_session(services, zk_chroot, zk):
    proxy = CuttableProxy(services.zookeeper)

    async def scenario():
        async with connection(f"127.0.0.1:{proxy.port}{zk_chroot}", session_timeout_ms=20_000) as conn:
            session = MultiSession(conn)
            codec = _codec(conn)
            zk.create("/d/a", b"0", makepath=True)
            assert await session.multi(EncodedMulti([codec.set_data("/d/a", b"1")])) == []
            first, link = session.session_id, conn.current_link()
            proxy.cut()
            with pytest.raises(ConnectionLoss):
                await session.multi(EncodedMulti([codec.set_data("/d/a", b"2")]))
            proxy.resume()
            # kazoo notices the cut on its own thread: until then it may still show its old connection
            await eventually(lambda: (conn.current_link() or link).number > link.number, "kazoo connected again")
            assert await session.multi(EncodedMulti([codec.set_data("/d/a", b"3")])) == []
            assert session.session_id == first and session.sessions_opened == 2 and not session.unsettled
            assert zk.get("/d/a")[0] == b"3"
            await session.close()
    try:
        asyncio.run(scenario())
    finally:
        proxy.close()


def test_the_session_follows_kazoo_to_another_server(services, zk_chroot, zk):
    proxies = [CuttableProxy(services.zookeeper), CuttableProxy(services.zookeeper)]

    async def scenario():
        hosts = ",".join(f"127.0.0.1:{p.port}" for p in proxies) + zk_chroot
        async with connection(hosts, session_timeout_ms=20_000) as conn:
            session = MultiSession(conn)
            codec = _codec(conn)
            zk.create("/f/a", b"0", makepath=True)
            await session.multi(EncodedMulti([codec.set_data("/f/a", b"1")]))
            before = conn.current_link()
            assert session._link == before
            cut = next(p for p in proxies if p.port == before.port)
            cut.cut()  # kazoo moves to the other proxy; this session's connection is dropped too
            await eventually(lambda: conn.current_link() not in (None, before), "kazoo on the other server")
            for _ in range(3):  # the first try may still meet the dropped connection
                try:
                    assert await session.multi(EncodedMulti([codec.set_data("/f/a", b"2")])) == []
                    break
                except ConnectionLoss:
                    await asyncio.sleep(0.05)
            now = conn.current_link()
            assert session._link == now and now.port != before.port and now.number > before.number
            assert zk.get("/f/a")[0] == b"2"
            await session.close()
    try:
        asyncio.run(scenario())
    finally:
        for proxy in proxies:
            proxy.close()


def test_the_digest_login_is_the_sessions_too(zk_hosts, zk):
    secure = [ACL(Permissions.ALL, Id("digest", digest_id(*DIGEST.split(":", 1)))),
              ACL(Permissions.READ, Id("world", "anyone"))]

    async def scenario():
        zk.ensure_path("/s")
        zk.create("/s/a", b"0", acl=secure)
        async with connection(zk_hosts) as anonymous:
            refused = await MultiSession(anonymous).multi(EncodedMulti([_codec(anonymous).set_data("/s/a", b"1")]))
            assert isinstance(refused[0], MultiRefused) and isinstance(refused[0].error, NoAuthError)
        conn = ZkConnection(zk_hosts, session_timeout_ms=6000, connect_timeout_ms=20_000,
                            security=ZkSecurity(digest=DIGEST))
        await asyncio.to_thread(conn.start)
        try:
            assert usable(conn.security)
            session = MultiSession(conn)
            assert await session.multi(EncodedMulti([_codec(conn).set_data("/s/a", b"2")])) == []
            await session.close()
        finally:
            await asyncio.to_thread(conn.stop)
        assert zk.get("/s/a")[0] == b"2"
    asyncio.run(scenario())


def test_no_session_of_its_own_with_a_sasl_login():
    assert usable(None) and usable(ZkSecurity(digest=DIGEST))
    assert not usable(ZkSecurity(sasl_jaas_file="/nonexistent/jaas.conf"))
