"""Where the sandbox's Java programs come from.

Owns finding ``java``, and the classpaths of ZooKeeper and Kafka: an existing
install (``ZOOKEEPER_HOME`` / ``KAFKA_HOME``) wins; otherwise Maven fetches
the jars and their runtime dependencies from Maven Central, once, into a
cache outside the repository (``$ZKCOORD_CACHE_DIR`` or
``~/.cache/zkcoord``). A finished fetch leaves a ``.complete`` marker, so an
interrupted one is redone rather than trusted. Concurrent fetches (parallel
test runs) serialise on a lock file.
"""

from __future__ import annotations

import fcntl
import functools
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from zkcoord.errors import MissingToolError, SandboxError

ZOOKEEPER_VERSION = "3.8.6"
# The old ZooKeeper-based consumer (ZookeeperConsumerConnector) was removed in
# Kafka 2.0; 1.1.1 is its last release. It runs on Java 17 and talks to a 3.9
# broker (Metadata/Fetch/ListOffsets v0-v2 are still served).
LEGACY_KAFKA_VERSION = "1.1.1"
LEGACY_SCALA_VERSION = "2.12"
KAFKA_VERSION = "3.9.2"
SCALA_VERSION = "2.13"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"

# Each bundle: artifacts (group:artifact:version) resolved with their runtime
# dependencies into one directory.
BUNDLES: dict[str, tuple[str, ...]] = {
    f"zookeeper-{ZOOKEEPER_VERSION}": (
        f"org.apache.zookeeper:zookeeper:{ZOOKEEPER_VERSION}",
        # "provided" in ZooKeeper's pom, shipped in its distribution's lib/.
        "io.dropwizard.metrics:metrics-core:4.1.12.1",
        "org.xerial.snappy:snappy-java:1.1.10.5",
    ),
    f"kafka-{KAFKA_VERSION}": (
        f"org.apache.kafka:kafka_{SCALA_VERSION}:{KAFKA_VERSION}",
        # kafka-consumer-groups and friends live in kafka-tools since 3.7.
        f"org.apache.kafka:kafka-tools:{KAFKA_VERSION}",
        "org.slf4j:slf4j-reload4j:1.7.36",
    ),
}

# Fetched only on demand (`zkcoord local fetch --legacy`, the legacy test and
# benchmark), into a directory of its own: the sandbox's bundles are unchanged.
LEGACY_BUNDLE = f"legacy-kafka_{LEGACY_SCALA_VERSION}-{LEGACY_KAFKA_VERSION}"
LEGACY_BUNDLES: dict[str, tuple[str, ...]] = {
    LEGACY_BUNDLE: (
        f"org.apache.kafka:kafka_{LEGACY_SCALA_VERSION}:{LEGACY_KAFKA_VERSION}",
        # Its log lines (WARN and up, to stderr); the pom ships only slf4j-api.
        "org.slf4j:slf4j-simple:1.7.25",
    ),
}

# Kafka 4.x's ProducerPerformance, for its --warmup-records (4.2+; 3.9's
# percentiles include the JVM's warm-up). Fetched only on demand (the gateway
# benchmark), into a directory of its own; 4.x clients talk to 3.9 brokers.
TOOLS4_KAFKA_VERSION = "4.4.0"
TOOLS4_BUNDLE = f"kafka-tools-{TOOLS4_KAFKA_VERSION}"
TOOLS4_BUNDLES: dict[str, tuple[str, ...]] = {
    TOOLS4_BUNDLE: (
        f"org.apache.kafka:kafka-tools:{TOOLS4_KAFKA_VERSION}",
        # A binding for its slf4j-api 1.7 (the pom ships none): the same
        # reload4j and log4j.properties as the 3.9 tools.
        "org.slf4j:slf4j-reload4j:1.7.36",
    ),
}

# The reference peer (`zkcoord local up --kafka4`, zkcoord.local.kraft): a Kafka
# 4.x broker in KRaft mode, and the 4.x Java clients and tools the tests run
# with group.protocol=consumer. Fetched only on demand (`up --kafka4`, `fetch
# --kafka4`, the tests that ask for it) into <cache>/jars beside the 3.9 jars.
# Kafka 4.x logs with log4j2 and ships no SLF4J binding in its poms: its
# distribution's libs/ hold log4j-slf4j-impl of the same log4j version.
KAFKA4_VERSION = "4.4.0"
KAFKA4_BUNDLE = f"kafka-{KAFKA4_VERSION}"
KAFKA4_BUNDLES: dict[str, tuple[str, ...]] = {
    KAFKA4_BUNDLE: (
        f"org.apache.kafka:kafka_{SCALA_VERSION}:{KAFKA4_VERSION}",
        f"org.apache.kafka:kafka-tools:{KAFKA4_VERSION}",  # Verifiable*, ConsumerGroupCommand, Console*
        "org.apache.logging.log4j:log4j-slf4j-impl:2.25.5",  # the log4j-core 2.25.5 kafka_2.13 brings
    ),
}
KAFKA4_MIN_JAVA = 17  # Kafka 4.x brokers and tools need Java 17 (clients: 11)

INSTALL_HINT = (
    "Install a JDK (17 or newer) and Maven, e.g. `apt-get install "
    "openjdk-17-jdk-headless maven`, or point KAFKA_HOME (and optionally "
    "ZOOKEEPER_HOME) at an unpacked Apache Kafka 3.9 / ZooKeeper 3.8 "
    "distribution."
)


@dataclass(frozen=True)
class Distribution:
    """A Java program: what it is and where its jars are."""

    name: str
    version: str
    classpath: str
    source: str  # "maven cache", "KAFKA_HOME", ...


def cache_dir() -> Path:
    explicit = os.environ.get("ZKCOORD_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(base).expanduser() / "zkcoord"


def find_java() -> str:
    """Path of the ``java`` to run servers with (``JAVA_HOME`` first)."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if not java:
        raise MissingToolError(f"No `java` on PATH and JAVA_HOME is not set. {INSTALL_HINT}")
    return java


def _pom(bundle: str, artifacts: tuple[str, ...]) -> str:
    deps = []
    for coordinate in artifacts:
        group, artifact, version = coordinate.split(":")
        deps.append(
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        f"<groupId>zkcoord.sandbox</groupId><artifactId>{bundle}</artifactId>"
        "<version>1</version><packaging>pom</packaging>"
        f"<dependencies>{''.join(deps)}</dependencies></project>"
    )


def _maven_fetch(bundle: str, artifacts: tuple[str, ...], target: Path, log) -> None:
    mvn = shutil.which("mvn")
    if not mvn:
        raise MissingToolError(
            f"Cannot fetch the {bundle} jars: no `mvn` on PATH and no install given. {INSTALL_HINT}"
        )
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="zkcoord-mvn-") as work:
        Path(work, "pom.xml").write_text(_pom(bundle, artifacts))
        log(f"fetching {bundle} jars with Maven into {target} (once)")
        cmd = [mvn, "-B", "-q", "-U", f"{DEPENDENCY_PLUGIN}:copy-dependencies",
               f"-DoutputDirectory={partial}", "-DincludeScope=runtime"]
        proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SandboxError(f"Maven could not fetch the {bundle} jars (exit {proc.returncode}):\n{tail}")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    (target / ".complete").write_text("\n".join(artifacts) + "\n")


def fetch_bundle(bundle: str, log=lambda msg: None, root: Path | None = None,
                 artifacts: tuple[str, ...] | None = None) -> Path:
    """Directory holding the bundle's jars, fetching them if not cached yet
    (default: a sandbox bundle under ``<cache>/jars``)."""
    root = root or cache_dir() / "jars"
    artifacts = artifacts or BUNDLES[bundle]
    target = root / bundle
    if _complete(target, artifacts):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _complete(target, artifacts):
            _maven_fetch(bundle, artifacts, target, log)
    return target


def _complete(target: Path, artifacts: tuple[str, ...]) -> bool:
    """The cache holds exactly this artifact list, fully fetched."""
    try:
        return (target / ".complete").read_text().split() == list(artifacts)
    except OSError:
        return False


def _home_classpath(env: str, subdirs: tuple[str, ...]) -> str | None:
    home = os.environ.get(env)
    if not home:
        return None
    home_path = Path(home).expanduser()
    dirs = [home_path / sub for sub in subdirs if (home_path / sub).is_dir()]
    if not dirs or not any(d.glob("*.jar") for d in dirs):
        raise MissingToolError(
            f"{env}={home} has no jars under {' or '.join(subdirs)}; "
            f"point it at an unpacked distribution or unset it to let Maven fetch the jars."
        )
    return os.pathsep.join(f"{d}/*" for d in dirs)


def kafka_distribution(log=lambda msg: None) -> Distribution:
    classpath = _home_classpath("KAFKA_HOME", ("libs",))
    if classpath:
        return Distribution("kafka", "KAFKA_HOME", classpath, "KAFKA_HOME")
    bundle = f"kafka-{KAFKA_VERSION}"
    return Distribution("kafka", KAFKA_VERSION, f"{fetch_bundle(bundle, log)}/*", "maven cache")


def zookeeper_distribution(log=lambda msg: None) -> Distribution:
    classpath = _home_classpath("ZOOKEEPER_HOME", ("lib", "."))
    if classpath:
        return Distribution("zookeeper", "ZOOKEEPER_HOME", classpath, "ZOOKEEPER_HOME")
    if os.environ.get("KAFKA_HOME"):
        # A Kafka 3.9 distribution ships ZooKeeper 3.8's server classes.
        kafka = kafka_distribution(log)
        return Distribution("zookeeper", "from KAFKA_HOME", kafka.classpath, "KAFKA_HOME")
    bundle = f"zookeeper-{ZOOKEEPER_VERSION}"
    return Distribution("zookeeper", ZOOKEEPER_VERSION, f"{fetch_bundle(bundle, log)}/*", "maven cache")


def kafka4_distribution(log=lambda msg: None) -> Distribution:
    """Kafka 4.x (broker, clients, tools): ``KAFKA4_HOME`` (an unpacked 4.x
    distribution's ``libs/``) wins; else the jars Maven fetches into
    ``<cache>/jars/kafka-4.4.0`` the first time. MissingToolError when
    ``java`` is older than Kafka 4.x needs."""
    require_java(KAFKA4_MIN_JAVA, f"Kafka {KAFKA4_VERSION}")
    classpath = _home_classpath("KAFKA4_HOME", ("libs",))
    if classpath:
        return Distribution("kafka4", "KAFKA4_HOME", classpath, "KAFKA4_HOME")
    path = fetch_bundle(KAFKA4_BUNDLE, log, artifacts=KAFKA4_BUNDLES[KAFKA4_BUNDLE])
    return Distribution("kafka4", KAFKA4_VERSION, f"{path}/*", "maven cache")


@functools.cache
def java_major_version(java: str) -> int:
    """The feature release of ``java`` (17 for "17.0.15", 8 for "1.8.0_402");
    0 when its ``-version`` cannot be read."""
    proc = subprocess.run([java, "-version"], capture_output=True, text=True)
    match = re.search(r'version "(?:1\.)?(\d+)', proc.stderr + proc.stdout)
    return int(match.group(1)) if match else 0


def require_java(minimum: int, what: str) -> str:
    """``java``, if it is at least ``minimum``; else MissingToolError naming ``what``."""
    java = find_java()
    found = java_major_version(java)
    if found < minimum:
        raise MissingToolError(f"{what} needs Java {minimum} or newer; {java} is Java {found or 'of unknown version'}. "
                               f"{INSTALL_HINT}")
    return java


def fetch_all(log=lambda msg: None) -> list[Distribution]:
    """Resolve (and fetch when needed) every distribution the sandbox runs."""
    find_java()
    return [zookeeper_distribution(log), kafka_distribution(log)]


def legacy_cache_dir() -> Path:
    """``<cache>/legacy``: the legacy consumer's jars and compiled driver."""
    return cache_dir() / "legacy"


def legacy_distribution(log=lambda msg: None) -> Distribution:
    """Kafka 1.1.1's old ZooKeeper consumer and its dependencies (fetched
    with Maven the first time, into ``<cache>/legacy``)."""
    find_java()
    path = fetch_bundle(LEGACY_BUNDLE, log, root=legacy_cache_dir(), artifacts=LEGACY_BUNDLES[LEGACY_BUNDLE])
    return Distribution("legacy-consumer", LEGACY_KAFKA_VERSION, f"{path}/*", "maven cache")


def tools4_distribution(log=lambda msg: None) -> Distribution:
    """Kafka 4.x's command-line tools (kafka-tools and its dependencies;
    fetched with Maven the first time, into ``<cache>/tools4``)."""
    find_java()
    path = fetch_bundle(TOOLS4_BUNDLE, log, root=cache_dir() / "tools4", artifacts=TOOLS4_BUNDLES[TOOLS4_BUNDLE])
    return Distribution("kafka-tools", TOOLS4_KAFKA_VERSION, f"{path}/*", "maven cache")


def cache_size_bytes() -> int:
    root = cache_dir() / "jars"
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0
