"""Where the KIP-848 differential test (tests/integration/test_consumer_differential.py)
found zkcoord's consumer group answering otherwise than Kafka 4.4: each
difference, pinned in the pure core with the rule Kafka follows (the
source named in each test)."""

from __future__ import annotations

from zkcoord.core.consumer.describe import describe_consumer_group
from zkcoord.core.consumer.config import ConsumerGroupConfig

from tests.unit.test_consumer_group import IMAGE, Scene, owned
from zkcoord.core.errors import ErrorCode as E


def test_describe_shows_an_empty_regex_for_a_member_subscribing_by_names():
    """ConsumerGroupMember.Builder starts with subscribedTopicRegex "" and
    asConsumerGroupDescribeMember copies it as it is: "" , not null."""
    s = Scene()
    s.join("a")
    s.join("b", regex="t|u")
    described = {m.member_id: m for m in describe_consumer_group(s.group, IMAGE, ConsumerGroupConfig()).members}
    assert described["a"].subscribed_topic_regex == ""
    assert described["b"].subscribed_topic_regex == "t|u"


def test_the_previous_epoch_without_owned_partitions_is_fenced():
    """GroupMetadataManager.throwIfConsumerGroupMemberEpochIsInvalid: a
    smaller epoch is accepted only if it is the previous one *and*
    isSubset(owned, assigned), which is false when owned is null."""
    s = Scene()
    s.join("a")
    s.join("b")
    s.beat("a", 2, owned=owned(s.member("a")))  # told to revoke
    s.beat("a", 2, owned=owned(s.member("a")))  # revoked: epoch 3, previous 2
    assert (s.member("a").member_epoch, s.member("a").previous_member_epoch) == (3, 2)
    answer, outcome = s.beat("a", 2, owned=None)
    assert answer.error is E.FENCED_MEMBER_EPOCH and "smaller member epoch (2)" in answer.message
    assert not outcome.persist
    answer, _ = s.beat("a", 2, owned=owned(s.member("a")))
    assert (answer.error, answer.member_epoch) == (E.NONE, 3)
