"""The gateway's wire pieces: cutting request frames, reading a Produce's
acks, decoding and re-encoding answers, and the address filter."""

from __future__ import annotations

import pytest
from kafka.protocol.admin.cluster import DescribeClusterResponse
from kafka.protocol.consumer.fetch import FetchResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataRequest, MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from zkcoord.gateway.rewrite import AddressBook, GatewayNode, rewrite_addresses
from zkcoord.gateway.routing import produce_expects_response
from zkcoord.wire.errors import FrameSizeError, MalformedFrameError
from zkcoord.wire.framing import RequestFrames, request_prefix
from zkcoord.wire.messages import build_message
from zkcoord.wire.responses import decode_response_frame, encode_response_frame

GATEWAY_PORTS = {0: 9401, 1: 9402}
BOOK = AddressBook(lambda b: ("gw.example", GATEWAY_PORTS[b]) if b in GATEWAY_PORTS else None,
                   (GatewayNode(2**30 + 1, "gw.example", 9400), GatewayNode(2**30 + 2, "gw2.example", 9500)))


def _request(message, correlation_id=7):
    message.with_header(correlation_id=correlation_id, client_id="test")
    return bytes(message.encode(header=True, framed=True))


def test_frames_are_cut_whole_whatever_the_reads():
    one = _request(MetadataRequest[1](topics=[]), 1)
    two = _request(MetadataRequest[9](topics=[], allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False), 2)
    frames = RequestFrames(1024)
    data = one + two
    got = []
    for i in range(len(data)):  # one byte at a time
        frames.feed(data[i:i + 1])
        while (frame := frames.next_frame()) is not None:
            got.append(frame)
    assert got == [one, two]
    assert [request_prefix(f) for f in got] == [(3, 1, 1), (3, 9, 2)]
    assert frames.buffered_bytes == 0


def test_an_oversized_or_negative_frame_is_refused_before_it_is_buffered():
    frames = RequestFrames(1024)
    frames.feed((2048).to_bytes(4, "big"))
    with pytest.raises(FrameSizeError):
        frames.next_frame()
    frames = RequestFrames(1024)
    frames.feed((-1).to_bytes(4, "big", signed=True))
    with pytest.raises(FrameSizeError):
        frames.next_frame()


def test_a_frame_too_short_for_a_header_is_malformed():
    with pytest.raises(MalformedFrameError):
        request_prefix(b"\x00\x00\x00\x03abc")


@pytest.mark.parametrize("version", [3, 7, 8, 9, 11])
@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("transactional_id", [None, "", "tx-" + "x" * 300])
def test_produce_acks_are_read_past_the_transactional_id(version, acks, transactional_id):
    frame = _request(ProduceRequest(version=version, transactional_id=transactional_id, acks=acks,
                                    timeout_ms=100, topic_data=[]))
    assert produce_expects_response(frame, version) is (acks != 0)


def _roundtrip(message_class, version, **fields):
    frame = encode_response_frame(build_message(message_class, version, **fields), version, 42)
    correlation_id, message = decode_response_frame(frame, message_class, version)
    assert correlation_id == 42
    return message


@pytest.mark.parametrize("version", [0, 1, 8, 9, 12])
def test_metadata_brokers_become_gateway_ports_and_daemons_are_added(version):
    message = _roundtrip(MetadataResponse, version, brokers=[
        {"node_id": 0, "host": "kafka-0", "port": 9092, "rack": "r1"},
        {"node_id": 1, "host": "kafka-1", "port": 9092, "rack": None},
        {"node_id": 7, "host": "kafka-7", "port": 9092, "rack": None}], cluster_id="c", controller_id=0, topics=[])
    seen = []
    book = AddressBook(BOOK.broker_address, BOOK.gateway_nodes, seen.extend)
    rewrite_addresses(3, message, book)
    assert [(b.node_id, b.host, b.port) for b in message.brokers] == [
        (0, "gw.example", 9401), (1, "gw.example", 9402),  # 7 has no gateway port: left out
        (2**30 + 1, "gw.example", 9400), (2**30 + 2, "gw2.example", 9500)]
    assert [s[:3] for s in seen] == [(0, "kafka-0", 9092), (1, "kafka-1", 9092), (7, "kafka-7", 9092)]
    frame = encode_response_frame(message, version, 43)  # still encodes at the client's version
    _, again = decode_response_frame(frame, MetadataResponse, version)
    assert [b.port for b in again.brokers] == [9401, 9402, 9400, 9500]


def test_describe_cluster_lists_gateways_too():
    message = _roundtrip(DescribeClusterResponse, 1, error_code=0, cluster_id="c", controller_id=0,
                         brokers=[{"broker_id": 1, "host": "kafka-1", "port": 9092, "rack": None}])
    rewrite_addresses(60, message, BOOK)
    assert [(b.broker_id, b.host, b.port) for b in message.brokers] == [
        (1, "gw.example", 9402), (2**30 + 1, "gw.example", 9400), (2**30 + 2, "gw2.example", 9500)]


def test_transaction_coordinators_become_gateway_ports():
    single = _roundtrip(FindCoordinatorResponse, 3, error_code=0, error_message=None, node_id=1,
                        host="kafka-1", port=9092)
    rewrite_addresses(10, single, BOOK)
    assert (single.node_id, single.host, single.port) == (1, "gw.example", 9402)
    batched = _roundtrip(FindCoordinatorResponse, 4, coordinators=[
        {"key": "tx-a", "node_id": 0, "host": "kafka-0", "port": 9092, "error_code": 0},
        {"key": "tx-b", "node_id": 7, "host": "kafka-7", "port": 9092, "error_code": 0},
        {"key": "tx-c", "node_id": -1, "host": "", "port": -1, "error_code": 15}])
    rewrite_addresses(10, batched, BOOK)
    assert [(c.key, c.node_id, c.host, c.port, c.error_code) for c in batched.coordinators] == [
        ("tx-a", 0, "gw.example", 9401, 0), ("tx-b", -1, "", -1, 15), ("tx-c", -1, "", -1, 15)]
    old = _roundtrip(FindCoordinatorResponse, 0, error_code=0, node_id=7, host="kafka-7", port=9092)
    rewrite_addresses(10, old, BOOK)
    assert (old.error_code, old.node_id) == (15, -1)
    encode_response_frame(old, 0, 1)  # v0 has no error message: still encodes


@pytest.mark.parametrize("message_class, api_key, version", [(FetchResponse, 1, 16), (FetchResponse, 1, 17),
                                                              (ProduceResponse, 0, 10), (ProduceResponse, 0, 11)])
def test_node_endpoints_of_fetch_and_produce_become_gateway_ports(message_class, api_key, version):
    message = _roundtrip(message_class, version, responses=[], throttle_time_ms=0, node_endpoints=[
        {"node_id": 1, "host": "kafka-1", "port": 9092, "rack": None},
        {"node_id": 7, "host": "kafka-7", "port": 9092, "rack": None}])
    rewrite_addresses(api_key, message, BOOK)
    assert [(e.node_id, e.host, e.port) for e in message.node_endpoints] == [(1, "gw.example", 9402)]


def test_an_answer_that_does_not_decode_is_malformed():
    frame = encode_response_frame(build_message(MetadataResponse, 9, brokers=[], cluster_id="c", controller_id=0,
                                                topics=[]), 9, 1)
    with pytest.raises(MalformedFrameError):
        decode_response_frame(frame[:-3], MetadataResponse, 9)
    with pytest.raises(MalformedFrameError):
        decode_response_frame(frame + b"\x00", MetadataResponse, 9)
