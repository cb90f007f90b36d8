"""The consumer-protocol member's state machine (zkcoord.client.membership),
pure: exact requests, states, work for the application and timing, step by
step as Kafka 4.4's Java consumer takes them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_core_purity import _imports, _violations
from zkcoord.client import member_values
from zkcoord.client import membership as mm
from zkcoord.client.membership import (
    ErrorCode as E, HeartbeatResponse, IllegalTransitionError, LookUp, MemberConfig, MemberState as S, Membership,
    Reconcile, Release, Send, Wait,
)

T, U = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"  # topic ids of "t" and "u"
NAMES = {T: "t", U: "u"}
CONFIG = MemberConfig(group_id="g", member_id="m1", rebalance_timeout_ms=30_000, max_poll_interval_ms=30_000)


def joined(config: MemberConfig = CONFIG, topics=("t",), regex=None) -> Membership:
    m = Membership(config)
    m.subscribe(topics=topics, regex=regex)
    m.on_poll(0)
    return m


def send(m: Membership, now: int = 0) -> mm.HeartbeatRequest:
    step = m.poll_heartbeat(now, coordinator_known=True)
    assert isinstance(step, Send), step
    return step.request


def ok(epoch: int, assignment=None, interval: int = 5_000) -> HeartbeatResponse:
    return HeartbeatResponse(E.NONE, None, epoch, interval, None if assignment is None else frozenset(assignment))


def failed(code: int) -> HeartbeatResponse:
    return HeartbeatResponse(code, "why", -1, 0)


def reconcile(m: Membership, owned=frozenset(), names=NAMES) -> Reconcile:
    work = m.next_work(names.get, frozenset(owned))
    assert isinstance(work, Reconcile), work
    return work


def stable(assignment=((T, 0), (T, 1)), epoch: int = 1, now: int = 0) -> Membership:
    """A member that joined, reconciled ``assignment`` and acknowledged it."""
    m = joined()
    m.on_response(send(m, now), ok(epoch, assignment), now)
    assert m.reconciled(reconcile(m))
    m.on_response(send(m, now), ok(epoch), now)
    assert m.state is S.STABLE
    return m


# -- joining and the fields each heartbeat carries -------------------------------------------
def test_a_join_sends_every_field_then_only_what_changed():
    m = joined(MemberConfig(group_id="g", member_id="m1", instance_id="i-1", rack_id="r1", rebalance_timeout_ms=45_000,
                            server_assignor="range"), topics=("u", "t"))
    assert m.state is S.JOINING
    first = send(m)
    assert first == mm.HeartbeatRequest("g", "m1", 0, "i-1", rack_id="r1", rebalance_timeout_ms=45_000,
                                        subscribed_topic_names=("t", "u"), subscribed_topic_regex=None,
                                        server_assignor="range", owned=())
    m.on_response(first, ok(3, [(T, 0)]), 10)
    assert (m.state, m.member_epoch) == (S.RECONCILING, 3)
    m.reconciled(reconcile(m))
    ack = send(m, 11)  # acknowledging goes at once, with only what changed: what it owns
    assert ack == mm.HeartbeatRequest("g", "m1", 3, "i-1", owned=((T, (0,)),))
    assert m.state is S.STABLE
    m.on_response(ack, ok(3), 12)
    steady = send(m, 11 + 5_000)
    assert steady == mm.HeartbeatRequest("g", "m1", 3, "i-1")  # the instance id always goes


def test_a_regex_subscription_sends_no_names_and_the_expression():
    m = joined(topics=(), regex="orders-.*")
    request = send(m)
    assert (request.subscribed_topic_names, request.subscribed_topic_regex) == ((), "orders-.*")
    m.on_response(request, ok(1, []), 1)
    m.reconciled(reconcile(m))
    ack = send(m, 2)
    assert (ack.subscribed_topic_names, ack.subscribed_topic_regex, ack.owned) == (None, None, ())
    m.on_response(ack, ok(1), 2)
    m.subscribe(topics=(), regex="audit-.*")
    m.on_poll(3)
    changed = send(m, 5_002)
    assert (changed.subscribed_topic_names, changed.subscribed_topic_regex) == (None, "audit-.*")


def test_a_new_subscription_while_stable_goes_in_the_next_heartbeat():
    m = stable()
    m.subscribe(topics=("t", "u"))
    m.on_poll(100)
    request = send(m, 5_000)
    assert (request.subscribed_topic_names, request.rebalance_timeout_ms, request.owned) == (("t", "u"), -1, None)
    assert send_nothing(m, 5_001)


def send_nothing(m: Membership, now: int) -> bool:
    return not isinstance(m.poll_heartbeat(now, coordinator_known=True), Send)


# -- timing ------------------------------------------------------------------------------------
def test_the_interval_comes_from_the_coordinator():
    m = joined()
    join = send(m, 0)
    assert m.poll_heartbeat(1, True) == Wait(None)  # one heartbeat in flight
    m.on_response(join, ok(1, [], interval=2_000), 5)
    m.reconciled(reconcile(m))
    ack = send(m, 6)
    m.on_response(ack, ok(1, interval=2_000), 7)
    assert m.poll_heartbeat(7, True) == Wait(1_999)
    m.on_response(send(m, 2_006), ok(1, interval=4_000), 2_010)  # a new interval counts from its answer
    assert m.poll_heartbeat(2_010, True) == Wait(4_000)
    assert m.heartbeat_interval_ms == 4_000


def test_retriable_errors_back_off_doubling_and_the_next_request_is_full():
    m = stable()
    backoffs = []
    now = 5_000
    for _ in range(6):
        request = send(m, now)
        m.on_response(request, failed(E.COORDINATOR_LOAD_IN_PROGRESS), now)
        wait = m.poll_heartbeat(now, True)
        backoffs.append(wait.ms)
        now += wait.ms
    assert backoffs == [100, 200, 400, 800, 1_000, 1_000]
    full = send(m, now)
    assert (full.rebalance_timeout_ms, full.subscribed_topic_names, full.owned) == (30_000, ("t",), ((T, (0, 1)),))
    m.on_response(full, ok(1), now)
    assert m.poll_heartbeat(now, True) == Wait(5_000)  # success ends the back-off


@pytest.mark.parametrize("code", [E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE])
def test_a_moved_coordinator_is_looked_up_and_told_everything(code):
    m = stable()
    request = send(m, 5_000)
    assert m.on_response(request, failed(code), 5_000) is True
    assert m.poll_heartbeat(5_000, coordinator_known=False) == LookUp()
    again = send(m, 5_001)  # no back-off once the new coordinator is known
    assert again.owned == ((T, (0, 1)),) and again.subscribed_topic_names == ("t",)


def test_a_lost_connection_is_retried_after_the_back_off():
    m = stable()
    request = send(m, 5_000)
    m.on_failure(request, 5_010, retriable=True, message="connection lost")
    assert m.poll_heartbeat(5_010, True) == Wait(100)
    assert send(m, 5_110).owned == ((T, (0, 1)),)
    assert m.state is S.STABLE and m.fatal is None


# -- reconciliation ------------------------------------------------------------------------------
def test_revoke_first_then_assign_then_acknowledge():
    m = stable(assignment=((T, 0), (T, 1)), epoch=1)
    m.on_response(send(m, 5_000), ok(2, [(T, 1), (U, 0)]), 5_000)
    assert m.state is S.RECONCILING and m.has_work()
    work = reconcile(m, owned={("t", 0), ("t", 1)})
    assert (work.revoked, work.added, work.assigned) == ({("t", 0)}, {("u", 0)}, {("t", 1), ("u", 0)})
    assert m.next_work(NAMES.get, frozenset()) is None  # one at a time
    assert send_nothing(m, 5_001)  # nothing acknowledged before the work is done
    assert m.reconciled(work)
    assert m.state is S.ACKNOWLEDGING and m.current.partitions == {(T, 1), (U, 0)}
    ack = send(m, 5_002)
    assert ack.owned == ((T, (1,)), (U, (0,))) and ack.member_epoch == 2
    assert m.state is S.STABLE


def test_partitions_of_unknown_topics_wait_for_the_metadata():
    m = joined()
    m.on_response(send(m), ok(1, [(T, 0), (U, 0)]), 1)
    work = reconcile(m, names={T: "t"})
    assert work.assigned == {("t", 0)} and work.target == {(T, 0)}
    m.reconciled(work)
    partial = send(m, 2)
    assert partial.owned == ((T, (0,)),)
    assert m.state is S.RECONCILING  # the rest of the target is still to come
    m.on_response(partial, ok(1), 2)
    assert m.next_work({T: "t"}.get, frozenset({("t", 0)})) is None  # acknowledged already, nothing new
    assert not m.has_work()  # poll() does not spin on it
    m.metadata_changed()
    assert m.has_work()
    later = reconcile(m, owned={("t", 0)})
    assert (later.added, later.revoked) == ({("u", 0)}, frozenset())
    m.reconciled(later)
    assert send(m, 3).owned == ((T, (0,)), (U, (0,)))
    assert m.state is S.STABLE


def test_nothing_resolvable_at_first_acknowledges_an_empty_assignment():
    m = joined()
    m.on_response(send(m), ok(1, [(U, 0)]), 1)
    work = reconcile(m, names={})
    assert work.assigned == frozenset() and work.added == frozenset()
    m.reconciled(work)
    assert send(m, 2).owned == ()


def test_an_assignment_during_a_reconciliation_is_reconciled_next():
    m = stable(assignment=((T, 0),))
    m.on_response(send(m, 5_000), ok(2, [(T, 0), (T, 1)]), 5_000)
    work = reconcile(m, owned={("t", 0)})
    m.on_response(send(m, 10_000), ok(3, [(T, 0), (T, 1), (T, 2)]), 10_000)  # arrives meanwhile
    assert m.reconciled(work)
    ack = send(m, 10_001)
    assert ack.owned == ((T, (0, 1)),)
    assert m.state is S.RECONCILING
    assert m.next_work(NAMES.get, frozenset({("t", 0), ("t", 1)})) is None  # not with a heartbeat in flight
    m.on_response(ack, ok(3), 10_002)
    assert reconcile(m, owned={("t", 0), ("t", 1)}).added == {("t", 2)}


def test_while_reconciling_heartbeats_report_what_is_being_taken_too():
    m = stable(assignment=((T, 0), (T, 1)))
    m.on_response(send(m, 5_000), ok(2, [(T, 1), (T, 2)]), 5_000)
    work = reconcile(m, owned={("t", 0), ("t", 1)})
    during = send(m, 10_000)  # the callbacks are still running
    assert during.owned == ((T, (0, 1, 2)),)  # t-0 is not released yet, t-2 is being taken
    m.on_response(during, ok(2), 10_001)
    m.reconciled(work)
    assert send(m, 10_002).owned == ((T, (1, 2)),)


def test_after_an_unanswered_heartbeat_the_target_waits_for_an_answer():
    """The lost heartbeat may have moved the member on (its answer, with a new
    target, is lost): reconciling the old target could take partitions the
    coordinator has just handed to another member."""
    m = joined()
    m.on_response(send(m), ok(2, [(T, 0), (T, 1), (T, 2)]), 1)  # not reconciled yet (no poll)
    lost = send(m, 5_001)
    assert lost.owned is None  # nothing changed since the join: owned () went already
    m.on_failure(lost, 5_002, retriable=True, message="timed out")
    assert not m.has_work() and m.next_work(NAMES.get, frozenset()) is None
    full = send(m, 5_102)
    assert full.owned == () and full.subscribed_topic_names == ("t",)
    m.on_response(full, ok(3, [(T, 0)]), 5_103)
    assert reconcile(m).assigned == {("t", 0)}


def test_a_failed_callback_leaves_the_reconciliation_for_the_next_poll():
    m = stable()
    m.on_response(send(m, 5_000), ok(2, [(T, 1)]), 5_000)
    work = reconcile(m, owned={("t", 0), ("t", 1)})
    m.reconcile_failed(work)
    assert m.state is S.RECONCILING and m.current.partitions == {(T, 0), (T, 1)}
    assert reconcile(m, owned={("t", 0), ("t", 1)}) == work


# -- fencing -------------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [E.FENCED_MEMBER_EPOCH, E.UNKNOWN_MEMBER_ID])
def test_a_fenced_member_loses_its_partitions_and_joins_again_with_epoch_0(code):
    m = stable()
    m.on_response(send(m, 5_000), failed(code), 5_000)
    assert (m.state, m.member_epoch) == (S.FENCED, 0)
    assert m.poll_heartbeat(5_001, True) == Wait(None)  # no heartbeat until on_lost ran
    work = m.next_work(NAMES.get, frozenset({("t", 0), ("t", 1)}))
    assert work == Release(lost=True, reason="fenced")
    m.released(work)
    assert m.state is S.JOINING and m.current == mm.NO_ASSIGNMENT
    rejoin = send(m, 5_002)  # no back-off after fencing
    assert (rejoin.member_id, rejoin.member_epoch, rejoin.owned, rejoin.subscribed_topic_names) == ("m1", 0, (), ("t",))


def test_fenced_during_a_reconciliation_the_work_is_dropped():
    m = stable()
    m.on_response(send(m, 5_000), ok(2, [(T, 1)]), 5_000)
    work = reconcile(m, owned={("t", 0), ("t", 1)})
    m.on_response(send(m, 10_000), failed(E.FENCED_MEMBER_EPOCH), 10_000)
    assert m.reconciled(work) is False
    assert m.next_work(NAMES.get, frozenset({("t", 1)})) == Release(True, "fenced")


# -- fatal errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("code", [E.GROUP_AUTHORIZATION_FAILED, E.INVALID_REQUEST, E.GROUP_MAX_SIZE_REACHED,
                                  E.UNSUPPORTED_ASSIGNOR, E.UNSUPPORTED_VERSION, E.UNRELEASED_INSTANCE_ID,
                                  E.FENCED_INSTANCE_ID, E.INVALID_REGULAR_EXPRESSION, E.GROUP_ID_NOT_FOUND, 999])
def test_fatal_errors_end_the_membership(code):
    m = stable()
    m.on_response(send(m, 5_000), failed(code), 5_000)
    assert m.state is S.FATAL and m.fatal == mm.Failure(code, "why", True) and m.failures == [m.fatal]
    assert m.next_work(NAMES.get, frozenset({("t", 0)})) == Release(lost=True, reason="fatal")
    m.released(Release(True, "fatal"))  # not the owed one: ignored
    m.subscribe(topics=("t",))
    m.on_poll(5_001)
    assert m.state is S.FATAL and m.poll_heartbeat(5_002, True) == Wait(None)


def test_a_topic_authorization_failure_is_reported_and_the_member_goes_on():
    m = stable()
    m.on_response(send(m, 5_000), failed(E.TOPIC_AUTHORIZATION_FAILED), 5_000)
    assert m.state is S.STABLE and m.failures == [mm.Failure(E.TOPIC_AUTHORIZATION_FAILED, "why", False)]
    assert isinstance(m.poll_heartbeat(5_100, True), Send)


def test_an_unanswerable_request_is_fatal():
    m = stable()
    m.on_failure(send(m, 5_000), 5_000, retriable=False, message="UnsupportedVersion")
    assert m.state is S.FATAL and m.fatal.message == "UnsupportedVersion"


# -- leaving --------------------------------------------------------------------------------------
def test_close_revokes_then_leaves_with_epoch_minus_1():
    m = stable(epoch=4)
    work = m.leave()
    assert work == Release(lost=False, reason="leaving") and m.state is S.PREPARE_LEAVING and m.leave_in_progress
    assert m.next_work(NAMES.get, frozenset()) is None  # the caller runs it, not poll()
    m.released(work)
    assert (m.state, m.member_epoch) == (S.LEAVING, -1)
    leave = send(m, 100)  # at once, not at the interval
    assert (leave.member_epoch, leave.owned, leave.ignore_response) == (-1, (), False)
    assert m.state is S.UNSUBSCRIBED and m.leave_in_progress
    m.on_response(leave, ok(-1), 101)
    assert not m.leave_in_progress and m.poll_heartbeat(102, True) == Wait(None)


def test_a_static_member_leaves_with_epoch_minus_2():
    m = Membership(MemberConfig(group_id="g", member_id="m1", instance_id="i-1"))
    m.subscribe(topics=("t",))
    m.on_poll(0)
    m.on_response(send(m), ok(1, [(T, 0)]), 1)
    m.reconciled(reconcile(m))
    m.on_response(send(m, 2), ok(1), 2)
    m.released(m.leave())
    leave = send(m, 3)
    assert (leave.member_epoch, leave.instance_id) == (-2, "i-1")
    m.on_response(leave, ok(-2), 4)
    assert not m.leave_in_progress


def test_leaving_before_an_epoch_loses_rather_than_revokes():
    m = joined()
    assert m.leave() == Release(lost=True, reason="leaving")


def test_leaving_without_a_coordinator_is_done_at_once():
    m = stable()
    m.released(m.leave())
    assert m.poll_heartbeat(10, coordinator_known=False) == Wait(None)
    assert m.state is S.UNSUBSCRIBED and not m.leave_in_progress


def test_leaving_when_out_of_the_group_sends_nothing():
    m = stable()
    m.on_response(send(m, 5_000), failed(E.FENCED_MEMBER_EPOCH), 5_000)
    assert m.leave() == Release(lost=True, reason="left")  # the on_lost poll() did not run yet
    assert m.state is S.UNSUBSCRIBED and not m.leave_in_progress
    assert m.poll_heartbeat(5_001, True) == Wait(None)
    assert Membership(CONFIG).leave() is None


def test_an_assignment_while_preparing_to_leave_is_ignored():
    m = stable()
    request = send(m, 5_000)
    m.leave()
    m.on_response(request, ok(2, [(T, 0), (T, 1), (T, 2)]), 5_001)
    assert m.state is S.PREPARE_LEAVING and m.member_epoch == 2 and m.target.partitions == {(T, 0), (T, 1)}


# -- the poll timer ---------------------------------------------------------------------------------
def test_no_poll_for_max_poll_interval_leaves_then_the_next_poll_rejoins():
    m = stable()  # polled at 0, max_poll_interval_ms 30 s
    m.on_response(send(m, 29_000), ok(1), 29_000)
    assert m.poll_heartbeat(29_000, True) == Wait(1_001)  # woken when the poll timer runs out
    leave = send(m, 30_001)
    assert (leave.member_epoch, leave.ignore_response) == (-1, True)
    assert m.state is S.STALE and m.poll_heartbeat(30_002, True) == Wait(None)
    m.on_response(leave, ok(-1), 30_003)  # only logged
    m.on_poll(40_000)
    work = m.next_work(NAMES.get, frozenset({("t", 0), ("t", 1)}))
    assert work == Release(lost=True, reason="stale")
    m.released(work)
    assert (m.state, m.member_epoch) == (S.JOINING, 0)
    rejoin = send(m, 40_001)
    assert (rejoin.member_epoch, rejoin.owned, rejoin.rebalance_timeout_ms) == (0, (), 30_000)


def test_a_stale_static_member_leaves_with_epoch_minus_2():
    m = Membership(MemberConfig(group_id="g", member_id="m1", instance_id="i-1", max_poll_interval_ms=1_000))
    m.subscribe(topics=("t",))
    m.on_poll(0)
    m.on_response(send(m), ok(1, []), 1)
    m.reconciled(reconcile(m))
    m.on_response(send(m, 2), ok(1), 2)
    assert send(m, 1_001).member_epoch == -2


# -- the table ---------------------------------------------------------------------------------------
def test_transitions_outside_kafkas_table_are_refused():
    m = Membership(CONFIG)
    with pytest.raises(IllegalTransitionError, match="UNSUBSCRIBED -> STABLE"):
        m._transition(S.STABLE)
    assert set(mm.ALLOWED_FROM) == set(S) - {S.UNSUBSCRIBED} | {S.UNSUBSCRIBED}


@pytest.mark.parametrize("module", [mm, member_values])
def test_the_state_machine_is_pure(module):
    """The rules of zkcoord.core (tests/unit/test_core_purity.py), its own values apart."""
    found = {name for name in _imports(module.__name__, Path(module.__file__))
             if _violations(name) and not name.startswith(member_values.__name__)}
    assert found == set(), f"{module.__name__} imports {sorted(found)}"
