"""zkcoord's assignors against Kafka 4.4.0's own, case by case.

Kafka's ``UniformAssignor`` and ``RangeAssignor`` run in a JVM
(``tests/support/java/AssignorHarness.java``, compiled here against the
4.4.0 jars Maven fetches into the cache) on the same inputs as
:mod:`zkcoord.core.assignors`, built the way Kafka's coordinator builds
them. Equality is exact: each member's topics and partitions *in Kafka's
iteration order* (the order of the record Kafka writes), not only the
sets. Every case is also run on JDK 25 when a Temurin 25 is installed:
``new HashSet<>(collection)`` sizes its table differently from JDK 19 on.

``ZKCOORD_ASSIGNOR_SEED`` replays a run (the seed is printed on failure),
``ZKCOORD_ASSIGNOR_CASES`` sets the number of random groups per assignor
and JDK (default 1,000; a tenth of them large), ``ZKCOORD_ASSIGNOR_ROUNDS``
the chained scenarios (default 150 scenarios of 5 rounds).
"""

from __future__ import annotations

import json
import os
import random

import pytest

from tests.support import kafka_assignors as kafka
from tests.support.assignor_cases import next_round, random_group, topic_id
from zkcoord.core.assignors import ASSIGNORS, GroupSpec, PartitionAssignorError
from zkcoord.core.assignors.java_hash import INT_KEYS, STRING_KEYS, UUID_KEYS, JavaHashMap

SEED = int(os.environ.get("ZKCOORD_ASSIGNOR_SEED") or random.SystemRandom().randrange(10**9))
CASES = int(os.environ.get("ZKCOORD_ASSIGNOR_CASES", "1000"))
SCENARIOS = int(os.environ.get("ZKCOORD_ASSIGNOR_ROUNDS", "150"))
ROUNDS = 5

_REASON = kafka.unavailable()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")


def _java(jdk: int) -> str:
    java = kafka.java_for(jdk)
    if java is None:
        pytest.skip(f"no JDK {jdk} here (looked for {kafka.JDK25_HOME})")
    return java


def _ours(assignor: str, group: GroupSpec) -> dict | str:
    try:
        return kafka.python_result(ASSIGNORS[assignor](group))
    except PartitionAssignorError as exc:
        return f"PartitionAssignorError: {exc}"


def _theirs(answer: dict) -> dict | str:
    if "error" in answer:
        return answer["error"].replace("PartitionAssignorException", "PartitionAssignorError")
    return kafka.java_result(answer)


def _first_difference(ours: dict | str, theirs: dict | str) -> str:
    if isinstance(ours, str) or isinstance(theirs, str):
        return f"ours: {ours if isinstance(ours, str) else 'an assignment'}\nKafka's: " \
               f"{theirs if isinstance(theirs, str) else 'an assignment'}"
    for member in sorted(set(ours) | set(theirs)):
        if ours.get(member) != theirs.get(member):
            return f"member {member}:\n  ours:    {ours.get(member)}\n  Kafka's: {theirs.get(member)}"
    return "(none)"


def _check(assignor: str, jdk: int, groups: list[GroupSpec], what: str) -> list[dict]:
    """Run ``groups`` on both sides; fail on the first difference. Returns Kafka's answers."""
    cases = [kafka.case_json(str(i), assignor, g) for i, g in enumerate(groups)]
    answers = kafka.KafkaAssignors(_java(jdk)).run(cases)
    assert len(answers) == len(groups)
    for i, (group, case, answer) in enumerate(zip(groups, cases, answers)):
        ours, theirs = _ours(assignor, group), _theirs(answer)
        if ours != theirs:
            pytest.fail(f"{assignor} on JDK {jdk}, {what} case {i} (ZKCOORD_ASSIGNOR_SEED={SEED}) differs from "
                        f"Kafka 4.4.0's:\n{_first_difference(ours, theirs)}\ninput: {json.dumps(case)[:4000]}")
    return answers


@pytest.mark.parametrize("jdk", [17, 25])
@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
def test_random_groups_get_kafkas_assignment(assignor, jdk):
    rng = random.Random(f"{SEED}/{assignor}/{jdk}")
    groups = [random_group(rng, jdk=jdk, large=i % 10 == 9) for i in range(CASES)]
    answers = _check(assignor, jdk, groups, "random")
    errors = sum("error" in a for a in answers)
    print(f"{assignor} JDK {jdk}: {len(groups)} random groups (seed {SEED}), all equal to Kafka 4.4.0's "
          f"({errors} refused by both)")


@pytest.mark.parametrize("jdk", [17, 25])
@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
def test_chained_rounds_get_kafkas_assignment(assignor, jdk):
    """Each round's input is the previous round's answer, in Kafka's record
    order, plus a change: stickiness over several rebalances."""
    rng = random.Random(f"{SEED}/chain/{assignor}/{jdk}")
    groups = [random_group(rng, jdk=jdk) for _ in range(SCENARIOS)]
    for round_ in range(ROUNDS):
        answers = _check(assignor, jdk, groups, f"round {round_}")
        groups = [next_round(rng, g, {} if "error" in a else kafka.java_result(a)) for g, a in zip(groups, answers)]
    print(f"{assignor} JDK {jdk}: {SCENARIOS} scenarios x {ROUNDS} rounds (seed {SEED}), all equal")


# ---------------------------------------------------------------- java_hash itself
def _colliding_strings(n: int) -> list[str]:
    """Strings with one hashCode ("Aa" and "BB" hash alike), so a bin fills with equal hashes."""
    out = [""]
    while len(out) < n:
        out = [s + block for s in out for block in ("Aa", "BB")]
    return out[:n]


def _keys(rng: random.Random, kind: str) -> list:
    if kind == "int":
        stride = rng.choice((1, 16, 64, 128, 1024))
        return [rng.randrange(64) + stride * i for i in range(rng.randint(1, 400))]
    if kind == "string":
        return _colliding_strings(rng.randint(1, 64)) + [f"k{i}" for i in range(rng.randint(0, 100))]
    ids = [topic_id(rng, rng.choice((None, 3))) for _ in range(rng.randint(1, 200))]
    return list(dict.fromkeys(ids))


@pytest.mark.parametrize("jdk", [17, 25])
def test_java_hash_orders_are_javas(jdk):
    """Insertions, removals and computeIfAbsent on tables of every size,
    with long chains, tree bins (ints 64 apart, strings of equal hash) and
    their splits and removals: the iteration order is Java's."""
    rng = random.Random(f"{SEED}/hash/{jdk}")
    kinds = {"int": INT_KEYS, "string": STRING_KEYS, "uuid": UUID_KEYS}
    cases, ours = [], []
    for i in range(400):
        kind = rng.choice(sorted(kinds))
        keys = list(dict.fromkeys(_keys(rng, kind)))
        ops = []
        if rng.random() < 0.3:
            start = rng.sample(keys, rng.randint(0, len(keys)))
            mine = JavaHashMap.hash_set(kinds[kind], start, jdk)
            spec = {"kind": kind, "capacity": None, "from": start, "ops": ops}
            codes = (0, 1)
        else:
            capacity = rng.choice((None, 0, 1, 3, 16, 100))
            mine = JavaHashMap(kinds[kind], capacity)
            spec = {"kind": kind, "capacity": capacity, "from": None, "ops": ops}
            codes = (0, 1, 2)
        for _ in range(rng.randint(0, 3 * len(keys))):
            op, key = rng.choice(codes), rng.choice(keys)
            if op == 0 and rng.random() < 0.5:
                op = 1
            ops.append([op, key])
            (mine.remove, mine.add, mine.compute_if_absent)[op](key)
        cases.append({"id": str(i), "hash": spec})
        ours.append(list(mine))
    answers = kafka.KafkaAssignors(_java(jdk)).run(cases)
    for case, mine, answer in zip(cases, ours, answers):
        assert mine == answer["order"], f"JDK {jdk} (seed {SEED}): {json.dumps(case)[:3000]}"


def test_ported_kafka_cases_expect_what_kafka_gives():
    """The expectations of ``tests/unit/test_assignors_kafka_cases.py``
    (Kafka's own unit tests, ported) are Kafka 4.4.0's answers."""
    from tests.unit.test_assignors_kafka_cases import CASES, IDS

    names = {v: k for k, v in IDS.items()}
    answers = kafka.KafkaAssignors(_java(17)).run(
        [kafka.case_json(c.name, c.assignor, c.group()) for c in CASES])
    for case, answer in zip(CASES, answers):
        kafkas = {m: {names[t]: sorted(ps) for t, ps in topics.items()}
                  for m, topics in ((m, dict(r)) for m, r in kafka.java_result(answer).items())}
        assert kafkas == case.expected, case.name


def _edge_groups() -> list[GroupSpec]:
    """Hand-made corners: empty groups and subscriptions, unknown names,
    stale partitions, repeated partitions in a record, forced subscription
    types that contradict the subscriptions."""
    from zkcoord.core.assignors import MemberSpec, SubscriptionType, TopicSpec

    a, b = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"
    topics = {"a": TopicSpec(a, 3), "b": TopicSpec(b, 5)}
    groups = [
        GroupSpec({}, topics),
        GroupSpec({"m": MemberSpec()}, topics),
        GroupSpec({"m": MemberSpec(("nope",)), "n": MemberSpec(("nope", "a"))}, topics),
        GroupSpec({"m": MemberSpec(("a",), {a: [0, 1, 2, 1, 0]}), "n": MemberSpec(("a",))}, topics),
        GroupSpec({"m": MemberSpec(("a",), {a: [7]}), "n": MemberSpec(("a",))}, topics),  # a partition a topic lost
        GroupSpec({"m": MemberSpec(("a", "b"), {b: [0, 1, 2, 3, 4]}), "n": MemberSpec(("a",), {a: [0, 1, 2]})},
                  topics, SubscriptionType.HOMOGENEOUS),
        GroupSpec({"m": MemberSpec(("a", "b")), "n": MemberSpec(("b", "a"), {a: [2]})}, topics,
                  SubscriptionType.HETEROGENEOUS),
        GroupSpec({f"m{i}": MemberSpec(("a",)) for i in range(20)}, topics),
        GroupSpec({"m": MemberSpec(("a",), {b: [0]}), "n": MemberSpec(("a",), {"AAAAAAAAAAAAAAAAAAAAAw": [0]})},
                  topics),
    ]
    return [GroupSpec(g.members, g.topics, g.subscription_type, jdk) for g in groups for jdk in (17,)]


@pytest.mark.parametrize("assignor", sorted(ASSIGNORS))
def test_edge_cases_get_kafkas_answer(assignor):
    """Same assignment, or both refuse (Kafka's exception may be another
    than PartitionAssignorException where it indexes past an array)."""
    groups = _edge_groups()
    answers = kafka.KafkaAssignors(_java(17)).run([kafka.case_json(str(i), assignor, g) for i, g in enumerate(groups)])
    for i, (group, answer) in enumerate(zip(groups, answers)):
        ours, theirs = _ours(assignor, group), _theirs(answer)
        if isinstance(ours, str) and isinstance(theirs, str):
            continue
        assert ours == theirs, f"{assignor} edge case {i}:\n{_first_difference(ours, theirs)}"
