"""Which daemon the thin consumer sends FindCoordinator to
(zkcoord.client.network.ZkcoordConnectionManager.pick_daemon): a connected,
idle one first, and never again first the one whose last lookup failed (a
daemon without a ZooKeeper session answers COORDINATOR_NOT_AVAILABLE)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import kafka.errors as kerr

from zkcoord.client.network import ZkcoordConnectionManager


def manager(connected=("zkcoord-0", "zkcoord-1"), delays=None):
    m = object.__new__(ZkcoordConnectionManager)  # no I/O: only the routing's state
    m._daemon_ids = ["zkcoord-0", "zkcoord-1", "zkcoord-2"]
    m._rotation = itertools.cycle(range(3))
    m._refused_by = None
    m._conns = {n: SimpleNamespace(connected=True, paused=False, in_flight_requests={}) for n in connected}
    delays = delays or {}
    m.connection_delay = lambda node_id: delays.get(node_id, 0)
    return m


def answer(error_code):
    return SimpleNamespace(coordinators=[SimpleNamespace(error_code=error_code)])


def test_a_connected_idle_daemon_is_asked_first():
    assert manager().pick_daemon() == "zkcoord-0"


def test_after_a_daemon_answered_an_error_the_next_lookup_goes_to_another():
    m = manager()
    m._lookup_answered("zkcoord-0", answer(15))  # COORDINATOR_NOT_AVAILABLE
    assert m.pick_daemon() == "zkcoord-1"
    m._lookup_answered("zkcoord-1", answer(0))
    assert m.pick_daemon() == "zkcoord-1"
    m._lookup_answered("zkcoord-0", answer(0))  # zkcoord-0 answered well since: first again
    assert m.pick_daemon() == "zkcoord-0"


def test_a_failed_lookup_counts_as_refused_and_old_answers_v0_too():
    m = manager()
    m._lookup_answered("zkcoord-0", kerr.RequestTimedOutError())
    assert m.pick_daemon() == "zkcoord-1"
    m._lookup_answered("zkcoord-1", SimpleNamespace(error_code=15))  # FindCoordinator v0-v3: no coordinators list
    assert m.pick_daemon() == "zkcoord-0"


def test_with_no_other_daemon_ready_the_refusing_one_is_still_asked_last():
    m = manager(connected=("zkcoord-0",), delays={"zkcoord-1": 5.0, "zkcoord-2": 9.0})
    m._lookup_answered("zkcoord-0", answer(15))
    assert m.pick_daemon() == "zkcoord-1"  # backing off: its send fails as not ready, and the lookup retries
    m._daemon_ids = ["zkcoord-0"]
    m._rotation = itertools.cycle(range(1))
    assert m.pick_daemon() == "zkcoord-0"  # the only daemon
