"""Asking a group's owner daemon how the group is right now (DescribeGroups).

This module owns the one Kafka-protocol request inspection sends: a
DescribeGroups (v5, which every zkcoord daemon serves) to the daemon that
owns the groups, framed by kafka-python's ``KafkaProtocol``. The owner holds
what ZooKeeper does not: a rebalance in progress (PreparingRebalance,
CompletingRebalance) and members that joined since the last stored state.

Rules: one connection per daemon and refresh, closed at once; a bounded
wait (``timeout_s``) for connect and answer; any failure (refused, reset,
timeout, an error code such as NOT_COORDINATOR when ownership just moved) is
returned as a short reason, never raised: the caller falls back to the state
stored in ZooKeeper and says so.
"""

from __future__ import annotations

import asyncio
import contextlib

from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.parser import KafkaProtocol

from zkcoord.core.errors import ErrorCode
from zkcoord.core.group import GroupDescription, MemberDescription

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


async def _call(host: str, port: int, request):
    reader, writer = await asyncio.open_connection(host, port)
    try:
        protocol = KafkaProtocol(client_id=_CLIENT_ID)
        protocol.send_request(request)
        writer.write(protocol.send_bytes())
        await writer.drain()
        while True:
            data = await reader.read(65536)
            if not data:
                raise ConnectionError("the daemon closed the connection")
            received = protocol.receive_bytes(data)
            if received:
                return received[0][1]
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


async def describe_live(host: str, port: int, groups: list[str],
                        timeout_s: float) -> dict[str, GroupDescription | str]:
    """Each group's live description, or the reason there is none."""
    request = DescribeGroupsRequest(version=_VERSION, groups=list(groups), include_authorized_operations=False)
    try:
        response = await asyncio.wait_for(_call(host, port, request), timeout_s)
    except (TimeoutError, asyncio.TimeoutError):
        return {g: f"no answer within {timeout_s:g} s" for g in groups}
    except (OSError, ConnectionError, ValueError) as exc:  # ValueError & co: a frame we cannot parse
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
