"""The runtime of one group this daemon owns.

Owns the group's current (applied) :class:`~zkcoord.core.group.Group`, the
znode version of its state, its armed timers and the futures of parked
requests. It is the one place where group state changes, always in the same
order (the core's contract, :mod:`zkcoord.core.messages`):

1. under the group's lock, a pure handler decides an ``Outcome``;
2. if ``outcome.persist``, the fenced, versioned ZooKeeper write happens
   first; a failed write throws the outcome away;
3. only then the new group is applied, timers armed or cancelled, and
   replies released to the requests (current or parked) they answer.

A write refused because this daemon no longer owns the group makes the
runtime *step down*: parked requests get NOT_COORDINATOR, timers stop, and
the manager is told, so it drops the group. Timers are keyed asyncio handles
whose expiry runs ``handle_timer`` through the same three steps.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from zkcoord.core import group as core
from zkcoord.core.errors import ErrorCode
from zkcoord.errors import NotOwnerError, StateError, ZkcoordError

log = logging.getLogger(__name__)


class GroupUnavailableError(ZkcoordError):
    """This daemon cannot serve the group now; ``code`` says why (Kafka code)."""

    def __init__(self, group_id: str, code: ErrorCode, why: str = ""):
        super().__init__(f"group {group_id!r}: {code.name}{': ' + why if why else ''}")
        self.group_id = group_id
        self.code = code


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


# persist(group_id, record | None (delete), expected_version) -> new version
PersistFn = Callable[[str, "dict | None", "int | None"], Awaitable["int | None"]]


class GroupRuntime:
    """One owned group. Create with :meth:`load`; no I/O in the constructor."""

    def __init__(self, group_id: str, config: core.GroupConfig, persist: PersistFn,
                 on_step_down: Callable[[str], None], clock: Callable[[], int] = monotonic_ms,
                 on_persisted: Callable[[core.Group], None] | None = None):
        self.group_id = group_id
        self.config = config
        self._persist = persist
        self._on_step_down = on_step_down
        self._on_persisted = on_persisted  # membership or generation changed
        self._clock = clock
        self.group: core.Group = core.new_group(group_id)
        self.version: int | None = None  # znode version of the state; None: absent
        self.active = False
        self._lock = asyncio.Lock()
        self._tokens = itertools.count(1)
        self._futures: dict[int, asyncio.Future] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    # -- life cycle ----------------------------------------------------------
    async def load(self, record: dict | None, version: int | None) -> None:
        """Take the group over from its stored record (None: a new group)."""
        async with self._lock:
            self.version = version
            if record is None:
                self.group = core.new_group(self.group_id)
                self.active = True
                return
            stored = core.from_record(self.group_id, record)
            outcome = core.load_group(stored, self._clock(), self.config)
            self.active = True
            await self._apply(outcome)
        log.info("group %s loaded: %s generation %d, %d members", self.group_id,
                 self.group.state.value, self.group.generation_id, self.group.size)

    async def unload(self, reason: str) -> None:
        """Stop serving the group (ownership lost or daemon stopping)."""
        async with self._lock:
            self._unload_locked(reason)

    def _unload_locked(self, reason: str) -> None:
        if not self.active:
            return
        self.active = False
        outcome = core.handle_unload(self.group)
        self.group = outcome.group
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._release(outcome.replies)
        for future in self._futures.values():
            if not future.done():
                future.set_exception(GroupUnavailableError(self.group_id, ErrorCode.NOT_COORDINATOR, reason))
        log.info("group %s unloaded: %s", self.group_id, reason)

    # -- requests --------------------------------------------------------------
    def next_token(self) -> int:
        return next(self._tokens)

    async def call(self, token: int, decide: Callable[[core.Group, int], core.Outcome]) -> Any:
        """Run ``decide(group, now_ms)`` for the request carrying ``token`` and
        wait for the reply addressed to it (maybe released by a later outcome)."""
        future = asyncio.get_running_loop().create_future()
        self._futures[token] = future
        try:
            async with self._lock:
                self._require_active()
                await self._apply(decide(self.group, self._clock()))
            return await future
        finally:
            self._futures.pop(token, None)
            if future.done() and not future.cancelled():
                future.exception()  # a step-down may fail it while _apply raises: retrieved, not leaked

    async def read(self, decide: Callable[[core.Group, int], Any]) -> Any:
        """Run a decision that changes nothing (validation, describe)."""
        async with self._lock:
            self._require_active()
            return decide(self.group, self._clock())

    async def apply(self, decide: Callable[[core.Group, int], core.Outcome]) -> None:
        """Apply an outcome that answers no request (e.g. an accepted commit
        counting as a heartbeat)."""
        async with self._lock:
            self._require_active()
            await self._apply(decide(self.group, self._clock()))

    def _require_active(self) -> None:
        if not self.active:
            raise GroupUnavailableError(self.group_id, ErrorCode.NOT_COORDINATOR, "not owned here")

    # -- the one place state changes ---------------------------------------------
    async def _apply(self, outcome: core.Outcome) -> None:
        if outcome.persist:
            await self._write(outcome.group)
        self.group = outcome.group
        if outcome.persist and self._on_persisted is not None:
            self._on_persisted(outcome.group)
        loop = asyncio.get_running_loop()
        now = self._clock()
        for op in outcome.timers:
            old = self._timers.pop(op.key, None)
            if old is not None:
                old.cancel()
            if isinstance(op, core.Schedule):
                delay_s = max(0.0, (op.deadline_ms - now) / 1000.0)
                self._timers[op.key] = loop.call_later(delay_s, self._fire, op.key)
        self._release(outcome.replies)

    async def _write(self, group: core.Group) -> None:
        record = None if group.state is core.GroupState.DEAD else core.to_record(group)
        try:
            self.version = await self._persist(self.group_id, record, self.version)
        except NotOwnerError as exc:
            log.warning("group %s: write refused, stepping down: %s", self.group_id, exc)
            self._unload_locked(f"write refused: {exc}")
            self._on_step_down(self.group_id)
            raise GroupUnavailableError(self.group_id, ErrorCode.NOT_COORDINATOR, str(exc)) from exc
        except StateError as exc:
            log.error("group %s: state not written: %s", self.group_id, exc)
            raise

    def _release(self, replies) -> None:
        for reply in replies:
            future = self._futures.get(reply.token)
            if future is not None and not future.done():
                future.set_result(reply.payload)

    # -- timers ------------------------------------------------------------------
    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        asyncio.get_running_loop().create_task(self._run_timer(key))

    async def _run_timer(self, key: str) -> None:
        try:
            async with self._lock:
                if not self.active:
                    return
                await self._apply(core.handle_timer(self.group, key, self._clock(), self.config))
        except GroupUnavailableError:
            pass  # stepped down; already logged
        except ZkcoordError as exc:
            # ZooKeeper unavailable or the state cannot be written: try again
            # shortly rather than dropping the expiry.
            log.warning("group %s: timer %s not applied (%s); retrying in 1 s", self.group_id, key, exc)
            if self.active and key not in self._timers:
                self._timers[key] = asyncio.get_running_loop().call_later(1.0, self._fire, key)
        except Exception:  # a bug must not kill the event loop; keep the group served
            log.exception("group %s: timer %s failed", self.group_id, key)
