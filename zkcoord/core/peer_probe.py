"""Noticing a dead daemon before ZooKeeper does: whom to probe, and when the answers prove it gone.

A daemon killed with -9 keeps its ZooKeeper session, and so its groups,
until ZooKeeper expires the session (``--zk-session-timeout-ms``, 10 s by
default, plus up to a tick): only then may another daemon take the groups
over. Yet the machine it ran on knows at once: its listener's port refuses
connections. Each daemon therefore probes one other (:func:`probe_target`:
the next live node id after its own, so each live daemon is probed by
exactly one), and when that daemon's registered address has refused
:data:`REFUSALS` connections in a row over at least :data:`REFUSAL_SPAN_S`
(:class:`PeerProbe`), the prober ends the dead daemon's ZooKeeper session
with the session's own id and password (:mod:`zkcoord.zk.nodes`): its
registration and its groups' contenders go at once, and the takeover
(:mod:`zkcoord.server.takeover`) starts seconds earlier.

Rules:

1. Only a refusal counts: an address that accepts (a daemon paused with
   SIGSTOP still accepts into its listen backlog), or that does not answer
   (a partition, a machine that is down: no one can tell those from a
   slow network), resets the count, and ZooKeeper's own expiry decides.
2. Ending a session is safe whatever the daemon's state: it is the same
   event as ZooKeeper expiring it, which every fence already handles (a
   deposed owner can never write). A wrong verdict costs a fail-over, never
   data; the count and the span are there to avoid needless ones (a stop
   closes the listener just before it unregisters).
3. A verdict is given once per registration (:class:`Peer`: node id,
   address, start time and pid): a daemon that registers again is a new
   peer, probed from a count of zero.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["END_RESULTS", "Outcome", "Peer", "PeerProbe", "REFUSALS", "REFUSAL_SPAN_S", "probe_target"]

REFUSALS = 3  # refusals in a row, and ...
REFUSAL_SPAN_S = 1.0  # ... at least this long from the first to the last, before a session is ended


# What ending a dead daemon's session came to (zkcoord.zk.nodes.NodeRegistry.end_session; "failed": ZooKeeper
# could not be reached), the metric's labels.
END_RESULTS = ("ended", "already-expired", "gone", "registered-again", "no-session-record", "failed")


class Outcome(enum.Enum):
    ACCEPTED = "accepted"  # the TCP connection was accepted: a process holds the port
    REFUSED = "refused"  # connection refused: nothing listens there
    NO_ANSWER = "no-answer"  # timed out or unreachable: cannot be told from a slow network


@dataclass(frozen=True)
class Peer:
    """One registration of a daemon, as probed."""

    node_id: int
    host: str
    port: int
    start_time_ms: int
    pid: int


def probe_target(me: int, live: Iterable[int]) -> int | None:
    """The daemon ``me`` probes: the next live node id after ``me``, from
    the lowest again after the highest; None when no other is live.

    >>> probe_target(2, [1, 2, 3]), probe_target(3, [1, 2, 3]), probe_target(1, [1]), probe_target(5, [1, 3])
    (3, 1, None, 1)"""
    others = sorted(n for n in set(live) if n != me)
    if not others:
        return None
    return next((n for n in others if n > me), others[0])


class PeerProbe:
    """The probe's count for the peer probed now (module docstring, rules 1 and 3)."""

    def __init__(self, refusals: int = REFUSALS, span_s: float = REFUSAL_SPAN_S) -> None:
        if refusals < 1 or span_s < 0:
            raise ValueError(f"refusals must be at least 1 and span_s not negative, got {refusals}, {span_s}")
        self._needed, self._span_s = refusals, span_s
        self._peer: Peer | None = None
        self._refused = 0
        self._first_refusal = 0.0
        self._ended: set[Peer] = set()  # registrations whose session a verdict already ended

    @property
    def refused(self) -> int:
        """Refusals in a row of the peer probed now."""
        return self._refused

    def observe(self, peer: Peer, outcome: Outcome, now: float) -> bool:
        """Record one probe of ``peer`` at ``now`` (monotonic seconds); True
        when its session is to be ended now (given once per registration)."""
        if peer != self._peer:
            self._peer, self._refused = peer, 0
        if outcome is not Outcome.REFUSED:
            self._refused = 0
            return False
        if self._refused == 0:
            self._first_refusal = now
        self._refused += 1
        if self._refused < self._needed or now - self._first_refusal < self._span_s or peer in self._ended:
            return False
        self._ended.add(peer)
        return True

    def forget(self, live: Iterable[Peer]) -> None:
        """Drop the verdicts of registrations no longer live (bounded memory)."""
        self._ended &= set(live)
