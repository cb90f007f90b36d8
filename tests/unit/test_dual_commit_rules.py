"""core.dual_commit: what a zkcoord member hears of Kafka's refusals, and the Kafka-side members seen."""

from __future__ import annotations

import pytest

from zkcoord.core.dual_commit import KafkaMember, KafkaSideMembers, client_error
from zkcoord.core.errors import ErrorCode as E


@pytest.mark.parametrize("kafka", [E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID,
                                   E.REBALANCE_IN_PROGRESS])
def test_kafkas_membership_codes_become_a_failed_commit(kafka):
    assert client_error(kafka) is E.UNKNOWN_SERVER_ERROR


@pytest.mark.parametrize("kafka", [E.NONE, E.OFFSET_METADATA_TOO_LARGE, E.UNKNOWN_TOPIC_OR_PARTITION,
                                   E.INVALID_COMMIT_OFFSET_SIZE, E.GROUP_AUTHORIZATION_FAILED])
def test_codes_about_the_commit_itself_are_passed_on(kafka):
    assert client_error(kafka) is kafka


def test_kafka_side_members_change_once_per_set():
    seen = KafkaSideMembers()
    a, b = KafkaMember("a", "c", "/h"), KafkaMember("b")
    assert seen.update("g", [b, a]) is True
    assert seen.update("g", [a, b, a]) is False  # the same set, any order
    assert (seen.groups, seen.members, seen.of("g")) == (1, 2, (a, b))
    assert seen.update("g", [a]) is True and seen.members == 1
    assert seen.update("g", []) is True and (seen.groups, seen.of("g")) == (0, ())
    assert seen.update("g", []) is False
    assert str(a) == "a (client c, host /h)"
