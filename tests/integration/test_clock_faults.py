"""Clock faults on a daemon, each run checked by the fault checker.

Two ``zkcoord run`` daemons, a producer and three consumer processes of one
group (:class:`tests.support.group_run.GroupRun`). What can honestly be
done to a daemon's clocks here (:mod:`tests.support.clock_shift`):

* its **wall clock jumps** while it runs, an hour ahead and then two hours
  back (a launcher moves ``time.time()`` of that one process): the group's
  timers run on the monotonic clock, so an hour ahead no member's session
  ends and nothing rebalances, and an hour behind a consumer killed is
  still removed at its session time-out; the daemon keeps its ZooKeeper
  session and its group, commits go on;
* its **monotonic clock is 30 days ahead** of the other daemon's (a time
  namespace; as for daemons on machines booted a month apart) and the group
  moves between them both ways (kill -9 of the owner): nothing measured on
  one daemon's monotonic clock reaches the other, so a group taken over
  keeps its generation (no member expired at once by a deadline from the
  other clock) and a consumer killed afterwards is removed at its session
  time-out (not a month later).

* its **wall clock jumps two hours back just after a consumer was killed**:
  the dead member's session time-out was set before the jump; on the
  monotonic clock it still ends 10 s later, its partitions go to the others
  and every record is consumed. With ``ZKCOORD_TEST_BROKEN_FENCES=1`` the same
  run against the daemon with its group timers on the wall clock
  (``group-wall-clock`` of :mod:`tests.support.broken_fence`): the dead
  member is then kept for two hours, its partitions are never reassigned,
  and the checker reports the records nobody consumed.

The jumped daemon's own log has shifted times, so the checker's generation
history comes from the other daemon's log and the monitor's observations.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from tests.faults.harness import LIVENESS_S
from tests.support import broken_fence
from tests.support.clock_shift import WallClock, monotonic_offset, time_namespaces_available
from tests.support.daemons import wait_for
from tests.support.group_run import GroupRun, WrappedFleet, assert_clean
from tests.support.placement import placed_name

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ZK_SESSION_TIMEOUT_MS = 4000
MEMBER_SESSION_TIMEOUT_MS = 10_000
MONTH_S = 30 * 86400
broken_fences = pytest.mark.skipif(os.environ.get("ZKCOORD_TEST_BROKEN_FENCES") != "1",
                                   reason="the broken-fence demonstrations run with ZKCOORD_TEST_BROKEN_FENCES=1")


@pytest.fixture
def make_fleet(zk_hosts, zk, tmp_path, services):
    fleets = []

    def make(wrappers=None):
        fleet = WrappedFleet(zk_hosts, zk, tmp_path / "daemons", options={
            "zk_session_timeout_ms": ZK_SESSION_TIMEOUT_MS, "group_initial_rebalance_delay_ms": 0,
            "bootstrap_servers": services.bootstrap_servers}, wrappers=wrappers or {})
        fleets.append(fleet)
        return fleet

    yield make
    for fleet in fleets:
        for daemon in fleet.daemons.values():
            print(f"---- daemon {daemon.node_id} (pid {daemon.pid}), {daemon.log_path}:\n{daemon.log(60)}")
        fleet.close()


def _run(fleet, services, unique_name, tmp_path, group, *daemons) -> GroupRun:
    return GroupRun(fleet, services.bootstrap_servers, group, unique_name("t"), tmp_path / "events",
                    coordinators=",".join(f"{d.host}:{d.port}" for d in daemons),
                    session_timeout_ms=MEMBER_SESSION_TIMEOUT_MS)


def _stable_with(run: GroupRun, count: int):
    return wait_for(lambda: (s := run.stored()) and s[1] == "Stable" and len(s[2]) == count and s, LIVENESS_S,
                    f"the group Stable with {count} members", 0.2)


def _started_stable_at_the_jumping_daemon(run):
    """Start the run; once node 1 (whose clock jumps) owns the group and it is
    Stable with its three members, its stored state."""
    run.start()
    wait_for(lambda: run.owner() == 1, LIVENESS_S, "the daemon whose clock jumps owns the group")
    return _stable_with(run, 3)


def test_wall_clock_jumps_of_the_owner_change_nothing(services, make_fleet, unique_name, tmp_path):
    clock = WallClock(tmp_path / "wall-clock-offset")
    group = placed_name(unique_name, "g", ([1, 2], 1))
    fleet = make_fleet(wrappers={1: clock.wrap})
    owner, other = fleet.start_many(1, 2)
    run = _run(fleet, services, unique_name, tmp_path, group, owner, other)
    try:
        before = _started_stable_at_the_jumping_daemon(run)
        session = fleet.zk.get("/zkcoord/nodes/1")[1].ephemeralOwner
        jumped = time.time()
        clock.jump(3600)  # a deadline taken from the wall clock would expire every member now
        run.wait_progress(20, "with the owner's clock an hour ahead")
        assert run.stored()[0] == before[0], f"a rebalance: {before} -> {run.stored()}"
        back = time.time()
        clock.jump(-7200)  # a deadline taken from the wall clock would now be an hour away
        run.wait_progress(10, "with the owner's clock an hour behind")
        run.pool.kill(2)
        wait_for(lambda: (s := run.stored()) and s[0] > before[0] and len(s[2]) == 2
                 and not any(m.startswith("c2-") for m in s[2]), LIVENESS_S,
                 "the killed consumer c2 removed at its session time-out", 0.2)
        run.pool.start(2)
        _stable_with(run, 3)
        clock.reset()
        run.wait_progress(5, "with the owner's clock right again")
        ended = time.time()
        assert run.owner() == 1 and fleet.zk.get("/zkcoord/nodes/1")[1].ephemeralOwner == session
        verdict = run.finish(history_logs=[other.log_path])
    finally:
        run.close()
    assert_clean(verdict)
    # (A member may log its assignment of the current generation late; any other generation is a rebalance.)
    ahead = {a.generation for a in verdict.log.assignments if jumped <= a.t < back}
    assert ahead <= {before[0]}, f"assignments of generations {sorted(ahead)} while the owner's clock was ahead"
    assert {a.generation for a in verdict.log.assignments if back <= a.t < ended} - {before[0]}, \
        "no rebalance after c2 was killed"


def dead_member_then_clock_back(services, make_fleet, unique_name, tmp_path, breaks=()):
    """Consumer c2 killed, and at once the owner's wall clock two hours back;
    then the run finished (its drain needs c2's partitions reassigned): the
    verdict, and the generation before the kill. ``breaks``: the owner's
    fences broken (tests.support.broken_fence)."""
    clock = WallClock(tmp_path / "wall-clock-offset")
    group = placed_name(unique_name, "g", ([1, 2], 1))
    wrap = (lambda argv: broken_fence.wrap(*breaks)(clock.wrap(argv))) if breaks else clock.wrap
    fleet = make_fleet(wrappers={1: wrap})
    owner, other = fleet.start_many(1, 2)
    run = _run(fleet, services, unique_name, tmp_path, group, owner, other)
    try:
        before = _started_stable_at_the_jumping_daemon(run)
        killed = time.time()
        run.pool.kill(2)
        clock.jump(-7200)  # within c2's 10 s session time-out: its deadline was taken before the jump
        del run.pool.procs[2]  # not restarted: the others must take its partitions
        # Records c2 never saw: each partition gets some after the kill (which only its successor can consume).
        wait_for(lambda: len(after := Counter(run.produced_since(killed))) == run.partitions
                 and min(after.values()) >= 3, LIVENESS_S, "3 records produced to every partition after the kill", 0.2)
        verdict = run.finish(history_logs=[other.log_path])
        assert run.owner() == 1, "the owner changed: the clock jump was not what the run tried"
    finally:
        run.close()
    return verdict, before


def test_a_member_killed_before_a_clock_jump_back_is_removed_at_its_session_timeout(
        services, make_fleet, unique_name, tmp_path):
    verdict, before = dead_member_then_clock_back(services, make_fleet, unique_name, tmp_path)
    assert_clean(verdict)
    assert any(s.generation > before[0] and len(s.members) == 2 and not any(m.startswith("c2-") for m in s.members)
               for s in verdict.log.history), "no generation of c0 and c1 alone: the dead c2 was not removed"


@broken_fences
def test_the_clock_jump_back_catches_group_timers_on_the_wall_clock(services, make_fleet, unique_name, tmp_path):
    verdict, _ = dead_member_then_clock_back(services, make_fleet, unique_name, tmp_path, ("group-wall-clock",))
    print(verdict)
    assert any(v.kind == "not-consumed" for v in verdict.violations), \
        "the checker found every record consumed though the dead member's partitions were never reassigned"


@pytest.mark.slow  # ZKCOORD_TEST_SLOW=1
@pytest.mark.skipif(time_namespaces_available() is not None, reason=str(time_namespaces_available()))
def test_daemons_whose_monotonic_clocks_differ_by_a_month_hand_a_group_over_both_ways(
        services, make_fleet, unique_name, tmp_path):
    group = placed_name(unique_name, "g", ([1, 2], 1), ([2], 2))
    fleet = make_fleet(wrappers={1: monotonic_offset(MONTH_S)})
    ahead, behind = fleet.start_many(1, 2)
    run = _run(fleet, services, unique_name, tmp_path, group, ahead, behind)
    try:
        run.start()
        wait_for(lambda: run.owner() == 1, LIVENESS_S, "the daemon a month ahead owns the group")
        stable = _stable_with(run, 3)

        for dying, taking, member in ((ahead, 2, 2), (behind, 1, 1)):
            dying.kill()
            wait_for(lambda: run.owner() == taking, LIVENESS_S, f"daemon {taking} took the group over")
            run.wait_progress(10, f"at daemon {taking}")
            now = run.stored()
            assert now[0] == stable[0] and len(now[2]) == 3, \
                f"the group changed at the takeover by daemon {taking}: {stable} -> {now}"
            run.pool.kill(member)  # removed at its session time-out, measured on the new owner's clock
            wait_for(lambda: (s := run.stored()) and s[0] > stable[0] and len(s[2]) == 2
                     and not any(m.startswith(f"c{member}-") for m in s[2]), LIVENESS_S,
                     f"daemon {taking} removed the killed consumer c{member}", 0.2)
            run.pool.start(member)
            stable = _stable_with(run, 3)
            if dying is ahead:
                wait_for(lambda: fleet.session_gone(1), LIVENESS_S, "the killed daemon's session gone")
                fleet.start(1, listen=f"{ahead.host}:{ahead.port}")  # a month ahead again
        run.wait_progress(10, "at the end")
        verdict = run.finish()
    finally:
        run.close()
    assert_clean(verdict)
