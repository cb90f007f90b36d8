"""When a suspended ZooKeeper connection counts as a lost session.

A daemon whose connection to ZooKeeper dropped (kazoo's SUSPENDED) cannot
tell whether its session still lives: ZooKeeper ends it once it has not
heard the client for the negotiated session time-out, and says so only when
the client reconnects. Until then the daemon would hold its groups without
being able to write anything for them, while ZooKeeper may already have
expired the session and another daemon taken the groups over.

The rule (Apache Curator's ConnectionStateManager, its "simulated session
expiration", with ``sessionExpirationPercent`` 100): once the connection has
been suspended for as long as the negotiated session time-out, measured from
the last time the server was heard, the session is treated as lost: the
daemon gives up every group it owns and answers as a daemon without a
session, until the connection is back (with the old session, if ZooKeeper
had not expired it, or a new one). The server ends a session at the same
time-out after it last heard the client, so the two sides decide at about
the same moment; Curator counts from the SUSPENDED event instead, which is
up to two thirds of the time-out later (the client notices a silent server
only after that long).

Noticing the silence is the other half. ZooKeeper's own client drops a
connection on which it has read nothing for two thirds of the session
time-out (its read time-out), and reconnects. kazoo means to do the same
with pings, but sends a ping only after a third of the time-out without
sending anything else: a daemon that keeps sending requests into a dead
connection (each one waits for an answer that never comes) postpones the
ping, and kazoo has been seen to notice only after the whole time-out or
later, when the server had expired the session already.
:func:`silent_too_long` is the read time-out's rule; the connection drops
kazoo's connection when it holds (kazoo then reports SUSPENDED and
reconnects, as the Java client would).

A :class:`Suspension` is one such episode, in milliseconds of a monotonic
clock the caller reads (nothing here reads a clock)::

    >>> s = Suspension.begin(now_ms=10_000, heard_ms=7_500, timeout_ms=4_000)
    >>> s.deadline_ms, s.is_loss(11_499), s.is_loss(11_500)
    (11500, False, True)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["READ_TIMEOUT_FRACTION", "Suspension", "silent_too_long"]

READ_TIMEOUT_FRACTION = 2 / 3  # of the session time-out: ZooKeeper's client's read time-out (and kazoo's)


def silent_too_long(heard_ms: float, now_ms: float, timeout_ms: int) -> bool:
    """While connected: has nothing been read from ZooKeeper for the read
    time-out (two thirds of the session time-out)? Then the connection is
    dropped and counts as suspended (module docstring).

    >>> silent_too_long(heard_ms=1_000, now_ms=3_666, timeout_ms=4_000)
    False
    >>> silent_too_long(heard_ms=1_000, now_ms=3_667, timeout_ms=4_000)
    True
    """
    return now_ms - heard_ms >= timeout_ms * READ_TIMEOUT_FRACTION


@dataclass(frozen=True)
class Suspension:
    """The connection lost at ``since_ms``; the server last heard at
    ``heard_ms`` (never after ``since_ms``); ``timeout_ms``: the session
    time-out ZooKeeper negotiated."""

    since_ms: float
    heard_ms: float
    timeout_ms: int

    @classmethod
    def begin(cls, now_ms: float, heard_ms: float | None, timeout_ms: int) -> Suspension:
        """The suspension reported at ``now_ms``. ``heard_ms`` None (not
        known): counted from ``now_ms``, which gives up later, never
        earlier, than the server expires the session."""
        if timeout_ms <= 0:
            raise ValueError(f"session time-out must be positive, not {timeout_ms} ms")
        heard = now_ms if heard_ms is None else min(heard_ms, now_ms)
        return cls(now_ms, heard, timeout_ms)

    @property
    def deadline_ms(self) -> float:
        """When the suspension becomes a loss."""
        return self.heard_ms + self.timeout_ms

    def is_loss(self, now_ms: float) -> bool:
        """Has the server been silent for the whole session time-out?"""
        return now_ms >= self.deadline_ms

    def wait_ms(self, now_ms: float) -> float:
        """How long until :meth:`is_loss` (0 once it is)."""
        return max(0.0, self.deadline_ms - now_ms)

    def reason(self, now_ms: float) -> str:
        """Why the session is treated as lost, for the log."""
        return (f"ZooKeeper not heard for {now_ms - self.heard_ms:.0f} ms (connection lost "
                f"{now_ms - self.since_ms:.0f} ms ago), the negotiated session time-out is {self.timeout_ms} ms: "
                "the session is treated as expired")
