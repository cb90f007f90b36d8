"""Background asyncio tasks that are neither lost nor silent.

asyncio keeps only a weak reference to a task: one nobody holds may be
garbage-collected mid-way, and an exception nobody retrieves shows up, if
at all, as "Task exception was never retrieved" at exit. Every fire-and-
forget task of the daemon goes through a :class:`Background`: it holds the
task until it ends and logs its failure (with the traceback) under the
owner's logger and a name that says what it was doing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["Background", "retrieve"]


class Background:
    """The background tasks of one owner (a manager, a runtime, a watcher)."""

    def __init__(self, log: logging.Logger, what: str) -> None:
        self._log, self._what = log, what
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task:
        """Run ``coro`` on the running loop, held until it ends; a failure is logged."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self._log.error("%s: background task %s failed", self._what, task.get_name(), exc_info=exc)

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def __len__(self) -> int:
        return len(self._tasks)


def retrieve(future: asyncio.Future) -> None:
    """A done callback for a future some caller may never await (a batch's
    answer for one of its groups): its exception is read, so asyncio does
    not report it as never retrieved; whoever awaits it still gets it."""
    if not future.cancelled():
        future.exception()
