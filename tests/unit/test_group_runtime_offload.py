"""The runtime's side of an offloaded timer expiry (a large consumer group's
target assignment, :class:`~zkcoord.core.messages.Offloaded`): the
computation runs in a worker thread with the group's lock released, so the
group's own heartbeats are answered meanwhile (from the last target); the
result is written and applied once it is done, or dropped when the group is
no longer served here. Time is a fake clock; the worker thread is held on an
event the test sets."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

from zkcoord.core import groups
from zkcoord.core.consumer import target
from zkcoord.core.consumer.config import ConsumerGroupConfig
from zkcoord.core.consumer.messages import ConsumerHeartbeatRequest
from zkcoord.core.consumer.model import GroupState
from tests.support.fake_clock import FakeClock
from tests.unit.test_consumer_group import CONFIG, T
from zkcoord.server.group_runtime import GroupRuntime

OFFLOAD = replace(CONFIG, consumer=ConsumerGroupConfig(assignment_interval_ms=0, offload_min_size=0))
WAIT_S = 60  # a bound on the worker thread only, never a measure: the test fails only if it is stuck


class HeldComputation:
    """compute_target, held in its worker thread until released."""

    def __init__(self, monkeypatch):
        self.started, self.release = threading.Event(), threading.Event()
        real = target.compute_target

        def held(*args):
            self.started.set()
            assert self.release.wait(WAIT_S)
            return real(*args)

        monkeypatch.setattr(target, "compute_target", held)


async def _until(condition) -> None:
    for _ in range(WAIT_S * 100):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def _heartbeat(runtime: GroupRuntime, member_id: str, epoch: int, names=None):
    token = runtime.next_token()
    req = ConsumerHeartbeatRequest(token, "g", member_id, epoch, subscribed_topic_names=names,
                                   rebalance_timeout_ms=30_000 if epoch == 0 else -1, owned=() if epoch == 0 else None,
                                   client_id="c", client_host="/127.0.0.1")
    return runtime.call(token, lambda g, now: groups.decide(g, req, now, OFFLOAD))


async def _runtime(fake: FakeClock, writes: list) -> GroupRuntime:
    async def persist(group_id, changes, version):
        writes.append(changes)
        return (version or 0) + 1

    runtime = GroupRuntime("g", OFFLOAD, persist, on_step_down=lambda g: None, clock=fake.clock, timer_loop=fake)
    await runtime.load(None, None)
    return runtime


def test_heartbeats_are_answered_while_the_target_is_computed_and_it_lands_after(monkeypatch):
    asyncio.run(asyncio.wait_for(_answered_meanwhile(HeldComputation(monkeypatch)), WAIT_S))


async def _answered_meanwhile(held: HeldComputation) -> None:
    fake, writes = FakeClock(), []
    runtime = await _runtime(fake, writes)
    answer = await _heartbeat(runtime, "a", 0, ("t",))
    assert answer.member_epoch == 1 and runtime.group.target_pending
    fake.run_until(fake.now)  # the ASSIGN_KEY timer is due now: its expiry starts the computation
    await _until(held.started.is_set)
    written = len(writes)
    answer = await _heartbeat(runtime, "a", 1)  # the lock is free: answered from the last target
    assert answer.member_epoch == 1 and not answer.assignment
    assert runtime.group.state is GroupState.ASSIGNING and len(writes) == written
    held.release.set()
    await _until(lambda: not runtime.group.target_pending)
    assert len(writes) == written + 1 and runtime.group.assignment_epoch == 2
    answer = await _heartbeat(runtime, "a", 1)
    assert answer.member_epoch == 2 and {t: sorted(p) for t, p in answer.assignment.items()} == {T: [0, 1, 2, 3]}


def test_a_target_computed_for_a_group_no_longer_served_here_is_dropped(monkeypatch):
    asyncio.run(asyncio.wait_for(_dropped(HeldComputation(monkeypatch)), WAIT_S))


async def _dropped(held: HeldComputation) -> None:
    fake, writes = FakeClock(), []
    runtime = await _runtime(fake, writes)
    await _heartbeat(runtime, "a", 0, ("t",))
    fake.run_until(fake.now)
    await _until(held.started.is_set)
    written = len(writes)
    await runtime.unload("ownership lost")
    held.release.set()
    await _until(lambda: len(runtime._background) == 0)  # the expiry ends, writing nothing
    assert len(writes) == written and runtime.group.target_pending and not runtime.active
