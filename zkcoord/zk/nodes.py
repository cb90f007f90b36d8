"""Which daemons are alive, and where clients reach them.

This module owns ``/zkcoord/nodes/<node-id>``: one ephemeral znode per
running daemon, like Kafka's ``/brokers/ids/<id>``, holding
``{"host":"coord-1.example","port":9300,"version":"0.1.0",
"start_time_ms":1700000000000,"pid":4242}`` (plus ``"gateway_host"`` and
``"gateway_port"`` when the daemon runs a gateway: where stock Kafka clients
reach it), and ``/zkcoord/node-id-seq``,
whose version hands out node ids to daemons configured with ``-1``.

Rules:

1. A node id held by another live daemon is a NodeIdInUseError naming the id
   and the holder's host:port. A ``NodeExistsError`` whose znode belongs to
   our own session is a create of ours that landed: success.
2. Allocated ids start at 1001 and are never reused (Kafka's
   ``reserved.broker.max.id`` + ``/brokers/seqid``), so they cannot collide
   with configured ids 0..1000 of daemons that are down for a moment.
3. After a session is LOST our znode is gone: on the next CONNECTED we
   register again with the same id. A failure there cannot be raised to a
   caller; it is passed to ``on_error`` and raised by :meth:`check`.
4. Lookups of one node are cached while a watch on its znode holds.
5. Beside its registration each daemon keeps ``/zkcoord/node-sessions/<node-id>``
   (ephemeral, ``{"session_id":"0x...","password":"<hex>"}``): with it
   another daemon that has proof this one is dead (its port refuses
   connections: :mod:`zkcoord.core.peer_probe`) ends its session
   (:meth:`NodeRegistry.end_session`) rather than wait for ZooKeeper to
   expire it. With ``set_acl`` only the daemons' own login may read it
   (``CREATOR_ALL_ACL``; ``zkcoord zookeeper-acl`` leaves it be); whoever
   can read it can end the session, which any writer of zkcoord's znodes
   could disrupt anyway. Failing to write it costs only the early end.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

from kazoo.exceptions import InvalidACLError, NoAuthError, NodeExistsError, NoNodeError
from kazoo.retry import ForceRetryError
from kazoo.security import CREATOR_ALL_ACL

import zkcoord
from zkcoord.core.legacy_values import partition_number
from zkcoord.errors import NodeIdInUseError, StateError, ZkcoordError
from zkcoord.tasks import Background
from zkcoord.zk import aio, paths
from zkcoord.zk.auth import OPEN_ACL
from zkcoord.zk.connection import SessionEvent, ZkConnection, end_session, wait_znode_gone

__all__ = ["NodeInfo", "NodeRegistry", "ALLOCATED_ID_BASE", "read_nodes", "wait_node_unregistered"]

log = logging.getLogger(__name__)

ALLOCATED_ID_BASE = 1000
_MAX_ALLOCATIONS = 20


@dataclass(frozen=True)
class NodeInfo:
    node_id: int
    host: str
    port: int
    version: str
    start_time_ms: int
    pid: int
    gateway_host: str = ""  # "" and 0: the daemon runs no gateway
    gateway_port: int = 0

    @property
    def gateway(self) -> tuple[str, int] | None:
        """(host, port) of the daemon's gateway, None without one."""
        return (self.gateway_host, self.gateway_port) if self.gateway_port else None

    def to_json(self) -> bytes:
        fields = asdict(self)
        del fields["node_id"]  # it is the znode's name
        if not self.gateway_port:
            del fields["gateway_host"], fields["gateway_port"]
        return json.dumps(fields, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, node_id: int, data: bytes) -> NodeInfo:
        try:
            raw = json.loads(data.decode())
            return cls(node_id, str(raw["host"]), int(raw["port"]), str(raw.get("version", "")),
                       int(raw.get("start_time_ms", 0)), int(raw.get("pid", 0)),
                       str(raw.get("gateway_host", "")), int(raw.get("gateway_port", 0)))
        except (UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise StateError(f"node znode {paths.node(node_id)} holds {data[:80]!r}, not a node registration "
                             f"({type(exc).__name__}: {exc})") from None


class NodeRegistry:
    """Registers this daemon and looks others up."""

    def __init__(self, conn: ZkConnection, *, host: str, port: int, node_id: int = -1,
                 version: str = zkcoord.__version__, on_error: Callable[[ZkcoordError], None] | None = None,
                 start_time_ms: int | None = None, pid: int | None = None,
                 gateway: tuple[str, int] | None = None) -> None:
        if node_id != -1:
            paths.node(node_id)  # validates
        self._conn = conn
        self._wanted_id = node_id
        self._host, self._port, self._version = host, port, version
        self._gateway = gateway
        self._start_time_ms = int(time.time() * 1000) if start_time_ms is None else start_time_ms
        self._pid = os.getpid() if pid is None else pid
        self._on_error = on_error
        self.node_id: int | None = None  # set by register()
        self._failure: ZkcoordError | None = None
        self._cache: dict[int, NodeInfo | None] = {}
        self._cache_epoch: dict[int, int] = {}
        self._reading: dict[int, tuple[int, asyncio.Future]] = {}  # node id -> (cache epoch, its read in flight)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._background = Background(log, "node registry")

    def info(self, node_id: int) -> NodeInfo:
        gateway_host, gateway_port = self._gateway or ("", 0)
        return NodeInfo(node_id, self._host, self._port, self._version, self._start_time_ms, self._pid,
                        gateway_host, gateway_port)

    # -------------------------------------------------------- registration
    async def register(self) -> int:
        """Create our ephemeral node znode; return our node id.

        NodeIdInUseError if another live daemon holds the id;
        ServiceUnavailableError if ZooKeeper does not answer in time.
        """
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._conn.add_listener(self._on_session, self._loop)
        if self.node_id is None and self._wanted_id == -1:
            self.node_id = await self._allocate()
        else:
            node_id = self._wanted_id if self.node_id is None else self.node_id
            await self._conn.retry(f"register node {node_id}", self._inner_register, node_id)
            self.node_id = node_id
        self._failure = None
        return self.node_id

    async def _inner_register(self, node_id: int) -> None:
        client, path = self._conn.client, paths.node(node_id)
        try:
            await aio.call(client.create_async, path, self.info(node_id).to_json(), ephemeral=True, makepath=True)
            await self._record_session(node_id)
            return
        except NodeExistsError:
            pass
        try:
            data, stat = await aio.call(client.get_async, path)
        except NoNodeError:
            raise ForceRetryError() from None  # the holder just left: create again
        if stat.ephemeralOwner == self._conn.session_id:
            await self._record_session(node_id)
            return  # our own create, whose answer was lost
        try:
            holder = NodeInfo.from_json(node_id, data)
            extra = ", ".join(x for x in (holder.pid and f"pid {holder.pid}",
                                           holder.version and f"version {holder.version}") if x)
            who = f"the daemon at {holder.host}:{holder.port}" + (f" ({extra})" if extra else "")
        except StateError:
            who = f"a process that wrote {data[:40]!r}"
        raise NodeIdInUseError(f"node id {node_id} is in use by {who} ({path}); give this daemon another "
                               "--node-id (or -1 to allocate one), or stop the other daemon")

    async def _record_session(self, node_id: int) -> None:
        """Rule 5: our session's id and password beside the registration
        (part of the registration's idempotent step). A record of an
        earlier session of this node id is replaced; a failure other than
        ZooKeeper's connection is logged and costs only the early end."""
        credentials = self._conn.session_credentials
        if credentials is None:
            return
        client, path = self._conn.client, paths.node_session(node_id)
        session_id, password = credentials
        data = json.dumps({"session_id": f"0x{session_id:x}", "password": password.hex()},
                          separators=(",", ":")).encode()
        security = self._conn.security
        acl = list(CREATOR_ALL_ACL) if security is not None and security.set_acl else OPEN_ACL
        try:
            for _ in range(2):  # an earlier session's record (a registration of this id before ours) is replaced
                try:
                    await aio.call(client.create_async, path, data, acl=acl, ephemeral=True, makepath=True)
                    return
                except NodeExistsError:
                    pass
                try:
                    _, stat = await aio.call(client.get_async, path)
                    if stat.ephemeralOwner == session_id:
                        return  # ours, whose answer was lost
                    await aio.call(client.delete_async, path, stat.version)
                except NoNodeError:
                    pass
            raise ForceRetryError()  # replaced twice meanwhile: the registration's step again
        except (NoAuthError, InvalidACLError) as exc:  # rule 5: without the record only the early end is lost
            log.warning("node %s: could not record its ZooKeeper session at %s (%s: %s): another daemon cannot end "
                        "it early if this one dies; ZooKeeper's expiry still will", node_id, path,
                        type(exc).__name__, exc)

    async def end_session(self, node_id: int, seen: NodeInfo, timeout_s: float = 10.0) -> str:
        """Rule 5: end the ZooKeeper session of ``node_id``, whose registration
        is ``seen`` (proved dead by its refusing port). Only that same
        registration's session is ended: what was done, for the log:
        ``ended``, ``already-expired``, ``gone`` (it left meanwhile),
        ``registered-again`` (a new registration), ``no-session-record``
        (a daemon that keeps none, or unreadable to our login)."""
        return await self._conn.retry(f"end the session of node {node_id}", self._inner_end_session, node_id, seen,
                                      timeout_s)

    async def _inner_end_session(self, node_id: int, seen: NodeInfo, timeout_s: float) -> str:
        client = self._conn.client
        try:
            data, stat = await aio.call(client.get_async, paths.node(node_id))
        except NoNodeError:
            return "gone"
        try:
            record, _ = await aio.call(client.get_async, paths.node_session(node_id))
        except (NoNodeError, NoAuthError):
            return "no-session-record"  # a daemon of a version that keeps none, or a record our login cannot read
        try:
            if NodeInfo.from_json(node_id, data) != seen:
                return "registered-again"
        except StateError:
            return "registered-again"
        try:
            raw = json.loads(record.decode())
            session_id, password = int(raw["session_id"], 16), bytes.fromhex(raw["password"])
        except (UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
            return "no-session-record"
        if session_id != stat.ephemeralOwner:
            return "registered-again"  # the record of another session (a registration under way)
        ended = await asyncio.to_thread(end_session, self._conn.hosts, session_id, password, timeout_s,
                                        self._conn.security)
        return "ended" if ended else "already-expired"

    async def _allocate(self) -> int:
        for _ in range(_MAX_ALLOCATIONS):
            sequence = await self._conn.retry("allocate a node id", self._inner_next_sequence)
            node_id = ALLOCATED_ID_BASE + sequence
            try:
                await self._conn.retry(f"register node {node_id}", self._inner_register, node_id)
                return node_id
            except NodeIdInUseError:
                log.info("allocated node id %s is taken by a configured daemon; trying the next", node_id)
        raise ZkcoordError(f"could not allocate a free node id in {_MAX_ALLOCATIONS} tries")

    async def _inner_next_sequence(self) -> int:
        client = self._conn.client
        try:
            stat = await aio.call(client.set_async, paths.NODE_ID_SEQUENCE, b"", -1)
        except NoNodeError:
            try:
                await aio.call(client.create_async, paths.NODE_ID_SEQUENCE, b"", makepath=True)
            except NodeExistsError:
                pass  # another daemon (or our lost answer) created it
            raise ForceRetryError() from None
        return stat.version

    async def unregister(self) -> None:
        """Delete our znode (stop() of the connection would do it too)."""
        if self._loop is not None:
            self._conn.remove_listener(self._on_session)
            self._loop = None
        if self.node_id is not None:
            await self._conn.retry(f"unregister node {self.node_id}", self._inner_unregister, self.node_id)

    async def _inner_unregister(self, node_id: int) -> None:
        try:
            data, stat = await aio.call(self._conn.client.get_async, paths.node(node_id))
        except NoNodeError:
            return
        if stat.ephemeralOwner == self._conn.session_id:
            try:
                await aio.call(self._conn.client.delete_async, paths.node(node_id), stat.version)
            except NoNodeError:
                pass

    def check(self) -> None:
        """Raise the failure of a background re-registration, if any."""
        if self._failure is not None:
            raise self._failure

    def _on_session(self, event: SessionEvent) -> None:  # on the loop thread
        for node_id in list(self._cache):
            self._invalidate(node_id)
        if event is SessionEvent.CONNECTED and self.node_id is not None:
            self._background.spawn(self._reregister(), f"register node {self.node_id} again")

    async def _reregister(self) -> None:
        try:
            await self._conn.retry(f"register node {self.node_id} again", self._inner_register, self.node_id)
            log.info("node %s registered again after the ZooKeeper session was lost", self.node_id)
        except ZkcoordError as exc:
            log.error("could not register node %s again: %s", self.node_id, exc)
            self._failure = exc
            if self._on_error is not None:
                try:
                    self._on_error(exc)
                except Exception:
                    log.exception("node registration error callback failed")

    # -------------------------------------------------------------- lookups
    async def nodes(self, on_change: Callable[[], None] | None = None) -> dict[int, NodeInfo]:
        """Every registered daemon (unreadable registrations are skipped).
        ``on_change`` is called once, on the loop, when a daemon next
        registers or leaves."""
        return await self._conn.retry("list the zkcoord nodes", self._inner_nodes, on_change)

    async def _inner_nodes(self, on_change: Callable[[], None] | None = None) -> dict[int, NodeInfo]:
        watch = None
        if on_change is not None:
            loop = asyncio.get_running_loop()
            watch = lambda event: aio.post(loop, on_change)  # noqa: E731
        return await read_nodes(self._conn.client, watch)

    async def node(self, node_id: int) -> NodeInfo | None:
        """One daemon's registration, None if it is not running."""
        paths.node(node_id)
        if node_id in self._cache:
            return self._cache[node_id]
        # One read at a time per node: a takeover's burst of FindCoordinators asks the same
        # registration thousands of times before the first answer fills the cache. A read begun
        # before an invalidation is not joined (it may answer what the watch said has changed).
        epoch = self._cache_epoch.get(node_id, 0)
        reading = self._reading.get(node_id)
        if reading is None or reading[0] != epoch:
            future = asyncio.ensure_future(self._conn.retry(f"look up node {node_id}", self._inner_node, node_id))
            self._reading[node_id] = reading = (epoch, future)
            future.add_done_callback(lambda done: self._read_done(node_id, done))
        return await asyncio.shield(reading[1])

    def _read_done(self, node_id: int, future: asyncio.Future) -> None:
        if node_id in self._reading and self._reading[node_id][1] is future:
            del self._reading[node_id]
        if not future.cancelled():
            future.exception()  # retrieved: every waiter may have gone

    async def _inner_node(self, node_id: int) -> NodeInfo | None:
        epoch = self._cache_epoch.get(node_id, 0)
        loop = asyncio.get_running_loop()
        watch = lambda event: aio.post(loop, self._invalidate, node_id)  # noqa: E731
        try:
            data, _ = await aio.call(self._conn.client.get_async, paths.node(node_id), watch)
            found = NodeInfo.from_json(node_id, data)
        except NoNodeError:
            return None  # not cached: no watch is set on an absent znode
        if self._cache_epoch.get(node_id, 0) == epoch:
            self._cache[node_id] = found
        return found

    async def address(self, node_id: int) -> tuple[str, int] | None:
        """``(host, port)`` a daemon advertises, None if it is not running."""
        found = await self.node(node_id)
        return None if found is None else (found.host, found.port)

    def _invalidate(self, node_id: int) -> None:
        self._cache_epoch[node_id] = self._cache_epoch.get(node_id, 0) + 1
        self._cache.pop(node_id, None)


async def read_nodes(client, watch: Callable | None = None) -> dict[int, NodeInfo]:
    """Every daemon registered under ``/zkcoord/nodes``, by node id; one
    idempotent step (run it under the connection's retry). Names that are not
    node ids are not registrations; an unreadable registration is logged and
    left out. ``watch`` goes on the directory (its children, or its creation)."""
    try:
        children = await aio.call(client.get_children_async, paths.NODES, watch)
    except NoNodeError:
        if watch is not None:  # the first daemon's registration creates it
            await aio.call(client.exists_async, paths.NODES, watch)
        return {}
    ids = sorted(n for c in children if (n := partition_number(c)) is not None)  # ASCII digits up to int32
    outcomes = await aio.gather(asyncio.get_running_loop(), [client.get_async(paths.node(i)) for i in ids])
    found = {}
    for node_id, outcome in zip(ids, outcomes):
        if isinstance(outcome, NoNodeError):
            continue
        if isinstance(outcome, BaseException):
            raise outcome
        try:
            found[node_id] = NodeInfo.from_json(node_id, outcome[0])
        except StateError as exc:
            log.warning("%s", exc)
    return found


def wait_node_unregistered(hosts: str, node_id: int, timeout_s: float = 60.0, security=None) -> bool:
    """Block until ``/zkcoord/nodes/<node_id>`` is gone from the ZooKeeper at
    ``hosts``: a daemon killed with -9 keeps it until its session times out,
    and a new daemon with that id fails with NodeIdInUseError meanwhile.
    Whether it went within ``timeout_s``; ServiceUnavailableError if
    ZooKeeper cannot be reached. ``security``: the ZooKeeper login (ZkSecurity)."""
    return wait_znode_gone(hosts, paths.node(node_id), timeout_s, security)
