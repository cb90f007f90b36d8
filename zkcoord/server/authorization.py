"""Who may do what to which group: the API handlers' questions to Kafka's
authorizer, asked as Kafka's ``KafkaApis`` asks them.

Owns :class:`GroupAccess`, the handlers' one door to
:class:`zkcoord.core.acl.Authorizer` (or to nothing: without an authorizer
every request is allowed, as on a broker without ``authorizer.class.name``).
Which operation each API needs is the handlers' business
(:mod:`zkcoord.server.apis`); this module turns a connection into Kafka's
(principal, host) pair and answers per group, per topic list, and for the
cluster:

=================  ==========================================================
FindCoordinator    DESCRIBE on the group
Join/Sync/Heart-   READ on the group
beat/LeaveGroup
OffsetCommit       READ on the group, READ on each topic
OffsetFetch        DESCRIBE on the group, DESCRIBE on each topic (unauthorized
                   topics are left out of an all-topics fetch)
DescribeGroups     DESCRIBE on each group (and, on request, the group's
                   authorized operations)
ListGroups         DESCRIBE on the cluster lists all; else the groups the
                   principal may DESCRIBE
DeleteGroups       DELETE on each group
=================  ==========================================================

The host is the client's address as Java's ``InetAddress.getHostAddress``
prints it (:func:`zkcoord.core.acl.java_host_address`), since ACLs name
hosts as Kafka's tools wrote them.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING

from zkcoord.core.acl import AclOperation as Operation
from zkcoord.core.acl import ResourceType, java_host_address

if TYPE_CHECKING:
    from zkcoord.core.acl import Authorizer
    from zkcoord.server.transport import ConnectionInfo

__all__ = ["GroupAccess", "OPEN", "CLUSTER_NAME", "Operation"]

CLUSTER_NAME = "kafka-cluster"  # Kafka's one Cluster resource
# Kafka's DescribeGroups authorized operations: what a GROUP resource supports (AclOperation codes).
_GROUP_OPERATIONS = (Operation.READ, Operation.DESCRIBE, Operation.DELETE)
UNKNOWN_OPERATIONS = None  # authorized_operations not asked for (kafka-python writes Kafka's INT32_MIN)
_host = lru_cache(maxsize=4096)(java_host_address)  # asked on every heartbeat: parse each address once


class GroupAccess:
    """The handlers' authorization questions; ``authorizer`` None allows all."""

    def __init__(self, authorizer: Authorizer | None = None) -> None:
        self.authorizer = authorizer

    @property
    def enforcing(self) -> bool:
        return self.authorizer is not None

    def _allowed(self, connection: ConnectionInfo, operation, resource_type, name: str) -> bool:
        return self.authorizer.authorize(connection.principal, _host(connection.peer_host),
                                         operation, resource_type, name)

    def group(self, connection: ConnectionInfo, operation: Operation, group_id: str) -> bool:
        return self.authorizer is None or self._allowed(connection, operation, ResourceType.GROUP, group_id)

    def topics(self, connection: ConnectionInfo, operation: Operation, names: Iterable[str]) -> set[str]:
        """The distinct ``names`` the connection may ``operation``."""
        distinct = set(names)
        if self.authorizer is None:
            return distinct
        return {name for name in distinct if self._allowed(connection, operation, ResourceType.TOPIC, name)}

    def cluster(self, connection: ConnectionInfo, operation: Operation) -> bool:
        return self.authorizer is None or self._allowed(connection, operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def group_operations(self, connection: ConnectionInfo, group_id: str) -> set[int]:
        """DescribeGroups' ``authorized_operations`` of a group (Kafka's
        ``authorizedOperations``): the codes of the operations allowed, which
        kafka-python's codec writes as the 32-bit field (bit ``code`` each)."""
        return {op.code for op in _GROUP_OPERATIONS if self.group(connection, op, group_id)}


OPEN = GroupAccess()
