"""Stock clients as processes, for fault tests checked as Kafka's system tests check them.

Owns :class:`StockClients`: the consumers and producers of one group and
topic, each a process of its own (so a test can stop it cleanly with SIGTERM
or kill it with SIGKILL), each printing one JSON event a line, collected as
they come and copied to a log directory:

* Kafka's own ``org.apache.kafka.tools.VerifiableConsumer`` (the consumer of
  Kafka's system tests, ``tests/kafkatest/services/verifiable_consumer.py``),
  from the Kafka 4.4 jars (both group protocols: ``classic`` and
  ``consumer``, KIP-848) or from the sandbox's Kafka 3.9 jars
  (``kafka4=False``; kafka-tools since 3.5, the classic protocol);
  :meth:`StockClients.start_java`;
* a librdkafka consumer (confluent-kafka) printing the same events
  (:mod:`tests.support.rdkafka_verifiable`): :meth:`StockClients.start_rdkafka`;
* Kafka's ``org.apache.kafka.tools.VerifiableProducer`` with ``acks=all``,
  ``producer_send_success`` for each acknowledged record:
  :meth:`StockClients.start_producer`.

A consumer is started under a *label* (``c1``); each start is a new
incarnation (``c1#0``, ``c1#1``, ...) with the settings of the first
(:meth:`StockClients.restart`): a static member restarted keeps its
``group.instance.id``. :meth:`StockClients.stop` ends one with SIGTERM (it
commits what it consumed, leaves the group and exits: a clean bounce),
:meth:`StockClients.kill` with SIGKILL (no commit, no leave, no callback: a
hard bounce); the moment each one is known dead is recorded, and
:meth:`StockClients.check` hands everything to
:func:`tests.faults.stock_checker.check_stock`.

Every event's ``timestamp`` is the client's wall clock in milliseconds
(``System.currentTimeMillis()`` in Kafka's tools; ``time.time()`` in
librdkafka's script and here): one clock for every process of the machine.

The log directory holds ``<member>.jsonl`` (each process's stdout, as it
printed it), ``<member>.stderr`` and ``members.jsonl`` (one line per
process start and end: :func:`tests.faults.stock_checker.load_dir` reads
the whole back). Every process carries the test-process marker
(``.ci/run``'s ``pkill -f`` finds a stray one) and runs in a session of its
own; :meth:`StockClients.close` kills whatever is left.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from tests.faults.stock_checker import MemberRun, StockVerdict, check_stock
from tests.support import java_tools
from tests.support.daemons import process_marker
from zkcoord.local import jars

VERIFIABLE_CONSUMER = "org.apache.kafka.tools.VerifiableConsumer"
VERIFIABLE_PRODUCER = "org.apache.kafka.tools.VerifiableProducer"
RDKAFKA_SCRIPT = Path(__file__).with_name("rdkafka_verifiable.py")
RANGE_ASSIGNOR = "org.apache.kafka.clients.consumer.RangeAssignor"  # VerifiableConsumer's default (eager)
HEAP = ("-Xms32m", "-Xmx192m")
STOP_TIMEOUT_S = 60.0  # a clean close: a commit, a leave (Kafka's default close time-out is 30 s)
WAIT_S = 120.0

TopicPartition = tuple[str, int]


def now_ms() -> int:
    return int(time.time() * 1000)


def _tps(items) -> frozenset[TopicPartition]:
    return frozenset((p["topic"], int(p["partition"])) for p in items)


class ClientProcess:
    """One client process printing JSON events (see the module docstring);
    ``kind`` is ``consumer`` or ``producer``."""

    def __init__(self, member: str, kind: str, argv: list[str], log_dir: Path, client: str,
                 env: Mapping[str, str] | None = None):
        self.member, self.kind, self.argv, self.log_dir, self.client = member, kind, argv, log_dir, client
        self.env = dict(env) if env is not None else None
        self.file = member.replace("#", "-") + ".jsonl"
        self.proc: subprocess.Popen | None = None
        self.started_ms: int | None = None
        self.ended_ms: int | None = None
        self.end: str | None = None
        self._events: list[dict] = []
        self._changed = threading.Condition()
        self._readers: list[threading.Thread] = []
        self._ending = threading.Lock()

    # -- life
    def start(self) -> ClientProcess:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        stderr = open(self.log_dir / (self.file[:-len(".jsonl")] + ".stderr"), "ab")
        try:
            self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr,
                                         env=self.env, start_new_session=True)
        finally:
            stderr.close()
        self.started_ms = now_ms()
        self._life()
        reader = threading.Thread(target=self._read, daemon=True, name=f"{self.member}-out")
        reader.start()
        self._readers = [reader]
        return self

    def _life(self) -> None:
        with open(self.log_dir / "members.jsonl", "a") as handle:
            handle.write(json.dumps({"member": self.member, "kind": self.kind, "file": self.file,
                                     "client": self.client, "pid": self.proc.pid, "started_ms": self.started_ms,
                                     "ended_ms": self.ended_ms, "end": self.end}) + "\n")

    def _read(self) -> None:
        with open(self.log_dir / self.file, "ab") as copy:
            for raw in self.proc.stdout:
                copy.write(raw)
                copy.flush()
                try:
                    event = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    with self._changed:
                        self._events.append(event)
                        self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _ended(self, how: str) -> None:
        with self._ending:
            if self.end is None:
                self.ended_ms, self.end = now_ms(), how
                self._life()
        for reader in self._readers:
            reader.join(10)

    def refresh(self) -> None:
        """Record an exit nobody asked for (``died``) once it happened."""
        if self.proc is not None and self.end is None and self.proc.poll() is not None:
            self._ended("died")

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait: a clean end; its exit code (Java exits 143 on
        SIGTERM after its shutdown hook ran). Killed, and AssertionError,
        if it does not exit within ``timeout_s``."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"{self.member} did not exit within {timeout_s:g} s of SIGTERM (killed); "
                                     f"last events: {self.events()[-5:]}") from None
            self._ended("clean")
        else:
            self.refresh()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL and reap (idempotent): a hard end."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
            self._ended("killed")
        else:
            self.refresh()

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    # -- what it printed
    def events(self, name: str | None = None) -> list[dict]:
        with self._changed:
            return [e for e in self._events if name is None or e.get("name") == name]

    def wait_until(self, condition: Callable[[], object], what: str, timeout_s: float = WAIT_S):
        """Wait until ``condition()`` is truthy (checked at each event and
        every half second); AssertionError naming ``what`` if the process
        ends or ``timeout_s`` passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = condition()
            if value:
                return value
            if not self.alive() and not any(r.is_alive() for r in self._readers):
                raise AssertionError(f"{self.member} exited ({self.proc.returncode}) before {what}; "
                                     f"stderr: {self.stderr_tail()}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{self.member}: not within {timeout_s:g} s: {what}")
            with self._changed:
                self._changed.wait(min(remaining, 0.5))

    def stderr_tail(self, lines: int = 15) -> str:
        path = self.log_dir / (self.file[:-len(".jsonl")] + ".stderr")
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def assignment(self) -> frozenset[TopicPartition]:
        """What it holds now by its callbacks (nothing once it ended)."""
        if self.end is not None:
            return frozenset()
        held: set[TopicPartition] = set()
        for event in self.events():
            if event.get("name") == "partitions_assigned":
                held |= _tps(event["partitions"])
            elif event.get("name") in ("partitions_revoked", "partitions_lost"):
                held -= _tps(event["partitions"])
        return frozenset(held)

    def consumed_count(self) -> int:
        return sum(int(s["count"]) for e in self.events("records_consumed") for s in e["partitions"])

    def run(self) -> MemberRun:
        self.refresh()
        return MemberRun(self.member, tuple(self.events()), self.ended_ms, self.end, self.client)


class StockClients:
    """The stock clients of one group on one topic (see the module
    docstring). ``bootstrap`` may be changed between starts (a daemon
    restarted gets new gateway ports); ``classic_properties`` are consumer
    settings for every classic member (session and heartbeat), over which
    each start's own go; ``partitions`` are the topic's (what
    :meth:`wait_balanced` waits for by default)."""

    def __init__(self, bootstrap: str, topic: str, group: str, log_dir: Path, *,
                 partitions: Iterable[TopicPartition] = (), classic_properties: Mapping[str, object] | None = None):
        self.bootstrap, self.topic, self.group, self.log_dir = bootstrap, topic, group, Path(log_dir)
        self.partitions = frozenset(partitions)  # the topic's, for the waits' default
        self.classic_properties = dict(classic_properties or {})
        self.consumers: dict[str, list[ClientProcess]] = {}
        self.producers: list[ClientProcess] = []
        self._specs: dict[str, tuple[str, dict]] = {}

    def __enter__(self) -> StockClients:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- consumers
    def start_java(self, label: str, *, protocol: str = "classic", kafka4: bool = True, instance_id: str | None = None,
                   assignor: str | None = None, properties: Mapping[str, object] | None = None) -> ClientProcess:
        """Kafka's VerifiableConsumer ``label``: ``protocol`` ``classic``
        (``assignor`` a strategy class, RangeAssignor by default) or
        ``consumer`` (``assignor`` a server-side assignor name); Kafka 4.4's
        tool, or 3.9's with ``kafka4=False``; ``instance_id``: a static
        member; ``properties``: more consumer settings."""
        return self._start(label, "java", dict(protocol=protocol, kafka4=kafka4, instance_id=instance_id,
                                               assignor=assignor, properties=dict(properties or {})))

    def start_rdkafka(self, label: str, *, protocol: str = "classic", instance_id: str | None = None,
                      assignor: str | None = None, properties: Mapping[str, object] | None = None) -> ClientProcess:
        """librdkafka's consumer ``label`` (:mod:`tests.support.rdkafka_verifiable`):
        ``assignor`` is ``partition.assignment.strategy`` (classic, e.g.
        ``range``, ``cooperative-sticky``) or ``group.remote.assignor``
        (consumer); ``properties`` are librdkafka settings."""
        return self._start(label, "rdkafka", dict(protocol=protocol, instance_id=instance_id, assignor=assignor,
                                                  properties=dict(properties or {})))

    def _start(self, label: str, kind: str, spec: dict) -> ClientProcess:
        if label in self._specs:
            raise ValueError(f"consumer {label!r} exists; restart() starts its next incarnation")
        self._specs[label] = (kind, spec)
        self.consumers[label] = []
        return self.restart(label)

    def restart(self, label: str) -> ClientProcess:
        """A new incarnation of consumer ``label``, with its settings; the
        previous one must have ended (:meth:`stop` or :meth:`kill`)."""
        kind, spec = self._specs[label]
        previous = self.consumers[label]
        if previous and previous[-1].end is None and previous[-1].alive():
            raise ValueError(f"{previous[-1].member} is still running")
        member = f"{label}#{len(previous)}"
        argv, client, env = (self._java_argv if kind == "java" else self._rdkafka_argv)(label, member, spec)
        process = ClientProcess(member, "consumer", argv, self.log_dir, client, env).start()
        previous.append(process)
        return process

    def _properties(self, label: str, spec: dict) -> dict:
        props: dict[str, object] = {"client.id": label}
        if spec["protocol"] == "classic":
            props.update(self.classic_properties)
        props.update(spec["properties"])
        return props

    def _java_argv(self, label: str, member: str, spec: dict):
        kafka4 = spec["kafka4"]
        version = (jars.kafka4_distribution() if kafka4 else jars.kafka_distribution()).version
        config = self.log_dir / (member.replace("#", "-") + ".properties")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        config.write_text("".join(f"{k}={v}\n" for k, v in self._properties(label, spec).items()))
        args = ["--bootstrap-server", self.bootstrap, "--topic", self.topic, "--group-id", self.group,
                "--group-protocol", spec["protocol"], "--reset-policy", "earliest",
                "--command-config" if kafka4 else "--consumer.config", str(config)]
        if spec["protocol"] == "classic":
            args += ["--assignment-strategy", spec["assignor"] or RANGE_ASSIGNOR]
        elif spec["assignor"]:
            args += ["--group-remote-assignor", spec["assignor"]]
        if spec["instance_id"]:
            args += ["--group-instance-id", spec["instance_id"]]
        argv = java_tools.java_command(VERIFIABLE_CONSUMER, *args, heap=HEAP, kafka4=kafka4)
        return argv, f"java-{version}", java_tools._environment()

    def _rdkafka_argv(self, label: str, member: str, spec: dict):
        import confluent_kafka

        args = ["--bootstrap-server", self.bootstrap, "--topic", self.topic, "--group-id", self.group,
                "--group-protocol", spec["protocol"]]
        if spec["assignor"]:
            args += ["--assignment-strategy" if spec["protocol"] == "classic" else "--group-remote-assignor",
                     spec["assignor"]]
        if spec["instance_id"]:
            args += ["--group-instance-id", spec["instance_id"]]
        for key, value in self._properties(label, spec).items():
            if spec["protocol"] == "consumer" and key in ("session.timeout.ms", "heartbeat.interval.ms"):
                continue  # the coordinator's to say with the consumer protocol (librdkafka refuses them)
            args += ["--property", f"{key}={value}"]
        argv = [sys.executable, "-X", process_marker(), str(RDKAFKA_SCRIPT), *args]
        return argv, f"librdkafka-{confluent_kafka.libversion()[0]}", None

    def settings(self, label: str) -> tuple[str, dict]:
        """How consumer ``label`` is started: (``java`` or ``rdkafka``, its settings)."""
        kind, spec = self._specs[label]
        return kind, dict(spec)

    def current(self, label: str) -> ClientProcess:
        return self.consumers[label][-1]

    def stop(self, label: str, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM to ``label``'s running incarnation (a clean bounce's first half)."""
        return self.current(label).stop(timeout_s)

    def kill(self, label: str) -> None:
        """SIGKILL to ``label``'s running incarnation (a hard bounce's first half)."""
        self.current(label).kill()

    def live(self) -> list[ClientProcess]:
        """The running incarnations (an exit nobody asked for is recorded)."""
        found = []
        for incarnations in self.consumers.values():
            process = incarnations[-1]
            process.refresh()
            if process.end is None:
                found.append(process)
        return found

    def died(self) -> list[str]:
        """Incarnations that exited by themselves."""
        self.live()
        return [p.member for ps in self.consumers.values() for p in ps if p.end == "died"]

    # -- the producer
    def start_producer(self, throughput: int, *, kafka4: bool = True, repeating_keys: int | None = 64,
                       properties: Mapping[str, object] | None = None) -> ClientProcess:
        """Kafka's VerifiableProducer, ``acks=all``, ``throughput`` records a
        second (keys ``0..repeating_keys-1`` round and round: every partition
        gets records) until :meth:`stop_producer`."""
        version = (jars.kafka4_distribution() if kafka4 else jars.kafka_distribution()).version
        member = f"producer#{len(self.producers)}"
        args = ["--bootstrap-server", self.bootstrap, "--topic", self.topic, "--throughput", str(throughput),
                "--acks", "-1"]
        if repeating_keys:
            args += ["--repeating-keys", str(repeating_keys)]
        if properties:
            config = self.log_dir / (member.replace("#", "-") + ".properties")
            self.log_dir.mkdir(parents=True, exist_ok=True)
            config.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
            args += ["--command-config" if kafka4 else "--producer.config", str(config)]
        argv = java_tools.java_command(VERIFIABLE_PRODUCER, *args, heap=HEAP, kafka4=kafka4)
        process = ClientProcess(member, "producer", argv, self.log_dir, f"java-{version}",
                                java_tools._environment()).start()
        self.producers.append(process)
        return process

    def stop_producer(self) -> None:
        """SIGTERM to the producers: each stops sending, waits for the
        answers of what it sent, prints its ``tool_data`` and exits."""
        for producer in self.producers:
            producer.stop()

    def acked(self) -> dict[TopicPartition, set[int]]:
        found: dict[TopicPartition, set[int]] = {}
        for producer in self.producers:
            for e in producer.events("producer_send_success"):
                found.setdefault((e["topic"], int(e["partition"])), set()).add(int(e["offset"]))
        return found

    def acked_count(self) -> int:
        return sum(map(len, self.acked().values()))

    def send_errors(self) -> list[dict]:
        return [e for p in self.producers for e in p.events("producer_send_error")]

    # -- waits (Kafka's await_all_members / await_consumed_messages)
    def holdings(self) -> dict[str, frozenset[TopicPartition]]:
        return {p.member: p.assignment() for p in self.live()}

    def balanced(self, partitions: Iterable[TopicPartition]) -> bool:
        """Every live member holds part of ``partitions`` and together
        they hold each exactly once (by their own callbacks)."""
        partitions = frozenset(partitions)
        held = list(self.holdings().values())
        if not held or sum(map(len, held)) != len(partitions) or frozenset().union(*held) != partitions:
            return False
        return all(held) or len(held) > len(partitions)

    def wait_balanced(self, what: str, partitions: Iterable[TopicPartition] | None = None,
                      timeout_s: float = WAIT_S) -> None:
        partitions = self.partitions if partitions is None else frozenset(partitions)
        self._wait(lambda: self.balanced(partitions), f"{what}: the live members holding each partition once "
                                                      f"(holding {self.holdings()})", timeout_s)

    def consumed_total(self) -> int:
        return sum(p.consumed_count() for ps in self.consumers.values() for p in ps)

    def wait_consumed_more(self, count: int, what: str, timeout_s: float = WAIT_S) -> None:
        """Until the consumers consumed ``count`` records more than now."""
        target = self.consumed_total() + count
        self._wait(lambda: self.consumed_total() >= target, f"{what}: {count} more records consumed", timeout_s)

    def missing(self) -> dict[TopicPartition, set[int]]:
        """Acknowledged records nobody consumed yet."""
        seen: dict[TopicPartition, set[int]] = {}
        for ps in self.consumers.values():
            for p in ps:
                for e in p.events("records_consumed"):
                    for s in e["partitions"]:
                        seen.setdefault((s["topic"], int(s["partition"])), set()).update(
                            range(int(s["minOffset"]), int(s["maxOffset"]) + 1))
        return {tp: gap for tp, offsets in self.acked().items() if (gap := offsets - seen.get(tp, set()))}

    def wait_all_consumed(self, what: str, timeout_s: float = WAIT_S) -> None:
        self._wait(lambda: not self.missing(), f"{what}: every acknowledged record consumed", timeout_s)

    def _wait(self, condition: Callable[[], bool], what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            died = self.died()
            if died:
                raise AssertionError(f"waiting for {what}: {died} exited by themselves; stderr of the first:\n"
                                     f"{self._find(died[0]).stderr_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout_s:g} s: {what}")
            time.sleep(0.2)

    def _find(self, member: str) -> ClientProcess:
        return next(p for ps in self.consumers.values() for p in ps if p.member == member)

    # -- the verdicts
    def runs(self) -> list[MemberRun]:
        return [p.run() for ps in self.consumers.values() for p in ps]

    def producer_events(self) -> list[dict]:
        return [e for p in self.producers for e in p.events()]

    def check(self, *, final_committed: Mapping[TopicPartition, int] | None = None,
              allowed_duplicates: Iterable[str] = ("hard-kill",)) -> StockVerdict:
        return check_stock(self.runs(), self.producer_events(), final_committed=final_committed,
                           allowed_duplicates=allowed_duplicates)

    def stop_all(self) -> None:
        """Every running consumer stopped cleanly, then the producers."""
        for process in self.live():
            process.stop()
        for producer in self.producers:
            producer.stop()

    def close(self) -> None:
        """Kill whatever still runs (a failed test's leftovers)."""
        for ps in self.consumers.values():
            for p in ps:
                p.kill()
        for p in self.producers:
            p.kill()
