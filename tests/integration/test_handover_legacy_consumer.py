"""The handover's first layer beside real legacy consumers: Kafka 1.1.1's
``ZookeeperConsumerConnector`` (:mod:`zkcoord.local.legacy`) and a zkcoord
member registered and served by :class:`~zkcoord.zk.handover.LegacyRebalanceZk`
and the core's :func:`~zkcoord.core.handover.decision.plan`, driven here the
way the daemon will drive them (read, plan, carry out, wait for a watch).

* A legacy consumer's registration is, byte for byte, what zkcoord writes
  for the same subscription.
* Mixed: the legacy consumers see the member as one of theirs, and both
  sides hold exactly the range answer: each legacy member's last claim is
  its share of the plan's target, the owner znodes are the target.
* Legacy members leave (clean stop; kill -9): the member takes every
  partition once their znodes are gone, never before.
* The member leaves: no registration and no owner znode is left behind.
* A legacy member with two streams and one subscribed by a whitelist: the
  same answer, thread by thread (Java's string order of the thread ids).

No partition is held by two sides at once: every legacy claim-to-release
interval (its own events, logged after it created its owner znodes and
before it deletes them) and every interval in which the member held an owner
znode (after our create returned, before our delete was sent) are disjoint
per partition, on one clock.

The old consumer reads ``/brokers`` at ZooKeeper's root, so the test runs
there with a group and a topic of its own, deleted afterwards.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from kafka.admin import NewTopic
from test_zk_support import connection, eventually

from tests.support.handover import legacy_classpath_or_skip, owners
from tests.support.daemons import process_marker
from zkcoord.core.handover.decision import Member, Plan, plan
from zkcoord.core.handover.registration import encode_registration, zkcoord_consumer_id
from zkcoord.core.handover.retries import Attempts, RetrySchedule
from zkcoord.local.legacy import LegacyGroup, LegacySettings
from zkcoord.zk.handover import LegacyRebalanceZk

pytestmark = pytest.mark.integration
PARTITIONS = 6
SESSION_TIMEOUT_MS = 6000
SCHEDULE = RetrySchedule(max_retries=20, backoff_ms=500)  # what the legacy consumers below are given


def now_ms() -> int:
    return int(time.time() * 1000)


class Driver:
    """The daemon's part, as its runtime will play it: read with watches, plan,
    carry the plan out, wait for a change or the back-off; the intervals in
    which the member held each owner znode are recorded."""

    def __init__(self, handover: LegacyRebalanceZk, group: str):
        self.handover, self.group = handover, group
        self.members: dict[str, Member] = {}
        self.held: dict[tuple[str, int], list[list[int | None]]] = {}  # partition -> [[from, until]]

    async def settle(self, timeout_s: float = 90.0) -> Plan:
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout_s
        attempts = Attempts.start(SCHEDULE, now_ms())
        while True:
            changed = asyncio.Event()
            reading = await self.handover.read(self.group, on_change=changed.set)
            result = plan(reading.view(self.members))
            if result.settled:
                return result
            assert loop.time() < end, f"not settled within {timeout_s} s: {result}"
            for release in result.release:
                self.held.setdefault(release.partition, [[0, None]])[-1][1] = now_ms()  # before the delete is sent
            outcome = await self.handover.carry_out(self.group, result, self.members, now_ms())
            for tp in outcome.claimed:
                self.held.setdefault(tp, []).append([now_ms(), None])  # after our create returned
            if outcome.taken:
                attempts = attempts.failed(now_ms())
            if result.waiting or outcome.taken:  # a legacy consumer must act first: wait for its znode to go
                wait_ms = max((attempts.next_at_ms or 0) - now_ms(), 0) or SCHEDULE.backoff_ms
                try:
                    await asyncio.wait_for(changed.wait(), wait_ms / 1000)
                except TimeoutError:
                    pass
                attempts = attempts.released(now_ms())


def legacy_intervals(events, left_at_ms: int) -> dict[int, list[tuple[int, int]]]:
    """partition -> [(claimed at, released at)] of every legacy member, from its own
    log; what it still held is closed at ``left_at_ms``, when it was signalled (its
    znodes went later: at its shutdown, or at its session's expiry)."""
    found: dict[int, list[tuple[int, int]]] = {}
    holding: dict[str, dict[int, int]] = {}
    for event in sorted(events, key=lambda e: e.ts_ms):
        mine = holding.setdefault(event.member, {})
        if event.event == "claim":
            mine.update({p: event.ts_ms for p in event.data["partitions"]})
        elif event.event == "release":
            for p, since in mine.items():
                found.setdefault(p, []).append((since, event.ts_ms))
            mine.clear()
    for mine in holding.values():
        for p, since in mine.items():
            found.setdefault(p, []).append((since, left_at_ms))
    return found


def assert_never_two_holders(topic: str, driver: Driver, events, left_at_ms: int) -> None:
    ours = {p: spans for (t, p), spans in driver.held.items() if t == topic}
    for p, spans in legacy_intervals(events, left_at_ms).items():
        for l_from, l_until in spans:
            for o_from, o_until in ours.get(p, []):
                overlap = l_from < (o_until or 2**62) and o_from < l_until
                assert not overlap, f"partition {p}: legacy held it {l_from}-{l_until}, we {o_from}-{o_until}"


def last_claims(events, since_ms: int = 0) -> dict[str, set[int]]:
    """member -> the partitions of its last claim at or after ``since_ms``."""
    claims: dict[str, set[int]] = {}
    for event in sorted(events, key=lambda e: e.ts_ms):
        if event.event == "claim" and event.ts_ms >= since_ms:
            claims[event.member] = set(event.data["partitions"])
    return claims


@pytest.fixture
def scene(services, zk_root, admin, unique_name, tmp_path):
    classpath = legacy_classpath_or_skip()
    topic, group = unique_name("handover-t"), unique_name("handover-g")
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], wait_for_metadata=True)
    started: list[LegacyGroup] = []

    def start(members: int, prefix: str = "m", streams: int = 1, whitelist: str | None = None) -> LegacyGroup:
        settings = LegacySettings(services.zookeeper, group, topic, members=members, prefix=prefix,
                                  commit_interval_ms=100, streams=streams, whitelist=whitelist,
                                  properties=(("zookeeper.session.timeout.ms", str(SESSION_TIMEOUT_MS)),
                                              ("rebalance.backoff.ms", str(SCHEDULE.backoff_ms)),
                                              ("rebalance.max.retries", str(SCHEDULE.max_retries))))
        process = LegacyGroup(settings, classpath, tmp_path / f"legacy-{len(started)}.log",
                              jvm_args=(f"-D{process_marker()}",))
        started.append(process)
        return process.start()

    yield topic, group, start
    for process in started:
        process.stop()
    zk_root.delete(f"/consumers/{group}", recursive=True)




@pytest.mark.parametrize("leave", ["stop", "kill"])
def test_a_member_joins_legacy_consumers_then_takes_over_when_they_leave(services, zk_root, scene, leave):
    topic, group, start = scene
    legacy = start(members=2)
    legacy.wait_for(lambda ev: sorted(p for ps in last_claims(ev).values() for p in ps) == list(range(PARTITIONS)),
                    90, "the legacy members own every partition")
    zid = zkcoord_consumer_id(group, now_ms(), "0a1b2c3d")
    # What Kafka 1.1.1 wrote is, byte for byte, what we write for the same subscription.
    data, _ = zk_root.get(f"/consumers/{group}/ids/{group}_m1")
    assert encode_registration({topic: 1}, int(json.loads(data)["timestamp"])) == data

    async def scenario():
        async with connection(services.zookeeper, session_timeout_ms=SESSION_TIMEOUT_MS) as conn:
            driver = Driver(LegacyRebalanceZk(conn), group)
            driver.members[zid] = Member(zid, {topic: 1})
            joined_ms = now_ms()
            mixed = await driver.settle()
            # The same answer on both sides: m1, m2 sort before g_zkcoord-...: 0-1, 2-3, ours 4-5.
            expected = {(topic, p): t for p, t in enumerate([f"{group}_m1-0"] * 2 + [f"{group}_m2-0"] * 2
                                                            + [f"{zid}-0"] * 2)}
            assert mixed.target == expected and mixed.assignment == {zid: frozenset({(topic, 4), (topic, 5)})}
            legacy.wait_for(lambda ev: last_claims(ev, joined_ms) == {"m1": {0, 1}, "m2": {2, 3}}, 60,
                            "the legacy members claim their share of the same answer")
            await eventually(lambda: owners(zk_root, group, topic) == {p: t for (_, p), t in expected.items()},
                             "the owner znodes as the answer says")

            left_at_ms = now_ms()
            legacy.kill() if leave == "kill" else legacy.stop()
            # A killed consumer is a member (registered, holding its range) until its session expires,
            # for the legacy consumers as for us: the plan stays settled, nothing is claimed, until /ids changes.
            if leave == "kill":
                right_after = plan((await driver.handover.read(group)).view(driver.members))
                assert right_after.settled and right_after.target == expected
            await eventually(lambda: zk_root.get_children(f"/consumers/{group}/ids") == [zid],
                             "the legacy registrations gone", timeout_s=SESSION_TIMEOUT_MS / 1000 + 60)
            alone = await driver.settle()
            assert alone.target == {(topic, p): f"{zid}-0" for p in range(PARTITIONS)}
            assert alone.assignment == {zid: frozenset((topic, p) for p in range(PARTITIONS))}
            assert zk_root.get_children(f"/consumers/{group}/ids") == [zid]
            assert_never_two_holders(topic, driver, legacy.events(), left_at_ms)

            driver.members.clear()  # the member leaves: nothing of ours stays behind
            gone = await driver.settle()
            assert gone.target == {} and zk_root.get_children(f"/consumers/{group}/ids") == []
            assert owners(zk_root, group, topic) == {}

    asyncio.run(scenario())
    assert [e for e in legacy.events() if e.event == "error"] == []


def test_members_with_two_streams_or_a_whitelist_get_the_same_answer(services, zk_root, scene):
    topic, group, start = scene
    streams = start(members=1, prefix="a", streams=2)
    filtered = start(members=1, prefix="w", whitelist=topic)  # a regex matching this topic only
    for process, member in ((streams, "a1"), (filtered, "w1")):
        process.wait_for(lambda ev, m=member: m in last_claims(ev), 90, f"{member} claims its share")
    zid = zkcoord_consumer_id(group, now_ms(), "00000001")

    async def scenario():
        async with connection(services.zookeeper, session_timeout_ms=SESSION_TIMEOUT_MS) as conn:
            driver = Driver(LegacyRebalanceZk(conn), group)
            driver.members[zid] = Member(zid, {topic: 1})
            joined_ms = now_ms()
            mixed = await driver.settle()
            # Threads in Java's order: a1-0, a1-1, w1-0, ours; 6 partitions: two, two, one, one.
            threads = [f"{group}_a1-0"] * 2 + [f"{group}_a1-1"] * 2 + [f"{group}_w1-0", f"{zid}-0"]
            expected = {(topic, p): t for p, t in enumerate(threads)}
            assert mixed.target == expected
            reading = await driver.handover.read(group)
            assert reading.registrations[f"{group}_w1"].wildcard is not None
            # (a1 held 0-3 before we joined too: only a claim after our registration counts)
            streams.wait_for(lambda ev: last_claims(ev, joined_ms) == {"a1": {0, 1, 2, 3}}, 60, "a1 claims 0-3")
            filtered.wait_for(lambda ev: last_claims(ev, joined_ms) == {"w1": {4}}, 60, "w1 claims 4")
            await eventually(lambda: owners(zk_root, group, topic) == {p: t for (_, p), t in expected.items()},
                             "the owner znodes as the answer says")
            left_at_ms = now_ms()
            streams.stop()
            filtered.stop()
            assert_never_two_holders(topic, driver, streams.events() + filtered.events(), left_at_ms)
            driver.members.clear()
            await driver.settle()

    asyncio.run(scenario())
    assert [e for e in streams.events() + filtered.events() if e.event == "error"] == []
