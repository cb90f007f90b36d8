"""``make demo``'s worker pool (``zkcoord.local.demo``) reports each
assignment once, when it is applied.

Between a member's JoinGroup answer and its SyncGroup answer, kafka-python
already knows the new generation but not yet the member's partitions. The
test holds one of the demo's workers in that window: the group's leader is
a hand-driven member (``tests/support/members.py``) that sends its
SyncGroup only when the worker has polled in the new generation. What the
worker reported is then checked: exactly one assignment, the one the
leader gave it, in that generation. The order of the steps is forced by
the protocol (a follower's SyncGroup waits for the leader's), never by
time.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from kafka.protocol.consumer.group import JoinGroupRequest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from tests.integration.test_client_support import WAIT_S, ThreadDaemons, create_topic, eventually
from tests.support.members import Ledger, Member
from tests.support.wire import parse_address
from zkcoord.client import Consumer
from zkcoord.core.errors import ErrorCode
from zkcoord.local.demo import Worker, worker_config

pytestmark = pytest.mark.integration


def consumer_assignment(topic: str, partitions) -> bytes:
    """A SyncGroup assignment as Kafka's consumer protocol encodes it."""
    return ConsumerProtocolAssignment(0, [(topic, sorted(partitions))], b"").encode()


class Leader(Member):
    """A hand-driven member whose JoinGroup subscribes to ``topic`` as a Kafka consumer's does."""

    def __init__(self, topic: str, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.topic = topic

    def join_request(self) -> JoinGroupRequest:
        request = super().join_request()
        request.protocols = [JoinGroupRequest.JoinGroupRequestProtocol(
            name="range", metadata=ConsumerProtocolSubscription(0, [self.topic], b"").encode())]
        return request


def test_a_worker_reports_its_assignment_once_when_it_is_applied(services, zk_hosts, unique_name, capsys):
    topic, group = unique_name("orders"), unique_name("workers")
    create_topic(services.bootstrap_servers, topic, 6)
    loop = asyncio.new_event_loop()
    run = loop.run_until_complete
    with ThreadDaemons(zk_hosts, 1) as daemons:
        addresses = [parse_address(a) for a in daemons.addresses.split(",")]
        leader = Leader(topic, "leader", group, lambda: addresses, Ledger(), session_timeout_ms=60_000,
                        rebalance_timeout_ms=60_000)
        deadline = time.monotonic() + WAIT_S
        try:
            first = run(leader.join(deadline))
            assert first.generation_id == 1
            synced = run(leader.call(leader.sync_request(1, {leader.member_id: consumer_assignment(
                topic, range(6))}), deadline))
            assert synced.error_code == ErrorCode.NONE
            leader.generation = 1

            worker = Worker("worker-2", worker_config(daemons.addresses, services.bootstrap_servers, group), topic,
                            {}, threading.Lock())
            with Consumer(worker.config) as consumer:
                worker.subscribe(consumer)
                step = lambda: worker.step(consumer)  # noqa: E731
                # The worker's JoinGroup starts a rebalance; the leader hears of it and joins generation 2.
                eventually(lambda: run(leader.heartbeat(deadline)) is ErrorCode.REBALANCE_IN_PROGRESS,
                           "the leader told of the worker's join", step=step)
                joined = run(leader.join(deadline))
                assert joined.generation_id == 2 and joined.leader == leader.member_id
                (worker_id,) = {m.member_id for m in joined.members} - {leader.member_id}

                # The worker has the generation, its SyncGroup waits for the leader's: no assignment yet.
                eventually(lambda: consumer.membership().generation_id == 2, "the worker in generation 2",
                           step=step)
                for _ in range(2):
                    step()
                assert consumer.assignment() == frozenset()
                assert worker.assignments == []

                synced = run(leader.call(leader.sync_request(2, {
                    leader.member_id: consumer_assignment(topic, (0, 1, 4, 5)),
                    worker_id: consumer_assignment(topic, (2, 3))}), deadline))
                assert synced.error_code == ErrorCode.NONE
                eventually(lambda: worker.assignments, "the worker's assignment applied", step=step)
                for _ in range(2):
                    step()
                assert worker.assignments == [(2, [2, 3])]
                assert capsys.readouterr().out == "  worker-2: generation 2: partitions [2, 3]\n"
        finally:
            run(leader.close())
            loop.close()
