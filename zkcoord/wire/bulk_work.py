"""A request's millions of objects, made off the event loop and without the
cyclic garbage collector's full passes; the slices big requests are worked
through in.

A handler walking thousands of group ids, partitions or groups yields to
the event loop every :data:`SLICE` of them (:func:`pause_every`), so one
client's big request never holds other groups' heartbeats for long. Work
whose items cost a lot each (a takeover loading groups: a third of a
millisecond a group) yields by time instead (:class:`TimeSlice`): every
:data:`LOOP_SLICE_S` of work. Requests that come meanwhile wait at most that
long, and are answered spread as they came, not together after a long slice
(members answered together would heartbeat in step from then on).

An 8 MiB request names up to two million partitions; decoding it, and
building and encoding its answer, make millions of objects. That work runs in
a worker thread (:func:`off_loop`), so the event loop keeps serving other
clients meanwhile. But while those objects live, each of the collector's full
collections walks all of them with the GIL held, and stops the whole daemon:
another group's heartbeats measured up to 1 s late (``bench/bench_hostile.py``,
OffsetFetch of 2M partitions). Decoded requests and encoded answers hold no
reference cycles, so reference counting frees them; the cyclic collector is
paused while such work runs, counted, so overlapping work keeps it paused
until the last ends, and only if it was enabled before. A pause is bounded
by ``MAX_PAUSE_S``: work that starts later, while others still hold the
pause, does not join it, and the pause ends at the next piece of work that
begins or ends, even while others still hold it; so the collector runs again
even under a steady flood of big requests (whatever cyclic garbage the rest
of the daemon made meanwhile is then collected).

Two kinds of big request hold the pause for their whole life, not only for
the pieces that run in a worker thread (:func:`collector_paused`): a frame
too big to decode inline (the transport's rule 7, and the gateway's rule 8:
an OffsetCommit of 460,000 partitions), from its decoding until it is
answered, and a fetch of every
offset of a group (a small request whose answer may be 100,000 partitions).
Their objects (half a million to a million) live for seconds and then die.
With the collector running meanwhile, young collections walked them again
and again: single collections of 106-186 ms stopped the daemon. Held for the
request's life, they are freed by reference counting before the collector
runs again, and no collection walks them. What such a request leaves behind
is walked when the pause ends, in one collection: so a big commit does not
cache its partitions' znode paths (``zk/offsets.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

__all__ = ["off_loop", "collector_paused", "SLICE", "LOOP_SLICE_S", "TimeSlice", "in_slices", "pause_every"]

SLICE = 500  # partitions or groups a handler works through between two yields to the event loop
LOOP_SLICE_S = 0.005  # the most a TimeSlice works before it yields to the event loop

T = TypeVar("T")
MAX_PAUSE_S = 10.0
_lock = threading.Lock()
_running = 0  # pieces of work holding the pause
_resume = False  # re-enable the collector when the last work ends
_since = 0.0  # when the pause began
_clock = time.monotonic


def _begin() -> bool:
    """Join (or start) the pause; False when it has lasted MAX_PAUSE_S already
    (the collector then runs again, if it ran before the pause)."""
    global _running, _resume, _since
    with _lock:
        if _running == 0:
            _resume, _since = gc.isenabled(), _clock()
            gc.disable()
        elif _clock() - _since > MAX_PAUSE_S:
            _over()
            return False
        _running += 1
        return True


def _end() -> None:
    global _running
    with _lock:
        _running -= 1
        if _running == 0 and _resume:
            gc.enable()
        elif _running and _clock() - _since > MAX_PAUSE_S:
            _over()


def _over() -> None:
    """The pause lasted long enough: the collector runs again though work still holds it (with ``_lock`` held)."""
    global _resume
    if _resume:
        _resume = False
        gc.enable()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic collector paused while the block runs (joined as pieces of
    work join it: at most about MAX_PAUSE_S in all)."""
    joined = _begin()
    try:
        yield
    finally:
        if joined:
            _end()


def _without_collector(fn: Callable[..., T], *args: Any) -> T:
    with collector_paused():
        return fn(*args)


async def in_slices(items: Sequence[T], size: int = SLICE) -> AsyncIterator[Sequence[T]]:
    """``items`` in slices of ``size``, with a yield to the event loop between two."""
    for start in range(0, len(items), size):
        if start:
            await asyncio.sleep(0)
        yield items[start:start + size]


async def pause_every(index: int) -> None:
    """Yield to the event loop at every SLICE-th item of a long request."""
    if index and index % SLICE == 0:
        await asyncio.sleep(0)


class TimeSlice:
    """Yields to the event loop once ``budget_s`` has passed since it last did
    (``clock``: monotonic seconds). Call :meth:`pause` between two items."""

    __slots__ = ("budget_s", "_clock", "_since")

    def __init__(self, budget_s: float = LOOP_SLICE_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.budget_s, self._clock = budget_s, clock
        self._since = clock()

    async def pause(self) -> None:
        if self._clock() - self._since >= self.budget_s:
            await asyncio.sleep(0)
            self._since = self._clock()


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread, the cyclic collector paused meanwhile."""
    return await asyncio.to_thread(_without_collector, fn, *args)
