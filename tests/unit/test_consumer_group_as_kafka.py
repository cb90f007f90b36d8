"""Where the KIP-848 differential test (tests/integration/test_consumer_differential.py)
found zkcoord's consumer group answering otherwise than Kafka 4.4: each
difference, pinned in the pure core with the rule Kafka follows (the
source named in each test)."""

from __future__ import annotations

import pytest

from tests.unit.test_consumer_group import IMAGE, T, Scene, owned
from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.describe import describe_consumer_group
from zkcoord.core.consumer.regexes import compiled
from zkcoord.core.consumer.classic_members import kafka_member_id
from zkcoord.core.errors import ErrorCode as E
from zkcoord.core.messages import JoinRequest
from zkcoord.core.offset_commit import CommitRequest, decide_commit
from zkcoord.errors import GroupRequestError


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


# What RE2J 1.8 (Kafka 4.4's regex engine) answers for each, from Pattern.compile(regex):
# PatternSyntaxException.getDescription(), the text Kafka's INVALID_REGULAR_EXPRESSION message quotes.
RE2J_ANSWERS = [
    ("(", "missing closing )"), ("[a", "missing closing ]"), ("a**", "invalid nested repetition operator"),
    ("x{2,1}", "invalid repeat count"), ("\\", "trailing backslash at end of expression"),
    ("(?P<n>a)(?P<n>b)", "duplicate capture group name"), (")", "regexp/syntax: internal error"),
    ("\\q", "invalid escape sequence"), ("*", "missing argument to repetition operator"),
    ("a{1001}", "invalid repeat count"), ("\\C", "invalid escape sequence"),
    ("\\p{Adlam}", "invalid character class range"), ("(?P<é>a)", "invalid named capture"),
    ("(?<=a)", "invalid named capture"), ("a{?", "invalid nested repetition operator"), ("\\é", None),
    ("A.*{3,1}", "invalid repeat count"), ("(?P<n>C(?<n>(", "duplicate capture group name"),
    ("topic-.*", None), ("(?i)orders|payments", None), ("\\p{Greek}+", None), ("[[:alpha:]]", None),
    ("(?<n>a)", None), ("\\x{110000}", "invalid escape sequence"), ("[z-a]", "invalid character class range"),
    ("(?z)", "invalid or unsupported Perl syntax"),
]


@pytest.mark.parametrize("regex, description", RE2J_ANSWERS)
def test_a_regex_is_refused_with_re2js_words(regex, description):
    """Utils.throwIfRegularExpressionIsInvalid: "SubscribedTopicRegex `%s` is
    not a valid regular expression: %s." with RE2J's description; RE2 (the
    same grammar) compiles it, and where RE2J's parser refuses what RE2's
    accepts, or names the error otherwise, zkcoord says what RE2J says."""
    compiled.cache_clear()
    if description is None:
        assert compiled(regex) is not None
        return
    with pytest.raises(GroupRequestError) as refused:
        compiled(regex)
    assert refused.value.code is E.INVALID_REGULAR_EXPRESSION
    assert str(refused.value) == f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {description}."


def test_an_escaped_non_ascii_character_matches_itself():
    """RE2J reads "\\é" as "é" (its parseEscape returns any non-alphanumeric rune)."""
    assert compiled("caf\\é-.*").fullmatch("café-orders") is not None


def test_one_partition_not_held_at_an_older_epoch_refuses_the_whole_commit():
    """ConsumerGroup.createAssignmentEpochValidator throws out of
    OffsetMetadataManager.commitOffset: every partition gets the error and
    nothing is written, even the partitions held since that epoch."""
    s = Scene()
    s.join("a")
    s.join("b")
    s.beat("a", 2, owned=owned(s.member("a")))
    kept = tuple(sorted(s.member("a").assigned[T]))
    s.beat("a", 2, owned=((T, kept),))
    assert s.member("a").member_epoch == 3
    gone = next(p for p in range(4) if p not in kept)

    def commit(*parts):
        return decide_commit(s.group, CommitRequest("a", 2, None, {("t", p): (5, "") for p in parts}, 9), True,
                             s.config)

    assert commit(kept[0]).error is E.NONE and commit(kept[0]).writes
    refused = commit(kept[0], gone)
    assert refused.error is E.STALE_MEMBER_EPOCH and not refused.writes and not refused.offsets


def test_a_v9_commit_with_an_epoch_to_a_group_that_does_not_exist_is_group_id_not_found():
    """OffsetMetadataManager.validateOffsetCommit: GroupIdNotFoundException is
    rethrown from v9, turned into ILLEGAL_GENERATION before; an anonymous
    commit creates the group."""
    from zkcoord.core import groups

    group = groups.new_group("g")

    def commit(epoch, version):
        return decide_commit(group, CommitRequest("m", epoch, None, {("t", 0): (1, "")}, version), False).error

    assert commit(1, 9) is E.GROUP_ID_NOT_FOUND
    assert commit(1, 8) is E.ILLEGAL_GENERATION
    assert commit(-1, 9) is E.NONE


def test_a_classic_member_joining_a_consumer_group_gets_a_kafka_uuid_as_its_id():
    """classicGroupJoinToConsumerGroup: an unknown member's id is
    Uuid.randomUuid().toString(), not the classic group's <client id>-<UUID>."""
    from tests.unit.test_consumer_group_migration import Scene as MigrationScene

    s = MigrationScene()
    s.consumer_beat("m", 0, subscribed_topic_names=("t",), rebalance_timeout_ms=30_000, owned=())
    generated = "c-00000000-0000-0000-0000-000000000001"
    joined = s.classic_join("", new_id=generated).replies[0].payload
    assert (joined.error, joined.member_id) == (E.NONE, "AAAAAAAAAAAAAAAAAAAAAQ")
    assert "AAAAAAAAAAAAAAAAAAAAAQ" in s.group.members
    assert kafka_member_id("c-f8000000-0000-0000-0000-000000000000") == "eAAAAAAAAAAAAAAAAAAAAA"  # not "-"...


def test_a_refused_classic_join_to_a_consumer_group_carries_no_member_id():
    """GroupCoordinatorService.joinGroup answers a thrown error with a bare
    JoinGroupResponseData: member id ""."""
    from tests.unit.test_consumer_group_migration import Scene as MigrationScene, subscription

    s = MigrationScene()
    s.consumer_beat("m", 0, subscribed_topic_names=("t",), rebalance_timeout_ms=30_000, owned=())
    req = JoinRequest(s.next_token(), "g", "ghost", None, "c", "/h", 10_000, 30_000, "connect",
                      (("range", subscription()),), False, "ghost")
    refused = s.decide(req).replies[0].payload
    assert (refused.error, refused.member_id) == (E.INCONSISTENT_GROUP_PROTOCOL, "")


@pytest.mark.parametrize("policy", ["disabled", "bidirectional"])
def test_a_classic_join_to_an_empty_consumer_group_makes_it_a_classic_group(policy):
    """GroupMetadataManager.classicGroupJoin: only a consumer group with
    members takes a classic member (classicGroupJoinToConsumerGroup, where
    the policy is checked); an empty one is deleted and the join goes to a
    new classic group (classicGroupJoinToClassicGroup)."""
    from dataclasses import replace

    from tests.unit.test_consumer_group_migration import CONFIG as MIGRATION, Scene as MigrationScene
    from zkcoord.core.consumer.model import ConsumerGroup
    from zkcoord.core.membership import Group

    s = MigrationScene(replace(MIGRATION, consumer=ConsumerGroupConfig(migration_policy=policy)))
    s.consumer_beat("m", 0, subscribed_topic_names=("t",), rebalance_timeout_ms=30_000, owned=())
    s.consumer_beat("m", -1)
    assert isinstance(s.group, ConsumerGroup) and not s.group.members
    outcome = s.decide(JoinRequest(s.next_token(), "g", "", None, "c", "/h", 10_000, 30_000, "consumer",
                                   (("range", b"\x00\x00\x00\x00\x00\x00"),), True, "c-1"))
    assert outcome.persist and isinstance(s.group, Group)
    (reply,) = outcome.replies
    assert (reply.payload.error, reply.payload.member_id) == (E.MEMBER_ID_REQUIRED, "c-1")
