"""KIP-848's APIs: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Owns the translation between the wire messages (:mod:`zkcoord.schemas`,
generated from Kafka's JSON) and the core's consumer-group values, with
Kafka 4.4's checks in Kafka's order:

ConsumerGroupHeartbeat (``KafkaApis.handleConsumerGroupHeartbeat``, then
``GroupCoordinatorService.consumerGroupHeartbeat``):

1. UNSUPPORTED_VERSION when this daemon does not serve the consumer
   protocol (``group_coordinator_rebalance_protocols`` without
   ``consumer``, or no source of topic metadata: the coordinator assigns
   partitions and must know them);
2. GROUP_AUTHORIZATION_FAILED without READ on the group;
   TOPIC_AUTHORIZATION_FAILED when a subscribed topic name may not be
   described;
3. INVALID_REQUEST / UNSUPPORTED_ASSIGNOR for a malformed request (member id
   required from v1 and when not joining, rebalance time-out and subscription
   and empty partitions on a join, instance id on a static leave, ...);
4. the group's owner decides (:func:`zkcoord.core.consumer.heartbeat.handle_consumer_heartbeat`);
   a group nobody has is answered without contending for it unless the
   heartbeat joins (epoch 0). The decision runs in a worker thread when its
   work grows large: a request with thousands of names or partitions, or a
   heartbeat of a group of hundreds of members other than a steady one of a
   settled group (its decision may run the assignor over every member and
   partition: hundreds of ms at 1,000 members over 100,000 partitions), so
   that other groups are answered meanwhile.

Topic ids travel as 16 bytes on the wire and as Kafka's text form in the
core (:mod:`zkcoord.topic_ids`). A member joining at v0 without an id gets
one the way Kafka makes them (``Uuid.randomUuid().toString()``).

ConsumerGroupDescribe: DESCRIBE on each group, then the owner describes
it (:mod:`zkcoord.core.consumer.describe`); with an authorizer, a group
whose assignments name a topic the client may not describe is answered
TOPIC_AUTHORIZATION_FAILED without members, as Kafka does.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from zkcoord.core import groups
from zkcoord.core.api_keys import CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT
from zkcoord.core.consumer.describe import (
    DescribedConsumerGroup, describe_consumer_group, not_consumer_message, not_found_message,
)
from zkcoord.core.consumer.messages import ConsumerHeartbeatRequest, ConsumerHeartbeatResult
from zkcoord.core.consumer.model import ConsumerGroup, LEAVE_EPOCH, STATIC_LEAVE_EPOCH
from zkcoord.core.errors import ErrorCode, validate_group_id
from zkcoord.errors import StateError, StateTooLargeError, ZkcoordError
from zkcoord.server.authorization import Operation
from zkcoord.server.group_runtime import NOT_NOW, OFF_LOOP_RECORDS_MEMBERS, GroupUnavailableError
from zkcoord.server.manager import UNKNOWN_TOKEN
from zkcoord.topic_ids import topic_id_text, topic_id_uuid
from zkcoord.wire.bulk_work import pause_every
from zkcoord.wire.responses import cached_response, encoded_response, response_for

if TYPE_CHECKING:
    from zkcoord.server.manager import GroupManager

__all__ = ["ConsumerGroupApis", "new_member_id", "heartbeat_request_problem"]

log = logging.getLogger(__name__)
E = ErrorCode
NOT_ASKED = -(2**31)  # authorized_operations not asked for: Kafka's INT32_MIN
_DESCRIBE_TOPICS_REFUSED = "The group has described topic(s) that the client is not authorized to describe."


def new_member_id() -> str:
    """A member id as Kafka's coordinator (and a v1 client) makes one:
    ``Uuid.randomUuid().toString()``, 22 characters of URL-safe base64 of a
    random UUID, never starting with ``-``."""
    while True:
        text = topic_id_text(uuid.uuid4())
        if not text.startswith("-"):
            return text


BIG_REQUEST_ITEMS = 2000  # subscribed names plus owned partitions from which the decision runs off the loop


def _big(r) -> bool:
    """Does the coordinator's work on this heartbeat grow large (thousands of
    subscribed names, or of partitions it says it owns)?"""
    items = len(r.subscribed_topic_names or ())
    for topic in r.topic_partitions or ():
        items += len(topic.partitions)
    return items > BIG_REQUEST_ITEMS


def _large(group) -> bool:
    """A group large enough that a heartbeat's decision may compute a target
    for hundreds of members (an assignor over every partition): decided in a
    worker thread unless it is a steady heartbeat of a settled group."""
    return isinstance(group, ConsumerGroup) and len(group.members) >= OFF_LOOP_RECORDS_MEMBERS


def _target_due(group) -> bool:
    """A large group whose next heartbeat may compute its target (its group
    epoch is ahead of its target's)."""
    return _large(group) and group.assignment_epoch < group.group_epoch


_JAVA_TRIMMED = "".join(map(chr, range(0x21)))  # what Java's String.trim() removes: every char <= ' '


def _blank(value: str | None) -> bool:
    """Kafka's ``Utils.throwIfEmptyString``: set, but empty once trimmed
    (Java's ``trim()``: control characters go, Unicode spaces stay)."""
    return value is not None and not value.strip(_JAVA_TRIMMED)


def heartbeat_request_problem(r, version: int, assignors: tuple[str, ...]) -> tuple[ErrorCode, str] | None:
    """Kafka 4.4's ``throwIfConsumerGroupHeartbeatRequestIsInvalid``: the
    error and message a malformed request gets, None when it is well formed."""
    epoch = r.member_epoch
    if (version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH) and _blank(r.member_id or ""):
        return E.INVALID_REQUEST, "MemberId can't be empty."
    if _blank(r.group_id or ""):
        return E.INVALID_REQUEST, "GroupId can't be empty."
    if _blank(r.instance_id):
        return E.INVALID_REQUEST, "InstanceId can't be empty."
    if _blank(r.rack_id):
        return E.INVALID_REQUEST, "RackId can't be empty."
    if epoch == 0:
        if r.rebalance_timeout_ms == -1:
            return E.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request."
        if r.topic_partitions is None or len(r.topic_partitions) != 0:
            return E.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining."
        if r.subscribed_topic_names is None and getattr(r, "subscribed_topic_regex", None) is None:
            return E.INVALID_REQUEST, ("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                                       "when (re-)joining.")
    elif epoch == STATIC_LEAVE_EPOCH:
        if r.instance_id is None:
            return E.INVALID_REQUEST, "InstanceId can't be null."
    elif epoch < STATIC_LEAVE_EPOCH:
        return E.INVALID_REQUEST, "MemberEpoch is invalid."
    if r.server_assignor is not None and r.server_assignor not in assignors:
        return E.UNSUPPORTED_ASSIGNOR, (f"ServerAssignor {r.server_assignor} is not supported. "
                                        f"Supported assignors: {', '.join(assignors)}.")
    return None


class ConsumerGroupApis:
    """The two APIs for :class:`~zkcoord.server.apis.ApiHandler`, which routes them here."""

    def __init__(self, manager: GroupManager, access, enabled) -> None:
        self.manager = manager
        self.access = access
        self._enabled = enabled  # () -> bool: the consumer protocol is served now

    # -- ConsumerGroupHeartbeat -----------------------------------------------------
    def _core_request(self, decoded, connection, token) -> ConsumerHeartbeatRequest:
        r = decoded.request
        owned = None
        if r.topic_partitions is not None:
            owned = tuple((topic_id_text(t.topic_id), tuple(t.partitions)) for t in r.topic_partitions)
        names = None if r.subscribed_topic_names is None else tuple(r.subscribed_topic_names)
        return ConsumerHeartbeatRequest(
            token=token, group_id=r.group_id, member_id=r.member_id, member_epoch=r.member_epoch,
            instance_id=r.instance_id, rack_id=r.rack_id, rebalance_timeout_ms=r.rebalance_timeout_ms,
            subscribed_topic_names=names,
            subscribed_topic_regex=getattr(r, "subscribed_topic_regex", None) if decoded.api_version >= 1 else None,
            server_assignor=r.server_assignor, owned=owned, client_id=decoded.client_id or "",
            client_host=connection.client_host,
            new_member_id=new_member_id() if not r.member_id and r.member_epoch == 0 else "")

    def _refusal(self, decoded, connection):
        """Steps 1-3 of the module docstring: the answer, or None to go on."""
        r = decoded.request
        if not self._enabled():
            return self._answer(decoded, ConsumerHeartbeatResult.failed(
                E.UNSUPPORTED_VERSION, "This daemon does not serve the consumer group protocol "
                "(group_coordinator_rebalance_protocols, or no topic metadata)."))
        if not self.access.group(connection, Operation.READ, r.group_id):
            return self._answer(decoded, ConsumerHeartbeatResult.failed(E.GROUP_AUTHORIZATION_FAILED))
        if self.access.enforcing and r.subscribed_topic_names:
            names = set(r.subscribed_topic_names)
            if len(self.access.topics(connection, Operation.DESCRIBE, names)) < len(names):
                return self._answer(decoded, ConsumerHeartbeatResult.failed(E.TOPIC_AUTHORIZATION_FAILED))
        problem = heartbeat_request_problem(r, decoded.api_version, self.manager.group_config.consumer.assignors)
        if problem is not None:
            return self._answer(decoded, ConsumerHeartbeatResult.failed(*problem))
        return None

    def heartbeat_now(self, decoded, connection):
        """The transport's fast path: a heartbeat of a group served right now
        that writes nothing (a steady member's), answered without a task; None
        sends it through :meth:`heartbeat`."""
        r = decoded.request
        if r.member_epoch <= 0 or _big(r):
            return None
        runtime = self.manager.serving(r.group_id)
        if runtime is None or _target_due(runtime.group) or self._refusal(decoded, connection) is not None:
            return None
        token = runtime.next_token()
        request = self._core_request(decoded, connection, token)
        result = runtime.call_now(token, lambda g, now: groups.decide(g, request, now, runtime.config), keep=decoded)
        if result is NOT_NOW:
            return None
        return self._answer(decoded, result)

    async def heartbeat(self, decoded, connection):
        refused = self._refusal(decoded, connection)
        if refused is not None:
            return refused
        r = decoded.request
        try:
            if r.member_epoch != 0:
                unknown = await self.manager.reply_if_unknown(r.group_id, lambda g, now: groups.decide(
                    g, self._core_request(decoded, connection, UNKNOWN_TOKEN), now, self.manager.group_config))
                if unknown is not None:
                    if unknown.error is E.GROUP_ID_NOT_FOUND:  # Kafka's words: a leave asks for "the group"
                        what = "Group" if r.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH) else "Consumer group"
                        unknown = ConsumerHeartbeatResult.failed(E.GROUP_ID_NOT_FOUND,
                                                                 f"{what} {r.group_id} not found.")
                    return self._answer(decoded, unknown)
            runtime = await self.manager.runtime(r.group_id)
            token = runtime.kept_token(decoded)  # the fast path's decision, if it made one, is applied as made
            request = self._core_request(decoded, connection, token)
            result = await runtime.call(token, lambda g, now: groups.decide(g, request, now, runtime.config),
                                        render=lambda res: encoded_response(decoded, self._answer(decoded, res)),
                                        big=_big(r) or _large(runtime.group), reuse=decoded)
            return result
        except GroupUnavailableError as exc:
            return self._answer(decoded, ConsumerHeartbeatResult.failed(exc.code, str(exc)))
        except StateError as exc:
            log.error("ConsumerGroupHeartbeat %s: %s", r.group_id, exc)
            code = E.GROUP_MAX_SIZE_REACHED if isinstance(exc, StateTooLargeError) else E.UNKNOWN_SERVER_ERROR
            return self._answer(decoded, ConsumerHeartbeatResult.failed(code, str(exc)))

    @staticmethod
    def _answer(decoded, result: ConsumerHeartbeatResult):
        if result.assignment is None and result.error is E.NONE and result.message is None:
            # A steady member's answer: the same bytes each time, built and encoded once (per member).
            key = (result.member_id, result.member_epoch, result.heartbeat_interval_ms)
            return cached_response(decoded, key, lambda: dict(
                throttle_time_ms=0, error_code=0, error_message=None, member_id=result.member_id,
                member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
                assignment=None))
        assignment = None
        if result.assignment is not None:
            assignment = {"topic_partitions": [
                {"topic_id": topic_id_uuid(topic_id), "partitions": list(partitions)}
                for topic_id, partitions in result.assignment.items()]}
        return response_for(decoded, throttle_time_ms=0, error_code=int(result.error),
                            error_message=result.message, member_id=result.member_id,
                            member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
                            assignment=assignment)

    # -- ConsumerGroupDescribe --------------------------------------------------------
    async def describe(self, decoded, connection):
        r = decoded.request
        if not self._enabled():
            return response_for(decoded, throttle_time_ms=0, groups=[
                _failed_group(g, E.UNSUPPORTED_VERSION, None) for g in r.group_ids])
        wanted = list(r.group_ids)
        refused = {g for g in dict.fromkeys(wanted) if not self.access.group(connection, Operation.DESCRIBE, g)}
        answers = []
        for i, group_id in enumerate(g for g in wanted if g in refused):  # refused first, as Kafka lists them
            await pause_every(i)
            answers.append(_failed_group(group_id, E.GROUP_AUTHORIZATION_FAILED, None))
        described = await self._describe_all([g for g in dict.fromkeys(wanted) if g not in refused])
        # Then the ids that cannot name a group, then the others: Kafka answers those at once and the
        # rest after its coordinator shards did (in its shards' order; ours is the request's).
        allowed = [g for g in wanted if g not in refused]
        invalid = [g for g in allowed if described[g][0] is E.INVALID_GROUP_ID]
        for i, group_id in enumerate(invalid + [g for g in allowed if described[g][0] is not E.INVALID_GROUP_ID]):
            await pause_every(i)
            code, message, group = described[group_id]
            if group is None:
                answers.append(_failed_group(group_id, code, message))
                continue
            if self.access.enforcing:
                topics = group.topic_names()
                if len(self.access.topics(connection, Operation.DESCRIBE, topics)) < len(topics):
                    answers.append(_failed_group(group_id, E.TOPIC_AUTHORIZATION_FAILED, _DESCRIBE_TOPICS_REFUSED))
                    continue
            operations = (_bitfield(self.access.group_operations(connection, group_id))
                          if r.include_authorized_operations else NOT_ASKED)
            answers.append(_described(group, operations))
        return response_for(decoded, throttle_time_ms=0, groups=answers)

    async def _describe_all(self, group_ids: list[str]) -> dict[str, tuple[ErrorCode, str | None, object]]:
        """{id: (error, message, DescribedConsumerGroup or None)} of distinct ids."""
        unknown = await self.manager.unknown(group_ids)
        found = {}
        for i, group_id in enumerate(group_ids):
            await pause_every(i)
            if validate_group_id(group_id) is not E.NONE:
                found[group_id] = (E.INVALID_GROUP_ID, None, None)
            elif group_id in unknown:
                found[group_id] = (E.GROUP_ID_NOT_FOUND, not_found_message(group_id), None)
            else:
                found[group_id] = await self._describe_one(group_id)
        return found

    async def _describe_one(self, group_id: str):
        try:
            runtime = await self.manager.runtime(group_id)
        except GroupUnavailableError as exc:
            return exc.code, None, None

        def read(group, now):
            if not isinstance(group, ConsumerGroup):
                return None
            config = runtime.config
            return E.NONE, None, describe_consumer_group(group, config.image, config.consumer)

        try:
            described = await runtime.read(read)
            if described is not None:
                return described
            # Another type of group: Kafka names its type if it has the group (members, a state,
            # committed offsets: an Empty classic group too), else it has none.
            exists = await self.manager.exists(runtime)
        except GroupUnavailableError as exc:
            return exc.code, None, None
        except ZkcoordError as exc:
            log.warning("ConsumerGroupDescribe %s: %s", group_id, exc)
            return E.COORDINATOR_LOAD_IN_PROGRESS, None, None
        return E.GROUP_ID_NOT_FOUND, (not_consumer_message if exists else not_found_message)(group_id), None


def _bitfield(codes: set[int]) -> int:
    """Authorized operations as the int32 field holds them (bit ``code`` per
    operation; kafka-python's own DescribeGroups converts a set, our generated
    class takes the number)."""
    value = sum(1 << code for code in codes)
    return value - (1 << 32) if value >= 1 << 31 else value


def _failed_group(group_id: str, code: ErrorCode, message: str | None) -> dict:
    return {"error_code": int(code), "error_message": message, "group_id": group_id, "group_state": "",
            "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": [],
            "authorized_operations": NOT_ASKED}


def _assignment(topics) -> dict:
    return {"topic_partitions": [{"topic_id": topic_id_uuid(t.topic_id), "topic_name": t.name,
                                  "partitions": list(t.partitions)} for t in topics]}


def _described(group: DescribedConsumerGroup, operations) -> dict:
    return {"error_code": 0, "error_message": None, "group_id": group.group_id, "group_state": group.state,
            "group_epoch": group.group_epoch, "assignment_epoch": group.assignment_epoch,
            "assignor_name": group.assignor_name, "authorized_operations": operations,
            "members": [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                         "member_epoch": m.member_epoch, "client_id": m.client_id, "client_host": m.client_host,
                         "subscribed_topic_names": list(m.subscribed_topic_names),
                         "subscribed_topic_regex": m.subscribed_topic_regex,
                         "assignment": _assignment(m.assignment),
                         "target_assignment": _assignment(m.target_assignment),
                         "member_type": m.member_type} for m in group.members]}
