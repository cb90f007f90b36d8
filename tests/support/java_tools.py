"""Kafka's own Java clients and command-line tools, run from the sandbox's jars.

This module owns running the tools of the Kafka 3.9 jar bundle
(:func:`zkcoord.local.jars.kafka_distribution`) as subprocesses against any
bootstrap address, and parsing what they print:

* :func:`produce`: ``kafka.tools.ConsoleProducer`` (Scala, in ``kafka_2.13``;
  in 3.9 it has not moved to ``kafka-tools`` yet), given key/value records,
  ``acks=all``; fails unless every record was acknowledged.
* :func:`consume` and :class:`ConsoleConsumerProcess`:
  ``org.apache.kafka.tools.consumer.ConsoleConsumer``, printing timestamp,
  partition, offset, key and value of each record, parsed into
  :class:`ConsumedRecord` s; blocking, or in the background for tests that
  run several members of one group at once.
* :func:`producer_performance` / :func:`transactional_produce`:
  ``org.apache.kafka.tools.ProducerPerformance``, summary parsed into
  :class:`ProducerPerfResult` (records/sec, MB/sec, latencies, percentiles).
* :func:`consumer_performance`: ``org.apache.kafka.tools.ConsumerPerformance``,
  result row parsed into :class:`ConsumerPerfResult`.
* :func:`consumer_groups` (``kafka-consumer-groups``:
  ``org.apache.kafka.tools.consumer.group.ConsumerGroupCommand``) and parsers
  of its ``--list``, ``--describe`` (offsets) and ``--describe --members``
  output.

With ``kafka4=True`` the same functions run Kafka 4.x's clients and tools
(:func:`zkcoord.local.jars.kafka4_distribution`, logging through log4j2 with
the same levels; ConsoleProducer is ``org.apache.kafka.tools.ConsoleProducer``
there, and the console tools' ``--property`` / ``--consumer-property`` /
``--producer-property`` are ``--formatter-property`` / ``--reader-property``
/ ``--command-property``): with ``consumer_properties=
java4_tools.consumer_protocol()`` a member of KIP-848's consumer protocol.
Kafka 4.x's own Verifiable* clients and a consumer reporting its callbacks
are in :mod:`tests.support.java4_tools`.

Every JVM carries ``-Dzkcoord.marker=zkcoord-test-process=<state dir>``
(:func:`tests.support.daemons.process_marker`) so ``.ci/run``'s ``pkill -f``
finds strays; runs in its own session (a Ctrl-C reaches the test, which stops
it in order); logs through reload4j (the bundle's log4j 1.x, which ships no
``log4j.properties``) with a configuration of ours: root logger WARN, to
stderr, so stdout holds only the tool's own output. The JVM's locale is fixed
to en_US (the perf tools format numbers with the default locale) and its
default charset to UTF-8.

What the tools do that one would not guess (Kafka 3.9.2, checked):

* ConsoleProducer without ``--sync`` exits 0 even when sends failed (it only
  logs ``ERROR Error when sending message ...`` from ``ErrorLoggingCallback``);
  :func:`produce` treats such a line as a failure.
* ConsoleConsumer exits 0 when ``--timeout-ms`` passes before
  ``--max-messages`` records came (it logs ``ERROR Error processing message,
  terminating consumer process`` with a ``TimeoutException``); :func:`consume`
  checks the count itself.
* ProducerPerformance exits 0 when sends failed: they are left out of
  "records sent" (and their stack traces go to stderr); the runners check the
  count. Its summary line is on stdout.
* ConsumerPerformance exits 0 after ``--timeout`` with fewer messages than
  asked, printing ``WARNING: Exiting before consuming the expected number of
  messages`` on stdout; the runner checks the count.
* ``kafka-consumer-groups --describe`` of an unknown group prints ``Error:
  Consumer group 'g' does not exist.`` on *stdout* and exits 0; the parsers
  raise on ``Error:`` lines. "has no active members" goes to stderr. Its
  tables size their columns to the longest value, so fields are split on
  whitespace.

Failures raise :class:`JavaToolError` (an AssertionError) naming the tool and
holding the last lines of its stderr and stdout.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from tests.support.daemons import process_marker
from zkcoord.local import jars

CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
CONSOLE_PRODUCER = "kafka.tools.ConsoleProducer"
CONSOLE_PRODUCER_4 = "org.apache.kafka.tools.ConsoleProducer"  # Kafka 4.x: moved to kafka-tools, in Java
PRODUCER_PERFORMANCE = "org.apache.kafka.tools.ProducerPerformance"
CONSUMER_PERFORMANCE = "org.apache.kafka.tools.ConsumerPerformance"
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"

HEAP = ("-Xms32m", "-Xmx256m")
# Every JVM: fixed locale (perf tools print "%.2f" in the default locale) and charset.
JVM_COMMON = ("-Djava.awt.headless=true", "-Dfile.encoding=UTF-8", "-Duser.language=en", "-Duser.country=US")
# Short-lived tools start about a third faster with C1 only and the serial
# collector; benchmarks run with the JVM's defaults (C2, G1) instead.
FAST_START = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")

# What stands for a null key or value on the console tools' lines
# (ConsoleProducer ``null.marker``, ConsoleConsumer ``null.literal``).
NULL_MARKER = "<zkcoord-null>"
SEPARATOR = "\t"  # ConsoleProducer/ConsoleConsumer key.separator (their default)

DEFAULT_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
TAIL_LINES = 25

LOG4J_PROPERTIES = """\
# Kafka tools' logging (reload4j): warnings and errors only, on stderr.
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.Target=System.err
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


class JavaToolError(AssertionError):
    """A Kafka tool failed, timed out, or printed what we cannot parse; the
    message names the tool and holds its last output lines."""


class ToolResult(NamedTuple):
    """A finished tool run; unpacks as ``(returncode, stdout, stderr)``."""

    returncode: int
    stdout: str
    stderr: str


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of ``text``, Java stack frames left out (the
    exception lines say what happened)."""
    kept = [line for line in text.rstrip().splitlines()
            if not line.startswith("\tat ") and not re.match(r"^\t\.\.\. \d+ more$", line)]
    return "\n".join(kept[-lines:]) if kept else "(nothing)"


def _short_main(main_class: str) -> str:
    return main_class.rsplit(".", 1)[-1]


def _failure(main_class: str, what: str, stdout: str, stderr: str, args: Sequence[str] = ()) -> JavaToolError:
    return JavaToolError(
        f"{_short_main(main_class)} {what}\n"
        f"  command: {main_class} {shlex.join(args)}\n"
        f"  last stderr lines:\n{_indent(_tail(stderr))}\n"
        f"  last stdout lines:\n{_indent(_tail(stdout))}"
    )


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())


# ------------------------------------------------------------------ the JVM
@functools.cache
def _work_dir() -> Path:
    """A private directory for this Python process's tool files, removed at exit."""
    path = Path(tempfile.mkdtemp(prefix="zkcoord-java-tools-"))
    atexit.register(shutil.rmtree, path, True)
    return path


@functools.cache
def log4j_config() -> Path:
    """The ``log4j.properties`` every tool JVM runs with (root WARN to stderr),
    written once per Python process into a private temporary directory."""
    path = _work_dir() / "log4j.properties"
    path.write_text(LOG4J_PROPERTIES)
    return path


@functools.cache
def log4j2_config() -> Path:
    """The same for Kafka 4.x's tools, which log with log4j2."""
    from zkcoord.local.config_files import TOOLS_LOG4J2_XML

    path = _work_dir() / "log4j2.xml"
    path.write_text(TOOLS_LOG4J2_XML)
    return path


@functools.cache
def _classpath(kafka4: bool = False) -> str:
    return (jars.kafka4_distribution() if kafka4 else jars.kafka_distribution()).classpath


def java_command(main_class: str, *args: str, jvm_args: Sequence[str] = (), heap: Sequence[str] = HEAP,
                 fast_start: bool = True, kafka4: bool = False, classpath_first: str | None = None) -> list[str]:
    """The ``java`` command line running ``main_class`` of the Kafka jars with
    ``args``: small heap, the test-process marker (``-Dzkcoord.marker=...``),
    our quiet log4j configuration, en_US/UTF-8; ``fast_start`` (C1 only,
    serial GC) for short tool runs, off for benchmarks. ``jvm_args`` go
    before the main class. ``kafka4``: Kafka 4.x's jars and log4j2;
    ``classpath_first``: classes of ours before the jars."""
    logging = (f"-Dlog4j2.configurationFile=file:{log4j2_config()}" if kafka4
               else f"-Dlog4j.configuration=file:{log4j_config()}")
    classpath = _classpath(kafka4) if classpath_first is None else f"{classpath_first}{os.pathsep}{_classpath(kafka4)}"
    return [jars.find_java(), *heap, *(FAST_START if fast_start else ()), *JVM_COMMON,
            f"-Dzkcoord.marker={process_marker()}", logging, *jvm_args, "-cp", classpath, main_class, *args]


def _environment() -> dict[str, str]:
    """The caller's environment without what would change the JVM or the
    tool's logging behind our back."""
    dropped = {"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH"}
    return {k: v for k, v in os.environ.items() if k not in dropped}


def run_tool(main_class: str, *args: str, stdin: str | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
             check: bool = True, jvm_args: Sequence[str] = (), fast_start: bool = True,
             kafka4: bool = False) -> ToolResult:
    """Run ``main_class`` to its exit and return its exit code, stdout and
    stderr (UTF-8). ``stdin`` is fed to it (else it reads an empty stdin).
    :class:`JavaToolError` if it runs longer than ``timeout_s`` (it is then
    killed), or, with ``check``, if it exits non-zero. ``kafka4``: of Kafka 4.x's jars."""
    cmd = java_command(main_class, *args, jvm_args=jvm_args, fast_start=fast_start, kafka4=kafka4)
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_environment(), start_new_session=True)
    try:
        out, err = proc.communicate(None if stdin is None else stdin.encode(), timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise _failure(main_class, f"did not exit within {timeout_s:g} s (killed)",
                       out.decode(errors="replace"), err.decode(errors="replace"), args) from None
    except BaseException:  # KeyboardInterrupt and the like: leave no JVM behind
        proc.kill()
        proc.wait()
        raise
    result = ToolResult(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))
    if check and result.returncode != 0:
        raise _failure(main_class, f"exited with {result.returncode}", result.stdout, result.stderr, args)
    return result


@contextmanager
def _properties_file(properties: Mapping[str, object], base: Path | str | None = None) -> Iterator[Path | None]:
    """A temporary ``.properties`` file: ``base``'s lines, then ``properties``
    (later keys win in java.util.Properties); None when both are empty."""
    if not properties and base is None:
        yield None
        return
    lines = [Path(base).read_text()] if base is not None else []
    lines += [f"{key}={value}" for key, value in properties.items()]
    fd, name = tempfile.mkstemp(prefix="tool-", suffix=".properties", dir=_work_dir())
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        yield Path(name)
    finally:
        os.unlink(name)


# ----------------------------------------------------------- ConsoleProducer
def _check_text(what: str, text: str | None, separator_allowed: bool) -> None:
    if text is None:
        return
    if "\n" in text or "\r" in text:
        raise ValueError(f"{what} {text!r}: ConsoleProducer reads one record per line; no line breaks")
    if not separator_allowed and SEPARATOR in text:
        raise ValueError(f"{what} {text!r} holds the key separator {SEPARATOR!r}")
    if text == NULL_MARKER:
        raise ValueError(f"{what} {text!r} is the null marker itself")


def produce(bootstrap_servers: str, topic: str, records: Iterable[tuple[str | None, str | None]], *,
            producer_properties: Mapping[str, object] | None = None, sync: bool = False,
            timeout_s: float = DEFAULT_TIMEOUT_S, kafka4: bool = False) -> int:
    """Produce ``records`` ((key, value) pairs, None for null; UTF-8 text) to
    ``topic`` with ``kafka.tools.ConsoleProducer``, ``acks=all``; the default
    partitioner places them by key. Returns how many were produced.

    Raises :class:`JavaToolError` unless every record was acknowledged: the
    tool must exit 0 and log no failed send (without ``sync`` it exits 0
    even then). ``sync`` sends one record at a time (slow; the tool itself
    exits 1 on the first failure). A key may not hold a tab, neither key nor
    value a line break (ValueError). ``producer_properties`` are extra
    producer settings (``--producer-property k=v``)."""
    lines = []
    for key, value in records:
        _check_text("key", key, separator_allowed=False)
        _check_text("value", value, separator_allowed=True)
        lines.append(f"{NULL_MARKER if key is None else key}{SEPARATOR}{NULL_MARKER if value is None else value}\n")
    reader, command = ("--reader-property", "--command-property") if kafka4 else ("--property", "--producer-property")
    main_class = CONSOLE_PRODUCER_4 if kafka4 else CONSOLE_PRODUCER
    args = ["--bootstrap-server", bootstrap_servers, "--topic", topic,
            "--request-required-acks", "all", "--request-timeout-ms", "30000",
            reader, "parse.key=true", reader, f"key.separator={SEPARATOR}", reader, f"null.marker={NULL_MARKER}"]
    if sync:
        args.append("--sync")
    for key, value in (producer_properties or {}).items():
        args += [command, f"{key}={value}"]
    result = run_tool(main_class, *args, stdin="".join(lines), timeout_s=timeout_s, kafka4=kafka4)
    failed = [line for line in result.stderr.splitlines() if "Error when sending message" in line]
    if failed:
        raise _failure(main_class, f"failed to send {len(failed)} of {len(lines)} records to {topic!r}",
                       result.stdout, result.stderr, args)
    return len(lines)


# ----------------------------------------------------------- ConsoleConsumer
@dataclass(frozen=True)
class ConsumedRecord:
    """One record as ConsoleConsumer printed it (None: a null key/value;
    ``timestamp_ms`` None when the record has no timestamp)."""

    partition: int
    offset: int
    key: str | None
    value: str | None
    timestamp_ms: int | None
    timestamp_type: str  # "CreateTime", "LogAppendTime" or "NO_TIMESTAMP"


_TIMESTAMP = re.compile(r"^(CreateTime|LogAppendTime):(-?\d+)$")


def parse_console_record(line: str) -> ConsumedRecord:
    """Parse one line printed with :func:`console_consumer_args`' formatter
    settings (``CreateTime:<ms>\\tPartition:<p>\\tOffset:<o>\\t<key>\\t<value>``).
    ValueError when the line is not one."""
    fields = line.rstrip("\n").split(SEPARATOR, 4)
    if len(fields) != 5 or not fields[1].startswith("Partition:") or not fields[2].startswith("Offset:"):
        raise ValueError(f"not a ConsoleConsumer record line: {line!r}")
    stamp, part, off, key, value = fields
    match = _TIMESTAMP.match(stamp)
    if match:
        timestamp_type, timestamp_ms = match.group(1), int(match.group(2))
    elif stamp == "NO_TIMESTAMP":
        timestamp_type, timestamp_ms = stamp, None
    else:
        raise ValueError(f"not a ConsoleConsumer record line (timestamp {stamp!r}): {line!r}")
    return ConsumedRecord(partition=int(part.removeprefix("Partition:")), offset=int(off.removeprefix("Offset:")),
                          key=None if key == NULL_MARKER else key, value=None if value == NULL_MARKER else value,
                          timestamp_ms=timestamp_ms, timestamp_type=timestamp_type)


def console_consumer_args(bootstrap_servers: str, topic: str, *, group: str | None = None,
                          max_messages: int | None = None, timeout_ms: int | None = None,
                          from_beginning: bool = True, isolation_level: str | None = None,
                          client_id: str | None = None, partition: int | None = None,
                          offset: int | str | None = None,
                          consumer_properties: Mapping[str, object] | None = None,
                          kafka4: bool = False, include: str | None = None) -> list[str]:
    """ConsoleConsumer's arguments (``kafka4``: Kafka 4.x's option names): the formatter prints timestamp, partition,
    offset, key and value tab-separated with :data:`NULL_MARKER` for nulls
    (:func:`parse_console_record` reads them). ``timeout_ms`` None: no idle
    timeout; ``from_beginning`` applies when the group has no committed
    offset; ``isolation_level`` ``read_committed`` hides aborted and open
    transactions; ``partition``/``offset`` read one partition (``offset`` a
    number, ``earliest`` or ``latest``); ``consumer_properties`` are extra
    consumer settings (``--consumer-property k=v``); ``include``: a regex of
    topics to consume instead of ``topic`` (``--include``)."""
    formatter, command = ("--formatter-property", "--command-property") if kafka4 else ("--property",
                                                                                       "--consumer-property")
    args = ["--bootstrap-server", bootstrap_servers, *(["--include", include] if include else ["--topic", topic])]
    for setting in ("print.timestamp=true", "print.partition=true", "print.offset=true", "print.key=true",
                    "print.value=true", "print.headers=false", f"key.separator={SEPARATOR}",
                    f"null.literal={NULL_MARKER}"):
        args += [formatter, setting]
    if group is not None:
        args += ["--group", group]
    if max_messages is not None:
        args += ["--max-messages", str(max_messages)]
    if timeout_ms is not None:
        args += ["--timeout-ms", str(timeout_ms)]
    if from_beginning:
        args.append("--from-beginning")
    if isolation_level is not None:
        args += ["--isolation-level", isolation_level]
    if partition is not None:
        args += ["--partition", str(partition)]
    if offset is not None:
        args += ["--offset", str(offset)]
    properties = dict(consumer_properties or {})
    if client_id is not None:
        properties["client.id"] = client_id
    for key, value in properties.items():
        args += [command, f"{key}={value}"]
    return args


def _parse_records(stdout: str, main_args: Sequence[str], stderr: str) -> list[ConsumedRecord]:
    records = []
    for line in stdout.splitlines():
        try:
            records.append(parse_console_record(line))
        except ValueError as exc:
            raise _failure(CONSOLE_CONSUMER, f"printed a line we cannot parse: {exc}", stdout, stderr,
                           main_args) from None
    return records


def consume(bootstrap_servers: str, topic: str, *, group: str | None = None, max_messages: int | None = None,
            timeout_ms: int = 20_000, from_beginning: bool = True, isolation_level: str | None = None,
            client_id: str | None = None, partition: int | None = None, offset: int | str | None = None,
            consumer_properties: Mapping[str, object] | None = None, require_all: bool = True,
            timeout_s: float = DEFAULT_TIMEOUT_S, kafka4: bool = False) -> list[ConsumedRecord]:
    """Run ConsoleConsumer until it has ``max_messages`` records, or no record
    came for ``timeout_ms`` (also while joining the group), and return what it
    printed, in its order. With a ``group`` it commits on exit (auto-commit,
    on by default) and leaves the group. Raises :class:`JavaToolError` when
    the tool fails, or, with ``require_all`` and ``max_messages``, when fewer
    records came (the tool itself exits 0 then). Other options: see
    :func:`console_consumer_args`."""
    args = console_consumer_args(bootstrap_servers, topic, group=group, max_messages=max_messages,
                                 timeout_ms=timeout_ms, from_beginning=from_beginning,
                                 isolation_level=isolation_level, client_id=client_id, partition=partition,
                                 offset=offset, consumer_properties=consumer_properties, kafka4=kafka4)
    result = run_tool(CONSOLE_CONSUMER, *args, timeout_s=timeout_s, kafka4=kafka4)
    records = _parse_records(result.stdout, args, result.stderr)
    if require_all and max_messages is not None and len(records) < max_messages:
        raise _failure(CONSOLE_CONSUMER, f"got {len(records)} of {max_messages} records of {topic!r} "
                       f"(no record for {timeout_ms} ms)", result.stdout, result.stderr, args)
    return records


_LIVE: set[ConsoleConsumerProcess] = set()


@atexit.register
def _kill_leftovers() -> None:
    for process in list(_LIVE):
        process.kill()


class ConsoleConsumerProcess:
    """ConsoleConsumer running in the background, e.g. one of several members
    of a group. Its records are collected as it prints them.

    ``start()`` returns it; ``records()`` / ``wait_for_records()`` read what
    came so far; ``stop()`` (SIGTERM: the consumer commits and leaves its
    group), ``kill()`` (SIGKILL: no commit, no leave; the group waits for
    its session timeout) or ``wait()`` (it exits by itself, e.g. after
    ``max_messages``) end it. As a context manager it is started on entry
    and killed on exit unless it ended already. Arguments: see
    :func:`console_consumer_args` (``timeout_ms`` None by default: runs until
    stopped)."""

    def __init__(self, bootstrap_servers: str, topic: str, *, group: str | None = None,
                 max_messages: int | None = None, timeout_ms: int | None = None, from_beginning: bool = True,
                 isolation_level: str | None = None, client_id: str | None = None,
                 consumer_properties: Mapping[str, object] | None = None, kafka4: bool = False,
                 include: str | None = None):
        self.topic = topic
        self.group = group
        self.kafka4 = kafka4
        self.args = console_consumer_args(bootstrap_servers, topic, group=group, max_messages=max_messages,
                                          timeout_ms=timeout_ms, from_beginning=from_beginning,
                                          isolation_level=isolation_level, client_id=client_id,
                                          consumer_properties=consumer_properties, kafka4=kafka4,
                                          include=include)
        self.proc: subprocess.Popen | None = None
        self._records: list[ConsumedRecord] = []
        self._unparsed: list[str] = []
        self._stderr: deque[str] = deque(maxlen=400)
        self._changed = threading.Condition()
        self._readers: list[threading.Thread] = []

    # -- lifecycle
    def start(self) -> ConsoleConsumerProcess:
        """Start the JVM (it then joins the group in the background) and return self."""
        if self.proc is not None:
            raise RuntimeError("this ConsoleConsumerProcess was started already")
        self.proc = subprocess.Popen(java_command(CONSOLE_CONSUMER, *self.args, kafka4=self.kafka4),
                                     stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_environment(),
                                     start_new_session=True)
        _LIVE.add(self)
        self._readers = [threading.Thread(target=self._read_stdout, daemon=True, name=f"cc-out-{self.proc.pid}"),
                         threading.Thread(target=self._read_stderr, daemon=True, name=f"cc-err-{self.proc.pid}")]
        for reader in self._readers:
            reader.start()
        return self

    def __enter__(self) -> ConsoleConsumerProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc_info) -> None:
        self.kill()

    def _read_stdout(self) -> None:
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            with self._changed:
                try:
                    self._records.append(parse_console_record(line))
                except ValueError:
                    self._unparsed.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def _read_stderr(self) -> None:
        for raw in self.proc.stderr:
            self._stderr.append(raw.decode(errors="replace").rstrip("\n"))

    def _join_readers(self) -> None:
        for reader in self._readers:
            reader.join(10)

    # -- state
    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def records(self) -> list[ConsumedRecord]:
        """The records printed so far, in order."""
        with self._changed:
            return list(self._records)

    def unparsed_lines(self) -> list[str]:
        """Lines on its stdout that were not records (none expected)."""
        with self._changed:
            return list(self._unparsed)

    def stderr_tail(self, lines: int = TAIL_LINES) -> str:
        return "\n".join(list(self._stderr)[-lines:])

    def error(self, what: str) -> JavaToolError:
        """A :class:`JavaToolError` about this consumer, with its last output."""
        stdout = "\n".join(self.unparsed_lines() + [str(r) for r in self.records()[-5:]])
        return _failure(CONSOLE_CONSUMER, what, stdout, self.stderr_tail(), self.args)

    def wait_for_records(self, count: int, timeout_s: float = 60.0) -> list[ConsumedRecord]:
        """Block until at least ``count`` records came and return all so far;
        :class:`JavaToolError` if the JVM exits first or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while len(self._records) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if not self.alive() and not any(r.is_alive() for r in self._readers):
                    break
                self._changed.wait(min(remaining, 0.5))
            got = len(self._records)
            if got >= count:
                return list(self._records)
        state = f"exited with {self.proc.returncode}" if not self.alive() else f"still running after {timeout_s:g} s"
        raise self.error(f"has {got} of {count} records of {self.topic!r} (group {self.group!r}); it {state}")

    # -- ending it
    def wait(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> int:
        """Wait for it to exit by itself (``max_messages`` or ``timeout_ms``);
        its exit code. :class:`JavaToolError` if it is still running after
        ``timeout_s``."""
        try:
            code = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise self.error(f"did not exit by itself within {timeout_s:g} s") from None
        self._join_readers()
        _LIVE.discard(self)
        return code

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM: its shutdown hook wakes the consumer, which commits (with
        auto-commit) and leaves the group. Returns the exit code (143 after
        SIGTERM, or the code it exited with before); it is killed and
        :class:`JavaToolError` raised if it does not exit within ``timeout_s``."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise self.error(f"did not exit within {timeout_s:g} s of SIGTERM (killed)") from None
        self._join_readers()
        _LIVE.discard(self)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL (kill -9) and reap; nothing is committed, the group is not
        left. Idempotent."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT_S)
        self._join_readers()
        _LIVE.discard(self)


def start_console_consumer(bootstrap_servers: str, topic: str, **options) -> ConsoleConsumerProcess:
    """``ConsoleConsumerProcess(bootstrap_servers, topic, **options).start()``."""
    return ConsoleConsumerProcess(bootstrap_servers, topic, **options).start()


# ------------------------------------------------------- ProducerPerformance
@dataclass(frozen=True)
class ProducerPerfResult:
    """ProducerPerformance's final summary line (latencies in ms; NaN when
    nothing was sent)."""

    records_sent: int
    records_per_sec: float
    mb_per_sec: float
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: int
    p95_ms: int
    p99_ms: int
    p999_ms: int
    line: str


_PRODUCER_SUMMARY = re.compile(
    r"^(?P<sent>\d+) records sent, (?P<rps>\S+) records/sec \((?P<mbps>\S+) MB/sec\), "
    r"(?P<avg>\S+) ms avg latency, (?P<max>\S+) ms max latency, (?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, "
    r"(?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99\.9th\.$")


def parse_producer_performance(stdout: str) -> ProducerPerfResult:
    """The last summary line of ProducerPerformance's stdout, e.g. ``2000
    records sent, 4415.011038 records/sec (0.42 MB/sec), 232.67 ms avg
    latency, 296.00 ms max latency, 235 ms 50th, 282 ms 95th, 293 ms 99th,
    295 ms 99.9th.`` (the 5-second progress lines have no percentiles).
    ValueError when there is none."""
    for line in reversed(stdout.splitlines()):
        match = _PRODUCER_SUMMARY.match(line.strip())
        if match:
            g = match.groupdict()
            return ProducerPerfResult(int(g["sent"]), float(g["rps"]), float(g["mbps"]), float(g["avg"]),
                                      float(g["max"]), int(g["p50"]), int(g["p95"]), int(g["p99"]),
                                      int(g["p999"]), line.strip())
    raise ValueError("no ProducerPerformance summary line (... records sent, ... ms 99.9th.) in its output")


def producer_performance(bootstrap_servers: str, topic: str, num_records: int, *, record_size: int | None = 100,
                         payload_monotonic: bool = False, throughput: int = -1,
                         producer_properties: Mapping[str, object] | None = None,
                         transactional_id: str | None = None, transaction_duration_ms: int | None = None,
                         require_all: bool = True, fast_start: bool = False,
                         timeout_s: float = 300.0) -> ProducerPerfResult:
    """Run ProducerPerformance: ``num_records`` records of ``record_size``
    random bytes (or, with ``payload_monotonic``, the values "0", "1", ...;
    no keys) at up to ``throughput`` records/sec (-1: unthrottled), with
    ``acks=all`` unless ``producer_properties`` say otherwise
    (``--producer-props``; ``bootstrap.servers`` is set here). Transactions:
    ``transaction_duration_ms`` > 0 commits a transaction every that many ms
    (``transactional_id`` names the producer; the tool's default id if
    None). Returns the parsed summary; :class:`JavaToolError` when the tool
    fails or, with ``require_all``, fewer than ``num_records`` were
    acknowledged (it exits 0 then). ``fast_start`` off: C2 and G1, as for a
    benchmark."""
    props = {"bootstrap.servers": bootstrap_servers, "acks": "all", **(producer_properties or {})}
    args = ["--topic", topic, "--num-records", str(num_records), "--throughput", str(throughput)]
    if payload_monotonic:
        args.append("--payload-monotonic")
    elif record_size is not None:
        args += ["--record-size", str(record_size)]
    else:
        raise ValueError("give record_size or payload_monotonic")
    if transactional_id is not None:
        args += ["--transactional-id", transactional_id]
    if transaction_duration_ms is not None:
        args += ["--transaction-duration-ms", str(transaction_duration_ms)]
    args += ["--producer-props", *(f"{k}={v}" for k, v in props.items())]
    result = run_tool(PRODUCER_PERFORMANCE, *args, timeout_s=timeout_s, fast_start=fast_start)
    try:
        summary = parse_producer_performance(result.stdout)
    except ValueError as exc:
        raise _failure(PRODUCER_PERFORMANCE, str(exc), result.stdout, result.stderr, args) from None
    if require_all and summary.records_sent != num_records:
        raise _failure(PRODUCER_PERFORMANCE, f"had {summary.records_sent} of {num_records} records acknowledged",
                       result.stdout, result.stderr, args)
    return summary


def transactional_produce(bootstrap_servers: str, topic: str, num_records: int, transactional_id: str, *,
                          transaction_duration_ms: int = 100, payload_monotonic: bool = True,
                          record_size: int | None = None, throughput: int = -1,
                          producer_properties: Mapping[str, object] | None = None,
                          timeout_s: float = 300.0) -> ProducerPerfResult:
    """A transactional ProducerPerformance run: ``num_records`` records (by
    default the values "0".."N-1", so a ``read_committed`` consumer can check
    them) in transactions of ``transactional_id`` committed every
    ``transaction_duration_ms``. Exits 0 only when every transaction
    committed; all records must be acknowledged. Returns the summary."""
    if transaction_duration_ms <= 0:
        raise ValueError("transaction_duration_ms must be positive: 0 turns transactions off")
    return producer_performance(bootstrap_servers, topic, num_records, record_size=record_size,
                                payload_monotonic=payload_monotonic, throughput=throughput,
                                producer_properties=producer_properties, transactional_id=transactional_id,
                                transaction_duration_ms=transaction_duration_ms, fast_start=True,
                                timeout_s=timeout_s)


# ------------------------------------------------------- ConsumerPerformance
@dataclass(frozen=True)
class ConsumerPerfResult:
    """ConsumerPerformance's result row (its ``start.time, end.time,
    data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec``)."""

    start_time: str  # "yyyy-MM-dd HH:mm:ss:SSS", local time
    end_time: str
    mb_consumed: float
    mb_per_sec: float
    messages_consumed: int
    messages_per_sec: float
    rebalance_time_ms: int
    fetch_time_ms: int
    fetch_mb_per_sec: float
    fetch_messages_per_sec: float
    warnings: tuple[str, ...]  # e.g. "WARNING: Exiting before consuming the expected number of messages: ..."


_CONSUMER_COLUMNS = ("start.time", "end.time", "data.consumed.in.MB", "MB.sec", "data.consumed.in.nMsg",
                     "nMsg.sec", "rebalance.time.ms", "fetch.time.ms", "fetch.MB.sec", "fetch.nMsg.sec")


def parse_consumer_performance(stdout: str) -> ConsumerPerfResult:
    """ConsumerPerformance's stdout (printed with its header, without
    ``--show-detailed-stats``): the row under the ``start.time, ...`` header,
    comma-separated; ValueError when the header or row is missing or
    different."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    header_at = next((i for i, line in enumerate(lines) if line.startswith("start.time,")), None)
    if header_at is None:
        raise ValueError("no ConsumerPerformance header (start.time, end.time, ...) in its output")
    header = tuple(field.strip() for field in lines[header_at].split(","))
    if header != _CONSUMER_COLUMNS:
        raise ValueError(f"unexpected ConsumerPerformance columns {header}")
    rows = [line for line in lines[header_at + 1:] if len(line.split(",")) == len(header)]
    if not rows:
        raise ValueError("no ConsumerPerformance result row under its header")
    v = dict(zip(header, (field.strip() for field in rows[-1].split(","))))
    warnings = tuple(line for line in lines if line.startswith("WARNING"))
    return ConsumerPerfResult(v["start.time"], v["end.time"], float(v["data.consumed.in.MB"]), float(v["MB.sec"]),
                              int(v["data.consumed.in.nMsg"]), float(v["nMsg.sec"]), int(v["rebalance.time.ms"]),
                              int(v["fetch.time.ms"]), float(v["fetch.MB.sec"]), float(v["fetch.nMsg.sec"]),
                              warnings)


def consumer_performance(bootstrap_servers: str, topic: str, messages: int, *, group: str | None = None,
                         consumer_properties: Mapping[str, object] | None = None,
                         consumer_config: Path | str | None = None, timeout_ms: int = 10_000,
                         from_latest: bool = False, fetch_size: int | None = None, require_all: bool = True,
                         fast_start: bool = False, timeout_s: float = 300.0) -> ConsumerPerfResult:
    """Run ConsumerPerformance: consume ``messages`` records of ``topic`` in
    ``group`` (the tool's random ``perf-consumer-NNNN`` if None), from the
    earliest offset unless committed or ``from_latest``; ``timeout_ms`` is its
    longest wait between records. ``consumer_config`` (a properties file) and
    ``consumer_properties`` (added to it, winning) go in as
    ``--consumer.config``: the tool has no per-property option. Returns the
    parsed row; :class:`JavaToolError` when the tool fails or, with
    ``require_all``, it consumed fewer than ``messages`` (it exits 0 then).
    ``fast_start`` off: C2 and G1, as for a benchmark."""
    args = ["--bootstrap-server", bootstrap_servers, "--topic", topic, "--messages", str(messages),
            "--timeout", str(timeout_ms)]
    if group is not None:
        args += ["--group", group]
    if from_latest:
        args.append("--from-latest")
    if fetch_size is not None:
        args += ["--fetch-size", str(fetch_size)]
    with _properties_file(consumer_properties or {}, consumer_config) as config:
        if config is not None:
            args += ["--consumer.config", str(config)]
        result = run_tool(CONSUMER_PERFORMANCE, *args, timeout_s=timeout_s, fast_start=fast_start)
    try:
        parsed = parse_consumer_performance(result.stdout)
    except ValueError as exc:
        raise _failure(CONSUMER_PERFORMANCE, str(exc), result.stdout, result.stderr, args) from None
    if require_all and parsed.messages_consumed < messages:
        raise _failure(CONSUMER_PERFORMANCE, f"consumed {parsed.messages_consumed} of {messages} messages of "
                       f"{topic!r}", result.stdout, result.stderr, args)
    return parsed


# ----------------------------------------------------- kafka-consumer-groups
@dataclass(frozen=True)
class GroupOffsetRow:
    """A row of ``--describe`` (offsets) output; None where it prints ``-``
    (no committed offset, no member holding the partition)."""

    group: str
    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int | None
    lag: int | None
    consumer_id: str | None
    host: str | None
    client_id: str | None


@dataclass(frozen=True)
class GroupMemberRow:
    """A row of ``--describe --members`` output (``assignment`` only with
    ``--verbose``, e.g. ``topic(0,1)``; None for ``-``)."""

    group: str
    consumer_id: str
    host: str
    client_id: str
    partitions: int
    assignment: str | None


def consumer_groups(bootstrap_servers: str, *args: str, command_properties: Mapping[str, object] | None = None,
                    timeout_s: float = 60.0, kafka4: bool = False) -> ToolResult:
    """Run ``kafka-consumer-groups`` (ConsumerGroupCommand) with ``args``
    (e.g. ``"--describe", "--group", g``) and return (exit code, stdout,
    stderr) whatever the exit code. ``command_properties`` are admin client
    settings (``--command-config``). Parse stdout with
    :func:`parse_group_offsets`, :func:`parse_group_members` or
    :func:`parse_group_list` (of Kafka 4.x's, ``kafka4``, a consumer
    group's ``--describe --members --verbose``:
    :func:`tests.support.java4_tools.parse_consumer_group_members`)."""
    tool_args = ["--bootstrap-server", bootstrap_servers]
    with _properties_file(command_properties or {}) as config:
        if config is not None:
            tool_args += ["--command-config", str(config)]
        return run_tool(CONSUMER_GROUP_COMMAND, *tool_args, *args, timeout_s=timeout_s, check=False, kafka4=kafka4)


def _check_no_error(stdout: str) -> None:
    errors = [line for line in stdout.splitlines() if line.startswith("Error:")]
    if errors:
        raise JavaToolError(f"kafka-consumer-groups reported: {errors[0]}\n"
                            f"  stdout:\n{_indent(_tail(stdout))}")


def _tables(stdout: str, first_columns: tuple[str, ...]) -> Iterator[dict[str, str]]:
    """Rows of the whitespace-aligned tables whose header starts with
    ``first_columns``, as column -> text (columns are as wide as their
    longest value, so split on whitespace; only the last may hold spaces)."""
    _check_no_error(stdout)
    header: list[str] | None = None
    for line in stdout.splitlines():
        fields = line.split()
        if not fields:
            continue
        if tuple(fields[:len(first_columns)]) == first_columns:
            header = fields
            continue
        if header is None:
            continue
        if fields[0] == "GROUP":  # another table's header (e.g. --state): not ours
            header = None
            continue
        fields = line.split(None, len(header) - 1)  # the last column may hold spaces (ASSIGNMENT)
        if len(fields) != len(header):
            raise JavaToolError(f"kafka-consumer-groups row {line!r} does not fit columns {header}\n"
                                f"  stdout:\n{_indent(_tail(stdout))}")
        yield dict(zip(header, fields))


def _optional(text: str) -> str | None:
    return None if text == "-" else text


def _optional_int(text: str) -> int | None:
    return None if text == "-" else int(text)


def parse_group_offsets(stdout: str) -> list[GroupOffsetRow]:
    """Rows of ``--describe`` (the default ``--offsets`` view; ``GROUP TOPIC
    PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID``),
    of every group described. :class:`JavaToolError` on an ``Error:`` line
    (an unknown group) or a row that does not fit."""
    return [GroupOffsetRow(r["GROUP"], r["TOPIC"], int(r["PARTITION"]), _optional_int(r["CURRENT-OFFSET"]),
                           _optional_int(r["LOG-END-OFFSET"]), _optional_int(r["LAG"]),
                           _optional(r["CONSUMER-ID"]), _optional(r["HOST"]), _optional(r["CLIENT-ID"]))
            for r in _tables(stdout, ("GROUP", "TOPIC", "PARTITION"))]


def parse_group_members(stdout: str) -> list[GroupMemberRow]:
    """Rows of ``--describe --members [--verbose]`` (``GROUP CONSUMER-ID HOST
    CLIENT-ID #PARTITIONS [ASSIGNMENT]``)."""
    return [GroupMemberRow(r["GROUP"], r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"], int(r["#PARTITIONS"]),
                           _optional(r["ASSIGNMENT"]) if "ASSIGNMENT" in r else None)
            for r in _tables(stdout, ("GROUP", "CONSUMER-ID", "HOST"))]


def parse_group_list(stdout: str) -> list[str]:
    """Group names of ``--list`` (one per line), also of ``--list --state``
    (a ``GROUP STATE`` table: its first column)."""
    _check_no_error(stdout)
    names = []
    for line in stdout.splitlines():
        fields = line.split()
        if fields and fields[0] != "GROUP":
            names.append(fields[0])
    return names


def _checked(result: ToolResult, args: Sequence[str]) -> ToolResult:
    if result.returncode != 0:
        raise _failure(CONSUMER_GROUP_COMMAND, f"exited with {result.returncode}", result.stdout, result.stderr,
                       args)
    return result


def describe_group_offsets(bootstrap_servers: str, group: str, **options) -> list[GroupOffsetRow]:
    """``--describe --group <group>`` parsed; :class:`JavaToolError` if it
    fails or the group does not exist. ``options``: of :func:`consumer_groups`."""
    args = ("--describe", "--group", group)
    return parse_group_offsets(_checked(consumer_groups(bootstrap_servers, *args, **options), args).stdout)


def describe_group_members(bootstrap_servers: str, group: str, **options) -> list[GroupMemberRow]:
    """``--describe --members --verbose --group <group>`` parsed (empty when
    the group has no active members)."""
    args = ("--describe", "--members", "--verbose", "--group", group)
    return parse_group_members(_checked(consumer_groups(bootstrap_servers, *args, **options), args).stdout)


def list_groups(bootstrap_servers: str, **options) -> list[str]:
    """``--list`` parsed: every group the brokers know."""
    return parse_group_list(_checked(consumer_groups(bootstrap_servers, "--list", **options), ("--list",)).stdout)
