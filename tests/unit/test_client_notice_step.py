"""zkcoord.client.notice.RebalanceNotice's step, with a fake coordinator
and connection: a member that rejoins while the notice connection opens
sends no heartbeat of its old generation."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from kafka.structs import MemberState

from zkcoord.client.notice import RebalanceNotice

CONFIG = {"client_id": "c", "retry_backoff_ms": 50, "heartbeat_interval_ms": 100, "session_timeout_ms": 10_000,
          "request_timeout_ms": 1_000}


class FakeCoordinator:
    group_id, group_instance_id, coordinator_id = "g", None, 1

    def __init__(self):
        self._lock = threading.RLock()  # kafka-python's: a rejoin is marked under it
        self.state = MemberState.STABLE
        self._generation = SimpleNamespace(generation_id=1, member_id="m")
        broker = SimpleNamespace(host="127.0.0.1", port=9)
        self._client = SimpleNamespace(cluster=SimpleNamespace(broker_metadata=lambda node_id: broker))


def notice_with(coordinator, on_connect):
    sent = []
    notice = RebalanceNotice(coordinator, CONFIG)
    notice._connect = lambda address: (on_connect(), ("sock", "protocol"))[1]
    notice._send = lambda sock, protocol, request: sent.append(request)
    notice._receive = lambda sock, protocol: SimpleNamespace(error_code=0)
    notice._wait = lambda seconds: None
    return notice, sent


def test_a_member_that_rejoined_while_connecting_sends_no_stale_heartbeat():
    coordinator = FakeCoordinator()

    def rejoined():  # the application thread completed a rejoin meanwhile
        coordinator._generation = SimpleNamespace(generation_id=2, member_id="m")

    notice, sent = notice_with(coordinator, rejoined)
    notice._step()
    assert sent == []
    notice._step()  # the next step heartbeats for the generation it now has
    assert [(r.generation_id, r.member_id) for r in sent] == [(2, "m")]


def test_a_member_still_in_its_generation_heartbeats():
    coordinator = FakeCoordinator()
    notice, sent = notice_with(coordinator, lambda: None)
    notice._step()
    assert [(r.generation_id, r.member_id) for r in sent] == [(1, "m")]


def test_a_rejoin_waits_for_a_heartbeat_being_sent():
    """The check and the send hold the coordinator's lock: a rejoin marked
    meanwhile (as kafka-python marks it, under that lock, before sending
    the JoinGroup) comes after the heartbeat's bytes are written."""
    coordinator = FakeCoordinator()
    order = []
    notice, sent = notice_with(coordinator, lambda: None)

    def send(sock, protocol, request):
        marker = threading.Thread(target=lambda: (coordinator._lock.acquire(), order.append("rejoin marked"),
                                                  coordinator._lock.release()))
        marker.start()
        marker.join(0.2)  # it cannot take the lock while the heartbeat is being sent
        order.append("heartbeat written")
        sent.append(request)
        notice._marker = marker

    notice._send = send
    notice._step()
    notice._marker.join(5)
    assert order == ["heartbeat written", "rejoin marked"]


def test_answers_that_are_never_held_space_the_heartbeats_out_up_to_the_interval(monkeypatch):
    """A daemon answers at once when it holds nothing (a KIP-848 group with
    this classic member inside): the pauses double from retry_backoff_ms
    to heartbeat_interval_ms, and a held answer starts them over."""
    coordinator = FakeCoordinator()
    notice, sent = notice_with(coordinator, lambda: None)
    waits = []
    notice._wait = waits.append
    for _ in range(4):
        notice._step()
    assert waits == [0.05, 0.1, 0.1, 0.1]  # CONFIG: 50 ms back-off, 100 ms interval
    clock = iter([0.0, 1.0])  # sent, answered a second later: held
    import zkcoord.client.notice as module

    with monkeypatch.context() as patched:
        patched.setattr(module, "time", SimpleNamespace(monotonic=lambda: next(clock)))
        notice._step()
    notice._step()
    assert waits[-1] == 0.05 and len(sent) == 6
