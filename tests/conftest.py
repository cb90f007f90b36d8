"""Fixtures giving tests real ZooKeeper and Kafka servers.

Where the services come from, in order:

1. ``ZKCOORD_TEST_ZOOKEEPER`` and ``ZKCOORD_TEST_BOOTSTRAP_SERVERS`` set: use
   those servers as they are (restart fixtures are then unavailable).
2. A Docker engine answers and testcontainers is installed: ZooKeeper 3.8
   and Kafka 3.9 (ZooKeeper mode) containers.
3. Otherwise the local sandbox (``zkcoord local``), started once per test run
   in ``ZKCOORD_TEST_STATE_DIR`` (default: a fresh temporary directory) and
   always stopped at the end of the run, also when tests fail.

Each test gets its own ZooKeeper chroot (``zk_chroot`` / ``zk_hosts`` /
``zk``) and its own topic names (``unique_name``). ``expire_session`` makes
ZooKeeper itself expire a kazoo session; ``sandbox`` restarts servers.

``kafka4`` is the bootstrap address of a Kafka 4.x broker in KRaft mode (the
reference peer of KIP-848's consumer protocol, :mod:`zkcoord.local.kraft`),
started once per run, the first time a test asks for it, in the test sandbox
(in a private sandbox when the services are not a local sandbox), and stopped
at the end (``ZKCOORD_TEST_KAFKA4_BOOTSTRAP_SERVERS``: a node already
running, left as it is); ``kafka4_reconfigure`` restarts it with other
broker settings for one test.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.kafka_ready import wait_group_coordinator
from zkcoord.local.sandbox import Sandbox


def _private_random_for_client_threads() -> None:
    """kazoo's connection thread draws from the global ``random`` on every
    turn of its loop (a jitter per ping), and kafka-python's I/O thread when
    it picks a node: a session-wide client (``zk_root``) does so in the middle
    of whatever test is running. A hypothesis test then saw the global state
    change during its draws and warned "Do not use the random module inside
    strategies" (2 to 6 such warnings per ``make test``, in whichever
    property test ran at the time). Their threads get a generator of their own."""
    import random

    import kafka.cluster
    import kafka.net.manager
    import kazoo.protocol.connection
    import kazoo.retry

    for module in (kazoo.protocol.connection, kazoo.retry, kafka.cluster, kafka.net.manager):
        module.random = random.Random()


_private_random_for_client_threads()


def pytest_configure(config) -> None:
    """Each pytest-xdist worker (``make test`` runs two) keeps its sandboxes
    under ``<ZKCOORD_TEST_STATE_DIR>-<worker>`` (its own ZooKeeper, brokers,
    daemons and private sandboxes: a worker's restarts and faults never touch
    the other's servers); set here, before any fixture or child process
    reads it, so that ``.ci/run`` finds every one by the common prefix.

    pytest's own temporary directories (``tmp_path``) under one folder of
    this run, removed when the run ends: a test run leaves nothing in the
    temporary folder (pytest keeps its last three runs' otherwise). An
    explicit ``--basetemp`` is left as given."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    base = os.environ.get("ZKCOORD_TEST_STATE_DIR")
    if worker and base and not base.endswith(f"-{worker}"):
        os.environ["ZKCOORD_TEST_STATE_DIR"] = f"{base}-{worker}"
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="zkcoord-pytest-")
        config._zkcoord_basetemp = config.option.basetemp


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``make test``'s pytest-xdist scheduling: each module on one process
    (``--dist loadfile``: its module-scoped daemons start once), and the
    fault suite's modules together on one process, whose ensemble sandbox
    (three ZooKeepers, three brokers; session-scoped) then starts once. The
    fault suite, named first on the command line, is handed out first."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FaultsTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "tests/faults" if nodeid.startswith("tests/faults/") else super()._split_scope(nodeid)

    return FaultsTogether(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``slow`` (issue 29's heaviest scenarios: the ensemble
    module, the stock clients' scenarios, the month-apart monotonic clocks)
    run only with ``ZKCOORD_TEST_SLOW=1``: the README's ``make test`` stays
    bounded (docs/testing.md, "What make test runs")."""
    if os.environ.get("ZKCOORD_TEST_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="a slow scenario: runs with ZKCOORD_TEST_SLOW=1 (docs/testing.md)")
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.add_marker(skip)


def pytest_unconfigure(config) -> None:
    import shutil

    basetemp = getattr(config, "_zkcoord_basetemp", None)
    if basetemp is not None:
        shutil.rmtree(basetemp, ignore_errors=True)


@dataclass
class Services:
    zookeeper: str
    bootstrap_servers: str
    kind: str  # "external", "testcontainers" or "sandbox"
    sandbox: Sandbox | None = None


def _docker_engine_answers() -> bool:
    try:
        import docker  # installed with testcontainers
        import testcontainers  # noqa: F401

        docker.from_env(timeout=3).ping()
        return True
    except Exception:  # any failure means: no usable engine here
        return False


def _start_containers():
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.network import Network

    from zkcoord.local.procs import free_port
    from zkcoord.local.sandbox import broker_answers_metadata, zk_four_letter

    network = Network().create()
    zk_port, kafka_port = free_port(), free_port()
    zookeeper = (DockerContainer("zookeeper:3.8").with_network(network).with_network_aliases("zookeeper")
                 .with_env("ZOO_4LW_COMMANDS_WHITELIST", "*").with_env("ZOO_ADMINSERVER_ENABLED", "false")
                 .with_bind_ports(2181, zk_port))
    kafka = (DockerContainer("confluentinc/cp-kafka:7.9.0").with_network(network).with_network_aliases("kafka")
             .with_bind_ports(kafka_port, kafka_port)
             .with_env("KAFKA_BROKER_ID", "0").with_env("KAFKA_ZOOKEEPER_CONNECT", "zookeeper:2181")
             .with_env("KAFKA_LISTENERS", f"INTERNAL://0.0.0.0:29092,EXTERNAL://0.0.0.0:{kafka_port}")
             .with_env("KAFKA_ADVERTISED_LISTENERS",
                       f"INTERNAL://kafka:29092,EXTERNAL://127.0.0.1:{kafka_port}")
             .with_env("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT")
             .with_env("KAFKA_INTER_BROKER_LISTENER_NAME", "INTERNAL")
             .with_env("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
             .with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0"))
    zookeeper.start()
    kafka.start()
    import time

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if zk_four_letter(zk_port) == "imok" and broker_answers_metadata(kafka_port, 1):
            break
        time.sleep(1)
    else:
        raise RuntimeError("the ZooKeeper/Kafka containers did not become ready within 120 s")

    def stop():
        kafka.stop()
        zookeeper.stop()
        network.remove()

    return Services(f"127.0.0.1:{zk_port}", f"127.0.0.1:{kafka_port}", "testcontainers"), stop


@pytest.fixture(scope="session")
def services():
    zk, bootstrap = os.environ.get("ZKCOORD_TEST_ZOOKEEPER"), os.environ.get("ZKCOORD_TEST_BOOTSTRAP_SERVERS")
    if zk and bootstrap:
        yield Services(zk, bootstrap, "external")
        return
    if os.environ.get("ZKCOORD_TEST_DOCKER", "auto") != "no" and _docker_engine_answers():
        found, stop = _start_containers()
        try:
            yield found
        finally:
            stop()
        return
    state_dir = Path(os.environ.get("ZKCOORD_TEST_STATE_DIR") or tempfile.mkdtemp(prefix="zkcoord-test-"))
    sandbox = Sandbox(state_dir, log=print)
    brokers = int(os.environ.get("ZKCOORD_TEST_BROKERS", "1"))
    try:
        state, _ = sandbox.up(brokers=brokers)
        wait_group_coordinator(sandbox.bootstrap_servers(state))
        yield Services(sandbox.zookeeper_address(state), sandbox.bootstrap_servers(state), "sandbox", sandbox)
    finally:
        sandbox.down()


@pytest.fixture
def sandbox(services) -> Sandbox:
    """The sandbox, for tests that stop and restart servers."""
    if services.sandbox is None:
        pytest.skip(f"restarting servers needs the local sandbox; services are {services.kind}")
    return services.sandbox


def _test_slug(request) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:60].strip("-")


@pytest.fixture
def java_tools_available() -> None:
    """Skip, saying why, where Kafka's Java tools cannot run (no java, no jars)."""
    from zkcoord.errors import MissingToolError
    from zkcoord.local import jars

    try:
        jars.find_java()
        jars.kafka_distribution()
    except MissingToolError as exc:
        pytest.skip(f"Kafka's Java tools need java and the Kafka jars: {exc}")


@pytest.fixture(scope="session")
def kafka4_sandbox(services):
    """The sandbox running the Kafka 4.x node, started on first use: the test
    sandbox, else (external servers, containers) a private one. Skips, saying
    why, where Java 17+ or the Kafka 4.x jars (Maven) are missing, and
    where ``ZKCOORD_TEST_KAFKA4_BOOTSTRAP_SERVERS`` names a running node
    (``kafka4``): the tests that restart the node are then skipped."""
    from tests.support.state_dirs import state_directory
    from zkcoord.errors import MissingToolError
    from zkcoord.local import jars
    from zkcoord.local.kraft import NAME

    if os.environ.get("ZKCOORD_TEST_KAFKA4_BOOTSTRAP_SERVERS"):
        pytest.skip("the test restarts the Kafka 4.x node; ZKCOORD_TEST_KAFKA4_BOOTSTRAP_SERVERS names one that is "
                    "not the suite's")
    try:
        jars.kafka4_distribution(log=print)
    except MissingToolError as exc:
        pytest.skip(f"the Kafka 4.x broker needs Java 17+ and the Kafka 4.x jars: {exc}")
    if services.sandbox is not None:
        sandbox = services.sandbox
        sandbox.up(brokers=len(sandbox.load().brokers), kafka4=True)
        try:
            yield sandbox
        finally:
            sandbox.stop_server(NAME)
        return
    with state_directory(os.environ.get("ZKCOORD_TEST_STATE_DIR"), "kafka4") as state_dir:
        sandbox = Sandbox(state_dir, log=print)
        try:
            sandbox.up(kafka4=True)
            yield sandbox
        finally:
            sandbox.down()


@pytest.fixture(scope="session")
def kafka4(request) -> str:
    """The Kafka 4.x broker's bootstrap address (``127.0.0.1:<port>``), its
    group coordinator loaded: ``ZKCOORD_TEST_KAFKA4_BOOTSTRAP_SERVERS`` when
    set (a running node, e.g. a sandbox's ``up --kafka4``), else the node of
    ``kafka4_sandbox``."""
    bootstrap = os.environ.get("ZKCOORD_TEST_KAFKA4_BOOTSTRAP_SERVERS")
    if not bootstrap:
        kafka4_sandbox = request.getfixturevalue("kafka4_sandbox")
        bootstrap = kafka4_sandbox.kafka4_bootstrap_servers(kafka4_sandbox.load())
    wait_group_coordinator(bootstrap)
    return bootstrap


@pytest.fixture
def kafka4_reconfigure(kafka4_sandbox, kafka4):
    """``kafka4_reconfigure({"group.consumer.migration.policy": "upgrade"})``
    restarts the Kafka 4.x broker with these broker settings (None removes
    one) and waits for its group coordinator; when the test ends it is
    restarted with the settings it had before (if they changed)."""
    before = dict(kafka4_sandbox.load().kafka4_settings)
    changed = False

    def reconfigure(settings):
        nonlocal changed
        changed = kafka4_sandbox.configure_kafka4(settings) or changed
        wait_group_coordinator(kafka4)

    yield reconfigure
    if changed:
        kafka4_sandbox.configure_kafka4(before, replace=True)
        wait_group_coordinator(kafka4)


@pytest.fixture
def admin(services):
    """A Kafka admin client of the sandbox broker; closed after the test."""
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=services.bootstrap_servers, request_timeout_ms=30_000)
    yield client
    client.close()


@pytest.fixture
def unique_name(request):
    """Factory of names unique to this test: ``unique_name("t")`` -> ``t-<test>-<hex>``."""
    slug = _test_slug(request)

    def make(prefix: str = "t") -> str:
        return f"{prefix}-{slug}-{uuid.uuid4().hex[:8]}"

    return make


@pytest.fixture(scope="session")
def zk_root(services):
    """A kazoo client on ZooKeeper's root, shared by the fixtures."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=services.zookeeper, timeout=10)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def zk_chroot(zk_root, request) -> str:
    """A ZooKeeper chroot path of this test's own, created empty."""
    path = f"/zkcoord-tests/{_test_slug(request)}-{uuid.uuid4().hex[:8]}"
    # Retried: a test that restarts ZooKeeper on a loaded machine may outlast this shared
    # client's session, which kazoo then renews; the first call after it sees the expiry.
    zk_root.retry(zk_root.ensure_path, path)
    return path


@pytest.fixture
def zk_hosts(services, zk_chroot) -> str:
    """Connection string with this test's chroot, for daemons and CLIs."""
    return f"{services.zookeeper}{zk_chroot}"


@pytest.fixture
def zk(zk_hosts):
    """A started kazoo client inside this test's chroot."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=zk_hosts, timeout=10)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def expire_session(services):
    """Make ZooKeeper expire a kazoo client's session, for real.

    A second connection takes over the session with its id and password and
    closes it; the server then ends the session, and the first client sees
    it expired (LOST) when it reconnects. Waits until that happened.
    """
    from kazoo.client import KazooClient
    from kazoo.protocol.states import KazooState

    def expire(client, timeout_s: float = 30.0) -> None:
        lost = threading.Event()

        def listener(state):
            if state == KazooState.LOST:
                lost.set()
                return True  # remove the listener
            return False

        client.add_listener(listener)
        session_id, password = client.client_id
        intruder = KazooClient(hosts=services.zookeeper, client_id=(session_id, password), timeout=10)
        intruder.start(timeout=30)
        intruder.stop()
        intruder.close()
        if not lost.wait(timeout_s):
            raise AssertionError(f"session 0x{session_id:x} was not reported expired within {timeout_s} s")

    return expire
