"""Faults of the servers under zkcoord: members of the sandbox's ZooKeeper
ensemble and its Kafka brokers, for the fault suite and the ensemble tests.

:class:`ClusterFaults` acts on a :class:`~zkcoord.local.sandbox.Sandbox`
made with ``up(zookeepers=3, brokers=3)`` (most primitives work on any
sandbox; the ensemble ones need an ensemble):

* which ZooKeeper server leads (:meth:`~ClusterFaults.zookeeper_roles`,
  :meth:`~ClusterFaults.wait_zookeeper_leader`), from each server's own
  four-letter word ``srvr`` (``Mode: leader`` / ``follower``; a member
  without a quorum answers that it is not serving);
* kill -9 of the leader or of a follower, and its restart
  (:meth:`~ClusterFaults.kill_zookeeper_leader`,
  :meth:`~ClusterFaults.kill_zookeeper_follower`,
  :meth:`~ClusterFaults.start_zookeeper`);
* a quorum lost (kill -9 of a majority) and regained
  (:meth:`~ClusterFaults.lose_quorum`, :meth:`~ClusterFaults.regain_quorum`);
* kill -9 of a broker and its restart (:meth:`~ClusterFaults.kill_broker`,
  :meth:`~ClusterFaults.restart_broker`), which broker is a group's
  coordinator in Kafka (:meth:`~ClusterFaults.group_coordinator`: what
  FindCoordinator answers) or a partition's leader
  (:meth:`~ClusterFaults.partition_leader`: as every running broker's own
  metadata has it).

Every wait is for a condition the servers report (a leader elected and
every running member serving, a broker's registration under
``/brokers/ids`` gone or back, a partition with a live leader), bounded by
``timeout_s`` as a failure, never a sleep. Kills are SIGKILL to the
recorded pid (the sandbox checks the pid is still its server's).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kafka.protocol.metadata import MetadataRequest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from tests.support.daemons import wait_for
from tests.support.wire import WireClient, find_coordinator
from zkcoord.local import config_files, ensemble, procs
from zkcoord.local.sandbox import Sandbox, SandboxState, zk_four_letter, zookeeper_mode

OFFSETS_TOPIC = "__consumer_offsets"


def java_string_hash(text: str) -> int:
    """``String.hashCode()`` of Java: over UTF-16 code units, 32-bit signed.

    >>> java_string_hash(""), java_string_hash("group"), java_string_hash("\\U0001F600")
    (0, 98629247, 1772899)
    >>> java_string_hash("polygenelubricants")  # Java's own example of Integer.MIN_VALUE
    -2147483648"""
    value = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        value = (31 * value + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def offsets_partition(group: str, partitions: int = config_files.OFFSETS_TOPIC_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition of ``group``, whose leader is its
    coordinator: ``Utils.abs(groupId.hashCode) % partitions`` (Kafka's
    ``GroupCoordinator.partitionFor``; ``Utils.abs(Integer.MIN_VALUE)`` is 0).

    >>> offsets_partition("group"), offsets_partition("polygenelubricants")
    (7, 0)"""
    value = java_string_hash(group)
    return (0 if value == -(1 << 31) else abs(value)) % partitions


@dataclass
class ClusterFaults:
    sandbox: Sandbox
    timeout_s: float = 120.0
    say: Callable[[str], None] = field(default=lambda msg: None)

    # -- the sandbox --------------------------------------------------------------------
    def state(self) -> SandboxState:
        state = self.sandbox.load()
        if state is None:
            raise AssertionError(f"no sandbox in {self.sandbox.state_dir}")
        return state

    def _alive(self, server) -> bool:
        return procs.alive(server.pid, self.sandbox._match(server.name))

    # -- ZooKeeper ----------------------------------------------------------------------
    def zookeeper_names(self) -> list[str]:
        return [z.name for z in self.state().zookeepers]

    def zookeeper_roles(self) -> dict[str, str | None]:
        """Each ZooKeeper server's role now: ``leader``, ``follower``,
        ``standalone``, or None (down, or running but serving no clients)."""
        return {z.name: zookeeper_mode(z.port) if self._alive(z) else None for z in self.state().zookeepers}

    def running_zookeepers(self) -> list[str]:
        return [z.name for z in self.state().zookeepers if self._alive(z)]

    def zookeeper_leader(self) -> str | None:
        """The leader now, when exactly one server says it leads; else None."""
        leaders = [name for name, role in self.zookeeper_roles().items() if role == "leader"]
        return leaders[0] if len(leaders) == 1 else None

    def ensemble_serves(self) -> str | None:
        """The leader's name when the ensemble serves: one leader, every
        running member serving (leader or follower), and they are a quorum;
        None otherwise. A standalone server: its name when it serves."""
        state = self.state()
        if not state.zookeeper_peers:
            return state.zookeeper.name if zookeeper_mode(state.zookeeper.port) == "standalone" else None
        roles = {z.name: zookeeper_mode(z.port) for z in state.zookeepers if self._alive(z)}
        leaders = [name for name, role in roles.items() if role == "leader"]
        if (len(roles) < ensemble.quorum(len(state.zookeepers)) or len(leaders) != 1
                or any(role not in ("leader", "follower") for role in roles.values())):
            return None
        return leaders[0]

    def wait_zookeeper_leader(self, not_: str | None = None) -> str:
        """Until the ensemble serves (:meth:`ensemble_serves`) with a leader
        other than ``not_``; its name."""
        def served():
            leader = self.ensemble_serves()
            return leader if leader is not None and leader != not_ else None

        return wait_for(served, self.timeout_s, "the ZooKeeper ensemble serves with a leader"
                        + (f" other than {not_}" if not_ else "") + f": {self._roles_text()}", 0.1)

    def _roles_text(self) -> str:
        return ", ".join(f"{name} {role or 'not serving/down'}" for name, role in self.zookeeper_roles().items())

    def _require_ensemble(self) -> SandboxState:
        state = self.state()
        if not state.zookeeper_peers:
            raise AssertionError(f"the sandbox in {self.sandbox.state_dir} runs one ZooKeeper server, not an "
                                 "ensemble (up(zookeepers=3))")
        return state

    def kill_zookeeper(self, name: str) -> None:
        """kill -9 of one ZooKeeper server, and nothing else; returns once it is gone."""
        self.sandbox.stop_server(name, kill=True)

    def start_zookeeper(self, name: str) -> None:
        """Start one ZooKeeper server alone; returns once it serves (a quorum
        runs) or answers ``ruok`` (no quorum yet)."""
        self.sandbox.start_zookeeper(name)

    def kill_zookeeper_leader(self) -> tuple[str, str]:
        """kill -9 of the leader; waits until the others elected a new one
        and serve. (killed, new leader)."""
        self._require_ensemble()
        leader = self.wait_zookeeper_leader()
        self.say(f"  kill -9 of the ZooKeeper leader {leader}")
        self.kill_zookeeper(leader)
        new = self.wait_zookeeper_leader(not_=leader)
        self.say(f"  {new} leads the ensemble now")
        return leader, new

    def kill_zookeeper_follower(self, choose: Callable[[list[str]], str] = min) -> tuple[str, str]:
        """kill -9 of a follower (``choose`` picks among them, e.g.
        ``rng.choice``); waits until the ensemble serves without it (a quorum
        is left). (killed, leader)."""
        self._require_ensemble()
        leader = self.wait_zookeeper_leader()
        followers = [name for name, role in self.zookeeper_roles().items() if role == "follower"]
        victim = choose(followers)
        self.say(f"  kill -9 of ZooKeeper follower {victim} (leader {leader})")
        self.kill_zookeeper(victim)
        return victim, self.wait_zookeeper_leader()

    def restart_zookeeper(self, name: str) -> str:
        """Start a killed member again; waits until it serves in the ensemble. The leader."""
        self.start_zookeeper(name)
        return self.wait_zookeeper_leader()

    def lose_quorum(self, choose: Callable[[list[str]], str] = min) -> list[str]:
        """kill -9 of ZooKeeper members until a minority runs (2 of 3, 3 of
        5; the leader among them when ``choose`` picks it), waiting until
        every member still running says it serves no clients. The names killed."""
        state = self._require_ensemble()
        self.wait_zookeeper_leader()
        running = self.running_zookeepers()
        keep = ensemble.quorum(len(state.zookeepers)) - 1
        killed = []
        while len(running) > keep:
            victim = choose(running)
            self.kill_zookeeper(victim)
            running.remove(victim)
            killed.append(victim)
        self.say(f"  kill -9 of ZooKeeper servers {', '.join(killed)}: {', '.join(running)} left, no quorum")

        def no_one_serves():
            return all(zookeeper_mode(z.port) is None and zk_four_letter(z.port, "srvr").strip() != ""
                       for z in self.state().zookeepers if z.name in running)

        wait_for(no_one_serves, self.timeout_s, f"the ZooKeeper servers left ({running}) stop serving", 0.1)
        return killed

    def regain_quorum(self, names: Iterable[str]) -> str:
        """Start the members ``names`` again, one at a time; waits until the
        ensemble serves. The leader."""
        for name in names:
            self.say(f"  starting ZooKeeper server {name} again")
            self.start_zookeeper(name)
        leader = self.wait_zookeeper_leader()
        self.say(f"  quorum back, {leader} leads")
        return leader

    # -- brokers ------------------------------------------------------------------------
    def broker_ids(self) -> list[int]:
        return [b.broker_id for b in self.state().brokers]

    def registered_brokers(self) -> set[int] | None:
        """The broker ids registered under ``/brokers/ids`` now; None when
        ZooKeeper does not answer (no quorum)."""
        client = KazooClient(hosts=self.sandbox.zookeeper_address(self.state()), timeout=5,
                             connection_retry={"max_tries": 1}, command_retry={"max_tries": 1})
        try:
            client.start(timeout=5)
            return {int(child) for child in client.get_children("/brokers/ids")}
        except NoNodeError:
            return set()
        except (KazooException, KazooTimeoutError):
            return None
        finally:
            client.stop()
            client.close()

    def _broker(self, broker_id: int):
        for broker in self.state().brokers:
            if broker.broker_id == broker_id:
                return broker
        raise AssertionError(f"no broker {broker_id} in the sandbox; it has {self.broker_ids()}")

    def kill_broker(self, broker_id: int, wait_unregistered: bool = True) -> None:
        """kill -9 of one broker; with ``wait_unregistered``, until its
        registration is gone (its ZooKeeper session expired: the controller
        then moves its partitions' leadership and shrinks their ISRs)."""
        self.sandbox.stop_server(self._broker(broker_id).name, kill=True)
        self.say(f"  kill -9 of broker {broker_id}")
        if wait_unregistered:
            wait_for(lambda: (found := self.registered_brokers()) is not None and broker_id not in found,
                     self.timeout_s, f"broker {broker_id}'s registration under /brokers/ids expired", 0.2)

    def restart_broker(self, broker_id: int) -> None:
        """Start a killed broker again (the sandbox waits until its old
        registration is gone and every broker answers metadata); then until
        it is registered under ``/brokers/ids``."""
        self.sandbox.start_server(self._broker(broker_id).name)
        wait_for(lambda: broker_id in (self.registered_brokers() or ()), self.timeout_s,
                 f"broker {broker_id} registered under /brokers/ids again", 0.2)
        self.say(f"  broker {broker_id} back")

    def _broker_by_port(self, port: int) -> int:
        for broker in self.state().brokers:
            if broker.port == port:
                return broker.broker_id
        raise AssertionError(f"no sandbox broker listens on port {port}")

    def live_bootstrap(self) -> str:
        """The running brokers' addresses (a bootstrap list without the killed ones)."""
        return ",".join(f"127.0.0.1:{b.port}" for b in self.state().brokers if self._alive(b))

    def group_coordinator(self, group: str, timeout_s: float = 60.0) -> int:
        """The broker id of ``group``'s coordinator in Kafka, as FindCoordinator
        answers it (asked of the running brokers; COORDINATOR_NOT_AVAILABLE,
        while the offsets partition has no leader, asked again)."""
        host, port = asyncio.run(find_coordinator(self.live_bootstrap(), group, timeout_s=timeout_s))
        return self._broker_by_port(port)

    def partition_views(self, topic: str, partition: int) -> dict[int, int | None]:
        """The partition's leader as each running broker's own metadata
        cache has it (broker id -> leader id; None: no leader, or the broker
        did not answer). The controller sends every broker the change; a
        broker cut from it keeps an old view."""
        async def ask(broker) -> int | None:
            try:
                client = await WireClient.connect("127.0.0.1", broker.port, "zkcoord-test-faults")
            except OSError:
                return None
            try:
                answer = await client.call(MetadataRequest(
                    version=9, topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                    allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False), timeout_s=10)
            except (OSError, asyncio.TimeoutError, ConnectionError):
                return None
            finally:
                await client.close()
            for found in answer.topics:
                for row in found.partitions:
                    if found.name == topic and row.partition_index == partition and row.error_code == 0:
                        return row.leader_id if row.leader_id >= 0 else None
            return None

        async def ask_all():
            live = [b for b in self.state().brokers if self._alive(b)]
            return dict(zip([b.broker_id for b in live], await asyncio.gather(*(ask(b) for b in live))))

        return asyncio.run(ask_all())

    def partition_leader(self, topic: str, partition: int) -> int | None:
        """The partition's leader when every running broker names the same
        one (:meth:`partition_views`); None otherwise."""
        views = set(self.partition_views(topic, partition).values())
        return views.pop() if len(views) == 1 else None

    def wait_topic(self, topic: str, partitions: int) -> None:
        """Until every running broker knows ``topic`` (each of its
        ``partitions`` with the same leader everywhere). A topic just created
        is known to the controller first: a group's coordinator broker not
        told yet refuses a commit of it (UNKNOWN_TOPIC_OR_PARTITION), and a
        consumer's metadata from it lacks the topic."""
        for partition in range(partitions):
            self.wait_partition_leader(topic, partition)

    def wait_partition_leader(self, topic: str, partition: int, not_: int | None = None) -> int:
        """Until every running broker names the same leader of
        ``topic``-``partition`` (other than ``not_``); its id."""
        seen: dict[int, int | None] = {}

        def led():  # (leader,): broker 0 is a leader too, and wait_for waits for a true value
            seen.clear()
            seen.update(self.partition_views(topic, partition))
            leaders = set(seen.values())
            leader = leaders.pop() if len(leaders) == 1 else None
            return (leader,) if leader is not None and leader != not_ else None

        try:
            [leader] = wait_for(led, self.timeout_s, f"{topic}-{partition} has a leader"
                                + (f" other than broker {not_}" if not_ is not None else ""), 0.2)
            return leader
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the last views (broker: leader): {seen}") from None
