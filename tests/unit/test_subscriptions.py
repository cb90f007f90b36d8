"""zkcoord.server.subscriptions: the topics of a consumer group, decoded with
kafka-python's ConsumerProtocolSubscription."""

from __future__ import annotations

import logging

import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as Subscription
from test_group_support import Harness, stable_harness

from zkcoord.core.group import GroupState
from zkcoord.errors import StateError
from zkcoord.server.subscriptions import decode_topics, subscribed_topics


def encoded(version: int, topics: list[str], **fields) -> bytes:
    return bytes(Subscription(version=version, topics=topics, user_data=b"u", **fields).encode())


V1 = {"owned_partitions": [Subscription.TopicPartition(topic="a", partitions=[0, 1])]}
V2 = {**V1, "generation_id": 7}
V3 = {**V2, "rack_id": "rack-1"}


@pytest.mark.parametrize("version, fields", [(0, {}), (1, V1), (2, V2), (3, V3)])
def test_every_version_decodes_to_its_topics(version, fields):
    assert decode_topics(encoded(version, ["a", "b", "a"], **fields)) == frozenset({"a", "b"})


def test_a_future_version_decodes_through_the_version_0_prefix():
    v3 = encoded(3, ["orders"], **V3)
    future = b"\x00\x09" + v3[2:] + b"fields of version 9"
    assert decode_topics(future) == frozenset({"orders"})


def test_no_topics_is_an_empty_subscription():
    assert decode_topics(encoded(0, [])) == frozenset()


@pytest.mark.parametrize("metadata", [
    b"",                                              # no version
    b"\x00",                                          # half a version
    b"\x00\x00\x00\x00\x00\x05\x00\x01a",             # five topics announced, one sent
    b"range-meta",                                    # not a subscription at all
    b"\xff\xff\x00\x00\x00\x00\xff\xff\xff\xff",      # version -1
    b"\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff",      # null topic array
    b"\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff\xff\xff",  # null topic name
    b"\x00\x00\x00\x00\x00\x01\x00\x02\xff\xfe\xff\xff\xff\xff",  # topic name not UTF-8
], ids=["empty", "half-version", "truncated", "garbage", "negative-version", "null-array",
        "null-topic", "bad-utf8"])
def test_malformed_metadata_is_a_state_error(metadata):
    with pytest.raises(StateError, match="subscription"):
        decode_topics(metadata)


# -- groups ------------------------------------------------------------------------

def _stable_with(*metadata: bytes, protocol_type: str = "consumer") -> Harness:
    h = Harness()
    for i, meta in enumerate(metadata, 1):
        h.join(f"j{i}", new_member_id=f"m{i}", protocols=(("range", meta),), protocol_type=protocol_type)
    while h.group.state is GroupState.PREPARING_REBALANCE:
        h.advance(h.timers["join"])
    return h


def test_group_topics_are_the_union_of_its_members():
    h = _stable_with(encoded(0, ["orders"]), encoded(3, ["orders", "payments"], **V3))
    assert subscribed_topics(h.group) == frozenset({"orders", "payments"})


def test_the_selected_protocol_is_read_else_the_members_first_choice():
    h = stable_harness(2, protocols=(("range", encoded(0, ["a"])), ("roundrobin", encoded(0, ["a"]))))
    assert h.group.protocol_name == "range"
    # m2 rejoins offering roundrobin only (with another subscription): the
    # group is rebalancing and its selected protocol is still range.
    h.join("r2", "m2", protocols=(("roundrobin", encoded(1, ["b"], **V1)),))
    assert (h.group.state, h.group.protocol_name) == (GroupState.PREPARING_REBALANCE, "range")
    assert subscribed_topics(h.group) == frozenset({"a", "b"})


def test_a_group_that_never_selected_a_protocol_is_read_through_first_choices():
    h = Harness()
    h.join("j1", new_member_id="m1", protocols=(("sticky", encoded(0, ["x"])), ("range", encoded(0, ["y"]))))
    assert (h.group.state, h.group.protocol_name) == (GroupState.PREPARING_REBALANCE, None)
    assert subscribed_topics(h.group) == frozenset({"x"})


def test_groups_without_members_or_of_another_protocol_type_subscribe_to_nothing():
    assert subscribed_topics(Harness().group) == frozenset()
    connect = _stable_with(encoded(0, ["orders"]), protocol_type="connect")
    assert connect.group.state is GroupState.COMPLETING_REBALANCE
    assert subscribed_topics(connect.group) == frozenset()


def test_a_malformed_member_is_skipped_with_a_warning(caplog):
    h = _stable_with(encoded(0, ["orders"]), b"range-meta")
    with caplog.at_level(logging.WARNING, logger="zkcoord.server.subscriptions"):
        assert subscribed_topics(h.group) == frozenset({"orders"})
    assert [r.getMessage() for r in caplog.records] == [
        "group g: topics of member m2 not watched: consumer-protocol subscription does not decode "
        "(Buffer underrun decoding string); the member sent metadata that is not a "
        "ConsumerProtocolSubscription"]


def test_members_sending_the_same_subscription_are_decoded_once(monkeypatch):
    import zkcoord.server.subscriptions as subscriptions

    h = _stable_with(encoded(0, ["orders"]), encoded(0, ["orders"]), encoded(0, ["payments"]))
    calls = []
    real = subscriptions.decode_topics
    monkeypatch.setattr(subscriptions, "decode_topics", lambda m: calls.append(m) or real(m))
    assert subscribed_topics(h.group) == frozenset({"orders", "payments"})
    assert sorted(calls) == sorted({encoded(0, ["orders"]), encoded(0, ["payments"])})
