"""The runtime's keyed timers (lazy re-arm) and the runtime's request /
timer paths, on a fake clock (tests.support.fake_clock): time moves only
when a test moves it, nothing sleeps."""

from __future__ import annotations

import asyncio
import random

import pytest

from zkcoord.core import group as core
from zkcoord.core.errors import ErrorCode
from zkcoord.core.messages import session_key
from tests.support.fake_clock import FakeClock
from zkcoord.server.group_runtime import NOT_NOW, GroupRuntime, KeyedTimers

E = ErrorCode


def timers(loop: FakeClock) -> tuple[KeyedTimers, list[tuple[int, str]]]:
    fired: list[tuple[int, str]] = []
    return KeyedTimers(loop.clock, lambda key: fired.append((loop.now, key)), loop), fired


def test_moving_a_deadline_later_keeps_one_handle_and_fires_at_the_last_deadline():
    loop = FakeClock(now=0)
    t, fired = timers(loop)
    t.schedule("session:m1", 30_000)
    for now in range(100, 20_000, 100):  # a heartbeat every 100 ms
        loop.run_until(now)
        t.schedule("session:m1", now + 30_000)
    assert len(loop.handles) == 1 and t.deadline("session:m1") == 49_900
    loop.run_until(49_899)
    assert fired == [] and len(loop.handles) == 2  # fired at 30 s, re-armed for 49.9 s
    loop.run_until(60_000)
    assert fired == [(49_900, "session:m1")] and "session:m1" not in t and len(t) == 0


def test_moving_a_deadline_earlier_replaces_the_handle():
    loop = FakeClock(now=0)
    t, fired = timers(loop)
    t.schedule("join", 30_000)
    t.schedule("join", 5_000)
    assert [h.cancelled for h in loop.handles] == [True, False]
    loop.run_until(100_000)
    assert fired == [(5_000, "join")]


def test_cancel_and_clear_disarm():
    loop = FakeClock(now=0)
    t, fired = timers(loop)
    t.schedule("a", 10)
    t.schedule("b", 20)
    t.schedule("a", 30)
    t.cancel("a")
    t.cancel("never-armed")
    loop.run_until(25)
    assert fired == [(20, "b")] and len(t) == 0
    t.schedule("a", 40)  # armed again after a cancel: a fresh timer
    t.schedule("c", 50)
    loop.run_until(45)
    t.clear()
    loop.run_until(100)
    assert fired == [(20, "b"), (40, "a")] and not loop.pending()


def test_an_overdue_deadline_fires_at_once():
    loop = FakeClock(now=1000)
    t, fired = timers(loop)
    t.schedule("sync", 400)
    loop.run_until(1000)
    assert fired == [(1000, "sync")]


def test_lazy_timers_fire_exactly_when_eager_ones_would():
    """Random schedules and cancels on a few keys: the same (time, key)
    expiries as re-arming eagerly on every Schedule (the core's contract)."""
    rng = random.Random(7)
    for _ in range(200):
        loop = FakeClock(now=0)
        t, fired = timers(loop)
        eager: dict[str, int] = {}
        expected: list[tuple[int, str]] = []
        now = 0
        for _ in range(60):
            step = rng.choice((0, 1, 5, 50, 400))
            # the reference fires every due key in deadline order, like the loop
            for deadline, key in sorted((d, k) for k, d in eager.items() if d <= now + step):
                expected.append((max(deadline, now), key))
                del eager[key]
            now += step
            loop.run_until(now)
            key = rng.choice(("session:a", "session:b", "join"))
            if rng.random() < 0.15:
                t.cancel(key)
                eager.pop(key, None)
            else:
                deadline = now + rng.choice((0, 10, 100, 300, 1000))
                t.schedule(key, deadline)
                eager[key] = deadline
        for deadline, key in sorted((d, k) for k, d in eager.items()):
            expected.append((max(deadline, now), key))
        loop.run_until(now + 10_000)
        assert sorted(fired) == sorted(expected)


# -- the runtime on a real loop ---------------------------------------------------

CONFIG = core.GroupConfig(min_session_timeout_ms=0, initial_rebalance_delay_ms=0)


def _runtime(persist, fake: FakeClock) -> GroupRuntime:
    return GroupRuntime("g", CONFIG, persist, on_step_down=lambda g: None, clock=fake.clock, timer_loop=fake)


async def _stable_runtime(session_ms: int, fake: FakeClock) -> tuple[GroupRuntime, list]:
    writes: list = []

    async def persist(group_id, changes, version):
        writes.append(dict((key, r) for key, r, _ in changes)[""])  # the state record
        return (version or 0) + 1

    runtime = _runtime(persist, fake)
    await runtime.load(None, None)
    token = runtime.next_token()
    join = core.JoinRequest(
        token=token, group_id="g", member_id="", group_instance_id=None, client_id="c",
        client_host="/127.0.0.1", session_timeout_ms=session_ms, rebalance_timeout_ms=5000,
        protocol_type="consumer", protocols=(("range", b"m"),), require_known_member_id=False,
        new_member_id="m1")
    # Parked, then answered by the join timer's outcome (a later one).
    joined = await fake.until_done(runtime.call(token, lambda g, now: core.handle_join(g, join, now, CONFIG)))
    assert joined.error is E.NONE and joined.generation_id == 1
    token = runtime.next_token()
    sync = core.SyncRequest(token, "m1", 1, assignments={"m1": b"a"})
    synced = await runtime.call(token, lambda g, now: core.handle_sync(g, sync, now, CONFIG))
    assert synced.assignment == b"a" and runtime.group.state is core.GroupState.STABLE
    return runtime, writes


async def _heartbeat(runtime: GroupRuntime, member_id: str = "m1"):
    token = runtime.next_token()
    req = core.HeartbeatRequest(token, member_id, runtime.group.generation_id)
    return await runtime.call(token, lambda g, now: core.handle_heartbeat(g, req, now, CONFIG))


def test_runtime_heartbeats_keep_a_session_and_its_end_expires_the_member():
    async def scenario():
        fake = FakeClock()
        runtime, writes = await _stable_runtime(150, fake)
        for _ in range(20):  # four session timeouts, kept alive
            assert await _heartbeat(runtime) == core.HeartbeatResult(E.NONE)
            await fake.advance(30)
        assert runtime.group.state is core.GroupState.STABLE and "m1" in runtime.group.members
        assert not runtime._futures  # answered from the outcome, nothing parked
        await fake.advance(119)  # the last heartbeat was 30 ms ago
        assert "m1" in runtime.group.members  # 1 ms before the session ends
        await fake.advance(1)  # silence: the session ends
        assert runtime.group.state is core.GroupState.EMPTY and runtime.group.generation_id == 2
        assert writes[-1]["s"] == "Empty"
        assert await _heartbeat(runtime) == core.HeartbeatResult(E.UNKNOWN_MEMBER_ID)
        await runtime.unload("test over")

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_runtime_unload_stops_the_timers():
    async def scenario():
        fake = FakeClock()
        runtime, _ = await _stable_runtime(100, fake)
        await runtime.unload("test over")
        before = runtime.group
        await fake.advance(250)  # past the session: nothing fires any more
        assert fake.pending() == []
        assert runtime.group is before and runtime.group.state is core.GroupState.DEAD

    asyncio.run(asyncio.wait_for(scenario(), 10))


# -- call_now: the heartbeat path without a task ------------------------------------

def _heartbeat_now(runtime: GroupRuntime, member_id: str = "m1"):
    token = runtime.next_token()
    req = core.HeartbeatRequest(token, member_id, runtime.group.generation_id)
    return runtime.call_now(token, lambda g, now: core.handle_heartbeat(g, req, now, CONFIG))


def test_call_now_applies_an_outcome_that_needs_no_write():
    async def scenario():
        fake = FakeClock()
        runtime, writes = await _stable_runtime(10_000, fake)
        before = runtime.group.session_deadlines["m1"]
        await fake.advance(10)
        assert _heartbeat_now(runtime) == core.HeartbeatResult(E.NONE)
        assert runtime.group.session_deadlines["m1"] > before
        assert runtime._timers.deadline(session_key("m1")) == runtime.group.session_deadlines["m1"]
        assert _heartbeat_now(runtime, "stranger") == core.HeartbeatResult(E.UNKNOWN_MEMBER_ID)
        assert len(writes) == 2 and not runtime._futures
        await runtime.unload("test over")

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_call_now_declines_and_changes_nothing_when_it_would_have_to_wait():
    async def scenario():
        runtime, writes = await _stable_runtime(10_000, FakeClock())
        group = runtime.group
        async with runtime._lock:  # another request is inside the group
            assert _heartbeat_now(runtime) is NOT_NOW
        assert runtime.group is group
        # a decision that must be written first (a leave) is thrown away
        token = runtime.next_token()
        leave = core.LeaveRequest(token, (("m1", None),))
        assert runtime.call_now(token, lambda g, now: core.handle_leave(g, leave, now, CONFIG)) is NOT_NOW
        assert runtime.group is group and len(writes) == 2
        await runtime.unload("test over")
        assert _heartbeat_now(runtime) is NOT_NOW  # not active any more
        assert runtime.group.state is core.GroupState.DEAD

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_persisting_decision_call_now_kept_is_applied_by_the_call_that_follows_without_deciding_again():
    async def scenario():
        runtime, writes = await _stable_runtime(10_000, FakeClock())
        request = object()  # what the fast path and the slow path both know the request by
        decisions: list[int] = []

        def leave(token):
            req = core.LeaveRequest(token, (("m1", None),))

            def decide(g, now):
                decisions.append(token)
                return core.handle_leave(g, req, now, CONFIG)
            return decide

        token = runtime.next_token()
        assert runtime.call_now(token, leave(token), keep=request) is NOT_NOW
        assert runtime.kept_token(request) == token and runtime.kept_token(object()) != token
        result = await runtime.call(token, leave(token), reuse=request)
        assert decisions == [token] and len(writes) == 3  # decided once, written once
        assert "m1" not in runtime.group.members and result is not None

        # a change in between (another request applied) makes the kept decision stale: decided again
        fake = FakeClock()
        runtime2, writes2 = await _stable_runtime(10_000, fake)
        decisions.clear()
        token = runtime2.next_token()
        assert runtime2.call_now(token, leave(token), keep=request) is NOT_NOW
        await fake.advance(10)
        before = runtime2.group
        assert _heartbeat_now(runtime2) == core.HeartbeatResult(E.NONE)  # the group object changes
        assert runtime2.group is not before
        await runtime2.call(runtime2.kept_token(request), leave(token), reuse=request)
        assert decisions == [token, token] and "m1" not in runtime2.group.members
        await runtime.unload("test over")
        await runtime2.unload("test over")

    asyncio.run(asyncio.wait_for(scenario(), 10))


# -- render: parked replies made ready while their write is in flight ----------------

def _join(token, member_id="", new_member_id="m1"):
    return core.JoinRequest(
        token=token, group_id="g", member_id=member_id, group_instance_id=None, client_id="c",
        client_host="/127.0.0.1", session_timeout_ms=10_000, rebalance_timeout_ms=60_000,
        protocol_type="consumer", protocols=(("range", b"m"),), require_known_member_id=False,
        new_member_id=new_member_id)


class GatedStore:
    """A persist function whose writes wait for ``gate``; it records what the
    renders had made when each write was sent and when it was accepted."""

    def __init__(self, rendered: list):
        self.gate = asyncio.Event()
        self.rendered = rendered
        self.seen: list[tuple[int, int]] = []  # (renders when sent, renders when accepted)

    async def __call__(self, group_id, record, version):
        sent = len(self.rendered)
        await self.gate.wait()
        self.seen.append((sent, len(self.rendered)))
        return (version or 0) + 1


async def _completing_runtime(persist, render=None, fake: FakeClock | None = None) -> tuple[GroupRuntime, list]:
    """A runtime whose group has members m1 (leader) and m2 in generation 1,
    CompletingRebalance (their joins answered), and m2's SyncGroup parked
    with a render that logs what it renders."""
    fake = fake or FakeClock()
    runtime = _runtime(persist, fake)
    await runtime.load(None, None)

    async def join(member):
        token = runtime.next_token()
        req = _join(token, new_member_id=member)
        return await runtime.call(token, lambda g, now: core.handle_join(g, req, now, CONFIG))

    joins = [asyncio.create_task(join(m)) for m in ("m1", "m2")]
    assert [r.generation_id for r in await fake.until_done(asyncio.gather(*joins))] == [1, 1]
    assert runtime.group.state is core.GroupState.COMPLETING_REBALANCE
    rendered: list = []

    def logged(result):
        rendered.append(result)
        return ("answer", result.error, result.assignment)

    render = render or logged

    token = runtime.next_token()
    req = core.SyncRequest(token, "m2", 1)
    follower = asyncio.create_task(runtime.call(token, lambda g, now: core.handle_sync(g, req, now, CONFIG), render))
    await fake.settle()
    assert token in runtime._futures  # parked
    return runtime, [follower, rendered]


def _leader_sync(runtime: GroupRuntime):
    token = runtime.next_token()
    req = core.SyncRequest(token, "m1", 1, assignments={"m1": b"a1", "m2": b"a2"})
    return asyncio.create_task(runtime.call(token, lambda g, now: core.handle_sync(g, req, now, CONFIG)))


def test_parked_replies_are_rendered_while_the_write_is_in_flight_and_released_after_it():
    async def scenario():
        store = GatedStore([])
        store.gate.set()
        runtime, (follower, rendered) = await _completing_runtime(store)
        store.rendered = rendered
        store.gate = asyncio.Event()  # shut: the leader's SyncGroup write waits
        leader = _leader_sync(runtime)
        # the write is in flight: the follower's answer is rendered, not released
        await FakeClock().settle()
        assert rendered and not follower.done() and not leader.done()
        assert runtime.group.state is core.GroupState.COMPLETING_REBALANCE
        store.gate.set()
        assert await follower == ("answer", E.NONE, b"a2")
        assert (await leader).assignment == b"a1"
        assert store.seen[-1] == (0, 1)  # sent before the render, accepted after it
        assert runtime.group.state is core.GroupState.STABLE
        await runtime.unload("test over")

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_render_that_fails_during_the_write_fails_in_its_caller():
    async def scenario():
        store = GatedStore([])
        store.gate.set()
        calls = []

        def render(result):
            calls.append(result.assignment)
            raise ValueError("cannot encode")

        runtime, (follower, _) = await _completing_runtime(store, render)
        leader = _leader_sync(runtime)
        with pytest.raises(ValueError, match="cannot encode"):
            await follower
        assert calls == [b"a2", b"a2"]  # during the write, then again in the caller
        assert (await leader).assignment == b"a1"
        assert runtime.group.state is core.GroupState.STABLE  # the outcome itself was applied
        await runtime.unload("test over")

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_replies_released_without_a_write_are_rendered_by_each_caller_in_the_outcome_order():
    async def scenario():
        async def persist(group_id, record, version):
            return (version or 0) + 1

        fake = FakeClock()
        runtime = _runtime(persist, fake)
        await runtime.load(None, None)
        order = []

        async def join(member):
            token = runtime.next_token()
            req = _join(token, new_member_id=member)
            return await runtime.call(token, lambda g, now: core.handle_join(g, req, now, CONFIG),
                                      lambda result: order.append(result.member_id) or result.generation_id)

        # Both park; the join timer ends the phase without a write (generation 1 was
        # reserved by the first join's write) and each caller renders its own answer.
        first = [asyncio.create_task(join(m)) for m in ("m1", "m2")]
        assert await fake.until_done(asyncio.gather(*first)) == [1, 1]
        assert order == ["m1", "m2"] and runtime.version == 1  # one write: the reservation
        await runtime.unload("test over")

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_refused_write_releases_no_rendered_reply():
    async def scenario():
        from zkcoord.errors import NotOwnerError
        refusing = False

        async def persist(group_id, record, version):
            if refusing:
                raise NotOwnerError("deposed", group_id)
            return (version or 0) + 1

        runtime, (follower, rendered) = await _completing_runtime(persist)
        refusing = True
        with pytest.raises(Exception, match="deposed"):
            await _leader_sync(runtime)
        # what the refused outcome would have answered (assignment a2) is never
        # released; the step-down answers the parked SyncGroup NOT_COORDINATOR
        assert await follower == ("answer", E.NOT_COORDINATOR, b"")
        assert runtime.group.state is core.GroupState.DEAD and not runtime.active

    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_a_big_decision_runs_in_a_worker_thread_with_the_same_outcome():
    """``call(big=True)`` decides in a worker thread (the group's lock held),
    then applies and answers as an ordinary call does."""
    import threading

    async def scenario():
        fake = FakeClock()
        runtime, _ = await _stable_runtime(10_000, fake)
        where, results = [], []
        for big in (False, True):
            token = runtime.next_token()
            request = core.HeartbeatRequest(token, "m1", 1, None)

            def decide(g, now, request=request):
                where.append(threading.current_thread() is threading.main_thread())
                return core.handle_heartbeat(g, request, now, CONFIG)

            results.append(await runtime.call(token, decide, big=big))
        assert where == [True, False]
        assert [r.error for r in results] == [E.NONE, E.NONE]
        await runtime.unload("test over")

    asyncio.run(asyncio.wait_for(scenario(), 10))
