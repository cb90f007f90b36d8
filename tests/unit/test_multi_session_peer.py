"""zk/multi_session.py against a scripted peer on a local socket: what a server that misbehaves
gets (silence, a broken stream, an error header, a refused session or login), and the frames the
session sends (the connect handshake, the login, pings). The real ZooKeeper's side is in
tests/integration/test_zk_multi_session.py."""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass

import pytest
from kazoo.exceptions import AuthFailedError, ConnectionLoss, NoNodeError

from zkcoord.zk.auth import ZkSecurity
from zkcoord.zk.connection import ServerLink
from zkcoord.zk.jute import EncodedMulti, OpCodec
from zkcoord.zk.multi_session import MultiSession

_INT = struct.Struct("!i")
_REPLY = struct.Struct("!iqi")


@dataclass
class _Conn:
    server: tuple[str, int] | None
    security: ZkSecurity | None = None
    session_timeout_ms: int = 30_000
    connect_timeout_ms: int = 5_000
    number: int = 1  # kazoo's connection: a new number when it connects again

    def current_link(self):
        return ServerLink(self.number, *self.server) if self.server is not None else None


class _Peer:
    """A scripted server: reads frames, answers with ``script(kind, frame)``."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.frames: list[bytes] = []
        self.server: asyncio.base_events.Server | None = None

    async def start(self) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[:2]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                length = _INT.unpack(await reader.readexactly(4))[0]
                frame = await reader.readexactly(length)
                self.frames.append(frame)
                out = self.answer(len(self.frames), frame)
                if out is None:
                    continue
                if out == b"CLOSE":
                    writer.close()
                    return
                writer.write(out)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    async def stop(self) -> None:
        self.server.close()


async def eventually_true(predicate, timeout_s: float = 30.0) -> None:
    """Yield to the loop until ``predicate()`` holds (the scripted peer runs on it too)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < end, "not within the bound"
        await asyncio.sleep(0.01)


def _framed(body: bytes) -> bytes:
    return _INT.pack(len(body)) + body


def _connected(timeout_ms: int = 30_000, session_id: int = 0x77) -> bytes:
    return _framed(struct.pack("!iiq", 0, timeout_ms, session_id) + _INT.pack(16) + bytes(16) + b"\0")


def _reply(frame: bytes, err: int = 0, body: bytes = b"") -> bytes:
    xid = _INT.unpack_from(frame)[0]
    return _framed(_REPLY.pack(xid, 5, err) + body)


_APPLIED = struct.pack("!iBi", 5, False, 0) + bytes(68) + struct.pack("!iBi", -1, True, -1)  # one setData's result


def _multi() -> EncodedMulti:
    return EncodedMulti([OpCodec().set_data("/a", b"1")])


def _run(answer, scenario, **conn):
    async def main():
        peer = _Peer(answer)
        address = await peer.start()
        session = MultiSession(_Conn(address, **conn))
        try:
            return await scenario(session, peer)
        finally:
            await session.close()
            await peer.stop()
    return asyncio.run(main())


def test_the_handshake_then_a_multi_applied():
    def answer(n, frame):
        return _connected() if n == 1 else _reply(frame, body=_APPLIED)

    async def scenario(session, peer):
        assert not session.connected  # opened by the first multi
        assert await session.multi(_multi()) == []
        assert session.session_id == 0x77 and session.connected
        assert (session.sessions_opened, session.open_failures) == (1, 0)
        connect = peer.frames[0]
        # protocolVersion 0, lastZxidSeen 0, the time-out asked for, session 0, a 16-byte password, not read-only
        assert struct.unpack_from("!iqiq", connect) == (0, 0, 30_000, 0) and len(connect) == 45
        xid, op = struct.unpack_from("!ii", peer.frames[1])
        assert (xid, op) == (1, 14) and peer.frames[1][8:] == _multi().payload
    _run(answer, scenario)


def test_an_error_in_the_answers_header_is_kazoos_exception_and_the_session_stays():
    def answer(n, frame):
        if n == 1:
            return _connected()
        return _reply(frame, err=-101) if n == 2 else _reply(frame, body=_APPLIED)

    async def scenario(session, _peer):
        with pytest.raises(NoNodeError):
            await session.multi(_multi())
        assert await asyncio.wait_for(session.multi(_multi()), 30) == []
        assert session.sessions_opened == 1
    _run(answer, scenario)


def test_a_silent_server_is_dropped_and_the_multi_fails_with_connection_loss():
    def answer(n, frame):
        return _connected(timeout_ms=300) if n == 1 else None  # then never a word, not even to pings

    async def scenario(session, peer):
        with pytest.raises(ConnectionLoss):
            await asyncio.wait_for(session.multi(_multi()), 30)
        assert any(struct.unpack_from("!ii", f) == (-2, 11) for f in peer.frames[1:])  # it pinged first
    _run(answer, scenario)


def test_a_broken_stream_drops_the_connection():
    def answer(n, frame):
        return _connected() if n == 1 else _framed(b"\x00\x00")  # shorter than a reply header

    async def scenario(session, _peer):
        with pytest.raises(ConnectionLoss):
            await asyncio.wait_for(session.multi(_multi()), 30)
        assert session.session_id is None
    _run(answer, scenario)


def test_an_answer_out_of_order_drops_the_connection():
    def answer(n, frame):
        return _connected() if n == 1 else _framed(_REPLY.pack(999, 5, 0) + _APPLIED)

    async def scenario(session, _peer):
        with pytest.raises(ConnectionLoss):
            await asyncio.wait_for(session.multi(_multi()), 30)
    _run(answer, scenario)


def _asked_session(frame: bytes) -> tuple[int, bytes]:
    """A connect request's session id (0: a new session) and password."""
    session_id = struct.unpack_from("!q", frame, 16)[0]
    length = _INT.unpack_from(frame, 24)[0]
    return session_id, frame[28:28 + length]


_SECRET = b"s3cret-password!"


def _connected_as(session_id: int, password: bytes = _SECRET, timeout_ms: int = 30_000) -> bytes:
    return _framed(struct.pack("!iiq", 0, timeout_ms, session_id) + _INT.pack(len(password)) + password + b"\0")


def test_a_lost_multi_leaves_the_session_unsettled_until_it_is_reattached_with_its_password():
    """A multi whose answer was lost may still land (a cut network delivers it later): the same session is
    reattached on a new connection (ZooKeeper then fences the old one) before anything else is written."""
    asked = []

    def answer(n, frame):
        if len(frame) == 45:  # a connect request
            asked.append(_asked_session(frame))
            return _connected_as(0x77)
        return b"CLOSE" if n == 2 else _reply(frame, body=_APPLIED)

    async def scenario(session, _peer):
        assert not session.unsettled
        with pytest.raises(ConnectionLoss):
            await asyncio.wait_for(session.multi(_multi()), 30)
        assert session.unsettled
        await asyncio.wait_for(session.settle(), 30)
        assert not session.unsettled and session.ready_now()
        assert asked == [(0, bytes(16)), (0x77, _SECRET)]  # new, then the same session with its password
        assert await asyncio.wait_for(session.multi(_multi()), 30) == []
        assert session.session_id == 0x77 and session.sessions_opened == 2
    _run(answer, scenario)


def test_a_lost_multi_of_an_expired_session_settles_on_a_new_session():
    asked = []

    def answer(n, frame):
        if len(frame) == 45:
            asked.append(_asked_session(frame)[0])
            if asked[-1] == 0x77:  # expired: ZooKeeper answers a time-out of 0 and closes
                return _connected_as(0, bytes(16), timeout_ms=0)
            return _connected_as(0x77 if len(asked) == 1 else 0x99)
        return b"CLOSE" if n == 2 else _reply(frame, body=_APPLIED)

    async def scenario(session, _peer):
        with pytest.raises(ConnectionLoss):
            await asyncio.wait_for(session.multi(_multi()), 30)
        await asyncio.wait_for(session.settle(), 30)
        assert not session.unsettled and asked == [0, 0x77, 0] and session.session_id == 0x99
        assert session.open_failures == 0  # an expired session is not a failure
    _run(answer, scenario)


def test_a_lost_multi_stays_unsettled_while_the_session_cannot_be_reattached():
    async def scenario(session, peer):
        with pytest.raises(ConnectionLoss):
            await asyncio.wait_for(session.multi(_multi()), 30)
        await peer.stop()
        session._retry_at = 0.0
        with pytest.raises(ConnectionLoss):
            await asyncio.wait_for(session.settle(), 30)
        assert session.unsettled and not session.ready_now()
    _run(lambda n, f: _connected_as(0x77) if n == 1 else b"CLOSE", scenario)


def test_when_kazoo_connects_again_the_session_is_reattached_beside_it():
    asked = []

    def answer(n, frame):
        if len(frame) == 45:  # a connect request
            asked.append(_asked_session(frame)[0])
            return _connected_as(0x77)
        if struct.unpack_from("!ii", frame)[1] == -11:  # closeSession: not answered
            return None
        return _reply(frame, body=_APPLIED)

    async def scenario(session, peer):
        assert await session.multi(_multi()) == []
        session._conn.number = 2
        assert await session.multi(_multi()) == [] and session.sessions_opened == 2
        assert asked == [0, 0x77] and not session.unsettled
        assert not any(struct.unpack_from("!ii", f)[1] == -11 for f in peer.frames if len(f) == 8)
        await session.close()  # the end of the session: closeSession
        await eventually_true(lambda: any(struct.unpack_from("!ii", f)[1] == -11 for f in peer.frames if len(f) == 8))
    _run(answer, scenario)


def test_a_refused_session_is_a_connection_loss():
    async def scenario(session, _peer):
        with pytest.raises(ConnectionLoss, match="refused a new session"):
            await asyncio.wait_for(session.multi(_multi()), 30)
        assert (session.connected, session.sessions_opened, session.open_failures) == (False, 0, 1)
    _run(lambda n, f: _connected(timeout_ms=0), scenario)


def test_the_digest_login_is_sent_and_its_refusal_is_an_auth_failure():
    def answer(n, frame):
        if n == 1:
            return _connected()
        assert struct.unpack_from("!iii", frame) == (-4, 100, 0)
        return _framed(_REPLY.pack(-4, 0, -115))

    async def scenario(session, peer):
        with pytest.raises(AuthFailedError):
            await asyncio.wait_for(session.multi(_multi()), 30)
        login = peer.frames[1][12:]
        assert login == _INT.pack(6) + b"digest" + _INT.pack(8) + b"u:secret"
    _run(answer, scenario, security=ZkSecurity(digest="u:secret"))


def test_without_a_server_for_kazoo_there_is_no_multi():
    async def main():
        session = MultiSession(_Conn(None))
        with pytest.raises(ConnectionLoss, match="not connected"):
            await session.multi(_multi())
    asyncio.run(main())


def test_nothing_listening_is_a_connection_loss_said_once_per_streak(caplog):
    async def main():
        probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        address = probe.sockets[0].getsockname()[:2]
        probe.close()
        await probe.wait_closed()
        session = MultiSession(_Conn(address))
        for _ in range(2):
            with pytest.raises(ConnectionLoss, match="cannot open"):
                await session.multi(_multi())
        assert session.open_failures == 2  # each counted, though said once
        return address
    with caplog.at_level("WARNING", logger="zkcoord.zk.multi_session"):
        address = asyncio.run(main())
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and f"{address[0]}:{address[1]}" in warnings[0] and "maxClientCnxns" in warnings[0]


def test_open_soon_opens_in_the_background_and_a_refusal_puts_the_next_try_off():
    connects = []

    def answer(n, frame):
        if len(frame) == 45 and struct.unpack_from("!iqiq", frame)[:2] == (0, 0):  # a connect request
            connects.append(n)
            return _connected(timeout_ms=0 if len(connects) == 1 else 30_000)  # the first refused
        return _reply(frame, body=_APPLIED)

    async def scenario(session, peer):
        loop = asyncio.get_running_loop()
        assert not session.ready_now()
        before = loop.time()
        session.open_soon()  # returns at once: nothing is waited for
        session.open_soon()  # one attempt at a time
        while session._opening is not None:
            await asyncio.sleep(0.01)
        assert (session.ready_now(), session.open_failures, len(connects)) == (False, 1, 1)
        # The next try 1 s after the failure, the one after it 2 s: the clock is not waited for in a test.
        assert before + 1.0 <= session._retry_at <= loop.time() + 1.0 and session._backoff == 2.0
        session._retry_at = loop.time() + 60.0
        session.open_soon()  # within the back-off: no new attempt
        assert session._opening is None and len(connects) == 1
        session._retry_at = loop.time()  # the back-off over
        session.open_soon()
        while session._opening is not None:
            await asyncio.sleep(0.01)
        assert session.ready_now() and session.sessions_opened == 1 and len(connects) == 2
        assert session._backoff == 1.0  # a success starts the back-off over
        assert await session.multi(_multi()) == []
        session._conn.number += 1  # kazoo connected again: the session is no longer on its server
        assert not session.ready_now()
    _run(answer, scenario)


def test_a_connection_closed_before_the_session_is_open_names_the_server():
    async def scenario(session, peer):  # as ZooKeeper past maxClientCnxns: accepted, then closed
        server = session._conn.server
        with pytest.raises(ConnectionLoss, match=f"cannot open a ZooKeeper session for commits at "
                                                 f"{server[0]}:{server[1]}: "):
            await asyncio.wait_for(session.multi(_multi()), 30)
        assert (session.connected, session.open_failures) == (False, 1)
    _run(lambda n, f: b"CLOSE", scenario)
