"""The asyncio transport over real TCP sockets on 127.0.0.1.

Clients frame requests with kafka-python's own `KafkaProtocol` (the parser
its connections use), and one test drives a real `KafkaAdminClient` against
the server to show a kafka-python client negotiates versions with us.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import gc
import logging
import select
import socket
import threading
import time
from contextlib import asynccontextmanager

import pytest
from kafka import KafkaAdminClient
from kafka.admin import MemberToRemove
from kafka.errors import NoError, UnknownMemberIdError
from kafka.protocol.consumer.group import (
    HeartbeatRequest, JoinGroupRequest, SyncGroupRequest,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest, MetadataResponse,
)
from kafka.protocol.parser import KafkaProtocol
from kafka.protocol.schemas.fields.codecs import Int32
from kafka.structs import OffsetAndMetadata, TopicPartition

from tests.support.ports import foreign_listener
from zkcoord.core.limits import FRAMES_PER_TURN
from zkcoord.server.transport import KafkaProtocolServer
from zkcoord.wire.listening import reuse_port_spreads
from zkcoord.wire.messages import api_versions_response, build_message, build_response
from zkcoord.wire.registry import COORDINATOR_APIS, ApiSpec
from zkcoord.wire.responses import response_for

CLIENT_ID = "zk-test-client"
TIMEOUT_S = 5
TRANSPORT_LOGGER = "zkcoord.server.transport"


def asyncio_test(fn):
    @functools.wraps(fn)
    def run(*args, **kwargs):
        return asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 60))
    return run


class Recorder:
    """A handler that records what it was asked and answers with canned responses.

    JoinGroup for group "slow" waits for `release`; group "boom" raises.
    """

    def __init__(self, apis=COORDINATOR_APIS):
        self.apis = apis
        self.seen = []
        self.infos = []
        self.join_entered = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    async def __call__(self, decoded, info):
        request = decoded.request
        self.seen.append((decoded.api_name, decoded.api_version, decoded.correlation_id,
                          getattr(request, "group_id", None)))
        self.infos.append(info)
        if decoded.api_key == 18:
            return api_versions_response(decoded.response_version, self.apis)
        if request.group_id == "boom":
            raise RuntimeError("handler exploded")
        if decoded.api_key == 11 and request.group_id == "slow":
            self.join_entered.set()
            try:
                await self.release.wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        if request.group_id == "wrong-response":
            return build_response(12, 0, error_code=0)
        if decoded.api_key == 11:
            return response_for(decoded, error_code=0, member_id="member-1", generation_id=1)
        return response_for(decoded, error_code=0)


class Client:
    """One TCP connection framed with kafka-python's client-side parser."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.protocol = KafkaProtocol(client_id=CLIENT_ID)
        self.received = []

    @classmethod
    async def connect(cls, port):
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    @property
    def local_port(self):
        return self.writer.get_extra_info("sockname")[1]

    async def send(self, request, correlation_id=None):
        correlation_id = self.protocol.send_request(request, correlation_id)
        await self.send_raw(self.protocol.send_bytes())
        return correlation_id

    async def send_raw(self, data):
        self.writer.write(data)
        await self.writer.drain()

    async def receive(self):
        while not self.received:
            data = await asyncio.wait_for(self.reader.read(65536), TIMEOUT_S)
            if not data:
                raise ConnectionError("closed by the server")
            self.received.extend(self.protocol.receive_bytes(data))
        return self.received.pop(0)

    async def closed_by_server(self):
        try:
            return await asyncio.wait_for(self.reader.read(), TIMEOUT_S) == b""
        except ConnectionResetError:
            return True

    async def close(self):
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


@asynccontextmanager
async def serving(handler, **kwargs):
    server = KafkaProtocolServer(handler, "127.0.0.1", 0, **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def heartbeat(group_id="group-a", version=4):
    return HeartbeatRequest(version=version, group_id=group_id, generation_id=1,
                            member_id="member-1")


def join_group(group_id, version=5):
    return JoinGroupRequest(version=version, group_id=group_id, session_timeout_ms=10000,
                            rebalance_timeout_ms=30000, member_id="", protocol_type="consumer",
                            protocols=[("range", b"\x00")])


# -- the happy path ------------------------------------------------------------

@asyncio_test
async def test_request_round_trip_gives_handler_the_decoded_request_and_peer():
    recorder = Recorder()
    async with serving(recorder) as server:
        client = await Client.connect(server.bound_port)
        correlation_id = await client.send(heartbeat(version=4), correlation_id=17)
        received_id, response = await client.receive()
        await client.close()

    assert (correlation_id, received_id) == (17, 17)
    assert (response.version, response.throttle_time_ms, response.error_code) == (4, 0, 0)
    assert recorder.seen == [("Heartbeat", 4, 17, "group-a")]
    info, = recorder.infos
    assert (info.peer_host, info.peer_port, info.client_host) == (
        "127.0.0.1", client.local_port, "/127.0.0.1")


class CollectorWatcher(Recorder):
    """Records whether the cyclic collector ran while each request was handled."""

    def __init__(self):
        super().__init__()
        self.collector = []

    async def __call__(self, decoded, info):
        self.collector.append(gc.isenabled())
        await asyncio.sleep(0)
        self.collector.append(gc.isenabled())
        return await super().__call__(decoded, info)


@asyncio_test
async def test_a_frame_too_big_to_decode_inline_is_answered_with_the_collector_paused_until_then():
    """A big request's objects (460,000 partitions) are freed before the cyclic
    collector runs again, not walked by it while the request is served (rule 7)."""
    from zkcoord.core.limits import INLINE_DECODE_BYTES

    was = gc.isenabled()
    gc.enable()
    try:
        recorder = CollectorWatcher()
        async with serving(recorder) as server:
            client = await Client.connect(server.bound_port)
            await client.send(heartbeat(group_id="g" * (INLINE_DECODE_BYTES + 1)))  # decoded in a worker thread
            _, big = await client.receive()
            await client.send(heartbeat())
            _, small = await client.receive()
            await client.close()
            after = gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
    assert (big.error_code, small.error_code) == (0, 0)
    assert recorder.collector == [False, False, True, True] and after


@asyncio_test
async def test_one_connection_is_served_one_request_at_a_time_in_order():
    recorder = Recorder()
    async with serving(recorder) as server:
        first = await Client.connect(server.bound_port)
        other = await Client.connect(server.bound_port)
        # three requests pipelined; the JoinGroup answer is deferred
        await first.send(join_group("slow"))
        await first.send(heartbeat("group-b"))
        await first.send(SyncGroupRequest(version=3, group_id="group-c", generation_id=1,
                                          member_id="member-1", assignments=[]))
        await asyncio.wait_for(recorder.join_entered.wait(), TIMEOUT_S)

        # another connection is not held up by the deferred JoinGroup
        await other.send(heartbeat("group-d"), correlation_id=7)
        assert (await other.receive())[0] == 7
        await asyncio.sleep(0.05)
        assert [s[3] for s in recorder.seen] == ["slow", "group-d"]

        recorder.release.set()
        answers = [await first.receive() for _ in range(3)]
        await first.close()
        await other.close()

    assert [(cid, type(r).__name__, r.version) for cid, r in answers] == [
        (1, "JoinGroupResponse", 5), (2, "HeartbeatResponse", 4), (3, "SyncGroupResponse", 3)]
    assert recorder.seen == [("JoinGroup", 5, 1, "slow"), ("Heartbeat", 4, 7, "group-d"),
                             ("Heartbeat", 4, 2, "group-b"), ("SyncGroup", 3, 3, "group-c")]


@asyncio_test
async def test_too_new_api_versions_is_answered_by_the_codec_and_connection_stays_open(caplog):
    caplog.set_level(logging.DEBUG, logger=TRANSPORT_LOGGER)
    recorder = Recorder()
    async with serving(recorder) as server:
        client = await Client.connect(server.bound_port)
        await client.send(ApiVersionsRequest(version=4, client_software_name="zk-test",
                                             client_software_version="1.0"))
        _, refused = await client.receive()
        await client.send(ApiVersionsRequest(version=3, client_software_name="zk-test",
                                             client_software_version="1.0"))
        _, accepted = await client.receive()
        await client.close()

    assert (refused.version, refused.error_code) == (0, 35)
    assert {k.api_key: (k.min_version, k.max_version) for k in refused.api_keys} == \
        COORDINATOR_APIS.version_table()
    assert (accepted.version, accepted.error_code) == (3, 0)
    assert recorder.seen == [("ApiVersions", 3, 2, None)]
    assert "answered ApiVersions v4 (correlation id 1) from the codec" in caplog.text


# -- bad frames close only their own connection -------------------------------

def _framed(request, correlation_id=1):
    protocol = KafkaProtocol(client_id=CLIENT_ID)
    protocol.send_request(request, correlation_id)
    return bytes(protocol.send_bytes())


def _truncated_heartbeat():
    payload = _framed(heartbeat(version=3))[4:-1]
    return Int32.encode(len(payload)) + payload


BAD_FRAMES = {
    "oversized": (Int32.encode(4096), "frame size 4096 is outside 0..1024 bytes"),
    "negative size": (Int32.encode(-2), "frame size -2 is outside 0..1024 bytes"),
    "unreadable header": (Int32.encode(3) + b"\x00\x01\x02", "request header v1 does not decode"),
    "truncated body": (_truncated_heartbeat(), "Heartbeat v3 body (correlation id 1, 24 bytes) does not decode"),
    "unknown api key": (_framed(MetadataRequest(version=12, topics=None)),
                        "Metadata (key 3) v12 from client 'zk-test-client' (correlation id 1): "
                        "api key is not served"),
    "unsupported version": (_framed(FindCoordinatorRequest(version=5, coordinator_keys=["g"])),
                            "FindCoordinator (key 10) v5 from client 'zk-test-client' "
                            "(correlation id 1): version is outside the served range 0-4"),
}


@pytest.mark.parametrize("case", list(BAD_FRAMES))
@asyncio_test
async def test_bad_frame_closes_only_that_connection(case, caplog):
    data, reason = BAD_FRAMES[case]
    caplog.set_level(logging.WARNING, logger=TRANSPORT_LOGGER)
    recorder = Recorder()
    async with serving(recorder, max_frame_bytes=1024) as server:
        bystander = await Client.connect(server.bound_port)
        offender = await Client.connect(server.bound_port)
        await offender.send_raw(data)
        assert await offender.closed_by_server()

        await bystander.send(heartbeat("still-served"), correlation_id=5)
        assert (await bystander.receive())[0] == 5
        newcomer = await Client.connect(server.bound_port)
        await newcomer.send(heartbeat("new-connection"), correlation_id=6)
        assert (await newcomer.receive())[0] == 6
        for client in (bystander, offender, newcomer):
            await client.close()

    assert [s[3] for s in recorder.seen] == ["still-served", "new-connection"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "closing connection" in warnings[0].getMessage()
    assert reason in warnings[0].getMessage()


@pytest.mark.parametrize("group_id,message", [
    ("boom", "handler failed on Heartbeat v4 (correlation id 1)"),
    ("wrong-response", "the handler's response cannot be sent"),
])
@asyncio_test
async def test_handler_failure_is_logged_with_traceback_and_closes_only_that_connection(
        group_id, message, caplog):
    caplog.set_level(logging.ERROR, logger=TRANSPORT_LOGGER)
    recorder = Recorder()
    async with serving(recorder) as server:
        bystander = await Client.connect(server.bound_port)
        offender = await Client.connect(server.bound_port)
        await offender.send(heartbeat(group_id), correlation_id=1)
        assert await offender.closed_by_server()
        await bystander.send(heartbeat("still-served"), correlation_id=2)
        assert (await bystander.receive())[0] == 2
        await bystander.close()
        await offender.close()

    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert message in errors[0].getMessage()
    assert errors[0].exc_info is not None


# -- handle_now: answers without a task ------------------------------------------

async def send_together(client, requests):
    """Several requests in one write, so the server reads them at once."""
    for correlation_id, request in requests:
        client.protocol.send_request(request, correlation_id)
    await client.send_raw(client.protocol.send_bytes())


class FastRecorder(Recorder):
    """A Recorder whose handle_now answers heartbeats of group "fast" at once,
    raises for group "fast-boom", and defers everything else."""

    def __init__(self):
        super().__init__()
        self.now = []

    def handle_now(self, decoded, info):
        group_id = getattr(decoded.request, "group_id", None)
        if decoded.api_key != 12 or not group_id.startswith("fast"):
            return None
        if group_id == "fast-boom":
            raise RuntimeError("fast path exploded")
        self.now.append(decoded.correlation_id)
        return response_for(decoded, error_code=0)


@asyncio_test
async def test_handle_now_answers_in_order_with_awaited_requests_on_the_same_connection():
    recorder = FastRecorder()
    async with serving(recorder) as server:
        client = await Client.connect(server.bound_port)
        await send_together(client, [
            (1, heartbeat("fast")), (2, heartbeat("fast")), (3, join_group("slow")),
            (4, heartbeat("fast")), (5, heartbeat("group-b"))])
        await asyncio.wait_for(recorder.join_entered.wait(), TIMEOUT_S)
        first = [await client.receive() for _ in range(2)]
        await asyncio.sleep(0.05)
        assert recorder.now == [1, 2]  # the heartbeat after the deferred JoinGroup waits for it
        recorder.release.set()
        rest = [await client.receive() for _ in range(3)]
        await client.close()

    assert [(cid, type(r).__name__) for cid, r in first + rest] == [
        (1, "HeartbeatResponse"), (2, "HeartbeatResponse"), (3, "JoinGroupResponse"),
        (4, "HeartbeatResponse"), (5, "HeartbeatResponse")]
    assert recorder.now == [1, 2, 4]
    assert [s[2] for s in recorder.seen] == [3, 5]  # awaited: only what handle_now declined


class TickingRecorder(FastRecorder):
    """A FastRecorder that, at the first request it answers at once, schedules
    a callback (``loop.call_soon``) that notes "tick" among the answers: the
    frames noted before it were handled in the same callback as the first."""

    def handle_now(self, decoded, info):
        if not self.now:
            asyncio.get_running_loop().call_soon(self.now.append, "tick")
        return super().handle_now(decoded, info)


async def pipelined_heartbeats(recorder, count, then_eof=False) -> list:
    """The answers to ``count`` heartbeats of group "fast" sent in one write
    (then the end of input, after which the server must close)."""
    async with serving(recorder) as server:
        client = await Client.connect(server.bound_port)
        await send_together(client, [(i, heartbeat("fast")) for i in range(1, count + 1)])
        if then_eof:
            client.writer.write_eof()
        answers = [await client.receive() for _ in range(count)]
        if then_eof:
            assert await client.closed_by_server()
        await client.close()
    return answers


@asyncio_test
async def test_a_connection_sending_many_requests_at_once_lets_other_callbacks_run_between_turns():
    recorder = TickingRecorder()
    count = 3 * FRAMES_PER_TURN + 5
    answers = await pipelined_heartbeats(recorder, count)

    # The first turn handles FRAMES_PER_TURN frames; the rest wait for a callback of their own.
    assert recorder.now.index("tick") == FRAMES_PER_TURN
    assert [n for n in recorder.now if n != "tick"] == list(range(1, count + 1))
    assert [(cid, type(r).__name__, r.error_code) for cid, r in answers] == [
        (i, "HeartbeatResponse", 0) for i in range(1, count + 1)]


@asyncio_test
async def test_requests_sent_ahead_of_an_end_of_input_are_all_answered_over_several_turns():
    count = 2 * FRAMES_PER_TURN + 3
    answers = await pipelined_heartbeats(FastRecorder(), count, then_eof=True)
    assert [cid for cid, _ in answers] == list(range(1, count + 1))


@asyncio_test
async def test_handle_now_failure_is_logged_and_closes_only_that_connection(caplog):
    caplog.set_level(logging.ERROR, logger=TRANSPORT_LOGGER)
    recorder = FastRecorder()
    async with serving(recorder) as server:
        bystander = await Client.connect(server.bound_port)
        offender = await Client.connect(server.bound_port)
        await send_together(offender, [(1, heartbeat("fast")), (2, heartbeat("fast-boom"))])
        assert (await offender.receive())[0] == 1  # answered before the failure
        assert await offender.closed_by_server()
        await bystander.send(heartbeat("fast"), correlation_id=3)
        assert (await bystander.receive())[0] == 3
        await bystander.close()
        await offender.close()

    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "handler failed on Heartbeat v4 (correlation id 2)" in errors[0].getMessage()
    assert errors[0].exc_info is not None


@asyncio_test
async def test_peer_closing_mid_frame_closes_the_connection(caplog):
    caplog.set_level(logging.INFO, logger=TRANSPORT_LOGGER)
    recorder = FastRecorder()
    async with serving(recorder) as server:
        client = await Client.connect(server.bound_port)
        client.protocol.send_request(heartbeat("fast"), 1)
        await client.send_raw(client.protocol.send_bytes() + _framed(heartbeat("fast"), 2)[:10])
        assert (await client.receive())[0] == 1
        client.writer.write_eof()
        assert await client.closed_by_server()
        await client.close()

    assert "closed by the peer in the middle of a frame (10 bytes read)" in caplog.text


# -- lifecycle ---------------------------------------------------------------

@asyncio_test
async def test_stop_closes_listener_and_connections_and_cancels_pending_handlers():
    recorder = Recorder()
    server = KafkaProtocolServer(recorder, "127.0.0.1", 0)
    with pytest.raises(RuntimeError, match="await start"):
        server.bound_port
    await server.start()
    port = server.bound_port
    client = await Client.connect(port)
    await client.send(join_group("slow"))
    await asyncio.wait_for(recorder.join_entered.wait(), TIMEOUT_S)

    await server.stop()

    assert await client.closed_by_server()
    assert recorder.cancelled
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    await server.stop()  # idempotent
    with pytest.raises(RuntimeError, match="once"):
        await server.start()
    await client.close()


def test_constructor_validates_and_does_no_io():
    with pytest.raises(ValueError, match="port"):
        KafkaProtocolServer(Recorder, "127.0.0.1", 70000)
    with pytest.raises(ValueError, match="max_frame_bytes"):
        KafkaProtocolServer(Recorder, "127.0.0.1", 0, max_frame_bytes=0)


# -- a real kafka-python client ------------------------------------------------

class CannedCluster:
    """A one-broker "cluster": Metadata and FindCoordinator point at this server."""

    def __init__(self):
        self.apis = COORDINATOR_APIS.extended(ApiSpec(MetadataRequest, MetadataResponse, 0, 12))
        self.port = None
        self.seen = []

    async def __call__(self, decoded, info):
        request = decoded.request
        self.seen.append((decoded.api_name, decoded.api_version))
        answer = getattr(self, "_" + decoded.api_name.lower())
        return answer(decoded, request)

    def _apiversions(self, decoded, request):
        assert (request.client_software_name, decoded.client_id) == ("kafka-python", "zk-admin")
        return api_versions_response(decoded.response_version, self.apis)

    def _metadata(self, decoded, request):
        return build_message(MetadataResponse, decoded.api_version, cluster_id="zk-cluster",
                             controller_id=0, topics=[], brokers=[
                                 {"node_id": 0, "host": "127.0.0.1", "port": self.port,
                                  "rack": None}])

    def _findcoordinator(self, decoded, request):
        return response_for(decoded, coordinators=[
            {"key": key, "node_id": 0, "host": "127.0.0.1", "port": self.port,
             "error_code": 0, "error_message": None}
            for key in request.coordinator_keys])

    def _describegroups(self, decoded, request):
        return response_for(decoded, groups=[
            {"error_code": 0, "group_id": group_id, "group_state": "Empty",
             "protocol_type": "consumer", "protocol_data": "", "members": []}
            for group_id in request.groups])

    def _listgroups(self, decoded, request):
        return response_for(decoded, error_code=0, groups=[
            {"group_id": "group-a", "protocol_type": "consumer", "group_state": "Empty",
             "group_type": "classic"}])

    def _offsetfetch(self, decoded, request):
        return response_for(decoded, groups=[
            {"group_id": group.group_id, "error_code": 0, "topics": [
                {"name": "orders", "partitions": [
                    {"partition_index": 0, "committed_offset": 42,
                     "committed_leader_epoch": 3, "metadata": "m", "error_code": 0}]}]}
            for group in request.groups])

    def _offsetcommit(self, decoded, request):
        return response_for(decoded, topics=[
            {"name": t.name, "partitions": [
                {"partition_index": p.partition_index, "error_code": 0} for p in t.partitions]}
            for t in request.topics])

    def _leavegroup(self, decoded, request):
        return response_for(decoded, error_code=0, members=[
            {"member_id": m.member_id, "group_instance_id": m.group_instance_id,
             "error_code": 25}
            for m in request.members])

    def _deletegroups(self, decoded, request):
        return response_for(decoded, results=[
            {"group_id": g, "error_code": 0 if g == "group-a" else 69}
            for g in request.groups_names])


def _admin_session(port):
    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", client_id="zk-admin",
                             request_timeout_ms=5000, bootstrap_timeout_ms=10000)
    try:
        return {
            "broker_version": admin._manager.broker_version,
            "list": admin.list_groups(),
            "describe": admin.describe_groups(["group-a"]),
            "offsets": admin.list_group_offsets({"group-a": None}),
            "alter": admin.alter_group_offsets(
                "group-a", {TopicPartition("orders", 0): OffsetAndMetadata(7, "x", None)}),
            "remove": admin.remove_group_members(
                "group-a", [MemberToRemove(member_id="member-9", group_instance_id="i-9")]),
            "delete": admin.delete_groups(["group-a", "group-b"]),
        }
    finally:
        admin.close()


@asyncio_test
async def test_kafka_python_admin_client_negotiates_versions_and_round_trips(caplog):
    caplog.set_level(logging.DEBUG, logger=TRANSPORT_LOGGER)
    cluster = CannedCluster()
    async with serving(cluster, apis=cluster.apis) as server:
        cluster.port = server.bound_port
        results = await asyncio.to_thread(_admin_session, server.bound_port)

    # kafka-python 3.0.12 opens with ApiVersions v4; the codec refuses it
    # (KIP-511) and the client retries with v3, the highest we advertise.
    assert "answered ApiVersions v4 (correlation id 1) from the codec" in caplog.text
    assert cluster.seen[:2] == [("ApiVersions", 3), ("Metadata", 12)]
    assert set(cluster.seen[2:]) - {("Metadata", 12)} == {
        ("ApiVersions", 3), ("ListGroups", 5), ("FindCoordinator", 4),
        ("DescribeGroups", 5), ("OffsetFetch", 8), ("OffsetCommit", 8), ("LeaveGroup", 5),
        ("DeleteGroups", 2)}
    assert results["broker_version"] == (3, 2)  # inferred from JoinGroup v9
    assert results["list"] == [{"group_id": "group-a", "protocol_type": "consumer",
                                "group_state": "Empty", "group_type": "classic"}]
    assert results["describe"] == {"group-a": {
        "group_id": "group-a", "group_state": "Empty", "protocol_type": "consumer",
        "protocol_data": "", "members": [], "authorized_operations": None, "error": None}}
    assert results["offsets"] == {"group-a": {
        TopicPartition("orders", 0): OffsetAndMetadata(42, "m", 3)}}
    assert results["alter"] == {TopicPartition("orders", 0): NoError}
    remove, = results["remove"].items()
    assert remove == ("member-9", UnknownMemberIdError)
    assert results["delete"] == {"group-a": "OK", "group-b": "GroupIdNotFoundError"}


# -- the listener's sockets (rule 8) ----------------------------------------------

def _connect_while_the_loop_is_blocked(port: int, clients: int, wanted: int, deadline_s: float) -> int:
    """From another thread while the caller blocks the server's loop (nothing is
    accepted): start ``clients`` connections at once and return how many the
    kernel completed (queued for accept) once ``wanted`` did, or at the deadline."""
    sockets = []
    try:
        for _ in range(clients):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", port))
            sockets.append(sock)
        end = time.monotonic() + deadline_s
        connected: set = set()
        while len(connected) < wanted and time.monotonic() < end:
            _, writable, _ = select.select([], [s for s in sockets if s not in connected], [], 0.05)
            connected.update(s for s in writable if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0)
        return len(connected)
    finally:
        for sock in sockets:
            sock.close()


@pytest.mark.skipif(not reuse_port_spreads(), reason="SO_REUSEPORT spreads connections on Linux only")
@asyncio_test
async def test_the_listener_is_several_sockets_on_one_port_and_queues_more_than_one_backlog():
    async with serving(Recorder(), backlog=1, listen_sockets=4) as server:
        sockets = server.listening_sockets
        assert len(sockets) == 4
        assert {s.getsockname() for s in sockets} == {("127.0.0.1", server.bound_port)}
        assert all(s.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for s in sockets)
        # One socket with backlog 1 queues 2 connections and drops the next SYNs (ListenOverflows);
        # 64 connections spread over 4 such queues complete more than 2 while the loop accepts none.
        result = []
        thread = threading.Thread(target=lambda: result.append(
            _connect_while_the_loop_is_blocked(server.bound_port, 64, 3, TIMEOUT_S)))
        thread.start()
        thread.join()  # blocks the loop: nothing is accepted meanwhile
        assert result[0] >= 3
        client = await Client.connect(server.bound_port)  # and the listener still serves
        await client.send(heartbeat())
        assert (await client.receive())[1].error_code == 0
        await client.close()


@asyncio_test
async def test_one_listener_socket_is_bound_without_reuse_port():
    async with serving(Recorder(), listen_sockets=1) as server:
        (sock,) = server.listening_sockets
        assert not sock.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT)


@pytest.mark.parametrize("other_reuses_port", [False, True], ids=["plain", "reuse-port"])
@asyncio_test
async def test_a_port_another_socket_listens_on_is_refused_never_shared(other_reuses_port):
    with foreign_listener(other_reuses_port) as other:
        server = KafkaProtocolServer(Recorder(), "127.0.0.1", other.getsockname()[1], listen_sockets=4)
        with pytest.raises(OSError) as refused:
            await server.start()
        assert refused.value.errno == errno.EADDRINUSE
        assert "127.0.0.1" in str(refused.value)
        await server.stop()


def test_listen_sockets_must_be_at_least_one():
    with pytest.raises(ValueError, match="listen_sockets"):
        KafkaProtocolServer(Recorder, "127.0.0.1", 0, listen_sockets=0)
