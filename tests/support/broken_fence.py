"""A daemon with a deliberately broken fence, to show a fault test catches it.

Issue 29: each fault kind needs a test that *fails* when the fence is
broken. Nothing in the product can turn a fence off (no flag, no variable):
this launcher breaks it in one daemon process only, by replacing product
functions in memory before the daemon's modules load, then runs the daemon
as ``python -m`` would::

    python -X zkcoord-test-process=... tests/support/broken_fence.py BREAKS -m zkcoord -v run ...

``BREAKS`` is a comma-separated list of:

* ``commit-fence`` - offset commits are sent without the fence: no check of
  the owner's contender znode in their multi, no failing of a deposed
  owner's queued commits (``OffsetStore.submit`` drops its ``fence``). State
  writes keep theirs.
* ``state-fence`` - state writes are sent without their fences: no check of
  the contender, none of the state znode's version (every multi of the
  process loses its ``check`` ops, its ``setData`` and ``delete`` go at any
  version), and a write failing because the session expired is retried
  instead of deposing the daemon (``GroupStateStore._deposed``).
* ``session-loss`` - the daemon keeps its groups when its ZooKeeper session
  expires, or when its suspension lasts the session time-out: GIVEN_UP and
  LOST drop nothing, and the new session resumes every group as
  if the old one had come back (``GroupOwnership._on_session``). The fence
  is still checked, so its writes are refused - unless ``commit-fence`` too.
* ``generation`` - an offset commit refused for its generation or member
  (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, STALE_MEMBER_EPOCH,
  FENCED_MEMBER_EPOCH) is accepted instead (``decide_commit``).
* ``group-wall-clock`` - the group timers (members' session time-outs,
  rebalance deadlines: ``zkcoord.server.group_runtime.monotonic_ms``) read
  the wall clock instead of the monotonic one. A wall clock moved back
  (``tests/support/clock_shift.py``) then postpones every deadline: a dead
  member is never removed and its partitions are never reassigned.
* ``suspension-wall-clock`` - the suspension rule's clock (how long
  ZooKeeper has not been heard, :class:`zkcoord.zk.connection.ZkConnection`
  ``.clock``, rules 6 and 7) is the wall clock instead of the monotonic
  one. A wall clock moved back during a cut from ZooKeeper then postpones
  the give-up: the cut daemon keeps its members after ZooKeeper expired its
  session and another daemon took the group.
* ``forward-abort`` - the daemon never aborts its Kafka forwarder's
  connections when it stops owning a group whose commit is in flight to
  Kafka (``KafkaForwarder.abort`` does nothing): the try in flight goes on
  until kafka-python's request time-out ends it.
* ``forward-reset`` - the forwarder's sockets close gracefully (no
  ``SO_LINGER`` 0): a closed connection's kernel keeps what it had not yet
  delivered and sends it when a cut heals. With ``forward-abort`` too, the
  forwarder is as it was before the abort: a try sent before the daemon
  knew it was deposed, held up by a cut, still reaches the broker after
  the cut, after the new owner's commits.

:func:`wrap` gives the wrapper for a fleet (``WrappedFleet(wrappers=...)``).
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
BREAKS = ("commit-fence", "state-fence", "session-loss", "generation", "group-wall-clock", "suspension-wall-clock",
          "forward-abort", "forward-reset")


def wrap(*breaks: str):
    """A wrapper starting a ``[python, -X..., -m, zkcoord, ...]`` command with ``breaks``."""
    unknown = set(breaks) - set(BREAKS)
    if unknown or not breaks:
        raise ValueError(f"unknown breaks {sorted(unknown)}; known: {BREAKS}")

    def wrapped(argv: list[str]) -> list[str]:
        index = argv.index("-m")
        return [*argv[:index], str(HERE), ",".join(breaks), *argv[index:]]

    return wrapped


def _break_commit_fence() -> None:
    from zkcoord.zk.offsets import OffsetStore

    submit = OffsetStore.submit

    def unfenced_submit(self, group, offsets, fence=None, *args, **kwargs):
        return submit(self, group, offsets, None, *args, **kwargs)

    OffsetStore.submit = unfenced_submit


def _break_state_fence() -> None:
    from kazoo.client import TransactionRequest

    from zkcoord.errors import ServiceUnavailableError
    from zkcoord.zk.state_store import GroupStateStore

    set_data, delete = TransactionRequest.set_data, TransactionRequest.delete
    TransactionRequest.check = lambda self, path, version: None
    TransactionRequest.set_data = lambda self, path, value, version=-1: set_data(self, path, value, -1)
    TransactionRequest.delete = lambda self, path, version=-1: delete(self, path, -1)

    def not_deposed(self, fence, reason):
        raise ServiceUnavailableError(f"(broken) not deposed: {reason}")

    GroupStateStore._deposed = not_deposed


def _break_session_loss() -> None:
    from zkcoord.zk.connection import SessionEvent
    from zkcoord.zk.ownership import ChangeKind, GroupOwnership

    on_session = GroupOwnership._on_session

    def forgetful(self, event):
        if event is SessionEvent.GIVEN_UP:
            return  # keeps every group after the session time-out too
        if event is SessionEvent.LOST:
            self._connected = False
            return  # keeps every group, as if nothing was lost
        if event is SessionEvent.CONNECTED and self._owned:
            self._connected = True
            for owned in self._owned.values():
                owned.suspended = False
            self._report(ChangeKind.RESUMED, frozenset(self._owned), "(broken) new session taken for the old one")
            return
        on_session(self, event)

    GroupOwnership._on_session = forgetful


def _break_generation() -> None:
    import zkcoord.core.offset_commit as offset_commit
    from zkcoord.core.errors import ErrorCode as E

    decide = offset_commit.decide_commit
    stale = {E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID}
    stale |= {getattr(E, name) for name in ("FENCED_INSTANCE_ID", "STALE_MEMBER_EPOCH", "FENCED_MEMBER_EPOCH")
              if hasattr(E, name)}

    def lenient(group, request, exists, config=None):
        decision = decide(group, request, exists, config)
        if decision.error in stale:
            return offset_commit.CommitDecision(E.NONE, group.offset_storage, request.offsets)
        return decision

    offset_commit.decide_commit = lenient


def _break_group_wall_clock() -> None:
    import zkcoord.server.group_runtime as group_runtime

    def wall_ms() -> int:
        return time.time_ns() // 1_000_000  # time.time_ns as moved by clock_shift, read at each call

    # The function object itself is every GroupRuntime's and GroupManager's default clock (bound as a
    # default argument at import): its code is swapped, so each of those reads the wall clock now.
    group_runtime.monotonic_ms.__code__ = wall_ms.__code__


def _break_suspension_wall_clock() -> None:
    from zkcoord.zk.connection import ZkConnection

    init = ZkConnection.__init__

    def wall_clocked(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.clock = lambda: time.time()  # time.time as moved by clock_shift, read at each call

    ZkConnection.__init__ = wall_clocked


def _break_forward_abort() -> None:
    from zkcoord.kafka.forwarder import KafkaForwarder

    KafkaForwarder.abort = lambda self, reason: False


def _break_forward_reset() -> None:
    import zkcoord.kafka.offsets as offsets

    offsets.RESET_ON_CLOSE_OPTIONS = offsets.RESET_ON_CLOSE_OPTIONS[:1]  # kafka-python's TCP_NODELAY alone


_BREAKERS = {"commit-fence": _break_commit_fence, "state-fence": _break_state_fence,
             "session-loss": _break_session_loss, "generation": _break_generation,
             "group-wall-clock": _break_group_wall_clock, "suspension-wall-clock": _break_suspension_wall_clock,
             "forward-abort": _break_forward_abort, "forward-reset": _break_forward_reset}


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "-m":
        sys.exit("usage: broken_fence.py BREAKS -m MODULE [ARGS...]")
    breaks, module, rest = argv[0].split(","), argv[2], argv[3:]
    for name in breaks:
        _BREAKERS[name]()
    print(f"broken_fence: {module} runs with broken {', '.join(breaks)}", file=sys.stderr, flush=True)
    sys.argv = [module, *rest]
    sys.path.insert(0, os.getcwd())
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    sys.path.pop(0)  # this file's folder: its modules must not shadow the product's
    main(sys.argv[1:])
