"""A member rejoins as soon as it learns of a rebalance, not at its next
wake-up (``zkcoord/client/coordinator.py``, fix 4).

kafka-python learns of a rebalance on its I/O thread (a heartbeat answered
REBALANCE_IN_PROGRESS) and only records it; the JoinGroup is sent from the
application thread's ``poll()``. Before the fix that thread went on waiting
for a fetch answer, its poll timeout or the next heartbeat deadline, so a
member whose fetches are long-polled and whose poll timeout is long sent at
least one more heartbeat before rejoining, and the whole group waited for it.

The test asserts on the order of what the old member does on its I/O thread
after the notice (its next heartbeat vs its JoinGroup), never on time: the
heartbeat interval is long, so with the fix the JoinGroup comes first.
"""

from __future__ import annotations

import logging

import pytest

from tests.integration.test_client_support import (
    ThreadDaemons,
    config,
    create_topic,
    eventually,
    poll_all,
    polling_in_background,
    produce,
    stable_split,
    start_member,
)
from zkcoord.client import TopicPartition

pytestmark = pytest.mark.integration

NOTICE = "is rebalancing; rejoining"
HEARTBEAT = "Sending heartbeat"
JOIN = "(Re-)joining group"


def steps_of(caplog, client_id: str) -> list[str]:
    """What the member's kafka-python I/O thread logged, in order."""
    steps = []
    for record in caplog.records:
        if record.threadName != f"kafka-io-{client_id}":
            continue
        message = record.getMessage()
        steps += [step for step in (NOTICE, HEARTBEAT, JOIN) if step in message]
    return steps


def test_member_with_long_poll_rejoins_before_its_next_heartbeat(services, zk_hosts, unique_name, caplog):
    caplog.set_level(logging.DEBUG, logger="kafka.coordinator")
    topic, group = unique_name("t"), unique_name("g")
    bootstrap = services.bootstrap_servers
    create_topic(bootstrap, topic, 2)
    partitions = frozenset(TopicPartition(topic, p) for p in range(2))
    # Heartbeats every 3 s; an empty topic's fetch is held 20 s by the broker
    # and the old member's poll() waits 60 s: nothing but the rejoin request
    # can end its wait before its next heartbeat.
    with ThreadDaemons(zk_hosts, 1) as daemons:
        # Without the rebalance notice (tests/integration/test_client_notice.py), which would tell
        # the old member before its heartbeat does.
        cfg = config(daemons.addresses, bootstrap, group, heartbeat_interval_ms=3_000, session_timeout_ms=30_000,
                     fetch_max_wait_ms=20_000, request_timeout_ms=40_000, rebalance_notice=False)
        old = start_member("old", cfg, [topic])
        eventually(lambda: old.consumer.assignment() == partitions, "the old member owns both partitions",
                   step=poll_all([old]))
        new = None
        try:
            # produce() ends the old member's long poll, so the polling thread can stop.
            with polling_in_background(old, 60_000, before_join=lambda: produce(bootstrap, topic, range(2), 1)) \
                    as errors:
                caplog.clear()
                new = start_member("new", cfg, [topic])
                eventually(lambda: stable_split([old, new], partitions) and new.consumer.assignment(),
                           "both members own one partition", step=poll_all([new]))
                assert not errors, errors
            steps = steps_of(caplog, "old")
            assert NOTICE in steps, steps
            after_notice = [s for s in steps[steps.index(NOTICE) + 1:] if s in (HEARTBEAT, JOIN)]
            # Rejoined first; before the fix the next heartbeat came first.
            assert after_notice[:1] == [JOIN], steps
            assert [g for g, _, _ in old.revoked][-1] < [g for g, _, _ in old.assigned][-1]
        finally:
            if new is not None:
                new.consumer.close()
            old.consumer.close()
