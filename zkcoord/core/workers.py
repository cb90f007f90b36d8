"""Where the workers of one ``zkcoord run --workers N`` listen (pure).

A daemon with N > 1 workers is N processes, each its own node in the group
elections (its own node id and ZooKeeper session). Clients must reach the
worker that owns their group, so each worker has ports of its own beside
the ports all workers share (``SO_REUSEPORT``: the kernel spreads the
connections over the workers):

=================  ===========================  ================================================
port               shared by every worker       worker k's own (k = 1..N)
=================  ===========================  ================================================
listener           ``--listen`` port P          P + k; registered, so FindCoordinator names it
gateway            ``--gateway-listen`` port G  G + 1 + (HIGH - LOW) + k: after the broker ports
gateway brokers    G + 1 + (B - LOW)            (shared)
metrics, health    ``--metrics-listen`` port M  M + k; M is the supervisor's, summing the workers
=================  ===========================  ================================================

Advertised ports follow the same rule from the advertised port. A shared
port of 0 means the kernel picks every port: the supervisor binds the
shared one first (its number is then given to the workers) and each
worker's own ports are the kernel's too, advertised as bound.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MAX_WORKERS", "WorkerPlan", "worker_count"]

MAX_WORKERS = 256


def worker_count(configured: int, cpus: int) -> int:
    """``--workers``: 0 means one worker per core."""
    return configured if configured > 0 else max(1, cpus)


@dataclass(frozen=True)
class WorkerPlan:
    """Worker ``index`` (1-based) of ``count``. ``listen_port`` and
    ``gateway_port``: the shared ports as bound (the supervisor's pick when
    configured as 0); ``broker_span``: HIGH - LOW + 1 of ``--gateway-broker-ids``;
    ``refused_broker_ports``: the shared broker ports another process was
    found bound to, which no worker binds. The own ports are computed from
    the configured ports (0: the kernel's)."""

    index: int
    count: int
    listen_port: int = 0
    gateway_port: int | None = None
    broker_span: int = 0
    refused_broker_ports: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        if not 1 <= self.index <= self.count <= MAX_WORKERS:
            raise ValueError(f"worker {self.index} of {self.count}: workers are numbered 1..count, "
                             f"count at most {MAX_WORKERS}")

    def own_port(self, configured: int) -> int:
        """The listener's (and the metrics endpoint's) own port: 0 when the kernel picks."""
        return configured + self.index if configured else 0

    def own_gateway_port(self, configured: int) -> int:
        """The gateway's own port, after the broker ports: 0 when the kernel picks."""
        return configured + self.broker_span + self.index if configured else 0


def highest_port(shared: int, count: int, span: int = 0) -> int:
    """The highest port ``count`` workers use from ``shared`` (their own
    ports after ``span`` ports of brokers)."""
    return shared + span + count if shared else 0
