"""Properties of the assignors over generated groups (hypothesis), and of
the Java order emulation on its own: what holds whatever Kafka's orders are.

* every partition of a topic somebody subscribes to is assigned exactly
  once, and only to a subscriber (both assignors, both group shapes);
* ``uniform``, homogeneous: every member's count within one of every
  other's, each member keeps its current partitions up to the smaller
  quota, and running it again on its own result changes nothing;
* ``range``: the current assignment changes nothing, and each topic's
  partitions are consecutive ranges;
* the result's record order holds the same partitions as the result;
* the modules under ``zkcoord/core/assignors`` run their docstring examples.
"""

from __future__ import annotations

import doctest
import importlib
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.assignor_cases import random_group
from zkcoord.core.assignors import (
    GroupSpec, MemberSpec, PartitionAssignorError, SubscriptionType, range_assign, uniform_assign,
)
from zkcoord.core.assignors.java_hash import INT_KEYS, JavaHashMap, inserted_order, string_hash
from zkcoord.core.assignors.spec import Prepared

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
groups = st.builds(lambda seed, large: random_group(random.Random(seed), large=large),
                   st.integers(0, 2**32), st.booleans())


def _subscribed_partitions(group: GroupSpec) -> set[tuple[str, int]]:
    prepared = Prepared(group)
    topics = {t for m in group.members for t in prepared.subscribed_id_sets[m]}
    return {(t, p) for t in topics for p in range(prepared.partition_counts[t])}


def _owned(result) -> list[tuple[str, int]]:
    return [(t, p) for tps in result.values() for t, ps in tps.items() for p in ps]


def _natural(group: GroupSpec) -> GroupSpec:
    """The group with Kafka's own subscription type (no forced one)."""
    return GroupSpec(group.members, group.topics, None, group.jdk)


@SETTINGS
@given(groups)
def test_every_subscribed_partition_is_assigned_once_to_a_subscriber(group):
    group = _natural(group)
    prepared = Prepared(group)
    for assignor in (uniform_assign, range_assign):
        result = assignor(group)
        owned = _owned(result)
        assert len(owned) == len(set(owned))
        expected = _subscribed_partitions(group)
        if prepared.subscription_type is SubscriptionType.HOMOGENEOUS:
            # Kafka reads the first member's subscription for everyone: all members have the same names.
            first = prepared.subscribed_id_sets[prepared.member_ids[0]]
            expected = {(t, p) for t, p in expected if t in first}
        assert set(owned) == expected
        for member_id, topics in result.items():
            assert set(topics) <= prepared.subscribed_id_sets[member_id]


@SETTINGS
@given(groups)
def test_uniform_homogeneous_is_balanced_sticky_and_stable(group):
    group = _natural(group)
    prepared = Prepared(group)
    if prepared.subscription_type is not SubscriptionType.HOMOGENEOUS:
        return
    result = uniform_assign(group)
    sizes = [sum(len(ps) for ps in result[m].values()) for m in group.members]
    assert max(sizes) - min(sizes) <= 1
    total = len(_subscribed_partitions(group))
    minimum = total // len(group.members)
    subscribed = prepared.subscribed_id_sets[prepared.member_ids[0]]
    for member_id, spec in group.members.items():
        held = {(t, p) for t, ps in spec.assignment.items() if t in subscribed for p in ps}
        kept = {(t, p) for t, ps in result[member_id].items() for p in ps} & held
        assert len(kept) >= min(len(held), minimum)
    again = GroupSpec({m: MemberSpec(s.subscribed_topic_names, dict(result.record_order(m)), s.instance_id)
                       for m, s in group.members.items()}, group.topics, None, group.jdk)
    assert uniform_assign(again) == result


@SETTINGS
@given(groups)
def test_range_ignores_the_current_assignment_and_cuts_ranges(group):
    group = _natural(group)
    result = range_assign(group)
    bare = GroupSpec({m: MemberSpec(s.subscribed_topic_names, {}, s.instance_id) for m, s in group.members.items()},
                     group.topics, None, group.jdk)
    assert range_assign(bare) == result
    for topics in result.values():
        for partitions in topics.values():
            assert sorted(partitions) == list(range(min(partitions), max(partitions) + 1))


@SETTINGS
@given(groups)
def test_record_order_holds_the_result(group):
    for assignor in (uniform_assign, range_assign):
        try:
            result = assignor(group)
        except PartitionAssignorError:
            continue  # a forced subscription type Kafka refuses too
        for member_id, topics in result.items():
            order = result.record_order(member_id)
            assert {t: frozenset(ps) for t, ps in order} == topics
            assert all(len(ps) == len(set(ps)) for _, ps in order)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 5000), unique=True, max_size=300), st.sampled_from([None, 0, 1, 16, 64, 100]))
def test_the_fast_path_agrees_with_the_full_structure(keys, capacity):
    assert inserted_order(INT_KEYS, keys, capacity) == list(JavaHashMap(INT_KEYS, capacity, keys))


def test_string_hash_is_javas():
    assert string_hash("Aa") == string_hash("BB") == 2112
    assert string_hash("") == 0
    # "hello".hashCode() is 99162322 in Java; HashMap spreads it: h ^ (h >>> 16).
    assert string_hash("hello") == 99162322 ^ (99162322 >> 16)


@pytest.mark.parametrize("module", ["zkcoord.core.assignors", "zkcoord.core.assignors.uniform",
                                    "zkcoord.core.assignors.uniform_heterogeneous",
                                    "zkcoord.core.assignors.range_assignor"])
def test_docstring_examples(module):
    failures, tried = doctest.testmod(importlib.import_module(module))
    assert tried > 0 and failures == 0
