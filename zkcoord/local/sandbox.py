"""The local sandbox: a real ZooKeeper 3.8 (one server, or an ensemble of 3
or 5) and 1-3 Kafka 3.9 brokers in ZooKeeper mode, as processes on loopback.

Owns the sandbox's state directory::

    <state-dir>/sandbox.json      pids, ports and directories of every server
    <state-dir>/zookeeper/        zoo.cfg, data/, logback.xml
    <state-dir>/zookeeper-<id>/   the same for each member of an ensemble (``up(zookeepers=3)``),
                                  data/myid holding <id> (zkcoord.local.ensemble)
    <state-dir>/kafka-<id>/       server.properties, data/, log4j.properties
    <state-dir>/kafka4/           the Kafka 4.x KRaft node of ``up(kafka4=True)`` (zkcoord.local.kraft)
    <state-dir>/spark-worker-<i>/ a Spark worker's work directory (``up(spark_workers=N)``,
                                  zkcoord.local.spark_cluster)
    <state-dir>/logs/<server>.log each server's output (and the demo's Java consumer's)
    <state-dir>/tools-log4j.properties  the logging of Kafka's tools run by hand
                                  (ZKCOORD_TOOLS_LOG4J: warnings and errors on stderr)
    <state-dir>/tools-log4j2.xml  the same for Kafka 4.x's tools (ZKCOORD_TOOLS_LOG4J2)

``up`` starts what is not running (and only that), waits until ZooKeeper
answers ``ruok`` (an ensemble: until every member serves, as leader or
follower, ``srvr``), each broker answers a metadata request and each zkcoord
daemon's ``/health`` answers 200, and records the result. Every port is
picked once, when its server is first added, and kept in ``sandbox.json``:
a server started again gets the same one. ``up`` ``down`` stops by pid (checking the pid is still ours) and removes
the state directory. Fault tests use :meth:`Sandbox.stop_server` /
:meth:`Sandbox.start_server` to kill and restart single servers.

``up(zookeepers=3)`` makes a ZooKeeper ensemble: ``zookeeper-1`` ..
``zookeeper-3``, each with its client, quorum and election ports on
loopback; every client of the sandbox (brokers, daemons, ``local env``) is
given the connect string of all of them (:meth:`Sandbox.zookeeper_address`).
:meth:`Sandbox.start_zookeeper` starts one member alone (the fault tests
lose a quorum and bring it back a server at a time). A sandbox keeps its
number of ZooKeeper servers and brokers until ``down``.

``up(secure=True)`` makes a secure sandbox (:mod:`zkcoord.local.secure`):
SASL_SSL brokers and daemons, ZooKeeper with SASL and ACLs, Kafka's users
and ACLs. A sandbox stays what it was made: plain or secure.

``up(kafka4=True)`` adds the reference peer, one Apache Kafka 4.x node in
KRaft mode (:mod:`zkcoord.local.kraft`), plain sandboxes only; once added it
is one of the sandbox's servers until ``down``. :meth:`Sandbox.configure_kafka4`
changes its broker settings and restarts it.

``up(spark_workers=N)`` adds a Spark standalone cluster, a master and N
workers of the installed pyspark's distribution
(:mod:`zkcoord.local.spark_cluster`), for ``migrate run-job --spark-master``.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from zkcoord.errors import SandboxError, ServiceUnavailableError, UsageError
from zkcoord.local import config_files, ensemble, jars, kraft, procs, secure, spark_cluster

MAX_BROKERS = 3
MAX_DAEMONS = 5
START_TIMEOUT_S = 120.0


def default_state_dir() -> Path:
    explicit = os.environ.get("ZKCOORD_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or "~/.local/state"
    return Path(base).expanduser() / "zkcoord" / "sandbox"


@dataclass
class Server:
    name: str  # "zookeeper", "zookeeper-<myid>" (an ensemble's), "kafka-<broker id>" or "zkcoord-<node id>"
    port: int
    pid: int | None = None
    gateway_port: int | None = None  # daemons: the gateway's own port; brokers 0..2 follow it
    metrics_port: int | None = None  # daemons: --metrics-listen, serving /metrics and /health
    controller_port: int | None = None  # the Kafka 4.x KRaft node: its CONTROLLER listener
    # daemons: `zkcoord run --workers`; worker k has port + k, metrics_port + k and, after the gateway's broker
    # ports, a gateway port of its own (zkcoord.core.workers). 1: one process (sandboxes made before workers).
    workers: int = 1
    ui_port: int | None = None  # a Spark master or worker: its web UI
    quorum_port: int | None = None  # a member of a ZooKeeper ensemble: followers connect to the leader here
    election_port: int | None = None  # and: the leader election's port

    @property
    def ports(self) -> set[int]:
        """Every port this server listens on (a gateway's broker ports and its workers' own ports too)."""
        own = self.workers if self.workers > 1 else 0
        gateway = range(self.gateway_port, self.gateway_port + 1 + MAX_BROKERS + own) if self.gateway_port else ()
        metrics = range(self.metrics_port, self.metrics_port + 1 + own) if self.metrics_port else ()
        extra = [port for port in (self.controller_port, self.ui_port, self.quorum_port, self.election_port) if port]
        return {*range(self.port, self.port + 1 + own), *gateway, *metrics, *extra}

    @property
    def node_id(self) -> int | None:
        return int(self.name.split("-", 1)[1]) if self.name.startswith("zkcoord-") else None

    @property
    def metrics_url(self) -> str | None:
        """The base URL of a daemon's /metrics and /health."""
        return f"http://127.0.0.1:{self.metrics_port}" if self.metrics_port else None

    @property
    def broker_id(self) -> int | None:
        return int(self.name.split("-", 1)[1]) if self.name.startswith("kafka-") else None

    @property
    def myid(self) -> int | None:
        """A ZooKeeper ensemble member's id (None for a standalone ZooKeeper and any other server)."""
        return ensemble.myid(self.name)


@dataclass
class ServerStatus:
    name: str
    address: str
    pid: int | None
    # "up", "down", "unresponsive"; a daemon's metrics endpoint also "not ready" (/health 503); a member
    # of a ZooKeeper ensemble also "no quorum" (it runs and answers, but serves no clients)
    state: str
    log_file: str


@dataclass
class SandboxState:
    zookeeper: Server  # the standalone "zookeeper", or "zookeeper-1" of an ensemble
    brokers: list[Server] = field(default_factory=list)
    started_at: float = 0.0
    daemons: list[Server] = field(default_factory=list)  # "zkcoord-<node id>"
    secure: bool = False  # zkcoord.local.secure
    admin_made: bool = False  # secure: the brokers' own SCRAM user exists
    users_made: bool = False  # secure: alice, bob and the ACLs exist
    kafka4: Server | None = None  # "kafka4": the Kafka 4.x KRaft node (zkcoord.local.kraft)
    kafka4_settings: dict[str, str] = field(default_factory=dict)  # its broker settings given by the user
    spark_master: Server | None = None  # "spark-master" (zkcoord.local.spark_cluster)
    spark_workers: list[Server] = field(default_factory=list)  # "spark-worker-<i>"
    zookeeper_peers: list[Server] = field(default_factory=list)  # an ensemble's "zookeeper-2".. (empty: standalone)

    @property
    def zookeepers(self) -> list[Server]:
        """Every ZooKeeper server, in myid order."""
        return [self.zookeeper, *self.zookeeper_peers]

    def ensemble_peers(self) -> list[ensemble.Peer]:
        """The members as each one's zoo.cfg names them; [] for a standalone server."""
        if not self.zookeeper_peers:
            return []
        return [ensemble.Peer(z.myid, z.quorum_port, z.election_port) for z in self.zookeepers]

    @property
    def servers(self) -> list[Server]:
        return [*self.zookeepers, *self.brokers, *([self.kafka4] if self.kafka4 else []), *self.daemons,
                *([self.spark_master] if self.spark_master else []), *self.spark_workers]

    def ports(self) -> frozenset[int]:
        """The ports promised to the servers, running or not."""
        return frozenset().union(*(server.ports for server in self.servers))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> "SandboxState":
        raw = json.loads(text)
        kafka4, spark_master = raw.get("kafka4"), raw.get("spark_master")
        return cls(Server(**raw["zookeeper"]), [Server(**b) for b in raw["brokers"]], raw["started_at"],
                   [Server(**d) for d in raw.get("daemons", [])], raw.get("secure", False),
                   raw.get("admin_made", False), raw.get("users_made", False),
                   Server(**kafka4) if kafka4 else None, dict(raw.get("kafka4_settings", {})),
                   Server(**spark_master) if spark_master else None,
                   [Server(**w) for w in raw.get("spark_workers", [])],
                   [Server(**z) for z in raw.get("zookeeper_peers", [])])


def zk_four_letter(port: int, word: str = "ruok", timeout_s: float = 2.0, host: str = "127.0.0.1") -> str:
    """Send a ZooKeeper four-letter word; '' when nothing answers."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(word.encode())
            chunks = []
            while True:
                data = sock.recv(65536)
                if not data:
                    break
                chunks.append(data)
            return b"".join(chunks).decode(errors="replace")
    except OSError:
        return ""


def zookeeper_mode(port: int, timeout_s: float = 2.0) -> str | None:
    """A ZooKeeper server's role by ``srvr``: leader, follower or standalone;
    None while it serves no clients (an ensemble member without a quorum) or
    does not answer."""
    return ensemble.mode(zk_four_letter(port, "srvr", timeout_s))


def broker_answers_metadata(port: int, expected_brokers: int, timeout_s: float = 5.0, security=None) -> bool:
    """True when the broker on ``port`` answers a metadata request listing
    ``expected_brokers`` live brokers (logged in with ``security``, a
    KafkaClientSecurity, on a secure sandbox)."""
    from kafka import KafkaAdminClient  # imported late: the CLI starts faster
    from kafka.errors import KafkaError

    from zkcoord.kafka.offsets import security_options

    try:
        admin = KafkaAdminClient(
            bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=int(timeout_s * 1000),
            client_id="zkcoord-sandbox-probe", **security_options(security),
        )
    except (KafkaError, OSError, ValueError):
        return False
    try:
        return len(admin.describe_cluster().get("brokers", [])) >= expected_brokers
    except (KafkaError, OSError, ValueError):
        return False
    finally:
        admin.close()


HEALTH_STATES = {200: "up", 503: "not ready"}  # a daemon's /health answer -> its status row


def daemon_ready(daemon: Server) -> bool:
    """The daemon and its gateway accept connections and its /health says ready."""
    return (procs.port_open(daemon.port)
            and (daemon.gateway_port is None or procs.port_open(daemon.gateway_port))
            and (daemon.metrics_url is None or procs.http_status(f"{daemon.metrics_url}/health") == 200))


class Sandbox:
    """A sandbox rooted at ``state_dir``; no I/O until a method is called."""

    def __init__(self, state_dir: Path | None = None, log=lambda msg: None):
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.log = log

    # -- state file ------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.state_dir / "sandbox.json"

    def load(self) -> SandboxState | None:
        try:
            return SandboxState.from_json(self.state_file.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as exc:
            raise SandboxError(
                f"{self.state_file} is corrupt ({exc}); stop any servers left by hand and delete {self.state_dir}."
            ) from exc

    def _save(self, state: SandboxState) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.state_file)

    @contextmanager
    def _locked(self):
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    # -- addresses -------------------------------------------------------
    @staticmethod
    def zookeeper_address(state: SandboxState) -> str:
        """The connect string of every ZooKeeper server (one, or the whole ensemble)."""
        return ensemble.connect_string([z.port for z in state.zookeepers])

    @staticmethod
    def bootstrap_servers(state: SandboxState) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in state.brokers)

    def log_file(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    @property
    def tools_log4j(self) -> Path:
        """The log4j configuration of Kafka's tools run against the sandbox
        (``java -Dlog4j.configuration=file:...``), as Kafka's scripts give them."""
        return self.state_dir / "tools-log4j.properties"

    def write_tools_log4j(self) -> Path:
        self.tools_log4j.write_text(config_files.TOOLS_LOG4J_PROPERTIES)
        return self.tools_log4j

    @property
    def tools_log4j2(self) -> Path:
        """The same for Kafka 4.x's tools, which log with log4j2
        (``java -Dlog4j2.configurationFile=file:...``)."""
        return self.state_dir / "tools-log4j2.xml"

    def write_tools_log4j2(self) -> Path:
        self.tools_log4j2.write_text(config_files.TOOLS_LOG4J2_XML)
        return self.tools_log4j2

    def _marker(self, name: str) -> str:
        return f"-Dzkcoord.sandbox={self.state_dir / name}"

    def _match(self, name: str) -> str:
        """What a server's command line holds, JVM (-D) or Python (-X)."""
        return f"zkcoord.sandbox={self.state_dir / name}"

    # -- lifecycle -------------------------------------------------------
    def up(self, brokers: int | None = None, daemons: int = 0, secure: bool = False, kafka4: bool = False,
           kafka4_settings: Mapping[str, str | None] | None = None,
           workers: int = 0, spark_workers: int = 0,
           zookeepers: int | None = None) -> tuple[SandboxState, list[str]]:
        """Start whatever is not running. Returns the state and the names of
        the servers started by this call (empty: it was already up).
        ``brokers`` (1 to 3) and ``zookeepers`` (1, 3 or 5: one server or an
        ensemble) are a new sandbox's (None: 1); an existing sandbox keeps
        its own, and a different number is a UsageError.
        ``daemons`` zkcoord coordinator daemons are added to the servers;
        ``secure`` makes a new sandbox secure (an existing one stays as it is);
        ``kafka4`` adds the Kafka 4.x KRaft node, ``kafka4_settings`` (implying
        it) changes its broker settings (None removes one; see
        :mod:`zkcoord.local.kraft`) and restarts it when they changed.
        ``workers``: each new daemon's ``--workers`` (0: one per core, at
        least 2, so the sandbox shows workers on any machine); daemons
        already recorded keep theirs. ``spark_workers`` adds a Spark master
        and workers up to that many (:mod:`zkcoord.local.spark_cluster`)."""
        if brokers is not None and not 1 <= brokers <= MAX_BROKERS:
            raise UsageError(f"--brokers {brokers}: the sandbox runs 1 to {MAX_BROKERS} brokers.")
        if not 0 <= daemons <= MAX_DAEMONS:
            raise UsageError(f"--daemons {daemons}: the sandbox runs 0 to {MAX_DAEMONS} zkcoord daemons.")
        if zookeepers is not None:
            ensemble.check_size(zookeepers)
        if not 0 <= spark_workers <= spark_cluster.MAX_WORKERS:
            raise UsageError(f"--spark-workers {spark_workers}: the sandbox runs 0 to {spark_cluster.MAX_WORKERS} "
                             "Spark workers.")
        changes = kraft.check_settings(kafka4_settings or {})
        kafka4 = kafka4 or bool(changes)
        if kafka4 and secure:
            raise UsageError(kraft.NOT_SECURE)
        if kafka4:
            jars.kafka4_distribution(self.log)  # also checks java's version; fetched before anything starts
        jars.find_java()
        with self._locked():
            state = self.load()
            if state is None:
                state = self._fresh_state(brokers or 1, zookeepers or 1)
                state.secure = secure
            elif brokers is not None and len(state.brokers) != brokers:
                raise UsageError(
                    f"The sandbox in {self.state_dir} runs {len(state.brokers)} broker(s), not {brokers}; "
                    "run `zkcoord local down` first to change --brokers."
                )
            elif zookeepers is not None and len(state.zookeepers) != zookeepers:
                ensemble.check_same(self.state_dir, len(state.zookeepers), zookeepers)
            elif secure and not state.secure:
                raise UsageError(f"The sandbox in {self.state_dir} is not secure; run `zkcoord local down` "
                                 "first, then `zkcoord local up --secure`.")
            if kafka4 and state.secure:
                raise UsageError(kraft.NOT_SECURE)
            previous = dict(state.kafka4_settings)
            if kafka4:
                kraft.apply_settings(self, state, changes)
            count = workers if workers > 0 else max(2, os.cpu_count() or 1)
            own = count if count > 1 else 0
            for node_id in range(len(state.daemons) + 1, daemons + 1):
                daemon = Server(f"zkcoord-{node_id}", procs.free_port_range(1 + own, avoid=state.ports()),
                                workers=count)
                state.daemons.append(daemon)
                daemon.gateway_port = procs.free_port_range(1 + MAX_BROKERS + own, avoid=state.ports())
                daemon.metrics_port = procs.free_port_range(1 + own, avoid=state.ports())
            spark_cluster.add_workers(state, spark_workers)
            self.write_tools_log4j()
            with kraft.settings_restored_on_failure(self, state, previous):
                started = self._start_missing(state)
            return state, started

    def configure_kafka4(self, changes: Mapping[str, str | None], replace: bool = False) -> bool:
        """Change the Kafka 4.x node's broker settings (None removes one;
        ``replace``: drop every setting not in ``changes``) and restart it
        with them, waiting until it answers. True when they changed (it was
        restarted); False when they were already so (nothing done)."""
        changes = kraft.check_settings(changes)
        with self._locked():
            state = self._require_state()
            if state.kafka4 is None:
                raise SandboxError(f"The sandbox in {self.state_dir} has no Kafka 4.x node; "
                                   "run `zkcoord local up --kafka4` first.")
            previous = dict(state.kafka4_settings)
            if replace:
                changes = {**{key: None for key in previous}, **changes}
            changed = kraft.apply_settings(self, state, changes)
            with kraft.settings_restored_on_failure(self, state, previous):
                self._start_missing(state)
            return changed

    def _fresh_state(self, brokers: int, zookeepers: int = 1) -> SandboxState:
        for sub in ["logs", "secure", "clients", kraft.NAME, *ensemble.server_names(1),
                    *ensemble.server_names(ensemble.MAX_SERVERS), *(f"kafka-{i}" for i in range(MAX_BROKERS))]:
            shutil.rmtree(self.state_dir / sub, ignore_errors=True)
        names = ensemble.server_names(zookeepers)
        state = SandboxState(zookeeper=Server(names[0], procs.free_port()), started_at=time.time())
        state.zookeeper_peers = [Server(name, procs.free_port(avoid=state.ports())) for name in names[1:]]
        if state.zookeeper_peers:
            for server in state.zookeepers:
                server.quorum_port = procs.free_port(avoid=state.ports())
                server.election_port = procs.free_port(avoid=state.ports())
        for i in range(brokers):
            state.brokers.append(Server(f"kafka-{i}", procs.free_port(avoid=state.ports())))
        return state

    def _start_missing(self, state: SandboxState) -> list[str]:
        started: list[str] = []
        material = secure.prepare(self.state_dir, self.log) if state.secure else None
        try:
            for server in state.zookeepers:
                if not procs.alive(server.pid, self._match(server.name)):
                    self._start_zookeeper(state, server)
                    started.append(server.name)
            self._save(state)
            self._wait_zookeeper(state)
            if material is not None and not state.admin_made:
                secure.create_admin(material, self.zookeeper_address(state), self.log)
                state.admin_made = True
                self._save(state)
            for broker in state.brokers:
                if not procs.alive(broker.pid, self._match(broker.name)):
                    self._start_broker(state, broker)
                    started.append(broker.name)
            if state.kafka4 is not None and not procs.alive(state.kafka4.pid, self._match(kraft.NAME)):
                kraft.start(self, state)
                started.append(kraft.NAME)
            started += spark_cluster.start_missing(self, state)
            self._save(state)
            for broker in state.brokers:
                self._wait_broker(state, broker)
            if state.kafka4 is not None:
                kraft.wait_ready(self, state)
            spark_cluster.wait_ready(self, state)
            if material is not None and not state.users_made:
                secure.create_users_and_acls(material, self.bootstrap_servers(state), self.log)
                state.users_made = True
                self._save(state)
            for daemon in state.daemons:
                if not procs.alive(daemon.pid, self._match(daemon.name)):
                    self._start_daemon(state, daemon)
                    started.append(daemon.name)
            self._save(state)
            for daemon in state.daemons:
                self._wait(daemon, lambda d=daemon: daemon_ready(d),
                           "accept connections and answer /health with 200")
        except BaseException:
            for name in reversed(started):
                server = next(s for s in state.servers if s.name == name)
                procs.stop(server.pid, self._match(name), grace_s=10)
                server.pid = None
            if self.state_file.exists():
                self._save(state)
            raise
        self._save(state)
        return started

    def _java(self, name: str, heap, classpath: str, main: str, *args: str, props=()) -> int:
        cmd = [jars.find_java(), *heap, *config_files.JVM_COMMON, self._marker(name), *props,
               "-cp", classpath, main, *args]
        return procs.spawn(cmd, self.log_file(name), cwd=self.state_dir)

    def _start_zookeeper(self, state: SandboxState, server: Server) -> None:
        """One ZooKeeper server: standalone (``ZooKeeperServerMain``) or a
        member of the ensemble (``QuorumPeerMain``, its ``myid`` in its data
        directory)."""
        dist = jars.zookeeper_distribution(self.log)
        home = self.state_dir / server.name
        (home / "data").mkdir(parents=True, exist_ok=True)
        peers = state.ensemble_peers()
        if peers:
            (home / "data" / "myid").write_text(f"{server.myid}\n")
        (home / "zoo.cfg").write_text(
            config_files.zoo_cfg(home / "data", server.port, sasl=state.secure, peers=peers))
        (home / "logback.xml").write_text(config_files.LOGBACK_XML)
        if peers:
            self.log(f"starting ZooKeeper {dist.version} server {server.myid} of {len(peers)} on "
                     f"127.0.0.1:{server.port} (quorum {server.quorum_port}, election {server.election_port})")
        else:
            self.log(f"starting ZooKeeper {dist.version} on 127.0.0.1:{server.port}")
        main = ("org.apache.zookeeper.server.quorum.QuorumPeerMain" if peers
                else "org.apache.zookeeper.server.ZooKeeperServerMain")
        server.pid = self._java(
            server.name, config_files.ZOOKEEPER_HEAP, dist.classpath, main, str(home / "zoo.cfg"),
            props=(f"-Dlogback.configurationFile={home / 'logback.xml'}",
                   "-Dzookeeper.admin.enableServer=false", *self._secure_props(state, secure.zookeeper_jvm_props)),
        )

    def _material(self, state: SandboxState):
        return secure.load(self.state_dir) if state.secure else None

    def _secure_props(self, state: SandboxState, props) -> tuple[str, ...]:
        material = self._material(state)
        return () if material is None else props(material)

    def _wait_registration_gone(self, state: SandboxState, server: Server) -> None:
        """A broker or daemon killed with -9 leaves its ephemeral registration
        (``/brokers/ids/<id>``, ``/zkcoord/nodes/<id>``) until its ZooKeeper
        session times out; a new one with that id would fail to register, so
        wait for it to go."""
        from zkcoord.zk.nodes import wait_node_unregistered
        from zkcoord.zk.topics import wait_broker_unregistered

        material = self._material(state)
        login = None if material is None else secure.zookeeper_security(material)
        try:
            if server.broker_id is not None:
                wait_broker_unregistered(self.zookeeper_address(state), server.broker_id, security=login)
            else:
                wait_node_unregistered(self.zookeeper_address(state), server.node_id, security=login)
        except ServiceUnavailableError as exc:
            raise SandboxError(f"cannot reach the sandbox ZooKeeper at {self.zookeeper_address(state)}: {exc}")

    def _start_daemon(self, state: SandboxState, daemon: Server) -> None:
        """A ``zkcoord run`` daemon; ``-X`` carries the pid marker (Python
        keeps unknown -X options without acting on them)."""
        self._wait_registration_gone(state, daemon)
        if daemon.metrics_port is None:  # recorded by a zkcoord that gave daemons none
            daemon.metrics_port = procs.free_port(avoid=state.ports())
        node_id = str(daemon.node_id)
        cmd = [sys.executable, "-X", self._match(daemon.name), "-m", "zkcoord", "run",
               "--zookeeper", self.zookeeper_address(state), "--node-id", node_id,
               "--bootstrap-servers", self.bootstrap_servers(state),
               "--metrics-listen", f"127.0.0.1:{daemon.metrics_port}", "--workers", str(daemon.workers)]
        if daemon.gateway_port is not None:
            cmd += ["--gateway-broker-ids", f"0-{MAX_BROKERS - 1}"]
        material = self._material(state)
        environment = None
        if material is None:
            cmd += ["--listen", f"127.0.0.1:{daemon.port}"]
            if daemon.gateway_port is not None:
                cmd += ["--gateway-listen", f"127.0.0.1:{daemon.gateway_port}"]
        else:
            flags, environment = secure.daemon_flags(material, daemon.port, daemon.gateway_port)
            cmd += flags
        self.log(f"starting zkcoord daemon {node_id} ({daemon.workers} worker{'s' * (daemon.workers > 1)}) "
                 f"on 127.0.0.1:{daemon.port}"
                 + (f", gateway on 127.0.0.1:{daemon.gateway_port}" if daemon.gateway_port else "")
                 + f", metrics on {daemon.metrics_url}")
        daemon.pid = procs.spawn(cmd, self.log_file(daemon.name), cwd=self.state_dir, env=environment)

    @staticmethod
    def kafka4_bootstrap_servers(state: SandboxState) -> str:
        """The Kafka 4.x node's address ('' without one)."""
        return kraft.bootstrap_servers(state)

    @staticmethod
    def daemon_addresses(state: SandboxState) -> str:
        return ",".join(f"127.0.0.1:{d.port}" for d in state.daemons)

    @staticmethod
    def gateway_addresses(state: SandboxState) -> str:
        """The daemons' gateways, a bootstrap.servers value for stock Kafka clients."""
        return ",".join(f"127.0.0.1:{d.gateway_port}" for d in state.daemons if d.gateway_port)

    def secure_environment(self, state: SandboxState) -> dict[str, str]:
        """A secure sandbox's exports (`zkcoord local env`); {} for a plain one."""
        material = self._material(state)
        return {} if material is None else secure.environment(material)

    @staticmethod
    def metrics_urls(state: SandboxState) -> str:
        """The daemons' /metrics and /health base URLs, in node-id order."""
        daemons = sorted(state.daemons, key=lambda d: d.node_id)
        return ",".join(d.metrics_url for d in daemons if d.metrics_url)

    def _start_broker(self, state: SandboxState, broker: Server) -> None:
        self._wait_registration_gone(state, broker)
        dist = jars.kafka_distribution(self.log)
        home = self.state_dir / broker.name
        (home / "data").mkdir(parents=True, exist_ok=True)
        properties = config_files.server_properties(
            broker.broker_id, broker.port, self.zookeeper_address(state), home / "data", len(state.brokers))
        material = self._material(state)
        if material is not None:  # later keys win: the listeners become SASL_SSL
            properties += secure.broker_properties(material, broker.port)
        path = home / "server.properties"
        path.write_text(properties)
        path.chmod(0o600)  # a secure broker's holds its key store password
        (home / "log4j.properties").write_text(config_files.LOG4J_PROPERTIES)
        self.log(f"starting Kafka {dist.version} broker {broker.broker_id} on 127.0.0.1:{broker.port}")
        broker.pid = self._java(
            broker.name, config_files.KAFKA_HEAP, dist.classpath, "kafka.Kafka",
            str(home / "server.properties"),
            props=(f"-Dlog4j.configuration=file:{home / 'log4j.properties'}",
                   f"-Dkafka.logs.dir={self.state_dir / 'logs'}", *self._secure_props(state, secure.broker_jvm_props)),
        )

    def _wait(self, server: Server, ready, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if ready():
                return
            if not procs.alive(server.pid, self._match(server.name)):
                raise SandboxError(
                    f"{server.name} exited while starting; last lines of {self.log_file(server.name)}:\n"
                    f"{procs.tail(self.log_file(server.name))}"
                )
            time.sleep(0.25)
        raise SandboxError(
            f"{server.name} did not {what} within {START_TIMEOUT_S:.0f} s; last lines of "
            f"{self.log_file(server.name)}:\n{procs.tail(self.log_file(server.name))}"
        )

    def _wait_zookeeper(self, state: SandboxState) -> None:
        """A standalone server: until it answers ``ruok``. An ensemble: until
        every running member serves (``srvr``: leader or follower) when a
        quorum of them runs; else (a quorum lost on purpose) until each
        running member answers ``ruok``, serving or not."""
        if not state.zookeeper_peers:
            self._wait(state.zookeeper, lambda: zk_four_letter(state.zookeeper.port) == "imok", "answer ruok")
            return
        running = [z for z in state.zookeepers if procs.alive(z.pid, self._match(z.name))]
        if len(running) >= ensemble.quorum(len(state.zookeepers)):
            for server in running:
                self._wait(server, lambda z=server: zookeeper_mode(z.port) in ensemble.SERVING_MODES,
                           "serve as leader or follower (srvr)")
        else:
            for server in running:
                self._wait(server, lambda z=server: zk_four_letter(z.port) == "imok", "answer ruok")

    def _wait_broker(self, state: SandboxState, broker: Server) -> None:
        material = self._material(state)
        login = None if material is None else material.client_security("admin")
        self._wait(broker, lambda: broker_answers_metadata(broker.port, len(state.brokers), security=login),
                   "answer a metadata request")

    def status(self) -> list[ServerStatus]:
        state = self.load()
        if state is None:
            return []
        result = []
        for server in state.servers:
            name = server.name
            if not procs.alive(server.pid, self._match(server.name)):
                condition = "down"
            elif server.name == "zookeeper":
                condition = "up" if zk_four_letter(server.port) == "imok" else "unresponsive"
            elif server.myid is not None:  # an ensemble member: its role, or why it serves no clients
                role = zookeeper_mode(server.port)
                condition = "up" if role else "no quorum" if zk_four_letter(server.port) == "imok" else "unresponsive"
                name = f"{server.name} {role}" if role else name
            else:
                condition = "up" if procs.port_open(server.port) else "unresponsive"
            result.append(ServerStatus(name, f"127.0.0.1:{server.port}", server.pid,
                                       condition, str(self.log_file(server.name))))
            if server.gateway_port:
                gateway = "down" if condition == "down" else (
                    "up" if procs.port_open(server.gateway_port) else "unresponsive")
                result.append(ServerStatus(f"{server.name} gateway", f"127.0.0.1:{server.gateway_port}",
                                           server.pid, gateway, str(self.log_file(server.name))))
            if server.ui_port:
                ui = "down" if condition == "down" else (
                    "up" if procs.port_open(server.ui_port) else "unresponsive")
                result.append(ServerStatus(f"{server.name} ui", f"http://127.0.0.1:{server.ui_port}", server.pid,
                                           ui, str(self.log_file(server.name))))
            if server.metrics_url:
                metrics = "down" if condition == "down" else HEALTH_STATES.get(
                    procs.http_status(f"{server.metrics_url}/health"), "unresponsive")
                result.append(ServerStatus(f"{server.name} metrics", server.metrics_url,
                                           server.pid, metrics, str(self.log_file(server.name))))
        return result

    def down(self) -> list[str]:
        """Stop every server (brokers first) and remove the state directory."""
        with self._locked():
            state = self.load()
            stopped = []
            if state is not None:
                for server in [*reversed(spark_cluster.servers(state)), *state.daemons,
                               *([state.kafka4] if state.kafka4 else []), *reversed(state.brokers),
                               *reversed(state.zookeepers)]:
                    if procs.stop(server.pid, self._match(server.name), grace_s=30):
                        stopped.append(server.name)
            for child in self.state_dir.iterdir():
                if child.name != ".lock":
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
        shutil.rmtree(self.state_dir, ignore_errors=True)
        return stopped

    # -- single servers, for fault tests -----------------------------------
    def _server(self, state: SandboxState, name: str) -> Server:
        for server in state.servers:
            if server.name == name:
                return server
        raise UsageError(f"No server {name!r} in the sandbox; it has {[s.name for s in state.servers]}.")

    def stop_server(self, name: str, kill: bool = False) -> None:
        with self._locked():
            state = self._require_state()
            server = self._server(state, name)
            procs.stop(server.pid, self._match(name), grace_s=30, sig=signal.SIGKILL if kill else signal.SIGTERM)
            server.pid = None
            self._save(state)

    def start_server(self, name: str) -> None:
        with self._locked():
            state = self._require_state()
            self._server(state, name)
            self._start_missing(state)

    def restart_server(self, name: str, kill: bool = False) -> None:
        self.stop_server(name, kill=kill)
        self.start_server(name)

    def start_zookeeper(self, name: str) -> None:
        """Start one ZooKeeper server (``zookeeper-<id>`` of an ensemble, or
        the standalone ``zookeeper``) if it is not running, and nothing else:
        the fault tests bring a lost quorum back a server at a time, and
        :meth:`start_server` would start every server that is down. Waits as
        ``up`` does (:meth:`_wait_zookeeper`): until the running members serve
        when they make a quorum, else until each answers ``ruok``."""
        with self._locked():
            state = self._require_state()
            server = self._server(state, name)
            if not ensemble.is_zookeeper(name):
                raise UsageError(f"{name!r} is not a ZooKeeper server; the sandbox's are "
                                 f"{[z.name for z in state.zookeepers]}.")
            if not procs.alive(server.pid, self._match(name)):
                try:
                    self._start_zookeeper(state, server)
                    self._save(state)
                    self._wait_zookeeper(state)
                except BaseException:
                    procs.stop(server.pid, self._match(name), grace_s=10)
                    server.pid = None
                    self._save(state)
                    raise
            self._save(state)

    def _require_state(self) -> SandboxState:
        state = self.load()
        if state is None:
            raise SandboxError(f"No sandbox in {self.state_dir}; run `zkcoord local up` first.")
        return state
