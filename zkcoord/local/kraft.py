"""The sandbox's reference peer: one Apache Kafka 4.x node in KRaft mode
(broker and controller in one process) beside the ZooKeeper-mode brokers,
for comparing zkcoord with Kafka's own KIP-848 coordinator.

Owns ``<state-dir>/kafka4/``::

    server.properties   the sandbox's values, then the user's settings
    log4j2.xml          its logging (Kafka 4.x logs with log4j2)
    data/               its log directory; meta.properties holds its cluster id

and the rules of the user's settings (``up --kafka4-config KEY=VALUE``,
:meth:`zkcoord.local.sandbox.Sandbox.configure_kafka4`):

* a setting is a Kafka broker property, kept in ``sandbox.json`` and written
  after the sandbox's own values, so it wins; ``KEY=`` (no value) removes it;
* the keys that make it a one-node KRaft cluster on the sandbox's ports
  (:data:`SANDBOX_KEYS`: roles, node id, listeners, quorum, directories)
  cannot be given;
* when the settings change, a running node is stopped (SIGTERM: a controlled
  shutdown) and started again with them; its data and cluster id are kept.

Its storage is formatted the first time it starts (``kafka.tools.StorageTool
format --standalone``, as Kafka 4.x's quickstart does) with a fresh cluster
id. Kafka checks the values itself when the node starts: a bad one stops it,
and the error shows the last lines of its log.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from zkcoord.errors import SandboxError, UsageError
from zkcoord.local import config_files, jars, procs

if TYPE_CHECKING:  # the sandbox imports this module
    from zkcoord.local.sandbox import Sandbox, SandboxState, Server

NAME = "kafka4"
NODE_ID = 1
FORMAT_TIMEOUT_S = 120.0
BOOTSTRAP_ENV = "ZKCOORD_KAFKA4_BOOTSTRAP_SERVERS"
NOT_SECURE = ("--kafka4: the Kafka 4.x node runs in plain sandboxes only (PLAINTEXT); "
              "use a sandbox without --secure (another --state-dir).")

# What makes it a one-node KRaft cluster on the sandbox's ports and directories.
SANDBOX_KEYS = frozenset({
    "process.roles", "node.id", "broker.id", "listeners", "advertised.listeners", "controller.listener.names",
    "inter.broker.listener.name", "security.inter.broker.protocol", "listener.security.protocol.map",
    "controller.quorum.voters", "controller.quorum.bootstrap.servers", "log.dirs", "log.dir", "metadata.log.dir",
    "zookeeper.connect",
})
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")


# -- the user's settings ---------------------------------------------------------------------------
def parse_settings(items: Iterable[str]) -> dict[str, str | None]:
    """``["k=v", "k2="]`` -> ``{"k": "v", "k2": None}`` (None: remove the
    setting); the last of a repeated key wins. UsageError naming the bad item."""
    changes: dict[str, str | None] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"{item!r}: give KEY=VALUE (KEY= removes a setting), "
                             "e.g. group.consumer.migration.policy=upgrade.")
        changes[key.strip()] = value if value != "" else None
    return check_settings(changes)


def check_settings(changes: Mapping[str, str | None]) -> dict[str, str | None]:
    """The changes, if every key may be set and every value written as one
    line; UsageError otherwise."""
    for key, value in changes.items():
        if not _KEY.match(key):
            raise UsageError(f"Kafka 4.x setting {key!r}: not a property name (letters, digits, '.', '_', '-').")
        if key in SANDBOX_KEYS:
            raise UsageError(f"Kafka 4.x setting {key!r} is set by the sandbox (its roles, ports and "
                             f"directories: {', '.join(sorted(SANDBOX_KEYS))}); it cannot be given.")
        if value is not None and any(ch in value for ch in "\n\r\0"):
            raise UsageError(f"Kafka 4.x setting {key!r}: the value holds a line break or NUL.")
    return dict(changes)


def merge_settings(current: Mapping[str, str], changes: Mapping[str, str | None]) -> dict[str, str]:
    """``current`` with ``changes`` applied (None removes a key), keys sorted."""
    merged = dict(current)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return dict(sorted(merged.items()))


def apply_settings(sandbox: Sandbox, state: SandboxState, changes: Mapping[str, str | None]) -> bool:
    """Add the node to ``state`` if it has none and record its new settings;
    a running node whose settings change is stopped, so that the sandbox
    starts it with them. True when they changed."""
    if state.kafka4 is None:
        add_server(state)
    merged = merge_settings(state.kafka4_settings, changes)
    if merged == state.kafka4_settings:
        return False
    state.kafka4_settings = merged
    if procs.alive(state.kafka4.pid, sandbox._match(NAME)):
        sandbox.log(f"stopping the Kafka 4.x node to start it with its new settings {merged}")
        procs.stop(state.kafka4.pid, sandbox._match(NAME), grace_s=30)
        state.kafka4.pid = None
    return True


@contextmanager
def settings_restored_on_failure(sandbox: Sandbox, state: SandboxState, previous: dict[str, str]) -> Iterator[None]:
    """If starting fails after the node's settings changed, they go back to
    ``previous`` in ``sandbox.json`` (the node stays down; the next ``up``
    starts it with them) and the error says so."""
    try:
        yield
    except SandboxError as exc:
        if state.kafka4 is None or state.kafka4_settings == previous:
            raise
        state.kafka4_settings = previous
        if sandbox.state_file.exists():
            sandbox._save(state)
        raise SandboxError(f"{exc}\nThe Kafka 4.x node's settings are back to {previous or 'none'}; it is "
                           "down and `zkcoord local up` starts it with them.") from exc


# -- the node --------------------------------------------------------------------------------------
def new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID in URL-safe base64 without padding,
    as ``kafka-storage random-uuid`` prints it (never starting with '-',
    which command lines would read as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def add_server(state: SandboxState) -> Server:
    """The node's entry in ``state``: its broker and controller ports picked
    now and kept for good."""
    from zkcoord.local.sandbox import Server

    server = Server(NAME, procs.free_port(avoid=state.ports()))
    server.controller_port = procs.free_port(avoid=state.ports() | {server.port})
    state.kafka4 = server
    return server


def bootstrap_servers(state: SandboxState) -> str:
    return f"127.0.0.1:{state.kafka4.port}" if state.kafka4 else ""


def start(sandbox: Sandbox, state: SandboxState) -> None:
    """Write its configuration, format its storage the first time, start it
    (not waiting: :func:`wait_ready`)."""
    server = state.kafka4
    dist = jars.kafka4_distribution(sandbox.log)
    home = sandbox.state_dir / NAME
    data = home / "data"
    home.mkdir(parents=True, exist_ok=True)
    (home / "server.properties").write_text(config_files.kraft_server_properties(
        NODE_ID, server.port, server.controller_port, data, state.kafka4_settings))
    (home / "log4j2.xml").write_text(config_files.KAFKA4_LOG4J2_XML)
    sandbox.write_tools_log4j2()  # ZKCOORD_TOOLS_LOG4J2, for its tools run by hand
    if not (data / "meta.properties").exists():
        _format(sandbox, dist.classpath, home)
    sandbox.log(f"starting Kafka {dist.version} (KRaft, broker and controller) on 127.0.0.1:{server.port}, "
                f"controller on 127.0.0.1:{server.controller_port}")
    server.pid = sandbox._java(
        NAME, config_files.KAFKA4_HEAP, dist.classpath, "kafka.Kafka", str(home / "server.properties"),
        props=(f"-Dlog4j2.configurationFile=file:{home / 'log4j2.xml'}",
               f"-Dkafka.logs.dir={sandbox.state_dir / 'logs'}"),
    )


def _format(sandbox: Sandbox, classpath: str, home) -> None:
    """``kafka-storage format --standalone`` with a fresh cluster id, into an
    empty data directory (one left by an interrupted format is cleared)."""
    shutil.rmtree(home / "data", ignore_errors=True)
    (home / "data").mkdir(parents=True)
    cluster_id = new_cluster_id()
    tools_log = sandbox.tools_log4j2
    cmd = [jars.find_java(), "-Xmx256m", *config_files.JVM_COMMON, sandbox._marker(f"{NAME}-format"),
           f"-Dlog4j2.configurationFile=file:{tools_log}", "-cp", classpath, "kafka.tools.StorageTool",
           "format", "--config", str(home / "server.properties"), "--cluster-id", cluster_id, "--standalone"]
    sandbox.log(f"formatting the Kafka 4.x storage in {home / 'data'} (cluster id {cluster_id})")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S,
                              stdin=subprocess.DEVNULL, cwd=sandbox.state_dir)
    except subprocess.TimeoutExpired:
        raise SandboxError(f"formatting the Kafka 4.x storage did not finish within {FORMAT_TIMEOUT_S:.0f} s")
    if proc.returncode != 0 or not (home / "data" / "meta.properties").exists():
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SandboxError(f"kafka-storage format of {home / 'data'} failed (exit {proc.returncode}):\n{tail}")


def wait_ready(sandbox: Sandbox, state: SandboxState) -> None:
    from zkcoord.local.sandbox import broker_answers_metadata

    server = state.kafka4
    sandbox._wait(server, lambda: broker_answers_metadata(server.port, 1), "answer a metadata request")


def cluster_id(sandbox: Sandbox) -> str | None:
    """The cluster id its storage was formatted with (None before the first start)."""
    try:
        text = (sandbox.state_dir / NAME / "data" / "meta.properties").read_text()
    except OSError:
        return None
    match = re.search(r"^cluster\.id=(\S+)$", text, re.MULTILINE)
    return match.group(1) if match else None
