"""The thin consumer hears of a rebalance through the daemon's rebalance
notice (``zkcoord/client/notice.py``), not at its next heartbeat.

The old member's heartbeat interval is 25 s: after it became Stable its
next heartbeat is due 25 s later, so a rebalance that completes before any
heartbeat of its was sent can only have been heard through the notice. The
test asserts on that order (what the old member's I/O thread logged) and on
the notice's own count, never on time. A member whose coordinator does not
hold heartbeats (hold 0) falls back to its heartbeats and still rebalances.
"""

from __future__ import annotations

import logging

import pytest

from tests.integration.test_client_rejoin import HEARTBEAT, JOIN, steps_of
from tests.integration.test_client_support import (
    ThreadDaemons,
    config,
    create_topic,
    eventually,
    poll_all,
    polling_in_background,
    stable_split,
    start_member,
)
from zkcoord.client import TopicPartition

pytestmark = pytest.mark.integration


def notice_of(member):
    return member.consumer._kafka._coordinator._notice


def run_join(zk_hosts, bootstrap, topic, group, caplog, *, hold_ms: int, heartbeat_ms: int):
    """An old member alone, then a new one joins; returns (old, steps the
    old member's I/O thread logged after the new one started)."""
    create_topic(bootstrap, topic, 2)
    partitions = frozenset(TopicPartition(topic, p) for p in range(2))
    with ThreadDaemons(zk_hosts, 1, rebalance_notice_hold_ms=hold_ms) as daemons:
        cfg = config(daemons.addresses, bootstrap, group, heartbeat_interval_ms=heartbeat_ms,
                     session_timeout_ms=60_000, fetch_max_wait_ms=500, request_timeout_ms=40_000)
        old = start_member("old", cfg, [topic])
        eventually(lambda: old.consumer.assignment() == partitions, "the old member owns both partitions",
                   step=poll_all([old]))
        new = None
        try:
            with polling_in_background(old, 1_000) as errors:
                caplog.clear()
                new = start_member("new", cfg, [topic])
                eventually(lambda: stable_split([old, new], partitions) and new.consumer.assignment(),
                           "both members own one partition", step=poll_all([new]), timeout_s=90)
                assert not errors, errors
            notice = notice_of(old)
            return old, steps_of(caplog, "old"), (notice.notices, notice._unsupported is not None)
        finally:
            if new is not None:
                new.consumer.close()
            old.consumer.close()


def test_old_member_rejoins_on_the_notice_before_any_heartbeat(services, zk_hosts, unique_name, caplog):
    caplog.set_level(logging.DEBUG, logger="kafka.coordinator")
    _, steps, (notices, unsupported) = run_join(zk_hosts, services.bootstrap_servers, unique_name("t"),
                                                unique_name("g"), caplog, hold_ms=5_000, heartbeat_ms=25_000)
    assert (notices, unsupported) == (1, False)
    # Its first step after the new member started is the rejoin; no heartbeat told it.
    assert [s for s in steps if s in (HEARTBEAT, JOIN)][:1] == [JOIN], steps


def test_without_the_hold_a_member_hears_of_the_rebalance_from_its_heartbeat(
        services, zk_hosts, unique_name, caplog):
    caplog.set_level(logging.DEBUG, logger="kafka.coordinator")
    _, steps, (notices, unsupported) = run_join(zk_hosts, services.bootstrap_servers, unique_name("t"),
                                                unique_name("g"), caplog, hold_ms=0, heartbeat_ms=1_000)
    assert (notices, unsupported) == (0, True)  # the daemon did not advertise the notice
    assert HEARTBEAT in steps and JOIN in steps
    assert steps.index(HEARTBEAT) < steps.index(JOIN), steps


def test_closing_with_a_held_heartbeat_counts_no_heartbeat_error(services, zk_hosts, unique_name):
    """A zkcoord consumer that closes has a heartbeat held on its notice
    connection; its LeaveGroup answers it first, so closing adds no
    Heartbeat UNKNOWN_MEMBER_ID to the daemon's error counts."""
    topic, group = unique_name("t"), unique_name("g")
    create_topic(services.bootstrap_servers, topic, 2)
    with ThreadDaemons(zk_hosts, 1, rebalance_notice_hold_ms=30_000, metrics_listen="127.0.0.1:0") as daemons:
        cfg = config(daemons.addresses, services.bootstrap_servers, group, session_timeout_ms=60_000)
        member = start_member("closing", cfg, [topic])
        daemon = daemons.daemons[0]
        try:
            eventually(lambda: len(member.consumer.assignment()) == 2, "the member owns both partitions",
                       step=poll_all([member]))
            eventually(lambda: daemon.manager.runtimes[group].held_heartbeats == 1, "its heartbeat is held",
                       step=poll_all([member]))
        finally:
            member.consumer.close()
        count = daemon.metrics.registry.get_sample_value
        eventually(lambda: count("zkcoord_requests_total", {"api": "LeaveGroup", "error": "NONE"}) == 1,
                   "the LeaveGroup is counted")
        eventually(lambda: daemon.manager.runtimes[group].held_heartbeats == 0, "the hold ended")
        assert count("zkcoord_requests_total", {"api": "Heartbeat", "error": "UNKNOWN_MEMBER_ID"}) is None
