"""The gateway of one daemon: its listeners, its connections, and what it
tells clients about the cluster.

Owns the gateway's own port (bound before the daemon registers, since its
address is part of the registration) and one port per broker (bound when
the broker is first seen, :mod:`zkcoord.core.gateway` rule 3), every client
connection on them (:mod:`.connection`), the :class:`~.cluster.ClusterView`
of the brokers, and the list of the daemons' gateways read from their
registrations in ZooKeeper (they are the nodes Metadata adds, and where
FindCoordinator sends a group's members).

A client connection idle for ``connections_max_idle_ms`` (nothing read from
or written to the client, nothing in flight), or whose unfinished request
frame started that long ago, is closed, as the daemon's listener closes
its own (:class:`zkcoord.wire.connections.IdleSweep`).

``stop()`` closes the listeners and every connection (each closes its broker
connection), then stops the background refreshes.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import ssl
from dataclasses import dataclass

from kafka.protocol.admin.cluster import DescribeClusterResponse
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceResponse

from zkcoord.config import DaemonConfig, parse_host_port, parse_listener
from zkcoord.core import limits
from zkcoord.core.api_keys import DESCRIBE_CLUSTER, FETCH, METADATA, PRODUCE
from zkcoord.core.gateway import (
    BrokerPorts, advertised_versions, colliding_broker_ids, gateway_node_id, parse_broker_ids,
)
from zkcoord.errors import ConfigError, ZkcoordError
from zkcoord.gateway.cluster import Broker, ClusterView
from zkcoord.gateway.connection import ClientConnection
from zkcoord.gateway.rewrite import RESPONSE_CLASSES, AddressBook, GatewayNode, rewrite_addresses
from zkcoord.gateway.upstream import Expected
from zkcoord.tasks import Background
from zkcoord.wire.connections import IdleSweep
from zkcoord.wire.listener_security import PLAINTEXT_LISTENER, TLS_HANDSHAKE_TIMEOUT_S, ListenerSecurity
from zkcoord.wire.listening import DEFAULT_LISTEN_SOCKETS, listening_sockets
from zkcoord.wire.responses import decode_response_frame, encode_response_frame

__all__ = ["Gateway", "GatewaySettings"]

log = logging.getLogger(__name__)

# The versions of the answers the gateway decodes, as kafka-python's generated classes know them. Fetch
# and Produce answers are decoded only with leader hints on; off, the versions whose answers could carry
# addresses (Fetch v16+, Produce v10+) are not offered (zkcoord.core.gateway, rule 2).
DECODABLE = {METADATA: (0, MetadataResponse.max_version), DESCRIBE_CLUSTER: (0, DescribeClusterResponse.max_version)}
LEADER_HINTS_DECODABLE = {**DECODABLE, FETCH: (FetchResponse.valid_versions[0], FetchResponse.max_version),
                          PRODUCE: (ProduceResponse.valid_versions[0], ProduceResponse.max_version)}


@dataclass(frozen=True)
class GatewaySettings:
    listen_host: str
    listen_port: int  # 0: the kernel picks every port (broker ports are then not P+1..)
    advertised_host: str
    advertised_port: int  # 0: the bound port
    broker_ports: BrokerPorts
    bootstrap: tuple[tuple[str, int], ...]
    refresh_ms: int
    max_frame_bytes: int
    leader_hints: bool = False
    connections_max_idle_ms: int = limits.DEFAULT_CONNECTIONS_MAX_IDLE_MS
    request_limits: limits.RequestLimits = limits.RequestLimits()
    partial_requests_max_bytes: int = limits.DEFAULT_PARTIAL_REQUESTS_MAX_BYTES
    # Security (docs/security.md): the listener's TLS and SASL login; TLS to the brokers; the gateway's
    # own Kafka login (its control connections); whether a client's SASL login goes through to its broker.
    security: ListenerSecurity = PLAINTEXT_LISTENER
    upstream_ssl: ssl.SSLContext | None = None
    client_security: object = None  # KafkaClientSecurity, None: PLAINTEXT
    passthrough: bool = False
    # One worker of several (zkcoord.core.workers): the own port and broker ports are shared by every worker
    # (SO_REUSEPORT), and the worker has a port of its own (0: the kernel's), the one it registers.
    worker_port: int | None = None
    worker_advertised_port: int = 0  # 0: the bound worker port
    refused_broker_ports: frozenset[int] = frozenset()  # shared broker ports another process holds: not bound
    kernel_ports: bool | None = None  # every port the kernel's (None: when listen_port is 0)
    listen_backlog: int = 0  # each listening socket's (0: the kernel's maximum), as the daemon's listener
    listen_sockets: int = DEFAULT_LISTEN_SOCKETS  # sockets per port (zkcoord.wire.listening)

    @property
    def picks_ports(self) -> bool:
        """The kernel picks the broker ports (the gateway port was configured as 0)."""
        return self.listen_port == 0 if self.kernel_ports is None else self.kernel_ports

    @classmethod
    def from_config(cls, config: DaemonConfig, worker=None, **security) -> GatewaySettings | None:
        """The gateway's settings; ``security``: the fields above, built by the daemon; ``worker``: the
        :class:`~zkcoord.core.workers.WorkerPlan` of a worker of several."""
        if not config.gateway_listen:
            return None
        _, host, port = parse_listener(config.gateway_listen, "gateway_listen")
        adv_host, adv_port = host, 0
        if config.gateway_advertised:
            text = config.gateway_advertised
            if text.rpartition(":")[2].isdigit() and ":" in text:
                adv_host, adv_port = parse_host_port(text, "gateway_advertised")
            else:
                adv_host = text.strip("[]")
        if adv_host in ("0.0.0.0", "::", ""):
            adv_host = socket.getfqdn()
        try:
            low, high = parse_broker_ids(config.gateway_broker_ids)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        bootstrap = tuple(parse_host_port(s.strip(), "bootstrap_servers")
                          for s in config.bootstrap_servers.split(",") if s.strip())
        if worker is not None:  # the configured port 0: the kernel picks every port
            security.update(worker_port=worker.own_gateway_port(port), kernel_ports=port == 0,
                            refused_broker_ports=worker.refused_broker_ports,
                            worker_advertised_port=worker.own_gateway_port(adv_port or port) if port else 0)
            port = worker.gateway_port  # the shared port, as the supervisor bound it
        return cls(host, port, adv_host, adv_port, BrokerPorts(low, high), bootstrap,
                   config.topic_metadata_refresh_ms, config.socket_request_max_bytes,
                   config.gateway_leader_hints == "on", config.connections_max_idle_ms, config.request_limits,
                   config.partial_requests_max_bytes, listen_backlog=config.listen_backlog,
                   listen_sockets=config.listen_sockets, **security)


class Gateway:
    """``bind()``, then ``await start(nodes)``, ``await stop()``."""

    def __init__(self, settings: GatewaySettings, handler) -> None:
        self.settings = settings
        self.handler = handler
        self.max_frame_bytes = settings.max_frame_bytes
        self.request_limits = settings.request_limits
        # What all client connections may hold of unfinished requests together; at least one whole frame
        # (a Produce may be socket_request_max_bytes).
        self.partial_requests_max_bytes = max(settings.partial_requests_max_bytes, settings.max_frame_bytes)
        self.partial_bytes = 0
        self._sweeper = IdleSweep(lambda: self._connections.values(), lambda connection: connection.close(),
                                  settings.connections_max_idle_ms, log, "gateway ")
        self.cluster = ClusterView(list(settings.bootstrap), settings.refresh_ms, on_broker=self._on_broker,
                                   security=settings.client_security)
        self.security = settings.security
        self.upstream_ssl = settings.upstream_ssl
        self._own_versions = settings.security.apis.version_table()  # what the gateway answers itself
        # ... while the daemon does not serve KIP-848's consumer protocol (its handler says, once ready)
        self._classic_versions = settings.security.apis.classic_only().version_table()
        self._own: list[socket.socket] | None = None  # the own port's sockets (zkcoord.wire.listening)
        self._bound_port = 0
        self._worker_sock: list[socket.socket] | None = None  # a worker's own port (settings.worker_port)
        self._worker_bound_port = 0
        self._broker_ports: dict[int, int] = {}  # broker id -> bound port
        self._servers: list[asyncio.Server] = []
        self._unserved: set[socket.socket] = set()  # bound, its server not created yet
        self._connections: dict[int, ClientConnection] = {}
        self._ids = itertools.count(1)
        self._nodes: dict[int, GatewayNode] = {}  # daemon node id -> its gateway
        self._book = AddressBook(self.broker_address, (), self.cluster.observe)
        self._advertised: dict[int | None, tuple[object, dict, dict]] = {}
        self._decodable = LEADER_HINTS_DECODABLE if settings.leader_hints else DECODABLE
        self._warned: set[int] = set()
        self._registry = None
        self._follow: asyncio.Task | None = None
        self._stopping = False
        self._prepared = False
        self.metrics = None  # DaemonMetrics, set by the daemon with --metrics-listen
        self._background = Background(log, "gateway")

    # -- addresses -------------------------------------------------------------------
    def bind(self) -> tuple[str, int]:
        """Bind the gateway's own port (no serving yet), and a worker's own
        port; the address to register (:attr:`node_address`)."""
        worker = self.settings.worker_port is not None
        self._own = self._listen_socket(self.settings.listen_port, shared=worker)
        self._bound_port = self._own[0].getsockname()[1]
        if worker:
            self._worker_sock = self._listen_socket(self.settings.worker_port)
            self._worker_bound_port = self._worker_sock[0].getsockname()[1]
        return self.node_address

    @property
    def address(self) -> tuple[str, int]:
        """Where clients bootstrap (every worker's, with workers); broker ports follow it."""
        return self.settings.advertised_host, self.settings.advertised_port or self._bound_port

    @property
    def node_address(self) -> tuple[str, int]:
        """This daemon's gateway as its registration names it: FindCoordinator sends a group's
        members there (with workers, the worker's own port, so they reach the owning worker)."""
        if self.settings.worker_port is None:
            return self.address
        return self.settings.advertised_host, self.settings.worker_advertised_port or self._worker_bound_port

    @property
    def bound_port(self) -> int:
        return self._bound_port

    def broker_address(self, broker_id: int) -> tuple[str, int] | None:
        """This gateway's advertised address for a broker, None when it has no port for it."""
        bound = self._broker_ports.get(broker_id)
        if bound is None:
            return None
        host, port = self.address
        if self.settings.picks_ports:
            return host, bound
        return host, port + self.settings.broker_ports.offset(broker_id)

    def coordinator_address(self, owner) -> tuple[int, str, int] | str:
        """How FindCoordinator names a group's owner (a NodeInfo) to gateway clients."""
        if owner.gateway is None:
            return (f"the group's coordinator, zkcoord daemon {owner.node_id} at {owner.host}:{owner.port}, "
                    "runs no gateway; run every daemon with --gateway-listen")
        node = GatewayNode(gateway_node_id(owner.node_id), *owner.gateway)
        if self._nodes.get(owner.node_id) != node:  # list it in Metadata before the watch says so
            self._nodes[owner.node_id] = node
            self._book = AddressBook(self.broker_address, tuple(self._nodes.values()), self.cluster.observe)
        return node.node_id, node.host, node.port

    # -- what connections ask ------------------------------------------------------------
    @property
    def connection_count(self) -> int:
        return len(self._connections)

    @property
    def broker_count(self) -> int:
        return len(self._broker_ports)

    def next_connection_id(self) -> int:
        return next(self._ids)

    def register(self, connection: ClientConnection) -> bool:
        if self._stopping:
            return False
        self._connections[connection.info.connection_id] = connection
        return True

    def unregister(self, connection: ClientConnection) -> None:
        if self._connections.pop(connection.info.connection_id, None) is not None:
            closed = getattr(self.handler, "connection_closed", None)
            if closed is not None and not self._stopping:
                try:
                    closed(connection.info)
                except Exception:
                    log.exception("the handler failed on the close of gateway %s", connection.info)

    def upstream_candidates(self, broker_id: int | None) -> list[tuple[str, int]]:
        if broker_id is None:
            return self.cluster.upstream_candidates()
        broker = self.cluster.brokers.get(broker_id)
        return [broker.address] if broker is not None else []

    def api_versions(self, broker_id: int | None) -> tuple[dict, dict]:
        """(advertised table, ApiVersions v3 extras) for a connection to ``broker_id``'s port."""
        versions = self.cluster.versions_of(broker_id)
        cached = self._advertised.get(broker_id)
        served = getattr(self.handler, "consumer_groups_served", None)
        own = self._own_versions if served is not None and served() else self._classic_versions
        token = (own is self._own_versions, None if versions is None else (
            id(versions) if broker_id is not None else tuple(sorted((k, id(v)) for k, v in self.cluster.versions.items()))))
        if cached is None or cached[0] != token:
            table = advertised_versions(versions.table if versions else {}, own, self._decodable)
            cached = self._advertised[broker_id] = (token, table, dict(versions.extras) if versions else {})
        return cached[1], cached[2]

    def advertised(self, broker_id: int | None) -> dict:
        return self.api_versions(broker_id)[0]

    def versions_known(self, broker_id: int | None) -> bool:
        return self.cluster.versions_of(broker_id) is not None

    async def versions_ready(self, broker_id: int | None, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the brokers' versions to be known."""
        await self.cluster.versions_ready(broker_id, timeout_s)

    def rewrite(self, expected: Expected, frame: bytes) -> bytes:
        """A broker answer with its addresses rewritten (MalformedFrameError, ResponseEncodingError)."""
        correlation_id, message = decode_response_frame(frame, RESPONSE_CLASSES[expected.api_key],
                                                        expected.api_version)
        if expected.api_key in (FETCH, PRODUCE) and not getattr(message, "node_endpoints", None):
            return frame  # nothing to rewrite: the broker's bytes as they came
        rewrite_addresses(expected.api_key, message, self._book)
        return encode_response_frame(message, expected.api_version, correlation_id)

    # -- life cycle ----------------------------------------------------------------------
    async def prepare(self) -> None:
        """Learn the brokers (binding their ports) before clients are told of
        this gateway; given up after a few seconds when Kafka does not answer."""
        if self._own is None:
            self.bind()
        if not self._prepared:
            self._prepared = True
            await self.cluster.start()

    async def start(self, registry=None) -> None:
        """Serve the own port and, with a node registry, follow the daemons'
        registrations."""
        await self.prepare()
        await self._serve(self._own, None)
        self._own = None
        if self._worker_sock is not None:
            await self._serve(self._worker_sock, None)
            self._worker_sock = None
        self._sweeper.start("gateway-idle-sweep")
        self._registry = registry
        if registry is not None:
            await self._read_nodes(None)
            self._follow = asyncio.get_running_loop().create_task(self._follow_nodes(), name="gateway-nodes")
        host, port = self.address
        log.info("gateway (%s) on %s:%d (advertised %s:%d), brokers %s", self.security.protocol,
                 self.settings.listen_host, self._bound_port, host, port,
                 ", ".join(f"{h}:{p}" for h, p in self.settings.bootstrap))
        if self.settings.worker_port is not None:
            log.info("gateway: this worker's own port %d (advertised %s:%d)", self._worker_bound_port,
                     *self.node_address)

    async def stop(self) -> None:
        self._stopping = True
        self._sweeper.stop()
        for server in self._servers:
            server.close()
        for sock in list(self._unserved):
            sock.close()
        for sockets in (self._own, self._worker_sock):
            for sock in sockets or ():
                sock.close()
        connections = list(self._connections.values())
        for connection in connections:
            connection.close()
        await asyncio.gather(*(c.done for c in connections), return_exceptions=True)
        if self._follow is not None:
            self._follow.cancel()
            await asyncio.gather(self._follow, return_exceptions=True)
        await self.cluster.stop()
        for server in self._servers:
            await server.wait_closed()

    # -- listeners -----------------------------------------------------------------------
    def _listen_socket(self, port: int, shared: bool = False) -> list[socket.socket]:
        """A port's listening sockets (:func:`zkcoord.wire.listening.listening_sockets`: the
        daemon's backlog and socket count); ``shared``: a port every worker binds (SO_REUSEPORT)."""
        host = self.settings.listen_host
        try:
            return listening_sockets(host, port, count=self.settings.listen_sockets,
                                     backlog=self.settings.listen_backlog, shared=shared)
        except OSError as exc:
            raise ConfigError(f"gateway_listen: cannot listen on {host}:{port}: {exc}") from None

    async def _serve(self, sockets: list[socket.socket], broker_id: int | None) -> None:
        """Serve each of a port's sockets (those not served yet are closed by a stop meanwhile)."""
        self._unserved.update(sockets)
        for sock in sockets:
            if self._stopping:
                return
            await self._serve_one(sock, broker_id)

    async def _serve_one(self, sock: socket.socket, broker_id: int | None) -> None:
        self._unserved.add(sock)
        try:
            tls = {} if self.security.ssl_context is None else {
                "ssl": self.security.ssl_context, "ssl_handshake_timeout": TLS_HANDSHAKE_TIMEOUT_S}
            server = await asyncio.get_running_loop().create_server(
                lambda: ClientConnection(self, broker_id), sock=sock, **tls)
        finally:
            self._unserved.discard(sock)
        if self._stopping:
            server.close()
            return
        self._servers.append(server)

    def _on_broker(self, broker: Broker) -> None:
        """A broker seen for the first time (or moved): give it a port."""
        broker_id = broker.node_id
        if broker_id in self._broker_ports or self._stopping:
            return
        offset = self.settings.broker_ports.offset(broker_id)
        if offset is None:
            if broker_id not in self._warned:
                self._warned.add(broker_id)
                ports = self.settings.broker_ports
                log.error("gateway: broker %d is outside --gateway-broker-ids %d-%d, so it has no gateway port "
                          "and clients will not be told of it; widen the range", broker_id, ports.low_id,
                          ports.high_id)
            return
        kernel = self.settings.picks_ports
        port = 0 if kernel else self.settings.listen_port + offset
        if port in self.settings.refused_broker_ports:  # the supervisor found another process bound there
            if broker_id not in self._warned:
                self._warned.add(broker_id)
                log.error("gateway: no port for broker %d: port %d is taken by another process (the supervisor "
                          "found it so at the start)", broker_id, port)
            return
        try:
            sockets = self._listen_socket(port, shared=self.settings.worker_port is not None and not kernel)
        except ConfigError as exc:
            if broker_id not in self._warned:
                self._warned.add(broker_id)
                log.error("gateway: no port for broker %d: %s", broker_id, exc)
            return
        self._broker_ports[broker_id] = sockets[0].getsockname()[1]
        collisions = colliding_broker_ids([broker_id], (n.node_id for n in self._nodes.values()))
        if collisions:
            log.error("gateway: broker id %d collides with a zkcoord gateway node id", broker_id)
        self._background.spawn(self._serve(sockets, broker_id), f"serve broker {broker_id}'s port")
        log.info("gateway: broker %d on port %d", broker_id, self._broker_ports[broker_id])

    # -- the daemons' gateways -------------------------------------------------------------
    async def _follow_nodes(self) -> None:
        """Re-read the registrations when the watch fires, and every refresh
        (without a second watch while one is armed: kazoo keeps each)."""
        changed = asyncio.Event()
        armed = False
        while True:
            try:
                await self._read_nodes(None if armed else changed.set)
                armed = True
            except ZkcoordError as exc:
                log.warning("gateway: cannot read the daemons' registrations: %s", exc)
            try:
                # not wait_for: on 3.11 it can swallow a cancel (gh-86296)
                async with asyncio.timeout(self.settings.refresh_ms / 1000):
                    await changed.wait()
            except TimeoutError:
                continue
            changed.clear()
            armed = False

    async def _read_nodes(self, on_change) -> None:
        infos = await self._registry.nodes(on_change)
        nodes = {i: GatewayNode(gateway_node_id(i), *info.gateway) for i, info in infos.items()
                 if info.gateway is not None}
        if nodes != self._nodes:
            self._nodes = nodes
            self._book = AddressBook(self.broker_address, tuple(nodes.values()), self.cluster.observe)
