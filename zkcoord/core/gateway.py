"""The gateway's decisions, without I/O: which API goes where, what
ApiVersions advertises, which gateway port stands for which broker, and the
node ids zkcoord's daemons take in a client's view of the cluster.

The gateway (:mod:`zkcoord.gateway`) is what stock Kafka clients bootstrap
from. It answers the group APIs itself and passes everything else to the
brokers. This module owns the rules it follows:

1. **Routes.** Every API key has one route (:class:`Route`):

   ========== =============================================================
   LOCAL      answered by zkcoord: the group APIs, classic and KIP-848's
              (ConsumerGroupHeartbeat, ConsumerGroupDescribe: advertised
              only while the daemon serves the consumer protocol)
   VERSIONS   ApiVersions, answered by the gateway itself (rule 2)
   COORDINATOR FindCoordinator: group keys are LOCAL, other keys (transaction
              ids) are forwarded and their answer rewritten
   REWRITE    forwarded; the answer carries broker addresses, so it is
              decoded and rewritten (Metadata, DescribeCluster; Fetch and
              Produce only from the versions that carry node endpoints)
   FORWARD    forwarded, request and answer passed as opaque bytes
   HIDDEN     group-coordinator APIs zkcoord does not serve (yet): never
              advertised, never forwarded (a broker would act on a group
              it does not coordinate)
   LOGIN      SaslHandshake, SaslAuthenticate: the gateway's SASL login,
              checked by the gateway, and passed through to the client's
              broker when the brokers speak SASL too (docs/security.md)
   ========== =============================================================

2. **ApiVersions** advertises, per API: for LOCAL APIs zkcoord's own range
   (the broker does not handle them); for forwarded APIs the broker's range,
   capped where the gateway must decode the answer at what kafka-python's
   generated messages can decode, and, for an API the gateway does not
   decode (``decodable`` leaves it out), at the last version whose answers
   carry no address (Fetch v15, Produce v9 unless the gateway decodes their
   KIP-951 leader hints); for FindCoordinator and ApiVersions the
   intersection of both; so for the LOGIN APIs on a SASL listener (on any
   other listener they are left out); HIDDEN APIs are left out.

3. **Ports.** A client must reach every broker through the gateway without
   TLS SNI, so each broker has a gateway port of its own: with the gateway
   on port P and broker ids LOW..HIGH, broker b is served on
   ``P + 1 + (b - LOW)``. The same arithmetic applies to the advertised
   port, so every gateway of a deployment uses the same layout and an
   operator can open the range in a firewall once.

4. **Node ids.** zkcoord's daemons appear in Metadata as nodes of their own
   (the Java admin client sends a group's requests only to a node id it
   finds in Metadata), with ids ``GATEWAY_NODE_ID_BASE + daemon node id``.
   Kafka broker ids are far below (ids up to ``reserved.broker.max.id``,
   1000, and generated ids from 1001 up), and the Java consumer's separate
   coordinator connection id ``2**31 - 1 - id`` stays above 2**30 - 2**20:
   :func:`colliding_broker_ids` names any broker that would break this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from zkcoord.core.api_keys import (
    ADD_OFFSETS_TO_TXN, ALTER_SHARE_GROUP_OFFSETS, API_VERSIONS, CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT,
    DELETE_GROUPS, DELETE_SHARE_GROUP_OFFSETS, DELETE_SHARE_GROUP_STATE, DESCRIBE_CLUSTER, DESCRIBE_GROUPS,
    DESCRIBE_QUORUM, DESCRIBE_SHARE_GROUP_OFFSETS, FETCH, FIND_COORDINATOR, HEARTBEAT, INITIALIZE_SHARE_GROUP_STATE,
    JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS, LOGIN_APIS, METADATA, OFFSET_COMMIT, OFFSET_DELETE, OFFSET_FETCH, PRODUCE,
    READ_SHARE_GROUP_STATE, READ_SHARE_GROUP_STATE_SUMMARY, SHARE_ACKNOWLEDGE, SHARE_FETCH, SHARE_GROUP_DESCRIBE,
    SHARE_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE, STREAMS_GROUP_HEARTBEAT, SYNC_GROUP, TXN_OFFSET_COMMIT,
    WRITE_SHARE_GROUP_STATE,
)

__all__ = [
    "Route", "route_of", "needs_rewrite", "advertised_versions", "intersect_versions",
    "BrokerPorts", "parse_broker_ids", "gateway_node_id", "colliding_broker_ids",
    "GATEWAY_NODE_ID_BASE", "VersionTable",
]

VersionTable = Mapping[int, tuple[int, int]]  # api key -> (min version, max version)

GATEWAY_NODE_ID_BASE = 1 << 30
MAX_DAEMON_NODE_ID = (1 << 20) - 1
INT32_MAX = (1 << 31) - 1
MAX_BROKER_PORTS = 1024


class Route(Enum):
    LOCAL = "local"
    VERSIONS = "versions"
    COORDINATOR = "coordinator"
    REWRITE = "rewrite"
    FORWARD = "forward"
    HIDDEN = "hidden"
    LOGIN = "login"


LOCAL_APIS = frozenset({OFFSET_COMMIT, OFFSET_FETCH, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP,
                        DESCRIBE_GROUPS, LIST_GROUPS, DELETE_GROUPS, CONSUMER_GROUP_HEARTBEAT,
                        CONSUMER_GROUP_DESCRIBE})

# Group-coordinator APIs a broker would answer for a group zkcoord coordinates:
# AddOffsetsToTxn and TxnOffsetCommit, exactly-once offset commits inside a
# Kafka transaction (zkcoord keeps offsets outside the transaction log);
# OffsetDelete; KIP-932's share groups; KIP-1071's streams groups.
HIDDEN_APIS = frozenset({
    ADD_OFFSETS_TO_TXN, TXN_OFFSET_COMMIT, OFFSET_DELETE, SHARE_GROUP_HEARTBEAT, SHARE_GROUP_DESCRIBE, SHARE_FETCH, SHARE_ACKNOWLEDGE, INITIALIZE_SHARE_GROUP_STATE,
    READ_SHARE_GROUP_STATE, WRITE_SHARE_GROUP_STATE, DELETE_SHARE_GROUP_STATE, READ_SHARE_GROUP_STATE_SUMMARY,
    STREAMS_GROUP_HEARTBEAT, STREAMS_GROUP_DESCRIBE, DESCRIBE_SHARE_GROUP_OFFSETS, ALTER_SHARE_GROUP_OFFSETS,
    DELETE_SHARE_GROUP_OFFSETS,
})

# Answers carrying broker addresses from this version on.
REWRITE_FROM_VERSION = {METADATA: 0, DESCRIBE_CLUSTER: 0, FETCH: 16, PRODUCE: 10}

# DescribeQuorum v2 lists the KRaft controllers' listeners: controllers are not
# behind the gateway, so clients get v0-1, which carry no address.
VERSION_CAPS = {DESCRIBE_QUORUM: 1}


def route_of(api_key: int) -> Route:
    if api_key in LOCAL_APIS:
        return Route.LOCAL
    if api_key == API_VERSIONS:
        return Route.VERSIONS
    if api_key == FIND_COORDINATOR:
        return Route.COORDINATOR
    if api_key in LOGIN_APIS:
        return Route.LOGIN
    if api_key in HIDDEN_APIS:
        return Route.HIDDEN
    if api_key in REWRITE_FROM_VERSION:
        return Route.REWRITE
    return Route.FORWARD


def needs_rewrite(api_key: int, api_version: int) -> bool:
    """Whether the broker's answer to this request may carry broker addresses."""
    start = REWRITE_FROM_VERSION.get(api_key)
    return start is not None and api_version >= start


def intersect_versions(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    low, high = max(a[0], b[0]), min(a[1], b[1])
    return (low, high) if low <= high else None


def cluster_versions(tables: Iterable[VersionTable]) -> dict[int, tuple[int, int]]:
    """What every broker supports: per API key present in all tables, the
    intersection of their ranges (an API with an empty one is left out)."""
    tables = list(tables)
    if not tables:
        return {}
    result = dict(tables[0])
    for table in tables[1:]:
        for key in list(result):
            both = intersect_versions(result[key], table[key]) if key in table else None
            if both is None:
                del result[key]
            else:
                result[key] = both
    return result


def advertised_versions(broker: VersionTable, zkcoord: VersionTable,
                        decodable: VersionTable) -> dict[int, tuple[int, int]]:
    """The ApiVersions table a client of the gateway gets (rule 2).

    ``broker``: what the broker (or every broker) supports; ``zkcoord``: what
    the daemon serves (its codec's registry); ``decodable``: the versions
    kafka-python's generated messages decode, for the APIs whose answers the
    gateway decodes.
    """
    table: dict[int, tuple[int, int]] = {}
    for key, versions in broker.items():
        route = route_of(key)
        if route in (Route.HIDDEN, Route.LOCAL):
            continue
        if route in (Route.VERSIONS, Route.COORDINATOR, Route.LOGIN):
            mine = zkcoord.get(key)
            versions = intersect_versions(versions, mine) if mine else None
        elif route is Route.REWRITE:
            start = REWRITE_FROM_VERSION[key]
            limit = decodable.get(key)
            if limit is None:  # nothing decodable: only the versions without addresses
                versions = intersect_versions(versions, (versions[0], start - 1))
            elif versions[1] >= start:
                versions = intersect_versions(versions, (versions[0], limit[1]))
        if key in VERSION_CAPS and versions is not None:
            versions = intersect_versions(versions, (versions[0], VERSION_CAPS[key]))
        if versions is not None:
            table[key] = versions
    for key in LOCAL_APIS:
        if key in zkcoord:
            table[key] = zkcoord[key]
    if API_VERSIONS not in table and API_VERSIONS in zkcoord:
        table[API_VERSIONS] = zkcoord[API_VERSIONS]  # no broker known yet: the group APIs alone
    if not broker:  # before any broker answered: what the gateway itself serves
        for key in (FIND_COORDINATOR, *LOGIN_APIS):
            if key not in table and key in zkcoord:
                table[key] = zkcoord[key]
    return dict(sorted(table.items()))


def parse_broker_ids(text: str, setting: str = "gateway_broker_ids") -> tuple[int, int]:
    """``LOW-HIGH`` (or one id) -> (low, high); ValueError naming ``setting``."""
    low_text, sep, high_text = text.strip().partition("-")
    try:
        low = int(low_text)
        high = int(high_text) if sep else low
    except ValueError:
        raise ValueError(f"{setting}={text!r} is not LOW-HIGH, a range of broker ids such as 0-31") from None
    if not 0 <= low <= high:
        raise ValueError(f"{setting}={text!r}: need 0 <= LOW <= HIGH")
    if high - low + 1 > MAX_BROKER_PORTS:
        raise ValueError(f"{setting}={text!r} spans {high - low + 1} ids; at most {MAX_BROKER_PORTS} "
                         "broker ports per gateway")
    if high >= GATEWAY_NODE_ID_BASE - MAX_DAEMON_NODE_ID:
        raise ValueError(f"{setting}={text!r} reaches the node ids of zkcoord's daemons "
                         f"({GATEWAY_NODE_ID_BASE} and up)")
    return low, high


@dataclass(frozen=True)
class BrokerPorts:
    """Rule 3: broker b is on ``first_port + (b - low_id)`` when LOW <= b <= HIGH."""

    low_id: int
    high_id: int

    def offset(self, broker_id: int) -> int | None:
        """Ports after the gateway's own port, None for a broker out of range."""
        if self.low_id <= broker_id <= self.high_id:
            return 1 + broker_id - self.low_id
        return None

    @property
    def count(self) -> int:
        return self.high_id - self.low_id + 1


def gateway_node_id(daemon_node_id: int) -> int:
    """The node id a daemon's gateway has in clients' Metadata (rule 4)."""
    if not 0 <= daemon_node_id <= MAX_DAEMON_NODE_ID:
        raise ValueError(f"daemon node id {daemon_node_id} is outside 0..{MAX_DAEMON_NODE_ID}, "
                         "the ids a gateway can stand for")
    return GATEWAY_NODE_ID_BASE + daemon_node_id


def colliding_broker_ids(broker_ids: Iterable[int], gateway_ids: Iterable[int]) -> list[int]:
    """Broker ids equal to a gateway node id, or to the id the Java consumer
    gives its separate connection to such a coordinator (``2**31-1 - id``)."""
    taken = set()
    for gid in gateway_ids:
        taken.add(gid)
        taken.add(INT32_MAX - gid)
    return sorted(b for b in set(broker_ids) if b in taken or b >= GATEWAY_NODE_ID_BASE)
