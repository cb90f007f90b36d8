"""Real legacy consumers: a group of Kafka 1.1.1's old ZooKeeper-based
high-level consumers (``ZookeeperConsumerConnector``), for the legacy and
handover tests, ``bench/bench_legacy.py`` and ``bench/bench_handover.py``.

Owns compiling the small Java driver (``legacy_consumer/LegacyGroup.java``)
against the legacy jars (:func:`zkcoord.local.jars.legacy_distribution`) into
the cache, once per source version; the driver's command line; and
:class:`LegacyGroup`, one JVM running N members of one group whose JSON-line
log (claims, releases, records, commits, errors, of every topic they
consume; see the Java file) is collected as :class:`LegacyEvent` s while it
runs, and whose members can be stopped one by one. With
``LegacySettings.record_log`` the driver also writes every record it hands
over to a record log (:mod:`zkcoord.local.record_log`).

The members rebalance, claim partitions and commit offsets exactly as old
consumers do: the Kafka code does it, we only log what its rebalance listener
and iterator see. It needs a ZooKeeper connection string *without* a chroot
(or with Kafka's own chroot): the consumer reads ``/brokers`` there.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from zkcoord.errors import MissingToolError, SandboxError
from zkcoord.local import jars

SOURCE = Path(__file__).with_name("legacy_consumer") / "LegacyGroup.java"
MAIN_CLASS = "LegacyGroup"
HEAP = ("-Xms32m", "-Xmx192m")


def find_javac() -> str:
    """``javac`` beside the ``java`` we run (``JAVA_HOME`` first), else on PATH."""
    sibling = Path(jars.find_java()).resolve().with_name("javac")
    if sibling.exists():
        return str(sibling)
    javac = shutil.which("javac")
    if not javac:
        raise MissingToolError("No `javac` (a JDK, not a JRE) to compile the legacy consumer driver; "
                               "install openjdk-17-jdk-headless or set JAVA_HOME to a JDK.")
    return javac


def driver_classpath(log=lambda msg: None) -> str:
    """Classpath of the compiled driver plus the legacy jars, compiling and
    fetching what is missing."""
    dist = jars.legacy_distribution(log)
    source = SOURCE.read_bytes()
    classes = jars.legacy_cache_dir() / f"classes-{hashlib.sha256(source).hexdigest()[:12]}"
    if not (classes / f"{MAIN_CLASS}.class").exists():
        with open(jars.legacy_cache_dir() / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (classes / f"{MAIN_CLASS}.class").exists():
                _compile(dist.classpath, classes, log)
    return f"{classes}{os.pathsep}{dist.classpath}"


def _compile(classpath: str, classes: Path, log) -> None:
    partial = classes.with_name(classes.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"compiling the legacy consumer driver into {classes}")
    proc = subprocess.run([find_javac(), "-nowarn", "-Xlint:none", "-cp", classpath, "-d", str(partial),
                           str(SOURCE)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SandboxError(f"javac could not compile {SOURCE} (exit {proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr).strip()[-2000:]}")
    shutil.rmtree(classes, ignore_errors=True)
    partial.rename(classes)


@dataclass(frozen=True)
class LegacySettings:
    """One legacy group process: ``members`` connectors named
    ``<prefix>1..N`` (each registers as ``<group>_<prefix>i``), each with
    ``streams`` streams (a thread each) of ``topic`` and every topic of
    ``topics``, or of every topic ``whitelist`` matches (then ``topics`` must
    be empty). Events name every topic a member holds (``"topics"``);
    ``"partitions"`` is ``topic``'s alone. ``commit_interval_ms`` -1 never
    commits (the driver; ``auto.commit.enable=true`` in ``properties`` makes
    the consumer commit by itself, on rebalances and shutdown too);
    ``record_log`` appends a line per record consumed to that file (see
    :mod:`zkcoord.local.record_log`); ``properties`` are extra old consumer
    settings (``zookeeper.session.timeout.ms``, ``rebalance.backoff.ms``...)."""

    zookeeper: str
    group: str
    topic: str
    members: int = 1
    prefix: str = "m"
    commit_interval_ms: int = -1
    log_records: bool = False
    properties: tuple[tuple[str, str], ...] = ()
    streams: int = 1
    whitelist: str | None = None
    topics: tuple[str, ...] = ()
    record_log: Path | None = None

    def __post_init__(self) -> None:
        if self.members < 1:
            raise ValueError(f"members={self.members} must be at least 1")
        if self.streams < 1:
            raise ValueError(f"streams={self.streams} must be at least 1")
        for name in (self.topic, *self.topics):
            if not name or any(c in name for c in ",\t\n") or name.startswith("-"):
                raise ValueError(f"topic {name!r}: not a topic name the driver can pass on")
        if self.whitelist is not None and self.topics:
            raise ValueError(f"topics={self.topics!r} with whitelist={self.whitelist!r}: a member subscribes "
                             "to a list of topics or to a whitelist, not both")
        if not self.prefix or any(c.isspace() for c in self.prefix):
            raise ValueError(f"prefix {self.prefix!r}: member names must be non-empty, without spaces")

    def member_names(self) -> list[str]:
        return [f"{self.prefix}{i}" for i in range(1, self.members + 1)]


def command(settings: LegacySettings, classpath: str, jvm_args: tuple[str, ...] = ()) -> list[str]:
    """The ``java`` command line; ``jvm_args`` may carry a ``-D`` marker that
    ``pkill -f`` finds (the JVM ignores unknown system properties)."""
    return [jars.find_java(), *HEAP, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *jvm_args,
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", classpath, MAIN_CLASS,
            settings.zookeeper, settings.group, settings.topic, str(settings.members), settings.prefix,
            str(settings.commit_interval_ms), "true" if settings.log_records else "false",
            *(f"{k}={v}" for k, v in settings.properties),
            *([f"zkcoord.streams={settings.streams}"] if settings.streams != 1 else []),
            *([f"zkcoord.whitelist={settings.whitelist}"] if settings.whitelist is not None else []),
            *([f"zkcoord.topics={','.join(settings.topics)}"] if settings.topics else []),
            *([f"zkcoord.record.log={settings.record_log}"] if settings.record_log is not None else [])]


@dataclass(frozen=True)
class LegacyEvent:
    ts_ms: int
    member: str
    event: str  # joining, started, claim, release, consumed, commit, stopped, error
    data: dict = field(default_factory=dict)

    def topic_partitions(self) -> frozenset[tuple[str, int]]:
        """A claim's or release's partitions of every topic, as (topic, partition)."""
        return frozenset((t, p) for t, ps in self.data.get("topics", {}).items() for p in ps)


class LegacyGroup:
    """One JVM running a legacy group's members; ``start()`` / ``stop()``
    (SIGTERM: connectors shut down cleanly) / ``kill()`` (SIGKILL: the
    members' ZooKeeper sessions must expire); ``stop_member(name)`` shuts
    one member down as ``stop()`` does all of them, the others go on."""

    def __init__(self, settings: LegacySettings, classpath: str, stderr_path: Path,
                 jvm_args: tuple[str, ...] = ()):
        self.settings, self.classpath, self.stderr_path, self.jvm_args = settings, classpath, stderr_path, jvm_args
        self.proc: subprocess.Popen | None = None
        self._events: list[LegacyEvent] = []
        self._lock = threading.Lock()
        self._reader: threading.Thread | None = None

    def start(self) -> "LegacyGroup":
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.stderr_path, "ab") as err:
            # Own session: a Ctrl-C reaches the caller, who stops us in order.
            self.proc = subprocess.Popen(command(self.settings, self.classpath, self.jvm_args),
                                         stdout=subprocess.PIPE, stderr=err, stdin=subprocess.PIPE,
                                         start_new_session=True)
        self._reader = threading.Thread(target=self._read, name=f"legacy-{self.settings.prefix}", daemon=True)
        self._reader.start()
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                raw = json.loads(line)
            except ValueError:
                continue  # not ours (a JVM warning on stdout)
            event = LegacyEvent(raw.pop("ts"), raw.pop("member"), raw.pop("event"), raw)
            with self._lock:
                self._events.append(event)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def events(self) -> list[LegacyEvent]:
        with self._lock:
            return list(self._events)

    def wait_for(self, condition, timeout_s: float, what: str):
        """Poll ``condition(events)`` until truthy (returned); SandboxError
        naming ``what`` on time-out or when the JVM exits first."""
        deadline = time.monotonic() + timeout_s
        while True:
            found = condition(self.events())
            if found:
                return found
            if not self.alive():
                raise SandboxError(f"the legacy consumer JVM exited ({self.proc.returncode}) before {what}; "
                                   f"see {self.stderr_path}")
            if time.monotonic() > deadline:
                errors = [e.data.get("error") for e in self.events() if e.event == "error"]
                raise SandboxError(f"not within {timeout_s:g} s: {what}"
                                   + (f"; member errors: {errors[:3]}" if errors else ""))
            time.sleep(0.05)

    def stop_member(self, member: str, timeout_s: float = 30.0) -> int:
        """Shut ``member`` down (its connector commits with auto-commit, its
        znodes go) and wait for its ``stopped`` event; its time (ms)."""
        if member not in self.settings.member_names():
            raise SandboxError(f"no legacy member {member!r} in this group process "
                               f"(members: {', '.join(self.settings.member_names())})")
        if not self.alive():
            raise SandboxError(f"the legacy consumer JVM is not running; cannot stop {member}")
        self.proc.stdin.write(f"stop {member}\n".encode())
        self.proc.stdin.flush()
        found = self.wait_for(lambda ev: [e.ts_ms for e in ev if e.member == member and e.event == "stopped"],
                              timeout_s, f"legacy member {member} stopped")
        return found[0]

    def kill(self) -> None:
        self._signal(signal.SIGKILL, 10.0)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM, then SIGKILL after ``grace_s``. Idempotent."""
        if not self.alive():
            return
        try:
            self._signal(signal.SIGTERM, grace_s)
        except subprocess.TimeoutExpired:
            self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: int, wait_s: float) -> None:
        if self.alive():
            self.proc.send_signal(sig)
            self.proc.wait(wait_s)
        if self._reader is not None:
            self._reader.join(5)
