"""How the local Spark session of ``migrate run-job`` starts: its class-data-sharing archive
(:mod:`zkcoord.migrate.spark_cds`), its Python worker daemon's path
(:mod:`zkcoord.migrate.spark_daemon`), the kazoo handler of its tasks, and
what the command says of its slow steps."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support.daemons import process_marker, wait_for
from zkcoord.migrate import spark_cds
from zkcoord.migrate.spark_cds import ClassArchive, archive_key, class_archive
from zkcoord.migrate.spark_daemon import prefer_installed_pyspark
from zkcoord.zk.bulk_reads import SelectHandler

pytestmark = pytest.mark.integration  # needs Java and Spark's jars (the class archive is made by a JVM)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("ZKCOORD_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(spark_cds.ENV, raising=False)
    return tmp_path / "spark-cds"


def test_the_first_session_runs_without_recording_a_background_one_records_later_ones_use_it(cache, monkeypatch):
    first = class_archive("-Xmx1g")
    assert first.mode == "create" and first.path.parent == cache and first.java_options() == ""  # records nothing
    monkeypatch.setenv(spark_cds._MAKER, "1")  # the background maker's session (make_in_background)
    maker = class_archive("-Xmx1g")
    assert maker.mode == "record" and maker.path == first.path and maker.tmp.parent == cache
    assert maker.tmp.name.endswith(".tmp") and f"-XX:ArchiveClassesAtExit={maker.tmp}" in maker.java_options()
    monkeypatch.delenv(spark_cds._MAKER)
    first.path.write_bytes(b"an archive")  # what finish() puts in place
    later = class_archive("-Xmx1g")
    assert later.mode == "use" and later.path == first.path
    assert later.java_options().startswith(f"-XX:SharedArchiveFile={first.path} ")
    assert "-Xlog:cds=off" in later.java_options()  # the JVM's own CDS messages stay off the terminal


def test_other_jvm_options_or_jars_make_another_archive(cache, tmp_path, monkeypatch):
    assert archive_key("-Xmx1g") != archive_key("-Xmx2g")
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "a.jar").write_bytes(b"1")
    monkeypatch.setattr(spark_cds, "_spark_home", lambda: home)
    before = archive_key("-Xmx1g")
    (home / "jars" / "b.jar").write_bytes(b"2")
    assert archive_key("-Xmx1g") != before


def test_turned_off_unknown_or_failed_before_means_no_archive(cache, monkeypatch):
    monkeypatch.setenv(spark_cds.ENV, "off")
    assert class_archive("-Xmx1g").mode == "off" and class_archive("-Xmx1g").java_options() == ""
    monkeypatch.delenv(spark_cds.ENV)
    archive = class_archive("-Xmx1g")
    archive.path.with_suffix(".failed").touch()
    assert class_archive("-Xmx1g").mode == "off"
    monkeypatch.setattr(spark_cds, "_java", lambda: None)
    assert class_archive("-Xmx2g").mode == "off"


def test_no_second_archive_is_made_while_one_is_saved_in_the_background(cache, monkeypatch):
    archive = class_archive("-Xmx1g")
    saving = archive.path.with_suffix(".saving")
    live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        saving.write_text(str(live.pid))  # a live maker
        assert class_archive("-Xmx1g").mode == "off"
        saving.write_text(str(os.getpid()))  # the maker itself records it
        monkeypatch.setenv(spark_cds._MAKER, "1")
        assert class_archive("-Xmx1g").mode == "record"
        monkeypatch.delenv(spark_cds._MAKER)
    finally:
        live.stdin.close()
        live.wait()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    saving.write_text(str(dead.pid))  # its finisher died: the marker goes, the next session makes one
    assert class_archive("-Xmx1g").mode == "create" and not saving.exists()


def test_only_a_few_archives_are_kept_and_dead_runs_files_go(cache):
    cache.mkdir(parents=True)
    for i in range(4):
        (cache / f"old{i}.jsa").write_bytes(b"x")
    stale = cache / "x.jsa.1-ab.tmp"
    stale.write_bytes(b"x")
    import os
    os.utime(stale, (0, 0))
    class_archive("-Xmx1g")  # a new one is to be made: room for it
    assert len(list(cache.glob("*.jsa"))) == spark_cds._KEEP - 1
    assert not stale.exists()


class _Proc:
    def __init__(self, code: int) -> None:
        self.code, self.stdin = code, SimpleNamespace(close=lambda: None)

    def wait(self, timeout=None) -> int:
        return self.code


def _context(code: int, tmp: Path, content: bytes | None):
    """A SparkContext class as finish() sees it: a gateway whose JVM exits with ``code``
    having written ``content`` to the archive it was told to."""
    if content is not None:
        tmp.write_bytes(content)
    system = SimpleNamespace(getProperty=lambda name: {"java.home": str(Path(sys.executable).parent),
                                                       "java.class.path": "/nowhere"}[name])
    jvm = SimpleNamespace(java=SimpleNamespace(lang=SimpleNamespace(System=system)))
    gateway = SimpleNamespace(proc=_Proc(code), shutdown=lambda: None)
    return type("Context", (), {"_gateway": gateway, "_jvm": jvm})


@pytest.fixture
def maker(monkeypatch):
    """Sessions record their classes, as the background maker's does."""
    monkeypatch.setenv(spark_cds._MAKER, "1")


def test_finish_puts_a_checked_archive_in_place(cache, maker, monkeypatch):
    archive = class_archive("-Xmx1g")
    context = _context(0, archive.tmp, b"archive bytes")
    ran = []
    monkeypatch.setattr(spark_cds.subprocess, "run",
                        lambda args, **kw: ran.append(args) or subprocess.CompletedProcess(args, 0))
    archive.finish(context)
    assert archive.path.read_bytes() == b"archive bytes" and not archive.tmp.exists()
    assert "-Xshare:on" in ran[0] and f"-XX:SharedArchiveFile={archive.tmp}" in ran[0]
    assert context._gateway is None and context._jvm is None  # a later session starts a JVM of its own


def test_the_first_session_hands_the_archive_to_a_background_maker_of_its_own(cache, monkeypatch):
    archive = class_archive("-Xmx1g")
    started = []

    class Popen:
        pid = 4242

        def __init__(self, args, **kw):
            started.append((args, kw))

    monkeypatch.setattr(spark_cds.subprocess, "Popen", Popen)
    assert archive.make_in_background({"spark.driver.memory": "1g"}) == 4242
    args, kw = started[0]
    assert args == [sys.executable, "-m", "zkcoord.migrate.spark_cds_maker"]
    assert kw["env"][spark_cds._MAKER] == "1" and json.loads(kw["env"][spark_cds._MAKER_CONF]) == {
        "spark.driver.memory": "1g"}
    assert kw["start_new_session"] and kw["stdout"] == kw["stderr"] == subprocess.DEVNULL  # it outlives the command
    assert archive.path.with_suffix(".saving").read_text() == "4242"  # later sessions make no second one
    assert ClassArchive("use", archive.path).make_in_background({}) is None  # only a first session hands over


@pytest.mark.parametrize("code, content, check", [(0, b"garbage", 1), (1, b"x", 0), (0, None, 0)])
def test_finish_keeps_no_archive_that_failed(cache, maker, monkeypatch, code, content, check):
    archive = class_archive("-Xmx1g")
    monkeypatch.setattr(spark_cds.subprocess, "run", lambda args, **kw: subprocess.CompletedProcess(args, check))
    archive.finish(_context(code, archive.tmp, content))
    assert not archive.path.exists() and not archive.tmp.exists()
    assert archive.path.with_suffix(".failed").exists()  # later runs do without, instead of failing again
    assert class_archive("-Xmx1g").mode == "off"


def test_a_session_that_did_not_start_with_the_archive_removes_it(cache):
    archive = class_archive("-Xmx1g")
    archive.path.write_bytes(b"damaged")
    used = class_archive("-Xmx1g")
    used.discard()
    assert used.mode == "off" and not archive.path.exists() and used.java_options() == ""


def test_the_daemon_drops_sparks_zips_of_the_installed_pyspark_only(tmp_path):
    import pyspark

    lib = Path(pyspark.__file__).resolve().parent / "python" / "lib"
    zips = [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]
    path = ["/work", *zips, *sys.path]
    assert prefer_installed_pyspark(path) == ["/work", *sys.path]
    elsewhere = [str(tmp_path / "spark" / "python" / "lib" / "pyspark.zip"), *sys.path]
    assert prefer_installed_pyspark(elsewhere) == elsewhere  # another Spark's: as Spark chose
    assert prefer_installed_pyspark(sys.path) == sys.path


def test_select_handler_waits_like_kazoos_own():
    handler = SelectHandler()
    left, right = socket.socketpair()
    try:
        assert handler.select([left], [], [], 0.01) == ([], [], [])
        right.send(b"x")
        readable, writable, _ = handler.select([left], [right], [], 1.0)
        assert readable == [left] and writable == [right]
    finally:
        left.close()
        right.close()


# -- what run-job says of its slow steps off a terminal, and the times it reports ----------------

def run_job(zk_hosts: str, bootstrap: str, cache: Path, report: Path, *extra: str) -> subprocess.CompletedProcess:
    """``zkcoord migrate run-job`` as a user runs it, its output piped (not a terminal)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZKCOORD_") or k == "ZKCOORD_TEST_STATE_DIR"}
    env.update(ZKCOORD_CACHE_DIR=str(cache.parent), COLUMNS="80")
    env.pop(spark_cds.ENV, None)
    return subprocess.run([sys.executable, "-X", process_marker(), "-m", "zkcoord", "migrate", "run-job", "--all",
                           "--zookeeper", zk_hosts, "--bootstrap-servers", bootstrap, "--report-dir", str(report),
                           *extra], cwd=REPO, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=900)


def test_off_a_terminal_the_first_run_says_it_saves_the_class_archive_and_the_times_add_up(
        services, zk, zk_hosts, cache, tmp_path):
    zk.create("/consumers/g1/offsets/no-such-topic/0", b"5", makepath=True)
    first = run_job(zk_hosts, services.bootstrap_servers, cache, tmp_path / "first")
    assert first.returncode == 0, first.stderr
    lines = [line for line in first.stderr.splitlines() if not line.startswith("WARNING: Using incubator")]
    assert lines[0] == ("starting Spark (local[*]); the first run with this Java and Spark also has a class "
                        "archive of the JVM made, in the background after the job (once: later runs map it and "
                        "start faster) ...")
    assert re.fullmatch(r"Spark started in \d+\.\d s", lines[1])
    handed = re.fullmatch(r"handing the making of the Spark JVM's class archive (\S+) over to a background process "
                          r"\(once: later runs with this Java and Spark map it and start faster\) \.\.\.", lines[2])
    archive = Path(handed.group(1))
    assert archive.parent == cache
    assert re.fullmatch(r"class archive handed over in \d+\.\d s", lines[3]) and len(lines) == 4
    out = first.stdout.splitlines()
    assert out[0].startswith("migrate plan on Spark (local[*], 1 partition(s)): 1 group(s), job ")
    start, job, saving, whole = (float(x) for x in re.fullmatch(
        r"whole run (\S+) s: Spark start (\S+) s, job (\S+) s, class archive (\S+) s \(first run only; written "
        r"in the background after this\)", out[-1]).group(2, 3, 4, 1))
    assert (start, saving) == (float(lines[1].split()[-2]), float(lines[3].split()[-2]))  # the same steps
    assert whole >= start + job + saving - 0.15  # each rounded to 0.1 s: the parts are within the whole
    # the command has ended; the background process's session records the archive, checks it, puts it in place
    wait_for(lambda: archive.exists(), 900, f"the class archive {archive} in place", interval_s=0.5)
    assert list(cache.glob("*.tmp")) == [] and list(cache.glob("*.failed")) == []

    later = run_job(zk_hosts, services.bootstrap_servers, cache, tmp_path / "later", "--output", "json")
    assert later.returncode == 0, later.stderr
    assert [line for line in later.stderr.splitlines() if not line.startswith("WARNING: Using incubator")][0] == \
        "starting Spark (local[*]) ..."
    assert "class archive" not in later.stderr
    timings = json.loads(later.stdout)["timings"]
    assert timings["class_archive_s"] is None and timings["spark_start_s"] > 0 and timings["job_s"] > 0
    assert timings["total_s"] >= timings["spark_start_s"] + timings["job_s"]


def test_the_jars_a_job_loads_most_classes_from_come_first_on_the_local_drivers_class_path(tmp_path):
    from zkcoord.migrate.spark_session import hot_jars_first

    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    for name in ("zzz-other-1.0.jar", "netty-transport-classes-epoll-4.2.13.Final.jar", "spark-sql-api_2.13-4.3.0.jar",
                 "log4j-1.2-api-2.25.4.jar", "spark-core_2.13-4.3.0.jar", "netty-transport-4.2.13.Final.jar",
                 "spark-sql_2.13-4.3.0.jar", "log4j-core-2.25.4.jar", "spark-catalyst_2.13-4.3.0.jar", "README"):
        (jars / name).write_bytes(b"")
    first = [Path(p).name for p in hot_jars_first(tmp_path / "spark").split(os.pathsep)]
    assert first == ["spark-catalyst_2.13-4.3.0.jar", "spark-core_2.13-4.3.0.jar", "spark-sql_2.13-4.3.0.jar",
                     "spark-sql-api_2.13-4.3.0.jar", "log4j-core-2.25.4.jar", "netty-transport-4.2.13.Final.jar",
                     "log4j-1.2-api-2.25.4.jar", "netty-transport-classes-epoll-4.2.13.Final.jar"]  # the others: jars/*
    assert hot_jars_first(tmp_path / "nowhere") == ""
