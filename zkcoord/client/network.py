"""The one place where the thin consumer differs from kafka-python's own:
where group requests go.

kafka-python 3.x keeps one cluster view per client (``ClusterMetadata``) and
one connection manager (``KafkaConnectionManager``) that opens a connection
per node id. Its ``ConsumerCoordinator`` finds the group coordinator by
sending FindCoordinator to the least loaded *broker*, registers the answer
(node id, host, port) as the extra node ``coordinator-<id>`` and sends
JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch to
that node. Metadata, Fetch and ListOffsets go only to brokers learnt from
Metadata responses.

So one change is enough: :class:`ZkcoordConnectionManager` sends every
FindCoordinator to a zkcoord daemon (``zkcoord-0``, ``zkcoord-1``, ... from
the configured addresses) instead of a broker. The daemon answers with the
daemon that owns the group, kafka-python connects to it as
``coordinator-<daemon node id>``, and every group request follows. The
daemons never see Metadata or Fetch (they are not in the broker list), and
the brokers never see a group request. Re-discovery is kafka-python's own:
NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a dropped coordinator
connection mark the coordinator dead, the next lookup sends FindCoordinator
again, and this manager sends it to the next daemon that is not backing off.

A lookup that a daemon answered with an error (COORDINATOR_NOT_AVAILABLE
from a daemon that has no ZooKeeper session, say), or that failed, sends
the next one to another daemon first: kafka-python and the Java consumer
send FindCoordinator to a broker chosen at random, and a daemon cut from
ZooKeeper would otherwise answer every lookup of a client connected to it.

Lookups are paced: at most one FindCoordinator per ``retry_backoff_ms``.
kafka-python looks up again at once when the node it was told cannot be
reached; after a kill -9 the surviving daemons keep naming the dead owner
until its ZooKeeper session expires, and without pacing each consumer sent
about a thousand FindCoordinator requests per second in that window.

The manager also stamps the configured rebalance timeout on JoinGroup
(kafka-python always sends ``max_poll_interval_ms`` there, as the Java
consumer does) and waits for the JoinGroup answer that long.

The first lookup overlaps the broker bootstrap. ``KafkaConsumer`` connects
to a broker, asks it for ApiVersions and Metadata and only then builds its
coordinator, whose first ``poll()`` connects to a daemon, asks it for
ApiVersions and FindCoordinator, then connects to the named daemon and asks
it for ApiVersions before its JoinGroup: two chains of round trips, one
after the other, before a new member can join. None of the daemon's steps
needs the broker's answers, so the manager sends the group's first
FindCoordinator when the bootstrap starts, opens the connection to the
daemon it names, and hands that answer to the coordinator's first lookup
(if it comes within :data:`PREFETCH_MAX_AGE_S`; otherwise, or if the lookup
failed, the coordinator looks up as usual). Nothing else changes: the same
request, the same answer handling, the same connections, and
``Consumer.start()`` still waits for the bootstrap (and fails when no broker
answers).

Security. kafka-python keeps one set of security settings per client
(``security_protocol``, ``ssl_context``, ``sasl_*``) and uses it for every
node. The daemons are logged in to with the same settings unless the manager
is given ``coordinator_options`` (kafka-python keyword arguments of the
daemons' own settings): then every daemon node (the seeds ``zkcoord-<i>``
and the ``coordinator-<id>`` nodes the daemons name) gets those, on its
transport (TLS) and on its connection (SASL), and the brokers keep theirs.

It is handed to ``KafkaConsumer`` through its documented ``kafka_client``
option (see :func:`client_factory`); nothing of kafka-python is patched.
"""

from __future__ import annotations

import itertools
import logging
import time

import kafka.errors as Errors
from kafka.cluster import ClusterMetadata
from kafka.future import Future
from kafka.net.compat import KafkaNetClient
from kafka.net.inet import create_connection
from kafka.net.manager import KafkaConnectionManager
from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport
from kafka.net.selector import NetworkSelector
from kafka.protocol.consumer import JoinGroupRequest
from kafka.protocol.metadata import CoordinatorType, FindCoordinatorRequest, MetadataResponse

log = logging.getLogger(__name__)

DAEMON_NODE_PREFIX = "zkcoord-"
# kafka-python waits this much longer than the rebalance timeout for a
# JoinGroup answer, as the Java consumer does.
JOIN_GRACE_MS = 5_000
# A FindCoordinator answer prefetched during the bootstrap is given to the
# coordinator's first lookup only this soon after it arrived.
PREFETCH_MAX_AGE_S = 1.0
# kafka-python's connection settings that say how a node is logged in to.
SECURITY_KEYS = ("security_protocol", "ssl_context", "ssl_check_hostname", "ssl_cafile", "ssl_certfile",
                 "ssl_keyfile", "ssl_password", "ssl_crlfile", "sasl_mechanism", "sasl_plain_username",
                 "sasl_plain_password", "sasl_kerberos_name", "sasl_kerberos_service_name",
                 "sasl_kerberos_domain_name", "sasl_oauth_token_provider")
COORDINATOR_NODE_PREFIX = "coordinator-"  # kafka-python's name of a node a FindCoordinator answer names


def daemon_nodes(addresses: tuple[tuple[str, int], ...]) -> dict[str, MetadataResponse.MetadataResponseBroker]:
    """``((host, port), ...)`` -> ``{"zkcoord-0": node, ...}`` in the given order."""
    return {f"{DAEMON_NODE_PREFIX}{i}": MetadataResponse.MetadataResponseBroker(
                f"{DAEMON_NODE_PREFIX}{i}", host, port, None)
            for i, (host, port) in enumerate(addresses)}


class _ClusterWithDaemons(ClusterMetadata):
    """The broker cluster view, which can also resolve the daemon seed nodes
    (connections are opened by node id, looked up here)."""

    def __init__(self, daemons: dict, **configs):
        super().__init__(**configs)
        self.daemons = daemons

    def broker_metadata(self, broker_id):
        return super().broker_metadata(broker_id) or self.daemons.get(broker_id)


class ZkcoordConnectionManager(KafkaConnectionManager):
    """kafka-python's connection manager, with FindCoordinator routed to the
    zkcoord daemons and JoinGroup carrying our rebalance timeout."""

    def __init__(self, net, *, zkcoord_daemons: tuple[tuple[str, int], ...],
                 rebalance_timeout_ms: int | None = None, coordinator_options: dict | None = None, **configs):
        super().__init__(net, **configs)
        # The daemons' login: kafka-python's defaults overlaid with their own settings (None: the brokers').
        self._daemon_security = None if coordinator_options is None else {
            **{key: KafkaConnectionManager.DEFAULT_CONFIG[key] for key in SECURITY_KEYS},
            **{key: value for key, value in coordinator_options.items() if key in SECURITY_KEYS}}
        if not zkcoord_daemons:
            raise ValueError("at least one zkcoord daemon address is required")
        # Same arguments as KafkaConnectionManager gives its ClusterMetadata;
        # nothing has used the first one yet (no I/O before start()).
        self.cluster = _ClusterWithDaemons(
            daemon_nodes(zkcoord_daemons),
            bootstrap_servers=self.config["bootstrap_servers"],
            metadata_max_age_ms=self.config["metadata_max_age_ms"],
            client_dns_lookup=self.config["client_dns_lookup"],
        )
        self.cluster.attach(self)
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self._lookup_interval_s = configs.get("retry_backoff_ms", 100) / 1000
        self._next_lookup_at = 0.0
        self._daemon_ids = list(self.cluster.daemons)
        self._rotation = itertools.cycle(range(len(self._daemon_ids)))
        self._refused_by: str | None = None  # the daemon whose last lookup failed: the next one goes elsewhere
        self._group_id = configs.get("group_id")
        self._prefetch: Future | None = None  # the first lookup, until the coordinator takes it
        self._prefetch_started = False
        self._prefetch_answered_at = 0.0

    def is_daemon(self, node_id) -> bool:
        """A zkcoord daemon's node: a seed, or a coordinator (every lookup goes to a daemon)."""
        return node_id in self.cluster.daemons or str(node_id).startswith(COORDINATOR_NODE_PREFIX)

    def get_connection(self, node_id, *args, **kwargs):
        fresh = node_id not in self._conns
        conn = super().get_connection(node_id, *args, **kwargs)
        if fresh and self._daemon_security is not None and self.is_daemon(node_id):
            # the connection reads its SASL settings when it logs in, after our _build_transport: not yet
            conn.config.update({k: v for k, v in self._daemon_security.items() if k in conn.config})
        return conn

    async def _build_transport(self, node, timeout_at=None):
        """kafka-python's, with the daemons' TLS settings for a daemon node."""
        if self._daemon_security is None or not self.is_daemon(node.node_id):
            return await super()._build_transport(node, timeout_at=timeout_at)
        config = {**self.config, **self._daemon_security}
        sock = await create_connection(self._net, node.host, node.port, config["socket_options"],
                                       proxy_url=config["proxy_url"], timeout_at=timeout_at)
        if config["security_protocol"] in ("SSL", "SASL_SSL"):
            ssl_configs = {key: value for key, value in config.items() if key.startswith("ssl_")}
            transport = KafkaSSLTransport(self._net, sock, host=node.host, **ssl_configs)
        else:
            transport = KafkaTCPTransport(self._net, sock, host=node.host)
        try:
            await transport.handshake()
        except Exception as exc:
            raise Errors.KafkaConnectionError(f"Handshake failed: {exc}") from exc
        return transport

    def bootstrap_async(self, timeout_ms=None, refresh=True):
        future = super().bootstrap_async(timeout_ms, refresh)
        if not self._prefetch_started and self._group_id is not None:
            self._prefetch_started = True
            self._prefetch_coordinator()
        return future

    def send(self, request, node_id=None, request_timeout_ms=None):
        if request.API_KEY == FindCoordinatorRequest.API_KEY:
            prefetched = self._take_prefetch(request)
            if prefetched is not None:
                return prefetched
            return self._paced_lookup(request, request_timeout_ms)
        if request.API_KEY == JoinGroupRequest.API_KEY and self.rebalance_timeout_ms is not None:
            request.rebalance_timeout_ms = self.rebalance_timeout_ms
            request_timeout_ms = max(request_timeout_ms or 0, self.config["request_timeout_ms"],
                                     self.rebalance_timeout_ms + JOIN_GRACE_MS)
        return super().send(request, node_id=node_id, request_timeout_ms=request_timeout_ms)

    def _paced_lookup(self, request, request_timeout_ms) -> Future:
        """FindCoordinator to a daemon, at most one per lookup interval (runs
        on kafka-python's I/O thread, like every ``send``)."""
        now = time.monotonic()
        wait_s = self._next_lookup_at - now
        self._next_lookup_at = max(now, self._next_lookup_at) + self._lookup_interval_s

        def lookup() -> Future:
            node_id = self.pick_daemon()
            log.debug("FindCoordinator goes to daemon %s", node_id)
            future = super(ZkcoordConnectionManager, self).send(request, node_id=node_id,
                                                                request_timeout_ms=request_timeout_ms)
            future.add_both(self._lookup_answered, node_id)
            return future

        if wait_s <= 0:
            return lookup()
        paced = Future()
        self._net.call_later(wait_s, lambda: lookup().chain(paced))
        return paced

    def _prefetch_coordinator(self) -> None:
        """Send the group's FindCoordinator now and connect to the daemon it
        names (on the I/O thread, while the bootstrap runs)."""
        group = self._group_id
        request = FindCoordinatorRequest(key=group, key_type=CoordinatorType.GROUP, coordinator_keys=[group])
        self._prefetch = self._paced_lookup(request, None)
        self._prefetch.add_callback(self._prefetch_answered)

    def _prefetch_answered(self, response) -> None:
        self._prefetch_answered_at = time.monotonic()
        result = response.coordinators[0] if response.coordinators else response
        if result.error_code != 0:
            return
        try:
            node_id = self.cluster.add_coordinator(result, CoordinatorType.GROUP, self._group_id)
            self.get_connection(node_id)
        except Exception as exc:  # the coordinator's own lookup and connect report it
            log.debug("prefetched coordinator: not connecting now: %s", exc)

    def _take_prefetch(self, request) -> Future | None:
        """The prefetched lookup for the coordinator's first one, if it is
        for this group, in flight or answered recently, and not failed."""
        future, self._prefetch = self._prefetch, None
        if future is None or future.failed():
            return None
        if request.key_type != CoordinatorType.GROUP or list(request.coordinator_keys or [request.key]) != [
                self._group_id]:
            return None
        if future.is_done and time.monotonic() - self._prefetch_answered_at > PREFETCH_MAX_AGE_S:
            return None
        return future

    def _lookup_answered(self, node_id: str, outcome) -> None:
        """Note whether ``node_id`` answered a lookup without an error (a
        response whose error code is 0, in its only coordinator with v4+)."""
        if isinstance(outcome, BaseException):
            refused = True
        else:
            answer = outcome.coordinators[0] if getattr(outcome, "coordinators", None) else outcome
            refused = getattr(answer, "error_code", 0) != 0
        if refused:
            self._refused_by = node_id
        elif self._refused_by == node_id:
            self._refused_by = None

    def pick_daemon(self) -> str:
        """A connected, idle daemon if there is one; else the next one in
        turn that is not backing off after a failed connection; else the one
        whose back-off ends first (its send then fails as not ready, and the
        coordinator lookup retries). The daemon whose last lookup failed
        comes last, whatever its connection."""
        candidates = [n for n in self._daemon_ids if n != self._refused_by] or self._daemon_ids
        for node_id in candidates:
            conn = self._conns.get(node_id)
            if conn is not None and conn.connected and not conn.paused and not conn.in_flight_requests:
                return node_id
        for _ in range(len(self._daemon_ids)):
            node_id = self._daemon_ids[next(self._rotation)]
            if node_id in candidates and self.connection_delay(node_id) == 0:
                return node_id
        return min(self._daemon_ids, key=lambda n: (n not in candidates, self.connection_delay(n)))


def client_factory(zkcoord_daemons: tuple[tuple[str, int], ...], rebalance_timeout_ms: int | None = None,
                   coordinator_options: dict | None = None):
    """A ``kafka_client`` callable for ``KafkaConsumer``: kafka-python's own
    ``KafkaNetClient`` on a :class:`ZkcoordConnectionManager`
    (``coordinator_options``: the daemons' own security settings, if they differ)."""

    def make(**configs) -> KafkaNetClient:
        net = NetworkSelector(**configs)
        manager = ZkcoordConnectionManager(net, zkcoord_daemons=zkcoord_daemons,
                                           rebalance_timeout_ms=rebalance_timeout_ms,
                                           coordinator_options=coordinator_options, **configs)
        return KafkaNetClient(net=net, manager=manager, **configs)

    return make
