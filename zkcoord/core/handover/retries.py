"""When the daemon tries its members' claims again: the legacy consumers'
``rebalance.max.retries`` and ``rebalance.backoff.ms``, as a pure schedule.

A legacy consumer's ``syncedRebalance`` makes at most ``rebalance.max.retries``
attempts (default 4); after each failed one (an owner znode it wanted still
held by someone) it releases what it claimed, stops its fetchers and sleeps
``rebalance.backoff.ms`` (default ``zookeeper.sync.time.ms``, 2000), the
last failure included; then it gives up (``ConsumerRebalanceFailedException``)
and owns nothing until the next change of ``/ids`` or of a topic starts a new
rebalance.

zkcoord keeps the same bound, so it never outlasts the legacy consumers'
patience in a way they could not, but it does not sleep blindly: an attempt
is also due as soon as an owner znode it waits for is deleted (the daemon
watches them; :meth:`Attempts.released`), which is most of the time long
before the back-off ends. Its claims are not undone on failure: each
claimed partition is in a member's range of the answer as last read, so it
blocks a legacy consumer only once the answer moved, and then the next plan
revokes and releases it.

Time is passed in (``now_ms``); nothing here reads a clock.

>>> s = RetrySchedule(max_retries=2, backoff_ms=500)
>>> a = Attempts.start(s, now_ms=1000)
>>> a.due(1000), a.failed(1000).next_at_ms, a.failed(1000).failed(1600).gave_up
(True, 1500, True)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from zkcoord.errors import ConfigError

__all__ = ["RetrySchedule", "Attempts", "needs_nudge", "DEFAULT_MAX_RETRIES", "DEFAULT_BACKOFF_MS"]

DEFAULT_MAX_RETRIES = 4  # ConsumerConfig.MaxRebalanceRetries
DEFAULT_BACKOFF_MS = 2000  # rebalance.backoff.ms defaults to zookeeper.sync.time.ms, 2000


@dataclass(frozen=True)
class RetrySchedule:
    """The group's legacy settings (what its legacy consumers are configured with)."""

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_ms: int = DEFAULT_BACKOFF_MS

    def __post_init__(self) -> None:
        for name, value, least in (("max_retries", self.max_retries, 1), ("backoff_ms", self.backoff_ms, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= 2**31 - 1:
                raise ConfigError(f"legacy rebalance {name} must be a whole number from {least} to 2147483647, "
                                  f"got {value!r} (rebalance.max.retries / rebalance.backoff.ms of the legacy "
                                  "consumers)")

    @property
    def patience_ms(self) -> int:
        """How long a legacy consumer keeps trying before it gives up: every
        attempt is followed by a back-off (attempts themselves take time too,
        so this is a lower bound)."""
        return self.max_retries * self.backoff_ms


@dataclass(frozen=True)
class Attempts:
    """One rebalance's attempts: how many failed, when the next is due."""

    schedule: RetrySchedule
    failures: int = 0
    next_at_ms: int | None = None  # None: due now
    gave_up: bool = False

    @classmethod
    def start(cls, schedule: RetrySchedule, now_ms: int) -> Attempts:
        """A new rebalance (a change of ``/ids``, of a topic, of zkcoord's members)."""
        return cls(schedule, 0, now_ms)

    def due(self, now_ms: int) -> bool:
        return not self.gave_up and (self.next_at_ms is None or now_ms >= self.next_at_ms)

    def failed(self, now_ms: int) -> Attempts:
        """An attempt left a claim undone: back off, or give up after ``max_retries``."""
        failures = self.failures + 1
        if failures >= self.schedule.max_retries:
            return replace(self, failures=failures, next_at_ms=None, gave_up=True)
        return replace(self, failures=failures, next_at_ms=now_ms + self.schedule.backoff_ms)

    def released(self, now_ms: int) -> Attempts:
        """An owner znode we wait for was deleted: the next attempt is due now
        (it still counts against ``max_retries`` if it fails)."""
        if self.gave_up:
            return self
        return replace(self, next_at_ms=now_ms)


def needs_nudge(unowned_since_ms: int | None, now_ms: int, schedule: RetrySchedule) -> bool:
    """Whether the legacy consumers gave up on a partition of their ranges.

    A legacy consumer still trying claims a free partition of its range
    within one back-off (plus its attempt); one that gave up waits for the
    next change of ``ids``. ``unowned_since_ms``: since when a partition of
    a legacy thread's range (``Plan.unowned``) has had no owner znode (None:
    it has one). After two back-offs the daemon should start a new legacy
    rebalance, e.g. by registering one of its members again (delete, then
    create: legacy consumers watch the children of ``ids``).

    >>> needs_nudge(1000, 4999, RetrySchedule(backoff_ms=2000)), needs_nudge(1000, 5000, RetrySchedule(backoff_ms=2000))
    (False, True)
    """
    return unowned_since_ms is not None and now_ms - unowned_since_ms >= 2 * schedule.backoff_ms
