"""A process's folder for its Spark files, and the removal of a killed process's
(:mod:`zkcoord.migrate.spark_scratch`)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from zkcoord.migrate import spark_scratch


@pytest.fixture
def temp(tmp_path, monkeypatch):
    """The temporary folder is ``tmp_path``, and this process has made no folder yet."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(spark_scratch, "_folder", None)
    return tmp_path


def folder_of(temp, name: str, owner: str | None):
    folder = temp / f"{spark_scratch.PREFIX}{name}"
    (folder / "local").mkdir(parents=True)
    (folder / "local" / "blockmgr-1").write_text("x")
    if owner is not None:
        (folder / "owner").write_text(owner)
    return folder


def gone_process() -> str:
    """The owner line of a process that ran and ended (its pid, its start time while it ran)."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        return spark_scratch._identity(child.pid)
    finally:
        child.communicate(b"")


def test_only_the_folders_of_processes_that_are_gone_are_removed(temp):
    dead = folder_of(temp, "dead", gone_process())
    alive = folder_of(temp, "alive", spark_scratch._identity(os.getpid()))
    foreign = folder_of(temp, "foreign", None)  # no owner file: another program's, or one being made
    unreadable = folder_of(temp, "garbage", "not a pid")
    binary = folder_of(temp, "binary", None)
    (binary / "owner").write_bytes(b"\xff\xfe")
    other = temp / "spark-123"  # not ours by its name
    other.mkdir()
    assert spark_scratch.sweep() == 1
    assert not dead.exists()
    assert alive.exists() and foreign.exists() and unreadable.exists() and binary.exists() and other.exists()


def test_a_pid_used_again_by_another_process_is_not_taken_for_the_owner(temp):
    if spark_scratch._start_ticks(os.getpid()) is None:
        pytest.skip("no /proc: processes are told apart by pid alone")
    reused = folder_of(temp, "reused", f"{os.getpid()} 1")  # this pid, another start time
    assert spark_scratch.sweep() == 1 and not reused.exists()


def test_a_folder_made_in_another_pid_namespace_is_left_alone(temp):
    elsewhere = folder_of(temp, "container", f"{gone_process().split()[0]} 1 pid:[1]")  # not our namespace
    if spark_scratch._pid_namespace() == "pid:[1]":
        pytest.skip("this process is in that namespace")
    assert spark_scratch.sweep() == 0 and elsewhere.exists()


def test_one_folder_per_process_its_sessions_inside_and_older_dead_ones_removed_first(temp):
    dead = folder_of(temp, "dead", gone_process())
    first = spark_scratch.process_folder()
    assert not dead.exists()
    assert first.parent == temp and first.name.startswith(spark_scratch.PREFIX)
    assert (first / "owner").read_text() == spark_scratch._identity(os.getpid())
    assert (first / "tmp").is_dir()
    assert spark_scratch.process_folder() == first  # the JVM is one per process: so is its folder
    session = spark_scratch.session_folder()
    assert session.parent == first and session.name.startswith("session-")
    assert spark_scratch.jvm_temp_option() == f"-Djava.io.tmpdir={first / 'tmp'}"
    spark_scratch._remove(os.getpid() + 1, first)  # a forked child's exit leaves the parent's folder
    assert first.exists()
    spark_scratch._remove(os.getpid(), first)  # the process's own exit removes it
    assert not first.exists()


def test_a_temporary_folder_with_white_space_gives_no_jvm_option(tmp_path, monkeypatch):
    spaced = tmp_path / "with space"
    spaced.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spaced))
    monkeypatch.setattr(spark_scratch, "_folder", None)
    assert spark_scratch.jvm_temp_option() == ""  # the JVM keeps its own temporary folder
