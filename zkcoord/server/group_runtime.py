"""The runtime of one group this daemon owns.

Owns the group's current (applied) group value, of any kind (it asks the
group's kind, :mod:`zkcoord.core.groups`, for everything kind-specific), the
znode version of its state, its armed timers and the futures of parked
requests. It is the one place where group state changes, always in the same
order (the core's contract, :mod:`zkcoord.core.messages`):

1. under the group's lock, a pure handler decides an ``Outcome``;
2. if ``outcome.persist``, the fenced, versioned ZooKeeper write happens
   first; a failed write throws the outcome away;
3. only then the new group is applied, timers armed or cancelled, and
   replies released to the requests (current or parked) they answer.

A parked request may come with a ``render`` (its caller's encoding of the
reply): while the write of step 2 is in flight, the replies to parked
requests are rendered, so that when ZooKeeper accepts the write a rebalance's
hundred answers only need sending. Nothing is released before the write is
accepted; a refused write throws the rendered replies away with the outcome.

A write refused because this daemon no longer owns the group makes the
runtime *step down*: parked requests get NOT_COORDINATOR, timers stop, and
the manager is told, so it drops the group. Timers are keyed deadlines
(:class:`KeyedTimers`) whose expiry runs ``handle_timer`` through the same
three steps; an expiry that hands back :class:`~zkcoord.core.messages.Offloaded`
has its computation run in a worker thread with the lock released, and its
Outcome decided under the lock once it is done.

Heartbeats are the hot path: a request answered by its own outcome (every
heartbeat, most requests) gets its reply straight from that outcome, and a
heartbeat's ``Schedule`` of a later session deadline only records the
deadline; the armed timer re-arms itself when it fires early. When the lock
is free and the outcome persists nothing, :meth:`GroupRuntime.call_now` runs
the same three steps without awaiting (step 2 is empty), so the transport
can answer such a request in the callback that read it.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from zkcoord.core import groups
from zkcoord.core.errors import ErrorCode
from zkcoord.core.groups import GroupPhase, kind_of
from zkcoord.core.membership import GroupConfig
from zkcoord.core.messages import Offloaded, Outcome, Reply, Schedule
from zkcoord.tasks import Background
from zkcoord.errors import GroupRequestError, NotOwnerError, StateError, ZkcoordError
from zkcoord.wire.bulk_work import off_loop

log = logging.getLogger(__name__)
RENDER_SLICE = 100  # parked answers rendered between two yields to the event loop
OFF_LOOP_RECORDS_MEMBERS = 200  # a group this large has its records made in a worker thread



async def _made(value: Any) -> Any:
    """A render's result: its value, awaited when the render handed back an awaitable."""
    return await value if inspect.isawaitable(value) else value

class GroupUnavailableError(ZkcoordError):
    """This daemon cannot serve the group now; ``code`` says why (Kafka code)."""

    def __init__(self, group_id: str, code: ErrorCode, why: str = ""):
        super().__init__(f"group {group_id!r}: {code.name}{': ' + why if why else ''}")
        self.group_id = group_id
        self.code = code


NOT_NOW: Any = object()  # GroupRuntime.call_now: the request must go through call()


class _Unrendered:
    """A reply whose render raised; call() renders it again in the caller."""

    __slots__ = ("payload",)

    def __init__(self, payload: Any):
        self.payload = payload


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class KeyedTimers:
    """Keyed deadlines on the event loop, with one lazily re-armed asyncio
    timer per key (a session timer moves on every heartbeat).

    ``schedule(key, deadline_ms)`` replaces the key's deadline, as a core
    ``Schedule`` does; ``on_due(key)`` is called once, when ``clock()``
    reaches the key's latest deadline, unless ``cancel(key)`` came first.
    A deadline that moves later keeps the armed handle: when that handle
    fires, it sees the deadline moved and re-arms for it. Only a deadline
    that moves earlier replaces the handle. So a heartbeat costs a dict
    update instead of a cancelled handle left in the loop's heap plus a new
    one, and a key fires at the same time it would with eager re-arming.
    """

    def __init__(self, clock: Callable[[], int], on_due: Callable[[str], None],
                 loop: asyncio.AbstractEventLoop | None = None):
        self._clock = clock
        self._on_due = on_due
        self._loop = loop  # None: the running loop
        self._deadlines: dict[str, int] = {}  # key -> latest deadline (ms)
        self._handles: dict[str, tuple[asyncio.TimerHandle, int]] = {}  # key -> (handle, ms it fires at)

    def __contains__(self, key: str) -> bool:
        return key in self._deadlines

    def __len__(self) -> int:
        return len(self._deadlines)

    def deadline(self, key: str) -> int | None:
        """The key's current deadline, None if not armed."""
        return self._deadlines.get(key)

    def schedule(self, key: str, deadline_ms: int, now_ms: int | None = None) -> None:
        """Arm ``key`` for ``deadline_ms``, replacing its deadline if armed."""
        self._deadlines[key] = deadline_ms
        armed = self._handles.get(key)
        if armed is not None:
            if armed[1] <= deadline_ms:
                return  # fires first, then re-arms for the new deadline
            armed[0].cancel()
        self._arm(key, deadline_ms, self._clock() if now_ms is None else now_ms)

    def cancel(self, key: str) -> None:
        """Disarm ``key``; nothing if it is not armed."""
        self._deadlines.pop(key, None)
        armed = self._handles.pop(key, None)
        if armed is not None:
            armed[0].cancel()

    def clear(self) -> None:
        for handle, _ in self._handles.values():
            handle.cancel()
        self._handles.clear()
        self._deadlines.clear()

    def _arm(self, key: str, deadline_ms: int, now_ms: int) -> None:
        loop = self._loop or asyncio.get_running_loop()
        delay_s = max(0.0, (deadline_ms - now_ms) / 1000.0)
        self._handles[key] = (loop.call_later(delay_s, self._expire, key), deadline_ms)

    def _expire(self, key: str) -> None:
        self._handles.pop(key, None)
        deadline = self._deadlines.get(key)
        if deadline is None:
            return  # cancelled (cancel() also cancels the handle; belt and braces)
        now = self._clock()
        if now < deadline:
            self._arm(key, deadline, now)  # the deadline moved on since the handle was armed
            return
        del self._deadlines[key]
        self._on_due(key)


# persist(group_id, changes, expected_version) -> the state's new version (None: deleted); changes are the
# group kind's ``writes``: [(key, record | None, existed)], "" the state znode (zkcoord.zk.group_records)
PersistFn = Callable[[str, list, "int | None"], Awaitable["int | None"]]


@dataclass(frozen=True)
class _Kept:
    """A decision :meth:`GroupRuntime.call_now` made and could not apply
    (it persists), with what it was made on."""
    key: object
    token: int
    group: Any
    config: Any
    outcome: Any


class GroupRuntime:
    """One owned group. Create with :meth:`load`; no I/O in the constructor."""

    def __init__(self, group_id: str, config: GroupConfig | Callable[[], GroupConfig], persist: PersistFn,
                 on_step_down: Callable[[str], None], clock: Callable[[], int] = monotonic_ms,
                 on_persisted: Callable[[Any], None] | None = None,
                 on_transition: Callable[[Any], None] | None = None, timer_loop: Any = None):
        self.group_id = group_id
        # The handlers' config: fixed, or read at each call (the manager's: its topics image changes).
        self._config_of = config if callable(config) else (lambda: config)
        self._persist = persist
        self._on_step_down = on_step_down
        self._on_persisted = on_persisted  # membership or generation changed
        self._on_transition = on_transition  # state or generation changed (written or not)
        self._clock = clock
        self.group: Any = groups.new_group(group_id)
        self.version: int | None = None  # znode version of the state; None: absent
        self.active = False
        self._lock = asyncio.Lock()
        self._tokens = itertools.count(1)
        self._futures: dict[int, asyncio.Future] = {}
        self._renders: dict[int, Callable[[Any], Any]] = {}  # token of a parked call -> its render
        # timer_loop: what arms timers (``call_later``); None: the running loop. A test passes a fake clock's.
        self._timers = KeyedTimers(clock, self._fire, timer_loop)
        self._background = Background(log, f"group {group_id}")  # timer expiries
        self._unsettled_waiters: set[asyncio.Future] = set()  # held heartbeats (core.notice)
        self._kept: _Kept | None = None  # the last persisting decision :meth:`call_now` made and could not apply
        # Called with the group when its state, generation or members change (the handover driver's wake-up).
        self.observers: list[Callable[[Any], None]] = []

    @property
    def config(self) -> GroupConfig:
        return self._config_of()

    # -- life cycle ----------------------------------------------------------
    async def load(self, record: dict | None, version: int | None, quiet: bool = False) -> None:
        """Take the group over from its stored record (None: a new group);
        ``quiet``: not logged (the caller logs one line for many groups)."""
        async with self._lock:
            self.version = version
            if record is None:
                self.group = groups.new_group(self.group_id)
                self.active = True
                return
            stored = groups.from_record(self.group_id, record)
            outcome = kind_of(stored).load(stored, self._clock(), self.config)
            self.active = True
            await self._apply(outcome, stored)  # a write at load changes what is stored: the records read
        if not quiet:
            log.info("group %s loaded (%s): %s", self.group_id, kind_of(self.group).name,
                     kind_of(self.group).summary(self.group))

    async def unload(self, reason: str, quiet: bool = False) -> None:
        """Stop serving the group (ownership lost or daemon stopping);
        ``quiet``: not logged (the caller logs one line for many groups)."""
        async with self._lock:
            self._unload_locked(reason, quiet)

    async def retire(self, holds_nothing: Callable[[Any], bool]) -> bool:
        """Remove the group if ``holds_nothing(group)`` still holds under the
        lock: delete its state znode (fenced, at its version) and stop serving
        it. False (nothing changed) if it no longer holds or is not active."""
        async with self._lock:
            if not self.active or not holds_nothing(self.group):
                return False
            if self.version is not None:
                try:
                    await self._persist(self.group_id, kind_of(self.group).delete_writes(self.group), self.version)
                except NotOwnerError as exc:
                    self._unload_locked(f"write refused: {exc}")
                    self._on_step_down(self.group_id)
                    return False
                self.version = None
            self._unload_locked("removed: Empty with no committed offsets")
            return True

    def _unload_locked(self, reason: str, quiet: bool = False) -> None:
        if not self.active:
            return
        self.active = False
        outcome = kind_of(self.group).handle_unload(self.group)
        self.group = outcome.group
        self._timers.clear()
        self._release(outcome.replies)
        self._wake_unsettled()
        for future in self._futures.values():
            if not future.done():
                future.set_exception(GroupUnavailableError(self.group_id, ErrorCode.NOT_COORDINATOR, reason))
        if not quiet:
            log.info("group %s unloaded: %s", self.group_id, reason)

    # -- held heartbeats ----------------------------------------------------------
    def until_unsettled(self, epoch: int) -> asyncio.Future:
        """A future resolved (to None) as soon as the group is not stable
        (:class:`~zkcoord.core.phases.GroupPhase`) in ``epoch`` (its
        generation) any more, or is no longer served here: at once if that
        is so already. Pass it to :meth:`forget_waiter` when done with it (a
        held heartbeat whose hold ran out)."""
        future = asyncio.get_running_loop().create_future()
        group = self.group
        kind = kind_of(group)
        if not self.active or kind.phase(group) is not GroupPhase.STABLE or kind.epoch(group) != epoch:
            future.set_result(None)
        else:
            self._unsettled_waiters.add(future)
        return future

    @property
    def held_heartbeats(self) -> int:
        """Heartbeats held for the rebalance notice right now."""
        return len(self._unsettled_waiters)

    def forget_waiter(self, future: asyncio.Future) -> None:
        self._unsettled_waiters.discard(future)

    def _wake_unsettled(self) -> None:
        waiters, self._unsettled_waiters = self._unsettled_waiters, set()
        for future in waiters:
            if not future.done():
                future.set_result(None)

    # -- requests --------------------------------------------------------------
    def next_token(self) -> int:
        return next(self._tokens)

    async def call(self, token: int, decide: Callable[[Any, int], Outcome],
                   render: Callable[[Any], Any] | None = None, big: bool = False, reuse: object = None) -> Any:
        """Run ``decide(group, now_ms)`` for the request carrying ``token`` and
        wait for the reply addressed to it (maybe released by a later outcome).

        ``render(payload)``, if given, turns the reply into what ``call``
        returns (the caller's encoded response, say). For a parked request it
        runs while the ZooKeeper write of the outcome that answers it is in
        flight, so that only sending is left once the write is accepted; it
        may hand back an awaitable (a large answer encoded in a worker
        thread), which is awaited. If
        it raises there, it runs again in the caller, where the error belongs.
        ``big``: the decision's work grows with a large request: it runs in
        a worker thread (the group is immutable and its lock held meanwhile),
        so other groups' requests are answered in between.
        ``reuse``: the key a :meth:`call_now` for the same request kept its
        decision under (with ``token`` from :meth:`kept_token`); that decision
        is applied when the group and its config are still those it was made
        on, instead of deciding again.
        """
        async with self._lock:
            self._require_active()
            kept, self._kept = self._kept, None
            if (reuse is not None and kept is not None and kept.key is reuse and kept.token == token
                    and kept.group is self.group and kept.config is self.config):
                outcome = kept.outcome
            elif big:
                outcome = await off_loop(decide, self.group, self._clock())
                self._require_active()
            else:
                outcome = decide(self.group, self._clock())
            await self._apply(outcome)
            for reply in outcome.replies:  # answered at once: no future needed
                if reply.token == token:
                    break
            else:
                # Parked: only an outcome applied under the lock can answer it, so
                # registering the future before the lock is released misses nothing.
                reply = None
                future = asyncio.get_running_loop().create_future()
                self._futures[token] = future
                if render is not None:
                    self._renders[token] = render
        if reply is not None:
            return reply.payload if render is None else await _made(render(reply.payload))
        try:
            value = await future
        finally:
            self._futures.pop(token, None)
            self._renders.pop(token, None)
            if future.done() and not future.cancelled():
                future.exception()  # failed by a step-down as this task was cancelled: retrieved, not leaked
        if type(value) is _Unrendered:
            return await _made(render(value.payload))
        return value

    def call_now(self, token: int, decide: Callable[[Any, int], Outcome], keep: object = None) -> Any:
        """:meth:`call` without awaiting, when nothing needs to be awaited: the
        group is active, its lock free, and the outcome persists nothing and
        answers ``token``. Then it is applied as :meth:`call` applies it and
        the reply's payload returned; otherwise the (pure) decision is thrown
        away, nothing changes, and :data:`NOT_NOW` is returned: use
        :meth:`call`. With ``keep`` (a key standing for the request), a
        decision that persists is kept under it for the :meth:`call` that
        follows (``reuse=keep``, ``token`` from :meth:`kept_token`): a step
        of a reconciliation is decided once, not twice."""
        if not self.active or self._lock.locked():
            return NOT_NOW
        group = self.group
        config = self.config if keep is not None else None  # what the decision is made on, when it may be kept
        outcome = decide(group, self._clock())
        if outcome.persist:
            if keep is not None:
                self._kept = _Kept(keep, token, group, config, outcome)
            return NOT_NOW
        for reply in outcome.replies:
            if reply.token == token:
                self._commit(outcome)
                return reply.payload
        return NOT_NOW

    def kept_token(self, key: object) -> int:
        """The token of the decision :meth:`call_now` kept under ``key``,
        else a new one (:meth:`next_token`)."""
        kept = self._kept
        return kept.token if kept is not None and kept.key is key else self.next_token()

    async def read(self, decide: Callable[[Any, int], Any]) -> Any:
        """Run a decision that changes nothing (validation, describe)."""
        async with self._lock:
            self._require_active()
            return decide(self.group, self._clock())

    async def apply(self, decide: Callable[[Any, int], Outcome]) -> None:
        """Apply an outcome that answers no request (e.g. an accepted commit
        counting as a heartbeat)."""
        async with self._lock:
            self._require_active()
            await self._apply(decide(self.group, self._clock()))

    async def write_then_apply(self, decide: Callable[[Any, int], Any], begin: Callable[[Any], Awaitable | None],
                               after: Callable[[Any, Any, int], Outcome]) -> tuple[Any, Any]:
        """A write that is not the group's state (an OffsetCommit's offsets),
        in the runtime's order: under the lock, ``decide(group, now_ms)``
        gives a decision and ``begin(decision)`` queues its write (an
        awaitable, or None when nothing is written), so the write's place
        among the group's writes is fixed before the lock is released. The
        write is awaited outside the lock (concurrent commits share ZooKeeper
        multi-ops, and heartbeats are answered meanwhile); once it is
        accepted, ``after(group, decision, now_ms)`` is applied under the
        lock. Returns ``(decision, what the write gave)``; a failed write
        raises, and nothing is applied."""
        async with self._lock:
            self._require_active()
            decision = decide(self.group, self._clock())
            pending = begin(decision)
        written = await pending if pending is not None else None
        async with self._lock:
            if self.active:
                await self._apply(after(self.group, decision, self._clock()))
        return decision, written

    def write_now(self, decide: Callable[[Any, int], Any], begin: Callable[[Any], Awaitable | None]) -> Any:
        """The first half of :meth:`write_then_apply` without awaiting, when
        the group is active and its lock free (nobody can be between decide
        and begin then): ``(decision, what begin gave)``, else :data:`NOT_NOW`.
        The caller awaits the write and then applies what follows it
        (:meth:`apply_now`, else :meth:`apply`)."""
        if not self.active or self._lock.locked():
            return NOT_NOW
        decision = decide(self.group, self._clock())
        return decision, begin(decision)

    def apply_now(self, decide: Callable[[Any, int], Outcome]) -> bool:
        """:meth:`apply` without awaiting, when the group is active, its lock
        free and the outcome persists nothing; False (nothing changed) when
        :meth:`apply` must do it."""
        if not self.active or self._lock.locked():
            return False
        outcome = decide(self.group, self._clock())
        if outcome.persist:
            return False
        self._commit(outcome)
        return True

    def _require_active(self) -> None:
        if not self.active:
            raise GroupUnavailableError(self.group_id, ErrorCode.NOT_COORDINATOR, "not owned here")

    # -- the one place state changes ---------------------------------------------
    async def _apply(self, outcome: Outcome, stored: Any = None) -> None:
        """``stored``: what ZooKeeper holds, when it is not ``self.group`` (a load)."""
        rendered = None
        if outcome.persist:
            rendered = await self._write_rendering(outcome, self.group if stored is None else stored)
        elif self._renders and len(outcome.replies) > RENDER_SLICE:
            # Many parked answers at once (a rebalance of a large group ends): made here, a slice at a
            # time, rather than all by their callers in one turn of the event loop.
            rendered = await self._render_parked([r for r in outcome.replies if r.token in self._renders])
        self._commit(outcome, rendered)

    async def _render_parked(self, parked: list[Reply]) -> dict[Any, Any]:
        """{token: rendered} of ``parked``, yielding to the event loop every
        RENDER_SLICE of them, so other groups are answered in between."""
        rendered = {}
        for i, reply in enumerate(parked):
            if i and i % RENDER_SLICE == 0:
                await asyncio.sleep(0)
            made = self._render(reply)
            if inspect.isawaitable(made):  # a large answer, encoded in a worker thread
                try:
                    made = await made
                except Exception:  # raised again in the caller, by call()
                    made = _Unrendered(reply.payload)
            rendered[reply.token] = made
        return rendered

    async def _write_rendering(self, outcome: Outcome, stored: Any) -> dict[Any, Any] | None:
        """Step 2 (the writes from ``stored`` to the outcome's group), and
        meanwhile render the replies to parked requests that have a
        ``render``: {token: rendered}. Nothing is released here."""
        parked = [r for r in outcome.replies if r.token in self._renders] if self._renders else None
        if not parked:
            await self._write(stored, outcome.group)
            return None
        write = asyncio.get_running_loop().create_task(self._write(stored, outcome.group))
        try:
            await asyncio.sleep(0)  # the write's first step sends it to ZooKeeper
            rendered = await self._render_parked(parked)
            await write
        except asyncio.CancelledError:
            write.cancel()  # as an awaited write would be
            raise
        return rendered

    def _render(self, reply: Reply) -> Any:
        try:
            return self._renders[reply.token](reply.payload)
        except Exception:  # raised again in the caller, by call()
            return _Unrendered(reply.payload)

    def _commit(self, outcome: Outcome, rendered: dict[Any, Any] | None = None) -> None:
        """Step 3: apply an outcome whose write (if any) was accepted."""
        before, after = self.group, outcome.group
        self.group = after
        if before is not after and (type(before) is not type(after) or kind_of(after).changed(before, after)):
            if self._on_transition is not None:
                self._on_transition(self.group)
            if self._unsettled_waiters:
                self._wake_unsettled()
            for observer in self.observers:
                observer(after)
        elif self.observers and getattr(before, "members", None) is not getattr(after, "members", None):
            for observer in self.observers:
                observer(after)
        if outcome.persist and self._on_persisted is not None:
            self._on_persisted(outcome.group)
        if outcome.timers:
            now = self._clock()
            for op in outcome.timers:
                if isinstance(op, Schedule):
                    self._timers.schedule(op.key, op.deadline_ms, now)
                else:
                    self._timers.cancel(op.key)
        self._release(outcome.replies, rendered)

    async def _write(self, before: Any, group: Any) -> None:
        if len(getattr(group, "members", ())) >= OFF_LOOP_RECORDS_MEMBERS:
            # A large group's records (a classic record's base64, a consumer group's member records)
            # are made in a worker thread: the group values are immutable.
            changes = await off_loop(kind_of(group).writes, before, group)
        else:
            changes = kind_of(group).writes(before, group)
        try:
            self.version = await self._persist(self.group_id, changes, self.version)
        except NotOwnerError as exc:
            log.warning("group %s: write refused, stepping down: %s", self.group_id, exc)
            self._unload_locked(f"write refused: {exc}")
            self._on_step_down(self.group_id)
            raise GroupUnavailableError(self.group_id, ErrorCode.NOT_COORDINATOR, str(exc)) from exc
        except StateError as exc:
            log.error("group %s: state not written: %s", self.group_id, exc)
            raise

    def _release(self, replies, rendered: dict[Any, Any] | None = None) -> None:
        if not self._futures:
            return
        for reply in replies:
            future = self._futures.get(reply.token)
            if future is None or future.done():
                continue
            if reply.token not in self._renders:
                future.set_result(reply.payload)
            elif rendered is not None and reply.token in rendered:
                future.set_result(rendered[reply.token])
            else:
                # Rendered by its own caller as it resumes, so each answer is sent
                # as soon as it is made, in the outcome's order (the leader's
                # JoinGroup first), instead of all after the last is made.
                future.set_result(_Unrendered(reply.payload))

    # -- timers ------------------------------------------------------------------
    async def _compute(self, key: str, offloaded: Offloaded) -> Any:
        """What an expiry's offloaded computation gave (or raised), run in a
        worker thread without the group's lock."""
        try:
            return await off_loop(offloaded.compute)
        except GroupRequestError as exc:  # the core's refusal (an assignor that cannot assign)
            log.error("group %s: timer %s: %s", self.group_id, key, exc)
            return exc
        except Exception as exc:  # a bug: logged, and handed to finish, which must still run
            log.exception("group %s: timer %s: the computation failed", self.group_id, key)
            return exc

    def _fire(self, key: str) -> None:
        self._background.spawn(self._run_timer(key), f"timer {key} of group {self.group_id}")

    async def _run_timer(self, key: str) -> None:
        try:
            async with self._lock:
                if not self.active:
                    return
                before = self.group
                kind = kind_of(before)
                decided = kind.handle_timer(before, key, self._clock(), self.config)
                if not isinstance(decided, Offloaded):
                    await self._apply(decided)
                    note = kind.expiry_note(key, before, self.group) if type(self.group) is type(before) else None
                    if note is not None:
                        log.info("group %s: %s", self.group_id, note)
                    return
            result = await self._compute(key, decided)
            async with self._lock:
                if self.active:
                    await self._apply(decided.finish(self.group, result, self._clock()))
        except GroupUnavailableError:
            pass  # stepped down; already logged
        except ZkcoordError as exc:
            # ZooKeeper unavailable or the state cannot be written: try again
            # shortly rather than dropping the expiry.
            log.warning("group %s: timer %s not applied (%s); retrying in 1 s", self.group_id, key, exc)
            if self.active and key not in self._timers:
                self._timers.schedule(key, self._clock() + 1000)
        except Exception:  # a bug must not kill the event loop; keep the group served
            log.exception("group %s: timer %s failed", self.group_id, key)
