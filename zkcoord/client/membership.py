"""One consumer's membership of a KIP-848 consumer group (the client side
of the consumer group protocol), pure: no I/O, no threads, no clock (every
call that needs the time takes ``now_ms``), no randomness (the member id is
given).

It follows Kafka 4.4's Java consumer rule for rule:
``AbstractMembershipManager`` / ``ConsumerMembershipManager`` (the states,
the reconciliation, fencing, leaving), ``ConsumerHeartbeatRequestManager``
with its ``HeartbeatState`` (which fields each heartbeat carries) and
``AbstractHeartbeatRequestManager`` / ``HeartbeatRequestState`` (when the
next heartbeat goes, what each error means). Its values (states, requests,
answers, work) are :mod:`zkcoord.client.member_values`; the I/O around it is
:mod:`zkcoord.client.consumer_protocol`.

Rules:

1. A member joins with epoch 0 and every field (the rebalance time-out, its
   topic names and regular expression, its assignor, an empty list of owned
   partitions). Later heartbeats carry a field only when it changed since
   it was last sent; after any error the next heartbeat carries them all.
   The member id and epoch always go, the instance id whenever there is one.
2. The coordinator answers with the member's epoch, the heartbeat interval
   (the next heartbeat is due that long after the last one was sent) and,
   when it changed, the member's assignment: its target.
3. Reconciling toward a target happens on the application's thread inside
   ``poll()`` (:meth:`Membership.next_work` hands out a :class:`Reconcile`):
   commit (with auto commit), ``on_revoked`` for what is no longer assigned,
   then the new assignment and ``on_assigned`` for what was added. Only
   then does the member report (acknowledge) what it owns, in a heartbeat
   sent at once. So a revoked partition is released, and said to be, before
   the coordinator gives it to anyone else. Topic ids not yet in the
   metadata wait; the part that resolves is reconciled and acknowledged.
4. FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: the member has lost its
   partitions (``on_lost``, a :class:`Release`) and joins again with epoch
   0, keeping its member id.
5. Leaving (``close()``, ``unsubscribe()``): ``on_revoked`` (``on_lost`` if
   it holds no epoch), then a heartbeat with epoch -1, or -2 for a static
   member, whose partitions the coordinator keeps for its return.
6. No ``poll()`` for ``max_poll_interval_ms``: the member leaves the same
   way, but without callbacks (nobody is polling); its next ``poll()`` calls
   ``on_lost`` and joins again.
7. Three rules Kafka's consumer does not have, each closing a window in
   which a partition could have two owners (the coordinator frees a
   partition pending revocation as soon as a heartbeat does not report it,
   and a full heartbeat, after any error or a coordinator fail-over,
   reports what was last acknowledged): while a reconciliation runs,
   heartbeats report the partitions being taken as owned too; a
   reconciliation does not start while a heartbeat is in flight (its answer
   may move the target); and after a heartbeat that went unanswered (the
   coordinator may have acted on it) the target waits for the next answer.
   ``tests/unit/test_client_membership_properties.py`` has each race.
8. Errors the member cannot get past are fatal (FATAL): the partitions are
   lost and every later ``poll()`` raises the error; the member sends
   nothing more. NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE send it to
   look the coordinator up again; COORDINATOR_LOAD_IN_PROGRESS and lost
   connections are retried after a back-off that doubles from
   ``retry_backoff_ms`` up to ``retry_backoff_max_ms`` (Kafka adds 20 %
   jitter; this module has no randomness).

States (Kafka's ``MemberState``); a transition not in :data:`ALLOWED_FROM`
raises :class:`IllegalTransitionError`:

===============  ============================================================
state            what happens
===============  ============================================================
UNSUBSCRIBED     nothing is sent; ``poll()`` after ``subscribe()`` joins
JOINING          a heartbeat with epoch 0 and every field goes now
RECONCILING      the target differs from what is owned: the next ``poll()``
                 revokes, then assigns
ACKNOWLEDGING    reconciled: a heartbeat reporting what is owned goes now
STABLE           heartbeats every interval
FENCED           the next ``poll()`` calls ``on_lost``, then the member joins
PREPARE_LEAVING  ``on_revoked`` / ``on_lost`` run before leaving
LEAVING          the leave heartbeat goes now
FATAL            nothing is sent; ``poll()`` raises the error
STALE            left after ``max_poll_interval_ms``; the next ``poll()``
                 calls ``on_lost`` and joins
===============  ============================================================

Example::

    m = Membership(MemberConfig(group_id="g", member_id="m1"))
    m.subscribe(topics=("orders",))
    m.on_poll(now_ms=0)                      # JOINING
    send = m.poll_heartbeat(now_ms=0, coordinator_known=True)
    send.request.member_epoch == 0 and send.request.subscribed_topic_names == ("orders",)
    m.on_response(send.request, HeartbeatResponse(0, None, 1, 5000, frozenset({("ID", 0)})), now_ms=3)
    m.state is MemberState.RECONCILING      # poll() will assign ("orders", 0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zkcoord.client.member_values import (
    ALLOWED_FROM, ERROR_NAMES, HEARTBEAT_NOW, JOIN_EPOCH, LEAVE_EPOCH, NO_ASSIGNMENT, NOT_IN_GROUP,
    STATIC_LEAVE_EPOCH, ErrorCode, Failure, HeartbeatRequest, HeartbeatResponse, IdPartitions,
    IllegalTransitionError, LocalAssignment, LookUp, MemberConfig, MemberState, NamedPartitions, Reconcile,
    Release, Send, TopicId, Wait,
)

__all__ = [
    "MemberState", "ALLOWED_FROM", "MemberConfig", "LocalAssignment", "NO_ASSIGNMENT", "HeartbeatRequest",
    "HeartbeatResponse", "Send", "Wait", "LookUp", "Reconcile", "Release", "Failure", "Membership",
    "IllegalTransitionError", "ErrorCode", "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH",
]

E = ErrorCode
S = MemberState
_RETRY_NEW_COORDINATOR = {E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE}
_FENCED = {E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID}


@dataclass
class _SentFields:
    """Kafka's ``HeartbeatState.SentFields``: what the coordinator was last told."""

    rebalance_timeout_ms: int = -1
    topic_names: frozenset[str] | None = None
    regex: str | None = None
    server_assignor: str | None = None
    owned: tuple[int, IdPartitions] | None = None  # (local epoch, partitions) reported


@dataclass
class _Timing:
    """Kafka's ``HeartbeatRequestState``: the interval, the back-off after failures, one request in flight."""

    interval_ms: int = 0
    next_ms: int = 0
    failed_attempts: int = 0
    backoff_until_ms: int = 0
    in_flight: bool = False

    def reset(self) -> None:
        self.failed_attempts, self.backoff_until_ms, self.in_flight = 0, 0, False


@dataclass
class _Subscription:
    topic_names: frozenset[str] = frozenset()
    regex: str | None = None
    updated: bool = False


class Membership:
    """The member's state machine (see the module docstring). Not
    thread-safe: the caller serialises calls."""

    def __init__(self, config: MemberConfig) -> None:
        self.config = config
        self.state = S.UNSUBSCRIBED
        self.member_epoch = JOIN_EPOCH
        self.current = NO_ASSIGNMENT  # what the member owns, as last reconciled
        self.target = NO_ASSIGNMENT  # what the coordinator last assigned
        self.failures: list[Failure] = []  # for the application, oldest first
        self.fatal: Failure | None = None
        self.leave_in_progress = False
        self._subscription = _Subscription()
        self._sent = _SentFields()
        self._timing = _Timing()
        self._last_poll_ms: int | None = None
        self._poll_timer_expired = False
        self._reconciling: Reconcile | None = None
        self._rejoined_while_reconciling = False
        self._release: Release | None = None  # owed to the application
        self._release_taken = False
        self._stale_released = False
        self._stale_rejoin = False
        self._target_confirmed = True  # no heartbeat went unanswered since the target arrived
        self._awaiting_metadata: int | None = None  # the target's local epoch whose rest awaits topic names

    # -- queries ---------------------------------------------------------------------------
    @property
    def commit_epoch(self) -> int | None:
        """The epoch OffsetCommit and OffsetFetch carry: the member's while it
        holds one (above 0), else None (they go without, as -1)."""
        return self.member_epoch if self.member_epoch > 0 else None

    @property
    def in_group(self) -> bool:
        return self.state not in NOT_IN_GROUP

    @property
    def heartbeat_interval_ms(self) -> int:
        return self._timing.interval_ms

    def has_work(self) -> bool:
        """Is there a :class:`Reconcile` or :class:`Release` for the application's next ``poll()``?"""
        if self._release is not None and not self._release_taken:
            return True
        return self._may_reconcile()

    def _may_reconcile(self) -> bool:
        return (self.state is S.RECONCILING and self._reconciling is None and self.target != self.current
                and self._target_confirmed and not self._timing.in_flight
                and self._awaiting_metadata != self.target.local_epoch)

    def metadata_changed(self) -> None:
        """New topic metadata: topic ids of the target may resolve now."""
        self._awaiting_metadata = None

    def target_topic_ids(self) -> frozenset[TopicId]:
        return frozenset(t for t, _ in self.target.partitions)

    # -- the application's calls ------------------------------------------------------------
    def subscribe(self, topics: tuple[str, ...] | frozenset[str] = (), regex: str | None = None) -> None:
        """The subscription changed (Kafka's ``onSubscriptionUpdated``); the next
        :meth:`on_poll` joins if the member is not in the group."""
        self._subscription = _Subscription(frozenset(topics), regex or None, True)

    def on_poll(self, now_ms: int) -> None:
        """The application called ``poll()``: the poll timer restarts; a stale
        member rejoins once it has released its partitions; a new subscription
        joins (``onConsumerPoll``, ``resetPollTimer``)."""
        expired = self._last_poll_ms is not None and now_ms - self._last_poll_ms > self.config.max_poll_interval_ms
        self._last_poll_ms = now_ms
        if expired or self._poll_timer_expired:
            self._poll_timer_expired = False
            if self.state is S.STALE:
                self._stale_rejoin = True
                self._maybe_rejoin_stale()
        if self._subscription.updated:
            self._subscription.updated = False
            if self.state is S.UNSUBSCRIBED:
                self._join()

    def next_work(self, topic_name: Callable[[TopicId], str | None], owned: NamedPartitions) -> Reconcile | Release | None:
        """What the application thread must do now: a release owed (fencing,
        a fatal error, a stale member), else the next reconciliation (Kafka's
        ``maybeReconcile``). ``topic_name`` resolves topic ids from the
        metadata; ``owned`` is what the consumer holds now, by name."""
        if self._release is not None and not self._release_taken:
            self._release_taken = True
            return self._release
        if not self._may_reconcile():
            return None
        names = {topic_id: topic_name(topic_id) for topic_id in self.target_topic_ids()}
        resolved = frozenset((t, p) for t, p in self.target.partitions if names[t] is not None)
        if not self.current.is_none and resolved == self.current.partitions:
            if self.current.local_epoch != self.target.local_epoch:
                # What resolves is already owned: acknowledge it under the new local epoch.
                self.current = LocalAssignment(self.target.local_epoch, resolved)
                self._transition(S.ACKNOWLEDGING)
            else:
                self._awaiting_metadata = self.target.local_epoch  # no work until metadata_changed()
            return None
        assigned = frozenset((names[t], p) for t, p in resolved)
        work = Reconcile(self.target.local_epoch, resolved, assigned, frozenset(owned) - assigned,
                         assigned - frozenset(owned))
        self._reconciling, self._rejoined_while_reconciling = work, False
        return work

    def reconciled(self, work: Reconcile) -> bool:
        """The application revoked and assigned as ``work`` said: the member
        owns ``work.target`` and acknowledges it now. False if the work no
        longer matters (fenced or left meanwhile): nothing is recorded."""
        self._reconciling = None
        if self.state is not S.RECONCILING or self._rejoined_while_reconciling:
            return False
        self.current = LocalAssignment(work.local_epoch, work.target)
        self._transition(S.ACKNOWLEDGING)
        return True

    def reconcile_failed(self, work: Reconcile) -> None:
        """A callback failed before the assignment changed: the next ``poll()`` tries again."""
        if self._reconciling is work:
            self._reconciling = None

    def released(self, work: Release) -> None:
        """The application gave up its partitions as ``work`` said (callbacks
        done, the consumer's assignment emptied)."""
        if work is not self._release:
            return
        self._release, self._release_taken = None, False
        self._clear_assignment()
        if work.reason == "fenced" and self.state is S.FENCED:
            self._join()
        elif work.reason == "stale":
            self._stale_released = True
            self._maybe_rejoin_stale()
        elif work.reason == "leaving" and self.state is S.PREPARE_LEAVING:
            self._subscription = _Subscription()
            self._send_leave()

    def leave(self) -> Release | None:
        """``close()`` or ``unsubscribe()`` (Kafka's ``leaveGroup``): the
        release the application must run now (``on_revoked``, or ``on_lost``
        without an epoch) before the leave heartbeat, or None when there is
        nothing to send (not in the group, or leaving already)."""
        if self.state in NOT_IN_GROUP:
            owed = self._release is not None and not self._release_taken
            if self.state is S.FENCED:
                self._clear_assignment()
                self._transition(S.UNSUBSCRIBED)
            self._subscription = _Subscription()
            # Partitions still held (fenced, stale or failed before a poll() released them) are lost.
            self._release = Release(lost=True, reason="left") if owed else None
            self._release_taken = owed
            return self._release
        if self.state in (S.PREPARE_LEAVING, S.LEAVING):
            return None
        self._transition(S.PREPARE_LEAVING)
        self.leave_in_progress = True
        self._release = Release(lost=self.member_epoch <= 0, reason="leaving")
        self._release_taken = True  # handed to the caller, not to poll()
        return self._release

    # -- the heartbeat task's calls ------------------------------------------------------------
    def poll_heartbeat(self, now_ms: int, coordinator_known: bool) -> Send | Wait | LookUp:
        """The heartbeat task's next step (Kafka's ``AbstractHeartbeatRequestManager.poll``).
        A :class:`Send` is recorded as sent: fields, timer, in flight."""
        if self.state in NOT_IN_GROUP:
            return Wait(None)
        if not coordinator_known:
            if self.state is S.LEAVING:
                # onHeartbeatRequestSkipped: no coordinator to tell; the member is out.
                self._transition(S.UNSUBSCRIBED)
                self.leave_in_progress = False
                return Wait(None)
            return LookUp()
        if self._poll_expired(now_ms) and self.state not in (S.PREPARE_LEAVING, S.LEAVING):
            return Send(self._leave_for_poll_timeout(now_ms))
        timing = self._timing
        if timing.in_flight:
            return Wait(None)
        if now_ms < timing.backoff_until_ms:
            return Wait(timing.backoff_until_ms - now_ms)
        if self.state not in HEARTBEAT_NOW and now_ms < timing.next_ms:
            return Wait(self._until_next(now_ms))
        return Send(self._sent_request(now_ms, ignore_response=False))

    def on_response(self, request: HeartbeatRequest, response: HeartbeatResponse, now_ms: int) -> bool:
        """The coordinator's answer to ``request``. True: look the coordinator up again."""
        if request.ignore_response:
            return False
        timing = self._timing
        timing.in_flight = False
        code = response.error_code
        if code == E.NONE:
            if response.heartbeat_interval_ms != timing.interval_ms:
                timing.interval_ms = response.heartbeat_interval_ms
                timing.next_ms = now_ms + timing.interval_ms
            timing.failed_attempts, timing.backoff_until_ms = 0, 0
            self._target_confirmed = True
            self._on_success(response)
            return False
        self._sent = _SentFields()
        self._failed_attempt(now_ms)
        unknown_coordinator = self._on_error(code, response.error_message)
        self._maybe_complete_leave()
        return unknown_coordinator

    def on_failure(self, request: HeartbeatRequest, now_ms: int, retriable: bool, message: str) -> None:
        """The heartbeat was not answered (a lost connection, a time-out: ``retriable``;
        anything else is fatal)."""
        if request.ignore_response:
            return
        self._timing.in_flight = False
        self._sent = _SentFields()
        self._failed_attempt(now_ms)
        # The coordinator may have acted on it (and moved this member on): the target is not
        # reconciled until an answer (to a full request: it carries the assignment) confirms it.
        self._target_confirmed = False
        if not retriable:
            self._fatal(Failure(-1, message, True))
        self._maybe_complete_leave()

    # -- internals: heartbeats -----------------------------------------------------------------
    def _poll_expired(self, now_ms: int) -> bool:
        return self._last_poll_ms is not None and now_ms - self._last_poll_ms > self.config.max_poll_interval_ms

    def _until_next(self, now_ms: int) -> int:
        wait = self._timing.next_ms - now_ms
        if self._last_poll_ms is not None:  # wake in time to leave when the poll timer runs out
            wait = min(wait, self._last_poll_ms + self.config.max_poll_interval_ms + 1 - now_ms)
        return max(0, wait)

    def _sent_request(self, now_ms: int, ignore_response: bool) -> HeartbeatRequest:
        """Kafka's ``HeartbeatState.buildRequestData`` and ``onHeartbeatRequestGenerated``."""
        request = self._build_request(ignore_response)
        timing = self._timing
        timing.in_flight = not ignore_response
        timing.next_ms = now_ms + timing.interval_ms
        if self.state is S.ACKNOWLEDGING:
            self._transition(S.STABLE if self.target == self.current else S.RECONCILING)
        elif self.state is S.LEAVING:
            if self._poll_timer_expired:
                self._become_stale()
            else:
                self._transition(S.UNSUBSCRIBED)
        return request

    def _build_request(self, ignore_response: bool) -> HeartbeatRequest:
        c, sent, sub = self.config, self._sent, self._subscription
        send_all = self.state is S.JOINING
        fields: dict = {}
        if send_all or sent.rebalance_timeout_ms != c.rebalance_timeout_ms:
            fields["rebalance_timeout_ms"] = sent.rebalance_timeout_ms = c.rebalance_timeout_ms
        if send_all or sub.topic_names != sent.topic_names:
            fields["subscribed_topic_names"] = tuple(sorted(sub.topic_names))
            sent.topic_names = sub.topic_names
        if (send_all and sub.regex is not None) or sub.regex != sent.regex:
            fields["subscribed_topic_regex"] = sub.regex if sub.regex is not None else ""
            sent.regex = sub.regex
        if c.server_assignor is not None and (send_all or sent.server_assignor != c.server_assignor):
            fields["server_assignor"] = sent.server_assignor = c.server_assignor
        owned = self._reported_owned()
        if send_all or sent.owned != owned:
            fields["owned"] = _by_topic(owned[1])
            sent.owned = owned
        if send_all:
            fields["rack_id"] = c.rack_id
        return HeartbeatRequest(c.group_id, c.member_id, self.member_epoch, c.instance_id,
                                ignore_response=ignore_response, **fields)

    def _reported_owned(self) -> tuple[int, IdPartitions]:
        """What a heartbeat says the member owns: what it acknowledged, and
        while a reconciliation runs also what it is taking (the coordinator
        must not hand those to another member meanwhile)."""
        partitions = self.current.partitions
        if self._reconciling is not None:
            partitions = partitions | self._reconciling.target
        return self.current.local_epoch, partitions

    def _failed_attempt(self, now_ms: int) -> None:
        timing = self._timing
        timing.failed_attempts += 1
        timing.next_ms = now_ms  # the heartbeat timer is reset to 0: due once the back-off ends
        backoff = min(self.config.retry_backoff_ms * 2 ** (timing.failed_attempts - 1),
                      max(self.config.retry_backoff_max_ms, self.config.retry_backoff_ms))
        timing.backoff_until_ms = now_ms + backoff

    def _on_success(self, response: HeartbeatResponse) -> None:
        """Kafka's ``onHeartbeatSuccess``."""
        if self.state is S.LEAVING:
            return
        if self.state is S.UNSUBSCRIBED and response.member_epoch < 0 and self._maybe_complete_leave():
            return
        if self.state in NOT_IN_GROUP:
            return
        if response.member_epoch < 0:
            self._maybe_complete_leave()
            return
        self.member_epoch = response.member_epoch
        if response.assignment is None:
            return
        if self.state not in ALLOWED_FROM[S.RECONCILING]:
            return  # e.g. preparing to leave: a new assignment is ignored
        updated = self.target.updated_with(frozenset(response.assignment))
        if updated is not None:
            self.target = updated
        if self.target != self.current:
            self._transition(S.RECONCILING)
        elif self.state in (S.RECONCILING, S.JOINING):
            self._transition(S.STABLE)

    def _on_error(self, code: int, message: str | None) -> bool:
        """Kafka's ``onErrorResponse`` (and ``handleSpecificExceptionInResponse``)."""
        text = message or ERROR_NAMES.get(code, f"error {code}")
        if code in _RETRY_NEW_COORDINATOR:
            self._timing.reset()
            return True
        if code == E.COORDINATOR_LOAD_IN_PROGRESS:
            return False
        if code in _FENCED:
            self._fence()
            self._timing.reset()
            return False
        if code == E.TOPIC_AUTHORIZATION_FAILED:
            self.failures.append(Failure(code, text, False))
            return False
        if code == E.GROUP_ID_NOT_FOUND and self.state is S.UNSUBSCRIBED:
            return False
        self._fatal(Failure(code, text, True))
        return False

    # -- internals: transitions -----------------------------------------------------------------
    def _transition(self, to: MemberState) -> None:
        if to is not self.state and self.state not in ALLOWED_FROM[to]:
            raise IllegalTransitionError(f"member {self.config.member_id}: {self.state.value} -> {to.value}")
        self.state = to

    def _join(self) -> None:
        """Kafka's ``transitionToJoining`` (never after a fatal error)."""
        if self.fatal is not None:
            return
        if self._reconciling is not None:
            self._rejoined_while_reconciling = True
        self.member_epoch = JOIN_EPOCH
        self._transition(S.JOINING)
        self.target = NO_ASSIGNMENT

    def _clear_assignment(self) -> None:
        self.current = NO_ASSIGNMENT
        self.target = NO_ASSIGNMENT

    def _owe(self, release: Release) -> None:
        self._release, self._release_taken = release, False

    def _fence(self) -> None:
        """Kafka's ``transitionToFenced``."""
        if self.state is S.PREPARE_LEAVING:
            self._send_leave()
        if self.state is S.LEAVING:
            self._transition(S.UNSUBSCRIBED)
            self._maybe_complete_leave()
            return
        if self.state in NOT_IN_GROUP:
            return  # out already (an answer to a heartbeat sent before it left)
        self._transition(S.FENCED)
        self.member_epoch = JOIN_EPOCH
        self._owe(Release(lost=True, reason="fenced"))

    def _fatal(self, failure: Failure) -> None:
        """Kafka's ``transitionToFatal``."""
        previous = self.state
        self.fatal = failure
        self.failures.append(failure)
        if previous in (S.FATAL, S.FENCED, S.STALE):
            return  # out of the group already; it will not join again (_join)
        self._transition(S.FATAL)
        if previous is S.UNSUBSCRIBED or previous in (S.LEAVING, S.PREPARE_LEAVING):
            self._maybe_complete_leave()
            return
        self._owe(Release(lost=True, reason="fatal"))

    def _send_leave(self) -> None:
        """Kafka's ``transitionToSendingLeaveGroup``: epoch -1 (-2 static), nothing owned."""
        self.member_epoch = self.config.leave_epoch
        self.current = NO_ASSIGNMENT
        self._transition(S.LEAVING)

    def _leave_for_poll_timeout(self, now_ms: int) -> HeartbeatRequest:
        self._poll_timer_expired = True
        self._transition(S.PREPARE_LEAVING)
        self._send_leave()
        request = self._sent_request(now_ms, ignore_response=True)
        self._timing.reset()
        self._sent = _SentFields()
        return request

    def _become_stale(self) -> None:
        self._transition(S.STALE)
        self._stale_released, self._stale_rejoin = False, False
        self._owe(Release(lost=True, reason="stale"))

    def _maybe_rejoin_stale(self) -> None:
        if self.state is S.STALE and self._stale_released and self._stale_rejoin:
            self._join()

    def _maybe_complete_leave(self) -> bool:
        if self.leave_in_progress and self.state in (S.UNSUBSCRIBED, S.FATAL):
            self.leave_in_progress = False
            return True
        return False


def _by_topic(partitions: IdPartitions) -> tuple[tuple[TopicId, tuple[int, ...]], ...]:
    grouped: dict[TopicId, list[int]] = {}
    for topic_id, partition in partitions:
        grouped.setdefault(topic_id, []).append(partition)
    return tuple((t, tuple(sorted(ps))) for t, ps in sorted(grouped.items()))

