"""When a suspended ZooKeeper connection counts as a lost session: the rule
(zkcoord.core.session_loss) and the connection's use of it
(zkcoord.zk.connection, rule 6), on a fake clock and a fake timer."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kazoo.protocol.states import KazooState, KeeperState

from zkcoord.core.session_loss import Suspension
from zkcoord.zk.connection import SessionEvent, ZkConnection

# -- the rule ------------------------------------------------------------------------


def test_a_suspension_is_a_loss_once_the_server_was_silent_for_the_whole_timeout():
    s = Suspension.begin(now_ms=12_700, heard_ms=10_000, timeout_ms=4_000)
    assert s.deadline_ms == 14_000
    assert not s.is_loss(12_700) and not s.is_loss(13_999)
    assert s.is_loss(14_000) and s.is_loss(60_000)
    assert s.wait_ms(12_700) == 1_300 and s.wait_ms(14_000) == 0 and s.wait_ms(20_000) == 0


def test_it_counts_from_the_last_time_the_server_was_heard_not_from_the_suspension():
    # kazoo notices a silent server two thirds of the time-out after it last heard it (Curator, counting
    # from SUSPENDED, gives up that much later than the server expires the session).
    early, late = (Suspension.begin(now_ms=20_000, heard_ms=h, timeout_ms=9_000) for h in (17_000, 19_900))
    assert early.deadline_ms == 26_000 and late.deadline_ms == 28_900


def test_without_a_time_heard_it_counts_from_the_suspension():
    s = Suspension.begin(now_ms=5_000, heard_ms=None, timeout_ms=4_000)
    assert s.heard_ms == 5_000 and s.deadline_ms == 9_000


def test_a_time_heard_after_the_suspension_is_taken_as_the_suspension():
    assert Suspension.begin(now_ms=5_000, heard_ms=5_200, timeout_ms=4_000).heard_ms == 5_000


def test_the_timeout_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        Suspension.begin(now_ms=0, heard_ms=0, timeout_ms=0)


def test_the_reason_says_how_long_since_heard_and_since_the_connection_went():
    s = Suspension.begin(now_ms=12_700, heard_ms=10_000, timeout_ms=4_000)
    assert s.reason(14_010) == ("ZooKeeper not heard for 4010 ms (connection lost 1310 ms ago), the negotiated "
                                "session time-out is 4000 ms: the session is treated as expired")


# -- the connection's use of it ------------------------------------------------------------


class Timers:
    """A fake ``start_timer``: timers fire only when the test says."""

    def __init__(self, clock):
        self.clock = clock
        self.armed = []

    def __call__(self, delay_s, callback):
        timer = SimpleNamespace(when=self.clock.now + delay_s, callback=callback, cancelled=False)
        timer.cancel = lambda: setattr(timer, "cancelled", True)
        self.armed.append(timer)
        return timer

    def fire_due(self):
        for timer in [t for t in self.armed if t.when <= self.clock.now and not t.cancelled]:
            self.armed.remove(timer)
            timer.callback()

    def pending(self):
        return [t for t in self.armed if not t.cancelled]


class Clock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


SESSION = 0x1234


def connection(negotiated_ms=4_000, heard_at=100.0):
    """A ZkConnection in session SESSION (no server: kazoo's state changes are fed by hand)."""
    clock = Clock()
    conn = ZkConnection("127.0.0.1:2181", session_timeout_ms=6_000)
    conn.clock, conn.start_timer = clock, Timers(clock)
    conn.negotiated_timeout_ms, conn.heard_at = negotiated_ms, heard_at
    conn._client = SimpleNamespace(client_id=(SESSION, b"pw"), client_state=KeeperState.CONNECTED)
    conn._session_id, conn._started = SESSION, True
    events = []
    conn.add_listener(events.append)
    return conn, clock, conn.start_timer, events


def test_a_suspension_lasting_the_timeout_is_given_up_once_then_the_same_session_reconnects():
    conn, clock, timers, events = connection()
    clock.now = 102.7  # kazoo noticed the silence 2.7 s after it last read a packet
    conn._on_kazoo_state(KazooState.SUSPENDED)
    assert events == [SessionEvent.SUSPENDED] and conn.given_up is None
    assert [round(t.when, 3) for t in timers.pending()] == [104.0]  # heard at 100 s + 4 s negotiated
    clock.now = 103.99
    timers.fire_due()
    assert events == [SessionEvent.SUSPENDED]
    clock.now = 104.0
    timers.fire_due()
    assert events == [SessionEvent.SUSPENDED, SessionEvent.GIVEN_UP]
    assert conn.given_up.startswith("ZooKeeper not heard for 4000 ms (connection lost 1300 ms ago)")
    assert timers.pending() == []
    conn._on_kazoo_state(KazooState.CONNECTED)  # ZooKeeper had not expired it after all
    assert events[2:] == [SessionEvent.RECONNECTED] and conn.given_up is None
    assert conn.last_given_up.startswith("ZooKeeper not heard for 4000 ms")  # for listeners that read it late


def test_a_suspension_shorter_than_the_timeout_is_not_given_up():
    conn, clock, timers, events = connection()
    clock.now = 102.7
    conn._on_kazoo_state(KazooState.SUSPENDED)
    (timer,) = timers.pending()
    clock.now = 103.5
    conn._on_kazoo_state(KazooState.CONNECTED)
    assert events == [SessionEvent.SUSPENDED, SessionEvent.RECONNECTED]
    assert timer.cancelled and conn.suspension is None
    clock.now = 200.0
    timer.callback()  # a timer that fires although cancelled decides nothing
    assert events == [SessionEvent.SUSPENDED, SessionEvent.RECONNECTED] and conn.given_up is None


def test_a_timer_firing_early_waits_on():
    conn, clock, timers, events = connection()
    clock.now = 102.7
    conn._on_kazoo_state(KazooState.SUSPENDED)
    (timer,) = timers.pending()
    timers.armed.clear()
    clock.now = 103.0  # a timer thread that woke early
    timer.callback()
    assert events == [SessionEvent.SUSPENDED]
    assert [round(t.when, 3) for t in timers.pending()] == [104.0]
    clock.now = 104.2
    timers.fire_due()
    assert events == [SessionEvent.SUSPENDED, SessionEvent.GIVEN_UP]


def test_given_up_then_expired_by_zookeeper_is_lost_then_a_new_session():
    conn, clock, timers, events = connection()
    conn._on_kazoo_state(KazooState.SUSPENDED)
    clock.now = 104.0
    timers.fire_due()
    conn._on_kazoo_state(KazooState.LOST)
    conn._client.client_id = (0x9999, b"pw")
    conn._on_kazoo_state(KazooState.CONNECTED)
    assert events == [SessionEvent.SUSPENDED, SessionEvent.GIVEN_UP, SessionEvent.LOST, SessionEvent.CONNECTED]
    assert conn.given_up is None and timers.pending() == []


def test_without_observations_it_counts_from_the_suspension_with_the_timeout_asked_for():
    conn, clock, timers, events = connection(negotiated_ms=None, heard_at=None)
    clock.now = 102.7
    conn._on_kazoo_state(KazooState.SUSPENDED)
    assert [round(t.when, 3) for t in timers.pending()] == [108.7]  # 6 s asked for, from the suspension


def test_nothing_is_given_up_after_stop():
    conn, clock, timers, events = connection()
    conn._on_kazoo_state(KazooState.SUSPENDED)
    (timer,) = timers.pending()
    conn._stopping = True
    with conn._lock:
        conn._end_suspension()
    clock.now = 200.0
    timer.callback()
    assert events == [SessionEvent.SUSPENDED] and timer.cancelled


def test_the_connection_reads_the_negotiated_timeout_and_the_time_heard_off_kazoo():
    conn, clock, _, _ = connection(negotiated_ms=None, heard_at=None)
    handler = SimpleNamespace(_connect=lambda host, ip, port: (8000 * 2 / 3, 4000), _read_socket=lambda t: "packet")
    conn._observe(SimpleNamespace(_connection=handler))
    clock.now = 150.0
    assert handler._connect("zk", "127.0.0.1", 2181) == (8000 * 2 / 3, 4000)  # kazoo's answer passed on
    assert conn.negotiated_timeout_ms == 8000 and conn.heard_at == 150.0
    clock.now = 151.5
    assert handler._read_socket(1.0) == "packet"
    assert conn.heard_at == 151.5


def test_a_kazoo_without_those_hooks_is_left_alone():
    conn, _, _, _ = connection(negotiated_ms=None, heard_at=None)
    conn._observe(SimpleNamespace(_connection=SimpleNamespace()))
    assert conn.negotiated_timeout_ms is None and conn.heard_at is None


# -- a connection that went silent (rule 7) ------------------------------------------------------


def test_a_connection_silent_for_two_thirds_of_the_timeout_is_dropped():
    from zkcoord.core.session_loss import silent_too_long

    assert not silent_too_long(heard_ms=0, now_ms=2_666, timeout_ms=4_000)
    assert silent_too_long(heard_ms=0, now_ms=2_667, timeout_ms=4_000)
    conn, clock, _, events = connection(negotiated_ms=6_000, heard_at=100.0)
    shut = []
    conn._client.connected = True
    conn._client._connection = SimpleNamespace(_socket=SimpleNamespace(shutdown=shut.append))
    clock.now = 103.9
    assert not conn.check_silence() and shut == []
    clock.now = 104.0  # 4 s: two thirds of 6
    assert conn.check_silence() and len(shut) == 1
    assert events == []  # kazoo reports SUSPENDED when it reads the end


def test_silence_is_not_looked_at_while_suspended_or_disconnected():
    conn, clock, _, _ = connection(negotiated_ms=6_000, heard_at=100.0)
    shut = []
    conn._client._connection = SimpleNamespace(_socket=SimpleNamespace(shutdown=shut.append))
    clock.now = 200.0
    conn._client.connected = False
    assert not conn.check_silence()
    conn._client.connected = True
    conn._on_kazoo_state(KazooState.SUSPENDED)
    assert not conn.check_silence() and shut == []
