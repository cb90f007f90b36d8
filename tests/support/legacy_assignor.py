"""Kafka 1.1.1's own legacy range assignment in a JVM, for the handover's
differential test.

Owns compiling ``tests/support/java/LegacyRangeHarness.java`` against the
legacy consumer's jars (:func:`zkcoord.local.jars.legacy_distribution`,
the ones the sandbox's legacy consumer runs on) into
``<cache>/legacy/range-harness-<source hash>`` (once per source version,
under a lock), and running it on cases (:func:`run`): each case is a group's
``/ids`` registrations as stored and its topics' partitions; the answer is
every consumer's share as Kafka's ``RangeAssignor`` computes it for itself.
:func:`unavailable` says why it cannot run here (no ``java`` or ``javac``,
no jars), for ``pytest.skip``.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

from zkcoord.errors import ZkcoordError
from zkcoord.local import jars

SOURCE = Path(__file__).with_name("java") / "LegacyRangeHarness.java"
MAIN_CLASS = "LegacyRangeHarness"


def classpath() -> str:
    """The compiled harness plus the legacy jars (fetched and compiled if missing)."""
    from zkcoord.local.legacy import find_javac

    dist = jars.legacy_distribution()
    classes = jars.legacy_cache_dir() / f"range-harness-{hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]}"
    if not (classes / f"{MAIN_CLASS}.class").exists():
        with open(jars.legacy_cache_dir() / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (classes / f"{MAIN_CLASS}.class").exists():
                partial = classes.with_name(classes.name + ".partial")
                shutil.rmtree(partial, ignore_errors=True)
                partial.mkdir(parents=True)
                proc = subprocess.run([find_javac(), "-nowarn", "-Xlint:none", "-cp", dist.classpath,
                                       "-d", str(partial), str(SOURCE)], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise ZkcoordError(f"javac could not compile {SOURCE}:\n{(proc.stdout + proc.stderr)[-3000:]}")
                partial.rename(classes)
    return f"{classes}{os.pathsep}{dist.classpath}"


def unavailable() -> str | None:
    """Why Kafka 1.1.1's assignor cannot run here, or None (fetches and compiles on first use)."""
    try:
        classpath()
    except ZkcoordError as exc:
        return f"Kafka 1.1.1's legacy consumer jars or the harness are unavailable: {exc}"
    return None


def case(case_id: str, group: str, ids: dict[str, bytes], topics: dict[str, tuple[int, ...]],
         exclude_internal: bool = True) -> dict:
    """One input line: registrations as stored (bytes, decoded as UTF-8)."""
    return {"id": case_id, "group": group, "exclude_internal": exclude_internal,
            "ids": {cid: data.decode("utf-8") for cid, data in ids.items()},
            "topics": {t: list(ps) for t, ps in topics.items()}}


def run(cases: Iterable[dict], timeout_s: float = 300.0) -> list[dict]:
    """Kafka's answer per case, in order: ``{"shares": {consumer: {(topic,
    partition): thread}}}`` or ``{"error": ...}`` (one JVM per call)."""
    lines = "".join(json.dumps(c, separators=(",", ":")) + "\n" for c in cases)
    proc = subprocess.run([jars.find_java(), "-Xms32m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                           "-Dorg.slf4j.simpleLogger.defaultLogLevel=off", "-cp", classpath(), MAIN_CLASS],
                          input=lines, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise ZkcoordError(f"the legacy range harness exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    answers = []
    for line in proc.stdout.splitlines():
        if not line.startswith("{"):
            continue
        raw = json.loads(line)
        if "shares" in raw:
            raw["shares"] = {cid: {(k.rsplit("/", 1)[0], int(k.rsplit("/", 1)[1])): t for k, t in share.items()}
                             for cid, share in raw["shares"].items()}
        answers.append(raw)
    return answers
