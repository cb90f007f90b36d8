"""zkcoord's legacy range assignment against Kafka 1.1.1's own, case by case.

Kafka's ``RangeAssignor`` and ``TopicCount`` run in a JVM on the legacy
consumer's jars (``tests/support/java/LegacyRangeHarness.java``; no servers
needed): each consumer of a case computes its own share from the stored
registrations, as it does in its rebalance, and the shares must be exactly
what :func:`~zkcoord.core.handover.legacy_range.range_assignment` gives each
consumer id, thread by thread. Cases mix static topic counts of 1 to 12
streams, whitelists and blacklists (with Kafka's clean-up of commas, spaces
and quotes, internal topics included or not), consumer ids that share
prefixes or are not ASCII, partition numbers with gaps, zkcoord's own
registrations (:func:`encode_registration`), patterns Kafka reads as static,
and registrations Kafka cannot read (zkcoord must refuse those too).

``ZKCOORD_HANDOVER_SEED`` replays a run (printed on failure),
``ZKCOORD_HANDOVER_CASES`` sets the number of random cases (default 2,000).
"""

from __future__ import annotations

import json
import os
import random

import pytest

from tests.support import legacy_assignor as kafka
from zkcoord.core.handover.legacy_range import range_assignment
from zkcoord.core.handover.registration import encode_registration, parse_registration, split_thread_id
from zkcoord.errors import StateError

SEED = int(os.environ.get("ZKCOORD_HANDOVER_SEED") or random.SystemRandom().randrange(10**9))
CASES = int(os.environ.get("ZKCOORD_HANDOVER_CASES", "2000"))
_REASON = kafka.unavailable()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=_REASON or "")

IDS = ["g_a", "g_a-0", "g_a-1", "g_b", "g_host-1795315596682-0a1b2c3d", "g_zkcoord-1795315596682-00000001",
       "g_zkcoord-1795315596683-00000000", "g_Z", "g_é", "g_c-10", "g_c"]
TOPICS = ["t", "u", "orders", "orders-eu", "__consumer_offsets", "__transaction_state"]
REGEXES = ["t|u", ".*", "o.*", "[a-t]+", "t,u", " 'orders.*' ", "\"t\"", "__.*", "orders-[a-z]+", "x"]
UNREADABLE = [b'{"pattern":"static","subscription":{"t":0}}', b"*1*t", b'{"subscription":{"t":1}}',
              b'{"pattern":"static","subscription":{"t":"1"}}', b'{"pattern":"static","subscription":{"t":1.5}}',
              b'{"pattern":"static","subscription":{"t":true}}', b'{"pattern":"static"}']


def legacy_static(topics: dict[str, int]) -> bytes:
    subscription = ",".join(f'"{t}":{n}' for t, n in topics.items())
    return f'{{"version":1,"subscription":{{{subscription}}},"pattern":"static","timestamp":"1"}}'.encode()


def registration(rng: random.Random) -> bytes:
    kind = rng.random()
    streams = rng.choice([1, 1, 1, 2, 3, 11, 12])
    if kind < 0.25:
        return encode_registration({t: streams for t in rng.sample(TOPICS[:4], rng.randint(1, 3))}, 1795315596682)
    if kind < 0.5:
        return legacy_static({t: rng.choice([1, 2, 11]) for t in rng.sample(TOPICS + ["missing"], rng.randint(1, 3))})
    if kind < 0.8:
        pattern = rng.choice(["white_list", "black_list"])
        return json.dumps({"version": 1, "subscription": {rng.choice(REGEXES): streams}, "pattern": pattern,
                           "timestamp": "1"}).encode()
    if kind < 0.9:
        return rng.choice([b'{"version":1,"subscription":{"t":2},"pattern":"other","timestamp":"1"}',
                           b'{"version":1,"subscription":{},"pattern":"white_list","timestamp":"1"}'])
    return rng.choice(UNREADABLE) if rng.random() < 0.3 else legacy_static({"t": 1})


def random_case(rng: random.Random, case_id: str) -> dict:
    ids = {cid: registration(rng) for cid in rng.sample(IDS, rng.randint(1, 6))}
    topics = {t: tuple(rng.sample(range(16), rng.randint(0, 9))) for t in TOPICS if rng.random() < 0.8}
    return kafka.case(case_id, "g", ids, topics, exclude_internal=rng.random() < 0.7)


def ours(case: dict) -> dict | str:
    try:
        regs = [parse_registration(cid, data.encode()) for cid, data in case["ids"].items()]
        result = range_assignment(regs, {t: tuple(ps) for t, ps in case["topics"].items()}, case["exclude_internal"])
    except StateError as exc:
        return str(exc)
    shares: dict[str, dict] = {cid: {} for cid in case["ids"]}
    for tp, thread in result.items():
        shares[split_thread_id(thread)[0]][tp] = thread
    return shares


def test_kafkas_own_example_and_our_registrations():
    ids = {"C1": encode_registration({"t": 2}, 1), "C2": legacy_static({"t": 2})}
    (answer,) = kafka.run([kafka.case("doc", "g", ids, {"t": (0, 1, 2, 3, 4)})])
    assert answer["shares"] == {"C1": {("t", 0): "C1-0", ("t", 1): "C1-0", ("t", 2): "C1-1"},
                                "C2": {("t", 3): "C2-0", ("t", 4): "C2-1"}}
    assert ours(kafka.case("doc", "g", ids, {"t": (0, 1, 2, 3, 4)})) == answer["shares"]


def test_random_groups_get_kafkas_answer(record_property):
    rng = random.Random(SEED)
    cases = [random_case(rng, str(i)) for i in range(CASES)]
    answers = kafka.run(cases)
    assert len(answers) == len(cases)
    mismatches = []
    refused = 0
    for case, answer in zip(cases, answers):
        mine = ours(case)
        if "error" in answer or isinstance(mine, str):
            refused += 1
            if not ("error" in answer and isinstance(mine, str)):
                mismatches.append((case, answer, mine))
        elif mine != answer["shares"]:
            mismatches.append((case, answer, mine))
    record_property("refused", refused)
    assert not mismatches, (f"seed {SEED}: {len(mismatches)} of {len(cases)} differ; first: {mismatches[0]}")
    assert 0 < refused < len(cases) // 4  # both kinds of case were exercised
