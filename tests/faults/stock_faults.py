"""Faults on stock clients, for a seeded fault run (no tests here).

:class:`StockFaults` bounces the consumers of a
:class:`tests.support.verifiable.StockClients` group (Kafka's
VerifiableConsumer, librdkafka), drawn from the run's ``random.Random``
as :class:`tests.faults.harness.Faults` draws its own, each fault waiting
(with generous bounds) until the group is whole again:

* ``stock-consumer-bounce``: SIGTERM (it commits, leaves the group; a static
  member keeps its place for its session) and a restart: Kafka's rolling
  bounce, ``clean_shutdown=True``;
* ``stock-consumer-kill-9``: SIGKILL (no commit, no leave) and a restart
  after 0 to 3 s: a hard bounce. A static member of the consumer protocol
  is restarted only once its session expired and the others hold its
  partitions (until then its instance id is not released: Kafka 4.4 answers
  UNRELEASED_INSTANCE_ID, which the Java client takes for fatal).

Stock consumers are never SIGSTOPped: a frozen member's late callbacks are
no verdict of Kafka's system tests. The verdicts are
:meth:`StockClients.check` (:func:`tests.faults.stock_checker.check_stock`)
at the end of the run, with ``allowed_duplicates=("hard-kill",
"failed-commit", "lost")`` when the run also kills, stops or cuts daemons
and ZooKeeper (a commit refused while the group moves is retried by none of
the clients: what it covered is consumed again; counted, not a violation).

Use from a fault run (as ``tests/faults/test_fault_run.py`` uses
:class:`~tests.faults.harness.Faults`)::

    clients = StockClients(gateways, topic, group, events / "stock", partitions=..., classic_properties=...)
    clients.start_producer(100)
    for label, protocol in (("s1", "classic"), ("s2", "consumer"), ("s3", "classic")):
        clients.start_java(label, protocol=protocol)
    clients.start_rdkafka("s4")
    stock = StockFaults(rng, clients)
    ... stock.inject(number) among the run's own faults ...
    clients.stop_producer(); clients.wait_all_consumed("drained"); clients.stop_all()
    verdict = clients.check(final_committed=..., allowed_duplicates=stock.allowed_duplicates)
"""

from __future__ import annotations

import random
import time

from tests.support.verifiable import StockClients

LIVENESS_S = 120.0


class StockFaults:
    KINDS = ("stock-consumer-bounce", "stock-consumer-kill-9")

    def __init__(self, rng: random.Random, clients: StockClients, say=print,
                 allowed_duplicates: tuple[str, ...] = ("hard-kill", "failed-commit", "lost")):
        self.rng, self.clients, self.say = rng, clients, say
        self.allowed_duplicates = allowed_duplicates
        self.counts: dict[str, int] = {}

    def inject(self, number: int, kind: str | None = None) -> str:
        """One fault (``kind``, else drawn); a one-line description."""
        kind = kind or self.rng.choice(self.KINDS)
        started = time.monotonic()
        what = self.apply(kind)
        line = f"fault {number}: {kind}: {what} ({time.monotonic() - started:.1f} s)"
        self.say(line)
        return line

    def apply(self, kind: str) -> str:
        """Fault ``kind`` on a consumer drawn from the rng; what was done."""
        label = self.rng.choice(sorted(self.clients.consumers))
        what = getattr(self, "_" + kind.replace("-", "_"))(label)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return what

    def _stock_consumer_bounce(self, label: str) -> str:
        member = self.clients.current(label).member
        self.clients.stop(label)
        back = self.clients.restart(label)
        self.clients.wait_balanced(f"{back.member} back after {member}'s clean bounce", timeout_s=LIVENESS_S)
        return f"{member} stopped, {back.member} started"

    def _stock_consumer_kill_9(self, label: str) -> str:
        process = self.clients.current(label)
        _, spec = self.clients.settings(label)
        pause_s = self.rng.uniform(0, 3)
        self.clients.kill(label)
        if spec.get("instance_id") and spec.get("protocol") == "consumer":
            self.clients.wait_balanced(f"static {process.member} killed: its session expired",
                                       timeout_s=LIVENESS_S)
        else:
            time.sleep(pause_s)
        back = self.clients.restart(label)
        self.clients.wait_balanced(f"{back.member} back after {process.member}'s kill", timeout_s=LIVENESS_S)
        return f"{process.member} killed, {back.member} started"
