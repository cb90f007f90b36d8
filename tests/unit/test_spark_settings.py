"""Which Python a migration job's executors run (zkcoord.migrate.spark_session):
pyspark names it from PYSPARK_PYTHON alone (SparkContext.pythonExec); the
``spark.pyspark.python`` setting is spark-submit's, which turns it into that
variable. ``run-job`` does the same, and on this machine's own standalone
cluster names its own interpreter."""

from __future__ import annotations

import os
import sys

import pytest

from zkcoord.migrate.spark_session import DAEMON_MODULE, _settings


@pytest.fixture(autouse=True)
def no_pyspark_python(monkeypatch):
    """No PYSPARK_PYTHON, and whatever a test sets undone after it."""
    monkeypatch.setenv("PYSPARK_PYTHON", "recorded")  # records the variable's state before the test
    monkeypatch.delenv("PYSPARK_PYTHON")


def test_a_standalone_master_on_this_machine_runs_this_interpreter_on_the_executors(monkeypatch):
    found = _settings("spark://127.0.0.1:7077", False, {}, None)
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert found.conf["spark.python.daemon.module"] == DAEMON_MODULE
    assert found.ship is False


def test_a_python_given_for_another_cluster_becomes_the_executors_python():
    found = _settings("spark://spark-1.example:7077", False, {"spark.pyspark.python": "./env/bin/python"}, None)
    assert os.environ["PYSPARK_PYTHON"] == "./env/bin/python"
    assert found.ship is True


def test_a_python_given_wins_over_an_earlier_one(monkeypatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/usr/bin/python3.11")
    _settings("yarn", False, {"spark.pyspark.python": "./env/bin/python"}, None)
    assert os.environ["PYSPARK_PYTHON"] == "./env/bin/python"


def test_another_cluster_without_one_is_left_to_pysparks_default():
    _settings("spark://spark-1.example:7077", False, {}, None)
    assert "PYSPARK_PYTHON" not in os.environ


def test_under_spark_submit_nothing_is_changed():
    _settings(None, True, {"spark.pyspark.python": "./env/bin/python"}, None)
    assert "PYSPARK_PYTHON" not in os.environ
