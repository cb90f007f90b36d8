"""A KIP-848 group's partition index (``ConsumerGroup.partition_epochs``,
Kafka's ``currentPartitionEpoch``): kept by ``with_member`` /
``without_member`` as a persistent map, one member's partitions at a time.
Whatever the order of changes, it is the index rebuilt from the members:
each partition a member holds (assigned or pending revocation) at that
member's epoch, nothing else. Members never hold the same partition at once
(the protocol's invariant), as here."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from zkcoord.core.consumer.model import NO_EPOCH, ConsumerMember, new_consumer_group
from zkcoord.core.frozenmap import FrozenMap

TOPICS = ("A", "B")
PARTITIONS = 12
MEMBERS = ("m1", "m2", "m3", "m4")

step = st.tuples(
    st.sampled_from(MEMBERS),
    st.one_of(st.none(), st.tuples(st.integers(1, 50),  # None: the member leaves
                                   st.frozensets(st.tuples(st.sampled_from(TOPICS), st.integers(0, PARTITIONS - 1))),
                                   st.frozensets(st.tuples(st.sampled_from(TOPICS), st.integers(0, PARTITIONS - 1))))))


def held(partitions) -> FrozenMap:
    by_topic: dict[str, dict[int, int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, {})[partition] = 0
    return FrozenMap({t: FrozenMap(p) for t, p in by_topic.items()})


def rebuilt(group) -> dict:
    index = {}
    for member in group.members.values():
        for current in (member.assigned, member.pending_revocation):
            for topic, partitions in current.items():
                for partition in partitions:
                    index[(topic, partition)] = member.member_epoch
    return index


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=40))
def test_the_index_is_always_the_one_rebuilt_from_the_members(steps):
    group = new_consumer_group("g")
    for member_id, change in steps:
        if change is None:
            group = group.without_member(member_id)
        else:
            epoch, assigned, pending = change
            others = {tp for m in group.members.values() if m.member_id != member_id
                      for current in (m.assigned, m.pending_revocation)
                      for tp in ((t, p) for t, ps in current.items() for p in ps)}
            pending = pending - assigned
            group = group.with_member(ConsumerMember(member_id, member_epoch=epoch,
                                                     assigned=held(assigned - others),
                                                     pending_revocation=held(pending - others)))
        assert dict(group.partition_epochs) == rebuilt(group)
        for topic in TOPICS:
            for partition in range(PARTITIONS):
                assert group.partition_epoch(topic, partition) == rebuilt(group).get((topic, partition), NO_EPOCH)


def test_a_change_leaves_the_group_it_was_made_from_as_it_was():
    """Persistent: the earlier group value still answers for its own members."""
    first = new_consumer_group("g").with_member(ConsumerMember("m1", member_epoch=3, assigned=held({("A", 0)})))
    second = first.with_member(ConsumerMember("m1", member_epoch=4, assigned=held({("A", 0), ("A", 1)})))
    third = second.without_member("m1")
    assert (first.partition_epoch("A", 0), first.partition_epoch("A", 1)) == (3, NO_EPOCH)
    assert (second.partition_epoch("A", 0), second.partition_epoch("A", 1)) == (4, 4)
    assert dict(third.partition_epochs) == {}
