"""The wire codec against kafka-python's own client-side framing.

Requests are built the way kafka-python's clients build them (generated
classes, nested classes, `KafkaProtocol.send_request`), decoded by
`decode_request`; responses are encoded by `encode_response` and read back by
the client's `KafkaProtocol.receive_bytes`. Every advertised (api, version)
is exercised at least once.
"""

from __future__ import annotations

import uuid

import pytest
from kafka.protocol.admin.groups import (
    DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest,
)
from kafka.protocol.consumer.group import (
    HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    OffsetCommitRequest, OffsetFetchRequest, SyncGroupRequest, SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest, ApiVersionsResponse, FindCoordinatorRequest, MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.parser import KafkaProtocol

from zkcoord.schemas import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from zkcoord.wire.errors import (
    FrameSizeError, MalformedFrameError, MessageBuildError, ResponseEncodingError, UnsupportedRequestError,
)
from zkcoord.wire.framing import frame_size
from zkcoord.wire.messages import api_versions_response, build_message, build_response
from zkcoord.wire.registry import COORDINATOR_APIS, ApiSpec
from zkcoord.wire.requests import decode_request
from zkcoord.wire.responses import constant_response, encode_response, encoded_response, response_for

CLIENT_ID = "zk-test-client"

ADVERTISED = {
    8: (2, 10),   # OffsetCommit (v10: topic ids, KIP-848)
    9: (1, 10),   # OffsetFetch (v10: topic ids)
    10: (0, 4),   # FindCoordinator
    11: (0, 9),   # JoinGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    14: (0, 5),   # SyncGroup
    15: (0, 5),   # DescribeGroups
    68: (0, 1),   # ConsumerGroupHeartbeat (Kafka 4.4's)
    69: (0, 1),   # ConsumerGroupDescribe (Kafka 4.4's)
    16: (0, 5),   # ListGroups
    18: (0, 3),   # ApiVersions
    42: (0, 2),   # DeleteGroups
}

ALL_VERSIONS = [(key, v) for key, (lo, hi) in ADVERTISED.items() for v in range(lo, hi + 1)]


# -- requests, built as kafka-python's clients build them ----------------------

def _api_versions(v):
    return ApiVersionsRequest(version=v, client_software_name="zk-test",
                              client_software_version="1.0.0")


def _find_coordinator(v):
    # key_type 1 (transaction) is not something we serve, but it is not the
    # default, so a decoder that skipped the field would be caught.
    return FindCoordinatorRequest(version=v, key="group-a", key_type=1,
                                  coordinator_keys=["group-a", "group-b"])


def _join_group(v):
    protocol = JoinGroupRequest.JoinGroupRequestProtocol
    return JoinGroupRequest(
        version=v, group_id="group-a", session_timeout_ms=10000,
        rebalance_timeout_ms=300000, member_id="member-1", group_instance_id="instance-1",
        protocol_type="consumer", reason="rebalance needed",
        protocols=[protocol(version=v, name="range", metadata=b"\x00\x01"),
                   protocol(version=v, name="roundrobin", metadata=b"\x02")])


def _sync_group(v):
    assignment = SyncGroupRequest.SyncGroupRequestAssignment
    return SyncGroupRequest(
        version=v, group_id="group-a", generation_id=7, member_id="member-1",
        group_instance_id="instance-1", protocol_type="consumer", protocol_name="range",
        assignments=[assignment(version=v, member_id="member-1", assignment=b"\x00\x03"),
                     assignment(version=v, member_id="member-2", assignment=b"")])


def _heartbeat(v):
    return HeartbeatRequest(version=v, group_id="group-a", generation_id=7,
                            member_id="member-1", group_instance_id="instance-1")


def _leave_group(v):
    if v < 3:
        return LeaveGroupRequest(version=v, group_id="group-a", member_id="member-1")
    identity = LeaveGroupRequest.MemberIdentity
    return LeaveGroupRequest(version=v, group_id="group-a", members=[
        identity(version=v, member_id="member-1", group_instance_id="instance-1",
                 reason="shutting down"),
        identity(version=v, member_id="member-2", group_instance_id=None, reason=None)])


def _offset_commit(v):
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    partition = topic.OffsetCommitRequestPartition
    return OffsetCommitRequest(
        version=v, group_id="group-a", generation_id_or_member_epoch=7, member_id="member-1",
        group_instance_id="instance-1", retention_time_ms=86400000,
        topics=[topic(version=v, name="orders", partitions=[
            partition(version=v, partition_index=0, committed_offset=42,
                      committed_leader_epoch=5, committed_metadata="meta"),
            partition(version=v, partition_index=1, committed_offset=43,
                      committed_leader_epoch=-1, committed_metadata=None)])])


def _offset_fetch(v):
    if v < 8:
        topic = OffsetFetchRequest.OffsetFetchRequestTopic
        return OffsetFetchRequest(
            version=v, group_id="group-a", require_stable=True,
            topics=[topic(version=v, name="orders", partition_indexes=[0, 1])])
    group = OffsetFetchRequest.OffsetFetchRequestGroup
    topics = group.OffsetFetchRequestTopics
    return OffsetFetchRequest(version=v, require_stable=True, groups=[
        group(version=v, group_id="group-a", member_id="member-1", member_epoch=3,
              topics=[topics(version=v, name="orders", partition_indexes=[0, 1])]),
        group(version=v, group_id="group-b", member_id=None, member_epoch=-1, topics=None)])


def _describe_groups(v):
    return DescribeGroupsRequest(version=v, groups=["group-a", "group-b"],
                                 include_authorized_operations=True)


def _list_groups(v):
    return ListGroupsRequest(version=v, states_filter=["Stable", "Empty"],
                             types_filter=["classic"])


def _delete_groups(v):
    return DeleteGroupsRequest(version=v, groups_names=["group-a", "group-b"])


def _consumer_group_heartbeat(v):
    partitions = ConsumerGroupHeartbeatRequest.TopicPartitions
    return ConsumerGroupHeartbeatRequest(
        version=v, group_id="group-a", member_id="member-1", member_epoch=3, instance_id="instance-1",
        rack_id="rack-a", rebalance_timeout_ms=30000, subscribed_topic_names=["orders"],
        subscribed_topic_regex="ord.*", server_assignor="range",
        topic_partitions=[partitions(version=v, topic_id=uuid.UUID(int=7), partitions=[0, 2])])


def _consumer_group_describe(v):
    return ConsumerGroupDescribeRequest(version=v, group_ids=["group-a", "group-b"],
                                        include_authorized_operations=True)


REQUESTS = {18: _api_versions, 10: _find_coordinator, 11: _join_group, 14: _sync_group,
            12: _heartbeat, 13: _leave_group, 8: _offset_commit, 9: _offset_fetch,
            15: _describe_groups, 16: _list_groups, 42: _delete_groups,
            68: _consumer_group_heartbeat, 69: _consumer_group_describe}


# -- responses, as plain values a handler would pass ------------------------

_PARTITION_OFFSETS = [
    {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 5,
     "metadata": "meta", "error_code": 0},
    {"partition_index": 1, "committed_offset": -1, "committed_leader_epoch": -1,
     "metadata": None, "error_code": 0},
]

RESPONSES = {
    10: {"throttle_time_ms": 5, "error_code": 0, "error_message": None, "node_id": 1,
         "host": "coord-1.example", "port": 9093,
         "coordinators": [
             {"key": "group-a", "node_id": 1, "host": "coord-1.example", "port": 9093,
              "error_code": 0, "error_message": None},
             {"key": "group-b", "node_id": -1, "host": "", "port": -1, "error_code": 15,
              "error_message": "The coordinator is not available."}]},
    11: {"throttle_time_ms": 5, "error_code": 0, "generation_id": 7,
         "protocol_type": "consumer", "protocol_name": "range", "leader": "member-1",
         "skip_assignment": True, "member_id": "member-1",
         "members": [{"member_id": "member-1", "group_instance_id": "instance-1",
                      "metadata": b"\x00\x01"},
                     {"member_id": "member-2", "group_instance_id": None, "metadata": b""}]},
    14: {"throttle_time_ms": 5, "error_code": 0, "protocol_type": "consumer",
         "protocol_name": "range", "assignment": b"\x00\x01\x02"},
    12: {"throttle_time_ms": 5, "error_code": 27},
    13: {"throttle_time_ms": 5, "error_code": 0,
         "members": [{"member_id": "member-1", "group_instance_id": "instance-1", "error_code": 0},
                     {"member_id": "member-2", "group_instance_id": None, "error_code": 25}]},
    8: {"throttle_time_ms": 5,
        "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "error_code": 0},
                                                     {"partition_index": 1, "error_code": 22}]}]},
    9: {"throttle_time_ms": 5, "error_code": 0,
        "topics": [{"name": "orders", "partitions": _PARTITION_OFFSETS}],
        "groups": [{"group_id": "group-a", "error_code": 0,
                    "topics": [{"name": "orders", "partitions": _PARTITION_OFFSETS}]},
                   {"group_id": "group-b", "error_code": 69, "topics": []}]},
    15: {"throttle_time_ms": 5, "groups": [
        {"error_code": 0, "group_id": "group-a", "group_state": "Stable",
         "protocol_type": "consumer", "protocol_data": "range", "authorized_operations": None,
         "members": [{"member_id": "member-1", "group_instance_id": "instance-1",
                      "client_id": "client-1", "client_host": "/127.0.0.1",
                      "member_metadata": b"\x00\x01", "member_assignment": b"\x00\x02"}]},
        {"error_code": 69, "group_id": "group-b", "group_state": "Dead",
         "protocol_type": "", "protocol_data": "", "members": []}]},
    16: {"throttle_time_ms": 5, "error_code": 0, "groups": [
        {"group_id": "group-a", "protocol_type": "consumer", "group_state": "Stable",
         "group_type": "classic"}]},
    42: {"throttle_time_ms": 5, "results": [{"group_id": "group-a", "error_code": 0},
                                            {"group_id": "group-b", "error_code": 69}]},
    68: {"throttle_time_ms": 5, "error_code": 0, "error_message": None, "member_id": "member-1",
         "member_epoch": 4, "heartbeat_interval_ms": 5000, "assignment": {"topic_partitions": [
             {"topic_id": uuid.UUID(int=7), "partitions": [0, 1]}]}},
    69: {"throttle_time_ms": 5, "groups": [
        {"error_code": 0, "error_message": None, "group_id": "group-a", "group_state": "Stable",
         "group_epoch": 4, "assignment_epoch": 4, "assignor_name": "uniform", "authorized_operations": 8,
         "members": [{"member_id": "member-1", "instance_id": None, "rack_id": None, "member_epoch": 4,
                      "client_id": "client-1", "client_host": "/127.0.0.1", "subscribed_topic_names": ["orders"],
                      "subscribed_topic_regex": None, "member_type": 1,
                      "assignment": {"topic_partitions": [
                          {"topic_id": uuid.UUID(int=7), "topic_name": "orders", "partitions": [0]}]},
                      "target_assignment": {"topic_partitions": []}}]},
        {"error_code": 69, "error_message": "Group group-b not found.", "group_id": "group-b",
         "group_state": "", "group_epoch": 0, "assignment_epoch": 0, "assignor_name": "", "members": []}]},
}


def client_send(request, client=None):
    """(client, DecodedRequest) after the client framed `request`."""
    client = client or KafkaProtocol(client_id=CLIENT_ID)
    client.send_request(request)
    frame = bytes(client.send_bytes())
    assert frame_size(frame[:4], 1 << 20) == len(frame) - 4
    return client, decode_request(frame[4:])


def client_receive(client, frame):
    (correlation_id, response), = client.receive_bytes(frame)
    return correlation_id, response


# -- the registry -----------------------------------------------------------

def test_advertised_versions_are_kafka_39_within_kafka_python_schemas():
    assert COORDINATOR_APIS.version_table() == ADVERTISED
    assert [s.name for s in COORDINATOR_APIS] == [
        "OffsetCommit", "OffsetFetch", "FindCoordinator", "JoinGroup", "Heartbeat",
        "LeaveGroup", "SyncGroup", "DescribeGroups", "ListGroups", "ApiVersions",
        "DeleteGroups", "ConsumerGroupHeartbeat", "ConsumerGroupDescribe"]


@pytest.mark.parametrize("request_class,response_class,low,high", [
    (OffsetCommitRequest, COORDINATOR_APIS[8].response_class, 0, 9),   # v0-1 not in schema
    (OffsetFetchRequest, COORDINATOR_APIS[9].response_class, 0, 9),    # v0 not in schema
    (JoinGroupRequest, JoinGroupResponse, 0, 10),                      # no v10 class
    (JoinGroupRequest, SyncGroupResponse, 0, 5),                       # mismatched pair
    (JoinGroupRequest, JoinGroupResponse, 5, 4),                       # empty range
])
def test_api_spec_refuses_versions_the_classes_cannot_decode(request_class, response_class,
                                                             low, high):
    with pytest.raises(ValueError):
        ApiSpec(request_class, response_class, low, high)


def test_registry_can_be_extended_for_other_servers():
    extended = COORDINATOR_APIS.extended(ApiSpec(MetadataRequest, MetadataResponse, 0, 12))
    assert extended.version_table() == {**ADVERTISED, 3: (0, 12)}
    assert 3 not in COORDINATOR_APIS


# -- every advertised api and version round-trips ------------------------------

@pytest.mark.parametrize("api_key,version", ALL_VERSIONS)
def test_request_from_kafka_python_client_decodes_exactly(api_key, version):
    sent = REQUESTS[api_key](version)
    client, decoded = client_send(sent)

    assert (decoded.api_key, decoded.api_version, decoded.correlation_id,
            decoded.client_id) == (api_key, version, 1, CLIENT_ID)
    assert decoded.immediate_response is None
    assert decoded.response_version == version
    flexible = sent.flexible_version_q(version)
    assert decoded.header_version == (2 if flexible else 1)
    assert type(decoded.request) is type(sent)
    assert decoded.request.version == version
    assert decoded.request.to_dict() == sent.to_dict()


@pytest.mark.parametrize("api_key,version", [kv for kv in ALL_VERSIONS if kv[0] != 18])
def test_response_reaches_kafka_python_client_exactly(api_key, version):
    client, decoded = client_send(REQUESTS[api_key](version))
    response = response_for(decoded, **RESPONSES[api_key])
    expected = response.to_dict()

    correlation_id, received = client_receive(client, encode_response(decoded, response))

    assert correlation_id == decoded.correlation_id
    assert type(received) is COORDINATOR_APIS[api_key].response_class
    assert received.version == version
    assert received.to_dict() == expected


CONSTANT_FIELDS = {  # responses whose fields are plain values: what constant_response takes
    12: {"throttle_time_ms": 0, "error_code": 27},
    14: {"throttle_time_ms": 0, "error_code": 27, "protocol_type": None, "protocol_name": None,
         "assignment": b""},
    16: {"throttle_time_ms": 0, "error_code": 15, "groups": ()},
}


@pytest.mark.parametrize("api_key,version", [kv for kv in ALL_VERSIONS if kv[0] in CONSTANT_FIELDS])
def test_constant_response_frames_are_what_kafka_python_encodes(api_key, version):
    fields = CONSTANT_FIELDS[api_key]
    client = None
    for _ in range(2):  # the second request has another correlation id, same message
        client, decoded = client_send(REQUESTS[api_key](version), client)
        shared = constant_response(decoded, **fields)
        assert constant_response(decoded, **fields) is shared
        frame = encode_response(decoded, shared)

        assert frame == encode_response(decoded, response_for(decoded, **fields))
        received_id, received = client_receive(client, frame)
        assert received_id == decoded.correlation_id
        assert received.to_dict() == response_for(decoded, **fields).to_dict()


@pytest.mark.parametrize("version", range(0, 4))
def test_api_versions_response_lists_the_advertised_table(version):
    client, decoded = client_send(_api_versions(version))
    response = api_versions_response(decoded.response_version)

    _, received = client_receive(client, encode_response(decoded, response))

    assert received.version == version
    assert received.error_code == 0
    assert {e.api_key: (e.min_version, e.max_version) for e in received.api_keys} == ADVERTISED
    if version >= 1:
        assert received.throttle_time_ms == 0


# -- exact values for the version-specific shapes --------------------------------

def test_join_group_v9_request_exact_values():
    _, decoded = client_send(_join_group(9))
    assert decoded.request.to_dict() == {
        "group_id": "group-a", "session_timeout_ms": 10000, "rebalance_timeout_ms": 300000,
        "member_id": "member-1", "group_instance_id": "instance-1",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": "\x00\x01"},
                      {"name": "roundrobin", "metadata": "\x02"}],
        "reason": "rebalance needed"}
    assert [p.metadata for p in decoded.request.protocols] == [b"\x00\x01", b"\x02"]


def test_join_group_v0_request_carries_only_v0_fields():
    _, decoded = client_send(_join_group(0))
    assert decoded.request.to_dict() == {
        "group_id": "group-a", "session_timeout_ms": 10000, "member_id": "member-1",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": "\x00\x01"},
                      {"name": "roundrobin", "metadata": "\x02"}]}
    # absent fields read as the schema default
    assert decoded.request.rebalance_timeout_ms == -1
    assert decoded.request.group_instance_id is None


def test_find_coordinator_v4_batches_coordinator_keys():
    _, v4 = client_send(_find_coordinator(4))
    _, v3 = client_send(_find_coordinator(3))
    assert v4.request.to_dict() == {"key_type": 1, "coordinator_keys": ["group-a", "group-b"]}
    assert v3.request.to_dict() == {"key": "group-a", "key_type": 1}


def test_leave_group_v3_batches_members_and_v5_adds_reason():
    _, v2 = client_send(_leave_group(2))
    _, v3 = client_send(_leave_group(3))
    _, v5 = client_send(_leave_group(5))
    assert v2.request.to_dict() == {"group_id": "group-a", "member_id": "member-1"}
    assert v3.request.to_dict() == {"group_id": "group-a", "members": [
        {"member_id": "member-1", "group_instance_id": "instance-1"},
        {"member_id": "member-2", "group_instance_id": None}]}
    assert [(m.member_id, m.reason) for m in v5.request.members] == [
        ("member-1", "shutting down"), ("member-2", None)]


def test_offset_fetch_v8_carries_several_groups():
    _, decoded = client_send(_offset_fetch(8))
    assert decoded.request.to_dict() == {"require_stable": True, "groups": [
        {"group_id": "group-a", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]},
        {"group_id": "group-b", "topics": None}]}


def test_offset_fetch_v2_null_topics_means_all_topics():
    _, decoded = client_send(OffsetFetchRequest(version=2, group_id="group-a", topics=None))
    assert decoded.request.to_dict() == {"group_id": "group-a", "topics": None}


def test_offset_commit_v2_retention_and_v6_leader_epoch():
    _, v2 = client_send(_offset_commit(2))
    _, v9 = client_send(_offset_commit(9))
    assert v2.request.to_dict() == {
        "group_id": "group-a", "generation_id_or_member_epoch": 7, "member_id": "member-1",
        "retention_time_ms": 86400000, "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_metadata": "meta"},
            {"partition_index": 1, "committed_offset": 43, "committed_metadata": None}]}]}
    assert v9.request.to_dict() == {
        "group_id": "group-a", "generation_id_or_member_epoch": 7, "member_id": "member-1",
        "group_instance_id": "instance-1", "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": 5,
             "committed_metadata": "meta"},
            {"partition_index": 1, "committed_offset": 43, "committed_leader_epoch": -1,
             "committed_metadata": None}]}]}


def test_sync_group_v5_response_exact_values_at_the_client():
    client, decoded = client_send(_sync_group(5))
    response = response_for(decoded, error_code=0, protocol_type="consumer",
                            protocol_name="range", assignment=b"\x00\x01")
    _, received = client_receive(client, encode_response(decoded, response))
    assert (received.throttle_time_ms, received.error_code, received.protocol_type,
            received.protocol_name, received.assignment) == (0, 0, "consumer", "range", b"\x00\x01")


def test_build_response_drops_fields_the_version_lacks():
    response = build_response(11, 0, **RESPONSES[11])
    assert response.to_dict() == {
        "error_code": 0, "generation_id": 7, "protocol_name": "range", "leader": "member-1",
        "member_id": "member-1", "members": [
            {"member_id": "member-1", "metadata": "\x00\x01"},
            {"member_id": "member-2", "metadata": ""}]}


# -- ApiVersions of a version we do not serve (KIP-511) -------------------------

def test_too_new_api_versions_gets_v0_unsupported_version_reply():
    version = 4  # the newest kafka-python knows; it opens with it
    client, decoded = client_send(_api_versions(version))

    assert (decoded.api_key, decoded.api_version, decoded.correlation_id,
            decoded.client_id) == (18, version, 1, CLIENT_ID)
    assert decoded.request is None
    assert decoded.response_version == 0
    reply = decoded.immediate_response
    assert reply.to_dict(meta=True)["_version"] == 0
    assert reply.error_code == 35

    _, received = client_receive(client, encode_response(decoded, reply))
    assert type(received) is ApiVersionsResponse
    assert received.version == 0
    assert received.error_code == 35
    assert {e.api_key: (e.min_version, e.max_version) for e in received.api_keys} == ADVERTISED


def test_api_versions_newer_than_kafka_python_knows_gets_the_same_reply():
    # A future client's v7 body is unknown to us: build v3 and relabel the header.
    request = _api_versions(3)
    request.with_header(correlation_id=99, client_id="future-client")
    request.header.request_api_version = 7
    frame = bytes(request.encode(header=True, framed=True))

    decoded = decode_request(frame[4:])

    assert (decoded.api_key, decoded.api_version, decoded.correlation_id,
            decoded.client_id) == (18, 7, 99, "future-client")
    assert decoded.immediate_response.error_code == 35
    response_frame = encode_response(decoded, decoded.immediate_response)
    received = ApiVersionsResponse.decode(response_frame, header=True, framed=True)
    assert received.header.correlation_id == 99
    assert (received.version, received.error_code) == (0, 35)


# -- requests we do not serve ----------------------------------------------

@pytest.mark.parametrize("request_,api_key,version", [
    (MetadataRequest(version=12, topics=None), 3, 12),             # unknown to the coordinator
    (FindCoordinatorRequest(version=5, coordinator_keys=["g"]), 10, 5),
    (DescribeGroupsRequest(version=6, groups=["g"]), 15, 6),
    (OffsetCommitRequest(version=1, group_id="g", topics=[]), 8, 1),
    (OffsetFetchRequest(version=0, group_id="g", topics=[]), 9, 0),
])
def test_unserved_api_or_version_raises_with_header_ids(request_, api_key, version):
    client = KafkaProtocol(client_id=CLIENT_ID)
    client.send_request(request_, correlation_id=41)
    frame = bytes(client.send_bytes())

    with pytest.raises(UnsupportedRequestError) as info:
        decode_request(frame[4:])

    error = info.value
    assert (error.api_key, error.api_version, error.correlation_id,
            error.client_id) == (api_key, version, 41, CLIENT_ID)


# -- malformed frames --------------------------------------------------------

@pytest.mark.parametrize("frame", [b"", b"\x00", b"\x00\x0b\x00\x05\x00\x00", b"\x00\x0b\x00\x05\x00\x00\x00\x01\x00\x09abc"])
def test_unreadable_header_is_malformed(frame):
    with pytest.raises(MalformedFrameError) as info:
        decode_request(frame)
    assert (info.value.api_key, info.value.correlation_id) == (None, None)


@pytest.mark.parametrize("version", [5, 9])
def test_every_truncation_of_a_body_is_malformed(version):
    client = KafkaProtocol(client_id=CLIENT_ID)
    client.send_request(_join_group(version), correlation_id=8)
    frame = bytes(client.send_bytes())[4:]
    header_end = 2 + 2 + 4 + 2 + len(CLIENT_ID) + (1 if version >= 6 else 0)

    for end in range(header_end, len(frame)):
        with pytest.raises(MalformedFrameError) as info:
            decode_request(frame[:end])
        assert (info.value.api_key, info.value.api_version,
                info.value.correlation_id) == (11, version, 8)


def test_trailing_bytes_after_the_body_are_malformed():
    client = KafkaProtocol(client_id=CLIENT_ID)
    client.send_request(_heartbeat(3))
    frame = bytes(client.send_bytes())[4:]
    with pytest.raises(MalformedFrameError, match="1 trailing bytes"):
        decode_request(frame + b"\x00")


def test_null_in_a_non_nullable_field_is_malformed():
    request = HeartbeatRequest(version=3, group_id=None, generation_id=1, member_id="m")
    client = KafkaProtocol(client_id=CLIENT_ID)
    client.send_request(request)
    with pytest.raises(MalformedFrameError, match="group_id is null"):
        decode_request(bytes(client.send_bytes())[4:])


def test_null_nested_in_a_struct_array_is_malformed():
    identity = LeaveGroupRequest.MemberIdentity
    request = LeaveGroupRequest(version=4, group_id="g", members=[
        identity(version=4, member_id="m-1", group_instance_id=None),
        identity(version=4, member_id=None, group_instance_id="i-2")])
    client = KafkaProtocol(client_id=CLIENT_ID)
    client.send_request(request)
    with pytest.raises(MalformedFrameError, match=r"members\[1\]\.member_id is null"):
        decode_request(bytes(client.send_bytes())[4:])


@pytest.mark.parametrize("prefix,limit", [(b"\xff\xff\xff\xff", 1024), (b"\x00\x00\x04\x01", 1024)])
def test_frame_size_outside_limit_is_refused(prefix, limit):
    with pytest.raises(FrameSizeError) as info:
        frame_size(prefix, limit)
    assert info.value.size in (-1, 1025)


def test_frame_size_at_limit_is_accepted():
    assert frame_size(b"\x00\x00\x04\x00", 1024) == 1024


# -- encode_response refuses responses that do not fit -------------------------

def test_encode_response_refuses_another_apis_response():
    _, decoded = client_send(_heartbeat(2))
    with pytest.raises(ResponseEncodingError, match="needs a HeartbeatResponse"):
        encode_response(decoded, build_response(14, 2, error_code=0))


def test_encode_response_refuses_a_response_built_at_another_version():
    _, decoded = client_send(_heartbeat(2))
    with pytest.raises(ResponseEncodingError, match="built at v4"):
        encode_response(decoded, build_response(12, 4, error_code=0))


def test_encode_response_translates_encoder_failures():
    _, decoded = client_send(_heartbeat(2))
    with pytest.raises(ResponseEncodingError, match="cannot encode HeartbeatResponse v2"):
        encode_response(decoded, response_for(decoded, error_code="not a number"))


def test_build_message_refuses_unknown_fields():
    with pytest.raises(MessageBuildError, match="JoinGroupResponse.members\\[0\\] has no field 'memberid'"):
        build_message(JoinGroupResponse, 5, members=[{"memberid": "m"}])
    with pytest.raises(MessageBuildError, match="no v10"):
        build_message(JoinGroupResponse, 10)
    with pytest.raises(MessageBuildError, match="not served"):
        build_response(3, 0)


def test_a_response_encoded_ahead_is_sent_as_encoded_and_only_for_its_request():
    client, decoded = client_send(REQUESTS[14](5))
    response = response_for(decoded, **RESPONSES[14])
    ahead = encoded_response(decoded, response)
    assert ahead.message is response
    assert encode_response(decoded, ahead) == encode_response(decoded, response)
    _, other = client_send(REQUESTS[14](5), client)  # the next correlation id
    with pytest.raises(ResponseEncodingError, match="encoded for correlation id 1"):
        encode_response(other, ahead)


def test_a_big_answer_encoded_ahead_keeps_only_its_bytes_and_its_error():
    """The daemon's big answers are encoded in a worker thread without keeping
    the message: its objects (100,000 partitions) are freed there."""
    import gc

    _, decoded = client_send(REQUESTS[14](5))
    response = response_for(decoded, **RESPONSES[14])
    expected = encode_response(decoded, response)
    ahead = encoded_response(decoded, response, keep_message=False)
    assert ahead.message is None and not any(r is response for r in gc.get_referents(ahead))
    assert encode_response(decoded, ahead) == expected
    assert ahead.error_code == RESPONSES[14].get("error_code", 0)


def test_cached_responses_with_nested_fields_are_encoded_once_and_stay_right_when_the_cache_empties(monkeypatch):
    import zkcoord.wire.responses as codec

    monkeypatch.setattr(codec, "_MAX_CONSTANTS", 2)
    built = []

    def fields(partition):
        def make():
            built.append(partition)
            return {"throttle_time_ms": 0, "topics": [
                {"name": "orders", "partitions": [{"partition_index": partition, "error_code": 0}]}]}
        return make

    client = None
    for partition in (0, 0, 1, 2, 0):  # the third new key empties the cache
        client, decoded = client_send(REQUESTS[8](8), client)
        message = codec.cached_response(decoded, ("orders", partition, 0), fields(partition))
        frame = encode_response(decoded, message)
        assert frame == encode_response(decoded, response_for(decoded, **fields(partition)()))
        built.pop()  # the reference build above
        _, received = client_receive(client, frame)
        assert [p.partition_index for t in received.topics for p in t.partitions] == [partition]
    assert built == [0, 1, 2, 0]  # partition 0 built again after the cache emptied
    assert len(codec._CONSTANTS) == len(codec._CONSTANT_BODIES) == 2
