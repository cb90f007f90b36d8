"""Offsets through zkcoord: commit (sync, async, explicit with metadata),
close and restart at the committed offsets, committed(), position(), seek(),
manual assignment without membership, pause/resume, pattern subscriptions."""

from __future__ import annotations

import pytest

from tests.integration.test_client_support import (
    ThreadDaemons,
    config,
    create_topic,
    eventually,
    poll_all,
    produce,
    start_member,
)
from zkcoord.client import Consumer, OffsetAndMetadata, RebalanceListener, RebalanceListenerError, TopicPartition

pytestmark = pytest.mark.integration


def consume_until(member, wanted: set, what: str) -> None:
    eventually(lambda: wanted <= set(member.keys()), what, step=poll_all([member]))


def test_commit_close_restart_resumes_at_committed_offsets(services, zk_hosts, zk, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 3)
    tp0, tp1, tp2 = (TopicPartition(topic, p) for p in range(3))
    produced = produce(bootstrap, topic, range(3), 10)
    with ThreadDaemons(zk_hosts, 2) as daemons:
        cfg = config(daemons.addresses, bootstrap, group)
        first = start_member("first", cfg, [topic])
        first.commit_in_listener = False
        consume_until(first, produced, "the first consumer read all 30 records")
        # Explicit offsets: int, (offset, metadata), OffsetAndMetadata.
        first.consumer.commit({tp0: 4, tp1: (7, "seven"), tp2: OffsetAndMetadata(2, "two", -1)})
        assert first.consumer.committed([tp0, tp1, tp2]) == {
            tp0: OffsetAndMetadata(4, "", -1), tp1: OffsetAndMetadata(7, "seven", -1),
            tp2: OffsetAndMetadata(2, "two", -1)}
        assert first.consumer.committed(tp1).metadata == "seven"
        first.consumer.close()
        assert zk.get(f"/consumers/{group}/offsets/{topic}/1")[0] == b"7"

        second = start_member("second", cfg, [topic])
        second.commit_in_listener = False
        resumed = {(p, f"r-{p}-{i}") for p, start in ((0, 4), (1, 7), (2, 2)) for i in range(start, 10)}
        consume_until(second, resumed, "the restarted consumer read from the committed offsets")
        assert sorted(second.keys()) == sorted(resumed)  # nothing before the committed offsets
        assert {p: min(r.offset for r in second.records if r.partition == p) for p in range(3)} == {0: 4, 1: 7, 2: 2}
        assert [second.consumer.position(tp) for tp in (tp0, tp1, tp2)] == [10, 10, 10]

        # Asynchronous commit of everything consumed; its callback runs in a later call.
        results = []
        second.consumer.commit_async(callback=lambda offsets, error: results.append((offsets, error)))
        eventually(lambda: results, "the async commit callback ran", step=lambda: second.consumer.poll(50))
        offsets, error = results[0]
        assert error is None and {tp: o.offset for tp, o in offsets.items()} == {tp0: 10, tp1: 10, tp2: 10}
        assert {tp: o.offset for tp, o in second.consumer.committed([tp0, tp1, tp2]).items()} == \
            {tp0: 10, tp1: 10, tp2: 10}
        assert zk.get(f"/consumers/{group}/offsets/{topic}/2")[0] == b"10"

        # seek() re-reads from the given offset; committed offsets stay.
        second.records.clear()
        second.consumer.seek(tp0, 6)
        consume_until(second, {(0, f"r-0-{i}") for i in range(6, 10)}, "re-read after seek")
        assert sorted(r.offset for r in second.records) == [6, 7, 8, 9]
        assert second.consumer.committed(tp0).offset == 10
        second.consumer.close()


def test_manual_assignment_commits_and_fetches_through_zkcoord(services, zk_hosts, zk, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 2)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    produce(bootstrap, topic, range(2), 10)
    with ThreadDaemons(zk_hosts, 2) as daemons:
        cfg = config(daemons.addresses, bootstrap, group)
        with Consumer(cfg) as consumer:
            consumer.assign([tp0, tp1])
            consumer.pause(tp0)
            got = []
            eventually(lambda: len(got) == 10, "10 records of partition 1",
                       step=lambda: got.extend(consumer.poll(timeout_ms=100)))
            assert {r.partition for r in got} == {1} and consumer.paused() == {tp0}
            consumer.resume(tp0)
            eventually(lambda: len(got) == 20, "then the 10 of partition 0",
                       step=lambda: got.extend(consumer.poll(timeout_ms=100)))
            assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in (0, 1) for o in range(10)]
            consumer.commit({tp0: (10, "manual")})
            consumer.commit()  # everything consumed
            assert consumer.assignment() == {tp0, tp1}
            assert consumer.membership().member_id == ""  # never joined the group
        assert zk.get(f"/consumers/{group}/offsets/{topic}/0")[0] == b"10"

        with Consumer(cfg) as again:
            again.assign([tp0, tp1])
            assert again.committed([tp0, tp1]) == {tp0: OffsetAndMetadata(10, "", -1),
                                                   tp1: OffsetAndMetadata(10, "", -1)}
            assert again.poll(timeout_ms=500) == []  # resumes at the end
            assert again.position(tp1) == 10


def test_pattern_subscription(services, zk_hosts, unique_name):
    prefix, group = unique_name("p"), unique_name("g")
    bootstrap = services.bootstrap_servers
    matching = [f"{prefix}-a", f"{prefix}-b"]
    other = unique_name("other")
    for topic in [*matching, other]:
        create_topic(bootstrap, topic, 2)
    expected = {(t, p, f"r-{p}-{i}") for t in matching for p in range(2) for i in range(3)}
    for topic in [*matching, other]:
        produce(bootstrap, topic, range(2), 3)
    with ThreadDaemons(zk_hosts, 1) as daemons:
        member = start_member("m", config(daemons.addresses, bootstrap, group), None,
                              pattern=f"^{prefix}-.*")
        try:
            seen = lambda: {(r.topic, r.partition, r.key.decode()) for r in member.records}  # noqa: E731
            eventually(lambda: expected <= seen(), "records of both matching topics", step=poll_all([member]))
            assert seen() == expected
            assert member.consumer.subscription() == set(matching)
            assert member.consumer.assignment() == {TopicPartition(t, p) for t in matching for p in range(2)}
        finally:
            member.consumer.close()


def test_a_failing_listener_is_raised_by_poll(services, zk_hosts, unique_name):
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 1)

    class Broken(RebalanceListener):
        def on_assigned(self, partitions):
            raise ValueError("cannot load state")

    with ThreadDaemons(zk_hosts, 1) as daemons:
        with Consumer(config(daemons.addresses, services.bootstrap_servers, group)) as consumer:
            consumer.subscribe([topic], listener=Broken())
            raised = []

            def step():
                try:
                    consumer.poll(timeout_ms=100)
                except RebalanceListenerError as exc:
                    raised.append(exc)

            eventually(lambda: raised, "poll raised the listener's failure", step=step)
            assert "ValueError('cannot load state')" in str(raised[0])
            assert isinstance(raised[0].__cause__.__cause__, ValueError)
