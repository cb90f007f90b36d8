"""The ``zkcoord run`` daemon: wires ZooKeeper, ownership, the group manager
and the Kafka-protocol server together, and stops them in order.

This module is where the daemon's parts meet: the only module of
:mod:`zkcoord.server` that imports the gateway (:mod:`zkcoord.gateway`),
which it builds beside the listener and hands its login and handler.

Start, in steps (each a method of :class:`Daemon`; a step that fails undoes
the ones before it, last first):

1. ``_connect``: load the security settings (:mod:`.daemon_security`: TLS,
   SASL credentials, Kafka's ACLs; files first, so a local mistake fails
   before anything connects), connect to ZooKeeper (a clear error naming
   the address when it does not answer), check the layout version
   (:mod:`zkcoord.zk.layout`; on an empty ZooKeeper apply the layout
   migrations first), create the offsets root (``/consumers``) if missing,
   start the security watchers.
2. ``_listen``: bind the Kafka listener, then the metrics endpoint.
3. ``_register``: bind the gateway and learn the brokers, then register
   ``/zkcoord/nodes/<id>`` with the advertised addresses (a node id in use
   is an error).
4. ``_start_groups``: group ownership, offsets, topic watches, the group
   manager.
5. ``_serve``: hand the listeners their handlers; the gateway serves.

Stop (SIGTERM / SIGINT): close the listener and every connection (the
clients look their coordinators up again), unregister, unload every owned
group and delete its election node (in multis): the other daemons take each
group over as soon as it is free (:mod:`zkcoord.server.takeover`); close
the ZooKeeper session, exit 0, each step within ``shutdown_timeout_ms``; a
step that fails or runs out of time is logged with its cause (how many
groups were still held).

With ``metrics_listen`` set, an HTTP endpoint serves Prometheus ``/metrics``
and ``/health`` (:mod:`zkcoord.server.metrics`); it is bound right after the
Kafka listener and closed with it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import os
import signal
import sys
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from typing import NoReturn

from zkcoord.config import DaemonConfig
from zkcoord.core.group import GroupConfig
from zkcoord.core.workers import WorkerPlan
from zkcoord.errors import ConfigError, NodeIdInUseError, ZkcoordError
from zkcoord.gateway.gateway import Gateway, GatewaySettings
from zkcoord.gateway.login import PassthroughLogin
from zkcoord.kafka.forwarder import KafkaForwarder
from zkcoord.kafka.metadata import KafkaTopicMetadata
from zkcoord.server.apis import ApiHandler
from zkcoord.server.consumer_protocol import CONSUMER_PROTOCOL
from zkcoord.server.daemon_security import DaemonSecurity
from zkcoord.server.manager import GroupManager
from zkcoord.server.metrics import DaemonMetrics, MetricsServer
from zkcoord.server.peer_watch import PeerWatch
from zkcoord.server.topic_watcher import TopicWatcher
from zkcoord.server.transport import KafkaProtocolServer
from zkcoord.zk import layout
from zkcoord.zk.connection import ZkConnection
from zkcoord.zk.nodes import NodeRegistry
from zkcoord.zk.offsets import OffsetStore, ensure_offsets_root
from zkcoord.zk.ownership import GroupOwnership
from zkcoord.zk.state_store import GroupStateStore
from zkcoord.zk.topics import TopicRegistry

log = logging.getLogger("zkcoord.daemon")


@dataclass
class RunningDaemon:
    node_id: int
    advertised: tuple[str, int]
    bound_port: int
    manager: GroupManager
    metrics_port: int | None = None  # bound port of --metrics-listen, None without it
    gateway: tuple[str, int] | None = None  # advertised address of the gateway, None without one


class Daemon:
    """One coordinator daemon; ``await start()``, ``await stop()``.

    ``worker``: this daemon is one worker of a ``zkcoord run --workers N``
    (:mod:`zkcoord.server.supervisor`): it also serves the ports every worker
    shares and registers its own (:mod:`zkcoord.core.workers`). ``replaces_pid``:
    a restarted worker waits until the registration of the worker it replaces
    (same node id, that pid) is gone with its ZooKeeper session."""

    def __init__(self, config: DaemonConfig, worker: WorkerPlan | None = None, replaces_pid: int | None = None):
        self.config = config
        self.worker = worker
        self.replaces_pid = replaces_pid
        self.conn = ZkConnection(config.zookeeper, session_timeout_ms=config.zk_session_timeout_ms,
                                 connect_timeout_ms=config.zk_connect_timeout_ms, security=config.zookeeper_security)
        self.server: KafkaProtocolServer | None = None
        self.nodes: NodeRegistry | None = None
        self.ownership: GroupOwnership | None = None
        self.offsets: OffsetStore | None = None
        self.manager: GroupManager | None = None
        self.peers: PeerWatch | None = None  # the probe of the next daemon (zkcoord.core.peer_probe)
        self.topics: TopicWatcher | None = None
        self.metrics: DaemonMetrics | None = None
        self.metrics_server: MetricsServer | None = None
        self.metrics_port: int | None = None
        self.gateway: Gateway | None = None
        self.security: DaemonSecurity | None = None
        self.advertised: tuple[str, int] | None = None  # the listener's address as registered
        # The listeners start before the manager exists: their handlers wait for it (_LateHandler).
        self._handler = _LateHandler()
        self._gateway_handler = _LateHandler()

    async def start(self) -> RunningDaemon:
        """Start in steps; a step that fails undoes the steps before it, last first."""
        async with AsyncExitStack() as undo:
            await self._connect(undo)
            await self._listen(undo)
            node_id = await self._register(undo)
            await self._start_groups(undo, node_id)
            await self._serve()
            undo.pop_all()  # started: from now on stop() takes everything down
        host, port = self.config.listen_address
        adv_host, adv_port = self.advertised
        log.info("zkcoord node %d serving on %s:%d (advertised %s:%d), ZooKeeper %s", node_id, host,
                 self.server.bound_port, adv_host, adv_port, self.config.zookeeper)
        return RunningDaemon(node_id, (adv_host, adv_port), self.server.bound_port, self.manager,
                             self.metrics_port, self.gateway.node_address if self.gateway else None)

    async def _connect(self, undo: AsyncExitStack) -> None:
        """Read the security files, connect to ZooKeeper, check its layout,
        start the security watchers."""
        config = self.config
        # key stores and files first: fail before connecting
        self.security = await DaemonSecurity.load(config, passthrough_login=PassthroughLogin)
        await asyncio.to_thread(self.conn.start)
        undo.push_async_callback(_undo, "close the ZooKeeper session", asyncio.to_thread, self.conn.stop)
        # An empty ZooKeeper gets zkcoord's layout (first run); any other
        # layout must be the one this version knows.
        await layout.ensure_layout(self.conn)
        await ensure_offsets_root(self.conn, config.offsets_zk_root)
        await self.security.start(self.conn)  # undoes itself when it fails
        undo.push_async_callback(_undo, "stop the security watchers", self.security.stop)

    async def _listen(self, undo: AsyncExitStack) -> None:
        """Bind the Kafka listener (its port goes into the registration), then the metrics endpoint."""
        config = self.config
        host, port = config.listen_address
        shared = None
        if self.worker is not None:  # the shared port, and this worker's own (registered) port
            shared, port = self.worker.listen_port, self.worker.own_port(port)
        limits = config.request_limits
        self.server = KafkaProtocolServer(
            self._handler, host, port, max_frame_bytes=config.socket_request_max_bytes,
            request_max_bytes=limits.request_max_bytes, request_limit_setting=limits.setting_of,
            connections_max_idle_ms=config.connections_max_idle_ms,
            partial_requests_max_bytes=config.partial_requests_max_bytes, security=self.security.listener,
            shared_port=shared, backlog=config.listen_backlog, listen_sockets=config.listen_sockets)
        undo.push_async_callback(_undo, "close the listener", self.server.stop)
        try:
            await self.server.start()
        except OSError as exc:
            raise ConfigError(f"listen: cannot listen on {host}:{port}: {exc}") from None
        await self._start_metrics()
        undo.push_async_callback(_undo, "close the metrics endpoint", self._stop_metrics)

    async def _register(self, undo: AsyncExitStack) -> int:
        """Bind the gateway and learn the brokers, then register this node
        with both advertised addresses; the node id."""
        config = self.config
        gateway_address = None
        settings = GatewaySettings.from_config(config, worker=self.worker, **self.security.gateway)
        if settings is not None:
            self.gateway = Gateway(settings, self._gateway_handler)
            undo.push_async_callback(_undo, "close the gateway", self.gateway.stop)
            gateway_address = self.gateway.bind()  # its address goes into the registration
            await self.gateway.prepare()
        adv_host, adv_port = self.advertised = config.advertised_address(self.server.bound_port, self.worker)
        self.nodes = NodeRegistry(self.conn, host=adv_host, port=adv_port, node_id=config.node_id,
                                  gateway=gateway_address)
        node_id = await self._register_node()
        undo.push_async_callback(_undo, "unregister", self.nodes.unregister)
        return node_id

    async def _register_node(self) -> int:
        """Register; a restarted worker first waits (up to twice the session
        timeout) for its predecessor's registration to go with its session."""
        if self.replaces_pid is None:
            return await self.nodes.register()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 2 * self.config.zk_session_timeout_ms / 1000 + 5
        waited = False
        while True:
            try:
                return await self.nodes.register()
            except NodeIdInUseError:
                holder = await self.nodes.node(self.config.node_id)
                if holder is not None and (holder.pid != self.replaces_pid or loop.time() > deadline):
                    raise
            if not waited:
                waited = True
                if holder is not None:
                    # The supervisor saw that process exit: its session can be ended now (zkcoord.zk.nodes rule 5).
                    try:
                        result = await self.nodes.end_session(self.config.node_id, holder)
                    except ZkcoordError as exc:
                        result = f"not ended ({exc})"
                    log.info("node %d: the session of the worker this one replaces (pid %d): %s", self.config.node_id,
                             self.replaces_pid, result)
                    if result == "ended":
                        continue  # its registration went with it: register now
                log.info("node %d: waiting for the registration of the worker this one replaces (pid %d) to go "
                         "with its ZooKeeper session", self.config.node_id, self.replaces_pid)
            await asyncio.sleep(0.25)

    async def _start_groups(self, undo: AsyncExitStack, node_id: int) -> None:
        """Group ownership, offsets, topic watches and the group manager."""
        config = self.config
        self.ownership = GroupOwnership(self.conn, node_id, on_change=lambda c: self.manager.on_ownership_change(c))
        await self.ownership.start()
        undo.push_async_callback(_undo, "stop group ownership", self.ownership.stop)
        ownership = self.ownership
        # A refused fenced offset commit proves we were deposed: drop the group
        # at once, as a refused state write does, rather than serving it from
        # memory until ZooKeeper's watch or session event arrives.
        self.offsets = OffsetStore(self.conn, offsets_root=config.offsets_zk_root,
                                   on_deposed=lambda fence, why: ownership.drop(fence.group, why, fence))
        undo.push_async_callback(_undo, "stop offset batching", self.offsets.stop)
        registry = TopicRegistry(self.conn)
        kafka_client = self.security.kafka_client
        self.topics = TopicWatcher(
            lambda group_id: self.manager.metadata_changed(group_id), registry=registry,
            kafka_metadata=KafkaTopicMetadata(config.bootstrap_servers, security=kafka_client)
            if config.bootstrap_servers else None,
            refresh_ms=config.topic_metadata_refresh_ms,
            on_image=lambda image, groups: self.manager is not None and self.manager.topics_changed(image, groups))
        undo.push_async_callback(_undo, "stop topic watches", self.topics.stop)
        await self.topics.start(await registry.kafka_registers_topics())
        self.manager = self._group_manager(node_id)
        self.manager.consumer_groups_enabled = "consumer" in config.rebalance_protocols and self.topics.source != "none"
        if "consumer" in config.rebalance_protocols and self.topics.source == "none":
            log.warning("the consumer group protocol (KIP-848) is not served: no topic metadata (ZooKeeper has no "
                        "/brokers/topics here and --bootstrap-servers is not set)")
        self.manager.admin.start_cleanup()
        self.manager.start_adoption()
        self.manager.start_takeover()
        undo.push_async_callback(_undo, "release groups", self.manager.release_all)
        self.peers = PeerWatch(self.nodes, config.peer_probe_interval_ms / 1000, self.metrics)
        self.peers.start()
        undo.callback(self.peers.stop)

    def _group_manager(self, node_id: int) -> GroupManager:
        config = self.config
        group_config = GroupConfig(
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            max_group_size=config.group_max_size, consumer=config.consumer_group_config)
        group_config = dataclasses.replace(group_config, image=self.topics.image, consumer_protocol=CONSUMER_PROTOCOL)
        store = GroupStateStore(self.conn, self.ownership, max_state_bytes=config.max_state_bytes,
                                max_group_state_bytes=config.max_group_state_bytes)
        kafka_client = self.security.kafka_client
        return GroupManager(
            node_id, group_config, self.ownership, store, self.offsets, self.nodes, topic_watcher=self.topics,
            conn=self.conn, member_disconnect_grace_ms=config.member_disconnect_grace_ms,
            rebalance_notice_hold_ms=config.rebalance_notice_hold_ms,
            cleanup_interval_ms=config.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            kafka_forwarder=KafkaForwarder(config.bootstrap_servers, security=kafka_client)
            if config.bootstrap_servers else None)

    async def _serve(self) -> None:
        """Wire the metrics in, hand the listeners their handlers, start the gateway's serving."""
        security = self.security
        if self.metrics is not None:
            self.metrics.manager = self.manager
            self.metrics.offsets = self.offsets
            self.manager.metrics = self.metrics
            if security.credentials is not None:
                security.credentials.on_login = self.metrics.observe_login
            if self.gateway is not None:
                self.metrics.gateway = self.gateway
                self.gateway.metrics = self.metrics
        self._handler.ready(ApiHandler(self.manager, self.metrics, access=security.access,
                                       apis=security.listener.apis))
        if self.gateway is not None:
            self._gateway_handler.ready(ApiHandler(self.manager, self.metrics, access=security.access,
                                                   coordinator_address=self.gateway.coordinator_address,
                                                   apis=self.gateway.security.apis))
            await self.gateway.start(self.nodes)

    async def _start_metrics(self) -> None:
        address = self.config.metrics_address
        if address is None:
            return
        if self.worker is not None:  # the supervisor serves the configured port: this worker its own
            address = address[0], self.worker.own_port(address[1])
        self.metrics = DaemonMetrics(conn=self.conn)
        self.metrics_server = MetricsServer(self.metrics, *address)
        await self.metrics_server.start()
        self.metrics_port = self.metrics_server.bound_port
        self.conn.add_listener(self.metrics.on_session_event)
        self.metrics.start_loop_probe()
        log.info("metrics and health on http://%s:%d/metrics", address[0], self.metrics_port)

    async def _stop_metrics(self) -> None:
        if self.metrics is not None:
            self.metrics.stop_loop_probe()
            self.conn.remove_listener(self.metrics.on_session_event)
        if self.metrics_server is not None:
            await self.metrics_server.stop()

    async def stop(self) -> None:
        """Graceful: close the listeners (the clients go to look their
        coordinators up again), unregister (the other daemons then take each
        group over as soon as its election node goes), release the groups,
        stop the rest. A release cut short leaves election nodes that go
        with the ZooKeeper session, a moment later."""
        timeout_s = self.config.shutdown_timeout_ms / 1000
        steps = [
            ("stop probing the next daemon", self.peers and self._stop_peers),
            ("close the listener", self.server and self.server.stop),
            ("close the gateway", self.gateway and self.gateway.stop),
            ("unregister", self.nodes and self.nodes.unregister),
            ("release groups", self.manager and self.manager.release_all),
            ("close the metrics endpoint", self.metrics_server and self._stop_metrics),
            ("stop offset batching", self.offsets and self.offsets.stop),
            ("stop topic watches", self.topics and self.topics.stop),
            ("stop the security watchers", self.security and self.security.stop),
        ]
        for what, step in steps:
            await self._stop_step(what, step, timeout_s)
        await asyncio.to_thread(self.conn.stop)
        log.info("zkcoord daemon stopped")

    async def _stop_peers(self) -> None:
        self.peers.stop()

    async def _stop_step(self, what: str, step, timeout_s: float) -> bool:
        """Run one step of :meth:`stop` (a coroutine function; nothing when
        falsy) within the timeout; a failure is logged with its cause, and
        the stopping goes on (closing the session removes what is left)."""
        if not step:
            return False
        try:
            await asyncio.wait_for(step(), timeout_s)
            return True
        except TimeoutError:
            why = f"not done within {timeout_s * 1000:.0f} ms (--shutdown-timeout-ms)"
            if what == "release groups" and self.manager is not None:
                why += (f"; {self.manager.still_owned()} groups still held: their election nodes go when the "
                        "ZooKeeper session closes, and the other daemons take them over then")
        except Exception as exc:
            why = str(exc) or repr(exc)
        log.warning("shutdown: could not %s: %s", what, why)
        return False


async def _undo(what: str, step, *args) -> None:
    """One undo step of a start that failed: its own failure is logged, and
    the undoing goes on (the start's error is the one raised)."""
    try:
        await step(*args)
    except Exception as exc:
        log.warning("start failed; could not %s: %s", what, exc)


class _LateHandler:
    """The server starts before the manager exists (its bound port is part of
    the registration). A request that arrives meanwhile (a client may see the
    registration a moment before the manager is set) waits for it; if the
    start fails, stopping the server cancels it."""

    def __init__(self) -> None:
        self.target = None
        self._ready = asyncio.Event()

    def ready(self, target) -> None:
        self.target = target
        # From now on the listeners' per-request calls reach the handler itself, not through us.
        self.handle_now, self.handle_soon = target.handle_now, target.handle_soon
        self._ready.set()

    async def __call__(self, decoded, connection):
        await self._ready.wait()
        return await self.target(decoded, connection)

    def handle_now(self, decoded, connection):
        return None if self.target is None else self.target.handle_now(decoded, connection)

    def handle_soon(self, decoded, connection, reply):
        return self.target is not None and self.target.handle_soon(decoded, connection, reply)

    def connection_closed(self, connection):
        if self.target is not None:
            self.target.connection_closed(connection)

    def notice_features(self, decoded, connection) -> list[dict]:
        return [] if self.target is None else self.target.notice_features(decoded, connection)

    def consumer_groups_served(self) -> bool:
        return self.target is not None and self.target.consumer_groups_served()


async def serve(config: DaemonConfig) -> None:
    daemon = Daemon(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await daemon.start()
    tune_interpreter()
    try:
        await stop.wait()
        log.info("signal received, stopping")
    finally:
        await daemon.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with suppress(Exception):
                loop.remove_signal_handler(sig)


def run_daemon(config: DaemonConfig) -> None:
    """Blocking entry point of ``zkcoord run``: on uvloop's event loop when
    it is installed (a dependency; it makes socket I/O several times cheaper),
    else asyncio's own."""
    root = logging.getLogger()
    if root.level > logging.INFO:
        root.setLevel(logging.INFO)
        logging.getLogger("zkcoord").setLevel(logging.INFO)
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(serve(config))
    exit_now(0)


def exit_now(code: int) -> NoReturn:
    """End the process once the daemon has stopped cleanly (its groups
    released, its ZooKeeper session closed, every socket shut), without the
    interpreter's teardown: freeing a heap of many groups object by object
    took 2.6-4.8 s after the last log line with 8,000-10,000 groups
    (bench/RESULTS.md), seconds an operator's restart waits for nothing.
    The logs and the standard streams are flushed first."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):
            stream.flush()
    os._exit(code)


def _loop_factory():
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency; asyncio still works
        log.info("uvloop is not installed; using asyncio's event loop")
        return None
    return uvloop.new_event_loop


def tune_interpreter() -> None:
    """Interpreter settings for the daemon, once it is up.

    * Fewer, cheaper garbage collections: what is alive after start-up
      (modules, classes, kazoo, the codec caches) is moved out of the
      collector's sight, and the youngest generation is collected every
      50,000 allocations instead of 700, since requests make short-lived
      objects that reference counting frees anyway.
    * A 0.5 ms GIL switch interval instead of 5 ms: kazoo's connection and
      completion threads carry every ZooKeeper request and answer, and while
      the event loop is busy each of those hops could otherwise wait up to
      5 ms for the GIL, on the path of every state write and offset commit.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    sys.setswitchinterval(0.0005)
