"""Random assignor inputs for the differential and property tests.

:func:`random_group` makes one :class:`~zkcoord.core.assignors.GroupSpec`
from a seeded :class:`random.Random`: 1-50 members, 1-10 topics of 1-64
partitions (``large``: up to 20 topics and 3,000 partitions, current assignments strided so
that Java's tables get long chains and tree bins), subscriptions the same
for all (homogeneous) or not, names in any order with repeats and names of
no topic, current assignments that are consistent (no partition twice) but
stale in the ways a live group is (topics no longer subscribed or deleted,
members over or under their share, members with nothing), static members
(instance ids), racks, and member and topic ids picked to collide in
Java's hash tables. :func:`next_round` turns a group and Kafka's answer
into the next round's group (members leave and join, subscriptions change,
topics grow), to check chained runs: the answer's order is the order of
the record Kafka writes, and so of the next input.
"""

from __future__ import annotations

import base64
import random
import string

from zkcoord.core.assignors import GroupSpec, MemberSpec, SubscriptionType, TopicSpec

MemberResult = tuple[tuple[str, tuple[int, ...]], ...]


def topic_id(rng: random.Random, low_bits: int | None = None) -> str:
    """A Kafka Uuid string; ``low_bits`` fixes the low 4 bits of its hash
    (msb ^ lsb), so ids share a bucket of a 16-slot table."""
    raw = bytearray(rng.getrandbits(128).to_bytes(16, "big"))
    if low_bits is not None:
        msb, lsb = int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")
        h = msb ^ lsb
        folded = ((h >> 32) ^ h) & 0xFFFFFFFF
        spread = folded ^ (folded >> 16)
        lsb ^= (spread & 0xF) ^ low_bits
        raw[8:] = lsb.to_bytes(8, "big")
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


def member_id(rng: random.Random, i: int, style: str) -> str:
    if style == "uuid":  # what Kafka generates (Uuid.randomUuid().toString())
        return topic_id(rng)
    if style == "short":  # consecutive String hashes: long runs of neighbouring buckets
        return f"m{i}"
    alphabet = string.ascii_letters + string.digits + "-_é"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) + f"#{i}"


def _topics(rng: random.Random, large: bool) -> dict[str, TopicSpec]:
    count = rng.randint(1, 20 if large else 10)  # over 12: Java's maps of topics resize
    collide = rng.random() < 0.3
    topics = {}
    for i in range(count):
        partitions = rng.randint(1, 3000 if large and rng.random() < 0.5 else 64)
        low = rng.choice((0, 5)) if collide else None
        topics[f"topic-{rng.randrange(10**6)}-{i}"] = TopicSpec(topic_id(rng, low), partitions)
    return topics


def _subscriptions(rng: random.Random, names: list[str], n_members: int, homogeneous: bool) -> list[list[str]]:
    def one() -> list[str]:
        chosen = rng.sample(names, rng.randint(1, len(names)))
        if rng.random() < 0.15:
            chosen.append("no-such-topic")
        if rng.random() < 0.1:
            chosen.append(rng.choice(chosen))  # a repeated name
        rng.shuffle(chosen)
        return chosen

    if homogeneous:
        base = one()
        return [rng.sample(base, len(base)) for _ in range(n_members)]  # same set, any order
    return [one() for _ in range(n_members)]


def _current(rng: random.Random, topics: dict[str, TopicSpec], members: list[str], large: bool
             ) -> dict[str, dict[str, list[int]]]:
    """Consistent current assignments: each partition of a chosen topic to
    at most one member, with skew and gaps."""
    current: dict[str, dict[str, list[int]]] = {m: {} for m in members}
    fill = rng.random()
    for spec in topics.values():
        if rng.random() < 0.2:
            continue
        partitions = list(range(spec.partitions))
        if large and rng.random() < 0.5:  # strided: many partitions in one bucket of a Java table
            stride = rng.choice((16, 32, 64, 128))
            partitions = [p for p in partitions if p % stride in (0, 1)] + partitions
        holders = rng.sample(members, rng.randint(1, len(members)))
        weights = [rng.random() ** 3 for _ in holders]
        seen = set()
        for p in partitions:
            if p in seen or rng.random() > fill:
                continue
            seen.add(p)
            owner = rng.choices(holders, weights)[0]
            current[owner].setdefault(spec.topic_id, []).append(p)
    if rng.random() < 0.3:  # a deleted topic still in someone's assignment
        ghost = topic_id(rng)
        current[rng.choice(members)][ghost] = [0, 1]
    for m in members:
        for ps in current[m].values():
            if rng.random() < 0.5:
                rng.shuffle(ps)
    return current


def random_group(rng: random.Random, *, jdk: int = 17, large: bool = False) -> GroupSpec:
    """One random group (see the module docstring)."""
    topics = _topics(rng, large)
    n_members = rng.randint(1, 50)
    style = rng.choice(("uuid", "short", "text"))
    member_ids = list(dict.fromkeys(member_id(rng, i, style) for i in range(n_members)))
    homogeneous = rng.random() < 0.5
    subscriptions = _subscriptions(rng, list(topics), len(member_ids), homogeneous)
    current = _current(rng, topics, member_ids, large) if rng.random() < 0.75 else {}
    static = rng.random() < 0.3
    racks = rng.random() < 0.3
    members = {}
    for m, names in zip(member_ids, subscriptions):
        members[m] = MemberSpec(
            subscribed_topic_names=tuple(names),
            assignment=current.get(m, {}),
            instance_id=f"instance-{rng.randrange(1000)}-{m}" if static and rng.random() < 0.7 else None,
            rack_id=f"rack-{rng.randrange(3)}" if racks else None,
        )
    forced = None
    if rng.random() < 0.05:
        forced = rng.choice(list(SubscriptionType))
    return GroupSpec(members=members, topics=topics, subscription_type=forced, jdk=jdk)


def next_round(rng: random.Random, group: GroupSpec, answer: dict[str, MemberResult]) -> GroupSpec:
    """The group after Kafka's answer became its target assignment, then a
    change: a member leaves or joins, a subscription changes, or a topic
    grows. Members keep their order; the records' order is the answer's."""
    topics = dict(group.topics)
    members: dict[str, MemberSpec] = {}
    for m, spec in group.members.items():
        members[m] = MemberSpec(spec.subscribed_topic_names, dict(answer.get(m, ())), spec.instance_id, spec.rack_id)
    change = rng.choice(("leave", "join", "subscribe", "grow", "none"))
    names = list(topics)
    if change == "leave" and len(members) > 1:
        for m in rng.sample(list(members), rng.randint(1, max(1, len(members) // 4))):
            del members[m]
    elif change == "join":
        template = rng.choice(list(members.values())).subscribed_topic_names
        for i in range(rng.randint(1, 5)):
            members[topic_id(rng)] = MemberSpec(template if rng.random() < 0.8 else tuple(rng.sample(names, 1)))
    elif change == "subscribe":
        m = rng.choice(list(members))
        old = members[m]
        members[m] = MemberSpec(tuple(rng.sample(names, rng.randint(1, len(names)))), old.assignment,
                                old.instance_id, old.rack_id)
    elif change == "grow":
        name = rng.choice(names)
        topics[name] = TopicSpec(topics[name].topic_id, topics[name].partitions + rng.randint(1, 16))
    return GroupSpec(members=members, topics=topics, subscription_type=None, jdk=group.jdk)
