"""Kafka API handlers: wire messages in, core requests through the group
manager, wire messages out.

Owns the translation between kafka-python's generated request/response
messages and zkcoord's core values, per API and version, and nothing else:
ownership, persistence and group rules live in :mod:`.manager` and
:mod:`zkcoord.core`. Every response is built with
:func:`~zkcoord.wire.responses.response_for`, which drops the fields a version
does not have. Group-level failures (:class:`GroupUnavailableError`) become
the error code of the API's response; nothing a client sends can make a
handler raise anything else but a bug.

With the daemon's ``member_disconnect_grace_ms`` on, the handler also notes
which connection each dynamic member last spoke on (JoinGroup answers that
give or confirm its id, Heartbeat, SyncGroup, OffsetCommit;
:mod:`.member_connections`), and when the transport reports that
connection closed, asks the manager to end those members' sessions early.

The rebalance notice (:mod:`zkcoord.core.notice`): a connection whose
ApiVersions names the notice client software has its members' Heartbeats
held while their group stays Stable (up to the daemon's
``rebalance_notice_hold_ms``), and answered with what a heartbeat arriving
at that moment would get (without restarting the member's session again).
Such heartbeats skip the fast path, are not counted in the request latency
histogram, and do not count as the member's connection for the disconnect
grace (the member's own connection does). A JoinGroup or LeaveGroup of a
member answers that member's held heartbeats first, on the group as it was
before (zkcoord's consumer leaves and rejoins with one held; after the
request it would read, and count as, UNKNOWN_MEMBER_ID or
ILLEGAL_GENERATION).

Authorization (:mod:`.authorization`): with an authorizer, every API asks
what Kafka's ``KafkaApis`` asks, before anything else about the group, and
answers a refusal as a broker does (GROUP_AUTHORIZATION_FAILED for the
group, TOPIC_AUTHORIZATION_FAILED for each refused topic's partitions).

Big requests (:mod:`zkcoord.core.limits`): a handler walking thousands of
group ids, partitions or groups yields to the event loop every
:data:`~zkcoord.server.manager.SLICE` of them, and an answer listing more
than :data:`BIG_ANSWER_ITEMS` entries is built and encoded in a worker
thread (:func:`_answer`), so one client's DescribeGroups, DeleteGroups,
ListGroups, OffsetFetch or OffsetCommit never holds other groups'
heartbeats for long.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from zkcoord.core import groups, notice
from zkcoord.core import messages as core
from zkcoord.core.api_keys import (
    API_VERSIONS, CONSUMER_GROUP_DESCRIBE, CONSUMER_GROUP_HEARTBEAT, DELETE_GROUPS, DESCRIBE_GROUPS, FIND_COORDINATOR,
    HEARTBEAT, JOIN_GROUP, LEAVE_GROUP, LIST_GROUPS, OFFSET_COMMIT, OFFSET_FETCH, SYNC_GROUP,
)
from zkcoord.core.errors import ErrorCode, validate_group_id
from zkcoord.core.offset_fetch import count
from zkcoord.errors import StateError, StateTooLargeError
from zkcoord.server.authorization import (
    OPEN, UNKNOWN_OPERATIONS, GroupAccess, Operation, commit_authorized, fetch_authorized, with_refused,
)
from zkcoord.server.group_runtime import NOT_NOW, GroupUnavailableError
from zkcoord.server.consumer_apis import ConsumerGroupApis
from zkcoord.server.consumer_apis import new_member_id as consumer_member_id
from zkcoord.topic_ids import topic_id_text, topic_id_uuid
from zkcoord.server.manager import UNKNOWN_TOKEN
from zkcoord.server.member_connections import MemberConnections
from zkcoord.wire.bulk_work import SLICE, collector_paused, off_loop, pause_every
from zkcoord.wire.connections import ConnectionInfo
from zkcoord.wire.messages import api_versions_response
from zkcoord.wire.registry import COORDINATOR_APIS
from zkcoord.wire.requests import DecodedRequest
from zkcoord.wire.responses import (
    EncodedResponse, cached_response, constant_response, encoded_response, response_for,
)

if TYPE_CHECKING:
    from zkcoord.server.manager import GroupManager
    from zkcoord.zk.nodes import NodeInfo

log = logging.getLogger(__name__)

E = ErrorCode
TRANSACTION_KEY_TYPE = 1
SMALL_COMMIT_PARTITIONS = 8  # OffsetCommit answers cached up to this many partitions
BIG_ANSWER_ITEMS = 1000  # answers listing more entries are built and encoded in a worker thread
# Answers to a Heartbeat / SyncGroup that show the member id is one the group knows.
_KNOWN_MEMBER = frozenset((E.NONE, E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION))
BIG_JOIN_ANSWER_MEMBERS = 100  # a JoinGroup answer listing more members is encoded in a worker thread


class ApiHandler:
    """The transport's handler: ``await handler(decoded, connection)``."""

    def __init__(self, manager: "GroupManager", metrics=None, *,
                 coordinator_address: Callable[[NodeInfo], tuple[int, str, int] | str] | None = None,
                 access: GroupAccess = OPEN, apis=COORDINATOR_APIS):
        self.manager = manager
        self.metrics = metrics
        self.access = access
        self.apis = apis  # what ApiVersions lists: the listener's APIs (the SASL ones on SASL listeners)
        # How FindCoordinator names the owner: (node id, host, port), or a reason it cannot.
        # Default: the owner's daemon listener; the gateway names the owner's gateway.
        self.coordinator_address = coordinator_address or _daemon_address
        # None unless the manager expires members whose connection closed
        self.members: MemberConnections | None = (
            MemberConnections() if getattr(manager, "member_disconnect_grace_ms", -1) >= 0 else None)
        self.notice_hold_ms: int = getattr(manager, "rebalance_notice_hold_ms", 0)  # 0: never hold
        self._notice_connections: set[int] = set()  # connection ids that asked for held heartbeats
        # group id -> {held heartbeat's waiter: its request}, for the LeaveGroup that ends a hold
        self._holds: dict[str, dict[asyncio.Future, core.HeartbeatRequest]] = {}
        self._classic_apis = apis.classic_only()
        self.consumer = ConsumerGroupApis(manager, access, self.consumer_groups_served)
        self._routes = {
            API_VERSIONS: self.api_versions, FIND_COORDINATOR: self.find_coordinator,
            JOIN_GROUP: self.join_group, SYNC_GROUP: self.sync_group, HEARTBEAT: self.heartbeat,
            LEAVE_GROUP: self.leave_group, OFFSET_COMMIT: self.offset_commit,
            OFFSET_FETCH: self.offset_fetch, DESCRIBE_GROUPS: self.describe_groups,
            LIST_GROUPS: self.list_groups, DELETE_GROUPS: self.delete_groups,
            CONSUMER_GROUP_HEARTBEAT: self.consumer.heartbeat, CONSUMER_GROUP_DESCRIBE: self.consumer.describe,
        }

    async def __call__(self, decoded: DecodedRequest, connection: ConnectionInfo):
        started = time.perf_counter()
        response = await self._routes[decoded.api_key](decoded, connection)
        if self.metrics is not None:
            held = decoded.api_key == HEARTBEAT and connection.connection_id in self._notice_connections
            self.metrics.observe_request(decoded.api_name, response, None if held else time.perf_counter() - started)
        return response

    def handle_now(self, decoded: DecodedRequest, connection: ConnectionInfo):
        """The transport's fast path, without a task: the answer to a
        Heartbeat, or to a SyncGroup in Stable, of a group served right now
        whose lock is free. None (nothing changed) sends the request through
        :meth:`__call__`."""
        api_key = decoded.api_key
        if api_key == CONSUMER_GROUP_HEARTBEAT:
            started = time.perf_counter()
            response = self.consumer.heartbeat_now(decoded, connection)
            if response is not None and self.metrics is not None:
                self.metrics.observe_request(decoded.api_name, response, time.perf_counter() - started)
            return response
        if api_key != HEARTBEAT and api_key != SYNC_GROUP:
            return None
        if api_key == HEARTBEAT and self._notice_connections and connection.connection_id in self._notice_connections:
            return None  # may be held
        started = time.perf_counter() if self.metrics is not None else 0.0
        r = decoded.request
        if self.access.enforcing and not self.access.group(connection, Operation.READ, r.group_id):
            return None  # the awaited path answers the refusal
        runtime = self.manager.serving(r.group_id)
        if runtime is None:
            return None
        token = runtime.next_token()
        if api_key == HEARTBEAT:
            request = core.HeartbeatRequest(
                token, r.member_id, r.generation_id,
                getattr(r, "group_instance_id", None) if decoded.api_version >= 3 else None)
            result = runtime.call_now(token, lambda g, now: groups.decide(g, request, now, runtime.config))
            if result is NOT_NOW:
                return None
            if self.members is not None and result.error in _KNOWN_MEMBER and request.group_instance_id is None:
                self.members.seen(r.group_id, r.member_id, connection.connection_id)
            response = constant_response(decoded, throttle_time_ms=0, error_code=int(result.error))
        else:
            if not _sync_has_protocol(decoded):
                return None
            sync = _sync_request(decoded, token)
            group = runtime.group
            if not groups.kind_of(group).answers_at_once(group, sync):  # parked (a rebalance): no decision twice
                return None
            result = runtime.call_now(token, lambda g, now: groups.decide(g, sync, now, runtime.config))
            if result is NOT_NOW:
                return None
            if self.members is not None and result.error in _KNOWN_MEMBER and sync.group_instance_id is None:
                self.members.seen(r.group_id, r.member_id, connection.connection_id)
            response = _sync_response(decoded, result.error, result.protocol_type, result.protocol_name,
                                      result.assignment)
        if self.metrics is not None:
            self.metrics.observe_request(decoded.api_name, response, time.perf_counter() - started)
        return response

    def connection_closed(self, connection: ConnectionInfo) -> None:
        """The transport's close callback: the members that last spoke on
        this connection lose their session within the grace."""
        self._notice_connections.discard(connection.connection_id)
        if self.members is None:
            return
        for group_id, member_id in self.members.closed(connection.connection_id):
            self.manager.member_disconnected(group_id, member_id)

    def consumer_groups_served(self) -> bool:
        """Does this daemon serve KIP-848's consumer protocol now (the daemon's
        setting, and a source of topic metadata to assign from)?"""
        return bool(getattr(self.manager, "consumer_groups_enabled", False))

    # -- ApiVersions, FindCoordinator --------------------------------------------
    async def api_versions(self, decoded, connection):
        apis = self.apis if self.consumer_groups_served() else self._classic_apis
        return api_versions_response(decoded.api_version, apis,
                                     supported_features=self.notice_features(decoded, connection))

    def notice_features(self, decoded, connection) -> list[dict]:
        """The rebalance notice's part of an ApiVersions answer (the gateway's
        too): the feature to advertise (none when the hold is 0), and the
        connection noted as a notice connection when it names the notice
        client software."""
        if self.notice_hold_ms <= 0:
            return []
        if (decoded.api_version >= 3
                and getattr(decoded.request, "client_software_name", None) == notice.CLIENT_SOFTWARE_NAME):
            self._notice_connections.add(connection.connection_id)
        return [{"name": notice.FEATURE, "min_version": notice.FEATURE_VERSION,
                 "max_version": notice.FEATURE_VERSION}]

    async def find_coordinator(self, decoded, connection):
        request = decoded.request
        key_type = getattr(request, "key_type", 0) or 0
        if decoded.api_version >= 4:
            keys = request.coordinator_keys
            # Each distinct key once: a request may repeat one 300,000 times.
            found = await self._find(list(dict.fromkeys(keys)), key_type, connection)
            return await _answer(decoded, len(keys), lambda: {"throttle_time_ms": 0, "coordinators": [
                {"key": key, "node_id": node, "host": host, "port": port, "error_code": int(code),
                 "error_message": message}
                for key, (code, message, node, host, port) in ((key, found[key]) for key in keys)]})
        code, message, node, host, port = (await self._find([request.key], key_type, connection))[request.key]
        return response_for(decoded, throttle_time_ms=0, error_code=int(code), error_message=message,
                            node_id=node, host=host, port=port)

    async def _find(self, keys: list[str], key_type: int, connection) -> dict[str, tuple]:
        """{key: (error, message, node id, host, port)} for distinct keys;
        the groups' owners looked up together (:meth:`GroupManager.find_owners`)."""
        if key_type == TRANSACTION_KEY_TYPE:
            return dict.fromkeys(keys, (E.INVALID_REQUEST, "zkcoord coordinates consumer groups only; find "
                                        "transaction coordinators on the Kafka brokers", -1, "", -1))
        if key_type != 0:
            return dict.fromkeys(keys, (E.INVALID_REQUEST, f"unknown coordinator key type {key_type}", -1, "", -1))
        answers: dict[str, tuple] = {}
        lookups = []
        for i, key in enumerate(keys):
            await pause_every(i)
            if not self.access.group(connection, Operation.DESCRIBE, key):
                answers[key] = E.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", -1, "", -1
            elif validate_group_id(key, allow_empty=True) is not E.NONE:  # Kafka looks up the empty id too
                answers[key] = (E.INVALID_GROUP_ID, f"invalid group id of {len(key)} characters: longer than 249",
                                -1, "", -1)
            else:
                lookups.append(key)
        owners = await self.manager.find_owners(lookups, self._nameable)
        for i, key in enumerate(lookups):
            await pause_every(i)
            owner = owners[key]
            if isinstance(owner, GroupUnavailableError):
                answers[key] = owner.code, str(owner), -1, "", -1
                continue
            address = self.coordinator_address(owner)
            if isinstance(address, str):
                answers[key] = E.COORDINATOR_NOT_AVAILABLE, address, -1, "", -1
            else:
                node_id, host, port = address
                answers[key] = E.NONE, None, node_id, host, port
        return answers

    def _nameable(self, info: NodeInfo) -> bool:
        """Can FindCoordinator name this daemon to our clients (a gateway's clients need its gateway)?"""
        return not isinstance(self.coordinator_address(info), str)

    # -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -------------------------------
    async def join_group(self, decoded, connection):
        r = decoded.request
        version = decoded.api_version

        def failed(code: ErrorCode):
            return response_for(decoded, throttle_time_ms=0, error_code=int(code), generation_id=-1,
                                protocol_type=None, protocol_name=None if version >= 7 else "",
                                leader="", skip_assignment=False, member_id=r.member_id, members=[])

        instance = getattr(r, "group_instance_id", None) if version >= 5 else None
        prefix = instance if instance else (decoded.client_id or "")
        if not self.access.group(connection, Operation.READ, r.group_id):
            return failed(E.GROUP_AUTHORIZATION_FAILED)
        try:
            runtime = await self.manager.runtime(r.group_id)
            token = runtime.next_token()
            request = core.JoinRequest(
                token=token, group_id=r.group_id, member_id=r.member_id, group_instance_id=instance,
                client_id=decoded.client_id or "", client_host=connection.client_host,
                session_timeout_ms=r.session_timeout_ms,
                rebalance_timeout_ms=r.rebalance_timeout_ms if version >= 1 else r.session_timeout_ms,
                protocol_type=r.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in r.protocols],
                require_known_member_id=version >= 4, new_member_id=f"{prefix}-{uuid.uuid4()}",
                new_consumer_member_id=consumer_member_id(),
                reason=getattr(r, "reason", None) if version >= 8 else None,
                support_skipping_assignment=version >= 9,
            )
            members = self.members if instance is None else None

            def render(result: core.JoinResult):
                if members is not None and result.error is E.NONE:
                    members.seen(r.group_id, result.member_id, connection.connection_id)
                if len(result.members) > BIG_JOIN_ANSWER_MEMBERS:  # the leader's, with every member's metadata
                    return off_loop(_join_response, decoded, result)
                return _join_response(decoded, result)

            def join(g, now):
                self._end_holds(g, now, runtime.config, ((r.member_id, instance),))
                return groups.decide(g, request, now, runtime.config)

            return await runtime.call(token, join, render=render)
        except GroupUnavailableError as exc:
            return failed(exc.code)
        except StateError as exc:
            log.error("JoinGroup %s: %s", r.group_id, exc)
            return failed(_state_error_code(exc))

    async def sync_group(self, decoded, connection):
        r = decoded.request

        def answer(code, protocol_type=None, protocol_name=None, assignment=b""):
            return _sync_response(decoded, code, protocol_type, protocol_name, assignment)

        if not _sync_has_protocol(decoded):
            return answer(E.INCONSISTENT_GROUP_PROTOCOL)  # mandatory from v5, checked before the group
        if not self.access.group(connection, Operation.READ, r.group_id):
            return answer(E.GROUP_AUTHORIZATION_FAILED)
        unknown = await self.manager.reply_if_unknown(r.group_id, lambda g, now: groups.decide(
            g, _sync_request(decoded, UNKNOWN_TOKEN), now, self.manager.group_config))
        if unknown is not None:
            return answer(unknown.error, unknown.protocol_type, unknown.protocol_name, unknown.assignment)
        try:
            runtime = await self.manager.runtime(r.group_id, loading_code=E.REBALANCE_IN_PROGRESS)
            token = runtime.next_token()
            request = _sync_request(decoded, token)
            members = self.members if request.group_instance_id is None else None

            def render(result: core.SyncResult) -> EncodedResponse:
                if members is not None and result.error in _KNOWN_MEMBER:
                    members.seen(r.group_id, r.member_id, connection.connection_id)
                return encoded_response(decoded, answer(
                    result.error, result.protocol_type, result.protocol_name, result.assignment))

            return await runtime.call(token, lambda g, now: groups.decide(g, request, now, runtime.config),
                                      render=render)
        except GroupUnavailableError as exc:
            return answer(exc.code)
        except StateError as exc:
            log.error("SyncGroup %s: %s", r.group_id, exc)
            return answer(_state_error_code(exc))

    async def heartbeat(self, decoded, connection):
        r = decoded.request
        instance = getattr(r, "group_instance_id", None) if decoded.api_version >= 3 else None
        if not self.access.group(connection, Operation.READ, r.group_id):
            return constant_response(decoded, throttle_time_ms=0, error_code=int(E.GROUP_AUTHORIZATION_FAILED))
        unknown = await self.manager.reply_if_unknown(r.group_id, lambda g, now: groups.decide(
            g, core.HeartbeatRequest(UNKNOWN_TOKEN, r.member_id, r.generation_id, instance), now,
            self.manager.group_config))
        if unknown is not None:
            return constant_response(decoded, throttle_time_ms=0, error_code=int(unknown.error))
        try:
            runtime = await self.manager.runtime(r.group_id, loading_code=E.NONE)
            if runtime is None:  # loading: Kafka answers NONE
                return constant_response(decoded, throttle_time_ms=0, error_code=0)
            token = runtime.next_token()
            request = core.HeartbeatRequest(token, r.member_id, r.generation_id, instance)
            result = await runtime.call(token, lambda g, now: groups.decide(g, request, now, runtime.config))
            if connection.connection_id in self._notice_connections:
                if result.error is E.NONE:
                    result = await self._held_heartbeat(runtime, request)
                return constant_response(decoded, throttle_time_ms=0, error_code=int(result.error))
        except GroupUnavailableError as exc:
            return constant_response(decoded, throttle_time_ms=0, error_code=int(exc.code))
        if self.members is not None and result.error in _KNOWN_MEMBER and request.group_instance_id is None:
            self.members.seen(r.group_id, r.member_id, connection.connection_id)
        return constant_response(decoded, throttle_time_ms=0, error_code=int(result.error))

    async def _held_heartbeat(self, runtime, request: core.HeartbeatRequest) -> core.HeartbeatResult:
        """The rebalance notice: wait while the group stays Stable in the
        request's generation (at most :func:`notice.hold_ms`), then answer
        what a heartbeat arriving now would get. Raises GroupUnavailableError.

        The answer does not restart the member's session: only the
        heartbeat's arrival did. The transport does not read a connection
        while its request is held, so it cannot tell that the member died
        meanwhile, and a session restarted at the end of every hold would
        keep a dead member in the group one hold longer."""
        hold = notice.hold_ms(runtime.group, request.member_id, request.generation_id, self.notice_hold_ms)
        if hold > 0:
            waiter = runtime.until_unsettled(request.generation_id)
            holds = self._holds.setdefault(runtime.group_id, {})
            holds[waiter] = request
            try:
                async with asyncio.timeout(hold / 1000):  # not wait_for: 3.11's can swallow a cancel (gh-86296)
                    answered = await waiter
                if answered is not None:  # by the member's LeaveGroup (_end_holds)
                    return answered
            except TimeoutError:
                pass
            finally:
                runtime.forget_waiter(waiter)
                holds.pop(waiter, None)
                if not holds:
                    self._holds.pop(runtime.group_id, None)
        return await runtime.read(
            lambda g, now: groups.decide(g, request, now, runtime.config).replies[0].payload)

    def _end_holds(self, group, now: int, config, members) -> None:
        """A JoinGroup or LeaveGroup of ``members`` ((member id, instance id)
        pairs) is about to be applied to ``group``: their held heartbeats are
        answered first, on the group as it is before. They arrived before
        that request, so Kafka, which answers each heartbeat as it arrives,
        would have answered them before it too. Answered after it they would
        read, and count as, UNKNOWN_MEMBER_ID (a member that closed: zkcoord's
        consumer leaves with a heartbeat held) or ILLEGAL_GENERATION (a lone
        member's rejoin completes its rebalance at once)."""
        holds = self._holds.get(group.group_id)
        if not holds:
            return
        member_ids = {m for m, _ in members if m}
        instance_ids = {i for _, i in members if i}
        for waiter, request in list(holds.items()):
            if not waiter.done() and (request.member_id in member_ids or (
                    request.group_instance_id is not None and request.group_instance_id in instance_ids)):
                waiter.set_result(groups.decide(group, request, now, config).replies[0].payload)

    async def leave_group(self, decoded, connection):
        r = decoded.request
        version = decoded.api_version
        if version >= 3:
            members = tuple((m.member_id, m.group_instance_id) for m in r.members)
        else:
            members = ((r.member_id, None),)

        def answer(code, results=()):
            return response_for(decoded, throttle_time_ms=0, error_code=int(code), members=[
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id, "error_code": int(m.error)}
                for m in results])

        if not self.access.group(connection, Operation.READ, r.group_id):
            return answer(E.GROUP_AUTHORIZATION_FAILED)
        try:
            result = await self.manager.reply_if_unknown(r.group_id, lambda g, now: groups.decide(
                g, core.LeaveRequest(UNKNOWN_TOKEN, members), now, self.manager.group_config))
            if result is None:
                runtime = await self.manager.runtime(r.group_id)
                token = runtime.next_token()
                request = core.LeaveRequest(token, members)

                def leave(g, now):
                    self._end_holds(g, now, runtime.config, members)
                    return groups.decide(g, request, now, runtime.config)

                result = await runtime.call(token, leave)
        except GroupUnavailableError as exc:
            return answer(exc.code)
        except StateError as exc:
            log.error("LeaveGroup %s: %s", r.group_id, exc)
            return answer(E.UNKNOWN_SERVER_ERROR)
        if self.members is not None:
            for member_id, _ in members:
                self.members.forget(r.group_id, member_id)
        if version < 3:
            single = result.members[0].error if result.members and result.error is E.NONE else result.error
            return answer(single)
        return answer(result.error, result.members)

    # -- offsets -------------------------------------------------------------------
    def handle_soon(self, decoded: DecodedRequest, connection: ConnectionInfo,
                    reply: Callable[[Any], None]) -> bool:
        """The transport's path for a request answered once ZooKeeper accepted
        its write, without a task: a small OffsetCommit (v0-9, at most
        :data:`SMALL_COMMIT_PARTITIONS` partitions) of a group served right
        now (:meth:`GroupOffsets.commit_now`). True: ``reply(response)`` will
        be called (maybe before this returns; with an exception: a bug);
        False: send the request through :meth:`__call__`."""
        if decoded.api_key != OFFSET_COMMIT or decoded.api_version >= 10:
            return False
        r = decoded.request
        wanted = [(t.name, p.partition_index, p.committed_offset, p.committed_metadata)
                  for t in r.topics for p in t.partitions]
        if len(wanted) > SMALL_COMMIT_PARTITIONS:
            return False
        access = self.access
        if access.enforcing:
            topics = {w[0] for w in wanted}
            allowed = access.topics(connection, Operation.READ, topics)
            if not access.group(connection, Operation.READ, r.group_id) or any(t not in allowed for t in topics):
                return False  # the awaited path answers the refusals
        started = time.perf_counter() if self.metrics is not None else 0.0
        instance = getattr(r, "group_instance_id", None) if decoded.api_version >= 7 else None

        def respond(errors) -> None:
            if isinstance(errors, BaseException):
                reply(errors)
                return
            response = self._commit_answer(decoded, connection, instance, errors)
            if self.metrics is not None:
                self.metrics.observe_request(decoded.api_name, response, time.perf_counter() - started)
            reply(response)

        return self.manager.group_offsets.commit_now(r.group_id, r.member_id, r.generation_id_or_member_epoch,
                                                     instance, wanted, decoded.api_version, respond)

    def _commit_answer(self, decoded, connection, instance, errors):
        """A small OffsetCommit's response (v0-9): its errors, in request order, encoded once per answer."""
        r = decoded.request
        if self.members is not None and r.member_id and instance is None and E.NONE in errors:
            self.members.seen(r.group_id, r.member_id, connection.connection_id)
        answered = iter(errors)
        codes = tuple((t.name, None, p.partition_index, int(next(answered))) for t in r.topics for p in t.partitions)
        return cached_response(decoded, codes, lambda: _commit_fields(codes))

    async def offset_commit(self, decoded, connection):
        r = decoded.request
        version = decoded.api_version
        # v10 names topics by id (KIP-848): the topics image gives their names; an unknown id's partitions
        # are UNKNOWN_TOPIC_ID, as Kafka answers them.
        by_id = TopicNames(self.manager.group_config.image) if version >= 10 else None
        named = [(t, t.name if by_id is None else by_id.name(t.topic_id)) for t in r.topics]
        wanted = await _commit_items(named)
        instance = getattr(r, "group_instance_id", None) if version >= 7 else None
        errors = await commit_authorized(self.access, self.manager.group_offsets, connection, r.group_id,
                                         r.member_id, r.generation_id_or_member_epoch, instance, wanted, version)
        if self.members is not None and r.member_id and instance is None and E.NONE in errors:
            self.members.seen(r.group_id, r.member_id, connection.connection_id)

        def codes_of() -> list[tuple]:
            answered = iter(errors)
            return [(name if name is not None else t.topic_id, t.topic_id if by_id is not None else None,
                     p.partition_index, int(next(answered) if name is not None else E.UNKNOWN_TOPIC_ID))
                    for t, name in named for p in t.partitions]

        count = sum(len(t.partitions) for t, _ in named)
        if count > SMALL_COMMIT_PARTITIONS:  # the codes too are made where the answer is (a worker thread if big)
            return await _answer(decoded, count, lambda: _commit_fields(codes_of()))
        # The answer is a function of (topic, partition, error) in order: the same for every commit of those
        # partitions, so it is encoded once.
        codes = codes_of()
        return cached_response(decoded, tuple(codes), lambda: _commit_fields(codes))

    async def offset_fetch(self, decoded, connection):
        if _fetches_every_offset(decoded):
            # A small request whose answer may be 100,000 partitions: its objects are freed before the cyclic
            # collector runs again (bulk_work.collector_paused).
            with collector_paused():
                return await self._offset_fetch(decoded, connection)
        return await self._offset_fetch(decoded, connection)

    async def _offset_fetch(self, decoded, connection):
        r = decoded.request
        version = decoded.api_version
        if version >= 8:
            by_id = TopicNames(self.manager.group_config.image) if version >= 10 else None
            answers = []
            for i, g in enumerate(r.groups):
                await pause_every(i)
                wanted, unknown = (_wanted(g.topics), []) if by_id is None else by_id.wanted(g.topics)
                member = (g.member_id, g.member_epoch) if version >= 9 else (None, -1)
                code, answer, refused = await fetch_authorized(self.access, self.manager.group_offsets, connection,
                                                               g.group_id, wanted, member)
                answers.append((g.group_id, code, answer, refused, unknown))

            def topics(answer, refused, unknown):
                listed = with_refused(answer.response_topics(), refused)
                return listed if by_id is None else by_id.answer_topics(listed, unknown)

            return await _answer(decoded, sum(1 + len(a) for _, _, a, _, _ in answers), lambda: {
                "throttle_time_ms": 0,
                "groups": [{"group_id": group_id, "error_code": int(code),
                            "topics": topics(answer, refused, unknown) if code is E.NONE else []}
                           for group_id, code, answer, refused, unknown in answers]})
        wanted = _wanted(r.topics)
        code, answer, refused = await fetch_authorized(self.access, self.manager.group_offsets, connection,
                                                       r.group_id, wanted)
        if decoded.api_version < 2 and code is not E.NONE:  # no group error field: it goes on every partition
            topics = lambda: [{"name": t, "partitions": [  # noqa: E731
                {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                 "error_code": int(code)} for p in parts]} for t, parts in (wanted or {}).items()]
        else:
            topics = lambda: with_refused(answer.response_topics(), refused)  # noqa: E731
        return await _answer(decoded, max(len(answer), count(wanted)), lambda: {
            "throttle_time_ms": 0, "error_code": int(code), "topics": topics()})

    # -- DescribeGroups, ListGroups, DeleteGroups ------------------------------------
    async def describe_groups(self, decoded, connection):
        groups = []
        # Each distinct id once: a request may repeat one 500,000 times.
        distinct = list(dict.fromkeys(decoded.request.groups))
        refused = {g for g in distinct if not self.access.group(connection, Operation.DESCRIBE, g)}
        described = await self.manager.admin.describe_groups([g for g in distinct if g not in refused])
        operations = decoded.api_version >= 3 and getattr(decoded.request, "include_authorized_operations", False)
        for i, group_id in enumerate(decoded.request.groups):
            await pause_every(i)
            code, description = described[group_id] if group_id not in refused else (
                E.GROUP_AUTHORIZATION_FAILED, None)
            groups.append({
                "authorized_operations": self.access.group_operations(connection, group_id)
                if operations and code is E.NONE else UNKNOWN_OPERATIONS,
                "error_code": int(code), "group_id": group_id,
                "group_state": description.state if description else "",
                "protocol_type": description.protocol_type if description else "",
                "protocol_data": description.protocol if description else "",
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": m.metadata, "member_assignment": m.assignment}
                            for m in (description.members if description else ())],
            })
        return await _answer(decoded, len(groups), throttle_time_ms=0, groups=groups)

    async def list_groups(self, decoded, connection):
        r = decoded.request
        # Filters compared case-insensitively, as Kafka does; a null entry (the field is not nullable,
        # but a decoder lets one through) matches nothing.
        states = {s.lower() for s in (getattr(r, "states_filter", None) or []) if isinstance(s, str)} \
            if decoded.api_version >= 4 else set()
        types = {t.lower() for t in (getattr(r, "types_filter", None) or []) if isinstance(t, str)} \
            if decoded.api_version >= 5 else set()
        listed = []
        everything = self.access.cluster(connection, Operation.DESCRIBE)
        for i, (group_id, state, protocol_type, group_type) in enumerate(await self.manager.admin.list_groups()):
            await pause_every(i)
            if (states and state.lower() not in states) or (types and group_type not in types):
                continue
            if not everything and not self.access.group(connection, Operation.DESCRIBE, group_id):
                continue
            listed.append({"group_id": group_id, "protocol_type": protocol_type, "group_state": state,
                           "group_type": group_type})
        return await _answer(decoded, len(listed), throttle_time_ms=0, error_code=0, groups=listed)

    async def delete_groups(self, decoded, connection):
        distinct = list(dict.fromkeys(decoded.request.groups_names))  # once each
        allowed = [g for g in distinct if self.access.group(connection, Operation.DELETE, g)]
        deleted = await self.manager.admin.delete_groups(allowed)
        results = [{"group_id": group_id, "error_code": int(code)} for group_id, code in deleted.items()]
        results += [{"group_id": g, "error_code": int(E.GROUP_AUTHORIZATION_FAILED)}  # after, as Kafka does
                    for g in distinct if g not in deleted]
        return await _answer(decoded, len(results), throttle_time_ms=0, results=results)


async def _answer(decoded, items: int, build=None, /, **fields):
    """The answer to ``decoded``, of ``fields`` or of the fields ``build()``
    returns; with more than BIG_ANSWER_ITEMS entries, built and encoded in a
    worker thread (kafka-python spends several microseconds per entry, all of
    it holding the event loop otherwise)."""
    def answer():
        return response_for(decoded, **(build() if build is not None else fields))

    if items <= BIG_ANSWER_ITEMS:
        return answer()
    # Only the bytes are kept: the answer's objects (100,000 partitions) are freed in the worker thread.
    return await off_loop(lambda: encoded_response(decoded, answer(), keep_message=False))


def _fetches_every_offset(decoded) -> bool:
    """An OffsetFetch of every offset of a group (or, v8+, of more than SLICE groups)."""
    r = decoded.request
    if decoded.api_version < 8:
        return r.topics is None
    return len(r.groups) > SLICE or any(g.topics is None for g in r.groups)


def _wanted(topics, names=None) -> dict[str, list[int]] | None:
    """An OffsetFetch's topics as :data:`~zkcoord.core.offset_fetch.Wanted`
    (None: all), its partition lists kept as decoded, not copied per item;
    ``names``: each topic's name, when not its ``name`` field."""
    if topics is None:
        return None
    wanted: dict[str, list[int]] = {}
    for i, topic in enumerate(topics):
        name = topic.name if names is None else names[i]
        if name in wanted:
            wanted[name] = [*wanted[name], *topic.partition_indexes]
        else:
            wanted[name] = topic.partition_indexes
    return wanted


class TopicNames:
    """OffsetCommit and OffsetFetch v10 name topics by id (KIP-848): names
    from the daemon's topics image, and ids back in the answers, as Kafka's
    ``KafkaApis`` does with its metadata cache."""

    def __init__(self, image) -> None:
        self.image = image

    def name(self, topic_id) -> str | None:
        return self.image.name_of(topic_id_text(topic_id))

    def wanted(self, topics) -> tuple[dict[str, list[int]] | None, list]:
        """(the topics known, by name; the unknown ones ``[(topic id, partitions)]``)."""
        if topics is None:
            return None, []
        names = [self.name(t.topic_id) for t in topics]
        known = [(t, n) for t, n in zip(topics, names) if n is not None]
        unknown = [(t.topic_id, t.partition_indexes) for t, n in zip(topics, names) if n is None]
        return _wanted([t for t, _ in known], [n for _, n in known]), unknown

    def answer_topics(self, listed: list[dict], unknown: list) -> list[dict]:
        """Answer topics with their ids (a topic the image has no id for is
        left out, as Kafka leaves it out), then the unknown ids' partitions,
        UNKNOWN_TOPIC_ID."""
        out = []
        for topic in listed:
            topic_id = self.image.id_of(topic["name"])
            if topic_id is not None:
                out.append({**topic, "topic_id": topic_id_uuid(topic_id)})
        return out + [{"name": "", "topic_id": topic_id, "partitions": [
            {"partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
             "error_code": int(E.UNKNOWN_TOPIC_ID)} for p in parts]} for topic_id, parts in unknown]


def _state_error_code(exc: StateError) -> ErrorCode:
    """A group's state that would be over --max-state-bytes: the group cannot
    take this member (or this assignment), GROUP_MAX_SIZE_REACHED, as Kafka
    answers a group that is full; any other stored-state failure is
    UNKNOWN_SERVER_ERROR (logged by the caller)."""
    return E.GROUP_MAX_SIZE_REACHED if isinstance(exc, StateTooLargeError) else E.UNKNOWN_SERVER_ERROR


def _daemon_address(owner: NodeInfo) -> tuple[int, str, int]:
    return owner.node_id, owner.host, owner.port


def _join_response(decoded, result: core.JoinResult) -> EncodedResponse:
    """The JoinGroup answer, encoded (it may be made while a write is in flight)."""
    version = decoded.api_version
    return encoded_response(decoded, response_for(
        decoded, throttle_time_ms=0, error_code=int(result.error), generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name if (version >= 7 or result.protocol_name) else "",
        leader=result.leader_id, skip_assignment=result.skip_assignment, member_id=result.member_id,
        members=[{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata}
                 for m in result.members]))


async def _commit_items(named) -> list[tuple]:
    """``(topic, partition, offset, metadata)`` of every partition of an
    OffsetCommit's ``(topic, name)`` pairs whose name is known, in slices
    between yields to the event loop (one request may name 460,000)."""
    wanted: list[tuple] = []
    since_yield = 0
    for t, name in named:
        if name is None:
            continue
        partitions = t.partitions
        for start in range(0, len(partitions), SLICE):
            if since_yield >= SLICE:
                await asyncio.sleep(0)
                since_yield = 0
            part = partitions[start:start + SLICE]
            wanted += [(name, p.partition_index, p.committed_offset, p.committed_metadata) for p in part]
            since_yield += len(part)
    return wanted


def _commit_fields(codes) -> dict:
    """An OffsetCommit response's fields from ``(topic name or id, topic id, partition, error)`` in request order."""
    topics: dict = {}
    for key, topic_id, partition, code in codes:
        entry = topics.get(key)
        if entry is None:
            entry = topics[key] = {"name": key if isinstance(key, str) else "", "topic_id": topic_id,
                                   "partitions": []}
        entry["partitions"].append({"partition_index": partition, "error_code": code})
    return {"throttle_time_ms": 0, "topics": list(topics.values())}


def _sync_has_protocol(decoded) -> bool:
    """SyncGroup v5+ must name the protocol type and name."""
    r = decoded.request
    return decoded.api_version < 5 or (r.protocol_type is not None and r.protocol_name is not None)


def _sync_request(decoded, token: int) -> core.SyncRequest:
    r = decoded.request
    version = decoded.api_version
    return core.SyncRequest(
        token=token, member_id=r.member_id, generation_id=r.generation_id,
        group_instance_id=getattr(r, "group_instance_id", None) if version >= 3 else None,
        protocol_type=getattr(r, "protocol_type", None) if version >= 5 else None,
        protocol_name=getattr(r, "protocol_name", None) if version >= 5 else None,
        assignments={a.member_id: bytes(a.assignment) for a in (r.assignments or [])},
    )


def _sync_response(decoded, code, protocol_type=None, protocol_name=None, assignment=b""):
    return response_for(decoded, throttle_time_ms=0, error_code=int(code), protocol_type=protocol_type,
                        protocol_name=protocol_name, assignment=assignment)


