"""Kafka 4.4's own assignors in a JVM, for the differential test and the benchmark.

Owns: fetching the ``kafka-group-coordinator`` 4.4.0 jars and their
dependencies with Maven into ``<cache>/assignors4`` (once, through
:func:`zkcoord.local.jars.fetch_bundle`, as the sandbox's jars are
fetched); compiling ``tests/support/java/AssignorHarness.java`` against
them into ``<cache>/assignors4/classes-<source hash>`` (once per source
version, under a lock; no jar or class file is in the repository); running
it (:class:`KafkaAssignors`), and turning a :class:`~zkcoord.core.
assignors.GroupSpec` into its JSON input (:func:`case_json`) and both
sides' results into one comparable shape (:func:`python_result`).

:func:`unavailable` says why the JVM side cannot run here (no ``java``, no
``javac``, no ``mvn``, or Maven failed), for ``pytest.skip``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

from zkcoord.core.assignors import GroupAssignment, GroupSpec
from zkcoord.errors import ZkcoordError
from zkcoord.local import jars

KAFKA_VERSION = "4.4.0"
BUNDLE = f"kafka-group-coordinator-{KAFKA_VERSION}"
ARTIFACTS = (
    f"org.apache.kafka:kafka-group-coordinator:{KAFKA_VERSION}",
    "org.slf4j:slf4j-nop:1.7.36",  # Kafka's slf4j-api without a binding prints a warning per JVM
)
SOURCE = Path(__file__).with_name("java") / "AssignorHarness.java"
MAIN_CLASS = "AssignorHarness"
JDK25_HOME = Path("/usr/lib/jvm/temurin-25-jdk-amd64")

# One member's result: ((topic id, (partitions...)), ...) in Kafka's iteration order.
MemberResult = tuple[tuple[str, tuple[int, ...]], ...]


def cache_root() -> Path:
    return jars.cache_dir() / "assignors4"


def _javac() -> str:
    sibling = Path(jars.find_java()).resolve().with_name("javac")
    if sibling.exists():
        return str(sibling)
    javac = shutil.which("javac")
    if not javac:
        raise jars.MissingToolError("no `javac` (a JDK, not a JRE) to compile the assignor harness")
    return javac


def classpath(log=lambda msg: None) -> str:
    """The compiled harness plus the Kafka 4.4.0 jars (fetched and compiled if missing)."""
    bundle = jars.fetch_bundle(BUNDLE, log, root=cache_root(), artifacts=ARTIFACTS)
    source = SOURCE.read_bytes()
    classes = cache_root() / f"classes-{hashlib.sha256(source).hexdigest()[:12]}"
    if not (classes / f"{MAIN_CLASS}.class").exists():
        with open(cache_root() / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (classes / f"{MAIN_CLASS}.class").exists():
                _compile(f"{bundle}/*", classes, log)
    return f"{classes}{os.pathsep}{bundle}/*"


def _compile(jar_classpath: str, classes: Path, log) -> None:
    partial = classes.with_name(classes.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    log(f"compiling {SOURCE.name} into {classes}")
    # --release 17: the classes run on the JDK 17 here and on any newer one.
    proc = subprocess.run([_javac(), "--release", "17", "-nowarn", "-Xlint:none", "-cp", jar_classpath,
                           "-d", str(partial), str(SOURCE)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ZkcoordError(f"javac could not compile {SOURCE} (exit {proc.returncode}):\n"
                           f"{(proc.stdout + proc.stderr).strip()[-3000:]}")
    shutil.rmtree(classes, ignore_errors=True)
    partial.rename(classes)


def unavailable() -> str | None:
    """Why Kafka's assignors cannot run here, or None when they can (this
    fetches and compiles on first use)."""
    for tool in ("java", "javac", "mvn"):
        if not shutil.which(tool) and not (tool != "mvn" and os.environ.get("JAVA_HOME")):
            return f"no `{tool}` on PATH: the differential test runs Kafka 4.4's assignors in a JVM"
    try:
        classpath()
    except ZkcoordError as exc:
        return f"Kafka 4.4 assignor jars or harness unavailable: {exc}"
    return None


def java_for(jdk: int) -> str | None:
    """A ``java`` of the given major version here: 17 is the default one,
    25 the Temurin JDK when installed; None when there is none."""
    if jdk == 17:
        return jars.find_java()
    candidate = JDK25_HOME / "bin" / "java"
    return str(candidate) if jdk == 25 and candidate.exists() else None


class KafkaAssignors:
    """The harness JVM: :meth:`run` sends JSON cases and returns its answers."""

    def __init__(self, java: str | None = None, jvm_args: Sequence[str] = ("-Xms64m", "-Xmx1g")):
        self.java = java or jars.find_java()
        self.jvm_args = tuple(jvm_args)

    def run(self, cases: Iterable[dict], timeout_s: float = 600.0) -> list[dict]:
        """One answer per case, in order (a JVM per call)."""
        lines = "".join(json.dumps(c, separators=(",", ":")) + "\n" for c in cases)
        proc = subprocess.run([self.java, *self.jvm_args, "-cp", classpath(), MAIN_CLASS], input=lines,
                              capture_output=True, text=True, timeout=timeout_s)
        if proc.returncode != 0:
            raise ZkcoordError(f"the assignor harness exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def case_json(case_id: str, assignor: str, group: GroupSpec, bench: dict | None = None) -> dict:
    """The harness's input line for ``assignor`` on ``group``."""
    case = {
        "id": case_id,
        "assignor": assignor,
        "topics": [{"name": name, "id": t.topic_id, "partitions": t.partitions} for name, t in group.topics.items()],
        "members": [{"id": m, "instance": s.instance_id, "rack": s.rack_id, "topics": list(s.subscribed_topic_names),
                     "assignment": [[t, list(ps)] for t, ps in s.assignment.items()]}
                    for m, s in group.members.items()],
        "type": None if group.subscription_type is None else group.subscription_type.name,
    }
    if bench:
        case["bench"] = bench
    return case


def java_result(answer: dict) -> dict[str, MemberResult]:
    """The harness's answer as member id to its record order (members with
    an empty assignment left out: Kafka treats absent and empty alike)."""
    if "error" in answer:
        raise ZkcoordError(answer["error"])
    return {m: tuple((t, tuple(ps)) for t, ps in topics) for m, topics in answer["members"] if topics}


def python_result(result: GroupAssignment) -> dict[str, MemberResult]:
    """Our result in the same shape as :func:`java_result`, through :meth:`GroupAssignment.record_order`."""
    out = {}
    for member_id, topics in result.items():
        order = result.record_order(member_id)
        assert {t: frozenset(ps) for t, ps in order} == {t: ps for t, ps in topics.items() if ps}, member_id
        if order:
            out[member_id] = order
    return out
