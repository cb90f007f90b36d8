"""Kafka's own unit tests of its assignors, ported: ``OptimizedUniform
AssignmentBuilderTest``, ``UniformHeterogeneousAssignmentBuilderTest`` and
``RangeAssignorTest`` (group-coordinator/src/test/java/org/apache/kafka/
coordinator/group/assignor/, apache/kafka as of October 2024).

Each case is Kafka's, with its topic ids, member ids, partition counts,
subscriptions and current assignments, and its expected assignment as Kafka
4.4.0 gives it. :data:`CASES` is also run through Kafka 4.4.0's own classes
by ``tests/integration/test_assignors_differential.py``, which checks that
these expectations are Kafka 4.4.0's on the inputs as our API takes them
(subscriptions by name, current assignments in record order). Five
homogeneous ``uniform`` cases get another assignment from Kafka 4.4.0 than
the October 2024 test expected (``was_2024``): 4.4.0's homogeneous builder
lets a member that cannot use its extra partition leave it to a later
member, and Kafka's test fed the builder ordered maps (``LinkedHashMap``,
``TreeMap``) where its coordinator, and our API, give ``HashMap`` s. Both
results are balanced and keep what the quotas allow.

What the port changes: Kafka's tests hand the assignor subscriptions as
``Set`` s of topic ids; ours are topic *names*, resolved as Kafka's
``TopicIds`` resolves them, so a name of no topic is left out (Kafka's
coordinator never gives its assignors an unknown id, and the tests that
expected ``PartitionAssignorException`` for one expect nothing assigned
here). Kafka's uniform tests order members with a ``TreeMap``; Kafka's
coordinator, and so our API, with a ``HashMap``: for "A", "B", "C" both
give A, B, C.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from zkcoord.core.assignors import GroupSpec, MemberSpec, SubscriptionType, TopicSpec, range_assign, uniform_assign

# Kafka's test ids as Kafka's Uuid.toString writes them (the tests' T2-T4 end in letters whose
# low bits base64 drops: "...YUe" is "...YUQ").
T1, T2, T3, T4 = "T1-A4s3VTwiI5CTbEp6POw", "T2-B4s3VTwiI5YHbPp6YUQ", "T3-CU8fVTLCz5YMkLoDQsQ", "T4-Tw9fVTLCz5HbPp6YQsQ"
IDS = {"topic1": T1, "topic2": T2, "topic3": T3, "topic4": T4}


@dataclass(frozen=True)
class Case:
    """One of Kafka's test cases: topics (name: partitions), members (id:
    (subscribed names, {name: current partitions})), the expected result
    ({member: {name: partitions}}; members absent get nothing)."""

    name: str
    assignor: str
    topics: dict[str, int]
    members: dict[str, tuple]
    expected: dict[str, dict[str, list[int]]]
    subscription_type: SubscriptionType | None = None
    instances: dict[str, str] = field(default_factory=dict)
    was_2024: dict | None = None  # the October 2024 test's expectation, where Kafka 4.4.0 gives another

    def group(self) -> GroupSpec:
        members = {}
        for member_id, (names, current) in self.members.items():
            assignment = {IDS[n]: ps for n, ps in current.items()}
            members[member_id] = MemberSpec(tuple(names), assignment, self.instances.get(member_id))
        topics = {n: TopicSpec(IDS[n], count) for n, count in self.topics.items()}
        return GroupSpec(members, topics, self.subscription_type)


def u(name, topics, members, expected, **kw) -> Case:
    return Case(name, "uniform", topics, members, expected, **kw)


def r(name, topics, members, expected, **kw) -> Case:
    return Case(name, "range", topics, members, expected, **kw)


T12 = ["topic1", "topic2"]
CASES = [
    # ------------------------------------------------ OptimizedUniformAssignmentBuilderTest
    u("OneMemberNoTopicSubscription", {"topic1": 3}, {"A": ([], {})}, {}),
    u("OneMemberSubscribedToNonexistentTopic", {"topic1": 3}, {"A": (["topic2"], {})}, {}),
    u("FirstAssignmentTwoMembersTwoTopicsNoMemberRacks", {"topic1": 3, "topic3": 2},
      {"A": (["topic1", "topic3"], {}), "B": (["topic1", "topic3"], {})},
      {"A": {"topic3": [0, 1]}, "B": {"topic1": [0, 1, 2]}},
      was_2024={"A": {"topic1": [0], "topic3": [0, 1]}, "B": {"topic1": [1, 2]}}),
    u("FirstAssignmentNumMembersGreaterThanTotalNumPartitions", {"topic3": 2},
      {"A": (["topic3"], {}), "B": (["topic3"], {}), "C": (["topic3"], {})},
      {"B": {"topic3": [0]}, "C": {"topic3": [1]}},
      was_2024={"A": {"topic3": [0]}, "B": {"topic3": [1]}}),
    u("ReassignmentForTwoMembersTwoTopicsGivenUnbalancedPrevAssignment", {"topic1": 3, "topic2": 3},
      {"A": (T12, {"topic1": [0, 1], "topic2": [0, 1]}), "B": (T12, {"topic1": [2], "topic2": [2]})},
      {"A": {"topic1": [0], "topic2": [0, 1]}, "B": {"topic1": [1, 2], "topic2": [2]}},
      was_2024={"A": {"topic1": [0, 1], "topic2": [0]}, "B": {"topic1": [2], "topic2": [1, 2]}}),
    u("ReassignmentWhenPartitionsAreAddedForTwoMembersTwoTopics", {"topic1": 6, "topic2": 5},
      {"A": (T12, {"topic1": [0, 2], "topic2": [0]}), "B": (T12, {"topic1": [1], "topic2": [1, 2]})},
      {"A": {"topic1": [0, 2], "topic2": [0, 3, 4]}, "B": {"topic1": [1, 3, 4, 5], "topic2": [1, 2]}},
      was_2024={"A": {"topic1": [0, 2, 3], "topic2": [0, 3, 4]}, "B": {"topic1": [1, 4, 5], "topic2": [1, 2]}}),
    u("ReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics", {"topic1": 3, "topic2": 3},
      {"A": (T12, {"topic1": [0, 2], "topic2": [0]}), "B": (T12, {"topic1": [1], "topic2": [1, 2]}),
       "C": (T12, {})},
      {"A": {"topic1": [0], "topic2": [0]}, "B": {"topic2": [1, 2]}, "C": {"topic1": [1, 2]}},
      was_2024={"A": {"topic1": [0, 2]}, "B": {"topic1": [1], "topic2": [1]}, "C": {"topic2": [0, 2]}}),
    u("ReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithThreeMembersTwoTopics", {"topic1": 3, "topic2": 3},
      {"A": (T12, {"topic1": [0], "topic2": [0]}), "B": (T12, {"topic1": [1], "topic2": [1]})},
      {"A": {"topic1": [0], "topic2": [0, 2]}, "B": {"topic1": [1, 2], "topic2": [1]}}),
    u("ReassignmentWhenOneSubscriptionRemovedAfterInitialAssignmentWithTwoMembersTwoTopics",
      {"topic1": 2, "topic2": 2},
      {"A": (["topic2"], {"topic1": [0], "topic2": [0]}), "B": (["topic2"], {"topic1": [1], "topic2": [1]})},
      {"A": {"topic2": [0]}, "B": {"topic2": [1]}}),
    # ------------------------------------------------ UniformHeterogeneousAssignmentBuilderTest
    u("TwoMembersNoTopicSubscription", {"topic1": 3}, {"A": ([], {}), "B": ([], {})}, {},
      subscription_type=SubscriptionType.HETEROGENEOUS),
    u("TwoMembersSubscribedToNonexistentTopics", {"topic1": 3}, {"A": (["topic3"], {}), "B": (["topic2"], {})}, {}),
    u("FirstAssignmentTwoMembersTwoTopics", {"topic1": 3, "topic3": 6},
      {"A": (["topic1", "topic3"], {}), "B": (["topic3"], {})},
      {"A": {"topic1": [0, 1, 2], "topic3": [4]}, "B": {"topic3": [0, 1, 2, 3, 5]}}),
    u("HeterogeneousFirstAssignmentNumMembersGreaterThanTotalNumPartitions", {"topic3": 1, "topic1": 2},
      {"A": (["topic3"], {}), "B": (["topic3"], {}), "C": (["topic1"], {})},
      {"A": {"topic3": [0]}, "C": {"topic1": [0, 1]}}),
    u("ReassignmentForTwoMembersThreeTopicsGivenUnbalancedPrevAssignment", {"topic1": 6, "topic2": 4, "topic3": 4},
      {"A": (["topic1"], {"topic1": [0, 1, 2]}),
       "B": (T12, {"topic1": [3], "topic2": [0]}),
       "C": (["topic1", "topic2", "topic3"], {"topic1": [4, 5], "topic2": [1, 2, 3], "topic3": [0, 1, 2, 3]})},
      {"A": {"topic1": [0, 1, 2, 5]}, "B": {"topic1": [3], "topic2": [0, 1, 2, 3]},
       "C": {"topic1": [4], "topic3": [0, 1, 2, 3]}}),
    u("ReassignmentWhenPartitionsAreAddedForTwoMembers", {"topic1": 6, "topic2": 5, "topic3": 3, "topic4": 3},
      {"A": (["topic1", "topic3"], {"topic1": [0, 1, 2, 3], "topic3": [0, 1]}),
       "B": (["topic1", "topic2", "topic3", "topic4"], {"topic2": [0, 1, 2], "topic4": [0, 1, 2]})},
      {"A": {"topic1": [0, 1, 2, 3, 4, 5], "topic3": [0, 1, 2]},
       "B": {"topic2": [0, 1, 2, 3, 4], "topic4": [0, 1, 2]}}),
    u("ReassignmentWhenOneMemberAddedAndPartitionsAddedTwoMembersTwoTopics", {"topic1": 6, "topic2": 7},
      {"A": (["topic1"], {"topic1": [0, 2], "topic2": [0]}), "B": (T12, {"topic1": [1], "topic2": [1, 2]}),
       "C": (T12, {})},
      {"A": {"topic1": [0, 2, 3, 4, 5]}, "B": {"topic1": [1], "topic2": [1, 2, 6]}, "C": {"topic2": [0, 3, 4, 5]}}),
    u("ReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithThreeMembersThreeTopics",
      {"topic1": 3, "topic2": 8, "topic3": 3},
      {"A": (["topic1", "topic3"], {"topic1": [0, 1, 2], "topic3": [0, 1]}),
       "B": (["topic2"], {"topic2": [3, 4, 5, 6]})},
      {"A": {"topic1": [0, 1, 2], "topic3": [0, 1, 2]}, "B": {"topic2": [0, 1, 2, 3, 4, 5, 6, 7]}}),
    u("HeterogeneousReassignmentWhenOneSubscriptionRemovedAfterInitialAssignmentWithTwoMembersTwoTopics",
      {"topic1": 3, "topic2": 5},
      {"A": (["topic1"], {"topic1": [0, 2], "topic2": [1, 3]}), "B": (T12, {"topic1": [1], "topic2": [0, 2, 4]})},
      {"A": {"topic1": [0, 1, 2]}, "B": {"topic2": [0, 1, 2, 3, 4]}}),
    u("ReassignmentWhenTopicPartitionsRunOutAndMembersHaveNoPartitions", {"topic1": 2, "topic2": 2, "topic3": 2},
      {"A": (["topic1", "topic2", "topic3"], {"topic1": [0, 1], "topic2": [0, 1], "topic3": [0, 1]}),
       "B": (["topic1", "topic2", "topic3"], {})},
      {"A": {"topic2": [0], "topic3": [0, 1]}, "B": {"topic1": [0, 1], "topic2": [1]}},
      subscription_type=SubscriptionType.HETEROGENEOUS),
    u("FirstAssignmentWithTwoMembersIncludingOneWithoutSubscriptions", {"topic1": 3},
      {"A": (["topic1"], {}), "B": ([], {})}, {"A": {"topic1": [0, 1, 2]}}),
    # ------------------------------------------------ RangeAssignorTest
    r("OneMemberNoTopic", {"topic1": 3}, {"A": ([], {})}, {}),
    r("OneMemberSubscribedToNonExistentTopic", {"topic1": 3}, {"A": (["topic2"], {})}, {}),
    r("FirstAssignmentTwoMembersTwoTopicsSameSubscriptions", {"topic1": 3, "topic3": 2},
      {"A": (["topic1", "topic3"], {}), "B": (["topic1", "topic3"], {})},
      {"A": {"topic1": [0, 1], "topic3": [0]}, "B": {"topic1": [2], "topic3": [1]}}),
    r("FirstAssignmentThreeMembersThreeTopicsDifferentSubscriptions", {"topic1": 3, "topic2": 3, "topic3": 2},
      {"A": (T12, {}), "B": (["topic3"], {}), "C": (["topic2", "topic3"], {})},
      {"A": {"topic1": [0, 1, 2], "topic2": [0, 1]}, "B": {"topic3": [0]}, "C": {"topic2": [2], "topic3": [1]}}),
    r("FirstAssignmentNumMembersGreaterThanNumPartitions", {"topic1": 3, "topic3": 2},
      {m: (["topic1", "topic3"], {}) for m in "ABC"},
      {"A": {"topic1": [0], "topic3": [0]}, "B": {"topic1": [1], "topic3": [1]}, "C": {"topic1": [2]}}),
    r("ReassignmentNumMembersGreaterThanNumPartitionsWhenOneMemberAdded", {"topic1": 2, "topic2": 2},
      {"A": (T12, {"topic1": [0], "topic2": [0]}), "B": (T12, {"topic1": [1], "topic2": [1]}), "C": (T12, {})},
      {"A": {"topic1": [0], "topic2": [0]}, "B": {"topic1": [1], "topic2": [1]}}),
    r("ReassignmentWhenOnePartitionAddedForTwoMembersTwoTopics", {"topic1": 4, "topic2": 4},
      {"A": (T12, {"topic1": [0, 1], "topic2": [0, 1]}), "B": (T12, {"topic1": [2], "topic2": [2]})},
      {"A": {"topic1": [0, 1], "topic2": [0, 1]}, "B": {"topic1": [2, 3], "topic2": [2, 3]}}),
    r("ReassignmentWhenOneMemberAddedAfterInitialAssignmentWithTwoMembersTwoTopics", {"topic1": 3, "topic2": 3},
      {"A": (T12, {"topic1": [0, 1], "topic2": [0, 1]}), "B": (T12, {"topic1": [2], "topic2": [2]}), "C": (T12, {})},
      {"A": {"topic1": [0], "topic2": [0]}, "B": {"topic1": [1], "topic2": [1]}, "C": {"topic1": [2], "topic2": [2]}}),
    r("ReassignmentWhenOneMemberAddedAndOnePartitionAfterInitialAssignmentWithTwoMembersTwoTopics",
      {"topic1": 4, "topic2": 3},
      {"A": (T12, {"topic1": [0, 1], "topic2": [0, 1]}), "B": (T12, {"topic1": [2], "topic2": [2]}),
       "C": (["topic1"], {})},
      {"A": {"topic1": [0, 1], "topic2": [0, 1]}, "B": {"topic1": [2], "topic2": [2]}, "C": {"topic1": [3]}}),
    r("ReassignmentWhenOneMemberRemovedAfterInitialAssignmentWithTwoMembersTwoTopics", {"topic1": 3, "topic2": 3},
      {"B": (T12, {"topic1": [2], "topic2": [2]})}, {"B": {"topic1": [0, 1, 2], "topic2": [0, 1, 2]}}),
    r("ReassignmentWhenMultipleSubscriptionsRemovedAfterInitialAssignmentWithThreeMembersTwoTopics",
      {"topic1": 3, "topic2": 3, "topic3": 2},
      {"A": (["topic1"], {"topic1": [0, 1, 2], "topic2": [0]}),
       "B": (["topic1", "topic2", "topic3"], {"topic2": [1]}),
       "C": (["topic2"], {"topic2": [2], "topic3": [0, 1]})},
      {"A": {"topic1": [0, 1]}, "B": {"topic1": [2], "topic2": [0, 1], "topic3": [0, 1]}, "C": {"topic2": [2]}}),
]


def _by_name(result) -> dict[str, dict[str, list[int]]]:
    names = {v: k for k, v in IDS.items()}
    return {m: {names[t]: sorted(ps) for t, ps in tps.items()} for m, tps in result.items() if tps}


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.assignor}-{c.name}")
def test_kafka_case(case):
    assignor = uniform_assign if case.assignor == "uniform" else range_assign
    assert _by_name(assignor(case.group())) == case.expected


def _range_members(members: dict[str, str | None]) -> GroupSpec:
    return GroupSpec({m: MemberSpec(("topic1",), instance_id=i) for m, i in members.items()},
                     {"topic1": TopicSpec(T1, 5)})


def test_range_static_member_rejoining_with_a_new_id_keeps_its_partitions():
    """``testStaticMembership`` and ``testMixedStaticMembership``: a static
    member back with a new member id but its instance id gets what it had."""
    for before, after, renamed in [
        ({"A": "instanceA", "B": "instanceB"}, {"B": "instanceB", "memberA1": "instanceA"}, "memberA1"),
        ({"A": "instanceA", "C": "instanceC", "B": None}, {"C": "instanceC", "B": None, "memberA1": "instanceA"},
         "memberA1"),
    ]:
        first, second = range_assign(_range_members(before)), range_assign(_range_members(after))
        assert second[renamed] == first["A"]
        for member in set(before) - {"A"}:
            assert second[member] == first[member]


def test_uniform_large_sample_is_valid_and_balanced():
    """``testValidityAndBalanceForLargeSampleSet``: 49 members over 99
    topics of 3 partitions, everyone subscribed to everything."""
    topics = {f"topic-{i}": TopicSpec(f"{i:020d}AA", 3) for i in range(1, 100)}
    members = {f"member{i}": MemberSpec(tuple(topics)) for i in range(1, 50)}
    result = uniform_assign(GroupSpec(members, topics))
    sizes = [sum(len(ps) for ps in tps.values()) for tps in result.values()]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 297
    owned = [(t, p) for tps in result.values() for t, ps in tps.items() for p in ps]
    assert len(owned) == len(set(owned)) == 297
