"""Network faults as kinds of the random fault run (``tests/faults/``).

:class:`NetFaults` injects one network fault per call, drawn and timed by
the run's seeded ``random.Random``, and waits (bounded) until it took
effect and the system is back, as :class:`tests.faults.harness.Faults`'
own kinds do. It needs the run's daemons and consumers started inside
namespaces of their own (:mod:`tests.support.netns`), so that one link of
one process can be cut:

* ``daemon-zookeeper-cut`` - a daemon cut from ZooKeeper (its clients still
  reach it) until ZooKeeper expired its session, plus a random 0-3 s;
  healed; it registers again with a new session;
* ``daemon-clients-cut`` - a daemon's listening port cut both ways for a
  random 1-12 s (past the consumers' 10 s sessions or not), its ZooKeeper
  session kept;
* ``consumer-coordinator-cut`` - a consumer cut from every daemon (it still
  fetches from the broker) until the group rebalanced without it; healed:
  it comes back with a stale generation, as after ``consumer-sigstop``.

Registration (what the fault run must do; nothing here edits it):

1. make a :class:`~tests.support.netns.Namespaces` for the run (closed at the
   end), one namespace per daemon and per consumer;
2. start the daemons with a :class:`~tests.support.group_run.WrappedFleet`
   (``wrappers={n: spaces[n].wrap}``) listening on
   ``spaces[n].listen(port)``, also when ``Faults.restart_daemon`` restarts
   one (:meth:`NetFaults.listen`); the consumers' ``coordinators`` are those
   addresses;
3. start the consumers with a :class:`~tests.support.group_run.WrappedPool`
   (``wrappers={i: consumer_spaces[i].wrap}``);
4. in ``Faults``: add :data:`KINDS` to its kinds and call
   ``net.inject(kind, faults)`` for them (it uses ``faults._daemon()``,
   ``faults._wait_registered()`` and ``faults.stored_generation()``).
"""

from __future__ import annotations

import random
import time

from kazoo.exceptions import KazooException, NoNodeError

from tests.support.daemons import DaemonFleet, wait_for
from tests.support.netns import NetNamespace

LIVENESS_S = 120.0
KINDS = ("daemon-zookeeper-cut", "daemon-clients-cut", "consumer-coordinator-cut")


class NetFaults:
    def __init__(self, rng: random.Random, fleet: DaemonFleet, daemon_spaces: dict[int, NetNamespace],
                 consumer_spaces: dict[int, NetNamespace], zk_port) -> None:
        """``zk_port``: ZooKeeper's port, or every port of an ensemble (a cut
        from ZooKeeper cuts the daemon from each of its servers)."""
        self.rng, self.fleet = rng, fleet
        self.daemon_spaces, self.consumer_spaces = daemon_spaces, consumer_spaces
        self.zk_ports = [zk_port] if isinstance(zk_port, int) else list(zk_port)

    def listen(self, node_id: int, port: int) -> str:
        """The ``--listen`` of daemon ``node_id`` (in its namespace)."""
        return self.daemon_spaces[node_id].listen(port)

    def inject(self, kind: str, faults) -> str:
        """Run fault ``kind`` with the run's ``Faults`` object; its description."""
        if kind == "daemon-zookeeper-cut":
            return self.daemon_zookeeper_cut(faults._daemon(), faults._wait_registered)
        if kind == "daemon-clients-cut":
            return self.daemon_clients_cut(faults._daemon())
        if kind == "consumer-coordinator-cut":
            return self.consumer_coordinator_cut(self.rng.randrange(len(self.consumer_spaces)),
                                                 faults.stored_generation)
        raise ValueError(f"not a network fault: {kind}")

    def _session(self, node_id: int) -> int | None:
        try:
            return self.fleet.zk.get(f"/zkcoord/nodes/{node_id}")[1].ephemeralOwner
        except (NoNodeError, KazooException):
            return None

    def daemon_zookeeper_cut(self, daemon, wait_registered) -> str:
        ns = self.daemon_spaces[daemon.node_id]
        extra_s = self.rng.uniform(0, 3)
        ns.cut_to(self.zk_ports)
        try:
            wait_for(lambda: self.fleet.session_gone(daemon.node_id), LIVENESS_S,
                     f"ZooKeeper expired the session of daemon {daemon.node_id}, cut from it")
            time.sleep(extra_s)  # the partition's own length, drawn from the seed
        finally:
            ns.heal()
        wait_registered(daemon.node_id)
        return f"daemon {daemon.node_id} cut from ZooKeeper until its session expired, +{extra_s:.1f} s, healed"

    def daemon_clients_cut(self, daemon) -> str:
        ns = self.daemon_spaces[daemon.node_id]
        hold_s = self.rng.uniform(1, 12)
        session = self._session(daemon.node_id)
        ns.cut_clients([daemon.port])
        try:
            time.sleep(hold_s)  # the partition's own length, drawn from the seed
        finally:
            ns.heal()
        kept = self._session(daemon.node_id) == session
        return f"daemon {daemon.node_id} cut from its clients for {hold_s:.1f} s, healed " \
               f"({'same' if kept else 'another'} ZooKeeper session)"

    def consumer_coordinator_cut(self, index: int, stored_generation) -> str:
        ns = self.consumer_spaces[index]
        before = wait_for(stored_generation, LIVENESS_S, "the group's stored state")
        ns.cut_to([d.port for d in self.fleet.daemons.values()])

        def without_it():  # member ids start with the client id, c<index>-
            now = stored_generation() or before
            return now[0] > before[0] and not any(m.startswith(f"c{index}-") for m in now[2])

        try:
            wait_for(without_it, LIVENESS_S, f"the group rebalanced without c{index}, cut from the daemons", 0.2)
        finally:
            ns.heal()
        return f"consumer c{index} cut from the daemons until generation {before[0]} was replaced, healed"
