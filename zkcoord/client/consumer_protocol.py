"""KIP-848's consumer group protocol for the thin consumer: the I/O around
the member's state machine (:mod:`zkcoord.client.membership`), inside
kafka-python's ``KafkaConsumer``.

Used when ``group_protocol="consumer"``: :class:`ConsumerProtocolCoordinator`
takes the place of kafka-python's ``ConsumerCoordinator`` (which speaks the
classic protocol) and keeps what does not depend on the protocol: finding
the coordinator (FindCoordinator to a daemon, :mod:`zkcoord.client.network`),
committing and fetching offsets, auto commit. Membership is the state
machine's; this module owns three things around it:

* the heartbeat task, a coroutine on kafka-python's I/O thread (the
  "background heartbeat"): it asks the machine what to send and when, sends
  ConsumerGroupHeartbeat v1 (the member id is made here, as Kafka's clients
  make it) to the coordinator, hands the answer back, and looks the
  coordinator up again when told to;
* the application's side, in ``poll()``, ``close()`` and ``unsubscribe()``
  on the caller's thread: the reconciliations and releases the machine
  hands out (auto commit, the rebalance listener, the consumer's
  assignment), so callbacks run on the application's thread, as in Kafka's
  consumer, and may call ``commit()``; errors the machine recorded are
  raised there (a fatal one at every later ``poll()``);
* OffsetCommit v9 and OffsetFetch v9 carrying the member id and epoch.

One lock serialises the machine's calls from both threads; it is never held
across I/O or a callback. :class:`ConsumerProtocolSubscription` lets a
subscription by regular expression go to the coordinator as
``SubscribedTopicRegex`` (RE2J syntax, resolved there) instead of being
matched here against the metadata.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Iterator

import kafka.errors as Errors
import re2
from kafka.consumer.subscription_state import (
    AsyncConsumerRebalanceListener, ConsumerRebalanceListener, SubscriptionState, SubscriptionType,
)
from kafka.coordinator.consumer import ConsumerCoordinator
from kafka.future import Future
from kafka.net.wakeup_notifier import WakeupNotifier
from kafka.protocol.consumer import OffsetCommitRequest, OffsetFetchRequest
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.structs import ConsumerGroupMetadata, MemberState as KafkaMemberState, TopicPartition
from kafka.util import WeakMethod, synchronized

from zkcoord.client.membership import (
    ErrorCode, Failure, HeartbeatRequest, HeartbeatResponse, LookUp, MemberConfig, MemberState, Membership,
    Reconcile, Release, Wait,
)
from zkcoord.schemas import ConsumerGroupHeartbeatRequest
from zkcoord.topic_ids import topic_id_text, topic_id_uuid

log = logging.getLogger(__name__)

HEARTBEAT_VERSION = 1  # v1: the member makes its own id (KIP-1082), regular expressions
OFFSET_API_VERSION = 9  # the first OffsetCommit/OffsetFetch carrying member epochs
LOOKUP_BACKOFF_MAX_MS = 1_000  # Kafka's retry.backoff.max.ms default: failed lookups back off up to it
_REGEX_OPTIONS = re2.Options()
_REGEX_OPTIONS.log_errors = False
_STATES = {MemberState.STABLE: KafkaMemberState.STABLE, MemberState.RECONCILING: KafkaMemberState.REBALANCING,
           MemberState.ACKNOWLEDGING: KafkaMemberState.REBALANCING, MemberState.JOINING: KafkaMemberState.REBALANCING}
# Why each fatal answer came, in the consumer's own settings.
_FATAL_HINTS = {
    ErrorCode.UNSUPPORTED_VERSION: "the zkcoord daemon does not serve the consumer group protocol (its "
                                   "group_coordinator_rebalance_protocols lacks consumer, or it has no topic "
                                   "metadata); use group_protocol=classic",
    ErrorCode.UNSUPPORTED_ASSIGNOR: "group_remote_assignor names an assignor the daemons do not offer "
                                    "(their group_consumer_assignors)",
    ErrorCode.UNRELEASED_INSTANCE_ID: "group_instance_id is still held by a member that has not left: another "
                                      "consumer runs with it, or the previous one was fenced and its session "
                                      "has not expired yet",
    ErrorCode.FENCED_INSTANCE_ID: "another consumer joined with this group_instance_id",
    ErrorCode.INVALID_REGULAR_EXPRESSION: "the subscription's pattern is not a valid RE2J regular expression",
    ErrorCode.GROUP_MAX_SIZE_REACHED: "the group is full (the daemons' group_consumer_max_size)",
    ErrorCode.GROUP_ID_NOT_FOUND: "the group is not a consumer group the coordinator can upgrade (its "
                                  "group_consumer_migration_policy)",
}


def new_member_id() -> str:
    """A member id as Kafka's consumer makes one: ``Uuid.randomUuid().toString()``."""
    while True:
        text = topic_id_text(uuid.uuid4())
        if not text.startswith("-"):
            return text


def check_pattern(pattern: str) -> None:
    """ValueError naming the problem if RE2J (RE2) cannot compile ``pattern``."""
    try:
        re2.compile(pattern, options=_REGEX_OPTIONS)
    except re2.error as exc:
        raise ValueError(f"pattern {pattern!r} is not a valid regular expression in RE2J's syntax, which the "
                         f"coordinator matches topics with: {exc}") from None


class ConsumerProtocolSubscription(SubscriptionState):
    """kafka-python's subscription state, where a pattern is not matched here:
    it goes to the coordinator, and the assignment it sends decides the
    topics. ``version`` moves on with every change of subscription."""

    def __init__(self, offset_reset_strategy="earliest"):
        super().__init__(offset_reset_strategy)
        self.regex: str | None = None
        self.version = 0

    @synchronized
    def subscribe(self, topics=(), pattern=None, listener=None):
        if not pattern:
            super().subscribe(topics=topics, listener=listener)
            self.regex = None
            self.version += 1
            return
        if topics:
            raise Errors.IllegalStateError(self._SUBSCRIPTION_EXCEPTION_MESSAGE)
        check_pattern(pattern)
        if listener and not isinstance(listener, (ConsumerRebalanceListener, AsyncConsumerRebalanceListener)):
            raise TypeError("listener must be a ConsumerRebalanceListener or AsyncConsumerRebalanceListener")
        self._set_subscription_type(SubscriptionType.AUTO_PATTERN)
        self.subscription, self._group_subscription = set(), set()
        self.subscribed_pattern = None  # matched by the coordinator, not here
        self.regex = pattern
        self.rebalance_listener = listener
        self.version += 1

    @synchronized
    def change_subscription(self, topics):
        super().change_subscription(topics)
        self.version += 1

    @synchronized
    def assign_from_subscribed(self, assignments):
        """The coordinator's assignment, whole; as Kafka's consumer, topics
        outside the subscription are taken too (a regular expression's, or a
        subscription that changed before the coordinator knew)."""
        if not self.partitions_auto_assigned():
            raise Errors.IllegalStateError(self._SUBSCRIPTION_EXCEPTION_MESSAGE)
        topics = {tp.topic for tp in assignments}
        if self.regex is not None:
            self.subscription = set(topics)
        self._group_subscription.update(topics)
        self._apply_assignment(assignments, randomize=True)

    @synchronized
    def unsubscribe(self):
        super().unsubscribe()
        self.regex = None
        self.version += 1


class ConsumerProtocolCoordinator(ConsumerCoordinator):
    """kafka-python's ``ConsumerCoordinator`` whose group membership is KIP-848's
    (see the module docstring). ``server_assignor``: Kafka's
    ``group.remote.assignor``; ``rebalance_timeout_ms``: how long the
    coordinator waits for this member to revoke (default ``max_poll_interval_ms``)."""

    def __init__(self, client, subscription, *, server_assignor: str | None = None,
                 rebalance_timeout_ms: int | None = None, **configs):
        super().__init__(client, subscription, **configs)
        self.member_id = new_member_id()
        self._membership = Membership(MemberConfig(
            group_id=self.group_id, member_id=self.member_id, instance_id=self.group_instance_id,
            rebalance_timeout_ms=rebalance_timeout_ms or self.config["max_poll_interval_ms"],
            server_assignor=server_assignor, max_poll_interval_ms=self.config["max_poll_interval_ms"],
            retry_backoff_ms=self.config["retry_backoff_ms"]))
        self._member_lock = threading.Lock()
        self._member_wakeup = WakeupNotifier(self._net)
        self._member_task = None
        self._member_closed = False
        self._work_waiters: set[Future] = set()  # the fetcher's waits inside poll()
        self._leave_waiters: set[Future] = set()
        self._subscription_version = -1
        self._offset_fetch_key: tuple | None = None
        self._lookup_error: Exception | None = None  # the last lookup's refusal (e.g. no ACL for the group)
        self._lookup_failures = 0
        self._checked_node = None  # the coordinator whose ApiVersions offer ConsumerGroupHeartbeat v1

    # -- what the consumer asks -------------------------------------------------------------
    def group_metadata(self):
        with self._member_lock:
            m = self._membership
            return ConsumerGroupMetadata(group_id=self.group_id, generation_id=m.member_epoch, member_id=self.member_id,
                                         group_instance_id=self.group_instance_id,
                                         state=_STATES.get(m.state, KafkaMemberState.UNJOINED))

    def need_rejoin(self):
        return False  # membership is the heartbeat task's, never a JoinGroup

    def time_to_next_heartbeat(self):
        return float("inf")  # heartbeats are the background task's

    def time_to_next_poll(self):
        if not self.config["enable_auto_commit"]:
            return float("inf")
        return max(0.0, self.next_auto_commit_deadline - time.monotonic())

    def reset_generation(self, member_id=None):
        """kafka-python calls it when a commit is refused; the member's fate is
        the heartbeat's (Kafka's consumer does not fence on a commit error)."""

    def request_rejoin(self):
        pass

    @contextlib.contextmanager
    def rejoin_wakeup(self) -> Iterator[Future | None]:
        """For the fetcher's waits (:class:`zkcoord.client.coordinator.ZkcoordFetcher`):
        None if ``poll()`` has work for the member now, else a future resolved
        (on the I/O thread) as soon as it has."""
        future = Future()
        with self._member_lock:
            self._work_waiters.add(future)
            ready = self._membership.has_work() or bool(self._membership.failures) or self._lookup_error is not None
        try:
            yield None if ready else future
        finally:
            with self._member_lock:
                self._work_waiters.discard(future)

    # -- poll(), on the application's thread ---------------------------------------------------
    def poll(self, timeout_ms=None):
        if self.group_id is None:
            return True
        self._invoke_completed_offset_commit_callbacks()
        if self._subscription.partitions_auto_assigned():
            self._sync_subscription()
            with self._member_lock:
                self._membership.on_poll(_now_ms())
            self._start_member_task()
            self._member_wakeup.notify()
            self._do_member_work()
            self._raise_failures()
        self._maybe_auto_commit_offsets_async()
        return True

    def _sync_subscription(self) -> None:
        sub = self._subscription
        if sub.version == self._subscription_version:
            return
        self._subscription_version = sub.version
        with self._member_lock:
            if sub.regex is not None:
                self._membership.subscribe(topics=(), regex=sub.regex)
            else:
                self._membership.subscribe(topics=tuple(sub.subscription or ()))

    def _raise_failures(self) -> None:
        """Each recorded error once, oldest first; a fatal one, or a refused
        coordinator lookup, again at every call."""
        with self._member_lock:
            m = self._membership
            failure = m.failures.pop(0) if m.failures else m.fatal
        if failure is not None:
            raise _error(failure, self.group_id)
        if self._lookup_error is not None:
            raise self._lookup_error

    def _do_member_work(self) -> None:
        while True:
            with self._member_lock:
                unresolved = [t for t in self._membership.target_topic_ids() if self._topic_name(t) is None]
                work = self._membership.next_work(self._topic_name,
                                                  frozenset(self._subscription.assigned_partitions()))
            if unresolved:
                log.debug("group %s: topic ids %s not in the metadata yet", self.group_id, unresolved)
                self._cluster.request_update()
            if work is None:
                return
            if isinstance(work, Release):
                self._release(work)
            else:
                self._reconcile(work)

    def _topic_name(self, topic_id: str) -> str | None:
        return self._cluster.topic_name_for_id(topic_id_uuid(topic_id))

    def _reconcile(self, work: Reconcile) -> None:
        """Kafka's ``maybeReconcile`` and ``revokeAndAssign``: commit, revoke, assign."""
        revoked = {TopicPartition(*tp) for tp in work.revoked}
        added = {TopicPartition(*tp) for tp in work.added}
        log.info("group %s: member %s reconciling: assigned %s, revoked %s, added %s", self.group_id,
                 self.member_id, sorted(work.assigned), sorted(revoked), sorted(added))
        if self.config["enable_auto_commit"]:
            self._commit_before_rebalance()
        if revoked:
            self._subscription.mark_pending_revocation(revoked)
            try:
                self._call_listener("on_partitions_revoked", revoked)
            except Exception as exc:
                with self._member_lock:
                    self._membership.reconcile_failed(work)
                raise Errors.KafkaError("User rebalance callback throws an error") from exc
        self._subscription.assign_from_subscribed(sorted(TopicPartition(*tp) for tp in work.assigned))
        self._cluster.set_topics(self._subscription.group_subscription())
        self.next_auto_commit_deadline = time.monotonic() + self.auto_commit_interval
        failed = None
        try:
            self._call_listener("on_partitions_assigned", added)
        except Exception as exc:  # the assignment stands; the error goes to poll()
            failed = exc
        with self._member_lock:
            self._membership.reconciled(work)
        self._member_wakeup.notify()  # acknowledge now
        if failed is not None:
            raise Errors.KafkaError("User rebalance callback throws an error") from failed

    def _release(self, work: Release) -> None:
        """Give up every partition held: ``on_lost`` or ``on_revoked``, then an empty assignment."""
        partitions = set(self._subscription.assigned_partitions())
        failed = None
        if partitions:
            log.info("group %s: member %s gives up %s (%s)", self.group_id, self.member_id, sorted(partitions),
                     work.reason)
            self._subscription.mark_pending_revocation(partitions)
            try:
                self._call_listener("on_partitions_lost" if work.lost else "on_partitions_revoked", partitions)
            except Exception as exc:
                failed = exc
        if self._subscription.partitions_auto_assigned():
            self._subscription.assign_from_subscribed([])
        with self._member_lock:
            self._membership.released(work)
        self._member_wakeup.notify()
        if failed is not None:
            raise Errors.KafkaError("User rebalance callback throws an error") from failed

    def _call_listener(self, method: str, partitions: set[TopicPartition]) -> None:
        listener = self._subscription.rebalance_listener
        if listener is None:
            return
        callback = getattr(listener, method)
        if inspect.iscoroutinefunction(callback):
            self._net.run(callback, partitions)
        else:
            callback(partitions)

    def _commit_before_rebalance(self) -> None:
        """Auto commit before a reconciliation (Kafka's
        ``maybeAutoCommitSyncBeforeRebalance``): retried while retriable or
        refused for a stale epoch, for up to the rebalance time-out."""
        deadline = time.monotonic() + self._membership.config.rebalance_timeout_ms / 1000
        while True:
            left_ms = max(0, int((deadline - time.monotonic()) * 1000))
            try:
                self.commit_offsets_sync(self._subscription.all_consumed_offsets(), timeout_ms=left_ms)
                return
            except Errors.StaleMemberEpochError:
                if time.monotonic() >= deadline or self._membership.commit_epoch is None:
                    log.warning("group %s: commit before rebalance refused (stale epoch)", self.group_id)
                    return
                time.sleep(self.config["retry_backoff_ms"] / 1000)
            except Exception as exc:  # Kafka's consumer reconciles anyway
                log.warning("group %s: commit before rebalance failed, reconciling anyway: %s", self.group_id, exc)
                return

    # -- leaving -------------------------------------------------------------------------------------
    def maybe_leave_group(self, reason=None, timeout_ms=None):
        self.leave_group(timeout_ms)

    def leave_group(self, timeout_ms: int | None = None) -> None:
        """``on_revoked`` (``on_lost`` without an epoch), then the leave heartbeat
        (epoch -1, -2 for a static member); waits up to ``timeout_ms`` for its answer."""
        with self._member_lock:
            work = self._membership.leave()
        failed = None
        if work is not None:
            try:
                self._release(work)
            except Errors.KafkaError as exc:  # Kafka's consumer leaves anyway
                failed = exc
            self._wait_for_leave(self.config["request_timeout_ms"] if timeout_ms is None else timeout_ms)
        if failed is not None:
            raise failed

    def _wait_for_leave(self, timeout_ms: int) -> None:
        future = Future()
        with self._member_lock:
            if not self._membership.leave_in_progress:
                return
            self._leave_waiters.add(future)
        self._start_member_task()
        self._member_wakeup.notify()
        try:
            self._net.run(self._manager.wait_for, future, timeout_ms)
        except Errors.KafkaTimeoutError:
            log.warning("group %s: no answer to member %s's leave within %d ms", self.group_id, self.member_id,
                        timeout_ms)
        finally:
            with self._member_lock:
                self._leave_waiters.discard(future)

    def close(self, autocommit=True, timeout_ms=None):
        try:
            if autocommit:
                self._maybe_auto_commit_offsets_sync(timeout_ms=timeout_ms)
            if self._subscription.partitions_auto_assigned():
                self.leave_group(timeout_ms)
        finally:
            self._member_closed = True
            self._member_wakeup.notify()
            self._cluster.remove_listener(WeakMethod(self._handle_metadata_update))

    # -- the heartbeat task, on the I/O thread -------------------------------------------------------
    def _start_member_task(self) -> None:
        if self._member_closed:
            return
        if self._member_task is None or self._member_task.is_done:
            self._member_task = self._manager.call_soon(self._member_loop)

    async def _member_loop(self):
        while not self._member_closed:
            try:
                await self._member_step()
            except Exception:  # noqa: BLE001 - never lose the task: log, back off, go on
                log.exception("group %s: member %s heartbeat task", self.group_id, self.member_id)
                await self._member_wakeup(self.config["retry_backoff_ms"] / 1000)

    async def _member_step(self) -> None:
        node_id = self.coordinator()
        with self._member_lock:
            step = self._membership.poll_heartbeat(_now_ms(), node_id is not None)
        if isinstance(step, Wait):
            self._notify_waiters()
            await self._member_wakeup(None if step.ms is None else step.ms / 1000)
            return
        if isinstance(step, LookUp):
            try:
                await self.lookup_coordinator()
            except Errors.KafkaError as exc:
                log.debug("group %s: coordinator lookup failed: %s", self.group_id, exc)
                if not exc.retriable:  # Kafka's consumer raises it from poll() (a coordinator "fatal error")
                    self._lookup_error = exc
                    self._notify_waiters()
                self._lookup_failures += 1
                backoff_ms = min(self.config["retry_backoff_ms"] * 2 ** (self._lookup_failures - 1),
                                 max(LOOKUP_BACKOFF_MAX_MS, self.config["retry_backoff_ms"]))
                await self._member_wakeup(backoff_ms / 1000)
            else:
                self._lookup_error, self._lookup_failures = None, 0
            return
        request = step.request
        wire = _wire_request(request)
        try:
            refusal = await self._coordinator_refusal(node_id)
            if refusal is not None:  # as Kafka's consumer, before sending: nothing to send to
                with self._member_lock:
                    self._membership.on_response(request, refusal, _now_ms())
                self._notify_waiters()
                return
            answer = await self._manager.send(wire, node_id=node_id)
        except Exception as exc:  # noqa: BLE001 - any failure to get an answer
            retriable = bool(getattr(exc, "retriable", False)) or isinstance(
                exc, (Errors.KafkaConnectionError, Errors.NodeNotReadyError, Errors.KafkaTimeoutError))
            if retriable:
                self._failed_request(node_id, wire, exc)
            else:
                log.error("group %s: ConsumerGroupHeartbeat failed: %r", self.group_id, exc)
            with self._member_lock:
                self._membership.on_failure(request, _now_ms(), retriable, f"{type(exc).__name__}: {exc}")
        else:
            response = _response(answer)
            if response.error_code != ErrorCode.NONE:
                log.info("group %s: member %s heartbeat (epoch %d) answered %s: %s", self.group_id,
                         self.member_id, request.member_epoch, Errors.for_code(response.error_code).__name__,
                         response.error_message)
            with self._member_lock:
                unknown = self._membership.on_response(request, response, _now_ms())
            if unknown:
                self.coordinator_dead(Errors.for_code(response.error_code).__name__)
        self._notify_waiters()

    async def _coordinator_refusal(self, node_id) -> HeartbeatResponse | None:
        """UNSUPPORTED_VERSION if the coordinator does not advertise
        ConsumerGroupHeartbeat v1 (Kafka's consumer checks the ApiVersions of
        the node before sending it); asked once per coordinator."""
        if node_id == self._checked_node:
            return None
        answer = await self._manager.send(ApiVersionsRequest(version=0), node_id=node_id)
        served = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        low, high = served.get(ConsumerGroupHeartbeatRequest.API_KEY, (0, -1))
        if not low <= HEARTBEAT_VERSION <= high:
            broker = self._cluster.broker_metadata(node_id)
            where = f"{broker.host}:{broker.port}" if broker is not None else str(node_id)
            return HeartbeatResponse(ErrorCode.UNSUPPORTED_VERSION, f"the coordinator at {where} does not "
                                     f"advertise ConsumerGroupHeartbeat v{HEARTBEAT_VERSION}", -1, 0)
        self._checked_node = node_id
        return None

    def _notify_waiters(self) -> None:
        """Wake the application: work for its ``poll()`` or an error; its leave done."""
        with self._member_lock:
            m = self._membership
            waiters = []
            if m.has_work() or m.failures or self._lookup_error is not None:
                waiters += [f for f in self._work_waiters if not f.is_done]
            if not m.leave_in_progress:
                waiters += [f for f in self._leave_waiters if not f.is_done]
        for future in waiters:
            future.success(None)

    def _handle_metadata_update(self, cluster):
        if cluster.unauthorized_topics:
            raise Errors.TopicAuthorizationFailedError(cluster.unauthorized_topics)
        if getattr(self, "_member_lock", None) is not None:  # registered before __init__ ends
            with self._member_lock:
                self._membership.metadata_changed()
            self._notify_waiters()  # topic ids of the target may resolve now

    # -- offsets with the member's epoch --------------------------------------------------------------
    def _member_fields(self) -> tuple[str, int]:
        """(member id, epoch) for OffsetCommit / OffsetFetch: the member's while
        it holds an epoch; ("", -1) for partitions assigned by hand."""
        if not self._subscription.partitions_auto_assigned():
            return "", -1
        with self._member_lock:
            epoch = self._membership.commit_epoch
        return self.member_id, -1 if epoch is None else epoch

    async def _send_offset_commit_request(self, offsets):
        if not offsets:
            return None
        node_id = self.coordinator()
        if node_id is None:
            raise Errors.CoordinatorNotAvailableError()
        member_id, epoch = self._member_fields()
        by_topic: dict[str, dict[int, object]] = {}
        for tp, offset in offsets.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = offset
        Topic = OffsetCommitRequest.OffsetCommitRequestTopic
        request = OffsetCommitRequest(
            version=OFFSET_API_VERSION, group_id=self.group_id, generation_id_or_member_epoch=epoch,
            member_id=member_id, group_instance_id=self.group_instance_id,
            topics=[Topic(name=topic, partitions=[Topic.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=o.offset, committed_leader_epoch=o.leader_epoch,
                committed_metadata=o.metadata) for p, o in partitions.items()])
                for topic, partitions in by_topic.items()])
        sent = time.monotonic()
        try:
            response = await self._manager.send(request, node_id=node_id)
        except Exception as exc:
            self._failed_request(node_id, request, exc)
            raise
        self._handle_offset_commit_response(offsets, sent, response)

    async def _send_offset_fetch_request(self, partitions):
        if not partitions and partitions is not None:
            return {}
        node_id = self.coordinator()
        if node_id is None:
            raise Errors.CoordinatorNotAvailableError()
        member_id, epoch = self._member_fields()
        Group = OffsetFetchRequest.OffsetFetchRequestGroup
        by_topic: dict[str, set[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, set()).add(tp.partition)
        request = OffsetFetchRequest(version=OFFSET_API_VERSION, require_stable=True, groups=[Group(
            group_id=self.group_id, member_id=member_id or None, member_epoch=epoch,
            topics=[Group.OffsetFetchRequestTopics(name=t, partition_indexes=sorted(ps)) for t, ps in by_topic.items()])])
        try:
            response = await self._manager.send(request, node_id=node_id)
        except Exception as exc:
            self._failed_request(node_id, request, exc)
            raise
        try:
            return self._handle_offset_fetch_response(response)
        except (Errors.StaleMemberEpochError, Errors.UnknownMemberIdError) as exc:
            # The epoch moved on (or the member is being fenced): the heartbeat settles it; ask again.
            raise _EpochMoved(str(exc)) from exc

    async def fetch_committed_offsets_async(self, partitions, timeout_ms=None):
        with self._member_lock:
            key = (self._membership.member_epoch, self._membership.current.local_epoch)
        if key != self._offset_fetch_key:
            # Answers kept from another epoch may be stale (zkcoord.client.coordinator, fix 5): ask again.
            self._offset_fetch_futures.clear()
            self._offset_fetch_key = key
        return await super().fetch_committed_offsets_async(partitions, timeout_ms=timeout_ms)


class _EpochMoved(Errors.RetriableError):
    """OffsetFetch refused for this member's epoch: retried once the heartbeat moved it on."""


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _wire_request(r: HeartbeatRequest) -> ConsumerGroupHeartbeatRequest:
    owned = None if r.owned is None else [ConsumerGroupHeartbeatRequest.TopicPartitions(
        topic_id=topic_id_uuid(t), partitions=list(ps)) for t, ps in r.owned]
    return ConsumerGroupHeartbeatRequest(
        version=HEARTBEAT_VERSION, group_id=r.group_id, member_id=r.member_id, member_epoch=r.member_epoch,
        instance_id=r.instance_id, rack_id=r.rack_id, rebalance_timeout_ms=r.rebalance_timeout_ms,
        subscribed_topic_names=None if r.subscribed_topic_names is None else list(r.subscribed_topic_names),
        subscribed_topic_regex=r.subscribed_topic_regex, server_assignor=r.server_assignor, topic_partitions=owned)


def _response(answer) -> HeartbeatResponse:
    assignment = None
    if answer.assignment is not None:
        assignment = frozenset((topic_id_text(t.topic_id), p) for t in answer.assignment.topic_partitions
                               for p in t.partitions)
    return HeartbeatResponse(answer.error_code, answer.error_message, answer.member_epoch,
                             answer.heartbeat_interval_ms, assignment)


def _error(failure: Failure, group_id: str) -> Errors.KafkaError:
    """The kafka-python error for a failure the member recorded (translated at the
    :class:`~zkcoord.client.Consumer` boundary)."""
    if failure.error_code < 0:
        return Errors.KafkaError(f"ConsumerGroupHeartbeat could not be sent: {failure.message}")
    error_class = Errors.for_code(failure.error_code)
    hint = _FATAL_HINTS.get(failure.error_code)
    text = f"group {group_id}: {failure.message}" + (f" ({hint})" if hint else "")
    if error_class is Errors.GroupAuthorizationFailedError:
        return error_class(group_id)
    return error_class(text)
