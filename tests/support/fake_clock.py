"""A fake millisecond clock with ``call_later``, to drive timers without sleeping.

:class:`FakeClock` stands in for the event loop's timers wherever zkcoord
takes a clock and something with ``call_later`` (the runtime's
:class:`~zkcoord.server.group_runtime.KeyedTimers`, a
:class:`~zkcoord.server.group_runtime.GroupRuntime`, the
:class:`~zkcoord.server.manager.GroupManager`). Time moves only when a test
says so (:meth:`FakeClock.advance`); callbacks due by then run in (time,
arming order), as asyncio runs them. The async forms also let the event
loop run what the callbacks started (a timer's expiry is a task), without
waiting on the real clock: :meth:`FakeClock.settle` yields to the loop a
fixed number of times, enough for work that awaits nothing but other tasks.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

SETTLE_STEPS = 50  # loop iterations that finish any task chain awaiting only in-memory work


@dataclass
class FakeHandle:
    when_ms: int | None  # None: ran
    seq: int
    callback: object
    args: tuple
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class FakeClock:
    now: int = 1_000_000  # not 0: a deadline of 0 would look unset
    handles: list[FakeHandle] = field(default_factory=list)

    def clock(self) -> int:
        """The current time in ms (pass as a ``clock``)."""
        return self.now

    def call_later(self, delay_s: float, callback, *args) -> FakeHandle:
        handle = FakeHandle(self.now + round(delay_s * 1000), len(self.handles), callback, args)
        self.handles.append(handle)
        return handle

    def pending(self) -> list[FakeHandle]:
        return [h for h in self.handles if not h.cancelled and h.when_ms is not None]

    def run_until(self, to_ms: int) -> None:
        """Run due handles in (time, arming order), as asyncio does, up to ``to_ms``."""
        while True:
            due = sorted((h.when_ms, h.seq) for h in self.pending() if h.when_ms <= to_ms)
            if not due:
                break
            handle = self.handles[due[0][1]]
            self.now = max(self.now, handle.when_ms)
            handle.when_ms = None
            handle.callback(*handle.args)
        self.now = max(self.now, to_ms)

    async def settle(self) -> None:
        """Let the event loop run what is ready (tasks the callbacks started), and
        the callbacks that became due meanwhile, without moving time."""
        for _ in range(SETTLE_STEPS):
            await asyncio.sleep(0)
            self.run_until(self.now)

    async def advance(self, ms: int, step_ms: int | None = None) -> None:
        """Move time on by ``ms``, settling after every due callback (and every
        ``step_ms``, if given), so what a timer starts runs at its own time."""
        end = self.now + ms
        while True:
            due = [h.when_ms for h in self.pending() if h.when_ms <= end]
            target = min(due) if due else end
            if step_ms is not None:
                target = min(target, self.now + step_ms)
            self.run_until(target)
            await self.settle()
            if self.now >= end and not [h for h in self.pending() if h.when_ms <= end]:
                return

    async def until_done(self, awaitable, limit_ms: int = 600_000):
        """Await ``awaitable`` while firing due timers and moving time to the
        next one (a parked JoinGroup answered by the join timer); AssertionError
        if it is not done within ``limit_ms`` of fake time."""
        task = asyncio.ensure_future(awaitable)
        end = self.now + limit_ms
        while not task.done():
            await self.settle()
            if task.done():
                break
            due = [h.when_ms for h in self.pending()]
            if not due or min(due) > end:
                task.cancel()
                raise AssertionError(f"not done within {limit_ms} ms of fake time, no timer left to fire")
            self.run_until(min(due))
        return task.result()
