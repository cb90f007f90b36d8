"""A ZooKeeper session of the event loop's own, for the offset commits' multis.

Why: every other ZooKeeper request of a daemon goes through kazoo, whose
connection thread sends and reads it. Under load that thread and the event
loop's take the interpreter lock from each other dozens of times per multi
(issue 27: about 46 futex calls per multi, 0.2 of a core in kazoo's thread
and as much again on the loop's side). Commits are the one request that
comes thousands of times a second, so the offset store sends its multis on
a session whose socket is the event loop's, with nothing but bytes between
them: :class:`MultiSession`.

What it speaks, with ZooKeeper's wire format (jute, as kazoo's
``protocol/serialization.py`` writes it): the connect handshake, a digest
login (``auth``, the daemon's ``--zookeeper-digest``), ``multi`` (the bytes
:class:`~zkcoord.zk.jute.EncodedMulti` builds), ``ping`` and
``closeSession``. It sets no watches and creates nothing ephemeral.

Rules:

1. **Fencing is unchanged.** A commit's multi checks its group's election
   node (the znode the daemon's kazoo session owns) as before; a check is a
   version test of that znode, whichever session sends it, so a deposed
   owner's commits are refused here exactly as through kazoo.
2. **Read-your-writes.** ZooKeeper serves a read from the server the
   reading session is connected to, and orders writes of one session only.
   So this session is opened on the server kazoo's session is connected to
   (:meth:`~zkcoord.zk.connection.ZkConnection.current_link`), and opened
   again each time kazoo connects again (its old connection broke, and so,
   likely, did this one; it may be to another server): a read through kazoo
   after a commit's answer is served by the server that answered the
   commit, which had applied it. While kazoo has no connection, a multi
   fails with ConnectionLoss (the offset store sends it again, after a
   pause).
3. **Errors are kazoo's.** A connection that cannot be opened, drops, or
   stays silent for two thirds of the negotiated session time-out (pings go
   every third of it while idle) fails what is in flight with
   ``ConnectionLoss`` (the multi may have landed: the offset store sends it
   again, as it does after kazoo's ConnectionLoss); an error in an answer's
   header is kazoo's exception for that code; a refused login is
   ``AuthFailedError``.
3a. **A lost multi is fenced before anything else is written.** A multi
   whose answer was lost may still be on its way: the connection may only
   look dead (a network cut: the kernel keeps sending the bytes after the
   socket is closed, and delivers them when the network heals). Landing
   after a newer commit, it would move the committed offsets back (seen:
   a cut from ZooKeeper shorter than the session time-out, the old multi
   applied half a second after the newer ones). ZooKeeper fences what
   arrives on a session's old connection once the session is reattached
   on a new one (it closes the old connection, or answers its requests
   SESSIONMOVED), and refuses everything of an expired session. So a
   connection is always opened again with the same session (its id and
   password, as kazoo does), a new session only when ZooKeeper says the
   old one expired; and after a lost multi (:attr:`unsettled`) the offset
   store sends nothing, through kazoo either, until :meth:`settle` has
   reattached the session or learnt that it expired.
4. **Not with SASL.** A SASL login (a JAAS file) stays with kazoo:
   :func:`usable` is False and the offset store sends its multis through
   kazoo, as before.
5. **One owner, the event loop.** Every method runs on the loop the
   session was first used on; :meth:`close` ends the session (a
   ``closeSession``, then the socket); a multi after it opens another.
6. **Never waited for.** The offset store sends a multi here only while a
   session is open on kazoo's current server (:meth:`ready_now`);
   otherwise (the first commit, after a drop, after kazoo moved, or while
   the session cannot be opened: ZooKeeper's ``maxClientCnxns``, a server
   that does not answer) it sends the multi through kazoo and asks for the
   session in the background (:meth:`open_soon`), unless a multi was lost
   (rule 3a: then nothing is sent until :meth:`settle`). After a failed open the
   next try waits a back-off (1 s, doubled up to 30 s). The store keeps one
   multi in flight, so a multi sent through kazoo is answered before the
   next goes out here: a partition's writes stay in order across the two
   sessions.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import struct
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import AuthFailedError, ConnectionLoss

from zkcoord.zk.jute import EncodedMulti, exception_of, string

__all__ = ["MultiSession", "usable"]

log = logging.getLogger(__name__)

_LENGTH = struct.Struct("!i")
_REQUEST_HEADER = struct.Struct("!iii")  # frame length, xid, type
_REPLY_HEADER = struct.Struct("!iqi")  # xid, zxid, err
_CONNECT = struct.Struct("!iiqiq")  # frame length, protocolVersion, lastZxidSeen, timeOut, sessionId
_CONNECTED = struct.Struct("!iiqi")  # protocolVersion, timeOut, sessionId, the password's length
_WATCH_XID, _PING_XID, _AUTH_XID = -1, -2, -4
_PING, _AUTH, _CLOSE, _MULTI = 11, 100, -11, 14
_PASSWORD = bytes(16)  # a new session's
_MAX_FRAME = 64 * 1024 * 1024  # far beyond jute.maxbuffer: a length past it is a broken stream
FIRST_RETRY_S, MAX_RETRY_S = 1.0, 30.0  # the back-off after a failed open (rule 6)


def usable(security: Any) -> bool:
    """Whether multis may go through a :class:`MultiSession` (rule 4)."""
    return security is None or (not security.sasl_jaas_file and security.sasl is None)



class _Wire(asyncio.Protocol):
    """One connection: frames in, answers to the futures waiting in order."""

    def __init__(self, loop: asyncio.AbstractEventLoop, seq: int = 0) -> None:
        self.loop = loop
        self.seq = seq  # the session's connections, counted from 1
        self.transport: asyncio.Transport | None = None
        self.inbox = bytearray()
        self.pending: collections.deque[tuple[int, asyncio.Future, Callable[[bytes, int], Any]]] = \
            collections.deque()
        self.handshake: asyncio.Future = loop.create_future()  # the connect answer's body
        self.login: asyncio.Future | None = None  # the auth answer's error code
        self.open = False  # the handshake was answered
        self.closed = False
        self.last_read = self.last_sent = loop.time()

    def connection_made(self, transport) -> None:  # noqa: D102 (asyncio's)
        self.transport = transport

    def data_received(self, data: bytes) -> None:  # noqa: D102 (asyncio's)
        self.last_read = self.loop.time()
        inbox = self.inbox
        inbox += data
        start = 0
        try:
            while len(inbox) - start >= 4:
                length = _LENGTH.unpack_from(inbox, start)[0]
                if not 0 <= length <= _MAX_FRAME:
                    raise ValueError(f"a frame of {length} bytes")
                if len(inbox) - start - 4 < length:
                    break
                self._frame(bytes(inbox[start + 4:start + 4 + length]))
                start += 4 + length
        except (ValueError, struct.error) as exc:
            log.warning("ZooKeeper session for commits: a broken answer (%s); connection closed", exc)
            self.abort()
            return
        if start:
            del inbox[:start]

    def _frame(self, frame: bytes) -> None:
        if not self.open:
            self.open = True
            if not self.handshake.done():
                self.handshake.set_result(frame)
            return
        xid, _zxid, err = _REPLY_HEADER.unpack_from(frame)
        if xid in (_PING_XID, _WATCH_XID):
            return
        if xid == _AUTH_XID:
            if self.login is not None and not self.login.done():
                self.login.set_result(err)
            return
        if not self.pending:
            raise ValueError(f"an answer (xid {xid}) to no request")
        expected, future, decode = self.pending[0]
        if xid != expected:  # left waiting, as when its answer cannot be read: the connection's end fails it
            raise ValueError(f"an answer with xid {xid} where {expected} was next")
        value = None if err else decode(frame, _REPLY_HEADER.size)
        self.pending.popleft()
        if future.done():
            return
        if err:
            future.set_exception(exception_of(err))
        else:
            future.set_result(value)

    def send(self, xid: int, op: int, body: bytes) -> None:
        self.transport.writelines((_REQUEST_HEADER.pack(len(body) + 8, xid, op), body))
        self.last_sent = self.loop.time()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()

    def connection_lost(self, exc: BaseException | None) -> None:  # noqa: D102 (asyncio's)
        self.closed = True
        lost = ConnectionLoss(f"connection to ZooKeeper lost ({exc!r})" if exc else "connection to ZooKeeper closed")
        for waiting in (self.handshake, self.login):
            if waiting is not None and not waiting.done():
                waiting.set_exception(lost)
        while self.pending:
            _, future, _ = self.pending.popleft()
            if not future.done():
                future.set_exception(lost)


class MultiSession:
    """Multis on a ZooKeeper session of the event loop's own (module docstring).

    ``conn``: the daemon's :class:`~zkcoord.zk.connection.ZkConnection`
    (which server, the session time-out, the digest login).
    """

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._wire: _Wire | None = None
        self._link: Any = None  # kazoo's connection (ZkConnection.current_link) this session was opened beside
        self._session_id = 0  # kept after a connection ends: the next one reattaches it (rule 3a)
        self._password = _PASSWORD
        self._timeout_ms = 0  # negotiated
        self._wires = 0  # connections made (each _Wire's seq)
        self._lost_on = 0  # the last connection on which a multi's answer was lost
        self._fenced_upto = 0  # connections ZooKeeper fences: reattached after them, or their session expired
        self._xid = 0
        self._opening: asyncio.Future | None = None  # a connect under way, shared by callers meanwhile
        self._ticker: asyncio.TimerHandle | None = None
        self._failing = False  # the last open failed: said once, until one succeeds
        self._retry_at = 0.0  # loop time before which open_soon does not try again (rule 6)
        self._backoff = FIRST_RETRY_S
        self.sessions_opened = 0  # counted for the daemon's metrics, as is:
        self.open_failures = 0  # opens that failed (no connection, a refused session or login)

    @property
    def session_id(self) -> int | None:
        """The live session's id; None without one."""
        return self._session_id if self._live() else None

    @property
    def connected(self) -> bool:
        """Whether a session is open now (the offset store asks for one at its first multi)."""
        return self._live()

    def _live(self) -> bool:
        return self._wire is not None and self._wire.open and not self._wire.closed

    @property
    def unsettled(self) -> bool:
        """Whether a multi's answer was lost on a connection ZooKeeper does not
        fence yet: nothing may be written until :meth:`settle` (rule 3a)."""
        return self._lost_on > self._fenced_upto

    async def settle(self) -> None:
        """Reattach the session on kazoo's current server (or learn that it
        expired), so that a lost multi can no longer land (rule 3a).
        ConnectionLoss (or the login's AuthFailedError) when that cannot be
        done now: the caller tries again later, writing nothing meanwhile."""
        while self.unsettled:
            link = self._conn.current_link()
            if link is None:
                raise ConnectionLoss("not connected to ZooKeeper")
            if self._opening is None:
                self._begin_open(link)
            await asyncio.shield(self._opening)

    def ready_now(self) -> bool:
        """Whether a multi sent now goes out at once: a session open on kazoo's current server."""
        return self._live() and self._link == self._conn.current_link()

    def open_soon(self) -> None:
        """Open a session in the background (rule 6), unless one is opening, kazoo
        has no server, or the last attempt failed less than the back-off ago."""
        if self._opening is not None or self.ready_now():
            return
        link = self._conn.current_link()
        if link is None or asyncio.get_running_loop().time() < self._retry_at:
            return
        self._begin_open(link)

    def _begin_open(self, link: Any) -> None:
        """Start opening a session beside ``link``, shared by every caller until it is done."""
        opening = self._opening = asyncio.ensure_future(self._open(link))
        opening.add_done_callback(self._opened)

    def _opened(self, opening: asyncio.Future) -> None:
        if self._opening is opening:
            self._opening = None
        if not opening.cancelled():
            opening.exception()  # retrieved: a failure was counted and logged by _failed, and raised to waiters

    async def multi(self, request: EncodedMulti) -> list:
        """Send ``request``; its answer as kazoo gives it (``[]`` applied, ``[MultiRefused]``
        refused). ConnectionLoss when it could not be sent or its answer was lost."""
        wire = await self._ready()
        self._xid = self._xid % 2_147_483_647 + 1
        future = wire.loop.create_future()
        wire.pending.append((self._xid, future, EncodedMulti.deserialize))
        wire.send(self._xid, _MULTI, request.payload)
        try:
            return await future
        except ConnectionLoss:
            self._lost_on = max(self._lost_on, wire.seq)  # it may still land: fence it first (rule 3a)
            raise

    async def _ready(self) -> _Wire:
        link = self._conn.current_link()
        if link is None:
            raise ConnectionLoss("not connected to ZooKeeper")
        if self._live() and link == self._link:
            return self._wire
        if self._opening is None:
            self._begin_open(link)
        return await asyncio.shield(self._opening)

    async def _open(self, link: Any) -> _Wire:
        self._drop(end_session=False)  # the session is reattached on the new connection (rule 3a)
        server = (link.host, link.port)
        wire = None
        if self._session_id:
            wire = await self._connect(server, self._session_id, self._password)
            if wire is None:  # expired: nothing of it can land any more
                log.info("ZooKeeper session for commits 0x%x expired; opening another", self._session_id)
                self._session_id, self._password = 0, _PASSWORD
        if wire is None:
            wire = await self._connect(server, 0, _PASSWORD)
        self._fenced_upto = wire.seq - 1  # every older connection: reattached, or of an expired session
        if self._failing:
            log.info("ZooKeeper session for commits open again at %s:%s", *server)
            self._failing = False
        self._retry_at, self._backoff = 0.0, FIRST_RETRY_S
        self._wire, self._link = wire, link
        self.sessions_opened += 1
        log.debug("ZooKeeper session for commits 0x%x open at %s:%s (time-out %d ms)", self._session_id, *server,
                  self._timeout_ms)
        self._tick()
        return wire

    async def _connect(self, server: tuple[str, int], session_id: int, password: bytes) -> _Wire | None:
        """A connection to ``server`` with session ``session_id`` (0: a new
        one), logged in; None when ZooKeeper says that session expired."""
        loop = asyncio.get_running_loop()
        timeout_s = self._conn.connect_timeout_ms / 1000
        self._wires += 1
        wire = _Wire(loop, self._wires)
        try:
            await asyncio.wait_for(loop.create_connection(lambda: wire, server[0], server[1]), timeout_s)
            wanted = self._conn.session_timeout_ms
            wire.transport.write(_CONNECT.pack(_CONNECT.size - 4 + 4 + len(password) + 1, 0, 0, wanted, session_id)
                                 + _LENGTH.pack(len(password)) + password + b"\0")
            answer = await asyncio.wait_for(wire.handshake, timeout_s)
            _version, timeout_ms, answered_id, length = _CONNECTED.unpack_from(answer)
            if timeout_ms <= 0:
                if session_id:
                    wire.abort()
                    return None
                raise ConnectionLoss(f"ZooKeeper at {server[0]}:{server[1]} refused a new session")
            if not 0 <= length <= len(answer) - _CONNECTED.size:
                raise struct.error(f"a session password of {length} bytes")
            self._session_id, self._timeout_ms = answered_id, timeout_ms
            self._password = bytes(answer[_CONNECTED.size:_CONNECTED.size + length])
            digest = self._digest()
            if digest is not None:
                wire.login = loop.create_future()
                wire.send(_AUTH_XID, _AUTH, _LENGTH.pack(0) + string("digest") + string(digest))
                err = await asyncio.wait_for(wire.login, timeout_s)
                if err:
                    raise AuthFailedError(f"ZooKeeper at {server[0]}:{server[1]} refused the digest login "
                                          f"(error {err})")
        except (OSError, asyncio.TimeoutError, struct.error) as exc:
            wire.abort()
            raise self._failed(ConnectionLoss(f"cannot open a ZooKeeper session for commits at "
                                              f"{server[0]}:{server[1]}: {type(exc).__name__} {exc}")) from None
        except ConnectionLoss as exc:  # closed before the session was open (as past maxClientCnxns), or refused
            wire.abort()
            where = f"{server[0]}:{server[1]}"
            raise self._failed(exc if where in str(exc) else ConnectionLoss(
                f"cannot open a ZooKeeper session for commits at {where}: {exc}")) from None
        except AuthFailedError as exc:
            wire.abort()
            raise self._failed(exc) from None
        except BaseException:
            wire.abort()
            raise
        return wire

    def _failed(self, exc: BaseException) -> BaseException:
        """``exc``, logged as a warning when it is the first of a streak (the offset store retries quietly),
        and the next try put off by the back-off (rule 6)."""
        self.open_failures += 1
        self._retry_at = asyncio.get_running_loop().time() + self._backoff
        self._backoff = min(self._backoff * 2, MAX_RETRY_S)
        if not self._failing:
            self._failing = True
            log.warning("%s; meanwhile commits go through the daemon's own ZooKeeper session, and this one is "
                        "tried again later (each daemon worker holds two ZooKeeper sessions: its own and this "
                        "one, which ZooKeeper's maxClientCnxns counts)", exc)
        return exc

    def _digest(self) -> str | None:
        security = getattr(self._conn, "security", None)
        digest = getattr(security, "digest", None)
        return digest.value if digest is not None else None

    def _tick(self) -> None:
        """Every sixth of the session time-out: a ping when idle for a third of
        it, the connection dropped when silent for two thirds (rule 3)."""
        self._ticker = None
        wire = self._wire
        if wire is None or wire.closed:
            return
        now = wire.loop.time()
        timeout_s = self._timeout_ms / 1000
        if now - wire.last_read > timeout_s * 2 / 3:
            log.info("ZooKeeper session for commits 0x%x: nothing heard for %.1f s; connection dropped",
                     self._session_id, now - wire.last_read)
            wire.abort()
            return
        if now - wire.last_sent >= timeout_s / 3:
            wire.send(_PING_XID, _PING, b"")
        self._ticker = wire.loop.call_later(timeout_s / 6, self._tick)

    def _drop(self, end_session: bool = True) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None
        if self._wire is not None:
            self._end(self._wire, end_session)
            self._wire = None
        if end_session:
            self._session_id, self._password = 0, _PASSWORD

    @staticmethod
    def _end(wire: _Wire, end_session: bool) -> None:
        """closeSession (``end_session``), then the socket (what is in flight fails with ConnectionLoss)."""
        if wire.closed or wire.transport is None:
            return
        if wire.open and end_session:
            wire.send(1, _CLOSE, b"")  # xid: any; its answer is not waited for
            wire.transport.close()
        else:
            wire.abort()

    async def close(self) -> None:
        """End the session (rule 5); what is in flight fails with ConnectionLoss. A later multi opens another."""
        if self._opening is not None:
            self._opening.cancel()
            try:
                await self._opening
            except BaseException:  # noqa: BLE001 (cancelled or failed: either way not open)
                pass
            self._opening = None
        self._drop()
