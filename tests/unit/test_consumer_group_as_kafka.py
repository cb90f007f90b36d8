"""Where the KIP-848 differential test (tests/integration/test_consumer_differential.py)
found zkcoord's consumer group answering otherwise than Kafka 4.4: each
difference, pinned in the pure core with the rule Kafka follows (the
source named in each test)."""

from __future__ import annotations

import pytest

from tests.unit.test_consumer_group import IMAGE, Scene, owned
from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.describe import describe_consumer_group
from zkcoord.core.consumer.regexes import compiled
from zkcoord.core.errors import ErrorCode as E
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
