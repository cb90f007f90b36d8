"""Asking a group's owner daemon how the group is right now (DescribeGroups).

This module owns the one Kafka-protocol request inspection sends: a
DescribeGroups (v5, which every zkcoord daemon serves) to the daemon that
owns the groups, over a connection opened by
:func:`~zkcoord.kafka.client_security.open_kafka_connection` with the
command's Kafka settings (``--command-config``: TLS and the SASL login on a
secured daemon; PLAINTEXT without). The owner holds what ZooKeeper does not:
a rebalance in progress (PreparingRebalance, CompletingRebalance) and
members that joined since the last stored state.

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

from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import GroupDescription, MemberDescription
from zkcoord.errors import AuthenticationError, ZkcoordError

__all__ = ["describe_live", "to_description"]

_VERSION = 5
_CLIENT_ID = "zkcoord-inspect"


def to_description(answer) -> GroupDescription:
    """A DescribeGroups response's group as :class:`GroupDescription`."""
    members = tuple(MemberDescription(m.member_id, m.group_instance_id, m.client_id or "", m.client_host or "",
                                      bytes(m.member_metadata or b""), bytes(m.member_assignment or b""))
                    for m in answer.members)
    return GroupDescription(answer.group_id, ErrorCode(answer.error_code), answer.group_state or "",
                            answer.protocol_type or "", answer.protocol_data or "", members)


async def _call(host: str, port: int, groups: list[str], security, timeout_s: float):
    # imported here: TLS, SASL and the codec are needed only when a daemon is asked
    from zkcoord.kafka.client_security import KafkaClientSecurity, open_kafka_connection

    connection = await open_kafka_connection(host, port, security or KafkaClientSecurity(), client_id=_CLIENT_ID,
                                             timeout_s=timeout_s)
    try:
        return await connection.call(DescribeGroupsRequest, _VERSION, DescribeGroupsResponse, groups=list(groups),
                                     include_authorized_operations=False)
    finally:
        await connection.close()


async def describe_live(host: str, port: int, groups: list[str], timeout_s: float,
                        security=None) -> dict[str, GroupDescription | str]:
    """Each group's live description, or the reason there is none. ``security``:
    a :class:`~zkcoord.kafka.client_security.KafkaClientSecurity` (None: PLAINTEXT)."""
    try:
        response = await asyncio.wait_for(_call(host, port, groups, security, timeout_s), timeout_s)
    except (TimeoutError, asyncio.TimeoutError):
        return {g: f"no answer within {timeout_s:g} s" for g in groups}
    except AuthenticationError as exc:
        who = security.describe() if security is not None else "PLAINTEXT"
        raise AuthenticationError(f"zkcoord daemon at {host}:{port} refused the login ({who}): {exc}; check the "
                                  f"client properties (--command-config, ZKCOORD_KAFKA_CLIENT_CONFIG)") from None
    except ZkcoordError as exc:  # unreachable, closed, a frame we cannot read
        return {g: str(exc).removeprefix(f"{host}:{port} ") for g in groups}
    except (OSError, ConnectionError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
        return {g: reason for g in groups}
    found: dict[str, GroupDescription | str] = {g: "the daemon did not describe it" for g in groups}
    for answer in response.groups:
        if answer.group_id not in found:
            continue
        if answer.error_code:
            found[answer.group_id] = _error_name(answer.error_code)
        else:
            found[answer.group_id] = to_description(answer)
    return found


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"
