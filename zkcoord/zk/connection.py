"""One ZooKeeper session per daemon, and what happens to it.

This module owns the :class:`~kazoo.client.KazooClient` of a daemon: parsing
the ``host:port[,host:port][/chroot]`` string, connecting within a time-out,
stopping, and reporting session changes as :class:`SessionEvent`; also the
short-lived client of :func:`wait_znode_gone` (the sandbox waits with it for
a killed server's registration to expire before starting another):

=============  ==========================================================
CONNECTED      a new session is live (first start, or after LOST);
               ephemeral znodes and watches of an earlier session are gone
SUSPENDED      the connection dropped; the session may still be alive
GIVEN_UP       suspended for the whole negotiated session time-out since
               ZooKeeper was last heard: the session is treated as lost
               (rule 6), though its ephemeral znodes may still exist
RECONNECTED    the connection is back with the *same* session (also after
               GIVEN_UP: ZooKeeper had not expired it)
LOST           the session expired: every ephemeral znode of it is gone
=============  ==========================================================

Rules:

1. Listeners never block. kazoo calls ours on its connection thread; we only
   forward the event, either straight to a listener (which must itself not
   block) or, when it was added with a loop, via ``call_soon_threadsafe``, so
   it runs on that loop's thread in the order the events happened.
2. A new session without a LOST in between (kazoo does not always say) is
   still reported as LOST then CONNECTED, so listeners can rely on LOST.
3. No events after :meth:`ZkConnection.stop` starts: whoever stops the
   connection cleans up itself.
4. :meth:`ZkConnection.start` waits up to the connect time-out for a
   session: a daemon may start before ZooKeeper. A command
   (``fail_when_refused``) gives up within a fraction of a second when
   nothing listens: every listed server refused the TCP connection (or its
   name does not resolve) three times in a row, 0.1 s apart. A server that
   accepts, slowly or only to drop the connection (ZooKeeper starting up),
   or that does not answer at all, is still waited for up to the time-out.
5. With a login (:class:`~zkcoord.zk.auth.ZkSecurity`), :meth:`start`
   returns only once ZooKeeper accepted it. kazoo reports CONNECTED before
   its SASL exchange, so a first request waits for the exchange's outcome:
   a wrong password or an unknown user fails at once, a server without SASL
   never answers the exchange and kazoo gives up after the session time-out
   divided by the number of servers; either is one AuthenticationError line
   naming the address, the mechanism and the user. A digest login
   (ZooKeeper accepts any) is checked against the ACL of ``/zkcoord``. A
   login refused later, on a reconnection, ends kazoo's reconnecting: logged
   as an error, every request then fails with AuthenticationError.
6. A suspension that lasts the negotiated session time-out, counted from
   the last packet read from ZooKeeper, is reported as GIVEN_UP, once
   (Curator's "simulated session expiration"; the rule and why are in
   :mod:`zkcoord.core.session_loss`). The session may still be alive, so
   GIVEN_UP is followed by RECONNECTED (the same session) or by LOST then
   CONNECTED (ZooKeeper expired it). kazoo does not say when it last read
   from the server, nor which time-out the server negotiated: both are
   read off its connection handler (:meth:`ZkConnection._observe`); where
   that is not possible, the time-out asked for and the moment of
   SUSPENDED are used (later than the server, never earlier).
7. While connected, a connection on which nothing was read for two thirds
   of the session time-out is dropped (ZooKeeper's own client's read
   time-out; :func:`~zkcoord.core.session_loss.silent_too_long`): kazoo
   would notice only when a ping goes unanswered, and it pings only when it
   has sent nothing else for a while. kazoo then reports SUSPENDED and
   reconnects. A thread of the connection looks every sixth of the
   time-out (at most every second).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError, ConnectionClosedError, ConnectionLoss, KazooException, NoNodeError, SessionClosedRequireSaslError,
)
from kazoo.handlers.threading import KazooTimeoutError, SequentialThreadingHandler
from kazoo.protocol.serialization import SASL, Auth
from kazoo.protocol.states import KazooState, KeeperState

from zkcoord.core.session_loss import Suspension, silent_too_long
from zkcoord.errors import AuthenticationError, ConfigError, ServiceUnavailableError, ZkcoordError
from zkcoord.password import HIDDEN
from zkcoord.zk import aio
from zkcoord.zk.auth import ZkSecurity, digest_mismatch
from zkcoord.zk.paths import ROOT, check_absolute

__all__ = ["SessionEvent", "ZkConnection", "parse_hosts", "refusals", "login_refused", "wait_znode_gone", "end_session"]

log = logging.getLogger(__name__)


class _HideCredentials(logging.Filter):
    """kazoo logs every request it sends at DEBUG (``-vv``): an Auth packet
    holds a digest login's password, a SASL packet a response computed from
    one. Their text is replaced before any handler sees the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and any(isinstance(a, (Auth, SASL)) for a in args):
            record.args = tuple(_hidden(a) for a in args)
        return True


def _hidden(arg: object) -> object:
    if isinstance(arg, Auth):
        return f"Auth(scheme={arg.scheme!r}, auth={HIDDEN})"
    if isinstance(arg, SASL):
        return f"SASL(token={HIDDEN})"
    return arg


logging.getLogger("kazoo.client").addFilter(_HideCredentials())  # every KazooClient logs there (ours included)


class SessionEvent(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    GIVEN_UP = "given up"
    RECONNECTED = "reconnected"
    LOST = "lost"


Listener = Callable[[SessionEvent], None]


def parse_hosts(hosts: str) -> tuple[list[tuple[str, int]], str | None]:
    """``"a:2181,b:2181/kafka"`` -> ``([("a", 2181), ("b", 2181)], "/kafka")``."""
    if not isinstance(hosts, str) or not hosts.strip():
        raise ConfigError("the ZooKeeper connection string is empty; expected HOST:PORT[,HOST:PORT...][/chroot]")
    servers, slash, chroot = hosts.strip().partition("/")
    chroot_path = None
    if slash and chroot:
        chroot_path = check_absolute("/" + chroot, f"chroot of ZooKeeper connection string {hosts!r}")
    found = []
    for item in servers.split(","):
        host, sep, port = item.strip().rpartition(":")
        host = host.strip("[]")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"ZooKeeper connection string {hosts!r}: {item!r} is not HOST:PORT "
                              "(expected HOST:PORT[,HOST:PORT...][/chroot])")
        found.append((host, int(port)))
    return found, chroot_path


_FIRST_WAIT_S = 0.05  # a server that is up answers sooner: no probe then
_REFUSED_ROUNDS = 3  # refused this many times in a row, _REFUSED_GAP_S apart: nothing listens
_REFUSED_GAP_S = 0.1
_PROBE_TIMEOUT_S = 1.0


def refusals(servers: list[tuple[str, int]], timeout_s: float = _PROBE_TIMEOUT_S) -> list[str] | None:
    """Why no server can be connected to, when each one refuses the TCP
    connection or does not resolve; None as soon as one accepts or does not
    answer within ``timeout_s`` (it may be slow: not a refusal)."""
    reasons = []
    for host, port in servers:
        try:
            addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            reasons.append(f"{host} does not resolve ({exc.strerror})")
            continue
        for family, kind, proto, _, address in addresses:
            try:
                with socket.socket(family, kind, proto) as probe:
                    probe.settimeout(timeout_s)
                    probe.connect(address)
            except ConnectionRefusedError:
                continue
            except OSError:  # timed out, unreachable for now: not a refusal
                return None
            return None  # it listens
        reasons.append(f"{host}:{port} refused the connection")
    return reasons


class SelectHandler(SequentialThreadingHandler):
    """kazoo's threading handler, waiting with ``select.select`` while every
    descriptor fits it (below ``FD_SETSIZE``), else as kazoo does.

    kazoo's connection thread waits once per request it sends and per answer
    it reads, and kazoo's own wait builds, fills and closes a new epoll
    object each time: about 100 us of CPU per request, which for a task's
    thousands of pipelined requests was the largest single cost of apply.
    """

    def select(self, rlist, wlist, xlist, timeout=None):  # noqa: D102 (kazoo's signature)
        try:
            low = all(_fileno(f) < _FD_SETSIZE for f in (*rlist, *wlist, *xlist))
        except (TypeError, ValueError, OSError):
            low = False
        if not low:
            return super().select(rlist, wlist, xlist, timeout)
        try:
            return select.select(rlist, wlist, xlist, timeout)
        except ValueError:  # a descriptor closed meanwhile: kazoo's own wait says so as kazoo expects
            return super().select(rlist, wlist, xlist, timeout)


_FD_SETSIZE = 1024


def _fileno(obj) -> int:
    return obj if isinstance(obj, int) else obj.fileno()


class ServerLink(NamedTuple):
    """One connection of kazoo's (:meth:`ZkConnection.current_link`)."""

    number: int  # 1, 2, ...: a new one each time kazoo connects again
    host: str
    port: int


class ZkConnection:
    """A started KazooClient plus session events. No I/O until :meth:`start`.

    ``request_timeout_ms`` bounds every awaited ZooKeeper step of the zk
    adapters (retries included); it defaults to the session time-out.
    """

    def __init__(self, hosts: str, *, session_timeout_ms: int = 10_000, connect_timeout_ms: int = 15_000,
                 request_timeout_ms: int | None = None, require_chroot: bool = True, handler: Any = None,
                 fail_when_refused: bool = False, security: ZkSecurity | None = None) -> None:
        self.servers, self.chroot = parse_hosts(hosts)
        self.security = security  # the login and the ACL of what we create (rule 5); None: neither
        self.handler = handler  # a kazoo handler; None: a new SelectHandler per client
        self.multi_read: bool | None = None  # the server has multiRead (bulk_reads.read_many asks once)
        self.hosts = hosts.strip()
        self.session_timeout_ms = session_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.request_timeout_ms = request_timeout_ms or session_timeout_ms
        self.require_chroot = require_chroot
        self.fail_when_refused = fail_when_refused  # a command's: rule 4 of the module docstring
        self.retry = aio.AsyncRetry(self.hosts, self.request_timeout_ms / 1000)
        self._client: KazooClient | None = None
        self._link_of: tuple[Any, ServerLink | None] = (None, None)  # kazoo's socket, and what current_link says
        self._listeners: dict[Listener, asyncio.AbstractEventLoop | None] = {}
        self._session_id: int | None = None
        self._suspended = False
        self._stopping = False
        self._started = False  # start() returned: a refused login is then a reconnection's
        self._login_refused = False  # kazoo said AUTH_FAILED (its connection then closes: rule 5)
        # Rule 6: when ZooKeeper was last heard (monotonic s, written by kazoo's connection thread), the
        # session time-out it negotiated, the suspension under way and its timer. The clock and the timer
        # factory are attributes so that a test can drive them.
        self.heard_at: float | None = None
        self.negotiated_timeout_ms: int | None = None
        self.suspension: Suspension | None = None
        self.given_up: str | None = None  # why, while the session is treated as lost (GIVEN_UP, rule 6)
        self.last_given_up: str | None = None  # why, the last time (kept: a listener may read it after a LOST)
        self.clock: Callable[[], float] = time.monotonic
        self.start_timer: Callable[[float, Callable[[], None]], Any] = _start_timer
        self._timer: Any = None
        self._lock = threading.Lock()  # kazoo's thread and the timer's decide one after the other
        self._watchdog: threading.Thread | None = None  # rule 7
        self._watchdog_stop = threading.Event()

    @property
    def client(self) -> KazooClient:
        if self._client is None:
            raise RuntimeError("ZkConnection.start() has not been called")
        return self._client

    @property
    def session_credentials(self) -> tuple[int, bytes] | None:
        """(session id, password) of the live session, None without one:
        whoever holds them can end the session (:func:`end_session`)."""
        client_id = self._client.client_id if self._client is not None else None
        return (client_id[0], bytes(client_id[1])) if client_id and client_id[0] else None

    @property
    def session_id(self) -> int | None:
        """The current session's id, None while disconnected."""
        client_id = self._client.client_id if self._client is not None else None
        return client_id[0] if client_id else None

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.connected and not self._stopping

    def current_link(self) -> ServerLink | None:
        """kazoo's connection now: a number that changes with each new one,
        and the address of its server; None while not connected. Read off
        kazoo's socket, the address looked up only for a new socket."""
        client = self._client
        if client is None or self._stopping or not client.connected:
            return None
        sock = getattr(getattr(client, "_connection", None), "_socket", None)
        if sock is None:
            return None
        if sock is not self._link_of[0]:
            try:
                peer = sock.getpeername()
            except (OSError, AttributeError):
                return None
            number = self._link_of[1].number + 1 if self._link_of[1] is not None else 1
            self._link_of = (sock, ServerLink(number, peer[0], peer[1]))
        return self._link_of[1]

    def start(self) -> None:
        """Connect, or raise ServiceUnavailableError naming address and time-out
        (AuthenticationError when ZooKeeper refuses the login: rule 5).

        Blocks up to ``connect_timeout_ms``: call it before serving, or with
        ``await asyncio.to_thread(conn.start)`` (``async with conn`` does).
        """
        options = self.security.kazoo_options() if self.security is not None else {}  # reads a JAAS file
        client = KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000,
                             connection_retry={"max_tries": -1, "max_delay": 1.0},
                             handler=self.handler if self.handler is not None else SelectHandler(), **options)
        client.add_listener(self._on_kazoo_state)
        self._observe(client)
        self._stopping = False
        self._started = False
        self._login_refused = False  # kazoo said AUTH_FAILED (its connection then closes: rule 5)
        self._client = client  # before start: the first CONNECTED reads its session id
        live = client.start_async()
        failure = self._wait_for_session(live)
        if failure is not None:
            self._client = None
            client.stop()
            client.close()
            raise ServiceUnavailableError(f"cannot connect to ZooKeeper at {self.hosts}: {failure}; check the "
                                          "address and that ZooKeeper is up") from None
        if self._logs_in:
            refused = self._login_refusal(client)
            if refused is not None:
                self.stop()
                raise refused
        try:
            chroot_missing = self.chroot and self.require_chroot and client.exists("/") is None
        except KazooException as exc:  # ZooKeeper requires a login we do not have, say
            self.stop()
            raise aio.translate(exc, "read the chroot", self.hosts) from None
        if chroot_missing:
            self.stop()
            raise ConfigError(f"the chroot {self.chroot} of {self.hosts} does not exist in ZooKeeper; "
                              "create it (zkCli.sh create " + self.chroot + ") or fix the connection string")
        self._started = True
        self._start_watchdog()
        if self._logs_in:
            log.info("ZooKeeper session connected (%s), logged in with %s", self.hosts, self.security.describe())

    def _wait_for_session(self, live: threading.Event) -> str | None:
        """Wait for kazoo's first session (``live``): None once it is up, else why not."""
        deadline = time.monotonic() + self.connect_timeout_ms / 1000
        wait_s, refused = _FIRST_WAIT_S, 0
        while self.fail_when_refused and refused < _REFUSED_ROUNDS:
            if live.wait(max(0.0, min(wait_s, deadline - time.monotonic()))):
                return None
            reasons = refusals(self.servers, min(_PROBE_TIMEOUT_S, max(0.01, deadline - time.monotonic())))
            if reasons is None:
                break  # something listens: wait for it
            refused, wait_s = refused + 1, _REFUSED_GAP_S
            if refused == _REFUSED_ROUNDS and not live.is_set():
                return ", ".join(reasons)
        if live.wait(max(0.0, deadline - time.monotonic())):
            return None
        return f"no answer within {self.connect_timeout_ms / 1000:g} s"

    def _login_refusal(self, client: KazooClient) -> ZkcoordError | None:
        """Wait for ZooKeeper's verdict on our login (rule 5): None once it is
        accepted, else the error to raise."""
        deadline = time.monotonic() + max(self.connect_timeout_ms, self.session_timeout_ms) / 1000 + 1
        started = time.monotonic()
        while True:
            try:
                # Queued behind the SASL exchange and the digest auth: answered once both are through.
                client.exists_async("/").get(timeout=max(0.01, deadline - time.monotonic()))
                break
            except AuthFailedError:
                return AuthenticationError(login_refused(self.hosts, self.security, len(self.servers),
                                                         time.monotonic() - started, self.session_timeout_ms))
            except SessionClosedRequireSaslError as exc:  # a digest login where ZooKeeper requires SASL
                return aio.translate(exc, f"log in ({self.security.describe()})", self.hosts)
            except ConnectionClosedError:
                # kazoo closes its connection right after AUTH_FAILED: a request made after that (our retry of
                # a ConnectionLoss) finds it closed, not refused.
                if self._login_refused:
                    return AuthenticationError(login_refused(self.hosts, self.security, len(self.servers),
                                                             time.monotonic() - started, self.session_timeout_ms))
                return ServiceUnavailableError(f"ZooKeeper at {self.hosts} closed the connection before it "
                                               f"confirmed the login ({self.security.describe()})")
            except ConnectionLoss:  # the connection dropped after CONNECTED: kazoo reconnects
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
            except client.handler.timeout_exception:
                break
        if not client.connected:
            return ServiceUnavailableError(f"ZooKeeper at {self.hosts} did not confirm the login "
                                           f"({self.security.describe()}) within "
                                           f"{max(self.connect_timeout_ms, self.session_timeout_ms) / 1000:g} s")
        return self._digest_refusal(client)

    def _digest_refusal(self, client: KazooClient) -> ZkcoordError | None:
        """ZooKeeper accepts any digest login: a wrong password shows as
        zkcoord's root znode granting the same user under another password."""
        if self.security.digest is None:
            return None
        try:
            acls, _ = client.get_acls(ROOT)
        except NoNodeError:
            return None
        except KazooException as exc:
            return aio.translate(exc, f"read the ACL of {ROOT}", self.hosts)
        user = digest_mismatch(acls, self.security)
        if user is None:
            return None
        return AuthenticationError(
            f"ZooKeeper at {self.hosts}: the digest login as user {user!r} has another password than the one "
            f"{ROOT} was secured with (ZooKeeper accepts any digest login, so the password only shows in the "
            "znodes' ACLs); check zookeeper_digest (ZKCOORD_ZOOKEEPER_DIGEST)")

    def _observe(self, client: KazooClient) -> None:
        """Rule 6: note when kazoo reads a packet from ZooKeeper, and the
        session time-out the server negotiated. kazoo keeps both to itself:
        its connection handler's ``_connect`` returns two thirds of the
        negotiated time-out (its read time-out, in ms) and ``_read_socket``
        reads each packet; this client's handler gets a wrapper of each
        (kazoo calls them through the instance). Without them (another kazoo),
        the suspension counts from SUSPENDED, with the time-out asked for."""
        handler = getattr(client, "_connection", None)
        connect = getattr(handler, "_connect", None)
        read_socket = getattr(handler, "_read_socket", None)
        if connect is None or read_socket is None:
            log.debug("kazoo's connection handler has no _connect/_read_socket: a suspension counts from "
                      "SUSPENDED, with the session time-out asked for")
            return

        def observed_connect(*args, **kwargs):
            read_timeout_ms, connect_timeout_ms = connect(*args, **kwargs)
            self.heard_at = self.clock()
            self.negotiated_timeout_ms = round(read_timeout_ms * 3 / 2)
            return read_timeout_ms, connect_timeout_ms

        def observed_read(*args, **kwargs):
            result = read_socket(*args, **kwargs)
            self.heard_at = self.clock()
            return result

        handler._connect = observed_connect
        handler._read_socket = observed_read

    def stop(self) -> None:
        """End the session (its ephemeral znodes go at once) and free the client."""
        self._stopping = True
        self._watchdog_stop.set()
        with self._lock:
            self._end_suspension()
        client, self._client = self._client, None
        if client is not None:
            client.remove_listener(self._on_kazoo_state)
            try:
                client.stop()
            finally:
                client.close()

    async def __aenter__(self) -> ZkConnection:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await asyncio.to_thread(self.stop)

    def add_listener(self, listener: Listener, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Call ``listener(event)`` on each session change: on ``loop``'s thread
        if given, else on kazoo's connection thread (then it must not block)."""
        self._listeners[listener] = loop

    def remove_listener(self, listener: Listener) -> None:
        self._listeners.pop(listener, None)

    def _on_kazoo_state(self, state: str) -> None:  # kazoo's connection thread: never block
        if self._stopping:
            return
        with self._lock:  # the suspension's timer decides under it too
            self._on_state(state)

    def _on_state(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            self._suspended = True
            self._begin_suspension()
            self._emit(SessionEvent.SUSPENDED)
        elif state == KazooState.LOST:
            self._suspended = False
            self._end_suspension()
            client = self._client
            if client is not None and client.client_state == KeeperState.AUTH_FAILED:
                self._login_refused = True
            if self._login_refused and self._started:
                log.error("ZooKeeper at %s refused our login (%s) on reconnecting; kazoo does not reconnect "
                          "after that: restart once the login is fixed", self.hosts,
                          self.security.describe() if self.security else "no login")
            if self._session_id is not None:
                self._session_id = None
                self._emit(SessionEvent.LOST)
        elif state == KazooState.CONNECTED:
            client_id = self._client.client_id if self._client is not None else None
            new_id = client_id[0] if client_id else None
            same = self._suspended and new_id is not None and new_id == self._session_id
            self._suspended = False
            self._end_suspension()
            if same:
                self._emit(SessionEvent.RECONNECTED)
                return
            if self._session_id is not None:  # a new session without a LOST first
                self._emit(SessionEvent.LOST)
            self._session_id = new_id
            self._emit(SessionEvent.CONNECTED)

    # -------------------------------------------------- rule 7: a connection that went silent
    def _start_watchdog(self) -> None:
        if self._watchdog is not None and self._watchdog.is_alive() and not self._watchdog_stop.is_set():
            return
        self._watchdog_stop = stop = threading.Event()
        self._watchdog = threading.Thread(target=self._watch_silence, args=(stop,), name="zkcoord-zk-silence",
                                          daemon=True)
        self._watchdog.start()

    def _watch_silence(self, stop: threading.Event) -> None:
        while not stop.wait(max(0.05, min(1.0, self._timeout_ms() / 6000))):
            try:
                self.check_silence()
            except Exception:  # never let the watchdog die of a bug; say it
                log.exception("ZooKeeper connection watchdog failed")

    def _timeout_ms(self) -> int:
        return self.negotiated_timeout_ms or self.session_timeout_ms

    def check_silence(self) -> bool:
        """Rule 7: drop kazoo's connection if nothing was read on it for the
        read time-out while kazoo thinks it connected; whether it did."""
        with self._lock:
            client = self._client
            if (self._stopping or client is None or self._suspended or self.heard_at is None
                    or not client.connected):
                return False
            now_ms, heard_ms, timeout_ms = self.clock() * 1000, self.heard_at * 1000, self._timeout_ms()
            if not silent_too_long(heard_ms, now_ms, timeout_ms):
                return False
            sock = getattr(getattr(client, "_connection", None), "_socket", None)
        if sock is None:
            return False
        log.warning("ZooKeeper (%s) not heard for %.0f ms on a connection kazoo still counts as live (its read "
                    "time-out is two thirds of the negotiated session time-out, %d ms): dropping the connection",
                    self.hosts, now_ms - heard_ms, timeout_ms)
        try:
            sock.shutdown(socket.SHUT_RDWR)  # kazoo's connection thread then reads the end, reports SUSPENDED
        except OSError as exc:
            log.debug("could not shut the ZooKeeper connection down: %s", exc)
            return False
        return True

    # -------------------------------------------------- rule 6: a suspension that lasts
    def _begin_suspension(self) -> None:
        """SUSPENDED (under the lock): start counting towards GIVEN_UP."""
        if self.given_up is not None:
            return  # already given up: nothing more to give (a reconnect attempt that dropped again)
        now_s = self.clock()
        timeout_ms = self.negotiated_timeout_ms or self.session_timeout_ms
        heard_ms = None if self.heard_at is None else self.heard_at * 1000
        self.suspension = suspension = Suspension.begin(now_s * 1000, heard_ms, timeout_ms)
        log.info("ZooKeeper connection lost (%s), not heard for %.0f ms: the session is given up in %.0f ms unless "
                 "the connection comes back first (negotiated session time-out %d ms)", self.hosts,
                 now_s * 1000 - suspension.heard_ms, suspension.wait_ms(now_s * 1000), timeout_ms)
        self._arm(suspension, now_s)

    def _arm(self, suspension: Suspension, now_s: float) -> None:
        self._timer = self.start_timer(suspension.wait_ms(now_s * 1000) / 1000,
                                       lambda: self._suspension_due(suspension))

    def _end_suspension(self) -> None:
        """The connection is back, the session is lost, or we stop (under the lock)."""
        self.suspension = None
        self.given_up = None
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _suspension_due(self, suspension: Suspension) -> None:
        """The timer of ``suspension`` (its own thread): GIVEN_UP if the
        suspension is still under way and long enough; else wait on."""
        with self._lock:
            if self._stopping or self.suspension is not suspension or self.given_up is not None:
                return
            now_s = self.clock()
            if not suspension.is_loss(now_s * 1000):
                self._arm(suspension, now_s)  # a timer that fired early
                return
            self._timer = None
            self.given_up = self.last_given_up = suspension.reason(now_s * 1000)
            log.warning("ZooKeeper session 0x%x given up (%s): %s", self._session_id or 0, self.hosts, self.given_up)
            self._emit(SessionEvent.GIVEN_UP)

    @property
    def _logs_in(self) -> bool:
        return self.security is not None and self.security.logs_in

    def _emit(self, event: SessionEvent) -> None:
        if self._started or not self._logs_in:  # a login not yet accepted: start() says how it went
            log.info("ZooKeeper session %s (%s)", event.value, self.hosts)
        for listener, loop in list(self._listeners.items()):
            if loop is not None:
                aio.post(loop, listener, event)
                continue
            try:
                listener(event)
            except Exception:  # a listener's bug must not stop the others
                log.exception("ZooKeeper session listener %r failed", listener)


def _start_timer(delay_s: float, callback: Callable[[], None]) -> threading.Timer:
    timer = threading.Timer(delay_s, callback)
    timer.daemon = True
    timer.name = "zkcoord-session-timer"
    timer.start()
    return timer


def login_refused(hosts: str, security: ZkSecurity | None, servers: int, elapsed_s: float,
                  session_timeout_ms: int) -> str:
    """The one line saying ZooKeeper refused ``security``'s login. A server
    without SASL never answers the exchange: kazoo gives up after the
    session time-out over the number of servers, which tells it from a
    refusal (answered at once)."""
    what = security.describe() if security is not None else "the login"
    sasl = security is not None and (security.sasl is not None or bool(security.sasl_jaas_file))
    unanswered = sasl and elapsed_s >= 0.8 * session_timeout_ms / 1000 / max(1, servers)
    if unanswered:
        why = (f"the server did not answer the SASL exchange within {elapsed_s:.0f} s: is SASL enabled on it "
               "(authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider in zoo.cfg and a "
               "Server section in its JAAS file)?")
    else:
        why = "a wrong password or a user the server does not know; check the login's user and password"
    return f"ZooKeeper at {hosts} refused the login ({what}): {why}"


def start_short_lived(client: KazooClient, timeout_s: float) -> None:
    """Start ``client``, a short-lived session of a tool or a test, within
    ``timeout_s``: AuthFailedError if ZooKeeper refused its login. kazoo
    reports CONNECTED before its SASL exchange, so a refusal answered at
    once can come between its start() waking and its check of the state:
    start() then says "Connection time-out" although nothing timed out. A
    listener notes the refusal as it happens."""
    refused = threading.Event()

    def note(state: str) -> None:  # kazoo's connection thread: the state is already set
        if state == KazooState.LOST and client.client_state == KeeperState.AUTH_FAILED:
            refused.set()

    client.add_listener(note)
    try:
        client.start(timeout=timeout_s)
    except KazooTimeoutError:
        if refused.is_set():
            raise AuthFailedError() from None
        raise


def wait_znode_gone(hosts: str, path: str, timeout_s: float = 60.0, security: ZkSecurity | None = None) -> bool:
    """Block, with a short-lived session of its own, until ``path`` does not
    exist in the ZooKeeper at ``hosts`` (an ephemeral registration of a
    process killed with -9 stays until its session times out); whether it
    went within ``timeout_s``. ServiceUnavailableError if ZooKeeper cannot be
    reached, AuthenticationError if it refuses ``security``'s login. For the
    sandbox's restarts, never on an event loop."""
    client = KazooClient(hosts=hosts, timeout=10, **(security.kazoo_options() if security is not None else {}))
    started = time.monotonic()
    try:
        start_short_lived(client, 30)
        deadline = time.monotonic() + timeout_s
        while client.exists(path):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.25)
        return True
    except SessionClosedRequireSaslError as exc:
        raise aio.translate(exc, f"wait for {path} to go", hosts) from None
    except AuthFailedError:
        servers = len(parse_hosts(hosts)[0])
        raise AuthenticationError(login_refused(hosts, security, servers, time.monotonic() - started,
                                                10_000)) from None
    except (KazooException, KazooTimeoutError, OSError) as exc:
        raise ServiceUnavailableError(f"cannot reach ZooKeeper at {hosts}: {type(exc).__name__} {exc}") from None
    finally:
        client.stop()
        client.close()


def end_session(hosts: str, session_id: int, password: bytes, timeout_s: float = 10.0,
                security: ZkSecurity | None = None) -> bool:
    """End another client's ZooKeeper session, as its expiry would: attach
    to it with its id and password and close it (what Curator's test
    utilities do to kill a session). Its ephemeral znodes go at once and
    its watchers hear it. True if it was ended here, False if ZooKeeper had
    already expired it. ServiceUnavailableError if ZooKeeper cannot be
    reached within ``timeout_s``; never on an event loop."""
    client = KazooClient(hosts=hosts, timeout=10, client_id=(session_id, password),
                         **(security.kazoo_options() if security is not None else {}))
    expired = threading.Event()
    client.add_listener(lambda state: expired.set() if state == KazooState.LOST else None)
    try:
        start_short_lived(client, timeout_s)
        attached = not expired.is_set() and client.client_id is not None and client.client_id[0] == session_id
    except AuthFailedError:
        raise AuthenticationError(login_refused(hosts, security, len(parse_hosts(hosts)[0]), 0.0, 10_000)) from None
    except (KazooException, KazooTimeoutError, OSError) as exc:
        raise ServiceUnavailableError(f"cannot end ZooKeeper session 0x{session_id:x} at {hosts}: "
                                      f"{type(exc).__name__} {exc}") from None
    finally:
        client.stop()  # sends closeSession for the session it holds (the given one, or a new one)
        client.close()
    return attached
