"""zkcoord.client.consumer_protocol's pieces that need no server: the
subscription by regular expression, the wire conversions and the errors a
member's failures become."""

from __future__ import annotations

import uuid

import kafka.errors as kerr
import pytest
from kafka.structs import TopicPartition

from zkcoord.client.consumer_protocol import (
    ConsumerProtocolSubscription, _error, _response, _wire_request, check_pattern, new_member_id,
)
from zkcoord.client.membership import Failure, HeartbeatRequest
from zkcoord.schemas import ConsumerGroupHeartbeatResponse
from zkcoord.topic_ids import topic_id_text

T = uuid.UUID(int=1)


def test_a_pattern_is_the_coordinators_to_match():
    sub = ConsumerProtocolSubscription("earliest")
    sub.subscribe(pattern="orders-\\d+")
    assert (sub.regex, sub.subscription, sub.subscribed_pattern, sub.partitions_auto_assigned()) == (
        "orders-\\d+", set(), None, True)
    version = sub.version
    sub.assign_from_subscribed([TopicPartition("orders-1", 0), TopicPartition("orders-2", 3)])
    assert sub.subscription == {"orders-1", "orders-2"}  # the topics of the assignment
    assert sub.assigned_partitions() == {TopicPartition("orders-1", 0), TopicPartition("orders-2", 3)}
    assert sub.version == version  # an assignment is not a new subscription
    sub.unsubscribe()
    assert (sub.regex, sub.version) == (None, version + 1)


def test_topics_outside_the_subscription_are_taken_as_kafka_does():
    sub = ConsumerProtocolSubscription("earliest")
    sub.subscribe(topics=["a"])
    sub.assign_from_subscribed([TopicPartition("a", 0), TopicPartition("b", 0)])  # b: unsubscribed since
    assert sub.assigned_partitions() == {TopicPartition("a", 0), TopicPartition("b", 0)}
    assert "b" in sub.group_subscription()  # its metadata is kept


@pytest.mark.parametrize("pattern", ["(", "a{2,1}", "(?<!x)y"])
def test_patterns_re2j_cannot_compile_are_refused_here(pattern):
    with pytest.raises(ValueError, match="not a valid regular expression in RE2J's syntax"):
        check_pattern(pattern)
    with pytest.raises(ValueError):
        ConsumerProtocolSubscription().subscribe(pattern=pattern)


def test_member_ids_are_kafkas_uuid_text():
    ids = {new_member_id() for _ in range(100)}
    assert len(ids) == 100 and all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_requests_and_answers_on_the_wire():
    request = HeartbeatRequest("g", "m", 3, "i", owned=((topic_id_text(T), (0, 2)),), subscribed_topic_names=("a",))
    wire = _wire_request(request)
    assert (wire.API_VERSION, wire.group_id, wire.member_id, wire.member_epoch, wire.instance_id) == (1, "g", "m", 3, "i")
    assert [(t.topic_id, t.partitions) for t in wire.topic_partitions] == [(T, [0, 2])]
    assert (wire.subscribed_topic_names, wire.subscribed_topic_regex, wire.rebalance_timeout_ms) == (["a"], None, -1)
    assert _wire_request(HeartbeatRequest("g", "m", 3)).topic_partitions is None  # unchanged: not sent

    Assignment = ConsumerGroupHeartbeatResponse.Assignment
    answer = ConsumerGroupHeartbeatResponse(
        version=1, throttle_time_ms=0, error_code=0, error_message=None, member_id="m", member_epoch=4,
        heartbeat_interval_ms=500, assignment=Assignment(topic_partitions=[
            Assignment.TopicPartitions(topic_id=T, partitions=[1, 0])]))
    decoded = _response(answer)
    assert (decoded.member_epoch, decoded.heartbeat_interval_ms, decoded.assignment) == (
        4, 500, frozenset({(topic_id_text(T), 0), (topic_id_text(T), 1)}))


def test_failures_become_errors_naming_the_setting():
    assignor = _error(Failure(112, "ServerAssignor fair is not supported.", True), "g")
    assert isinstance(assignor, kerr.UnsupportedAssignorError)
    assert "group_remote_assignor names an assignor the daemons do not offer" in str(assignor)
    version = _error(Failure(35, "This daemon does not serve the consumer group protocol", True), "g")
    assert "use group_protocol=classic" in str(version)
    assert isinstance(_error(Failure(30, "x", True), "g"), kerr.GroupAuthorizationFailedError)
    assert isinstance(_error(Failure(111, "x", True), "g"), kerr.UnreleasedInstanceIdError)
    sent = _error(Failure(-1, "IncompatibleBrokerVersion", True), "g")
    assert type(sent) is kerr.KafkaError and "could not be sent: IncompatibleBrokerVersion" in str(sent)
