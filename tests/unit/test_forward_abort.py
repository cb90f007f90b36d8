"""Aborting the forwarder's Kafka connections (zkcoord/kafka/offsets.py and
forwarder.py, rule 5; zkcoord/server/group_offsets.py ``abort_forwards``)
without a broker: a scripted admin client whose try blocks stands for a
forward in flight, a listening socket on loopback for the broker's end of a
connection, and a GroupManager over in-memory stand-ins for the daemon's
side. The end to end scenario, with a real cut, is
``tests/integration/test_net_faults.py::test_a_deposed_owners_forward_to_kafka_is_aborted_and_never_lands_after_the_new_owners_commits``."""

from __future__ import annotations

import asyncio
import socket
import threading

import kafka.errors as Errors
import pytest

from tests.unit.test_migrate_daemon_storage import Kafka, Ownership, Store, ZkOffsets
from zkcoord.core.errors import ErrorCode as E
from zkcoord.core.group import GroupConfig
from zkcoord.errors import NotOwnerError, ServiceUnavailableError
from zkcoord.kafka.forwarder import KafkaForwarder, KafkaGroupOffsets
from zkcoord.kafka.offsets import RESET_ON_CLOSE_OPTIONS
from zkcoord.server.manager import GroupManager
from zkcoord.server.metrics import DaemonMetrics
from zkcoord.zk.ownership import ChangeKind, OwnershipChange

pytestmark = pytest.mark.timeout(120)  # a call that never ends fails the test instead of hanging the run
T0 = ("t", 0)
WAIT_S = 30  # a bound for a condition that holds at once on a working machine; never a measured time


class BlockingAdmin:
    """kafka-python's admin client as a forward sees it: each
    ``alter_group_offsets`` is a try; a try blocks until ``fail`` is set
    (then raises what an aborted connection raises) or ``answer`` is."""

    def __init__(self, raises=Errors.KafkaConnectionError("connections aborted: test")) -> None:
        self.raises = raises
        self.tries = 0
        self.in_try = threading.Event()
        self.fail = threading.Event()
        self.closed = 0

    def alter_group_offsets(self, group, request):
        self.tries += 1
        self.in_try.set()
        assert self.fail.wait(WAIT_S), "the test never ended the try"
        raise self.raises

    def close(self):
        self.closed += 1


def offsets_with(admin) -> KafkaGroupOffsets:
    kafka = KafkaGroupOffsets("k1:9092", request_timeout_ms=10_000)
    kafka._admin = admin  # as start() would, without a cluster
    return kafka


def in_thread(fn):
    """Run ``fn()`` in a thread; the returned ``outcome()`` joins it and gives its value or exception."""
    found = {}

    def body():
        try:
            found["value"] = fn()
        except BaseException as exc:  # handed to the test
            found["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()

    def outcome():
        thread.join(WAIT_S)
        assert not thread.is_alive(), "the call did not end"
        return found
    return outcome


@pytest.mark.parametrize("raises", [Errors.KafkaConnectionError("connections aborted: test"),
                                    RuntimeError("NetworkSelector closed!")], ids=["reset", "closed"])
@pytest.mark.parametrize("owner", ["deposed", "still-owner"])
def test_an_abort_ends_the_try_in_flight_without_waiting_for_the_lock_and_no_try_starts_on_that_client(
        owner, raises):
    """The call in flight holds the lock; abort() returns at once all the
    same. The try then fails, as kafka-python fails it when its connections
    are reset or its I/O loop is closed under it (not a Kafka error: never
    a traceback for that); the call asks its owner again (NotOwnerError
    ends it) or, still the owner, ends with ServiceUnavailableError: no
    second try on the aborted client."""
    admin = BlockingAdmin(raises)
    kafka = offsets_with(admin)
    deposed = threading.Event()
    asked = []

    def still_owner():
        asked.append(1)
        if owner == "deposed" and deposed.is_set():
            raise NotOwnerError("node 1 does not own group 'g'", "g")

    outcome = in_thread(lambda: kafka.commit_with_metadata("g", {T0: (5, "")}, still_owner))
    assert admin.in_try.wait(WAIT_S)
    assert kafka._lock.locked()  # the call holds it for its whole life
    deposed.set()
    finish = kafka.abort("group g lost")
    assert finish is not None and kafka.abort("again") is None  # marked at once; a second abort has nothing to do
    admin.fail.set()  # what finish() does to the connections, here by hand
    found = outcome()
    if owner == "deposed":
        assert isinstance(found.get("error"), NotOwnerError)
    else:
        assert isinstance(found.get("error"), ServiceUnavailableError)
        assert "aborted (group g lost)" in str(found["error"])
    assert admin.tries == 1 and len(asked) == 2


def test_an_abort_between_the_owner_check_and_the_try_stops_the_try():
    """The race: the owner check passed, then the daemon learnt it was
    deposed and aborted, then the try would start. It does not."""
    admin = BlockingAdmin()
    kafka = offsets_with(admin)

    def aborted_just_after_the_check():
        kafka.abort("session given up")

    with pytest.raises(ServiceUnavailableError, match=r"aborted \(session given up\)"):
        kafka.commit_with_metadata("g", {T0: (5, "")}, aborted_just_after_the_check)
    assert admin.tries == 0


def test_the_next_call_after_an_abort_gets_a_fresh_client_with_sockets_that_reset_on_close(monkeypatch):
    """start() builds a new admin client in place of an aborted one (the
    aborted one is closed by its abort, never twice), with SO_LINGER 0
    beside kafka-python's TCP_NODELAY on the forwarder's sockets."""
    import kafka as kafka_python

    import zkcoord.kafka.login as login

    built = []

    class Admin:
        def __init__(self, **config):
            self.config, self.closed = config, 0
            built.append(self)

        def close(self):
            self.closed += 1

    monkeypatch.setattr(kafka_python, "KafkaAdminClient", Admin)
    monkeypatch.setattr(login, "check_login", lambda *args, **kwargs: None)
    forwarder = KafkaForwarder("k1:9092")
    forwarder.kafka.start()
    forwarder.kafka.start()
    assert len(built) == 1
    assert built[0].config["socket_options"] == [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),
                                                (socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")]
    finish = forwarder.kafka.abort("test")
    forwarder.kafka.start()
    assert len(built) == 2 and forwarder.kafka._admin is built[1]
    # (this stand-in has no connection manager: finish() falls back to close(), as when the I/O thread is gone)
    finish()
    forwarder.kafka.close()
    assert [a.closed for a in built] == [1, 1]
    KafkaGroupOffsets("k1:9092").start()  # the migration toolkit's client keeps kafka-python's defaults
    assert "socket_options" not in built[2].config


@pytest.mark.parametrize("options, reset", [((), False), (RESET_ON_CLOSE_OPTIONS, True)], ids=["default", "reset"])
def test_a_socket_with_the_forwarders_options_drops_what_it_had_not_delivered_when_closed(options, reset):
    """What SO_LINGER 0 is for: the peer reads nothing yet, so what we send
    piles up in the kernel's queues; then we close. Closed gracefully, the
    kernel still delivers every byte, then the end of the stream; with the
    forwarder's options the connection is reset and what had not reached
    the peer is never delivered."""
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.socket()
    for option in options:
        client.setsockopt(*option)
    client.connect(server.getsockname())
    peer, _ = server.accept()
    client.setblocking(False)
    sent = 0
    try:
        while True:
            sent += client.send(b"x" * 65536)
    except BlockingIOError:
        pass  # the peer's receive window and our send buffer are full: the rest waits in our kernel
    client.close()
    peer.settimeout(WAIT_S)
    received, error = 0, None
    try:
        while chunk := peer.recv(1 << 20):
            received += len(chunk)
    except ConnectionResetError as exc:
        error = exc
    finally:
        peer.close()
        server.close()
    if reset:
        assert error is not None and received < sent
    else:
        assert error is None and received == sent


class RecordingKafka(Kafka):
    """The forwarder stand-in: a commit's try waits for ``go``, then asks
    its owner again (as the retry after an aborted try does) and stores."""

    def __init__(self):
        super().__init__()
        self.go = asyncio.Event()
        self.in_flight = asyncio.Event()
        self.aborts = []

    async def commit(self, group, offsets, before_try=None):
        self.in_flight.set()
        await self.go.wait()
        return await super().commit(group, offsets, before_try)

    def abort(self, reason):  # as KafkaForwarder.abort: False once aborted (until a call connects again)
        if self.aborts:
            return False
        self.aborts.append(reason)
        return True


class Losing(Ownership):
    def __init__(self):
        self.lost = set()

    def fence(self, group):
        if group in self.lost:
            raise NotOwnerError(f"node 1 does not own group {group!r}", group)
        return super().fence(group)


@pytest.mark.parametrize("how", ["lost", "stepped-down"])
def test_a_group_lost_with_its_commit_in_flight_to_kafka_aborts_the_forwarder(how):
    """The ownership's LOST report (a contender gone, the session given up
    or expired) or a runtime stepping down, for a group whose commit is in
    flight to Kafka: the forwarder is aborted before anything else is done
    for the group; the commit then ends NOT_COORDINATOR, nothing stored."""
    kafka, ownership = RecordingKafka(), Losing()
    m = GroupManager(1, GroupConfig(), ownership, Store({"g": {"v": 1, "s": "Empty", "g": 0, "os": "kafka"},
                                                        "h": {"v": 1, "s": "Empty", "g": 0, "os": "kafka"}}),
                     ZkOffsets(), nodes=None, kafka_forwarder=kafka)
    m.metrics = DaemonMetrics()

    async def scenario():
        await m.runtime("g")
        await m.runtime("h")
        commit = asyncio.ensure_future(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")]))
        await kafka.in_flight.wait()
        ownership.lost.update({"g", "h"})
        m.group_offsets.forget("h")  # no commit of h in flight: nothing to abort for it
        assert kafka.aborts == []
        if how == "lost":
            m.on_ownership_change(OwnershipChange(ChangeKind.LOST, frozenset({"g"}), "ZooKeeper session given up"))
        else:
            m.stepped_down("g")
        aborted = list(kafka.aborts)
        kafka.go.set()
        return aborted, await commit

    aborted, answer = asyncio.run(scenario())
    assert aborted == [("ZooKeeper session given up" if how == "lost" else "stepped down") + ": group(s) g"]
    assert answer == [E.NOT_COORDINATOR]
    assert kafka.commits == []
    assert m.metrics.registry.get_sample_value("zkcoord_forward_aborts_total") == 1


def test_a_group_lost_with_no_commit_in_flight_leaves_the_connections_alone():
    kafka, ownership = RecordingKafka(), Losing()
    m = GroupManager(1, GroupConfig(), ownership, Store({"g": {"v": 1, "s": "Empty", "g": 0, "os": "dual"}}),
                     ZkOffsets(), nodes=None, kafka_forwarder=kafka)
    m.metrics = DaemonMetrics()
    kafka.go.set()

    async def scenario():
        await m.runtime("g")
        assert await m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")]) == [E.NONE]
        ownership.lost.add("g")
        m.on_ownership_change(OwnershipChange(ChangeKind.LOST, frozenset({"g"}), "ZooKeeper session given up"))

    asyncio.run(scenario())
    assert kafka.aborts == [] and kafka.commits == [("g", {T0: (5, "")})]
    assert m.metrics.registry.get_sample_value("zkcoord_forward_aborts_total") == 0


def test_a_stopping_daemon_aborts_a_forward_in_flight_before_it_gives_the_group_up():
    """release_all: the batch's groups unloaded, then their contenders
    deleted (after which another daemon may take them at once): a commit of
    one in flight to Kafka is aborted in between, before the release."""
    kafka = RecordingKafka()
    steps = []

    class Releasing(Losing):
        async def release_many(self, groups):
            steps.append(("release", sorted(groups), list(kafka.aborts)))
            self.lost.update(groups)

        async def release_all(self):
            pass

    ownership = Releasing()
    m = GroupManager(1, GroupConfig(), ownership, Store({"g": {"v": 1, "s": "Empty", "g": 0, "os": "dual"}}),
                     ZkOffsets(), nodes=None, kafka_forwarder=kafka)

    async def scenario():
        await m.runtime("g")
        commit = asyncio.ensure_future(m.group_offsets.commit("g", "", -1, None, [("t", 0, 5, "")]))
        await kafka.in_flight.wait()
        await m.release_all()
        kafka.go.set()
        return await commit

    assert asyncio.run(scenario()) == [E.NOT_COORDINATOR]
    assert steps == [("release", ["g"], ["daemon stopping: group(s) g"])]
    assert kafka.commits == []
