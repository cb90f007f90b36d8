"""Kafka protocol error codes as the group coordinator answers them.

This module owns two things:

* :class:`ErrorCode`, the numeric codes of Kafka's ``Errors.java`` that a
  group coordinator can put on the wire. The numbers were checked against
  Kafka 3.9 (``clients/src/main/java/org/apache/kafka/common/protocol/
  Errors.java``); they are protocol constants and never change.
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
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    UNSTABLE_OFFSET_COMMIT = 88

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


# ZooKeeper's PathUtils.validatePath rejects these code points in a znode
# name, and the group id becomes a znode name; "/" would split it in two.
# One compiled class instead of a per-character loop: this check runs on every
# request, so it must cost far less than the request.
_FORBIDDEN = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff/]")


def validate_group_id(group_id: str | None) -> ErrorCode:
    """Return ``ErrorCode.NONE`` if ``group_id`` can name a group, else
    ``ErrorCode.INVALID_GROUP_ID``.

    Kafka itself only refuses an empty id; zkcoord stores each group under a
    znode named by its id, so it also refuses what cannot be a znode name:
    ``None``, ``""``, ``"."``, ``".."``, ids containing ``/`` or control /
    reserved characters, and ids longer than 249 characters (Kafka's topic
    name limit, which keeps paths short).

    >>> validate_group_id("payments")
    <ErrorCode.NONE: 0>
    >>> validate_group_id("a/b")
    <ErrorCode.INVALID_GROUP_ID: 24>
    """
    if not isinstance(group_id, str) or group_id in ("", ".", ".."):
        return ErrorCode.INVALID_GROUP_ID
    if len(group_id) > MAX_GROUP_ID_LENGTH or _FORBIDDEN.search(group_id) is not None:
        return ErrorCode.INVALID_GROUP_ID
    return ErrorCode.NONE
