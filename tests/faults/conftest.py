"""Fixtures of the fault tests: a ZooKeeper + Kafka of their own.

The fault tests restart ZooKeeper and the brokers, so they do not share the
session sandbox of ``tests/conftest.py``: ``fault_sandbox`` starts a
:class:`~tests.faults.harness.MarkedSandbox` of a 3-server ZooKeeper
ensemble and 3 brokers once for ``tests/faults`` in
``$ZKCOORD_TEST_STATE_DIR-faults`` (or a fresh temporary directory,
removed at the end: :func:`~tests.faults.harness.state_directory`) and
always takes it down at the end, pass or fail. Its JVMs, like every daemon
and worker the tests start, carry ``-X``/``-D zkcoord-test-process=...``, the
marker ``.ci/run`` kills stray processes by.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import pytest
from kazoo.client import KazooClient

from tests.faults.harness import MarkedSandbox, state_directory
from tests.support.kafka_ready import wait_group_coordinator
from zkcoord.local.sandbox import Sandbox


@dataclass
class FaultServices:
    sandbox: Sandbox
    zookeeper: str
    bootstrap_servers: str


@pytest.fixture(scope="session")
def fault_sandbox():
    with state_directory(os.environ.get("ZKCOORD_TEST_STATE_DIR")) as state_dir:
        sandbox = MarkedSandbox(state_dir, log=print)
        try:
            # Production's shape (issue 29): a ZooKeeper ensemble of three and three brokers
            # (topics replicated 3 times, min ISR 2), so its members and brokers can be lost.
            state, _ = sandbox.up(zookeepers=3, brokers=3)
            wait_group_coordinator(sandbox.bootstrap_servers(state))
            yield FaultServices(sandbox, sandbox.zookeeper_address(state), sandbox.bootstrap_servers(state))
        finally:
            sandbox.down()


@pytest.fixture
def fault_chroot(fault_sandbox, request):
    """A fresh ZooKeeper chroot on the fault sandbox; (hosts with chroot, kazoo client in it)."""
    path = f"/faults/{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
    root = KazooClient(hosts=fault_sandbox.zookeeper, timeout=10)
    root.start(timeout=30)
    root.ensure_path(path)
    root.stop()
    root.close()
    hosts = f"{fault_sandbox.zookeeper}{path}"
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=30)
    yield hosts, client
    client.stop()
    client.close()
