"""server/bulk_work: the cyclic collector is paused while big work runs, for a bounded time."""

from __future__ import annotations

import asyncio
import gc

import pytest

from zkcoord.server import bulk_work


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
