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

OffsetCommit and OffsetFetch split a request by what the principal may do
(:func:`commit_authorized`, :func:`fetch_authorized`): the refused part is
answered here, the rest by the group manager, as KafkaApis does.

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
from zkcoord.core.errors import ErrorCode
from zkcoord.core.offset_fetch import FetchAnswer

if TYPE_CHECKING:
    from zkcoord.core.acl import Authorizer
    from zkcoord.wire.connections import ConnectionInfo

__all__ = ["GroupAccess", "OPEN", "CLUSTER_NAME", "Operation", "commit_authorized", "fetch_authorized", "with_refused"]

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


async def commit_authorized(access: GroupAccess, offsets, connection, group_id: str, member_id: str,
                            generation: int, instance: str | None, wanted: list,
                            api_version: int = 0) -> list[ErrorCode]:
    """An OffsetCommit's error per ``(topic, partition, offset, metadata)``:
    GROUP_AUTHORIZATION_FAILED for all without READ on the group,
    TOPIC_AUTHORIZATION_FAILED for the partitions of topics without READ,
    the answer of ``offsets`` (:class:`~zkcoord.server.group_offsets.GroupOffsets`)
    for the rest."""
    if not access.group(connection, Operation.READ, group_id):
        return [ErrorCode.GROUP_AUTHORIZATION_FAILED] * len(wanted)
    if not access.enforcing:
        return await offsets.commit(group_id, member_id, generation, instance, wanted, api_version)
    allowed = access.topics(connection, Operation.READ, (w[0] for w in wanted))
    kept = [w for w in wanted if w[0] in allowed]
    answers = iter(await offsets.commit(group_id, member_id, generation, instance, kept, api_version)
                   if kept else ())
    return [next(answers) if w[0] in allowed else ErrorCode.TOPIC_AUTHORIZATION_FAILED for w in wanted]


async def fetch_authorized(access: GroupAccess, offsets, connection, group_id: str,
                           wanted) -> tuple[ErrorCode, FetchAnswer, list]:
    """One group's OffsetFetch as Kafka authorizes it: (group error, answer
    of the topics the principal may DESCRIBE, the refused topics
    ``[(topic, partitions)]`` asked for by name); an all-topics fetch
    (``wanted`` None) leaves the refused topics out."""
    if not access.group(connection, Operation.DESCRIBE, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, FetchAnswer({}), []
    if not access.enforcing:
        return (*await offsets.fetch(group_id, wanted), [])
    if wanted is None:
        code, answer = await offsets.fetch(group_id, None)
        topics = {t for t, _ in answer.stored} | {t for t, _ in answer.corrupt}
        allowed = access.topics(connection, Operation.DESCRIBE, topics)
        return code, FetchAnswer(None, {tp: v for tp, v in answer.stored.items() if tp[0] in allowed},
                                 {tp: v for tp, v in answer.corrupt.items() if tp[0] in allowed}), []
    allowed = access.topics(connection, Operation.DESCRIBE, wanted)
    refused = [(t, parts) for t, parts in wanted.items() if t not in allowed]
    code, answer = await offsets.fetch(group_id, {t: p for t, p in wanted.items() if t in allowed})
    return code, answer, refused


def with_refused(topics: list[dict], refused: list) -> list[dict]:
    """OffsetFetch answer topics plus the refused ones, each partition
    TOPIC_AUTHORIZATION_FAILED (after the others, as Kafka lists them)."""
    if not refused:
        return topics
    return topics + [{"name": topic, "partitions": [
        {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
         "error_code": int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)} for p in parts]} for topic, parts in refused]
