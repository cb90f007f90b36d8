"""The gateway's view of the Kafka cluster behind it: which brokers there
are and where, and what API versions each supports.

Owns :class:`ClusterView`, kept current by the gateway's own requests (a
:class:`ControlClient` connection asks a broker for Metadata without topics
every ``refresh_ms``, and each broker for its ApiVersions when it is first
seen or its address changes) and by the Metadata answers clients receive
through the gateway (:meth:`ClusterView.observe`). A broker that drops out
of Metadata keeps its last address: a restarting broker comes back there,
and meanwhile its clients see what they would see directly, a refused
connection.

Nothing here blocks the daemon: when Kafka is down the view stays empty or
stale, the refresh loop keeps trying, and the gateway goes on serving
groups.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse
from kafka.protocol.schemas.fields.codecs import Int32

import zkcoord
from zkcoord.core.api_keys import API_VERSIONS, METADATA
from zkcoord.core.errors import ErrorCode
from zkcoord.core.gateway import cluster_versions
from zkcoord.errors import AuthenticationError, ServiceUnavailableError
from zkcoord.wire.messages import build_message
from zkcoord.wire.responses import decode_response_frame

__all__ = ["Broker", "BrokerVersions", "ClusterView", "ControlClient"]

log = logging.getLogger(__name__)
CLIENT_ID = "zkcoord-gateway"
CONNECT_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_S = 15.0
FIRST_REFRESH_S = 5.0  # how long a daemon's start waits for the brokers before serving anyway
VERSIONS_REFRESH_ROUNDS = 60  # ApiVersions of every broker again after this many refreshes


@dataclass(frozen=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port


@dataclass(frozen=True)
class BrokerVersions:
    """One broker's ApiVersions answer: its table, and the v3 extras
    (supported_features, finalized_features_epoch, finalized_features,
    zk_migration_ready) a client's ApiVersions v3 answer carries on."""

    table: dict[int, tuple[int, int]]
    extras: dict = field(default_factory=dict)


class ControlClient:
    """One connection of the gateway's own, one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, where: str) -> None:
        self._reader, self._writer, self.where = reader, writer, where
        self._correlation_ids = itertools.count(1)

    @classmethod
    async def open(cls, host: str, port: int, timeout_s: float = CONNECT_TIMEOUT_S,
                   security=None) -> ControlClient:
        """A connection to the broker, logged in with the daemon's own Kafka
        client settings (``security``, a KafkaClientSecurity; None: PLAINTEXT).
        ServiceUnavailableError, or AuthenticationError when the broker refuses
        the login."""
        if security is not None:
            from zkcoord.kafka.client_security import open_kafka_connection

            connection = await open_kafka_connection(host, port, security, client_id=CLIENT_ID, timeout_s=timeout_s)
            return cls(connection.reader, connection.writer, f"{host}:{port}")
        try:
            async with asyncio.timeout(timeout_s):  # not wait_for: on 3.11 it can swallow a cancel (gh-86296)
                reader, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            raise ServiceUnavailableError(f"Kafka broker {host}:{port} does not accept connections: {exc}") from None
        return cls(reader, writer, f"{host}:{port}")

    async def _call(self, request, version: int) -> tuple[int, bytes]:
        correlation_id = next(self._correlation_ids)
        request.with_header(correlation_id=correlation_id, client_id=CLIENT_ID)
        try:
            self._writer.write(bytes(request.encode(header=True, framed=True)))
            await self._writer.drain()
            async with asyncio.timeout(REQUEST_TIMEOUT_S):  # not wait_for (gh-86296)
                prefix = await self._reader.readexactly(4)
                size, _ = Int32.decode_from(prefix, 0)
                payload = await self._reader.readexactly(size)
        except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
            raise ServiceUnavailableError(f"Kafka broker {self.where} did not answer "
                                          f"{type(request).__name__} v{version}: {exc!r}") from None
        return correlation_id, prefix + payload

    async def api_versions(self) -> BrokerVersions:
        version = 3
        for _ in range(2):
            request = build_message(ApiVersionsRequest, version, client_software_name=CLIENT_ID,
                                    client_software_version=zkcoord.__version__)
            _, frame = await self._call(request, version)
            answer = ApiVersionsResponse.decode(frame[4:], version=version, header=True)
            table = {e.api_key: (e.min_version, e.max_version) for e in answer.api_keys}
            if answer.error_code == ErrorCode.UNSUPPORTED_VERSION and API_VERSIONS in table:
                version = min(version, table[API_VERSIONS][1])  # KIP-511: retry at a version it knows
                continue
            if answer.error_code:
                raise ServiceUnavailableError(f"Kafka broker {self.where} answered ApiVersions with error "
                                              f"{answer.error_code}")
            extras = {}
            if version >= 3:
                for name in ("supported_features", "finalized_features_epoch", "finalized_features",
                             "zk_migration_ready"):
                    value = getattr(answer, name, None)
                    if value is not None:
                        extras[name] = value
            return BrokerVersions(table, extras)
        raise ServiceUnavailableError(f"Kafka broker {self.where} refused every ApiVersions version")

    async def brokers(self, versions: BrokerVersions) -> list[Broker]:
        """The cluster's live brokers (Metadata without topics)."""
        low, high = versions.table.get(METADATA, (0, 0))
        version = min(high, MetadataRequest.max_version)
        if version < max(low, 1):
            raise ServiceUnavailableError(f"Kafka broker {self.where} serves no Metadata version >= 1")
        request = build_message(MetadataRequest, version, topics=[], allow_auto_topic_creation=False)
        _, frame = await self._call(request, version)
        _, answer = decode_response_frame(frame, MetadataResponse, version)
        return [Broker(b.node_id, b.host, b.port, getattr(b, "rack", None)) for b in answer.brokers]

    async def close(self) -> None:
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, ConnectionError):
            pass


class ClusterView:
    """Brokers by id, their ApiVersions, kept current in the background."""

    def __init__(self, bootstrap: list[tuple[str, int]], refresh_ms: int,
                 on_broker: Callable[[Broker], None] | None = None, security=None) -> None:
        self.bootstrap = list(bootstrap)
        self.security = security  # KafkaClientSecurity of the control connections; None: PLAINTEXT
        self.refresh_s = refresh_ms / 1000
        self.brokers: dict[int, Broker] = {}
        self.versions: dict[int, BrokerVersions] = {}
        self._on_broker = on_broker
        self._task: asyncio.Task | None = None
        self._rotation = itertools.count()
        self._rounds = 0
        self._wake = asyncio.Event()
        self._stopping = False  # the loop's own exit: a cancel swallowed in a refresh must not keep it alive
        self._pulse = asyncio.Event()  # set (and replaced) after every refresh
        self.last_error: str | None = None

    # -- reading --------------------------------------------------------------------
    def upstream_candidates(self) -> list[tuple[str, int]]:
        """Where a connection of the gateway's own port may forward to: the known
        brokers, starting from a different one each time, then the bootstrap list."""
        known = [b.address for _, b in sorted(self.brokers.items())]
        if known:
            start = next(self._rotation) % len(known)
            known = known[start:] + known[:start]
        return known + [a for a in self.bootstrap if a not in known]

    def versions_of(self, broker_id: int | None) -> BrokerVersions | None:
        """One broker's versions; for None, what every known broker supports
        (the extras of any one of them)."""
        if broker_id is not None:
            return self.versions.get(broker_id)
        if not self.versions:
            return None
        tables = [v.table for v in self.versions.values()]
        return BrokerVersions(cluster_versions(tables), next(iter(self.versions.values())).extras)

    async def versions_ready(self, broker_id: int | None, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until the versions of ``broker_id`` (None:
        of any broker) are known, asking for a refresh now; whether they are."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.versions_of(broker_id) is None:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._wake.set()
            try:
                async with asyncio.timeout(remaining):  # not wait_for: on 3.11 it can swallow a cancel (gh-86296)
                    await self._pulse.wait()
            except TimeoutError:
                return False
        return True

    def _pulsed(self) -> None:
        pulse, self._pulse = self._pulse, asyncio.Event()
        pulse.set()

    # -- learning -------------------------------------------------------------------
    def observe(self, brokers: list[tuple[int, str, int, str | None]]) -> None:
        """Brokers seen in a Metadata answer (ours or a client's)."""
        for node_id, host, port, rack in brokers:
            found = Broker(node_id, host, port, rack)
            old = self.brokers.get(node_id)
            if old == found:
                continue
            self.brokers[node_id] = found
            if old is None or old.address != found.address:
                self.versions.pop(node_id, None)
                self._wake.set()  # fetch its versions soon
                log.info("gateway: broker %d is at %s:%d", node_id, host, port)
            if self._on_broker is not None:
                self._on_broker(found)

    async def start(self, first_wait_s: float = FIRST_REFRESH_S) -> None:
        """One refresh (given up after ``first_wait_s``: the daemon starts
        while Kafka is down), then refreshes in the background."""
        try:
            await asyncio.wait_for(self.refresh(), first_wait_s)
        except (TimeoutError, ServiceUnavailableError) as exc:
            log.warning("gateway: no Kafka broker answered yet (%s); retrying every %.1f s", exc or "timed out",
                        self.refresh_s)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="gateway-cluster-view")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._wake.set()
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                async with asyncio.timeout(self.refresh_s):  # not wait_for: on 3.11 it can swallow a cancel (gh-86296)
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                await self.refresh()
            except (ServiceUnavailableError, AuthenticationError) as exc:
                if self.last_error != str(exc):
                    log.warning("gateway: cannot refresh the broker list: %s", exc)
                self.last_error = str(exc)
            except Exception:  # a bug: keep the loop alive, say so
                log.exception("gateway: broker list refresh failed")
            finally:
                self._pulsed()

    async def refresh(self) -> None:
        """Ask one reachable broker for the broker list, then every broker
        whose versions are unknown (or due again) for its ApiVersions."""
        errors = []
        for host, port in self.upstream_candidates():
            try:
                client = await ControlClient.open(host, port, security=self.security)
            except ServiceUnavailableError as exc:
                errors.append(str(exc))
                continue
            try:
                versions = await client.api_versions()
                brokers = await client.brokers(versions)
            except ServiceUnavailableError as exc:
                errors.append(str(exc))
                continue
            finally:
                await client.close()
            self.last_error = None
            self.observe([(b.node_id, b.host, b.port, b.rack) for b in brokers])
            await self._refresh_versions(brokers)
            return
        raise ServiceUnavailableError("; ".join(errors) or "no Kafka bootstrap server is configured")

    async def _refresh_versions(self, brokers: list[Broker]) -> None:
        self._rounds += 1
        due = self._rounds % VERSIONS_REFRESH_ROUNDS == 0
        wanted = [b for b in brokers if due or b.node_id not in self.versions]
        results = await asyncio.gather(*(self._versions_of(b) for b in wanted), return_exceptions=True)
        for broker, result in zip(wanted, results):
            if isinstance(result, BrokerVersions):
                self.versions[broker.node_id] = result
            elif isinstance(result, ServiceUnavailableError):
                log.warning("gateway: %s", result)
            elif isinstance(result, BaseException):
                raise result

    async def _versions_of(self, broker: Broker) -> BrokerVersions:
        client = await ControlClient.open(*broker.address, security=self.security)
        try:
            return await client.api_versions()
        finally:
            await client.close()
