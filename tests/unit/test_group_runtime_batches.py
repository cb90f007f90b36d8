"""Calls that wait for a group's lock are decided together (GroupRuntime._drain):
one ZooKeeper write for all of them, each caller answered as if alone, the
group as the calls one at a time would leave it."""

from __future__ import annotations

import asyncio

import pytest

from zkcoord.core import group as core
from zkcoord.core.messages import Outcome, Reply
from zkcoord.errors import NotOwnerError
from zkcoord.server.group_runtime import GroupRuntime, GroupUnavailableError
from tests.support.fake_clock import FakeClock

CONFIG = core.GroupConfig(min_session_timeout_ms=0, initial_rebalance_delay_ms=0)


class Store:
    """The runtime's persist function: records each write; the first waits for ``release``."""

    def __init__(self, hold_first: bool = True, refuse: bool = False) -> None:
        self.writes: list[dict] = []
        self.release = asyncio.Event()
        self.hold_first, self.refuse = hold_first, refuse

    async def persist(self, group_id, changes, version):
        self.writes.append(dict((key, r) for key, r, _ in changes)[""])
        if self.hold_first and len(self.writes) == 1:
            await self.release.wait()
        if self.refuse:
            raise NotOwnerError("node 1 does not own group 'g'", group_id)
        return (version or 0) + 1


def persisting(token: int, tag: str, fail: bool = False):
    """A decision that changes the group's protocol type to ``tag`` (so each one's
    group differs) and must be written; it answers its own token with the tag and
    the protocol type it found, which shows the order the decisions ran in."""
    def decide(group, now):
        if fail:
            raise ValueError(f"decision {tag} failed")
        found = group.protocol_type
        return Outcome(group._replace_unchecked(protocol_type=tag), True, (Reply(token, "test", (tag, found)),))
    return decide


async def loaded(store: Store) -> GroupRuntime:
    runtime = GroupRuntime("g", CONFIG, store.persist, on_step_down=lambda g: None, clock=FakeClock().clock)
    await runtime.load(None, None)
    return runtime


def test_calls_waiting_for_a_write_are_decided_in_order_and_written_once():
    async def scenario():
        store = Store()
        runtime = await loaded(store)
        first = asyncio.ensure_future(runtime.call(1, persisting(1, "a")))
        while not store.writes:  # the first call's write is in flight: the lock is held
            await asyncio.sleep(0)
        rest = [asyncio.ensure_future(runtime.call(t, persisting(t, f"t{t}"))) for t in range(2, 12)]
        await asyncio.sleep(0)
        store.release.set()
        answers = await asyncio.gather(first, *rest)
        return store.writes, answers, runtime.group.protocol_type

    writes, answers, final = asyncio.run(scenario())
    assert len(writes) == 2  # the first call's write, then one for the ten that waited
    assert answers[0] == ("a", None)
    assert answers[1:] == [(f"t{t}", "a" if t == 2 else f"t{t - 1}") for t in range(2, 12)]  # each saw the one before
    assert final == "t11"


def test_a_failed_decision_answers_only_its_caller_and_the_others_go_on():
    async def scenario():
        store = Store()
        runtime = await loaded(store)
        first = asyncio.ensure_future(runtime.call(1, persisting(1, "a")))
        while not store.writes:
            await asyncio.sleep(0)
        rest = [asyncio.ensure_future(runtime.call(t, persisting(t, f"t{t}", fail=t == 3))) for t in (2, 3, 4)]
        await asyncio.sleep(0)
        store.release.set()
        return await asyncio.gather(first, *rest, return_exceptions=True), runtime.group.protocol_type

    (first, two, three, four), final = asyncio.run(scenario())
    assert isinstance(three, ValueError)
    assert (first, two, four) == (("a", None), ("t2", "a"), ("t4", "t2")) and final == "t4"


def test_a_refused_write_fails_every_call_of_its_batch_and_changes_nothing():
    async def scenario():
        store = Store(refuse=True)
        runtime = await loaded(store)
        first = asyncio.ensure_future(runtime.call(1, persisting(1, "a")))
        while not store.writes:
            await asyncio.sleep(0)
        rest = [asyncio.ensure_future(runtime.call(t, persisting(t, f"t{t}"))) for t in (2, 3)]
        await asyncio.sleep(0)
        store.release.set()
        answers = await asyncio.gather(first, *rest, return_exceptions=True)
        return answers, runtime.group.protocol_type in ("a", "t2", "t3"), runtime.active, len(store.writes)

    answers, applied, active, writes = asyncio.run(scenario())
    assert all(isinstance(a, GroupUnavailableError) for a in answers)  # NOT_COORDINATOR: stepped down
    assert (applied, active, writes) == (False, False, 1)  # nothing applied; the batch after it never written


def test_a_caller_that_went_away_before_its_turn_is_not_decided():
    async def scenario():
        store = Store()
        runtime = await loaded(store)
        first = asyncio.ensure_future(runtime.call(1, persisting(1, "a")))
        while not store.writes:
            await asyncio.sleep(0)
        gone = asyncio.ensure_future(runtime.call(2, persisting(2, "gone")))
        stays = asyncio.ensure_future(runtime.call(3, persisting(3, "stays")))
        await asyncio.sleep(0)
        gone.cancel()
        store.release.set()
        with pytest.raises(asyncio.CancelledError):
            await gone
        return await first, await stays, runtime.group.protocol_type

    first, stays, final = asyncio.run(scenario())
    assert first == ("a", None) and stays == ("stays", "a") and final == "stays"
