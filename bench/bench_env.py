"""The benchmark's environment and its meters.

Owns what the benchmark starts (a ``zkcoord local`` sandbox in a state
directory of its own, a ZooKeeper chroot, the commit topic, one ``zkcoord
run`` daemon, optionally with its gateway) and how it reads the machine: CPU
time per process from ``/proc``, ZooKeeper's transaction and per-namespace
write counters from its four-letter words. ``Environment.stop()`` takes down
whatever ``start()`` got to, so the caller can always call it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from group_client import BenchError, KafkaConnection, served_versions
from load_procs import ConnectSpec
from zkcoord.local.procs import free_port, free_port_range
from zkcoord.local.sandbox import zk_four_letter

DAEMON_NODE_ID = 1


def process_cpu_s(pid: int | None) -> float:
    """CPU seconds (all threads) of a process and its live children (a
    ``zkcoord run --workers N``'s workers); 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return 0.0
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return own + sum(process_cpu_s(int(child)) for child in children)


def _machine_busy_s() -> float:
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / os.sysconf("SC_CLK_TCK")


@dataclass
class CpuSnapshot:
    wall: float
    client: float
    machine: float
    procs: dict[str, float]


def cpu_snapshot(pids: dict[str, int]) -> CpuSnapshot:
    return CpuSnapshot(time.perf_counter(), time.process_time(), _machine_busy_s(),
                       {name: process_cpu_s(pid) for name, pid in pids.items()})


def cpu_cores(a: CpuSnapshot, b: CpuSnapshot) -> dict[str, float]:
    """Cores used between two snapshots: per process, the client, the rest of the machine."""
    wall = max(b.wall - a.wall, 1e-9)
    used = {name: (b.procs[name] - a.procs[name]) / wall for name in a.procs}
    used["client"] = (b.client - a.client) / wall
    used["other"] = max(0.0, (b.machine - a.machine) / wall - sum(used.values()))
    return used


def zk_counters(port: int, namespace: str) -> tuple[int, int]:
    """(last zxid, znode writes under /<namespace>) from ZooKeeper's four-letter words."""
    counters = zk_write_counters(port, (namespace,))
    return counters.zxid, counters.writes


@dataclass(frozen=True)
class ZkWrites:
    """ZooKeeper's own counters: the last transaction id (``srvr``; a multi is
    one transaction), and, summed over top-level namespaces, the znode writes
    (creates, sets and deletes; each op of a multi counts) and the bytes of
    data they wrote (``mntr``'s ``zk_cnt_`` and ``zk_sum_<ns>_write_per_namespace``)."""
    zxid: int
    writes: int
    bytes: int
    fsyncs: int = 0  # the transaction log's fsyncs (``zk_cnt_fsynctime``) and their time in ms (``zk_sum_fsynctime``)
    fsync_ms: int = 0

    def __sub__(self, before: "ZkWrites") -> "ZkWrites":
        return ZkWrites(self.zxid - before.zxid, self.writes - before.writes, self.bytes - before.bytes,
                        self.fsyncs - before.fsyncs, self.fsync_ms - before.fsync_ms)


def zk_write_counters(port: int, namespaces: tuple[str, ...]) -> ZkWrites:
    """:class:`ZkWrites` now, for the znodes under ``/<namespace>`` for each of ``namespaces``."""
    zxid = re.search(r"Zxid: (0x[0-9a-f]+)", zk_four_letter(port, "srvr"))
    if zxid is None:
        raise BenchError(f"ZooKeeper on port {port} did not answer srvr")
    mntr = zk_four_letter(port, "mntr")
    writes = written = 0
    for namespace in namespaces:
        count = re.search(rf"zk_cnt_{re.escape(namespace)}_write_per_namespace\s+(\d+)", mntr)
        total = re.search(rf"zk_sum_{re.escape(namespace)}_write_per_namespace\s+(\d+)", mntr)
        writes += int(count.group(1)) if count else 0
        written += int(total.group(1)) if total else 0
    fsyncs = re.search(r"zk_cnt_fsynctime\s+(\d+)", mntr)
    fsync_ms = re.search(r"zk_sum_fsynctime\s+(\d+)", mntr)
    return ZkWrites(int(zxid.group(1), 16), writes, written, int(fsyncs.group(1)) if fsyncs else 0,
                    int(fsync_ms.group(1)) if fsync_ms else 0)


def _interrupt(*_) -> None:
    raise KeyboardInterrupt  # SIGTERM: clean up as for Ctrl-C


def bench_main(workdir: Path | None, prefix: str, run, stop) -> int:
    """A benchmark's ``main``: its working directory created (``workdir``, or
    a new ``/tmp/<prefix>*``; exit 2 naming it when it cannot be), then
    ``run(workdir)``'s exit code; a BenchError or ZkcoordError is one
    ``error:`` line (exit 1), Ctrl-C and SIGTERM exit 130; ``stop()``
    always runs last, whatever ``run`` got to."""
    import tempfile

    from zkcoord.errors import ZkcoordError

    workdir = workdir or Path(tempfile.mkdtemp(prefix=prefix))
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"error: --workdir {workdir}: {exc.strerror}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(workdir)
    except (BenchError, ZkcoordError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted; stopping everything", file=sys.stderr)
        return 130
    finally:
        stop()


def bad_key_values(values: list[str]) -> str | None:
    """The first of ``values`` that is not ``KEY=VALUE`` with a key, or None."""
    return next((v for v in values if "=" not in v or not v.split("=", 1)[0]), None)


def create_topics(bootstrap: str, names: list[str], partitions: int, security: dict | None = None) -> None:
    """Create ``names`` on the brokers, ``partitions`` each, replication 1, and
    wait until the metadata has them. ``security``: kafka-python's settings
    of a secure sandbox's brokers (:meth:`Environment.kafka_python_security`)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="zkcoord-bench", **(security or {}))
    try:
        admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1) for n in names],
                            wait_for_metadata=True)
    finally:
        admin.close()


def zkcoord_cli(*args: str, check: bool = True) -> str:
    """Run ``zkcoord ARGS`` and return its output. Interrupted, we pass SIGINT
    on and let it finish: ``local up`` then stops what it started (a SIGKILL
    would leave servers that ``local down`` does not know about)."""
    proc = subprocess.Popen([sys.executable, "-m", "zkcoord", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate()
    except BaseException:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
        raise
    if check and proc.returncode != 0:
        raise BenchError(f"zkcoord {' '.join(args)} failed ({proc.returncode}):\n{err or out}")
    return out


def sandbox_up(state_dir: Path, *up_args: str) -> dict[str, str]:
    """``zkcoord local up`` in a state directory that must hold no sandbox yet,
    then its ``local env`` as {variable: value}."""
    if (state_dir / "sandbox.json").exists():
        raise BenchError(f"{state_dir} already holds a sandbox; the benchmark starts its own")
    print(f"starting the sandbox in {state_dir} ...", flush=True)
    zkcoord_cli("local", "up", *up_args, "--state-dir", str(state_dir))
    return dict(re.findall(r"export (\w+)=(\S+)", zkcoord_cli("local", "env", "--state-dir", str(state_dir))))


def sandbox_state(state_dir: Path) -> dict:
    """The sandbox's ``sandbox.json`` (its servers, their names and pids)."""
    return json.loads((state_dir / "sandbox.json").read_text())


def sandbox_pids(state: dict) -> dict[str, int]:
    """The pids of its first broker (``kafka``), its ZooKeeper and, when it has one, its Kafka 4.x node."""
    pids = {"kafka": state["brokers"][0]["pid"], "zookeeper": state["zookeeper"]["pid"]}
    if state.get("kafka4"):
        pids["kafka4"] = state["kafka4"]["pid"]
    return pids


class Environment:
    """The sandbox, the bench chroot, the commit topic and the zkcoord daemon.

    ``start()`` brings them up; ``stop()`` always takes everything down that
    ``start()`` got to, and may be called after a partial start.

    With ``gateway`` the daemon also runs its gateway (``--bootstrap-servers``
    the sandbox broker, ``--gateway-listen 127.0.0.1:0``: the kernel picks its
    ports); ``gateway_address`` is then where the daemon's registration says
    stock clients reach it, and it answered ApiVersions there.

    ``sandbox_args`` go to ``zkcoord local up`` (``--kafka4`` adds the Kafka
    4.x KRaft node: ``kafka4_address``, process ``kafka4``). With
    ``broker_chroot`` the daemon shares the brokers' ZooKeeper root instead
    of a chroot of its own, as a production daemon beside ZooKeeper-mode
    brokers does: it then learns topics from ``/brokers/topics``, and its
    writes are those under ``namespaces`` (``/coordinators``, ``/zkcoord``,
    ``/consumers``). ``topic`` None creates no topic. ``keep_sandbox_logs``
    copies the servers' logs to ``<workdir>/sandbox-logs`` before the
    sandbox (and its state directory) goes.

    With ``secure`` the sandbox is a secure one (``local up --secure``: its
    broker listens SASL_SSL with SCRAM-SHA-512 and Kafka's AclAuthorizer)
    and the daemon is started as the sandbox starts its own (SASL_SSL
    listener and gateway, SCRAM logins checked against ZooKeeper, the same
    ACLs); ``connect`` is then the clients' TLS context and login (the
    sandbox's ``admin`` user) for both. The daemon then shares the brokers'
    ZooKeeper root (``broker_chroot``): it reads the SCRAM credentials and
    ACLs where the brokers keep them.
    """

    def __init__(self, workdir: Path, *, topic: str | None, topic_partitions: int, profiler: str = "",
                 daemon_args: tuple[str, ...] = (), gateway: bool = False, sandbox_args: tuple[str, ...] = (),
                 broker_chroot: bool = False, keep_sandbox_logs: bool = False, workers: int = 1,
                 secure: bool = False) -> None:
        self.workdir = workdir
        self.secure = secure
        self.material = None  # zkcoord.local.secure.SecureMaterial, once a secure sandbox is up
        self.connect: dict = {}  # KafkaConnection.open's ssl_context and login, on a secure sandbox
        self.connect_spec = ConnectSpec()  # the same, for a load process to make its own (load_procs.py)
        self.workers = workers  # the daemon's --workers: its listener P, worker k's own port P + k
        self.topic, self.topic_partitions = topic, topic_partitions
        self.profiler = profiler  # "", "cprofile", "pyinstrument" or "py-spy" (attached per load run, not here)
        self.daemon_args = daemon_args  # extra `zkcoord run` flags
        self.gateway = gateway
        self.sandbox_args = (*sandbox_args, "--secure") if secure else sandbox_args
        self.state_dir = workdir / "sandbox"
        self.namespace = f"zkcoord-bench-{os.getpid()}"
        broker_chroot = broker_chroot or secure  # SCRAM credentials and ACLs are read where the brokers keep them
        self.chroot = "" if broker_chroot else "/" + self.namespace
        self.namespaces = ("coordinators", "zkcoord", "consumers") if broker_chroot else (self.namespace,)
        self.kafka4_address: tuple[str, int] | None = None
        self.keep_sandbox_logs = keep_sandbox_logs  # copied to <workdir>/sandbox-logs before `local down`
        self.profile_path = {"": None, "cprofile": workdir / "zkcoord.prof", "py-spy": None,
                             "pyinstrument": workdir / "zkcoord-profile.txt"}[profiler]
        self.daemon: subprocess.Popen | None = None
        self.daemon_address: tuple[str, int] | None = None
        self.gateway_address: tuple[str, int] | None = None  # with ``gateway``, once started
        self.zk_port = 0
        self.kafka_address: tuple[str, int] | None = None
        self.pids: dict[str, int] = {}
        self._zk = None
        self._sandbox_started = False

    def _cli(self, *args: str, check: bool = True) -> str:
        return zkcoord_cli(*args, check=check)

    def start(self) -> None:
        if (self.state_dir / "sandbox.json").exists():
            raise BenchError(f"{self.state_dir} already holds a sandbox; the benchmark starts its own")
        self._sandbox_started = True
        env = sandbox_up(self.state_dir, *self.sandbox_args)
        if self.secure:
            self._load_security()
        zookeeper, bootstrap = env["ZKCOORD_ZOOKEEPER"], env["ZKCOORD_BOOTSTRAP_SERVERS"].split(",")[0]
        self.zk_port = int(zookeeper.rsplit(":", 1)[1])
        host, port = bootstrap.rsplit(":", 1)
        self.kafka_address = (host, int(port))
        self.pids = sandbox_pids(sandbox_state(self.state_dir))
        if env.get("ZKCOORD_KAFKA4_BOOTSTRAP_SERVERS"):
            host, port = env["ZKCOORD_KAFKA4_BOOTSTRAP_SERVERS"].split(",")[0].rsplit(":", 1)
            self.kafka4_address = (host, int(port))
        self._prepare_zookeeper(zookeeper)
        if self.topic is not None:
            self._create_topics(bootstrap)
        self._start_daemon(zookeeper, bootstrap)

    def _load_security(self) -> None:
        from zkcoord.local import secure
        from zkcoord.security.tls import SslSettings

        self.material = secure.load(self.state_dir)
        if self.material is None:
            raise BenchError(f"the sandbox in {self.state_dir} is not secure")
        context = SslSettings(truststore_type="PEM", truststore_location=str(self.material.ca_pem)).client_context()
        self.connect = {"ssl_context": context,
                        "login": (secure.MECHANISM, "admin", self.material.passwords["admin"].value)}
        self.connect_spec = ConnectSpec(str(self.material.ca_pem), self.connect["login"])

    def kafka_python_security(self) -> dict:
        """kafka-python's settings for the sandbox's brokers: {} on a plain sandbox."""
        if self.material is None:
            return {}
        from zkcoord.local import secure

        return {"security_protocol": "SASL_SSL", "sasl_mechanism": secure.MECHANISM,
                "sasl_plain_username": "admin", "sasl_plain_password": self.material.passwords["admin"].value,
                "ssl_cafile": str(self.material.ca_pem)}

    def _prepare_zookeeper(self, zookeeper: str) -> None:
        from kazoo.client import KazooClient

        login = {}
        if self.material is not None:  # the secure sandbox's ZooKeeper: SASL, the brokers' and daemons' login
            from zkcoord.local import secure

            login = {"sasl_options": {"mechanism": "DIGEST-MD5", "username": secure.ZOOKEEPER_USER,
                                      "password": self.material.zookeeper_password.value}}
        self._zk = KazooClient(hosts=zookeeper, **login)
        self._zk.start(timeout=15)
        if self.chroot:
            self._zk.ensure_path(self.chroot)

    def _create_topics(self, bootstrap: str) -> None:
        """Kafka refuses commits to unknown topics (zkcoord does not check)."""
        create_topics(bootstrap, [self.topic], self.topic_partitions, self.kafka_python_security())

    def _start_daemon(self, zookeeper: str, bootstrap: str) -> None:
        port = free_port() if self.workers <= 1 else free_port_range(1 + self.workers)
        command = [sys.executable]
        if self.profiler == "cprofile":
            command += ["-m", "cProfile", "-o", str(self.profile_path)]
        elif self.profiler == "pyinstrument":
            command += ["-m", "pyinstrument", "-r", "text", "-o", str(self.profile_path)]
        # With its metrics endpoint, as deployed (the sandbox's daemons and the README's have one):
        # every request is counted and timed, as the broker's own metrics count and time it.
        metrics_port = free_port() if self.workers <= 1 else free_port_range(1 + self.workers)
        command += ["-m", "zkcoord", "run", "--zookeeper", zookeeper + self.chroot,
                    "--node-id", str(DAEMON_NODE_ID), "--group-initial-rebalance-delay-ms", "0",
                    "--workers", str(self.workers), "--metrics-listen", f"127.0.0.1:{metrics_port}"]
        environment = None
        if self.material is not None:  # as the secure sandbox starts its daemons
            from zkcoord.local import secure

            flags, environment = secure.daemon_flags(self.material, port, 0 if self.gateway else None)
            command += flags
        else:
            command += ["--listen", f"127.0.0.1:{port}"]
            if self.gateway:
                command += ["--gateway-listen", "127.0.0.1:0"]
        if self.gateway:
            command += ["--bootstrap-servers", bootstrap]
        command += self.daemon_args
        log = open(self.workdir / "zkcoord.log", "ab")
        # Its own session: Ctrl-C reaches only us, and we stop it in order.
        self.daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                       env=environment)
        log.close()
        self.pids["zkcoord"] = self.daemon.pid
        self.daemon_address = ("127.0.0.1", port)
        asyncio.run(self._wait_daemon(lambda: self.daemon_address, "its listener"))
        if self.workers > 1:  # every worker registered, so groups are placed over all of them from the start
            asyncio.run(self._wait_daemon(lambda: self.daemon_address if self._registered_nodes() >= self.workers
                                          else None, f"its {self.workers} workers", 60.0))
        if self.gateway:
            asyncio.run(self._wait_daemon(self._registered_gateway, "its gateway"))
            self.gateway_address = self._registered_gateway()
            print(f"zkcoord daemon on {self.daemon_address[0]}:{self.daemon_address[1]}, its gateway on "
                  f"{self.gateway_address[0]}:{self.gateway_address[1]}", flush=True)

    def _registered_nodes(self) -> int:
        from kazoo.exceptions import NoNodeError

        try:
            return len(self._zk.get_children(f"{self.chroot}/zkcoord/nodes"))
        except NoNodeError:
            return 0

    def _registered_gateway(self) -> tuple[str, int] | None:
        """The gateway address in the daemon's registration (``/zkcoord/nodes/<id>``), None until it is there."""
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self._zk.get(f"{self.chroot}/zkcoord/nodes/{DAEMON_NODE_ID}")
        except NoNodeError:
            return None
        registration = json.loads(data)
        if not registration.get("gateway_port"):
            raise BenchError(f"the daemon registered without a gateway: {registration}")
        return registration["gateway_host"], int(registration["gateway_port"])

    async def _wait_daemon(self, address, what: str, timeout_s: float = 30.0) -> None:
        """Until ``address()`` (None: not known yet) answers ApiVersions."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise BenchError(f"zkcoord run exited with {self.daemon.returncode}; see {self.workdir / 'zkcoord.log'}")
            try:
                where = address()
                if where is None:
                    await asyncio.sleep(0.2)
                    continue
                conn = await KafkaConnection.open(*where, "zkcoord-bench", **self.connect)
                try:
                    await asyncio.wait_for(served_versions(conn), 10)  # a gateway's may wait for the brokers'
                    return
                finally:
                    conn.close()
            except (OSError, ConnectionError, asyncio.TimeoutError):
                await asyncio.sleep(0.2)
        raise BenchError(f"zkcoord run: {what} did not answer within {timeout_s:g} s; see "
                         f"{self.workdir / 'zkcoord.log'}")

    def zk_multi_latencies_ms(self, count: int, data_bytes: int) -> list[float]:
        """What one ZooKeeper write costs a client here, apart from any daemon:
        ``count`` multis shaped as a consumer group's reconciliation step
        (check a znode's version, set two znodes of ``data_bytes`` in all),
        timed one after the other on the benchmark's own session, in a scratch
        znode that is deleted afterwards."""
        root = f"/zkcoord-bench-probe-{os.getpid()}"
        self._zk.ensure_path(f"{root}/a")
        self._zk.ensure_path(f"{root}/b")
        data = b"x" * (data_bytes // 2)
        latencies = []
        try:
            for _ in range(count):
                version = self._zk.exists(f"{root}/a").version
                transaction = self._zk.transaction()
                transaction.check(f"{root}/a", version)
                transaction.set_data(f"{root}/b", data)
                transaction.set_data(f"{root}/a", data)
                start = time.perf_counter()
                results = transaction.commit()
                latencies.append((time.perf_counter() - start) * 1e3)
                if any(isinstance(r, Exception) for r in results):
                    raise BenchError(f"ZooKeeper probe multi failed: {results}")
        finally:
            self._zk.delete(root, recursive=True)
        return latencies

    def state_version(self, group: str) -> int | None:
        stat = self._zk.exists(f"{self.chroot}/coordinators/{group}/state")
        return None if stat is None else stat.version

    def stop(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(20)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception as exc:  # keep cleaning up
                print(f"warning: closing the ZooKeeper client: {exc!r}", file=sys.stderr)
        if self._sandbox_started and self.keep_sandbox_logs and (self.state_dir / "logs").is_dir():
            import shutil

            shutil.copytree(self.state_dir / "logs", self.workdir / "sandbox-logs", dirs_exist_ok=True)
        if self._sandbox_started:
            print("stopping the sandbox ...", flush=True)
            self._cli("local", "down", "--state-dir", str(self.state_dir), check=False)


