"""The decoder's memo of repeated requests (zkcoord.wire.requests, rule 4):
a steady member's Heartbeat differs from its last one only in its
correlation id, and is decoded once."""

from __future__ import annotations

import pytest
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest
from kafka.protocol.parser import KafkaProtocol

from zkcoord.schemas import ConsumerGroupHeartbeatRequest
from zkcoord.wire import requests as wire_requests
from zkcoord.wire.errors import MalformedFrameError
from zkcoord.wire.registry import COORDINATOR_APIS
from zkcoord.wire.requests import decode_request


def frames(*messages, client_id="memo-test"):
    """Each message framed by one client (correlation ids 1, 2, ...), without the size prefix."""
    client = KafkaProtocol(client_id=client_id)
    out = []
    for message in messages:
        client.send_request(message)
        out.append(bytes(client.send_bytes())[4:])
    return out


def heartbeat(generation=7, member="member-1", version=4):
    return HeartbeatRequest(version=version, group_id="group-a", generation_id=generation, member_id=member,
                            group_instance_id=None)


@pytest.fixture
def apis():
    registry = COORDINATOR_APIS.without()  # a registry of its own: an empty memo
    assert registry.memo == {}
    return registry


@pytest.mark.parametrize("version", [0, 3, 4])
def test_a_repeated_heartbeat_is_decoded_once_with_its_own_correlation_id(apis, version):
    first, second, third = frames(heartbeat(version=version), heartbeat(version=version), heartbeat(version=version))
    a, b, c = (decode_request(f, apis) for f in (first, second, third))
    assert [d.correlation_id for d in (a, b, c)] == [1, 2, 3]
    assert b.request is a.request and c.request is a.request  # decoded once
    assert len(apis.memo) == 1
    for d in (a, b, c):
        assert (d.api_key, d.api_version, d.client_id, d.header_version) == (12, version, "memo-test",
                                                                             2 if version >= 4 else 1)
        assert d.request.to_dict() == heartbeat(version=version).to_dict()


def test_a_request_that_differs_beyond_its_correlation_id_is_decoded_again(apis):
    frame_a, frame_b, frame_c = frames(heartbeat(generation=7), heartbeat(generation=8), heartbeat(member="m-2"))
    other_client, = frames(heartbeat(generation=7), client_id="another")
    decoded = [decode_request(f, apis) for f in (frame_a, frame_b, frame_c, other_client)]
    assert [d.request.generation_id for d in decoded] == [7, 8, 7, 7]
    assert [d.request.member_id for d in decoded] == ["member-1", "member-1", "m-2", "member-1"]
    assert decoded[3].client_id == "another"
    assert len({id(d.request) for d in decoded}) == 4
    assert len(apis.memo) == 4


def test_a_steady_consumer_group_heartbeat_is_decoded_once(apis):
    steady = dict(version=0, group_id="g", member_id="m", member_epoch=5, instance_id=None, rack_id=None,
                  rebalance_timeout_ms=-1, subscribed_topic_names=None, server_assignor=None,
                  topic_partitions=None)
    a, b = (decode_request(f, apis) for f in frames(ConsumerGroupHeartbeatRequest(**steady),
                                                    ConsumerGroupHeartbeatRequest(**steady)))
    assert (a.correlation_id, b.correlation_id) == (1, 2)
    assert b.request is a.request and b.request.member_epoch == 5


def test_other_apis_are_not_memoized(apis):
    join = JoinGroupRequest(version=5, group_id="g", session_timeout_ms=10_000, rebalance_timeout_ms=10_000,
                            member_id="", group_instance_id=None, protocol_type="consumer", protocols=[])
    a, b = (decode_request(f, apis) for f in frames(join, join))
    assert a.request is not b.request
    assert apis.memo == {}


def test_a_malformed_frame_is_never_remembered(apis):
    good, = frames(heartbeat())
    truncated = good[:-3]
    for _ in range(2):
        with pytest.raises(MalformedFrameError):
            decode_request(truncated, apis)
    assert apis.memo == {}
    trailing = good + b"\x00"
    with pytest.raises(MalformedFrameError):
        decode_request(trailing, apis)
    decode_request(good, apis)
    with pytest.raises(MalformedFrameError):  # a remembered frame's prefix still fails
        decode_request(trailing, apis)


def test_a_frame_read_as_a_memoryview_uses_the_same_memo(apis):
    first, second = frames(heartbeat(), heartbeat())
    a = decode_request(first, apis)
    b = decode_request(memoryview(second), apis)  # the gateway's frames
    assert b.request is a.request and b.correlation_id == 2


def test_the_memo_is_bounded(apis, monkeypatch):
    monkeypatch.setattr(wire_requests, "MEMO_MAX_ENTRIES", 5)
    for generation in range(12):
        frame, = frames(heartbeat(generation=generation))
        assert decode_request(frame, apis).request.generation_id == generation
        assert len(apis.memo) <= 5


def test_a_large_heartbeat_is_decoded_every_time_and_never_kept(apis):
    big = HeartbeatRequest(version=4, group_id="group-a", generation_id=7, member_id="m" * 2000,
                           group_instance_id=None)
    a, b = (decode_request(f, apis) for f in frames(big, big))
    assert a.request is not b.request and b.request.member_id == "m" * 2000
    assert apis.memo == {}
