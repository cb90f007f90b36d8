"""What Kafka's answers to a forwarded commit mean for zkcoord's members.

A group in ``dual`` or ``kafka`` offset storage has its members in zkcoord;
the daemon forwards their commits to Kafka as a group *without* members
(generation -1, empty member id). Kafka's classic coordinator
(``GroupCoordinator.doCommitOffsets`` in Kafka 3.9) stores such a commit only
while the group is Empty on *its* side; otherwise it answers about *its own*
members::

    Kafka's group                         Kafka's answer (every partition)
    ------------------------------------  --------------------------------
    Dead (being unloaded)                 COORDINATOR_NOT_AVAILABLE
    a static member fenced                FENCED_INSTANCE_ID
    Empty                                 stored: NONE
    CompletingRebalance                   REBALANCE_IN_PROGRESS
    members, the empty id not among them  UNKNOWN_MEMBER_ID
    (then) another generation             ILLEGAL_GENERATION

Those four membership codes are about consumers that joined the group
through a broker, never about the zkcoord member whose commit was
forwarded. Passed on as they are, a client drops its zkcoord membership
(kafka-python and Java reset their generation on UNKNOWN_MEMBER_ID and
ILLEGAL_GENERATION, rejoin on REBALANCE_IN_PROGRESS, stop on
FENCED_INSTANCE_ID) and leaves its old member id behind for a whole session
timeout. :func:`client_error` turns them into UNKNOWN_SERVER_ERROR, Kafka's
own code for "this commit was not stored" that no client reads as a
membership change (kafka-python and Java fail the commit and keep the
member; auto-commit tries again at its next interval). Every other code is
passed on unchanged: it is about the commit itself (OFFSET_METADATA_TOO_LARGE,
UNKNOWN_TOPIC_OR_PARTITION ...).

:class:`KafkaSideMembers` is a group's last known set of Kafka-side members
and says when it changed, so the owner logs each change once.
"""

from __future__ import annotations

from dataclasses import dataclass

from zkcoord.core.errors import ErrorCode

__all__ = ["KAFKA_MEMBERSHIP_ERRORS", "client_error", "KafkaMember", "KafkaSideMembers"]

E = ErrorCode
KAFKA_MEMBERSHIP_ERRORS = frozenset({E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID,
                                     E.REBALANCE_IN_PROGRESS})


def client_error(kafka_code: ErrorCode) -> ErrorCode:
    """The code a zkcoord member gets for Kafka's refusal of its forwarded commit.

    >>> client_error(ErrorCode.UNKNOWN_MEMBER_ID).name, client_error(ErrorCode.OFFSET_METADATA_TOO_LARGE).name
    ('UNKNOWN_SERVER_ERROR', 'OFFSET_METADATA_TOO_LARGE')
    """
    return E.UNKNOWN_SERVER_ERROR if kafka_code in KAFKA_MEMBERSHIP_ERRORS else kafka_code


@dataclass(frozen=True, order=True)
class KafkaMember:
    """A member of a group in Kafka's own coordinator, as DescribeGroups names it."""

    member_id: str
    client_id: str = ""
    host: str = ""

    def __str__(self) -> str:
        return f"{self.member_id} (client {self.client_id or '-'}, host {self.host or '-'})"


class KafkaSideMembers:
    """Per group, the Kafka-side members last seen; :meth:`update` returns
    True when the set differs from the last one (log it then, once)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[KafkaMember, ...]] = {}

    def update(self, group: str, members) -> bool:
        """Record ``members`` (any iterable of KafkaMember) as the group's now.

        >>> seen = KafkaSideMembers()
        >>> seen.update("g", [KafkaMember("m1")]), seen.update("g", [KafkaMember("m1")]), seen.update("g", [])
        (True, False, True)
        >>> seen.update("h", []), seen.groups
        (False, 0)
        """
        now = tuple(sorted(set(members)))
        before = self._seen.get(group, ())
        if now:
            self._seen[group] = now
        else:
            self._seen.pop(group, None)
        return now != before

    def of(self, group: str) -> tuple[KafkaMember, ...]:
        return self._seen.get(group, ())

    def forget(self, group: str) -> None:
        self._seen.pop(group, None)

    @property
    def groups(self) -> int:
        """Groups with Kafka-side members now."""
        return len(self._seen)

    @property
    def members(self) -> int:
        """Kafka-side members summed over the groups."""
        return sum(len(m) for m in self._seen.values())
