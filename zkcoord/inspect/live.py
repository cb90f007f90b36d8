"""Asking a group's owner daemon how the group is right now (DescribeGroups,
ConsumerGroupDescribe).

This module owns the Kafka-protocol requests inspection sends to the daemon
that owns the groups: DescribeGroups (v5, which every zkcoord daemon serves)
for classic groups, ConsumerGroupDescribe (API 69, v1: member types) for
KIP-848 consumer groups, both on one connection opened by
:func:`~zkcoord.kafka.client_security.open_kafka_connection` with the
command's Kafka settings (``--command-config``: TLS and the SASL login on a
secured daemon; PLAINTEXT without). The owner holds what ZooKeeper does not:
a rebalance in progress (PreparingRebalance, CompletingRebalance) and
members that joined since the last stored state.

Which API a group is asked with follows its stored record's type. A group
that changed type since (an online upgrade converting it) is answered with
an error (DescribeGroups: Dead; ConsumerGroupDescribe: GROUP_ID_NOT_FOUND,
"is not a consumer group"), shown as the owner not answering: the stored
state is shown, and the next refresh reads the new type. A daemon whose
ApiVersions lacks ConsumerGroupDescribe (an older zkcoord during a rolling
upgrade) is reported the same way for its consumer groups.

Rules: one connection per daemon and refresh, closed at once; a bounded
wait (``timeout_s``) for connect, login and answer; a failure to reach or
hear from the daemon (refused, reset, timeout, an error code such as
NOT_COORDINATOR when ownership just moved, GROUP_AUTHORIZATION_FAILED for a
group the user may not describe) is returned as a short reason, never
raised: the caller falls back to the state stored in ZooKeeper and says so.
A refused login is raised (:class:`~zkcoord.errors.AuthenticationError`):
the settings are wrong, and every daemon would refuse them alike.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse

from zkcoord.core.consumer.describe import DescribedConsumerGroup, DescribedMember, DescribedTopic
from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import GroupDescription, MemberDescription
from zkcoord.errors import AuthenticationError, ZkcoordError
from zkcoord.schemas import ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse
from zkcoord.topic_ids import topic_id_text

__all__ = ["describe_live", "to_description", "to_consumer_description", "Described"]

_VERSION = 5
_CONSUMER_VERSION = 1  # v1 has each member's type (classic or consumer)
CONSUMER_GROUP_DESCRIBE = 69
_CLIENT_ID = "zkcoord-inspect"
Described = GroupDescription | DescribedConsumerGroup


def to_description(answer) -> GroupDescription:
    """A DescribeGroups response's group as :class:`GroupDescription`."""
    members = tuple(MemberDescription(m.member_id, m.group_instance_id, m.client_id or "", m.client_host or "",
                                      bytes(m.member_metadata or b""), bytes(m.member_assignment or b""))
                    for m in answer.members)
    return GroupDescription(answer.group_id, ErrorCode(answer.error_code), answer.group_state or "",
                            answer.protocol_type or "", answer.protocol_data or "", members)


def _topics(answer) -> tuple[DescribedTopic, ...]:
    return tuple(DescribedTopic(topic_id_text(t.topic_id), t.topic_name, tuple(sorted(t.partitions)))
                 for t in answer.topic_partitions or ())


def to_consumer_description(answer) -> DescribedConsumerGroup:
    """A ConsumerGroupDescribe response's group as :class:`DescribedConsumerGroup`."""
    members = tuple(DescribedMember(
        member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
        client_id=m.client_id or "", client_host=m.client_host or "",
        subscribed_topic_names=tuple(m.subscribed_topic_names or ()), subscribed_topic_regex=m.subscribed_topic_regex,
        assignment=_topics(m.assignment), target_assignment=_topics(m.target_assignment),
        member_type=m.member_type) for m in answer.members)
    return DescribedConsumerGroup(answer.group_id, answer.group_state or "", answer.group_epoch,
                                  answer.assignment_epoch, answer.assignor_name or "", members)


async def _call(host: str, port: int, classic: list[str], consumer: list[str], security, timeout_s: float):
    """(DescribeGroups answer or None, ConsumerGroupDescribe answer, None, or the reason there is none)."""
    # imported here: TLS, SASL and the codec are needed only when a daemon is asked
    from zkcoord.kafka.client_security import KafkaClientSecurity, open_kafka_connection

    connection = await open_kafka_connection(host, port, security or KafkaClientSecurity(), client_id=_CLIENT_ID,
                                             timeout_s=timeout_s)
    try:
        described = described_consumers = None
        if classic:
            described = await connection.call(DescribeGroupsRequest, _VERSION, DescribeGroupsResponse,
                                              groups=list(classic), include_authorized_operations=False)
        if consumer:
            served = connection.api_versions.get(CONSUMER_GROUP_DESCRIBE)
            if served is None or not served[0] <= _CONSUMER_VERSION <= served[1]:
                described_consumers = f"the daemon does not serve ConsumerGroupDescribe v{_CONSUMER_VERSION}"
            else:
                described_consumers = await connection.call(
                    ConsumerGroupDescribeRequest, _CONSUMER_VERSION, ConsumerGroupDescribeResponse,
                    group_ids=list(consumer), include_authorized_operations=False)
        return described, described_consumers
    finally:
        await connection.close()


async def describe_live(host: str, port: int, groups: Sequence[str], timeout_s: float, security=None,
                        consumer_groups: Sequence[str] = ()) -> dict[str, Described | str]:
    """Each group's live description, or the reason there is none: ``groups``
    (classic) with DescribeGroups, ``consumer_groups`` with
    ConsumerGroupDescribe. ``security``: a
    :class:`~zkcoord.kafka.client_security.KafkaClientSecurity` (None: PLAINTEXT)."""
    everyone = [*groups, *consumer_groups]
    try:
        response, consumers = await asyncio.wait_for(
            _call(host, port, list(groups), list(consumer_groups), security, timeout_s), timeout_s)
    except (TimeoutError, asyncio.TimeoutError):
        return {g: f"no answer within {timeout_s:g} s" for g in everyone}
    except AuthenticationError as exc:
        who = security.describe() if security is not None else "PLAINTEXT"
        raise AuthenticationError(f"zkcoord daemon at {host}:{port} refused the login ({who}): {exc}; check the "
                                  f"client properties (--command-config, ZKCOORD_KAFKA_CLIENT_CONFIG)") from None
    except ZkcoordError as exc:  # unreachable, closed, a frame we cannot read
        return {g: str(exc).removeprefix(f"{host}:{port} ") for g in everyone}
    except (OSError, ConnectionError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        return {g: reason for g in everyone}
    found: dict[str, Described | str] = {g: "the daemon did not describe it" for g in everyone}
    classic, consumer = set(groups), set(consumer_groups)
    for answer in response.groups if response is not None else ():
        if answer.group_id in classic:
            found[answer.group_id] = _error_name(answer.error_code) if answer.error_code else to_description(answer)
    if isinstance(consumers, str):
        found.update({g: consumers for g in consumer_groups})
    for answer in consumers.groups if consumers is not None and not isinstance(consumers, str) else ():
        if answer.group_id not in consumer:
            continue
        if answer.error_code:
            reason = _error_name(answer.error_code)
            found[answer.group_id] = f"{reason}: {answer.error_message}" if answer.error_message else reason
        else:
            found[answer.group_id] = to_consumer_description(answer)
    return found


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"
