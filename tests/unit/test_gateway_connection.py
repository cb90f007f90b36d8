"""A gateway client connection's rules (zkcoord.gateway.connection) over
real loopback sockets: order of answers, streaming, acks=0, backpressure,
bad frames and a broker that goes away.

The broker here is a byte-level peer that answers each frame with its
correlation id and a body the test chose, after a delay the test controls;
the handler answers group requests when the test lets it. What the
gateway does with bytes is what is under test, not Kafka's semantics.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from kafka.protocol.consumer.group import HeartbeatRequest, HeartbeatResponse
from kafka.protocol.metadata import ApiVersionsRequest
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.schemas.fields.codecs import Int32

from zkcoord.core.limits import FRAMES_PER_TURN, RequestLimits
from zkcoord.gateway import connection as gc
from zkcoord.gateway.connection import ClientConnection
from zkcoord.wire.listener_security import PLAINTEXT_LISTENER
from zkcoord.wire.responses import response_for

LIST_OFFSETS, PRODUCE = 2, 0


def _frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A request frame whose body the broker peer does not read."""
    header = api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + correlation_id.to_bytes(4, "big") + b"\xff\xff"
    return len(header + body).to_bytes(4, "big") + header + body


def _message(message, correlation_id: int) -> bytes:
    message.with_header(correlation_id=correlation_id, client_id="t")
    return bytes(message.encode(header=True, framed=True))


class Broker:
    """Answers every frame with (correlation id + body), when ``release`` allows."""

    def __init__(self) -> None:
        self.bodies: dict[int, bytes] = {}  # correlation id -> answer body (default: b"ok")
        self.held: set[int] = set()  # correlation ids not answered until released
        self.received: list[int] = []
        self.transports: list[asyncio.Transport] = []
        self.paused = asyncio.Event()
        self._queue: list[tuple[asyncio.Transport, int]] = []
        self.server = None

    async def start(self) -> tuple[str, int]:
        broker = self

        class Peer(asyncio.Protocol):
            def connection_made(self, transport):
                self.transport, self.buffer = transport, bytearray()
                broker.transports.append(transport)

            def pause_writing(self):
                broker.paused.set()

            def data_received(self, data):
                self.buffer += data
                while len(self.buffer) >= 4:
                    size = int.from_bytes(self.buffer[:4], "big")
                    if len(self.buffer) < 4 + size:
                        break
                    correlation_id = int.from_bytes(self.buffer[8:12], "big", signed=True)
                    del self.buffer[:4 + size]
                    broker.received.append(correlation_id)
                    broker._queue.append((self.transport, correlation_id))
                broker.flush()

        self.server = await asyncio.get_running_loop().create_server(Peer, "127.0.0.1", 0)
        return "127.0.0.1", self.server.sockets[0].getsockname()[1]

    def flush(self) -> None:
        """Answer queued frames in order, stopping at the first held one."""
        while self._queue and self._queue[0][1] not in self.held:
            transport, correlation_id = self._queue.pop(0)
            body = self.bodies.get(correlation_id, b"ok")
            transport.write((4 + len(body)).to_bytes(4, "big") + correlation_id.to_bytes(4, "big") + body)

    def release(self, correlation_id: int) -> None:
        self.held.discard(correlation_id)
        self.flush()

    async def stop(self) -> None:
        for transport in self.transports:
            transport.abort()
        self.server.close()


class Handler:
    """Answers Heartbeats: at once, or when the test sets ``gate``."""

    def __init__(self) -> None:
        self.gate: asyncio.Event | None = None

    def handle_now(self, decoded, info):
        return None if self.gate is not None else self._answer(decoded)

    async def __call__(self, decoded, info):
        await self.gate.wait()
        return self._answer(decoded)

    @staticmethod
    def _answer(decoded):
        return response_for(decoded, throttle_time_ms=0, error_code=0)


class FakeGateway:
    """What a ClientConnection asks of its gateway."""

    def __init__(self, broker_address, max_frame_bytes: int = 1 << 20) -> None:
        self.handler = Handler()
        self.max_frame_bytes = max_frame_bytes
        self.request_limits = RequestLimits(max_frame_bytes, max_frame_bytes, max_frame_bytes)
        self.partial_requests_max_bytes = 4 * max_frame_bytes
        self.partial_bytes = 0
        self.broker_address = broker_address
        self.metrics = None
        self.security = PLAINTEXT_LISTENER
        self.upstream_ssl = None
        self.connections: list[ClientConnection] = []
        self._ids = iter(range(1, 1000))

    def next_connection_id(self):
        return next(self._ids)

    def register(self, connection):
        self.connections.append(connection)
        return True

    def unregister(self, connection):
        pass

    def upstream_candidates(self, broker_id):
        return [self.broker_address]

    def advertised(self, broker_id):
        return {PRODUCE: (3, 11), LIST_OFFSETS: (0, 8), 12: (0, 4), 18: (0, 3)}

    def versions_known(self, broker_id):
        return True

    def api_versions(self, broker_id):
        return self.advertised(broker_id), {}


class Client:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    async def send(self, *frames: bytes) -> None:
        self.writer.write(b"".join(frames))
        await self.writer.drain()

    async def answer(self) -> tuple[int, bytes]:
        size = int.from_bytes(await asyncio.wait_for(self.reader.readexactly(4), 10), "big")
        payload = await asyncio.wait_for(self.reader.readexactly(size), 10)
        return Int32.decode_from(payload, 0)[0], payload[4:]

    async def closed(self) -> bool:
        try:
            return await asyncio.wait_for(self.reader.read(1), 10) == b""
        except ConnectionError:
            return True


def in_scene(test):
    """Run ``test(scene)`` on a fresh loop with a broker peer, a gateway port
    (its own port: no broker id) and a factory of clients; 60 s at most."""

    def run():
        async def main():
            broker = Broker()
            address = await broker.start()
            gateway = FakeGateway(address)
            server = await asyncio.get_running_loop().create_server(
                lambda: ClientConnection(gateway, None), "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            clients = []

            async def connect() -> Client:
                client = Client(*await asyncio.open_connection("127.0.0.1", port))
                clients.append(client)
                return client

            try:
                await test((broker, gateway, connect))
            finally:
                for client in clients:
                    client.writer.close()
                server.close()
                await broker.stop()

        asyncio.run(asyncio.wait_for(main(), 60))

    run.__name__ = test.__name__
    return run


@in_scene
async def test_answers_come_back_in_request_order_whoever_made_them(scene):
    broker, gateway, connect = scene
    client = await connect()
    broker.held.add(1)
    gateway.handler.gate = asyncio.Event()
    await client.send(_frame(LIST_OFFSETS, 5, 1), _message(HeartbeatRequest[0](group_id="g", generation_id=1,
                                                                                 member_id="m"), 2))
    # The handler answers first, the broker later: the client still gets 1, then 2.
    gateway.handler.gate.set()
    await asyncio.sleep(0)
    broker.release(1)
    assert (await client.answer())[0] == 1
    correlation_id, body = await client.answer()
    assert correlation_id == 2 and HeartbeatResponse.decode(body, version=0).error_code == 0


@in_scene
async def test_requests_after_a_parked_group_request_wait_for_it(scene):
    broker, gateway, connect = scene
    client = await connect()
    gateway.handler.gate = asyncio.Event()
    await client.send(_message(HeartbeatRequest[0](group_id="g", generation_id=1, member_id="m"), 1),
                      _frame(LIST_OFFSETS, 5, 2))
    await asyncio.sleep(0.05)
    assert broker.received == []  # like a broker's muted channel: nothing more is read meanwhile
    gateway.handler.gate.set()
    assert [(await client.answer())[0] for _ in range(2)] == [1, 2]
    assert broker.received == [2]


@in_scene
async def test_a_large_answer_streams_through_byte_for_byte(scene):
    broker, gateway, connect = scene
    client = await connect()
    broker.bodies[5] = bytes(range(256)) * 20_000  # 5 MB
    await client.send(_frame(LIST_OFFSETS, 5, 5), _frame(LIST_OFFSETS, 5, 6))
    assert await client.answer() == (5, broker.bodies[5])
    assert await client.answer() == (6, b"ok")


@in_scene
async def test_produce_with_acks_0_gets_no_slot(scene):
    broker, gateway, connect = scene
    client = await connect()
    fire_and_forget = _message(ProduceRequest(version=9, transactional_id=None, acks=0, timeout_ms=100,
                                              topic_data=[]), 1)
    broker.bodies[1] = None  # never answered: a broker sends nothing for acks=0

    original = broker.flush

    def flush_without_acks_0():
        broker._queue = [(t, c) for t, c in broker._queue if c != 1]
        original()

    broker.flush = flush_without_acks_0
    await client.send(fire_and_forget, _frame(LIST_OFFSETS, 5, 2))
    assert await client.answer() == (2, b"ok")
    assert broker.received == [1, 2]


@in_scene
async def test_api_versions_are_answered_by_the_gateway(scene):
    broker, gateway, connect = scene
    client = await connect()
    await client.send(_message(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 9))
    correlation_id, body = await client.answer()
    from kafka.protocol.metadata import ApiVersionsResponse

    answer = ApiVersionsResponse.decode(body, version=3)
    assert correlation_id == 9 and {k.api_key for k in answer.api_keys} == {0, 2, 12, 18}
    await client.send(_frame(18, 9, 10))  # a version we do not know: KIP-511's v0 error answer
    correlation_id, body = await client.answer()
    assert correlation_id == 10 and ApiVersionsResponse.decode(body, version=0).error_code == 35
    assert broker.received == []


@pytest.mark.parametrize("bad", [
    (1 << 24).to_bytes(4, "big"),  # over the size limit
    _frame(28, 3, 1),  # TxnOffsetCommit: a group API zkcoord does not serve
    _frame(9999, 0, 1),  # no such API
])
def test_a_bad_frame_closes_that_connection_only(bad):
    in_scene(lambda scene: _bad_frame(scene, bad))()


async def _bad_frame(scene, bad):
    broker, gateway, connect = scene
    bystander, client = await connect(), await connect()
    await client.send(bad)
    assert await client.closed()
    await bystander.send(_frame(LIST_OFFSETS, 5, 3))
    assert await bystander.answer() == (3, b"ok")


@in_scene
async def test_a_broker_that_goes_away_closes_its_client_connections(scene):
    broker, gateway, connect = scene
    client = await connect()
    broker.held.add(1)
    await client.send(_frame(LIST_OFFSETS, 5, 1))
    while not broker.transports:
        await asyncio.sleep(0.01)
    broker.transports[0].abort()
    assert await client.closed()


@in_scene
async def test_a_client_that_does_not_read_stops_the_broker_being_read(scene):
    broker, gateway, connect = scene
    client = await connect()
    client.writer.transport.pause_reading()
    client.writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    broker.bodies[1] = b"x" * (64 << 20)  # 64 MB the client will not read for now
    await client.send(_frame(LIST_OFFSETS, 5, 1))
    await asyncio.wait_for(broker.paused.wait(), 30)  # the broker's socket filled up: the gateway stopped reading
    connection = gateway.connections[0]
    assert connection._transport.get_write_buffer_size() < 4 << 20  # not 64 MB held in the gateway
    client.writer.transport.resume_reading()
    correlation_id, body = await client.answer()
    assert correlation_id == 1 and len(body) == 64 << 20


def test_the_in_flight_limit_is_a_sane_number():
    assert 5 <= gc.MAX_IN_FLIGHT <= 4096


@in_scene
async def test_a_group_request_over_its_limit_is_refused_from_its_first_bytes(scene):
    """Only the size prefix and API key of a 512 KiB JoinGroup (limit 64 KiB)
    are sent: the connection is closed without the rest being waited for
    (before, the gateway buffered up to max_frame_bytes first)."""
    broker, gateway, connect = scene
    gateway.request_limits = RequestLimits(1 << 20, 64 << 10, 64 << 10)
    client, bystander = await connect(), await connect()
    await client.send((512 << 10).to_bytes(4, "big") + (11).to_bytes(2, "big"))  # JoinGroup's api key
    assert await client.closed()
    await bystander.send(_frame(LIST_OFFSETS, 5, 3))  # a forwarded request of the same size is not capped
    assert await bystander.answer() == (3, b"ok")


@in_scene
async def test_unfinished_requests_of_all_connections_are_capped_together(scene):
    """Each connection sends part of a frame; the one whose bytes would take
    the total over partial_requests_max_bytes is closed, the others stay."""
    broker, gateway, connect = scene
    gateway.partial_requests_max_bytes = 300_000
    first, second, third = await connect(), await connect(), await connect()
    part = (900_000).to_bytes(4, "big") + _frame(LIST_OFFSETS, 5, 1)[4:12] + bytes(140_000)
    await first.send(part)
    await second.send(part)
    while gateway.partial_bytes < 2 * len(part):
        await asyncio.sleep(0.01)
    await third.send(part)
    assert await third.closed()
    assert gateway.partial_bytes == 2 * len(part)
    first.writer.close()
    while gateway.partial_bytes > len(part):  # a closed connection's bytes no longer count
        await asyncio.sleep(0.01)


@in_scene
async def test_many_group_requests_in_one_write_are_answered_in_turns(scene):
    broker, gateway, connect = scene
    handled = []
    answer = gateway.handler.handle_now

    def ticking(decoded, info):  # the first schedules a callback: "tick" lands where that callback ran
        if not handled:
            asyncio.get_running_loop().call_soon(handled.append, "tick")
        handled.append(decoded.correlation_id)
        return answer(decoded, info)

    gateway.handler.handle_now = ticking
    client = await connect()
    count = 3 * FRAMES_PER_TURN + 5
    await client.send(*[_message(HeartbeatRequest[0](group_id="g", generation_id=1, member_id="m"), i)
                        for i in range(1, count + 1)], _frame(LIST_OFFSETS, 5, count + 1))
    assert [(await client.answer())[0] for _ in range(count + 1)] == list(range(1, count + 2))
    # One turn answers FRAMES_PER_TURN group requests; the rest wait for callbacks of their own.
    assert handled.index("tick") == FRAMES_PER_TURN
    assert [n for n in handled if n != "tick"] == list(range(1, count + 1))
    assert broker.received == [count + 1]


@in_scene
async def test_a_group_request_too_big_to_decode_inline_is_decoded_off_the_loop_and_answered_in_order(scene):
    """A group request above INLINE_DECODE_BYTES (an OffsetCommit of 460,000
    partitions is 8 MiB) is decoded in a worker thread while the loop serves
    others, then answered by the handler's awaited path with the cyclic
    collector paused (zkcoord.wire.bulk_work); the requests after it wait for
    it."""
    import gc as collector

    from zkcoord.core.limits import INLINE_DECODE_BYTES

    broker, gateway, connect = scene

    class Watched(Handler):
        def __init__(self):
            super().__init__()
            self.awaited = []

        def handle_now(self, decoded, info):
            return self._answer(decoded)

        async def __call__(self, decoded, info):
            self.awaited.append((decoded.correlation_id, collector.isenabled()))
            await asyncio.sleep(0)
            return self._answer(decoded)

    gateway.handler = Watched()
    was = collector.isenabled()
    collector.enable()
    try:
        client = await connect()
        big = _message(HeartbeatRequest[0](group_id="g" * (INLINE_DECODE_BYTES + 1), generation_id=1,
                                           member_id="m"), 1)
        await client.send(big, _message(HeartbeatRequest[0](group_id="g", generation_id=1, member_id="m"), 2),
                          _frame(LIST_OFFSETS, 5, 3))
        answers = [await client.answer() for _ in range(3)]
        enabled_after = collector.isenabled()
    finally:
        (collector.enable if was else collector.disable)()
    assert [a[0] for a in answers] == [1, 2, 3]
    assert [HeartbeatResponse.decode(a[1], version=0).error_code for a in answers[:2]] == [0, 0]
    assert gateway.handler.awaited == [(1, False)] and enabled_after  # only the big one: awaited, paused
    assert broker.received == [3]
