"""wire/bulk_work: the cyclic collector is paused while big work runs, for a bounded time."""

from __future__ import annotations

import asyncio
import gc

import pytest

from zkcoord.wire import bulk_work


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(bulk_work, "_clock", lambda: now[0])
    was = gc.isenabled()
    gc.enable()
    yield now
    (gc.enable if was else gc.disable)()


def test_the_collector_is_paused_during_work_and_resumed_after(clock):
    seen = asyncio.run(bulk_work.off_loop(gc.isenabled))
    assert seen is False and gc.isenabled()


def test_overlapping_work_keeps_the_pause_until_the_last_ends(clock):
    assert bulk_work._begin() and bulk_work._begin()
    bulk_work._end()
    assert not gc.isenabled()
    bulk_work._end()
    assert gc.isenabled()


def test_work_starting_after_max_pause_does_not_join_it(clock):
    assert bulk_work._begin()
    clock[0] += bulk_work.MAX_PAUSE_S + 1
    assert not bulk_work._begin()  # runs with the collector as it is; does not extend the pause
    bulk_work._end()
    assert gc.isenabled()  # the flood's next piece finds the collector running again
    assert bulk_work._begin()  # and starts a new pause
    bulk_work._end()


def test_a_collector_disabled_before_stays_disabled(clock):
    gc.disable()
    asyncio.run(bulk_work.off_loop(lambda: None))
    assert not gc.isenabled()


def test_a_time_slice_yields_once_its_budget_has_passed_and_not_before(monkeypatch):
    """A takeover loads groups in slices of time (zkcoord.wire.bulk_work.TimeSlice):
    it yields to the event loop once 5 ms of work have passed, so requests that
    come meanwhile are answered as they came, not together after a batch."""
    now = [100.0]
    yields = []
    real_sleep = asyncio.sleep

    async def counting_sleep(delay, *args):
        yields.append(now[0])
        return await real_sleep(delay, *args)

    async def scenario():
        monkeypatch.setattr(bulk_work.asyncio, "sleep", counting_sleep)
        slice_ = bulk_work.TimeSlice(5.0, clock=lambda: now[0])  # whole numbers: exact sums
        for _ in range(10):  # a fifth of the budget a step: a yield every 5
            now[0] += 1.0
            await slice_.pause()
        await slice_.pause()  # no time passed: no yield

    asyncio.run(scenario())
    assert len(yields) == 2


def test_a_held_pause_spans_awaits_and_ends_with_the_block(clock):
    """A fetch of every offset holds the pause across its awaits, so that what it
    makes is freed before the collector runs again."""
    async def fetch():
        with bulk_work.collector_paused():
            await asyncio.sleep(0)
            seen = gc.isenabled()
            await bulk_work.off_loop(lambda: None)  # a piece of work inside joins the held pause
            return seen, gc.isenabled()

    assert asyncio.run(fetch()) == (False, False)
    assert gc.isenabled()


def test_a_pause_held_past_max_pause_ends_at_the_next_piece_of_work(clock):
    with bulk_work.collector_paused():
        clock[0] += bulk_work.MAX_PAUSE_S + 1
        assert not gc.isenabled()  # nothing began or ended yet
        asyncio.run(bulk_work.off_loop(lambda: None))  # does not join: the collector runs again
        assert gc.isenabled()
    assert gc.isenabled()
    with bulk_work.collector_paused():  # the next hold starts a new pause
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_held_pause_ends_when_the_block_raises(clock):
    with pytest.raises(RuntimeError):
        with bulk_work.collector_paused():
            raise RuntimeError("the fetch failed")
    assert gc.isenabled()
