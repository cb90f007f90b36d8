"""The moving parts of a fault run (no tests here).

* :class:`MarkedSandbox` - the fault tests' own ZooKeeper + Kafka
  (:class:`zkcoord.local.sandbox.Sandbox`), its JVMs carrying the
  ``zkcoord-test-process=$ZKCOORD_TEST_STATE_DIR`` marker ``.ci/run`` kills by;
  :func:`state_directory` - where it keeps its state.
* :func:`expire_session` - make ZooKeeper end any session, for real: a
  session's password is ``java.util.Random(id ^ 0xB3415C00).nextBytes(16)``
  (``ZooKeeperServer.generatePasswd``), so a second client can attach to it
  and close it, as kazoo's own test harness does with a known password.
* :class:`Producer` - a thread producing to every partition, logging each
  acknowledged record.
* :class:`Monitor` - a thread sampling the group's ZooKeeper offset znodes
  and watching its state znode, logging both.
* :class:`ConsumerPool` - ``tests/faults/worker.py`` processes.
* :class:`Faults` - the faults (daemon kill -9, daemon SIGSTOP past its
  session, ZooKeeper restart, ZooKeeper expiring a daemon's session,
  consumer kill -9, consumer SIGSTOP until the group rebalanced without it),
  each chosen and timed by one seeded ``random.Random``, each waiting (with
  generous bounds) until it took effect and until the system is back. The
  same seed replays the same choices; what they meet depends on timing.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kafka import KafkaProducer
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from tests.support import net_fault_kinds, state_dirs
from tests.support.cluster_faults import ClusterFaults
from tests.support.daemons import DaemonFleet, process_marker, wait_for
from zkcoord.local.sandbox import Sandbox

REPO = Path(__file__).resolve().parents[2]
LIVENESS_S = 120.0  # bound of every wait for the system to come back


class MarkedSandbox(Sandbox):
    def _java(self, name, heap, classpath, main, *args, props=()):
        return super()._java(name, heap, classpath, main, *args, props=(f"-D{process_marker()}", *props))


def state_directory(base: str | None):
    """The fault sandbox's state directory: ``<base>-faults`` (``.ci/run``
    gives the base and cleans it), else a new temporary directory, removed
    on the way out whatever the sandbox left in it (its ``down()`` removes
    its own state only): :func:`tests.support.state_dirs.state_directory`."""
    return state_dirs.state_directory(base, "faults")


# -- sessions ---------------------------------------------------------------------------

def _java_random_bytes(seed: int, count: int) -> bytes:
    """``new java.util.Random(seed).nextBytes(new byte[count])``."""
    mask = (1 << 48) - 1
    state = (seed ^ 0x5DEECE66D) & mask
    out = bytearray()
    while len(out) < count:
        state = (state * 0x5DEECE66D + 0xB) & mask
        value = state >> 16
        for _ in range(min(4, count - len(out))):
            out.append(value & 0xFF)
            value >>= 8
    return bytes(out)


def session_password(session_id: int) -> bytes:
    return _java_random_bytes(session_id ^ 0xB3415C00, 16)


def expire_session(zk_address: str, session_id: int) -> None:
    """Attach to session ``session_id`` and close it: ZooKeeper ends it and
    deletes its ephemeral nodes; its owner sees it expired on reconnect.

    The close can miss: attaching moves the session to the intruder's
    connection and drops its owner's, and an owner that reconnects and
    attaches again before the close takes the session back (the intruder's
    close then fails as SESSION_MOVED, which kazoo's stop does not report).
    Callers check that the session ended (:func:`expire_session_until`)."""
    intruder = KazooClient(hosts=zk_address, client_id=(session_id, session_password(session_id)), timeout=10)
    intruder.start(timeout=30)
    intruder.stop()
    intruder.close()


def expire_session_until(zk_address: str, session_id: int, ended, timeout_s: float = LIVENESS_S,
                         attempt_s: float = 10.0) -> None:
    """:func:`expire_session` again until ``ended()`` (the session is gone:
    its ephemeral node owned by another session, or its process gone), each
    attempt given ``attempt_s`` to show; AssertionError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        expire_session(zk_address, session_id)
        tried = time.monotonic() + attempt_s
        while time.monotonic() < tried:
            if ended():
                return
            time.sleep(0.05)
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: session 0x{session_id:x} ended")


# -- logs ------------------------------------------------------------------------------------

class JsonLines:
    def __init__(self, path: Path):
        self._file = open(path, "a", buffering=1)
        self._lock = threading.Lock()

    def write(self, ev: str, **fields) -> None:
        with self._lock:
            self._file.write(json.dumps({"ev": ev, "t": time.time(), **fields}) + "\n")

    def close(self) -> None:
        with self._lock:
            self._file.close()


# -- producer --------------------------------------------------------------------------------

class Producer(threading.Thread):
    """``rate`` records a second, round-robin over the partitions, acks=all."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, log: JsonLines, rate: float = 20.0):
        super().__init__(name="fault-producer", daemon=True)
        self.topic, self.partitions, self.log, self.rate = topic, partitions, log, rate
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=1_000_000,
                                      max_in_flight_requests_per_connection=1, request_timeout_ms=15_000)
        self.stopping = threading.Event()
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.ends: dict[int, int] = {}  # partition -> highest acknowledged offset + 1

    def _done(self, future) -> None:
        if future.succeeded():
            meta = future.value
            self.acked += 1
            self.ends[meta.partition] = max(self.ends.get(meta.partition, 0), meta.offset + 1)
            self.log.write("acked", recs=[[meta.partition, meta.offset]])
        else:
            self.failed += 1
            self.log.write("produce-failed", error=repr(future.exception))

    def run(self) -> None:
        while not self.stopping.wait(1 / self.rate):
            future = self.producer.send(self.topic, value=b"r%d" % self.sent, partition=self.sent % self.partitions)
            future.add_both(lambda _value, f=future: self._done(f))
            self.sent += 1

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        self.producer.flush(60)
        self.producer.close(30)


# -- monitor ---------------------------------------------------------------------------------

class Monitor(threading.Thread):
    """Samples ``/consumers/<group>/offsets/<topic>/<p>`` every ``every_s``
    and logs every state of ``/coordinators/<group>/state`` its watch sees."""

    def __init__(self, zk_hosts: str, group: str, topic: str, partitions: int, log: JsonLines,
                 every_s: float = 1.0):
        super().__init__(name="fault-monitor", daemon=True)
        self.group, self.topic, self.partitions, self.log, self.every_s = group, topic, partitions, log, every_s
        self.zk = KazooClient(hosts=zk_hosts, timeout=10)
        self.stopping = threading.Event()
        self.samples = 0

    def offsets(self) -> dict[int, int]:
        found = {}
        for p in range(self.partitions):
            try:
                found[p] = int(self.zk.get(f"/consumers/{self.group}/offsets/{self.topic}/{p}")[0])
            except NoNodeError:
                pass
        return found

    def _on_state(self, data, stat, event=None) -> None:
        if data is None:
            return
        from zkcoord.core.group import from_record

        try:
            group = from_record(self.group, json.loads(data))
        except Exception as exc:  # a watcher must not die; the log shows it
            self.log.write("state-unreadable", error=repr(exc))
            return
        self.log.write("state", gen=group.generation_id, state=group.state.value, members=sorted(group.members),
                       version=stat.version)

    def run(self) -> None:
        self.zk.start(timeout=30)
        self.zk.DataWatch(f"/coordinators/{self.group}/state", self._on_state)
        while not self.stopping.wait(self.every_s):
            try:
                self.log.write("zk_offsets", offsets={str(p): o for p, o in self.offsets().items()})
                self.samples += 1
            except KazooException:
                pass  # ZooKeeper restarting: sample next time

    def final(self) -> dict[int, int]:
        offsets = wait_for(lambda: _try(self.offsets), LIVENESS_S, "final offsets read from ZooKeeper")
        self.log.write("final_offsets", offsets={str(p): o for p, o in offsets.items()})
        return offsets

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        self.zk.stop()
        self.zk.close()


def quiet(read):
    """``read()``, or None while ZooKeeper cannot answer (it is restarting)."""
    try:
        return read()
    except KazooException:
        return None


def _try(read):
    try:
        return read() or {-1: -1}  # non-empty: a successful read, even of nothing
    except KazooException:
        return None


# -- consumers ------------------------------------------------------------------------------

class ConsumerPool:
    """``count`` worker processes; each restart is a new process with a log
    file of its own (a kill -9 may cut the last line of the old one)."""

    def __init__(self, count: int, log_dir: Path, **worker_args):
        self.count, self.log_dir, self.worker_args = count, log_dir, worker_args
        self.procs: dict[int, subprocess.Popen] = {}
        self.incarnations: dict[int, int] = {}
        self._all: list[subprocess.Popen] = []

    def start(self, index: int, **overrides) -> None:
        n = self.incarnations.get(index, -1) + 1
        self.incarnations[index] = n
        argv = [sys.executable, "-X", process_marker(), "-m", "tests.faults.worker", "--name", f"c{index}",
                "--log", str(self.log_dir / f"consumer-{index}-{n}.jsonl")]
        for name, value in {**self.worker_args, **overrides}.items():
            argv += [f"--{name.replace('_', '-')}", str(value)]
        with open(self.log_dir / f"consumer-{index}-{n}.out", "ab") as out:
            proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        self.procs[index] = proc
        self._all.append(proc)

    def start_all(self) -> None:
        for i in range(self.count):
            self.start(i)

    def kill(self, index: int) -> None:
        self.procs[index].kill()
        self.procs[index].wait(10)

    def dead(self) -> list[int]:
        return [i for i, p in self.procs.items() if p.poll() is not None]

    def stop_all(self, timeout_s: float = 60.0) -> dict[int, int | None]:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes = {}
        for i, p in self.procs.items():
            try:
                codes[i] = p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                codes[i] = None
        return codes

    def close(self) -> None:
        for p in self._all:
            if p.poll() is None:
                p.kill()
        for p in self._all:
            p.wait(10)


# -- faults ------------------------------------------------------------------------------------

class Faults:
    """The faults of a consumer-group run, drawn from ``rng``. Each method
    returns a one-line description; ``log`` gets one line per fault."""

    KINDS = ("daemon-kill-9", "daemon-sigstop", "zookeeper-restart", "session-expiry", "consumer-kill-9",
             "consumer-sigstop")
    ENSEMBLE_KINDS = ("zookeeper-leader-kill-9", "zookeeper-follower-lost", "zookeeper-quorum-lost")
    BROKER_KINDS = ("broker-kill-9",)
    CLOCK_KINDS = ("daemon-clock-jump",)
    NET_KINDS = net_fault_kinds.KINDS

    def __init__(self, rng: random.Random, sandbox: Sandbox, fleet: DaemonFleet, ports: dict[int, int],
                 pool: ConsumerPool, group: str, zk_address: str, log: JsonLines, say=print, *,
                 kinds: tuple[str, ...] | None = None, cluster: ClusterFaults | None = None,
                 net: net_fault_kinds.NetFaults | None = None, clocks: dict | None = None,
                 topic: str | None = None, partitions: int = 0, listen=None):
        """``kinds``: the kinds drawn from (default :data:`KINDS`); the
        ensemble and broker kinds need ``cluster`` (and ``topic`` and
        ``partitions`` to find partition leaders), the network kinds ``net``,
        the clock kind ``clocks`` (node id -> WallClock). ``listen(node_id,
        port)``: a restarted daemon's ``--listen`` (default 127.0.0.1:port)."""
        self.rng, self.sandbox, self.fleet, self.ports, self.pool = rng, sandbox, fleet, ports, pool
        self.group = group
        self.zk_address, self.log, self.say = zk_address, log, say
        self.kinds = tuple(kinds or self.KINDS)
        self.cluster, self.net, self.clocks = cluster, net, clocks
        self.topic, self.partitions = topic, partitions
        self.listen = listen or (lambda node_id, port: f"127.0.0.1:{port}")
        self.counts: dict[str, int] = {}

    def inject(self, number: int) -> str:
        kind = self.rng.choice(self.kinds)
        started = time.monotonic()
        if kind in self.NET_KINDS:
            if self.net is None:
                raise AssertionError(f"{kind} needs the run's processes in network namespaces (Faults(net=...))")
            what = self.net.inject(kind, self)
        else:
            what = getattr(self, "_" + kind.replace("-", "_"))()
        self.counts[kind] = self.counts.get(kind, 0) + 1
        line = f"fault {number}: {kind}: {what} ({time.monotonic() - started:.1f} s)"
        self.log.write("fault", number=number, kind=kind, what=what)
        self.say(line)
        return line

    # -- daemons -----------------------------------------------------------------------
    def _daemon(self):
        """The group's owner half of the time, else any daemon."""
        owner_wanted, any_one = self.rng.random() < 0.5, self.rng.choice(sorted(self.fleet.daemons))
        owners = quiet(lambda: self.fleet.contenders(self.group)) or []  # drawn first: replays draw alike
        if owner_wanted and owners and owners[0] in self.fleet.daemons:
            return self.fleet.daemons[owners[0]]
        return self.fleet.daemons[any_one]

    def stored_generation(self) -> tuple[int, str, list[str]] | None:
        from zkcoord.core.group import from_record

        try:
            data, _ = self.fleet.zk.get(f"/coordinators/{self.group}/state")
        except (NoNodeError, KazooException):
            return None
        group = from_record(self.group, json.loads(data))
        return group.generation_id, group.state.value, sorted(group.members)

    def restart_daemon(self, node_id: int) -> None:
        wait_for(lambda: quiet(lambda: self.fleet.session_gone(node_id)), LIVENESS_S,
                 f"daemon {node_id}'s session gone")
        self.fleet.start(node_id, listen=self.listen(node_id, self.ports[node_id]))

    def _daemon_kill_9(self) -> str:
        daemon = self._daemon()
        daemon.kill()
        self.restart_daemon(daemon.node_id)
        return f"daemon {daemon.node_id} killed and restarted"

    def _daemon_sigstop(self) -> str:
        daemon = self._daemon()
        daemon.pause()
        # Past the session time-out: until ZooKeeper itself ended the session.
        wait_for(lambda: quiet(lambda: self.fleet.session_gone(daemon.node_id)), LIVENESS_S,
                 f"stopped daemon {daemon.node_id}'s session expired")
        daemon.resume()
        self._wait_registered(daemon.node_id)
        return f"daemon {daemon.node_id} stopped past its session expiry, continued"

    def _wait_registered(self, node_id: int) -> None:
        """Until the daemon registered again (it noticed the expiry and made a
        new session), or exited - then restart it (a daemon may choose to exit
        when its session is lost)."""
        daemon = self.fleet.daemons[node_id]

        def back():
            if not daemon.alive():
                return "exited"
            info = quiet(lambda: self.fleet.registration(node_id))
            return "registered" if info is not None and info["pid"] == daemon.pid else None

        if wait_for(back, LIVENESS_S, f"daemon {node_id} registered again") == "exited":
            self.say(f"  daemon {node_id} exited with {daemon.proc.returncode} after its session ended; restarting")
            self.restart_daemon(node_id)

    def _session_expiry(self) -> str:
        daemon = self._daemon()
        path = f"/zkcoord/nodes/{daemon.node_id}"
        session = self.fleet.zk.get(path)[1].ephemeralOwner

        def renewed():
            try:
                return self.fleet.zk.get(path)[1].ephemeralOwner != session
            except (NoNodeError, KazooException):
                return False

        expire_session_until(self.zk_address, session, lambda: renewed() or not daemon.alive())
        self._wait_registered(daemon.node_id)
        return f"daemon {daemon.node_id}'s session 0x{session:x} expired by ZooKeeper"

    # -- ZooKeeper ------------------------------------------------------------------------
    def _wait_all_registered(self) -> None:
        for node_id in sorted(self.fleet.daemons):
            self._wait_registered(node_id)

    def _zookeeper_restart(self) -> str:
        kill = self.rng.random() < 0.5
        names = restart_zookeeper(self.sandbox, kill=kill)
        self._wait_all_registered()
        what = "ZooKeeper" if len(names) == 1 else f"every ZooKeeper server ({len(names)})"
        return what + (" killed -9 and restarted" if kill else " stopped and restarted")

    def _sessions(self) -> dict[int, int | None]:
        """Each daemon's ZooKeeper session now (its registration's owner)."""
        found = {}
        for node_id in sorted(self.fleet.daemons):
            try:
                found[node_id] = self.fleet.zk.get(f"/zkcoord/nodes/{node_id}")[1].ephemeralOwner
            except (NoNodeError, KazooException):
                found[node_id] = None
        return found

    def _kept(self, before: dict[int, int | None]) -> str:
        """How many daemons kept their session through a fault."""
        after = self._sessions()
        kept = sum(1 for n, s in before.items() if s is not None and after.get(n) == s)
        return f"{kept}/{len(before)} daemon sessions kept"

    def _cluster_faults(self) -> ClusterFaults:
        if self.cluster is None:
            raise AssertionError("ensemble and broker faults need a ClusterFaults (Faults(cluster=...))")
        return self.cluster

    def _zookeeper_leader_kill_9(self) -> str:
        """kill -9 of the ensemble's leader; restarted after 0-3 s, once the others elected another."""
        cluster = self._cluster_faults()
        pause_s = self.rng.uniform(0, 3)
        before = self._sessions()
        killed, new = cluster.kill_zookeeper_leader()
        time.sleep(pause_s)
        leader = cluster.restart_zookeeper(killed)
        self._wait_all_registered()
        return f"ZooKeeper leader {killed} killed -9, {new} elected, {killed} back after {pause_s:.1f} s " \
               f"({leader} leads; {self._kept(before)})"

    def _zookeeper_follower_lost(self) -> str:
        """kill -9 of a follower, down for 1-10 s while the run goes on, restarted."""
        cluster = self._cluster_faults()
        down_s = self.rng.uniform(1, 10)
        before = self._sessions()
        killed, leader = cluster.kill_zookeeper_follower(choose=lambda names: self.rng.choice(sorted(names)))
        time.sleep(down_s)
        cluster.restart_zookeeper(killed)
        self._wait_all_registered()
        return f"ZooKeeper follower {killed} killed -9 for {down_s:.1f} s (leader {leader}), restarted " \
               f"({self._kept(before)})"

    def _zookeeper_quorum_lost(self) -> str:
        """kill -9 of a majority of the ensemble (the leader among them or
        not); 1-8 s without a quorum (past the daemons' 4 s sessions or not);
        the members started again one at a time."""
        cluster = self._cluster_faults()
        down_s = self.rng.uniform(1, 8)
        before = self._sessions()
        killed = cluster.lose_quorum(choose=lambda names: self.rng.choice(sorted(names)))
        time.sleep(down_s)
        leader = cluster.regain_quorum(killed)
        self._wait_all_registered()
        return f"ZooKeeper quorum lost ({', '.join(killed)} killed -9) for {down_s:.1f} s, regained ({leader} leads; " \
               f"{self._kept(before)})"

    # -- brokers ---------------------------------------------------------------------------
    def _broker_kill_9(self) -> str:
        """kill -9 of a broker (the leader of a partition of the run's topic,
        or the group's coordinator in Kafka, or any), until its registration
        expired and the others lead its partitions; restarted after 0-3 s."""
        cluster = self._cluster_faults()
        which = self.rng.choice(("partition-leader", "offsets-coordinator", "any"))
        partition = self.rng.randrange(self.partitions) if self.partitions else 0
        any_one = self.rng.choice(cluster.broker_ids())
        pause_s = self.rng.uniform(0, 3)
        victim = any_one
        try:
            if which == "partition-leader" and self.topic:
                victim = cluster.wait_partition_leader(self.topic, partition)
            elif which == "offsets-coordinator":
                victim = cluster.group_coordinator(self.group)
        except AssertionError as exc:  # no agreement now: any broker will do
            self.say(f"  ({which} not known: {exc}; broker {any_one} instead)")
            which = "any"
        cluster.kill_broker(victim)
        time.sleep(pause_s)
        cluster.restart_broker(victim)
        if self.topic:
            for p in range(self.partitions):
                cluster.wait_partition_leader(self.topic, p)
        return f"broker {victim} ({which}) killed -9, restarted after {pause_s:.1f} s"

    # -- clocks ------------------------------------------------------------------------------
    def _daemon_clock_jump(self) -> str:
        """A daemon's wall clock (``time.time()``, through
        :class:`tests.support.clock_shift.WallClock`) jumps an hour ahead, two
        hours back or a day ahead for 2-10 s, then back to the true time;
        the run's log keeps the window, so the checker reads that daemon's
        log times back in true time (:func:`tests.faults.checker.unshift`)."""
        if not self.clocks:
            raise AssertionError("daemon-clock-jump needs the daemons started through clock_shift (Faults(clocks=...))")
        daemon = self._daemon()
        offset_s = self.rng.choice((3600.0, -7200.0, 86400.0))
        hold_s = self.rng.uniform(2, 10)
        clock = self.clocks[daemon.node_id]
        started = time.time()
        clock.jump(offset_s)
        try:
            time.sleep(hold_s)
        finally:
            clock.reset()
            # the launcher re-reads its file every 20 ms: a margin before the window is closed
            time.sleep(0.2)
            self.log.write("clock-shift", node=daemon.node_id, offset_s=offset_s, real_from=started,
                           real_to=time.time())
        return f"daemon {daemon.node_id}'s wall clock {offset_s:+.0f} s for {hold_s:.1f} s, then true again"

    # -- consumers -------------------------------------------------------------------------
    def _consumer_kill_9(self) -> str:
        index = self.rng.randrange(self.pool.count)
        self.pool.kill(index)
        pause_s = self.rng.uniform(0, 3)
        time.sleep(pause_s)
        self.pool.start(index)
        return f"consumer c{index} killed, restarted after {pause_s:.1f} s"

    def _consumer_sigstop(self) -> str:
        """Freeze a consumer until the group rebalanced without it (its
        session expired), then let it go on: whatever it commits with its old
        generation must be refused."""
        index = self.rng.randrange(self.pool.count)
        before = wait_for(self.stored_generation, LIVENESS_S, "the group's stored state")
        proc = self.pool.procs[index]
        proc.send_signal(signal.SIGSTOP)

        def without_it():  # member ids start with the client id, c<index>-
            now = self.stored_generation() or before
            return now[0] > before[0] and not any(m.startswith(f"c{index}-") for m in now[2])

        try:
            wait_for(without_it, LIVENESS_S, f"the group rebalanced without the stopped consumer c{index}", 0.2)
        finally:
            proc.send_signal(signal.SIGCONT)
        return f"consumer c{index} stopped until generation {before[0]} was replaced, continued"


def seed_from_env() -> int:
    value = os.environ.get("ZKCOORD_FAULT_SEED")
    return int(value, 0) if value else random.SystemRandom().randrange(1 << 32)


def faults_from_env(default: int) -> int:
    return int(os.environ.get("ZKCOORD_FAULTS", default))


# -- sessions of any process -------------------------------------------------------------------

def _socket_inodes(pid: int) -> set[str]:
    found = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                found.add(target[8:-1])
    except OSError:
        pass
    return found


def local_ports_to(pid: int, remote_port: int) -> set[int]:
    """Local ports of ``pid``'s TCP connections to ``remote_port`` (from /proc)."""
    inodes, ports = _socket_inodes(pid), set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == remote_port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def zookeeper_ports(connect: str) -> list[int]:
    """The ports of a connect string (``127.0.0.1:2181,127.0.0.1:2182/chroot``).

    >>> zookeeper_ports("127.0.0.1:2181,127.0.0.1:2182/faults/x"), zookeeper_ports("127.0.0.1:2181")
    ([2181, 2182], [2181])"""
    hosts = connect.split("/", 1)[0]
    return [int(host.rsplit(":", 1)[1]) for host in hosts.split(",") if host]


def sessions_of(pid: int, zk_ports) -> list[int]:
    """ZooKeeper session ids of ``pid``'s connections, matched by client port
    in the ``cons`` listing (``/127.0.0.1:40512[1](...,sid=0x1...,...)``) of
    the server it is connected to. ``zk_ports``: one server's port, or every
    port of an ensemble (a client is connected to one of them)."""
    from zkcoord.local.sandbox import zk_four_letter

    sessions = []
    for zk_port in [zk_ports] if isinstance(zk_ports, int) else zk_ports:
        ports = local_ports_to(pid, zk_port)
        if not ports:
            continue
        for line in zk_four_letter(zk_port, "cons").splitlines():
            line = line.strip()
            if not line.startswith("/") or "sid=" not in line:
                continue
            port = int(line[1:].split("[", 1)[0].rsplit(":", 1)[1])
            if port in ports:
                sessions.append(int(line.split("sid=", 1)[1].split(",", 1)[0].rstrip(")"), 16))
    return sessions


def replicas(bootstrap: str) -> int:
    """The replication factor of a fault test's topics: every broker up to 3
    (the sandbox's ``min.insync.replicas`` is that minus one: a topic of
    fewer replicas would refuse ``acks=all``).

    >>> replicas("127.0.0.1:1"), replicas("127.0.0.1:1,127.0.0.1:2,127.0.0.1:3")
    (1, 3)"""
    return min(3, len([b for b in bootstrap.split(",") if b]))


def restart_zookeeper(sandbox: Sandbox, kill: bool = False) -> list[str]:
    """Stop (SIGTERM, or kill -9) every ZooKeeper server of the sandbox - the
    one, or each member of an ensemble - then start them all again, waiting
    until they serve. The names."""
    state = sandbox.load()
    names = [z.name for z in state.zookeepers] if state is not None else ["zookeeper"]
    for name in names:
        sandbox.stop_server(name, kill=kill)
    for name in names:
        sandbox.start_zookeeper(name)
    return names
