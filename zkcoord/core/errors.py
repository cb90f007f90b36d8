"""Kafka protocol error codes as the group coordinator answers them.

This module owns two things:

* :class:`ErrorCode`, the numeric codes of Kafka's ``Errors.java`` that a
  group coordinator can put on the wire. The numbers were checked against
  Kafka 3.9 (``clients/src/main/java/org/apache/kafka/common/protocol/
  Errors.java``; KIP-848's against Kafka 4.4); they are protocol constants
  and never change.
* :func:`validate_group_id`, the rule for group ids this project accepts.

These are *wire* codes, not Python exceptions: handlers return them inside
replies. Exceptions zkcoord raises live in :mod:`zkcoord.errors`.
"""

from __future__ import annotations

import re
from enum import IntEnum

__all__ = ["ErrorCode", "MAX_GROUP_ID_LENGTH", "validate_group_id"]


class ErrorCode(IntEnum):
    """Kafka error codes (``Errors.java``) used by the group coordinator."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    SASL_AUTHENTICATION_FAILED = 58
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88
    UNKNOWN_TOPIC_ID = 100
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    INVALID_REGULAR_EXPRESSION = 128

    @property
    def retriable(self) -> bool:
        """True when Kafka's exception for this code is a RetriableException
        (the client may retry the same request unchanged)."""
        return self in _RETRIABLE


_RETRIABLE = frozenset(
    {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.UNSTABLE_OFFSET_COMMIT,
    }
)

MAX_GROUP_ID_LENGTH = 249


def validate_group_id(group_id: str | None, *, allow_empty: bool = False) -> ErrorCode:
    """Return ``ErrorCode.NONE`` if ``group_id`` can name a group, else
    ``ErrorCode.INVALID_GROUP_ID``.

    Kafka's rules (``GroupCoordinator.isValidGroupId``): any string names a
    group; the empty id only for FindCoordinator and the APIs Kafka keeps it
    for (OffsetCommit, OffsetFetch, DescribeGroups, DeleteGroups:
    ``allow_empty``). Characters a znode name cannot hold are encoded by
    :func:`zkcoord.zk.paths.group_name`, so they are served too. zkcoord
    refuses only ids longer than 249 characters (Kafka's topic name limit):
    each commit's multi-op repeats the group's path once per partition and
    must stay under ZooKeeper's ``jute.maxbuffer``.

    >>> validate_group_id("payments"), validate_group_id("a/b"), validate_group_id("\U0001F642")
    (<ErrorCode.NONE: 0>, <ErrorCode.NONE: 0>, <ErrorCode.NONE: 0>)
    >>> validate_group_id(""), validate_group_id("", allow_empty=True)
    (<ErrorCode.INVALID_GROUP_ID: 24>, <ErrorCode.NONE: 0>)
    """
    if not isinstance(group_id, str) or (not group_id and not allow_empty) or len(group_id) > MAX_GROUP_ID_LENGTH:
        return ErrorCode.INVALID_GROUP_ID
    return ErrorCode.NONE
