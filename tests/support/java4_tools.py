"""Kafka 4.x's Java clients for tests of KIP-848's consumer protocol, against
any bootstrap address (the sandbox's Kafka 4.x node, a zkcoord gateway).

Owns, on the jars of :func:`zkcoord.local.jars.kafka4_distribution`
(kafka-clients and kafka-tools 4.4.0) through :mod:`tests.support.java_tools`
(``kafka4=True``: its JVM settings, marker, log4j2 configuration and errors):

* :func:`consumer_protocol`: the consumer settings of a consumer-protocol
  member (``group.protocol=consumer``, ``group.remote.assignor``), for any of
  the console tools of :mod:`tests.support.java_tools`.
* :class:`VerifiableConsumerProcess`: Kafka's own
  ``org.apache.kafka.tools.VerifiableConsumer``, the consumer of Kafka's
  system tests, in the background; its JSON events (``partitions_assigned``,
  ``partitions_revoked``, ``records_consumed``, ``offsets_committed``, ...)
  parsed as they come. It prints no member id, and its listener leaves
  ``onPartitionsLost`` to the default, which calls ``onPartitionsRevoked``:
  a lost partition shows as revoked.
* :class:`AssignmentReporterProcess`: for that, a small consumer of ours
  (``java/AssignmentReporter.java``, compiled once into the cache) printing
  assigned / revoked / lost with the member id and epoch, each record, each
  commit.
* :func:`verifiable_produce`: Kafka's ``VerifiableProducer``: every record
  acknowledged or :class:`~tests.support.java_tools.JavaToolError`;
  :class:`VerifiableProducerProcess`: the same in the background, at a
  given rate, until stopped.
* Kafka 4.x's ``kafka-consumer-groups`` on a consumer group:
  :func:`describe_consumer_group_members` (``--describe --members
  --verbose``: member epochs, current and target assignments) and
  :func:`list_group_types` (``--list --type``).

Both consumers' assignment changes come out as
:class:`tests.support.ownership.AssignmentChange` s for
:func:`tests.support.ownership.double_owners`.

What Kafka 4.4.0's tools do that one would not guess (checked):

* VerifiableConsumer's ``partitions_assigned`` / ``partitions_revoked`` are
  what the listener was given: with the consumer protocol only the partitions
  that changed (an empty ``partitions_assigned`` after each revocation).
* ``--describe --members --verbose`` of a consumer group has the columns
  ``GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS CURRENT-EPOCH
  CURRENT-ASSIGNMENT TARGET-EPOCH TARGET-ASSIGNMENT``, assignments as
  ``topic:0,1`` (``;`` between topics), ``-`` for none; ``#PARTITIONS``
  counts the current assignment.
* ``--list --type`` prints ``GROUP TYPE`` rows (``Consumer``, ``Classic``).
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support import java_tools
from tests.support.java_tools import JavaToolError
from tests.support.ownership import AssignmentChange
from zkcoord.local import jars

VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
REPORTER_SOURCE = Path(__file__).with_name("java") / "AssignmentReporter.java"
REPORTER_MAIN = "AssignmentReporter"
CONSUMER_HEAP = ("-Xms32m", "-Xmx192m")
STOP_TIMEOUT_S = 60.0  # a consumer-protocol member leaves with a heartbeat; its close waits for it


def consumer_protocol(assignor: str | None = None, **extra: object) -> dict[str, object]:
    """Consumer settings of a KIP-848 member: ``group.protocol=consumer`` and,
    given, ``group.remote.assignor`` (``uniform`` or ``range``: the broker's
    assignors), plus ``extra`` (dots as underscores: ``client_id="a"``)."""
    settings: dict[str, object] = {"group.protocol": "consumer"}
    if assignor is not None:
        settings["group.remote.assignor"] = assignor
    settings.update({key.replace("_", "."): value for key, value in extra.items()})
    return settings


def _properties_text(properties: Mapping[str, object]) -> str:
    return "".join(f"{key}={value}\n" for key, value in properties.items())


# ------------------------------------------------------------ the JSON-lines JVM
_LIVE: set[JsonLinesProcess] = set()


@atexit.register
def _kill_leftovers() -> None:
    for process in list(_LIVE):
        process.kill()


class JsonLinesProcess:
    """A Kafka 4.x JVM in the background printing one JSON object a line on
    stdout, collected as they come (lines that are not JSON are kept apart).
    ``start()`` returns it; ``wait_until`` waits for a condition on the events;
    ``stop()`` (SIGTERM: a consumer closes and leaves its group) or ``kill()``
    (SIGKILL) ends it. As a context manager: started on entry, killed on exit
    if still running. ``files`` are removed when it ends."""

    main_class = ""
    stdin_pipe = False  # True: commands can be written to its stdin (:meth:`send`)

    def __init__(self, args: Sequence[str], label: str, classpath_first: str | None = None,
                 files: Sequence[Path] = ()):
        self.args = list(args)
        self.label = label
        self.classpath_first = classpath_first
        self.files = list(files)
        self.proc: subprocess.Popen | None = None
        self._events: list[dict] = []
        self._unparsed: list[str] = []
        self._stderr: deque[str] = deque(maxlen=400)
        self._changed = threading.Condition()
        self._readers: list[threading.Thread] = []

    def start(self):
        if self.proc is not None:
            raise RuntimeError(f"{self.label} was started already")
        cmd = java_tools.java_command(self.main_class, *self.args, heap=CONSUMER_HEAP, kafka4=True,
                                      classpath_first=self.classpath_first)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if self.stdin_pipe else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=java_tools._environment(), start_new_session=True)
        _LIVE.add(self)
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True, name=f"{self.label}-out"),
                         threading.Thread(target=self._read_stderr, daemon=True, name=f"{self.label}-err")]
        for reader in self._readers:
            reader.start()
        return self

    def __enter__(self):
        return self.start() if self.proc is None else self

    def __exit__(self, *exc_info) -> None:
        self.kill()

    def _read_stdout(self) -> None:
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            with self._changed:
                try:
                    event = json.loads(line)
                    if not isinstance(event, dict):
                        raise ValueError(line)
                    self._events.append(event)
                except ValueError:
                    self._unparsed.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _read_stderr(self) -> None:
        for raw in self.proc.stderr:
            self._stderr.append(raw.decode(errors="replace").rstrip("\n"))

    def send(self, line: str) -> None:
        """One command line to its stdin (``stdin_pipe`` processes)."""
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    # -- what it printed
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def events(self, name: str | None = None) -> list[dict]:
        """Its events so far, in order (only those named ``name`` if given)."""
        with self._changed:
            return [e for e in self._events if name is None or self._name(e) == name]

    @staticmethod
    def _name(event: dict) -> str | None:
        return event.get("name", event.get("event"))

    def unparsed_lines(self) -> list[str]:
        with self._changed:
            return list(self._unparsed)

    def error(self, what: str) -> JavaToolError:
        """A JavaToolError about it, with its last events and stderr lines."""
        stdout = "\n".join([*self.unparsed_lines()[-10:], *(json.dumps(e) for e in self.events()[-10:])])
        return java_tools._failure(self.main_class, f"({self.label}) {what}", stdout,
                                   "\n".join(self._stderr), self.args)

    def wait_until(self, condition: Callable[[], object], what: str, timeout_s: float = 120.0):
        """Wait until ``condition()`` (called with no lock held, whenever an
        event comes and at least every half second) is truthy and return its
        value; JavaToolError naming ``what`` if the JVM exits or ``timeout_s``
        passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = condition()
            if value:
                return value
            if not self.alive() and not any(r.is_alive() for r in self._readers):
                raise self.error(f"exited ({self.proc.returncode}) before {what}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise self.error(f"still running without {what} after {timeout_s:g} s")
            with self._changed:
                self._changed.wait(min(remaining, 0.5))

    # -- ending it
    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; its exit code. Killed, and JavaToolError, if it
        does not exit within ``timeout_s``."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise self.error(f"did not exit within {timeout_s:g} s of SIGTERM (killed)") from None
        self._finish()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL and reap (idempotent): no commit, no leave."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
        self._finish()

    def _finish(self) -> None:
        for reader in self._readers:
            reader.join(10)
        for path in self.files:
            path.unlink(missing_ok=True)
        _LIVE.discard(self)


def _config_file(properties: Mapping[str, object]) -> Path:
    fd, name = tempfile.mkstemp(prefix="consumer-", suffix=".properties", dir=java_tools._work_dir())
    with os.fdopen(fd, "w") as handle:
        handle.write(_properties_text(properties))
    return Path(name)


def _partitions(items: Iterable) -> frozenset[tuple[str, int]]:
    return frozenset((p["topic"], int(p["partition"])) if isinstance(p, dict) else (p[0], int(p[1])) for p in items)


# ------------------------------------------------------------ VerifiableConsumer
class VerifiableConsumerProcess(JsonLinesProcess):
    """Kafka's VerifiableConsumer (kafka-tools 4.x) in ``group``, subscribed
    to ``topic``: ``group_protocol`` ``consumer`` (KIP-848) or ``classic``,
    ``assignor`` its ``--group-remote-assignor`` (consumer) or
    ``--assignment-strategy`` class (classic). It commits synchronously after
    each batch unless ``auto_commit``; ``verbose`` also prints each record
    (``record_data``). ``consumer_properties`` go in a ``--command-config``
    file. ``label`` names it in errors and in its :meth:`changes`."""

    main_class = VERIFIABLE_CONSUMER

    def __init__(self, bootstrap_servers: str, topic: str, group: str, *, label: str,
                 group_protocol: str = "consumer", assignor: str | None = None, instance_id: str | None = None,
                 auto_commit: bool = False, verbose: bool = False, reset_policy: str = "earliest",
                 max_messages: int | None = None, consumer_properties: Mapping[str, object] | None = None):
        args = ["--bootstrap-server", bootstrap_servers, "--topic", topic, "--group-id", group,
                "--group-protocol", group_protocol, "--reset-policy", reset_policy]
        if assignor is not None:
            args += ["--group-remote-assignor" if group_protocol == "consumer" else "--assignment-strategy", assignor]
        if instance_id is not None:
            args += ["--group-instance-id", instance_id]
        if auto_commit:
            args.append("--enable-autocommit")
        if verbose:
            args.append("--verbose")
        if max_messages is not None:
            args += ["--max-messages", str(max_messages)]
        files = []
        if consumer_properties:
            files.append(_config_file(consumer_properties))
            args += ["--command-config", str(files[0])]
        super().__init__(args, label, files=files)
        self.topic = topic
        self.group = group

    def changes(self) -> list[AssignmentChange]:
        """Its assignment changes (member: its label), in order."""
        kinds = {"partitions_assigned": "assigned", "partitions_revoked": "revoked"}
        return [AssignmentChange(self.label, kinds[self._name(e)], int(e["timestamp"]), _partitions(e["partitions"]))
                for e in self.events() if self._name(e) in kinds]

    def assignment(self) -> frozenset[tuple[str, int]]:
        """What it holds now, by its callbacks."""
        held: set[tuple[str, int]] = set()
        for change in self.changes():
            held = held | change.partitions if change.kind == "assigned" else held - change.partitions
        return frozenset(held)

    def consumed_offsets(self) -> dict[tuple[str, int], set[int]]:
        """Offsets it consumed per partition (from ``records_consumed``:
        each batch's min..max offset of a partition, which holds every
        offset of a topic without transactions or compaction)."""
        consumed: dict[tuple[str, int], set[int]] = {}
        for event in self.events("records_consumed"):
            for summary in event["partitions"]:
                tp = (summary["topic"], int(summary["partition"]))
                consumed.setdefault(tp, set()).update(range(summary["minOffset"], summary["maxOffset"] + 1))
        return consumed


class VerifiableProducerProcess(JsonLinesProcess):
    """Kafka's VerifiableProducer in the background, ``throughput`` records a
    second (values "0", "1", ...; keys "0".."repeating_keys-1" round and round
    if given) until :meth:`stop` (SIGTERM: it stops sending, closes the
    producer, which waits for the answers of what it sent, and exits)."""

    main_class = VERIFIABLE_PRODUCER

    def __init__(self, bootstrap_servers: str, topic: str, *, throughput: int, label: str = "producer",
                 repeating_keys: int | None = None, acks: str = "all"):
        args = ["--bootstrap-server", bootstrap_servers, "--topic", topic, "--throughput", str(throughput),
                "--acks", "-1" if acks == "all" else acks]
        if repeating_keys is not None:
            args += ["--repeating-keys", str(repeating_keys)]
        super().__init__(args, label)

    def acked(self) -> dict[tuple[str, int], list[int]]:
        """Acknowledged offsets per partition so far."""
        acked: dict[tuple[str, int], list[int]] = {}
        for event in self.events("producer_send_success"):
            acked.setdefault((event["topic"], int(event["partition"])), []).append(int(event["offset"]))
        return acked

    def failures(self) -> list[dict]:
        return self.events("producer_send_error")


def verifiable_produce(bootstrap_servers: str, topic: str, count: int, *, repeating_keys: int | None = None,
                       value_prefix: int | None = None, throughput: int = -1, acks: str = "all",
                       timeout_s: float = 120.0) -> dict[tuple[str, int], list[int]]:
    """Kafka's VerifiableProducer: ``count`` records (values "0".."count-1",
    keys "0".."repeating_keys-1" round and round if given); returns the
    acknowledged offsets per partition. JavaToolError unless every record was
    acknowledged."""
    args = ["--bootstrap-server", bootstrap_servers, "--topic", topic, "--max-messages", str(count),
            "--throughput", str(throughput), "--acks", "-1" if acks == "all" else acks]
    if repeating_keys is not None:
        args += ["--repeating-keys", str(repeating_keys)]
    if value_prefix is not None:
        args += ["--value-prefix", str(value_prefix)]
    result = java_tools.run_tool(VERIFIABLE_PRODUCER, *args, timeout_s=timeout_s, kafka4=True)
    acked: dict[tuple[str, int], list[int]] = {}
    failed = []
    for line in result.stdout.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if event.get("name") == "producer_send_success":
            acked.setdefault((event["topic"], int(event["partition"])), []).append(int(event["offset"]))
        elif event.get("name") == "producer_send_error":
            failed.append(event)
    if failed or sum(map(len, acked.values())) != count:
        raise java_tools._failure(VERIFIABLE_PRODUCER, f"had {sum(map(len, acked.values()))} of {count} records "
                                  f"acknowledged ({len(failed)} failed sends) on {topic!r}",
                                  result.stdout, result.stderr, args)
    return acked


# ------------------------------------------------------------ AssignmentReporter
def compiled_classes(source: Path, main: str) -> str:
    """The directory of ``source`` (a class of ours, ``main`` its class)
    compiled against the Kafka 4.x jars into ``<cache>/test-classes/``, once
    per source version."""
    from zkcoord.local.legacy import find_javac

    classpath = jars.kafka4_distribution().classpath
    digest = hashlib.sha256(source.read_bytes() + classpath.encode()).hexdigest()[:12]
    root = jars.cache_dir() / "test-classes"
    classes = root / f"{source.stem.lower()}-{digest}"
    if (classes / f"{main}.class").exists():
        return str(classes)
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (classes / f"{main}.class").exists():
            partial = classes.with_name(classes.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir()
            proc = subprocess.run([find_javac(), "-nowarn", "-Xlint:none", "-cp", classpath, "-d", str(partial),
                                   str(source)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise JavaToolError(f"javac could not compile {source}:\n{proc.stdout}{proc.stderr}")
            partial.rename(classes)
    return str(classes)


def reporter_classes() -> str:
    """The directory of the compiled AssignmentReporter."""
    return compiled_classes(REPORTER_SOURCE, REPORTER_MAIN)


class AssignmentReporterProcess(JsonLinesProcess):
    """Our AssignmentReporter (see its source) in ``group`` on ``topics``,
    with ``consumer_properties`` (e.g. :func:`consumer_protocol`);
    ``auto.offset.reset`` earliest unless given. Events: ``started``,
    ``assigned`` / ``revoked`` / ``lost`` (member id, epoch, partitions),
    ``record``, ``committed``, ``error``, ``stopped``."""

    main_class = REPORTER_MAIN

    def __init__(self, bootstrap_servers: str, topics: str | Sequence[str], group: str, *, label: str,
                 consumer_properties: Mapping[str, object] | None = None):
        topics = [topics] if isinstance(topics, str) else list(topics)
        properties = {"bootstrap.servers": bootstrap_servers, "group.id": group, "auto.offset.reset": "earliest",
                      "client.id": label, **(consumer_properties or {})}
        config = _config_file(properties)
        super().__init__([str(config), ",".join(topics)], label, classpath_first=reporter_classes(), files=[config])
        self.group = group

    def member_id(self) -> str | None:
        """Its member id as its last assignment callback saw it."""
        ids = [e["member_id"] for e in self.events() if e["event"] in ("assigned", "revoked", "lost")]
        return ids[-1] if ids else None

    def changes(self) -> list[AssignmentChange]:
        """Its assignment changes (member: its member id)."""
        return [AssignmentChange(e["member_id"] or self.label, e["event"], int(e["ts"]), _partitions(e["partitions"]))
                for e in self.events() if e["event"] in ("assigned", "revoked", "lost")]

    def assignment(self) -> frozenset[tuple[str, int]]:
        held: set[tuple[str, int]] = set()
        for change in self.changes():
            held = held | change.partitions if change.kind == "assigned" else held - change.partitions
        return frozenset(held)

    def consumed_offsets(self) -> dict[tuple[str, int], set[int]]:
        consumed: dict[tuple[str, int], set[int]] = {}
        for event in self.events("record"):
            consumed.setdefault((event["topic"], int(event["partition"])), set()).add(int(event["offset"]))
        return consumed

    def errors(self) -> list[str]:
        return [e["error"] for e in self.events("error")]


# ------------------------------------------------------- kafka-consumer-groups 4.x
@dataclass(frozen=True)
class ConsumerMemberRow:
    """A row of Kafka 4.x's ``--describe --members --verbose`` of a consumer
    group (epochs None where it prints ``-``)."""

    group: str
    member_id: str
    host: str
    client_id: str
    partitions: int
    current_epoch: int | None
    current_assignment: frozenset[tuple[str, int]]
    target_epoch: int | None
    target_assignment: frozenset[tuple[str, int]]


def parse_assignment(text: str) -> frozenset[tuple[str, int]]:
    """``t:0,1;u:2`` -> {("t", 0), ("t", 1), ("u", 2)}; ``-`` -> empty."""
    if text == "-":
        return frozenset()
    result = set()
    for part in text.split(";"):
        topic, _, partitions = part.rpartition(":")
        if not topic:
            raise ValueError(f"not an assignment: {text!r}")
        result.update((topic, int(p)) for p in partitions.split(",") if p)
    return frozenset(result)


def parse_consumer_group_members(stdout: str) -> list[ConsumerMemberRow]:
    """Rows of ``--describe --members --verbose`` of a consumer group."""
    rows = []
    for r in java_tools._tables(stdout, ("GROUP", "CONSUMER-ID", "HOST")):
        if "CURRENT-EPOCH" not in r:
            raise JavaToolError(f"not a consumer group's --members --verbose table (columns {list(r)}):\n{stdout}")
        rows.append(ConsumerMemberRow(
            r["GROUP"], r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"], int(r["#PARTITIONS"]),
            java_tools._optional_int(r["CURRENT-EPOCH"]), parse_assignment(r["CURRENT-ASSIGNMENT"].strip()),
            java_tools._optional_int(r["TARGET-EPOCH"]), parse_assignment(r["TARGET-ASSIGNMENT"].strip())))
    return rows


def describe_consumer_group_members(bootstrap_servers: str, group: str, **options) -> list[ConsumerMemberRow]:
    """Kafka 4.x's ``--describe --members --verbose --group <group>``, parsed."""
    args = ("--describe", "--members", "--verbose", "--group", group)
    result = java_tools._checked(java_tools.consumer_groups(bootstrap_servers, *args, kafka4=True, **options), args)
    return parse_consumer_group_members(result.stdout)


def list_group_types(bootstrap_servers: str, group_type: str | None = None, **options) -> dict[str, str]:
    """Kafka 4.x's ``--list --type [<type>]``: group -> its type as printed
    (``Consumer``, ``Classic``, ...)."""
    args = ("--list", "--type", *((group_type,) if group_type else ()))
    result = java_tools._checked(java_tools.consumer_groups(bootstrap_servers, *args, kafka4=True, **options), args)
    return {r["GROUP"]: r["TYPE"].strip() for r in java_tools._tables(result.stdout, ("GROUP", "TYPE"))}
